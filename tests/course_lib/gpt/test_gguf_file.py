"""The GGUF reader: the same metadata, shapes, types and bytes as llama.cpp's own reader, on
files written by llama.cpp's writer (float and quantized), and clear errors for bad files."""

from __future__ import annotations

import struct

import gguf
import numpy as np
import pytest
import torch
from tiny_gguf import TINY, tiny_tokenizer_fields, write_gguf

from course_lib.gpt import GPT
from course_lib.gpt.gguf_file import TruncatedGGUF, map_gguf, parse_gguf


@pytest.fixture(scope="module", params=[None, gguf.GGMLQuantizationType.Q8_0])
def written(tmp_path_factory, request):
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("gguf") / "tiny.gguf"
    write_gguf(path, GPT(TINY), qtype=request.param)
    return path


def test_it_reads_what_llama_cpps_reader_reads(written):
    ours, theirs = map_gguf(written), gguf.GGUFReader(written)
    expected = {k: f.contents() for k, f in theirs.fields.items() if not k.startswith("GGUF.")}
    assert ours.metadata == expected
    assert ours.metadata["tokenizer.ggml.tokens"][:3] == tiny_tokenizer_fields()["tokens"][:3]
    assert [t.name for t in ours.tensors] == [t.name for t in theirs.tensors]
    for a, b in zip(ours.tensors, theirs.tensors):
        assert a.shape == tuple(int(n) for n in b.shape) and a.tensor_type == b.tensor_type
        assert a.n_bytes == b.n_bytes and a.n_elements == b.n_elements
        assert a.data.shape == b.data.shape and np.array_equal(a.data, np.asarray(b.data))


def test_a_file_that_is_not_gguf_or_of_another_version_is_named():
    with pytest.raises(ValueError, match="x.bin is not a GGUF file"):
        parse_gguf(b"PK\x03\x04" + bytes(60), "x.bin")
    with pytest.raises(ValueError, match="version 7"):
        parse_gguf(b"GGUF" + struct.pack("<IQQ", 7, 0, 0), "v.gguf")


@pytest.mark.parametrize("keep", [10, 40, -5])
def test_a_cut_file_says_where_it_ends(written, keep):
    data = written.read_bytes()
    with pytest.raises(TruncatedGGUF):
        parse_gguf(data[:keep], "cut.gguf")


def test_an_empty_file_of_the_right_header_has_nothing():
    empty = parse_gguf(b"GGUF" + struct.pack("<IQQ", 3, 0, 0))
    assert empty.version == 3 and empty.metadata == {} and empty.tensors == []
