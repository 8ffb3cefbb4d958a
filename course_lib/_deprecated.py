"""Names that docs/notation.md retired, kept working for notebooks of earlier cohorts.

Every old name here warns once (a ``FutureWarning``, which Jupyter shows) and points to
``docs/notation.md``; new code never uses them. This is the only module of course_lib
that may spell them (``tests/test_notation.py`` greps for the rest).
"""

from __future__ import annotations

import functools
import warnings

_warned: set[str] = set()


def warn_once(old: str, new: str, *, stacklevel: int = 3) -> None:
    """One FutureWarning per retired name and process."""
    if old in _warned:
        return
    _warned.add(old)
    warnings.warn(
        f"{old} is a retired name: use {new} instead (docs/notation.md, one name "
        "per concept); the old name will be removed in a later release.",
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
