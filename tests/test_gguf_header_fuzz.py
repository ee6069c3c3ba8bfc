"""gguf_header under hypothesis: random and mutated headers parse or raise GGUFHeaderError, fast and small."""

from __future__ import annotations

import struct
import tracemalloc
from collections.abc import Callable
from functools import cache
from pathlib import Path
from tempfile import TemporaryDirectory

import numpy as np
from gguf import GGUFWriter
from gguf.constants import GGMLQuantizationType, GGUFValueType
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from packages_app.gguf_errors import GGUFHeaderError, MalformedHeader
from packages_app.gguf_header import parse_header
from packages_app.gguf_parser import HeaderParser
from packages_app.gguf_results import GGUFHeader, HeaderLimits

# Small limits keep a mutated count or length from asking for megabytes, so every example stays quick.
# No per-example deadline: on a shared machine wall-clock time measures the neighbours; the limits bound the
# work, and PEAK_BYTES bounds the memory.
LIMITS = HeaderLimits(
    max_header_bytes=1 << 20, max_string_bytes=1 << 16, max_kv_count=512, max_tensor_count=512
)
FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
PEAK_BYTES = 8 * 2**20


@cache
def seed_header() -> bytes:
    """A small valid header touching every path: scalars, a kept and a skipped string array, a skipped
    fixed array, custom alignment and tensors of several types."""
    with TemporaryDirectory() as folder:
        path = Path(folder) / "seed.gguf"
        writer = GGUFWriter(path, "qwen35moe")
        writer.add_custom_alignment(64)
        writer.add_block_count(41)
        writer.add_nextn_predict_layers(1)
        writer.add_float32("qwen35moe.rope.freq_base", 1e7)
        writer.add_bool("tokenizer.ggml.add_bos_token", False)
        writer.add_tokenizer_model("gpt2")
        writer.add_token_list([f"t{i}" for i in range(80)])
        writer.add_token_types([1] * 80)
        writer.add_key_value("small", ["a", "b"], GGUFValueType.ARRAY, sub_type=GGUFValueType.STRING)
        writer.add_chat_template("{{ messages }}")
        shapes = [((2, 256), GGMLQuantizationType.Q4_K), ((8,), GGMLQuantizationType.F32)]
        for index, (shape, qtype) in enumerate(shapes):
            nbytes = 144 * 2 if qtype is GGMLQuantizationType.Q4_K else 32
            writer.add_tensor_info(f"blk.{index}.w", shape, np.dtype(np.float32), nbytes, raw_dtype=qtype)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        writer.close()
        return path.read_bytes()


def outcome(parse: Callable[[], GGUFHeader]) -> dict[str, object] | type[GGUFHeaderError]:
    """The header's JSON (NaN-safe to compare), or the error type; any other exception fails the test."""
    try:
        return parse().to_json()
    except GGUFHeaderError as error:
        assert not isinstance(error, MalformedHeader), f"a check is missing: {error}"
        assert "\n" not in str(error)
        return type(error)


def fed(data: bytes, chunk: int) -> GGUFHeader:
    parser = HeaderParser(LIMITS)
    for start in range(0, len(data), chunk):
        parser.feed(data[start : start + chunk])
        if parser.done:
            break
    return parser.finish()


def check(data: bytes, chunk: int = 7) -> None:
    """Parsing whole and fed in chunks agree, raise only typed errors, and stay small in memory."""
    tracemalloc.start()
    try:
        whole = outcome(lambda: parse_header(data, LIMITS))
        pieces = outcome(lambda: fed(data, chunk))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert whole == pieces
    assert peak < PEAK_BYTES


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    data = bytearray(seed_header())
    for _ in range(draw(st.integers(1, 3))):
        index = draw(st.integers(0, len(data)))
        kind = draw(st.sampled_from(["flip", "u64", "u32", "insert", "delete", "truncate"]))
        if kind == "flip" and index < len(data):
            data[index] ^= 1 << draw(st.integers(0, 7))
        elif kind in ("u64", "u32"):
            # Counts, lengths, types and offsets are where parsers break: overwrite one with an extreme value.
            size = 8 if kind == "u64" else 4
            value = draw(
                st.sampled_from([0, 1, 2 ** (size * 8) - 1, 2**31, 2**63, 255, 65536]) | st.integers(0, 2**32)
            )
            data[index : index + size] = struct.pack("<Q", value % 2**64)[:size]
        elif kind == "insert":
            data[index:index] = draw(st.binary(min_size=1, max_size=16))
        elif kind == "delete":
            del data[index : index + draw(st.integers(1, 16))]
        elif kind == "truncate":
            del data[index:]
    return bytes(data)


def test_the_seed_header_parses() -> None:
    header = parse_header(seed_header(), LIMITS)

    assert (header.architecture, header.block_count, len(header.tensors)) == ("qwen35moe", 41, 2)


@FUZZ
@given(st.binary(max_size=600))
def test_random_bytes_parse_or_raise_a_typed_error(data: bytes) -> None:
    check(data)


@FUZZ
@given(st.binary(max_size=600), st.sampled_from([2, 3]), st.booleans())
def test_random_bytes_after_a_valid_preamble_parse_or_raise_a_typed_error(
    body: bytes, version: int, big: bool
) -> None:
    order = ">" if big else "<"
    check(b"GGUF" + struct.pack(f"{order}I", version) + body)


@FUZZ
@given(mutated(), st.integers(1, 300))
def test_mutated_headers_parse_or_raise_a_typed_error(data: bytes, chunk: int) -> None:
    check(data, chunk)
