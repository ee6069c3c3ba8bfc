"""The GGUF header parser's errors (gguf_parser.py): one class per way a header is bad, each with a code."""

from __future__ import annotations


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
