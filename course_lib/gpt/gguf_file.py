r"""Reading a GGUF file (llama.cpp's format, versions 2 and 3): its metadata and its tensors.

The layout (little-endian; a *string* is a ``uint64`` length and that many UTF-8 bytes):

* ``b"GGUF"``, ``uint32`` version, ``uint64`` tensor count, ``uint64`` metadata count;
* the metadata: per entry a string key, a ``uint32`` value type and the value; an array is a
  ``uint32`` element type, a ``uint64`` count and the elements;
* the tensor infos: per tensor a string name, a ``uint32`` number of axes, that many ``uint64``
  sizes (innermost first), a ``uint32`` type (``F32``, ``Q8_0``, ``Q4_1``...) and a ``uint64``
  offset into the data;
* the data, starting at the next multiple of ``general.alignment`` (32 unless the metadata
  says otherwise).

The file is mapped into memory, never read whole: a tensor's ``data`` is a view of its bytes.
The sizes of the quantized blocks (bytes per block of weights) and the dequantization come from
llama.cpp's own ``gguf`` package through its public names (``GGML_QUANT_SIZES``,
``GGMLQuantizationType``, ``gguf.quants.dequantize``).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

__all__ = ["GGUFFile", "GGUFTensor", "TruncatedGGUF", "map_gguf", "parse_gguf"]

# value type -> (struct format, numpy dtype) of the fixed-size scalars
_SCALARS = {
    0: ("<B", np.uint8),
    1: ("<b", np.int8),
    2: ("<H", np.uint16),
    3: ("<h", np.int16),
    4: ("<I", np.uint32),
    5: ("<i", np.int32),
    6: ("<f", np.float32),
    7: ("<?", np.bool_),
    10: ("<Q", np.uint64),
    11: ("<q", np.int64),
    12: ("<d", np.float64),
}
_STRING, _ARRAY = 8, 9


class TruncatedGGUF(ValueError):
    """A GGUF file whose header or tensors run past its end (cut short, or damaged)."""


@dataclass
class GGUFTensor:
    """One tensor of the file: ``shape`` as stored (innermost axis first), ``data`` its bytes
    viewed as ``(rows..., bytes per row)`` ``uint8`` for a quantized type, or as the values
    (``(*reversed(shape))``) for ``F32``/``F16``."""

    name: str
    shape: tuple[int, ...]
    tensor_type: object  # gguf.GGMLQuantizationType
    data: np.ndarray
    n_elements: int
    n_bytes: int


@dataclass
class GGUFFile:
    """A parsed file: its version, metadata (``key -> value``; arrays as lists) and tensors."""

    version: int
    metadata: dict = field(default_factory=dict)
    tensors: list[GGUFTensor] = field(default_factory=list)


class _Cursor:
    """Reads little-endian values from a buffer, failing clearly past its end."""

    def __init__(self, buf: memoryview, name: str):
        self.buf, self.at, self.name = buf, 0, name

    def take(self, fmt: str):
        size = struct.calcsize(fmt)
        if self.at + size > len(self.buf):
            raise TruncatedGGUF(f"the header ends early (at byte {self.at:,})")
        (value,) = struct.unpack_from(fmt, self.buf, self.at)
        self.at += size
        return value

    def string(self) -> str:
        n = self.take("<Q")
        if self.at + n > len(self.buf):
            raise TruncatedGGUF(f"a string of {n:,} bytes runs past the end")
        text = bytes(self.buf[self.at : self.at + n]).decode("utf-8", errors="replace")
        self.at += n
        return text

    def value(self, kind: int):
        if kind in _SCALARS:
            return self.take(_SCALARS[kind][0])
        if kind == _STRING:
            return self.string()
        if kind != _ARRAY:
            raise ValueError(f"{self.name}: unknown metadata value type {kind}")
        inner, count = self.take("<I"), self.take("<Q")
        if inner in _SCALARS:  # numbers: one view of the bytes, not a loop
            dtype = np.dtype(_SCALARS[inner][1]).newbyteorder("<")
            end = self.at + count * dtype.itemsize
            if end > len(self.buf):
                raise TruncatedGGUF(f"an array of {count:,} runs past the end")
            values = np.frombuffer(self.buf[self.at : end], dtype=dtype).tolist()
            self.at = end
            return values
        return [self.value(inner) for _ in range(count)]


def parse_gguf(data: np.ndarray | bytes, name: str = "file.gguf") -> GGUFFile:
    """Parse the bytes of a GGUF file (a ``np.memmap`` of it, or ``bytes``).

    Raises ``ValueError`` for a file that is not GGUF, of an unknown version, or cut short
    (a header or a tensor that runs past the end)."""
    import gguf

    raw = np.frombuffer(data, dtype=np.uint8) if isinstance(data, bytes) else data
    cur = _Cursor(raw.data, name)
    if bytes(raw[:4]) != b"GGUF":
        raise ValueError(f"{name} is not a GGUF file (it starts with {bytes(raw[:4])!r})")
    cur.at = 4
    version = cur.take("<I")
    if version not in (2, 3):
        raise ValueError(f"{name} is GGUF version {version}; versions 2 and 3 are read")
    n_tensors, n_meta = cur.take("<Q"), cur.take("<Q")
    out = GGUFFile(version)
    for _ in range(n_meta):
        key = cur.string()
        out.metadata[key] = cur.value(cur.take("<I"))
    infos = []
    for _ in range(n_tensors):
        tname = cur.string()
        dims = tuple(cur.take("<Q") for _ in range(cur.take("<I")))
        infos.append((tname, dims, cur.take("<I"), cur.take("<Q")))
    align = int(out.metadata.get("general.alignment", 32))
    start = -(-cur.at // align) * align
    for tname, dims, kind, offset in infos:
        qtype = gguf.GGMLQuantizationType(kind)
        block, block_bytes = gguf.GGML_QUANT_SIZES[qtype]
        count = int(np.prod(dims)) if dims else 1
        n_bytes = count // block * block_bytes
        begin = start + offset
        if begin + n_bytes > len(raw):
            raise TruncatedGGUF(
                f"tensor {tname!r} needs bytes {begin:,}..{begin + n_bytes:,} of {len(raw):,}"
            )
        blob = raw[begin : begin + n_bytes]
        rows = tuple(int(d) for d in reversed(dims[1:]))  # the outer axes
        view: np.ndarray
        if qtype in (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16):
            dtype = np.float32 if qtype == gguf.GGMLQuantizationType.F32 else np.float16
            view = blob.view(dtype).reshape(*rows, int(dims[0]))
        else:
            view = blob.reshape(*rows, int(dims[0]) // block * block_bytes)
        out.tensors.append(GGUFTensor(tname, dims, qtype, view, count, n_bytes))
    return out


def map_gguf(path: str | Path) -> GGUFFile:
    """Map the file at ``path`` into memory (read-only) and parse it."""
    path = Path(path)
    return parse_gguf(np.memmap(path, dtype=np.uint8, mode="r"), path.name)
