"""gguf_header: agreement with gguf.GGUFReader, incremental feeding, estimates, hostile input, the CLI."""

from __future__ import annotations

import json
import math
import random
import struct
import subprocess
import sys
import tracemalloc
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest
from gguf import GGUFEndian, GGUFReader, GGUFWriter
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFValueType, Keys

from packages_app import gguf_header
from packages_app.gguf_errors import (
    BadAlignment,
    BadMagic,
    BadString,
    BadTensorOffset,
    BadTensorShape,
    DimOverflow,
    DuplicateKey,
    DuplicateTensor,
    GGUFHeaderError,
    LimitExceeded,
    NestedArray,
    TooManyDims,
    TruncatedHeader,
    UnknownTensorType,
    UnknownValueType,
    UnsupportedVersion,
)
from packages_app.gguf_header import parse_file, parse_header
from packages_app.gguf_parser import HeaderParser
from packages_app.gguf_results import ArraySummary, GGUFHeader, HeaderLimits

ROOT = Path(__file__).resolve().parent.parent
Q = GGMLQuantizationType
V = GGUFValueType
Tensor = tuple[str, tuple[int, ...], GGMLQuantizationType]  # name, numpy-order shape (ne0 last), type

SCALARS: list[tuple[str, GGUFValueType, object]] = [
    ("test.u8", V.UINT8, 200),
    ("test.i8", V.INT8, -100),
    ("test.u16", V.UINT16, 65000),
    ("test.i16", V.INT16, -32000),
    ("test.u32", V.UINT32, 4_000_000_000),
    ("test.i32", V.INT32, -2_000_000_000),
    ("test.f32", V.FLOAT32, 0.1),
    ("test.u64", V.UINT64, 2**64 - 1),
    ("test.i64", V.INT64, -(2**63)),
    ("test.f64", V.FLOAT64, 1e300),
    ("test.bool", V.BOOL, True),
    ("test.str", V.STRING, "Grüße, 世界 {{ bos_token }}"),
]
ELEMENTS: dict[GGUFValueType, Callable[[int], object]] = {
    V.UINT8: lambda i: i % 256,
    V.INT8: lambda i: i % 128 - 64,
    V.UINT16: lambda i: i * 7 % 65536,
    V.INT16: lambda i: -i,
    V.UINT32: lambda i: i * 1000,
    V.INT32: lambda i: -i * 1000,
    V.FLOAT32: lambda i: i / 4,
    V.UINT64: lambda i: 2**40 + i,
    V.INT64: lambda i: -(2**40) - i,
    V.FLOAT64: lambda i: i / 3,
    V.BOOL: lambda i: i % 3 == 0,
    V.STRING: lambda i: f"Ġtok{i}",
}
TENSORS: list[Tensor] = [
    ("token_embd.weight", (32, 512), Q.Q4_K),
    ("blk.0.attn_norm.weight", (512,), Q.F32),
    ("blk.0.ffn_down.weight", (512, 256), Q.Q6_K),
    ("blk.0.attn_q.weight", (64, 512), Q.F16),
    ("blk.0.attn_k.weight", (64, 512), Q.BF16),
    ("blk.0.ffn_gate_exps.weight", (4, 32, 256), Q.Q4_K),
    ("blk.0.ssm_conv1d.weight", (2, 2, 3, 32), Q.Q8_0),
    ("output.weight", (32, 512), Q.Q6_K),
]


# --------------------------------------------------------------------------------------------------- builders


def tensor_nbytes(shape: tuple[int, ...], qtype: GGMLQuantizationType) -> int:
    block, size = GGML_QUANT_SIZES[qtype]
    return int(np.prod(shape)) // block * size


