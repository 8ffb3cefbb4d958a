"""Names that docs/notation.md retired, kept working for notebooks of earlier cohorts.

Every old name here warns once (a ``FutureWarning``, which Jupyter shows) and points to
``docs/notation.md``; new code never uses them. This is the only module of course_lib
that may spell them (``tests/project/test_notation.py`` greps for the rest).
"""

from __future__ import annotations

import functools
import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings

_warned: set[str] = set()


def warn_once(old: str, new: str, *, stacklevel: int = 3, moved: bool = False) -> None:
    """One FutureWarning per retired name (or moved module) and process."""
    if old in _warned:
        return
    _warned.add(old)
    if moved:
        why = f"{old} moved: use {new} instead (docs/architecture.md, the library by chapter)"
    else:
        why = f"{old} is a retired name: use {new} instead (docs/notation.md, one name per concept)"
    warnings.warn(
        f"{why}; the old name will be removed in a later release.",
        FutureWarning,
        stacklevel=stacklevel,
    )


def renamed_kwargs(renames: dict[str, str]):
    """Decorator: keyword arguments under their old names still work (and warn once)."""

    def decorate(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            for old, new in renames.items():
                if old in kwargs:
                    warn_once(f"{fn.__name__}({old}=...)", f"{fn.__name__}({new}=...)")
                    if new in kwargs:
                        raise TypeError(f"{fn.__name__}() got both {old}= (retired) and {new}=")
                    kwargs[new] = kwargs.pop(old)
            return fn(*args, **kwargs)

        return wrapper

    return decorate


def renamed_attributes(renames: dict[str, str]):
    """Class decorator: attributes under their old names still read and write (and warn)."""

    def decorate(cls):
        for old, new in renames.items():

            def fget(self, old=old, new=new):
                warn_once(f"{type(self).__name__}.{old}", f".{new}")
                return getattr(self, new)

            def fset(self, value, old=old, new=new):
                warn_once(f"{type(self).__name__}.{old}", f".{new}")
                setattr(self, new, value)

            setattr(cls, old, property(fget, fset, doc=f"Retired name of ``{new}``."))
        return cls

    return decorate


# Modules that moved when course_lib was laid out by chapter (docs/architecture.md). The
# old dotted path still imports (the same module object, so ``isinstance`` and monkeypatches
# agree) and warns once; tests/project/test_notation.py keeps the old paths out of the tree.
MOVED_MODULES: dict[str, str] = {
    # chapter 08: the variants of attention that current models use
    "course_lib.flex": "course_lib.variants.flex",
    "course_lib.mask_mods": "course_lib.variants.mask_mods",
    "course_lib.score_mods": "course_lib.variants.score_mods",
    "course_lib.alibi": "course_lib.variants.alibi",
    "course_lib.sliding_window": "course_lib.variants.sliding_window",
    "course_lib.mla": "course_lib.variants.mla",
    "course_lib.linear_attention": "course_lib.variants.linear_attention",
    # experiments the lectures train and measure (not the library proper)
    "course_lib.recall": "course_lib.experiments.recall",
    "course_lib.coref": "course_lib.experiments.coref",
    "course_lib.extrapolation": "course_lib.experiments.extrapolation",
}


class _AliasLoader(importlib.abc.Loader):
    """Hands out the module at its new path under the old name."""

    def __init__(self, new: str):
        self.new = new

    def create_module(self, spec):
        module = importlib.import_module(self.new)
        self.own_spec = module.__spec__
        return module

    def exec_module(self, module):
        # Already executed under its new name; importlib set __spec__ to the old name's
        # spec on the way in: give the module its own back (reload, pickling, pdb).
        module.__spec__ = self.own_spec


class MovedModuleFinder(importlib.abc.MetaPathFinder):
    """``import course_lib.variants.flex`` (an old path) imports ``course_lib.variants.flex``."""

    def find_spec(self, fullname, path=None, target=None):
        new = MOVED_MODULES.get(fullname)
        if new is None:
            return None
        # warn_once, find_spec, then (importlib's own frames are not counted) the import line
        warn_once(fullname, new, stacklevel=3, moved=True)
        return importlib.machinery.ModuleSpec(fullname, _AliasLoader(new), origin=new)


def moved_attribute(name: str):
    """``course_lib.<old name>`` as an attribute (``from course_lib import flex``)."""
    new = MOVED_MODULES.get(f"course_lib.{name}")
    if new is None:
        raise AttributeError(f"module 'course_lib' has no attribute {name!r}")
    # warn_once, this function, course_lib.__getattr__, then the line that asked
    warn_once(f"course_lib.{name}", new, stacklevel=4, moved=True)
    return importlib.import_module(f"course_lib.{name}")


def install_moved_module_finder() -> None:
    if not any(isinstance(f, MovedModuleFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, MovedModuleFinder())
