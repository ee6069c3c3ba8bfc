"""Pure GGUF header reader: bytes in (whole or in pieces), a validated GGUFHeader out; no Django, no network.

Why not gguf-py's ``GGUFReader``: it memory-maps the complete file and turns every field into numpy arrays,
so it needs the whole file, and for one real 6.5 MB header it took ~10 s and ~700 MiB. We read the headers of
multi-GB remote files from HTTP range requests, so this parser takes bytes as they arrive, says how many more
it needs (``bytes_wanted``, ``estimate_total``), walks the big tokenizer arrays without materialising them,
and turns hostile input into typed ``GGUFHeaderError`` subclasses. Names, keys and type codes come from
``gguf.constants``.

Run ``python -m packages_app.gguf_header FILE`` to print a local file's header as JSON.
"""

from __future__ import annotations

import json
import math
import os
import struct
import sys
from dataclasses import dataclass, field
from itertools import pairwise, repeat
from typing import Final

from gguf.constants import (
    GGML_QUANT_SIZES,
    GGUF_DEFAULT_ALIGNMENT,
    GGUF_MAGIC,
    GGMLQuantizationType,
    GGUFValueType,
    Keys,
)

_Bytes = bytes | bytearray | memoryview

MiB: Final = 1024 * 1024
# Versions whose layout this parser knows (v1 used 32-bit counts); not gguf's GGUF_VERSION, which may move on.
SUPPORTED_VERSIONS: Final = (2, 3)
# ggml.h's GGML_MAX_DIMS; gguf-py does not export it.
GGML_MAX_DIMS: Final = 4
INT64_MAX: Final = 2**63 - 1
_MAGIC: Final = struct.pack("<I", GGUF_MAGIC)  # b"GGUF": written little-endian even in big-endian files
_PREAMBLE_BYTES: Final = 24  # magic, u32 version, u64 tensor_count, u64 kv_count
_MIN_KV_BYTES: Final = 8 + 4 + 1  # empty key, value type, one-byte value
_MIN_TENSOR_INFO_BYTES: Final = 8 + 4 + 4 + 8  # empty name, n_dims=0, type, offset
# Per-tensor guess before any tensor info is read: a ~36-byte name plus its fixed fields and 4 dims.
_TENSOR_INFO_GUESS: Final = 48 + 8 * GGML_MAX_DIMS
_STRING_ELEMENT_GUESS: Final = 16
_SKIP_BATCH: Final = 4096
_READ_CHUNK: Final = 1 * MiB

