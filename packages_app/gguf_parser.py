"""The incremental GGUF header parser: bytes in as they arrive, how many more it needs, a GGUFHeader out;
gguf_header.py holds the whole-buffer and file entry points and the CLI."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from itertools import repeat
from typing import Final

from gguf.constants import (
    GGUF_DEFAULT_ALIGNMENT,
    GGUF_MAGIC,
    GGUFValueType,
    Keys,
)

from packages_app.gguf_errors import (
    BadMagic,
    BadString,
    BadTensorOffset,
    DuplicateKey,
    DuplicateTensor,
    GGUFHeaderError,
    LimitExceeded,
    MalformedHeader,
    NestedArray,
    TooManyDims,
    TruncatedHeader,
)
from packages_app.gguf_fields import (
    GGML_MAX_DIMS,
    INT64_MAX,
    SCALAR_CODES,
    Codec,
    check_alignment,
    check_overlaps,
    detect_byte_order,
    quote,
    tensor_nbytes,
    tensor_type,
    value_type,
)
from packages_app.gguf_results import DEFAULT_LIMITS, ArraySummary, GGUFHeader, HeaderLimits, TensorInfo

Bytes = bytes | bytearray | memoryview

_MAGIC: Final = struct.pack("<I", GGUF_MAGIC)  # b"GGUF": written little-endian even in big-endian files
_PREAMBLE_BYTES: Final = 24  # magic, u32 version, u64 tensor_count, u64 kv_count
_MIN_KV_BYTES: Final = 8 + 4 + 1  # empty key, value type, one-byte value
_MIN_TENSOR_INFO_BYTES: Final = 8 + 4 + 4 + 8  # empty name, n_dims=0, type, offset
# Per-tensor guess before any tensor info is read: a ~36-byte name plus its fixed fields and 4 dims.
_TENSOR_INFO_GUESS: Final = 48 + 8 * GGML_MAX_DIMS
_STRING_ELEMENT_GUESS: Final = 16
_SKIP_BATCH: Final = 4096


class _NeedMore(Exception):
    """Internal: the current item needs bytes up to absolute offset ``end``; nothing was committed."""

    def __init__(self, end: int, what: str) -> None:
        super().__init__(what)
        self.end = end
        self.what = what


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


class HeaderParser:
    """Incremental parser: ``feed`` contiguous bytes from offset 0 on; ``done`` once the tensor infos end.

    Each item (KV, tensor info) is parsed from ``consumed``; when its bytes are not all there yet nothing is
    committed and the item is retried on the next feed, except arrays, which commit progress per element.
    """

    def __init__(self, limits: HeaderLimits = DEFAULT_LIMITS) -> None:
        self.limits = limits
        self.received = 0
        self.consumed = 0
        self.done = False
        self._buf = bytearray()
        self._base = 0  # absolute offset of self._buf[0]; consumed bytes are dropped
        self._need_end = _PREAMBLE_BYTES
        self._need_what = "the fixed header (magic, version, counts)"
        self._error: GGUFHeaderError | None = None
        self._codec: Codec | None = None
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

    def feed(self, data: Bytes) -> None:
        """Append the next contiguous bytes (starting at offset ``received``) and parse as far as possible."""
        if self._error is not None:
            raise self._error
        view = byte_view(data)
        if self.done:
            self.received += len(view)
            return
        # Bytes past the cap can never belong to an acceptable header, so they are not buffered.
        room = self.limits.max_header_bytes - self.received
        self._buf += view[: max(room, 0)]
        self.received += len(view)
        self.advance(self._buf, self._base)
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

    def advance(self, buf: Bytes, base: int) -> None:
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

    def _step(self, buf: Bytes, base: int, end: int) -> None:
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

    def _read_int(self, buf: Bytes, base: int, end: int, pos: int, codec: struct.Struct, what: str) -> int:
        self._need(pos, codec.size, end, what)
        value: int = codec.unpack_from(buf, pos - base)[0]
        return value

    def _read_string(
        self, buf: Bytes, base: int, end: int, pos: int, max_len: int, what: str
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

    def _read_preamble(self, buf: Bytes, base: int, end: int) -> None:
        self._need(0, 4, end, "the GGUF magic")
        magic = bytes(buf[0 - base : 4 - base])
        if magic != _MAGIC:
            raise BadMagic(f"not a GGUF file: it starts with {magic!r}, expected {_MAGIC!r}", offset=0)
        self._need(4, _PREAMBLE_BYTES - 4, end, "the GGUF version and counts")
        codec, version = detect_byte_order(bytes(buf[4 - base : 8 - base]))
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

    def _read_kv(self, buf: Bytes, base: int, end: int) -> None:
        assert self._codec is not None
        start = self.consumed
        key, pos = self._read_string(
            buf, base, end, start, self.limits.max_name_bytes, f"the key of KV #{len(self._kv)}"
        )
        if key in self._kv:
            raise DuplicateKey(f"duplicate key {quote(key)} at offset {start}", offset=start)
        what = f"the value of {quote(key)}"
        raw_type = self._read_int(buf, base, end, pos, self._codec.u32, what)
        vtype = value_type(raw_type, f"key {quote(key)}", pos)
        if vtype is GGUFValueType.ARRAY:
            self._array, self.consumed = self._read_array_head(buf, base, end, key, pos + 4)
            return
        value, pos = self._read_value(buf, base, end, pos + 4, vtype, what)
        self._complete_kv(key, vtype, value, pos, start)

    def _read_value(
        self, buf: Bytes, base: int, end: int, pos: int, vtype: GGUFValueType, what: str
    ) -> tuple[object, int]:
        assert self._codec is not None
        if vtype is GGUFValueType.STRING:
            return self._read_string(buf, base, end, pos, self.limits.max_string_bytes, what)
        codec = self._codec.scalars[vtype]
        self._need(pos, codec.size, end, what)
        return codec.unpack_from(buf, pos - base)[0], pos + codec.size

    def _complete_kv(self, key: str, vtype: GGUFValueType, value: object, pos: int, start: int) -> None:
        if key == Keys.General.ALIGNMENT:
            self._alignment = check_alignment(vtype, value, start)
        if key == Keys.Tokenizer.LIST and isinstance(value, ArraySummary) and value.count:
            self._token_bytes = (pos - start) / value.count
        self._kv[key] = value
        self._kv_types[key] = vtype.name
        self.consumed = pos
        if len(self._kv) == self._kv_count:
            self._kv_end = pos

    # -- arrays

    def _read_array_head(
        self, buf: Bytes, base: int, end: int, key: str, pos: int
    ) -> tuple[_ArrayProgress, int]:
        assert self._codec is not None
        what = f"the array header of {quote(key)}"
        raw_type = self._read_int(buf, base, end, pos, self._codec.u32, what)
        element_type = value_type(raw_type, f"the elements of {quote(key)}", pos)
        if element_type is GGUFValueType.ARRAY:
            raise NestedArray(
                f"array {quote(key)} holds arrays (offset {pos}); nested arrays are not allowed", offset=pos
            )
        count = self._read_int(buf, base, end, pos + 4, self._codec.u64, what)
        self._check_array_count(key, element_type, count, pos + 12)
        keep = count <= self.limits.keep_array_values
        array = _ArrayProgress(key, quote(key), element_type, count, start=pos + 12, keep=keep)
        return array, pos + 12

    def _check_array_count(self, key: str, element_type: GGUFValueType, count: int, pos: int) -> None:
        assert self._codec is not None
        limit = self.limits.max_array_count
        if count > limit:
            raise LimitExceeded(
                f"array {quote(key)} has {count} elements, over the limit of {limit}", offset=pos
            )
        smallest = 8 if element_type is GGUFValueType.STRING else self._codec.scalars[element_type].size
        # Checked before any element is read, so a huge count fails now instead of after buffering.
        if pos + count * smallest > self.limits.max_header_bytes:
            message = (
                f"array {quote(key)} at offset {pos} claims {count} {element_type.name} elements "
                f"(at least {count * smallest} bytes), past the {self.limits.max_header_bytes}-byte limit"
            )
            raise LimitExceeded(message, offset=pos)

    def _read_array(self, buf: Bytes, base: int, end: int) -> None:
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

    def _read_fixed_elements(self, array: _ArrayProgress, buf: Bytes, base: int, end: int) -> None:
        assert self._codec is not None
        size = self._codec.scalars[array.element_type].size
        what = f"the elements of {array.label}"
        if array.keep:
            self._need(self.consumed, array.remaining * size, end, what)
            code = self._codec.prefix + str(array.remaining) + SCALAR_CODES[array.element_type]
            array.values.extend(struct.unpack_from(code, buf, self.consumed - base))
            take = array.remaining
        else:
            # Only the count is kept, so skip whatever whole elements are here without looking at them.
            take = min(array.remaining, (end - self.consumed) // size)
        array.done += take
        self.consumed += take * size
        if array.remaining:
            raise _NeedMore(self.consumed + size, what)

    def _read_kept_strings(self, array: _ArrayProgress, buf: Bytes, base: int, end: int) -> None:
        while array.remaining:
            what = array.next_element()
            value, pos = self._read_string(buf, base, end, self.consumed, self.limits.max_string_bytes, what)
            array.values.append(value)
            array.done += 1
            self.consumed = pos

    def _skip_strings(self, array: _ArrayProgress, buf: Bytes, base: int, end: int) -> None:
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
        self, array: _ArrayProgress, buf: Bytes, base: int, end: int, count: int
    ) -> None:
        assert self._codec is not None
        for _ in range(count):
            what = array.next_element()
            size = self._read_int(buf, base, end, self.consumed, self._codec.u64, what)
            self._need(self.consumed + 8, size, end, what)
            array.done += 1
            self.consumed += 8 + size

    # -- tensor infos

    def _read_tensor(self, buf: Bytes, base: int, end: int) -> None:
        assert self._codec is not None
        start = self.consumed
        name_what = f"the name of tensor #{len(self._tensors)}"
        name, pos = self._read_string(buf, base, end, start, self.limits.max_name_bytes, name_what)
        if name in self._tensor_names:
            raise DuplicateTensor(f"duplicate tensor {quote(name)} at offset {start}", offset=start)
        what = f"the info of tensor {quote(name)}"
        n_dims = self._read_int(buf, base, end, pos, self._codec.u32, what)
        if n_dims > GGML_MAX_DIMS:
            message = (
                f"tensor {quote(name)} has {n_dims} dimensions, more than {GGML_MAX_DIMS} (offset {pos})"
            )
            raise TooManyDims(message, offset=pos)
        pos += 4
        self._need(pos, 8 * n_dims + 12, end, what)
        dims: tuple[int, ...] = struct.unpack_from(f"{self._codec.prefix}{n_dims}Q", buf, pos - base)
        raw_type, offset = struct.unpack_from(self._codec.prefix + "IQ", buf, pos + 8 * n_dims - base)
        ggml_type = tensor_type(raw_type, name, pos + 8 * n_dims)
        nbytes = tensor_nbytes(name, dims, ggml_type, start)
        self._check_tensor_offset(name, offset, nbytes, start)
        self._tensors.append(TensorInfo(name, dims, ggml_type.name, offset, nbytes))
        self._tensor_names.add(name)
        self.consumed = pos + 8 * n_dims + 12

    def _check_tensor_offset(self, name: str, offset: int, nbytes: int, start: int) -> None:
        if offset % self._alignment:
            alignment = self._alignment
            message = (
                f"tensor {quote(name)} data offset {offset} is not a multiple of the alignment {alignment}"
            )
            raise BadTensorOffset(message, offset=start)
        if offset + nbytes > INT64_MAX:
            message = f"tensor {quote(name)} data ({offset} + {nbytes} bytes) ends past 2**63-1"
            raise BadTensorOffset(message, offset=start)

    def _finish_header(self) -> None:
        assert self._codec is not None and self._kv_end is not None
        check_overlaps(self._tensors)
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


def byte_view(data: Bytes) -> memoryview:
    view = memoryview(data)
    return view if view.format == "B" and view.ndim == 1 else view.cast("B")