def write_gguf(
    path: Path,
    arch: str,
    fill: Callable[[GGUFWriter], None],
    tensors: list[Tensor] = TENSORS,
    alignment: int | None = None,
    endianess: GGUFEndian = GGUFEndian.LITTLE,
) -> Path:
    """Header, KVs and tensor infos via GGUFWriter, then a sparse data section so GGUFReader can map it."""
    writer = GGUFWriter(path, arch, endianess=endianess)
    if alignment is not None:
        writer.add_custom_alignment(alignment)
    fill(writer)
    for name, shape, qtype in tensors:
        writer.add_tensor_info(
            name, shape, np.dtype(np.float32), tensor_nbytes(shape, qtype), raw_dtype=qtype
        )
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    writer.close()
    align = alignment or 32
    padded = sum(-(-tensor_nbytes(shape, qtype) // align) * align for _, shape, qtype in tensors)
    with open(path, "r+b") as handle:
        end = handle.seek(0, 2)
        handle.truncate(-(-end // align) * align + padded)
    return path


def add_every_type(writer: GGUFWriter) -> None:
    """One scalar of every value type, and of every element type a kept (3) and a summarised (100) array."""
    for key, vtype, value in SCALARS:
        writer.add_key_value(key, value, vtype)
    for vtype, element in ELEMENTS.items():
        for count in (3, 100):
            key = f"test.array.{vtype.name.lower()}.{count}"
            writer.add_key_value(key, [element(i) for i in range(count)], V.ARRAY, sub_type=vtype)


def add_arch_keys(blocks: int, nextn: int) -> Callable[[GGUFWriter], None]:
    def fill(writer: GGUFWriter) -> None:
        writer.add_block_count(blocks)
        writer.add_nextn_predict_layers(nextn)
        writer.add_context_length(4096)
        writer.add_tokenizer_model("gpt2")
        writer.add_token_list([ELEMENTS[V.STRING](i) for i in range(300)])
        add_every_type(writer)

    return fill


def bpe_fill(vocab: int) -> Callable[[GGUFWriter], None]:
    """A BPE tokenizer the size of a modern vocabulary: tokens, token types and merges, as converters emit."""

    def fill(writer: GGUFWriter) -> None:
        rng = random.Random(vocab)
        words = [
            "Ġ" * (i % 2) + "".join(rng.choices("abcdefghijklmnop", k=rng.randint(2, 8)))
            for i in range(vocab)
        ]
        writer.add_tokenizer_model("gpt2")
        writer.add_tokenizer_pre("qwen2")
        writer.add_token_list(words)
        writer.add_token_types([1] * vocab)
        writer.add_token_merges([f"{word[:1]} {word[1:]}" for word in words])
        writer.add_eos_token_id(vocab - 1)
        writer.add_chat_template("{% for m in messages %}{{ m.content }}{% endfor %}" * 50)

    return fill


def gstr(text: str | bytes) -> bytes:
    raw = text.encode() if isinstance(text, str) else text
    return struct.pack("<Q", len(raw)) + raw


def kv(key: str | bytes, vtype: int, payload: bytes) -> bytes:
    return gstr(key) + struct.pack("<I", vtype) + payload


def ti(name: str, dims: list[int], ggml_type: int = Q.F32, offset: int = 0) -> bytes:
    return gstr(name) + struct.pack(f"<I{len(dims)}QIQ", len(dims), *dims, ggml_type, offset)


def raw_gguf(
    kvs: Sequence[bytes], tensors: Sequence[bytes] = (), counts: tuple[int, int] | None = None
) -> bytes:
    tensor_count, kv_count = counts or (len(tensors), len(kvs))
    return b"GGUF" + struct.pack("<IQQ", 3, tensor_count, kv_count) + b"".join(kvs) + b"".join(tensors)


def align_kv(value: int, vtype: int = V.UINT32) -> bytes:
    return kv(Keys.General.ALIGNMENT, vtype, struct.pack("<Q" if vtype == V.UINT64 else "<I", value))


def feed_in_chunks(data: bytes, sizes: Iterator[int]) -> GGUFHeader:
    parser = HeaderParser()
    position = 0
    while not parser.done and position < len(data):
        size = next(sizes)
        parser.feed(data[position : position + size])
        position += size
    return parser.finish()


def random_sizes(seed: int, largest: int) -> Iterator[int]:
    rng = random.Random(seed)
    while True:
        yield rng.randint(1, largest)


def ones() -> Iterator[int]:
    while True:
        yield 1


# -------------------------------------------------------------------------------------------------- reference


def assert_agrees_with_reader(header: GGUFHeader, path: Path) -> None:
    reader = GGUFReader(path)
    fields = {name: field for name, field in reader.fields.items() if not name.startswith("GGUF.")}
    assert list(header.kv) == list(fields)
    for key, field in fields.items():
        assert header.kv_types[key] == field.types[0].name, key
        value = header.kv[key]
        if isinstance(value, ArraySummary):
            assert value.element_type == field.types[-1].name, key
            assert value.count == len(field.data), key
            if value.values is not None:
                assert value.values == field.contents(), key
        else:
            assert value == field.contents(), key
    assert header.header_bytes == reader.data_offset
    assert header.alignment == reader.alignment
    ours = [(t.name, t.shape, t.ggml_type, t.offset, t.nbytes) for t in header.tensors]
    theirs = [
        (t.name, tuple(t.shape.tolist()), t.tensor_type.name, t.data_offset - reader.data_offset, t.n_bytes)
        for t in reader.tensors
    ]
    assert ours == theirs


@pytest.fixture(scope="module")
def big_vocab_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """~2.7 MB header: a 160k-token BPE tokenizer, like the layer headers of v1 packages."""
    path = tmp_path_factory.mktemp("big") / "bpe.gguf"
    return write_gguf(path, "qwen3", bpe_fill(160_000), tensors=TENSORS[:3])


@pytest.fixture(scope="module")
def rich_bytes(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    path = tmp_path_factory.mktemp("rich") / "rich.gguf"
    write_gguf(path, "llama", add_every_type, alignment=64)
    return path.read_bytes()


# -------------------------------------------------------------------------------------------------- agreement


@pytest.mark.parametrize(
    ("arch", "alignment", "endianess"),
    [
        ("llama", None, GGUFEndian.LITTLE),
        ("qwen35moe", 64, GGUFEndian.LITTLE),
        ("glm4moe", 256, GGUFEndian.LITTLE),
        ("deepseek2", None, GGUFEndian.BIG),
        ("nemotron_h_moe", 128, GGUFEndian.BIG),
    ],
)
def test_it_agrees_with_gguf_reader_on_every_value_type_tensor_type_and_alignment(
    tmp_path: Path, arch: str, alignment: int | None, endianess: GGUFEndian
) -> None:
    path = write_gguf(
        tmp_path / "m.gguf", arch, add_arch_keys(41, 1), alignment=alignment, endianess=endianess
    )

    header = parse_file(path)

    assert_agrees_with_reader(header, path)
    assert header.version == 3
    assert header.byte_order == ("big" if endianess is GGUFEndian.BIG else "little")
    assert header.alignment == (alignment or 32)


def test_it_agrees_with_gguf_reader_on_a_150k_string_array(tmp_path: Path) -> None:
    def fill(writer: GGUFWriter) -> None:
        writer.add_token_list([f"Ġ{i:x}" for i in range(150_001)])

    path = write_gguf(tmp_path / "vocab.gguf", "qwen3", fill, tensors=TENSORS[:2])

    header = parse_file(path)

    assert_agrees_with_reader(header, path)
    assert header.kv[Keys.Tokenizer.LIST] == ArraySummary("STRING", 150_001, None)


def test_it_reads_version_2_files(rich_bytes: bytes) -> None:
    v2 = rich_bytes[:4] + struct.pack("<I", 2) + rich_bytes[8:]

    header = parse_header(v2)

    assert header.version == 2
    assert header.kv == parse_header(rich_bytes).kv


def test_it_exposes_architecture_block_count_and_nextn_layers(tmp_path: Path) -> None:
    path = write_gguf(tmp_path / "m.gguf", "qwen35moe", add_arch_keys(41, 1))

    header = parse_file(path)

    assert (header.architecture, header.block_count, header.nextn_predict_layers) == ("qwen35moe", 41, 1)
    assert header.tensor_bytes == sum(tensor_nbytes(shape, qtype) for _, shape, qtype in TENSORS)


def test_it_reports_no_nextn_layers_when_the_key_is_absent(rich_bytes: bytes) -> None:
    header = parse_header(rich_bytes)

    assert (header.architecture, header.block_count, header.nextn_predict_layers) == ("llama", None, None)


def test_its_json_has_exactly_the_documented_shape(rich_bytes: bytes) -> None:
    document = parse_header(rich_bytes).to_json()

    assert list(document) == ["version", "header_bytes", "alignment", "kv", "tensors"]
    assert document["kv"]["test.array.string.100"] == {"array": "STRING", "count": 100}
    assert document["kv"]["test.array.int16.3"] == {"array": "INT16", "count": 3, "values": [0, -1, -2]}
    assert document["tensors"][0] == {
        "name": "token_embd.weight",
        "type": "Q4_K",
        "shape": [512, 32],
        "offset": 0,
        "bytes": 32 * 512 // 256 * 144,
    }
    json.dumps(document, allow_nan=False)


def test_its_json_turns_non_finite_floats_into_strings() -> None:
    data = raw_gguf(
        [kv("a", V.FLOAT32, struct.pack("<f", math.nan)), kv("b", V.FLOAT64, struct.pack("<d", -math.inf))]
    )

    document = parse_header(data).to_json()

    assert document["kv"] == {"a": "NaN", "b": "-Infinity"}


def test_it_parses_in_place_from_a_memoryview_with_tensor_data_after_the_header(rich_bytes: bytes) -> None:
    with_data = rich_bytes + bytes(4096)

    assert parse_header(memoryview(with_data)) == parse_header(rich_bytes)


def test_it_reads_only_the_header_of_a_huge_file(tmp_path: Path) -> None:
    path = write_gguf(tmp_path / "m.gguf", "llama", add_every_type)
    with open(path, "r+b") as handle:
        handle.truncate(8 * 2**30)  # sparse 8 GiB

    tracemalloc.start()
    parse_file(path)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()

    assert peak < 8 * 2**20


# ------------------------------------------------------------------------------------------------ incremental


def test_feeding_one_byte_at_a_time_gives_the_same_header(rich_bytes: bytes) -> None:
    assert feed_in_chunks(rich_bytes, ones()) == parse_header(rich_bytes)


@pytest.mark.parametrize("seed", range(4))
def test_feeding_random_chunk_sizes_gives_the_same_header(big_vocab_path: Path, seed: int) -> None:
    data = big_vocab_path.read_bytes()
    largest = [64, 300, 9000, 200_000][seed]

    assert feed_in_chunks(data, random_sizes(seed, largest)) == parse_header(data)


def test_bytes_wanted_is_a_lower_bound_and_enough_to_progress(rich_bytes: bytes) -> None:
    parser = HeaderParser()
    position = 0
    while not parser.done:
        wanted = parser.bytes_wanted()
        assert wanted >= 1
        before = (parser.consumed, position + wanted)
        if wanted > 1:
            parser.feed(rich_bytes[position : position + wanted - 1])
            position += wanted - 1
            assert (parser.consumed, parser.received + parser.bytes_wanted()) == before
        parser.feed(rich_bytes[position : position + 1])
        position += 1
        # Progress: more parsed, or at least a later offset needed (a length read, its bytes still due).
        assert (
            parser.done or parser.consumed > before[0] or parser.received + parser.bytes_wanted() > before[1]
        )
    assert parser.bytes_wanted() == 0
    assert parser.received == position


def test_bytes_wanted_asks_for_a_whole_long_string_at_once() -> None:
    template = "x" * 50_000
    data = raw_gguf([kv(Keys.Tokenizer.CHAT_TEMPLATE, V.STRING, gstr(template))])
    parser = HeaderParser()

    parser.feed(data[:70])  # past the key, the value type and the string's length

    assert parser.bytes_wanted() == len(data) - 70


def test_it_keeps_only_unconsumed_bytes_while_fed(big_vocab_path: Path) -> None:
    data = big_vocab_path.read_bytes()
    parser = HeaderParser()
    for start in range(0, len(data), 65536):
        parser.feed(data[start : start + 65536])
        # Consumed bytes are dropped: what stays is one unfinished item (here at most the chat template).
        assert len(parser._buf) < 4096

    assert parser.done


def test_estimate_total_after_256_kib_of_a_big_vocabulary_is_within_a_quarter(big_vocab_path: Path) -> None:
    data = big_vocab_path.read_bytes()
    parser = HeaderParser()

    parser.feed(data[: 256 * 1024])

    truth = parse_header(data).tensor_info_end
    assert 0.75 * truth <= parser.estimate_total() <= 1.25 * truth


def test_estimate_total_is_exact_once_done(rich_bytes: bytes) -> None:
    parser = HeaderParser()
    parser.feed(rich_bytes)

    assert parser.estimate_total() == parser.result().tensor_info_end


def test_it_ignores_bytes_fed_after_the_header_ends(rich_bytes: bytes) -> None:
    parser = HeaderParser()
    parser.feed(rich_bytes)
    parser.feed(b"tensor data")

    assert parser.result() == parse_header(rich_bytes)


def test_a_failed_parser_raises_the_same_error_again() -> None:
    parser = HeaderParser()
    with pytest.raises(BadMagic) as first:
        parser.feed(b"GGML" + bytes(20))

    with pytest.raises(BadMagic) as again:
        parser.feed(b"more")
    assert again.value is first.value


def test_result_before_the_end_is_a_programming_error() -> None:
    parser = HeaderParser()
    parser.feed(b"GGUF")

    with pytest.raises(RuntimeError):
        parser.result()


def test_every_proper_prefix_is_a_truncated_header(rich_bytes: bytes) -> None:
    end = parse_header(rich_bytes).tensor_info_end
    for size in [*range(0, 200), *range(200, end, 97), end - 1]:
        with pytest.raises(TruncatedHeader) as caught:
            parse_header(rich_bytes[:size])
        assert caught.value.code == "truncated_header"
        assert f"offset {size}" in str(caught.value)


def test_a_file_that_ends_inside_the_header_is_a_truncated_header(tmp_path: Path, rich_bytes: bytes) -> None:
    path = tmp_path / "cut.gguf"
    path.write_bytes(rich_bytes[:1000])

    with pytest.raises(TruncatedHeader, match="input ends at offset 1000"):
        parse_file(path)


# ---------------------------------------------------------------------------------------------------- hostile

U32 = V.UINT32
HOSTILE: list[tuple[str, bytes, type[GGUFHeaderError], str]] = [
    ("bad magic", b"GGML" + bytes(20), BadMagic, "not a GGUF file"),
    ("version 1", b"GGUF" + struct.pack("<IQQ", 1, 0, 0), UnsupportedVersion, "version 1"),
    ("version 4", b"GGUF" + struct.pack("<IQQ", 4, 0, 0), UnsupportedVersion, "version 4"),
    ("huge kv count", raw_gguf([], counts=(0, 2**40)), LimitExceeded, "kv_count"),
    ("huge tensor count", raw_gguf([], counts=(2**40, 0)), LimitExceeded, "tensor_count"),
    ("huge key length", b"GGUF" + struct.pack("<IQQQ", 3, 0, 1, 2**62), LimitExceeded, "key of KV #0"),
    ("huge string value", raw_gguf([kv("k", V.STRING, struct.pack("<Q", 2**40))]), LimitExceeded, '"k"'),
    (
        "huge array count",
        raw_gguf([kv("tokenizer.ggml.tokens", V.ARRAY, struct.pack("<IQ", V.STRING, 2**60))]),
        LimitExceeded,
        "tokenizer.ggml.tokens",
    ),
    (
        "array elements beyond the header",
        raw_gguf([kv("big", V.ARRAY, struct.pack("<IQ", V.UINT64, 2**24 - 1))]),
        LimitExceeded,
        '"big"',
    ),
    ("unknown value type", raw_gguf([kv("weird", 13, b"")]), UnknownValueType, '"weird"'),
    (
        "unknown element type",
        raw_gguf([kv("weird", V.ARRAY, struct.pack("<IQ", 99, 1))]),
        UnknownValueType,
        '"weird"',
    ),
    (
        "nested array",
        raw_gguf([kv("nest", V.ARRAY, struct.pack("<IQ", V.ARRAY, 1) + struct.pack("<IQ", U32, 0))]),
        NestedArray,
        '"nest"',
    ),
    (
        "duplicate key",
        raw_gguf([kv("dup", U32, struct.pack("<I", 1)), kv("dup", U32, struct.pack("<I", 2))]),
        DuplicateKey,
        '"dup"',
    ),
    ("key not UTF-8", raw_gguf([kv(b"bad\xff", U32, struct.pack("<I", 1))]), BadString, "key of KV #0"),
    ("value not UTF-8", raw_gguf([kv("name", V.STRING, gstr(b"\xc3("))]), BadString, '"name"'),
    (
        "kept array element not UTF-8",
        raw_gguf([kv("list", V.ARRAY, struct.pack("<IQ", V.STRING, 2) + gstr("ok") + gstr(b"\xe2\x82"))]),
        BadString,
        'element 1 of "list"',
    ),
    ("alignment not a power of two", raw_gguf([align_kv(48)]), BadAlignment, "48"),
    ("alignment zero", raw_gguf([align_kv(0)]), BadAlignment, "power of two"),
    ("alignment not u32", raw_gguf([align_kv(64, V.UINT64)]), BadAlignment, "UINT32"),
    ("five dims", raw_gguf([], [ti("t", [1, 1, 1, 1, 1])]), TooManyDims, '"t"'),
    ("dims overflow", raw_gguf([], [ti("t", [2**32, 2**32])]), DimOverflow, '"t"'),
    ("dim over int64", raw_gguf([], [ti("t", [2**63])]), DimOverflow, '"t"'),
    ("zero dim", raw_gguf([], [ti("t", [4, 0])]), BadTensorShape, "zero"),
    ("row not whole blocks", raw_gguf([], [ti("t", [100, 2], Q.Q4_K)]), BadTensorShape, "block size 256"),
    ("removed ggml type", raw_gguf([], [ti("t", [4], 4)]), UnknownTensorType, '"t"'),
    ("unknown ggml type", raw_gguf([], [ti("t", [4], 999)]), UnknownTensorType, "999"),
    ("duplicate tensor", raw_gguf([], [ti("t", [8]), ti("t", [8], offset=32)]), DuplicateTensor, '"t"'),
    ("misaligned offset", raw_gguf([], [ti("t", [8], offset=16)]), BadTensorOffset, "alignment 32"),
    (
        "overlapping tensors",
        raw_gguf([], [ti("b", [16], offset=32), ti("a", [16], offset=0)]),
        BadTensorOffset,
        '"a" (data offset 0, 64 bytes) overlaps tensor "b"',
    ),
    ("offset past int64", raw_gguf([], [ti("t", [8], offset=2**63 - 32)]), BadTensorOffset, "2**63-1"),
]


@pytest.mark.parametrize("feed", [False, True], ids=["whole", "fed"])
@pytest.mark.parametrize(
    ("data", "error", "named"), [case[1:] for case in HOSTILE], ids=[c[0] for c in HOSTILE]
)
def test_it_rejects_hostile_headers_with_a_typed_one_line_error(
    data: bytes, error: type[GGUFHeaderError], named: str, feed: bool
) -> None:
    with pytest.raises(error) as caught:
        feed_in_chunks(data, random_sizes(1, 5)) if feed else parse_header(data)

    message = str(caught.value)
    assert named in message
    assert "\n" not in message
    assert caught.value.code == error.code != GGUFHeaderError.code


def test_it_rejects_a_header_larger_than_the_limit() -> None:
    data = raw_gguf([kv("tokenizer.chat_template", V.STRING, gstr("x" * 5000))])

    with pytest.raises(LimitExceeded, match="1024-byte header limit"):
        parse_header(data, HeaderLimits(max_header_bytes=1024))


def test_it_rejects_counts_that_cannot_fit_under_the_header_limit() -> None:
    with pytest.raises(LimitExceeded, match="need at least 2424 bytes"):
        parse_header(raw_gguf([], counts=(100, 0)), HeaderLimits(max_header_bytes=1000))


def test_it_rejects_a_string_longer_than_the_string_limit() -> None:
    data = raw_gguf([kv("tokenizer.chat_template", V.STRING, gstr("x" * 5000))])

    with pytest.raises(LimitExceeded, match="over the 4096-byte limit"):
        parse_header(data, HeaderLimits(max_string_bytes=4096))


def test_it_rejects_a_big_string_array_running_past_the_limit_while_fed() -> None:
    elements = b"".join(gstr(f"t{i}") for i in range(5000))
    data = raw_gguf([kv("tokenizer.ggml.tokens", V.ARRAY, struct.pack("<IQ", V.STRING, 5000) + elements)])
    parser = HeaderParser(HeaderLimits(max_header_bytes=4096))

    with pytest.raises(LimitExceeded, match=r"tokenizer\.ggml\.tokens"):
        for start in range(0, len(data), 1000):
            parser.feed(data[start : start + 1000])


def test_it_names_the_key_whose_quoted_name_is_hostile() -> None:
    data = raw_gguf([kv("evil\nkey" + "z" * 500, 77, b"")])

    with pytest.raises(UnknownValueType) as caught:
        parse_header(data)

    assert '"evil\\nkeyzz' in str(caught.value)
    assert len(str(caught.value)) < 200


def test_a_big_endian_hand_built_header_parses() -> None:
    body = struct.pack(">Q", 1) + b"k" + struct.pack(">II", U32, 7)
    tensor = struct.pack(">Q", 1) + b"t" + struct.pack(">IQQIQ", 2, 32, 2, Q.F32, 0)
    data = b"GGUF" + struct.pack(">IQQ", 3, 1, 1) + body + tensor

    header = parse_header(data)

    assert (header.byte_order, header.kv, header.tensors[0].shape) == ("big", {"k": 7}, (32, 2))


def test_empty_arrays_and_zero_dim_tensors_parse() -> None:
    data = raw_gguf([kv("none", V.ARRAY, struct.pack("<IQ", V.STRING, 0))], [ti("scalar", [])])

    header = parse_header(data)

    assert header.kv["none"] == ArraySummary("STRING", 0, [])
    assert (header.tensors[0].shape, header.tensors[0].nbytes) == ((), 4)


# -------------------------------------------------------------------------------------------------------- CLI


def test_the_cli_prints_the_header_json(tmp_path: Path, rich_bytes: bytes) -> None:
    path = tmp_path / "m.gguf"
    path.write_bytes(rich_bytes)

    done = subprocess.run(
        [sys.executable, "-m", "packages_app.gguf_header", str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )

    assert (done.returncode, done.stderr) == (0, "")
    assert json.loads(done.stdout) == parse_header(rich_bytes).to_json()


def test_the_cli_reports_a_bad_header_on_one_line_and_exits_1(tmp_path: Path) -> None:
    path = tmp_path / "bad.gguf"
    path.write_bytes(raw_gguf([kv("dup", U32, b"\0" * 4), kv("dup", U32, b"\0" * 4)]))

    done = subprocess.run(
        [sys.executable, "-m", "packages_app.gguf_header", str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )

    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr == f'error: {path}: duplicate key "dup" at offset 43\n'


def test_the_cli_exits_2_for_a_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "missing.gguf"

    assert gguf_header.main([str(missing)]) == 2
    assert capsys.readouterr().err.startswith(f"error: {missing}: cannot read: ")


def test_the_cli_exits_2_without_exactly_one_file(capsys: pytest.CaptureFixture[str]) -> None:
    assert gguf_header.main([]) == 2
    assert gguf_header.main(["a", "b"]) == 2
    assert capsys.readouterr().err.count("usage:") == 2


def test_the_cli_reports_a_truncated_file(
    tmp_path: Path, rich_bytes: bytes, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "cut.gguf"
    path.write_bytes(rich_bytes[:100])

    assert gguf_header.main([str(path)]) == 1
    assert capsys.readouterr().err.startswith(f"error: {path}: input ends at offset 100 while reading ")