_SCALAR_CODES: Final[dict[GGUFValueType, str]] = {
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


# ---------------------------------------------------------------------------------------------------- errors


class GGUFHeaderError(ValueError):
    """Base of every error this module raises for bad input; ``str()`` is one line naming what is wrong."""

    code: str = "gguf_header_error"

    def __init__(self, message: str, *, offset: int | None = None) -> None:
        super().__init__(message)
        self.offset = offset


class TruncatedHeader(GGUFHeaderError):
    code = "truncated_header"


class BadMagic(GGUFHeaderError):
    code = "bad_magic"


class UnsupportedVersion(GGUFHeaderError):
    code = "unsupported_version"


class LimitExceeded(GGUFHeaderError):
    code = "limit_exceeded"


class UnknownValueType(GGUFHeaderError):
    code = "unknown_value_type"


class UnknownTensorType(GGUFHeaderError):
    code = "unknown_tensor_type"


class NestedArray(GGUFHeaderError):
    code = "nested_array"


class DuplicateKey(GGUFHeaderError):
    code = "duplicate_key"


class DuplicateTensor(GGUFHeaderError):
    code = "duplicate_tensor"


class BadString(GGUFHeaderError):
    code = "bad_string"


class BadAlignment(GGUFHeaderError):
    code = "bad_alignment"


class TooManyDims(GGUFHeaderError):
    code = "too_many_dims"


class DimOverflow(GGUFHeaderError):
    code = "dim_overflow"


class BadTensorShape(GGUFHeaderError):
    code = "bad_tensor_shape"


class BadTensorOffset(GGUFHeaderError):
    code = "bad_tensor_offset"


class MalformedHeader(GGUFHeaderError):
    """Safety net: a low-level decoding error the explicit checks missed (tests assert it never happens)."""

    code = "malformed_header"


class _NeedMore(Exception):
    """Internal: the current item needs bytes up to absolute offset ``end``; nothing was committed."""

    def __init__(self, end: int, what: str) -> None:
        super().__init__(what)
        self.end = end
        self.what = what


# ---------------------------------------------------------------------------------------------------- results


@dataclass(frozen=True)
class Limits:
    """Caps that keep hostile headers from costing unbounded time or memory."""

    max_header_bytes: int = 64 * MiB  # tensor infos must end by this offset
    # A materialised string value: chat templates, or a whole tokenizer.huggingface.json in old files.
    max_string_bytes: int = 16 * MiB
    max_name_bytes: int = 64 * 1024  # a key or tensor name
    max_kv_count: int = 8192
    max_tensor_count: int = 65536
    max_array_count: int = 1 << 24
    keep_array_values: int = 64  # arrays with at most this many elements keep their values


DEFAULT_LIMITS: Final = Limits()


@dataclass(frozen=True, slots=True)
class ArraySummary:
    element_type: str  # GGUFValueType name, e.g. "STRING"
    count: int
    values: list[object] | None = None  # kept only for arrays of at most Limits.keep_array_values elements

    def to_json(self) -> dict[str, object]:
        summary: dict[str, object] = {"array": self.element_type, "count": self.count}
        if self.values is not None:
            summary["values"] = [_json_scalar(value) for value in self.values]
        return summary


@dataclass(frozen=True, slots=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]  # file order, ne0 first
    ggml_type: str  # GGMLQuantizationType name, e.g. "Q4_K"
    offset: int  # relative to the start of tensor data
    nbytes: int

    def to_json(self) -> dict[str, object]:
        return {
            "name": self.name,
            "type": self.ggml_type,
            "shape": list(self.shape),
            "offset": self.offset,
            "bytes": self.nbytes,
        }


@dataclass(frozen=True)
class GGUFHeader:
    version: int
    byte_order: str  # "little" | "big"
    alignment: int
    kv: dict[str, object]  # scalars as Python values, strings as str, arrays as ArraySummary
    kv_types: dict[str, str]  # GGUFValueType name per key
    tensors: list[TensorInfo]
    kv_end: int  # offset where tensor infos start
    tensor_info_end: int  # offset where tensor infos end
    header_bytes: int  # offset where tensor data starts (tensor_info_end rounded up to the alignment)

    @property
    def architecture(self) -> str | None:
        value = self.kv.get(Keys.General.ARCHITECTURE)
        return value if isinstance(value, str) else None

    @property
    def block_count(self) -> int | None:
        """``<arch>.block_count``, which includes any MTP (NextN) blocks; None when absent."""
        return self._arch_int(Keys.LLM.BLOCK_COUNT)

    @property
    def nextn_predict_layers(self) -> int | None:
        """``<arch>.nextn_predict_layers``; None when the key is absent (0 when it says 0)."""
        return self._arch_int(Keys.LLM.NEXTN_PREDICT_LAYERS)

    @property
    def tensor_bytes(self) -> int:
        """Sum of the tensors' data sizes, without alignment padding."""
        return sum(tensor.nbytes for tensor in self.tensors)

    def _arch_int(self, template: str) -> int | None:
        arch = self.architecture
        value = None if arch is None else self.kv.get(template.format(arch=arch))
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    def to_json(self) -> dict[str, object]:
        """docs/design.md's header JSON; non-finite floats become "NaN", "Infinity", "-Infinity" (strict
        JSON)."""
        return {
            "version": self.version,
            "header_bytes": self.header_bytes,
            "alignment": self.alignment,
            "kv": {key: _json_value(value) for key, value in self.kv.items()},
            "tensors": [tensor.to_json() for tensor in self.tensors],
        }


def _json_value(value: object) -> object:
    return value.to_json() if isinstance(value, ArraySummary) else _json_scalar(value)


def _json_scalar(value: object) -> object:
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    return value


# ---------------------------------------------------------------------------------------------------- parser


@dataclass(frozen=True)
class _Codec:
    """Struct codecs for one byte order."""

    byte_order: str
    prefix: str
    u32: struct.Struct
    u64: struct.Struct
    scalars: dict[GGUFValueType, struct.Struct]


def _make_codec(byte_order: str) -> _Codec:
    prefix = "<" if byte_order == "little" else ">"
    scalars = {vtype: struct.Struct(prefix + code) for vtype, code in _SCALAR_CODES.items()}
    return _Codec(byte_order, prefix, struct.Struct(prefix + "I"), struct.Struct(prefix + "Q"), scalars)


_CODECS: Final = {"little": _make_codec("little"), "big": _make_codec("big")}


@dataclass
class _ArrayProgress:
    """A KV array being read; progress survives between feeds so big arrays are never re-walked."""

    key: str
    label: str  # the key quoted for messages, made once: slow paths name an element per step
    element_type: GGUFValueType
    count: int
    start: int  # absolute offset of the first element
    keep: bool
    done: int = 0
    values: list[object] = field(default_factory=list)

    @property
    def remaining(self) -> int:
        return self.count - self.done

    def next_element(self) -> str:
        return f"element {self.done} of {self.label}"


def _quote(text: str) -> str:
    """A name as a one-line, escaped, bounded string for error messages (keys and names are hostile)."""
    clipped = json.dumps(text[:80])
    return clipped + "..." if len(text) > 80 else clipped


def _value_type(raw: int, what: str, offset: int) -> GGUFValueType:
    try:
        return GGUFValueType(raw)
    except ValueError:
        raise UnknownValueType(
            f"unknown value type {raw} for {what} at offset {offset}", offset=offset
        ) from None


def _tensor_type(raw: int, name: str, offset: int) -> GGMLQuantizationType:
    try:
        ggml_type = GGMLQuantizationType(raw)
    except ValueError:
        ggml_type = None
    if ggml_type is None or ggml_type not in GGML_QUANT_SIZES:
        message = f"tensor {_quote(name)} has unknown ggml type {raw} at offset {offset}"
        raise UnknownTensorType(message, offset=offset)
    return ggml_type


def _tensor_nbytes(name: str, dims: tuple[int, ...], ggml_type: GGMLQuantizationType, offset: int) -> int:
    elements = 1
    for dim in dims:
        if dim == 0:
            raise BadTensorShape(f"tensor {_quote(name)} has a zero dimension {list(dims)}", offset=offset)
        elements *= dim
        if elements > INT64_MAX:
            message = f"tensor {_quote(name)} shape {list(dims)} has more than 2**63-1 elements"
            raise DimOverflow(message, offset=offset)
    block_size, type_size = GGML_QUANT_SIZES[ggml_type]
    row = dims[0] if dims else 1
    if row % block_size:
        message = (
            f"tensor {_quote(name)} of type {ggml_type.name} has {row} elements per row, "
            f"not a multiple of its block size {block_size}"
        )
        raise BadTensorShape(message, offset=offset)
    return elements // block_size * type_size


def _check_alignment(vtype: GGUFValueType, value: object, offset: int) -> int:
    key = Keys.General.ALIGNMENT
    if vtype is not GGUFValueType.UINT32 or not isinstance(value, int):
        raise BadAlignment(f"{key} must be UINT32, got {vtype.name} at offset {offset}", offset=offset)
    if value <= 0 or value & (value - 1):
        raise BadAlignment(f"{key} is {value}, not a power of two (offset {offset})", offset=offset)
    return value


def _check_overlaps(tensors: list[TensorInfo]) -> None:
    ordered = sorted(tensors, key=lambda tensor: tensor.offset)
    for before, after in pairwise(ordered):
        if before.offset + before.nbytes > after.offset:
            message = (
                f"tensor {_quote(before.name)} (data offset {before.offset}, {before.nbytes} bytes) "
                f"overlaps tensor {_quote(after.name)} at data offset {after.offset}"
            )
            raise BadTensorOffset(message)


class HeaderParser:
    """Incremental parser: ``feed`` contiguous bytes from offset 0 on; ``done`` once the tensor infos end.

    Each item (KV, tensor info) is parsed from ``consumed``; when its bytes are not all there yet nothing is
    committed and the item is retried on the next feed, except arrays, which commit progress per element.
    """

    def __init__(self, limits: Limits = DEFAULT_LIMITS) -> None:
        self.limits = limits
        self.received = 0
        self.consumed = 0
        self.done = False
        self._buf = bytearray()
        self._base = 0  # absolute offset of self._buf[0]; consumed bytes are dropped
        self._need_end = _PREAMBLE_BYTES
        self._need_what = "the fixed header (magic, version, counts)"
        self._error: GGUFHeaderError | None = None
        self._codec: _Codec | None = None
        self._version = 0
        self._tensor_count = 0
        self._kv_count = 0
        self._kv: dict[str, object] = {}
        self._kv_types: dict[str, str] = {}
        self._array: _ArrayProgress | None = None
        self._token_bytes: float | None = None  # mean bytes per vocabulary entry, for estimate_total
        self._alignment = GGUF_DEFAULT_ALIGNMENT
        self._kv_end: int | None = None
        self._tensors: list[TensorInfo] = []
        self._tensor_names: set[str] = set()
        self._header: GGUFHeader | None = None

    # -- public

    def feed(self, data: _Bytes) -> None:
        """Append the next contiguous bytes (starting at offset ``received``) and parse as far as possible."""
        if self._error is not None:
            raise self._error
        view = _byte_view(data)
        if self.done:
            self.received += len(view)
            return
        # Bytes past the cap can never belong to an acceptable header, so they are not buffered.
        room = self.limits.max_header_bytes - self.received
        self._buf += view[: max(room, 0)]
        self.received += len(view)
        self._advance(self._buf, self._base)
        if self.done:
            self._buf = bytearray()  # what follows the header is tensor data: not ours to keep
            return
        drop = self.consumed - self._base
        if drop:
            del self._buf[:drop]
            self._base = self.consumed

    def bytes_wanted(self) -> int:
        """A lower bound on the further bytes needed to make progress; 0 once done."""
        if self.done:
            return 0
        return max(1, self._need_end - self.received)

    def estimate_total(self) -> int:
        """Best estimate of ``tensor_info_end`` from what has been parsed so far."""
        if self._header is not None:
            return self._header.tensor_info_end
        guess = (
            self.consumed + self._guess_array_rest() + self._guess_unread_kvs() + self._guess_tensor_infos()
        )
        return max(guess, self._need_end)

    def result(self) -> GGUFHeader:
        """The parsed header; only once ``done``."""
        if self._error is not None:
            raise self._error
        if self._header is None:
            raise RuntimeError("the header is not complete yet; feed more bytes (see bytes_wanted())")
        return self._header

    def finish(self) -> GGUFHeader:
        """The parsed header, or TruncatedHeader if the input ended before the header did."""
        if self._error is not None or self._header is not None:
            return self.result()
        message = (
            f"input ends at offset {self.received} while reading {self._need_what}, "
            f"which needs bytes up to offset {self._need_end}"
        )
        raise TruncatedHeader(message, offset=self.received)

    # -- driving

    def _advance(self, buf: _Bytes, base: int) -> None:
        end = base + len(buf)
        try:
            while not self.done:
                self._step(buf, base, end)
        except _NeedMore as need:
            self._need_end, self._need_what = need.end, need.what
        except GGUFHeaderError as error:
            self._error = error
            raise
        except (struct.error, IndexError, OverflowError, UnicodeError, MemoryError) as exc:
            self._error = MalformedHeader(f"malformed header near offset {self.consumed}: {exc}")
            raise self._error from exc

    def _step(self, buf: _Bytes, base: int, end: int) -> None:
        if self._codec is None:
            self._read_preamble(buf, base, end)
        elif self._array is not None:
            self._read_array(buf, base, end)
        elif len(self._kv) < self._kv_count:
            self._read_kv(buf, base, end)
        elif len(self._tensors) < self._tensor_count:
            self._read_tensor(buf, base, end)
        else:
            self._finish_header()

    # -- primitives (absolute offsets; buf holds [base, end))

    def _need(self, pos: int, size: int, end: int, what: str) -> None:
        stop = pos + size
        if stop > self.limits.max_header_bytes:
            message = (
                f"{what} at offset {pos} would end at offset {stop}, "
                f"past the {self.limits.max_header_bytes}-byte header limit"
            )
            raise LimitExceeded(message, offset=pos)
        if stop > end:
            raise _NeedMore(stop, what)

    def _read_int(self, buf: _Bytes, base: int, end: int, pos: int, codec: struct.Struct, what: str) -> int:
        self._need(pos, codec.size, end, what)
        value: int = codec.unpack_from(buf, pos - base)[0]
        return value

    def _read_string(
        self, buf: _Bytes, base: int, end: int, pos: int, max_len: int, what: str
    ) -> tuple[str, int]:
        assert self._codec is not None
        size = self._read_int(buf, base, end, pos, self._codec.u64, what)
        if size > max_len:
            raise LimitExceeded(
                f"{what} at offset {pos} is {size} bytes long, over the {max_len}-byte limit", offset=pos
            )
        self._need(pos + 8, size, end, what)
        try:
            text = str(buf[pos + 8 - base : pos + 8 + size - base], "utf-8")
        except UnicodeDecodeError as exc:
            raise BadString(
                f"{what} at offset {pos} is not valid UTF-8 (byte {exc.start})", offset=pos
            ) from None
        return text, pos + 8 + size

    # -- preamble

    def _read_preamble(self, buf: _Bytes, base: int, end: int) -> None:
        self._need(0, 4, end, "the GGUF magic")
        magic = bytes(buf[0 - base : 4 - base])
        if magic != _MAGIC:
            raise BadMagic(f"not a GGUF file: it starts with {magic!r}, expected {_MAGIC!r}", offset=0)
        self._need(4, _PREAMBLE_BYTES - 4, end, "the GGUF version and counts")
        codec, version = _detect_byte_order(bytes(buf[4 - base : 8 - base]))
        tensor_count, kv_count = struct.unpack_from(codec.prefix + "QQ", buf, 8 - base)
        self._check_counts(tensor_count, kv_count)
        self._codec, self._version = codec, version
        self._tensor_count, self._kv_count = tensor_count, kv_count
        self.consumed = _PREAMBLE_BYTES
        if kv_count == 0:
            self._kv_end = _PREAMBLE_BYTES

    def _check_counts(self, tensor_count: int, kv_count: int) -> None:
        limits = self.limits
        if kv_count > limits.max_kv_count:
            raise LimitExceeded(f"kv_count {kv_count} is over the limit of {limits.max_kv_count}", offset=16)
        if tensor_count > limits.max_tensor_count:
            message = f"tensor_count {tensor_count} is over the limit of {limits.max_tensor_count}"
            raise LimitExceeded(message, offset=8)
        smallest = _PREAMBLE_BYTES + kv_count * _MIN_KV_BYTES + tensor_count * _MIN_TENSOR_INFO_BYTES
        if smallest > limits.max_header_bytes:
            message = (
                f"{kv_count} KVs and {tensor_count} tensor infos need at least {smallest} bytes, "
                f"past the {limits.max_header_bytes}-byte header limit"
            )
            raise LimitExceeded(message, offset=8)

    # -- key/values

    def _read_kv(self, buf: _Bytes, base: int, end: int) -> None:
        assert self._codec is not None
        start = self.consumed
        key, pos = self._read_string(
            buf, base, end, start, self.limits.max_name_bytes, f"the key of KV #{len(self._kv)}"
        )
        if key in self._kv:
            raise DuplicateKey(f"duplicate key {_quote(key)} at offset {start}", offset=start)
        what = f"the value of {_quote(key)}"
        raw_type = self._read_int(buf, base, end, pos, self._codec.u32, what)
        vtype = _value_type(raw_type, f"key {_quote(key)}", pos)
        if vtype is GGUFValueType.ARRAY:
            self._array, self.consumed = self._read_array_head(buf, base, end, key, pos + 4)
            return
        value, pos = self._read_value(buf, base, end, pos + 4, vtype, what)
        self._complete_kv(key, vtype, value, pos, start)

    def _read_value(
        self, buf: _Bytes, base: int, end: int, pos: int, vtype: GGUFValueType, what: str
    ) -> tuple[object, int]:
        assert self._codec is not None
        if vtype is GGUFValueType.STRING:
            return self._read_string(buf, base, end, pos, self.limits.max_string_bytes, what)
        codec = self._codec.scalars[vtype]
        self._need(pos, codec.size, end, what)
        return codec.unpack_from(buf, pos - base)[0], pos + codec.size

    def _complete_kv(self, key: str, vtype: GGUFValueType, value: object, pos: int, start: int) -> None:
        if key == Keys.General.ALIGNMENT:
            self._alignment = _check_alignment(vtype, value, start)
        if key == Keys.Tokenizer.LIST and isinstance(value, ArraySummary) and value.count:
            self._token_bytes = (pos - start) / value.count
        self._kv[key] = value
        self._kv_types[key] = vtype.name
        self.consumed = pos
        if len(self._kv) == self._kv_count:
            self._kv_end = pos

    # -- arrays

    def _read_array_head(
        self, buf: _Bytes, base: int, end: int, key: str, pos: int
    ) -> tuple[_ArrayProgress, int]:
        assert self._codec is not None
        what = f"the array header of {_quote(key)}"
        raw_type = self._read_int(buf, base, end, pos, self._codec.u32, what)
        element_type = _value_type(raw_type, f"the elements of {_quote(key)}", pos)
        if element_type is GGUFValueType.ARRAY:
            raise NestedArray(
                f"array {_quote(key)} holds arrays (offset {pos}); nested arrays are not allowed", offset=pos
            )
        count = self._read_int(buf, base, end, pos + 4, self._codec.u64, what)
        self._check_array_count(key, element_type, count, pos + 12)
        keep = count <= self.limits.keep_array_values
        array = _ArrayProgress(key, _quote(key), element_type, count, start=pos + 12, keep=keep)
        return array, pos + 12

    def _check_array_count(self, key: str, element_type: GGUFValueType, count: int, pos: int) -> None:
        assert self._codec is not None
        limit = self.limits.max_array_count
        if count > limit:
            raise LimitExceeded(
                f"array {_quote(key)} has {count} elements, over the limit of {limit}", offset=pos
            )
        smallest = 8 if element_type is GGUFValueType.STRING else self._codec.scalars[element_type].size
        # Checked before any element is read, so a huge count fails now instead of after buffering.
        if pos + count * smallest > self.limits.max_header_bytes:
            message = (
                f"array {_quote(key)} at offset {pos} claims {count} {element_type.name} elements "
                f"(at least {count * smallest} bytes), past the {self.limits.max_header_bytes}-byte limit"
            )
            raise LimitExceeded(message, offset=pos)

    def _read_array(self, buf: _Bytes, base: int, end: int) -> None:
        array = self._array
        assert array is not None
        if array.remaining and array.element_type is not GGUFValueType.STRING:
            self._read_fixed_elements(array, buf, base, end)
        elif array.remaining and array.keep:
            self._read_kept_strings(array, buf, base, end)
        elif array.remaining:
            self._skip_strings(array, buf, base, end)
        self._array = None
        values = array.values if array.keep else None
        summary = ArraySummary(array.element_type.name, array.count, values)
        self._complete_kv(array.key, GGUFValueType.ARRAY, summary, self.consumed, array.start)

    def _read_fixed_elements(self, array: _ArrayProgress, buf: _Bytes, base: int, end: int) -> None:
        assert self._codec is not None
        size = self._codec.scalars[array.element_type].size
        what = f"the elements of {array.label}"
        if array.keep:
            self._need(self.consumed, array.remaining * size, end, what)
            code = self._codec.prefix + str(array.remaining) + _SCALAR_CODES[array.element_type]
            array.values.extend(struct.unpack_from(code, buf, self.consumed - base))
            take = array.remaining
        else:
            # Only the count is kept, so skip whatever whole elements are here without looking at them.
            take = min(array.remaining, (end - self.consumed) // size)
        array.done += take
        self.consumed += take * size
        if array.remaining:
            raise _NeedMore(self.consumed + size, what)

    def _read_kept_strings(self, array: _ArrayProgress, buf: _Bytes, base: int, end: int) -> None:
        while array.remaining:
            what = array.next_element()
            value, pos = self._read_string(buf, base, end, self.consumed, self.limits.max_string_bytes, what)
            array.values.append(value)
            array.done += 1
            self.consumed = pos

    def _skip_strings(self, array: _ArrayProgress, buf: _Bytes, base: int, end: int) -> None:
        """Walk a big string array by its length prefixes only (elements are never decoded: RWKV vocabularies
        hold raw bytes). Unchecked batches keep the per-element cost to one unpack; a batch that runs past the
        available bytes is retried smaller, then element by element, which commits progress and says why."""
        assert self._codec is not None
        unpack = self._codec.u64.unpack_from
        stop = min(end, self.limits.max_header_bytes) - base
        batch = _SKIP_BATCH
        while array.remaining:
            pos = self.consumed - base
            # No more elements than 8-byte prefixes fit, so small feeds go straight to the checked walk.
            count = min(array.remaining, batch, (stop - pos) // 8)
            if count <= 16:
                self._skip_strings_checked(array, buf, base, end, max(count, 1))
                continue
            try:
                for _ in repeat(None, count):
                    pos += 8 + unpack(buf, pos)[0]
            except (struct.error, OverflowError):
                pos = stop + 1
            if pos <= stop:
                array.done += count
                self.consumed = base + pos
            else:
                batch = count // 8

    def _skip_strings_checked(
        self, array: _ArrayProgress, buf: _Bytes, base: int, end: int, count: int
    ) -> None:
        assert self._codec is not None
        for _ in range(count):
            what = array.next_element()
            size = self._read_int(buf, base, end, self.consumed, self._codec.u64, what)
            self._need(self.consumed + 8, size, end, what)
            array.done += 1
            self.consumed += 8 + size

    # -- tensor infos

    def _read_tensor(self, buf: _Bytes, base: int, end: int) -> None:
        assert self._codec is not None
        start = self.consumed
        name_what = f"the name of tensor #{len(self._tensors)}"
        name, pos = self._read_string(buf, base, end, start, self.limits.max_name_bytes, name_what)
        if name in self._tensor_names:
            raise DuplicateTensor(f"duplicate tensor {_quote(name)} at offset {start}", offset=start)
        what = f"the info of tensor {_quote(name)}"
        n_dims = self._read_int(buf, base, end, pos, self._codec.u32, what)
        if n_dims > GGML_MAX_DIMS:
            message = (
                f"tensor {_quote(name)} has {n_dims} dimensions, more than {GGML_MAX_DIMS} (offset {pos})"
            )
            raise TooManyDims(message, offset=pos)
        pos += 4
        self._need(pos, 8 * n_dims + 12, end, what)
        dims: tuple[int, ...] = struct.unpack_from(f"{self._codec.prefix}{n_dims}Q", buf, pos - base)
        raw_type, offset = struct.unpack_from(self._codec.prefix + "IQ", buf, pos + 8 * n_dims - base)
        ggml_type = _tensor_type(raw_type, name, pos + 8 * n_dims)
        nbytes = _tensor_nbytes(name, dims, ggml_type, start)
        self._check_tensor_offset(name, offset, nbytes, start)
        self._tensors.append(TensorInfo(name, dims, ggml_type.name, offset, nbytes))
        self._tensor_names.add(name)
        self.consumed = pos + 8 * n_dims + 12

    def _check_tensor_offset(self, name: str, offset: int, nbytes: int, start: int) -> None:
        if offset % self._alignment:
            alignment = self._alignment
            message = (
                f"tensor {_quote(name)} data offset {offset} is not a multiple of the alignment {alignment}"
            )
            raise BadTensorOffset(message, offset=start)
        if offset + nbytes > INT64_MAX:
            message = f"tensor {_quote(name)} data ({offset} + {nbytes} bytes) ends past 2**63-1"
            raise BadTensorOffset(message, offset=start)

    def _finish_header(self) -> None:
        assert self._codec is not None and self._kv_end is not None
        _check_overlaps(self._tensors)
        end = self.consumed
        self._header = GGUFHeader(
            version=self._version,
            byte_order=self._codec.byte_order,
            alignment=self._alignment,
            kv=self._kv,
            kv_types=self._kv_types,
            tensors=self._tensors,
            kv_end=self._kv_end,
            tensor_info_end=end,
            header_bytes=-(-end // self._alignment) * self._alignment,
        )
        self.done = True

    # -- estimates

    def _guess_array_rest(self) -> int:
        array = self._array
        if array is None or self._codec is None:
            return 0
        if array.element_type is not GGUFValueType.STRING:
            return array.remaining * self._codec.scalars[array.element_type].size
        per_element = (self.consumed - array.start) / array.done if array.done else _STRING_ELEMENT_GUESS
        guess = round(array.remaining * per_element)
        merges_total = self._merges_estimate(array)
        if merges_total is not None:
            # Later BPE tokens are longer, so the mean of the merges read so far runs low; the whole
            # vocabulary, already read, bounds what the merges can still hold.
            guess = max(guess, merges_total - (self.consumed - array.start))
        return guess

    def _merges_estimate(self, array: _ArrayProgress) -> int | None:
        """Bytes of the whole BPE merges array, from the fully read vocabulary: a merge spells the
        token it creates with one space added."""
        if array.key != Keys.Tokenizer.MERGES or self._kv.get(Keys.Tokenizer.MODEL) != "gpt2":
            return None
        summary = self._kv.get(Keys.Tokenizer.LIST)
        if not isinstance(summary, ArraySummary) or self._token_bytes is None:
            return None
        return round(array.count * (self._token_bytes + 1))

    def _guess_unread_kvs(self) -> int:
        """Tokenizer arrays are nearly all of a big header: once the vocabulary is known, add the arrays its
        tokenizer model implies (token types; merges for BPE, scores for SentencePiece) not yet reached."""
        vocab = self._vocab_estimate()
        unread = self._kv_count - len(self._kv) - (0 if self._array is None else 1)
        if vocab is None or unread <= 0:
            return 0
        count, token_bytes = vocab
        tokenizer = Keys.Tokenizer
        expected = {tokenizer.TOKEN_TYPE: 4 * count}
        model = self._kv.get(tokenizer.MODEL)
        if model == "gpt2":
            # A merge "a b" spells the token it creates plus a space, so it is about one token long.
            expected[tokenizer.MERGES] = round(count * (token_bytes + 1))
        elif model == "llama":
            expected[tokenizer.SCORES] = 4 * count
        current = self._array.key if self._array is not None else None
        sizes = [size for key, size in expected.items() if key not in self._kv and key != current]
        return sum(sizes[:unread])

    def _vocab_estimate(self) -> tuple[int, float] | None:
        array = self._array
        if array is not None and array.key == Keys.Tokenizer.LIST and array.done:
            return array.count, (self.consumed - array.start) / array.done
        summary = self._kv.get(Keys.Tokenizer.LIST)
        if isinstance(summary, ArraySummary) and self._token_bytes is not None:
            return summary.count, self._token_bytes
        return None

    def _guess_tensor_infos(self) -> int:
        remaining = self._tensor_count - len(self._tensors)
        if not self._tensors or self._kv_end is None:
            return remaining * _TENSOR_INFO_GUESS
        return round(remaining * (self.consumed - self._kv_end) / len(self._tensors))


def _detect_byte_order(raw_version: bytes) -> tuple[_Codec, int]:
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


# ----------------------------------------------------------------------------------------------- entry points


def _byte_view(data: _Bytes) -> memoryview:
    view = memoryview(data)
    return view if view.format == "B" and view.ndim == 1 else view.cast("B")


def parse_header(data: _Bytes, limits: Limits = DEFAULT_LIMITS) -> GGUFHeader:
    """Parse a header from bytes starting at offset 0, in place (no copy); TruncatedHeader if they end."""
    view = _byte_view(data)
    parser = HeaderParser(limits)
    window = view[: limits.max_header_bytes]
    parser.received = len(view)
    parser._advance(window, 0)
    return parser.finish()


def parse_file(path: str | os.PathLike[str], limits: Limits = DEFAULT_LIMITS) -> GGUFHeader:
    """Parse a local file's header, reading it in chunks (never the whole file); OSError if unreadable."""
    parser = HeaderParser(limits)
    with open(path, "rb") as handle:
        while not parser.done:
            chunk = handle.read(max(parser.bytes_wanted(), _READ_CHUNK))
            if not chunk:
                break
            parser.feed(chunk)
    return parser.finish()


_USAGE: Final = "usage: python -m packages_app.gguf_header FILE"


def main(argv: list[str] | None = None) -> int:
    """CLI: print FILE's header JSON; exit 1 on a bad header, 2 on usage errors or an unreadable file."""
    args = sys.argv[1:] if argv is None else argv
    if args in (["-h"], ["--help"]):
        print(_USAGE)
        return 0
    if len(args) != 1:
        print(_USAGE, file=sys.stderr)
        return 2
    path = args[0]
    try:
        header = parse_file(path)
    except OSError as exc:
        print(f"error: {path}: cannot read: {exc.strerror or exc}", file=sys.stderr)
        return 2
    except GGUFHeaderError as exc:
        print(f"error: {path}: {exc}", file=sys.stderr)
        return 1
    return _print_json(header.to_json())


def _print_json(document: dict[str, object]) -> int:
    try:
        json.dump(document, sys.stdout, indent=2)
        sys.stdout.write("\n")
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader went away (e.g. `| head`); stay quiet instead of a traceback at interpreter exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
