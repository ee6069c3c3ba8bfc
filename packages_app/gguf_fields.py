"""The GGUF header parser's field checks (gguf_parser.py): byte-order codecs, value and tensor types, tensor
sizes, alignment and overlaps, each turning hostile input into a typed GGUFHeaderError."""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from itertools import pairwise
from typing import Final

from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFValueType, Keys

from packages_app.gguf_errors import (
    BadAlignment,
    BadTensorOffset,
    BadTensorShape,
    DimOverflow,
    UnknownTensorType,
    UnknownValueType,
    UnsupportedVersion,
)
from packages_app.gguf_results import TensorInfo

# Versions whose layout this parser knows (v1 used 32-bit counts); not gguf's GGUF_VERSION, which may move on.
SUPPORTED_VERSIONS: Final = (2, 3)
# ggml.h's GGML_MAX_DIMS; gguf-py does not export it.
GGML_MAX_DIMS: Final = 4
INT64_MAX: Final = 2**63 - 1
SCALAR_CODES: Final[dict[GGUFValueType, str]] = {
    GGUFValueType.UINT8: "B",
    GGUFValueType.INT8: "b",
    GGUFValueType.UINT16: "H",
    GGUFValueType.INT16: "h",
    GGUFValueType.UINT32: "I",
    GGUFValueType.INT32: "i",
    GGUFValueType.FLOAT32: "f",
    GGUFValueType.BOOL: "?",
    GGUFValueType.UINT64: "Q",
    GGUFValueType.INT64: "q",
    GGUFValueType.FLOAT64: "d",
}


@dataclass(frozen=True)
class Codec:
    """Struct codecs for one byte order."""

    byte_order: str
    prefix: str
    u32: struct.Struct
    u64: struct.Struct
    scalars: dict[GGUFValueType, struct.Struct]


def _make_codec(byte_order: str) -> Codec:
    prefix = "<" if byte_order == "little" else ">"
    scalars = {vtype: struct.Struct(prefix + code) for vtype, code in SCALAR_CODES.items()}
    return Codec(byte_order, prefix, struct.Struct(prefix + "I"), struct.Struct(prefix + "Q"), scalars)


_CODECS: Final = {"little": _make_codec("little"), "big": _make_codec("big")}


def quote(text: str) -> str:
    """A name as a one-line, escaped, bounded string for error messages (keys and names are hostile)."""
    clipped = json.dumps(text[:80])
    return clipped + "..." if len(text) > 80 else clipped


def value_type(raw: int, what: str, offset: int) -> GGUFValueType:
    try:
        return GGUFValueType(raw)
    except ValueError:
        raise UnknownValueType(
            f"unknown value type {raw} for {what} at offset {offset}", offset=offset
        ) from None


def tensor_type(raw: int, name: str, offset: int) -> GGMLQuantizationType:
    try:
        ggml_type = GGMLQuantizationType(raw)
    except ValueError:
        ggml_type = None
    if ggml_type is None or ggml_type not in GGML_QUANT_SIZES:
        message = f"tensor {quote(name)} has unknown ggml type {raw} at offset {offset}"
        raise UnknownTensorType(message, offset=offset)
    return ggml_type


def tensor_nbytes(name: str, dims: tuple[int, ...], ggml_type: GGMLQuantizationType, offset: int) -> int:
    elements = 1
    for dim in dims:
        if dim == 0:
            raise BadTensorShape(f"tensor {quote(name)} has a zero dimension {list(dims)}", offset=offset)
        elements *= dim
        if elements > INT64_MAX:
            message = f"tensor {quote(name)} shape {list(dims)} has more than 2**63-1 elements"
            raise DimOverflow(message, offset=offset)
    block_size, type_size = GGML_QUANT_SIZES[ggml_type]
    row = dims[0] if dims else 1
    if row % block_size:
        message = (
            f"tensor {quote(name)} of type {ggml_type.name} has {row} elements per row, "
            f"not a multiple of its block size {block_size}"
        )
        raise BadTensorShape(message, offset=offset)
    return elements // block_size * type_size


def check_alignment(vtype: GGUFValueType, value: object, offset: int) -> int:
    key = Keys.General.ALIGNMENT
    if vtype is not GGUFValueType.UINT32 or not isinstance(value, int):
        raise BadAlignment(f"{key} must be UINT32, got {vtype.name} at offset {offset}", offset=offset)
    if value <= 0 or value & (value - 1):
        raise BadAlignment(f"{key} is {value}, not a power of two (offset {offset})", offset=offset)
    return value


def check_overlaps(tensors: list[TensorInfo]) -> None:
    ordered = sorted(tensors, key=lambda tensor: tensor.offset)
    for before, after in pairwise(ordered):
        if before.offset + before.nbytes > after.offset:
            message = (
                f"tensor {quote(before.name)} (data offset {before.offset}, {before.nbytes} bytes) "
                f"overlaps tensor {quote(after.name)} at data offset {after.offset}"
            )
            raise BadTensorOffset(message)


def detect_byte_order(raw_version: bytes) -> tuple[Codec, int]:
    """Big-endian files keep the magic as b"GGUF" but store the version (and all else) big-endian."""
    little = int.from_bytes(raw_version, "little")
    big = int.from_bytes(raw_version, "big")
    if little in SUPPORTED_VERSIONS:
        return _CODECS["little"], little
    if big in SUPPORTED_VERSIONS:
        return _CODECS["big"], big
    shown = big if little & 0xFFFF == 0 else little
    message = (
        f"unsupported GGUF version {shown} at offset 4 (supported: {', '.join(map(str, SUPPORTED_VERSIONS))})"
    )
    raise UnsupportedVersion(message, offset=4)
