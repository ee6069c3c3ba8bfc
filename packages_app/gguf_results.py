"""What the GGUF header parser (gguf_parser.py) returns: the header, its tensors and array summaries, and the
limits it parses under; each turns into docs/design.md's header JSON."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

from gguf.constants import Keys

MiB: Final = 1024 * 1024


@dataclass(frozen=True)
class HeaderLimits:
    """Caps that keep hostile headers from costing unbounded time or memory."""

    max_header_bytes: int = 64 * MiB  # tensor infos must end by this offset
    # A materialised string value: chat templates, or a whole tokenizer.huggingface.json in old files.
    max_string_bytes: int = 16 * MiB
    max_name_bytes: int = 64 * 1024  # a key or tensor name
    max_kv_count: int = 8192
    max_tensor_count: int = 65536
    max_array_count: int = 1 << 24
    keep_array_values: int = 64  # arrays with at most this many elements keep their values


DEFAULT_LIMITS: Final = HeaderLimits()


@dataclass(frozen=True, slots=True)
class ArraySummary:
    element_type: str  # GGUFValueType name, e.g. "STRING"
    count: int
    values: list[object] | None = None  # kept for arrays of at most HeaderLimits.keep_array_values elements

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
