"""Pure: OTLP trace export bodies -> the ``stage.openai_decode`` spans meshdash stores as reports.

Decodes OTLP/protobuf and OTLP/JSON (hex trace and span ids, per the OTLP spec), gunzips with the
decompressed size capped, and maps the span attributes mesh-llm sets (docs/node-report.md section 4) to a
typed ``DecodeSpan``. Every other span, and a decode span missing what a report needs, is counted as
rejected with a reason, for the OTLP partial-success answer. No Django and no I/O here.

Cost per byte is bounded before anything is parsed (``Budget``): protobuf's parser builds every
message of a body at once (an 8 KB gzip of empty spans inflates to 8 MiB, four million spans and
~700 MB), and has no element limit of its own, so the body is first walked on the wire format with the
message's descriptor, counting spans and fields, and refused past the caps; a body may inflate only
so many times its compressed size, and the work allowed grows with the bytes sent. JSON is bounded
the same way, by the budget every parser of node input shares (packages_app.input_budget): every value
counted, the items of an array of scalars included (bytes.count runs at C speed), before json.loads.
"""

from __future__ import annotations

import base64
import binascii
import math
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from packages_app import input_budget
from packages_app.input_budget import InputBudget, OverBudget

DECODE_SPAN = "stage.openai_decode"
MAX_BODY_BYTES = 8 * 1024 * 1024  # compressed or not; a 512-span export is about 0.5 MiB
# Per export. An OpenTelemetry exporter sends 512 spans a batch by default; mesh-llm's decode span
# carries ~15 attributes (~70 protobuf fields a span).
MAX_SPANS = 2048
MAX_FIELDS = 200_000  # protobuf fields, or JSON values (the items of arrays too), in one export
MAX_DEPTH = 32  # nested messages (AnyValue arrays and kvlists nest); real spans nest 7 deep
# OTLP/JSON writes a message as an object and a repeated field as an array: two levels a message.
MAX_JSON_DEPTH = 2 * MAX_DEPTH
# A body inflates at most INFLATE_RATIO times its compressed size (real OTLP gzips 10-45x), and is
# worth at most FIELDS_PER_BYTE fields per byte sent; below the floors, every body is allowed them.
INFLATE_RATIO = 100
INFLATE_FLOOR = 1024 * 1024
FIELDS_PER_BYTE = 16
FIELDS_FLOOR = 50_000
MAX_ATTRIBUTES = 512
MAX_STRING = 200
MAX_ARRAY = 256

RUN_ID = "skippy.run_id"
STAGE_ID = "skippy.stage_id"
REQUESTED = "llama_stage.spec.requested_strategy"
EFFECTIVE = "llama_stage.spec.effective_strategy"
ELAPSED_MS = "llama_stage.elapsed_ms"
# Decoded tokens: the embedded/split decode span sets llama_stage.decode_token_count (its
# EmbeddedDecodeSummary); the request summary spans name the completion's llama_stage.completion_token_count.
TOKEN_COUNTS = ("llama_stage.decode_token_count", "llama_stage.completion_token_count")
REQUIRED = (RUN_ID, EFFECTIVE)

# Span attribute -> the timings key a response would carry for the same counter (docs/node-report.md 1.1).
TIMINGS_FROM_ATTRIBUTES = {
    "llama_stage.native_mtp.drafted": "native_mtp_drafted",
    "llama_stage.native_mtp.accepted": "native_mtp_accepted",
    "llama_stage.native_mtp.rejected": "native_mtp_rejected",
    "llama_stage.native_mtp.verifications": "native_mtp_verifications",
    "llama_stage.spec.windows": "speculative_windows",
    "llama_stage.spec.proposed": "speculative_proposed_n",
    "llama_stage.spec.accepted": "speculative_accepted_n",
    "llama_stage.spec.rejected": "speculative_rejected_n",
    "llama_stage.spec.accept_rate": "speculative_accept_rate",
    ELAPSED_MS: "predicted_ms",
}

JsonValue = None | bool | int | float | str | list[Any] | dict[str, Any]


class OtlpError(ValueError):
    """A body that is not an OTLP trace export at all (refused whole, 400 / INVALID_ARGUMENT)."""


class OtlpTooLarge(OtlpError):
    """A body over a cap: its bytes, inflated bytes, spans or fields (413 / RESOURCE_EXHAUSTED)."""


@dataclass(frozen=True)
class Budget:
    """What one export may cost, from the bytes the client sent (compressed, when it was)."""

    sent_bytes: int

    @property
    def inflated_bytes(self) -> int:
        return min(MAX_BODY_BYTES, max(INFLATE_FLOOR, INFLATE_RATIO * self.sent_bytes))

    @property
    def fields(self) -> int:
        return min(MAX_FIELDS, max(FIELDS_FLOOR, FIELDS_PER_BYTE * self.sent_bytes))

    def json_budget(self) -> InputBudget:
        """The same budget as the shared one every JSON parser of node input checks."""
        return InputBudget("The export", self.inflated_bytes, self.fields, MAX_JSON_DEPTH)


@dataclass(frozen=True)
class DecodeSpan:
    """One ``stage.openai_decode`` span: a decode the node ran, with the plan it ran."""

    trace_id: str
    span_id: str
    run_id: str
    stage_id: str
    requested_strategy: str
    effective_strategy: str
    ended_at: datetime | None  # None: no plausible timestamp; the receive time stands in
    attributes: dict[str, JsonValue]

    @property
    def key(self) -> str:
        """What makes a span unique (OTLP: span ids are unique within a trace)."""
        return f"{self.trace_id}:{self.span_id}"

    def timings(self) -> dict[str, JsonValue]:
        """The span's counters under the names a response's ``timings`` uses."""
        out = {
            name: self.attributes[attr]
            for attr, name in TIMINGS_FROM_ATTRIBUTES.items()
            if attr in self.attributes
        }
        tokens = next((self.attributes[a] for a in TOKEN_COUNTS if a in self.attributes), None)
        if isinstance(tokens, int) and not isinstance(tokens, bool):
            out["predicted_n"] = tokens
            out["predicted_per_second"] = _rate(tokens, out.get("predicted_ms"))
        spec_on = _number(out.get("speculative_windows")) > 0
        draft = ("speculative_proposed_n", "speculative_accepted_n")
        mtp = ("native_mtp_drafted", "native_mtp_accepted")
        for target, source in zip(("draft_n", "draft_n_accepted"), draft if spec_on else mtp, strict=True):
            if source in out:
                out[target] = out[source]
        return out


@dataclass
class SpanBatch:
    """The decode spans of one export, and how many spans were rejected and why."""

    spans: list[DecodeSpan] = field(default_factory=list)
    rejected: int = 0
    reasons: dict[str, int] = field(default_factory=dict)

    def reject(self, reason: str) -> None:
        self.rejected += 1
        self.reasons[reason] = self.reasons.get(reason, 0) + 1

    def message(self) -> str:
        """The partial-success error_message: each reason once, with its count."""
        return "; ".join(f"{count} {reason}" for reason, count in sorted(self.reasons.items()))


def response_for(
    batch: SpanBatch, *, rejected_extra: int = 0, extra_reason: str = ""
) -> ExportTraceServiceResponse:
    """An OTLP export response; partial_success is set only when something was rejected."""
    response = ExportTraceServiceResponse()
    rejected = batch.rejected + rejected_extra
    if rejected:
        response.partial_success.rejected_spans = rejected
        response.partial_success.error_message = "; ".join(m for m in (batch.message(), extra_reason) if m)
    return response


# --- Bodies -----------------------------------------------------------------------------------


def gunzip_capped(raw: bytes, limit: int | None = None) -> bytes:
    """Inflate a gzip body, stopping at ``limit`` bytes (by default the budget of its compressed size):
    a decompression bomb is refused, not inflated."""
    limit = Budget(len(raw)).inflated_bytes if limit is None else limit
    inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    try:
        out = inflater.decompress(raw, limit + 1)
    except zlib.error as exc:
        raise OtlpError(f"The gzip body is corrupt ({exc}).") from None
    if len(out) > limit or inflater.unconsumed_tail:
        raise OtlpTooLarge(
            f"The body inflates past {limit} bytes ({INFLATE_RATIO} times its compressed size, at least "
            f"{INFLATE_FLOOR // (1024 * 1024)} MiB, at most {MAX_BODY_BYTES // (1024 * 1024)} MiB)."
        )
    if not inflater.eof:
        raise OtlpError("The gzip body is truncated.")
    return out


def parse_export(raw: bytes, content_type: str, budget: Budget | None = None) -> ExportTraceServiceRequest:
    """An ExportTraceServiceRequest from OTLP/protobuf or OTLP/JSON bytes, within the budget."""
    budget = budget or Budget(len(raw))
    if content_type == "application/x-protobuf":
        return parse_protobuf(raw, budget)
    if content_type == "application/json":
        return _parse_json(raw, budget)
    raise OtlpError("Content-Type must be application/x-protobuf or application/json.")


def span_count(request: ExportTraceServiceRequest) -> int:
    """Every span of a parsed export, decode spans or not (what the node's span rate limit counts)."""
    return sum(len(scope.spans) for resource in request.resource_spans for scope in resource.scope_spans)


def parse_protobuf(raw: bytes, budget: Budget | None = None) -> ExportTraceServiceRequest:
    _WireCount(raw, (budget or Budget(len(raw))).fields).spans()  # refuses before protobuf builds it
    request = ExportTraceServiceRequest()
    try:
        request.ParseFromString(raw)
    except (DecodeError, RecursionError, ValueError):
        raise OtlpError("The body is not a valid OTLP ExportTraceServiceRequest protobuf.") from None
    return request


def _load_json(raw: bytes, budget: Budget) -> Any:
    # Every value (an item of an array of scalars too) becomes a Python object, then a protobuf field.
    try:
        data = input_budget.load_json(raw, budget.json_budget())
    except OverBudget as exc:
        raise OtlpTooLarge(exc.message) from None
    except ValueError as exc:
        raise OtlpError(f"The body is not a valid OTLP/JSON trace export ({_short(exc)}).") from None
    if not isinstance(data, dict):
        raise OtlpError("The body is not a valid OTLP/JSON trace export (expected an object).")
    return data


def _json_span_count(data: Any) -> int:
    try:
        count = sum(1 for _ in _json_spans(data))
    except ValueError as exc:
        raise OtlpError(f"The body is not a valid OTLP/JSON trace export ({_short(exc)}).") from None
    if count > MAX_SPANS:
        raise OtlpTooLarge(f"An export may hold at most {MAX_SPANS} spans; split it.")
    return count


def _parse_json(raw: bytes, budget: Budget) -> ExportTraceServiceRequest:
    data = _load_json(raw, budget)
    _json_span_count(data)
    try:
        _ids_hex_to_base64(data)
        request = ExportTraceServiceRequest()
        json_format.ParseDict(data, request, ignore_unknown_fields=True)
        return request
    except (ValueError, RecursionError, TypeError, AttributeError, json_format.ParseError) as exc:
        raise OtlpError(f"The body is not a valid OTLP/JSON trace export ({_short(exc)}).") from None


def _ids_hex_to_base64(data: Any) -> None:
    # OTLP/JSON writes trace and span ids as hex; protobuf's JSON mapping expects base64 bytes.
    for span in _json_spans(data):
        for key in ("traceId", "spanId", "parentSpanId", "trace_id", "span_id", "parent_span_id"):
            if isinstance(span.get(key), str):
                span[key] = _hex_to_base64(span[key], key)


def _json_spans(data: Any) -> Iterator[dict[str, Any]]:
    for resource in _list(data, "resourceSpans", "resource_spans"):
        for scope in _list(resource, "scopeSpans", "scope_spans"):
            for span in _list(scope, "spans"):
                if isinstance(span, dict):
                    yield span


def _list(data: Any, *keys: str) -> list[Any]:
    if not isinstance(data, dict):
        raise ValueError("expected an object")
    for key in keys:
        value = data.get(key)
        if isinstance(value, list):
            return value
    return []


def _hex_to_base64(value: str, key: str) -> str:
    try:
        return base64.b64encode(bytes.fromhex(value)).decode()
    except ValueError:
        raise ValueError(f"{key} must be hex") from None


class _WireCount:
    """Walks protobuf wire format with the messages' descriptors, counting spans and fields.

    Costs a few Python steps per field and allocates nothing per element, so an export that would
    cost hundreds of MB to parse is refused after at most ``fields`` steps.
    """

    def __init__(self, raw: bytes, fields: int) -> None:
        self.raw, self.budget, self.fields, self.count = raw, fields, 0, 0

    def spans(self) -> int:
        self._message(0, len(self.raw), ExportTraceServiceRequest.DESCRIPTOR, 0)
        return self.count

    def _message(self, pos: int, end: int, descriptor: Any, depth: int) -> None:
        if depth > MAX_DEPTH:
            raise OtlpError(f"The export nests messages more than {MAX_DEPTH} deep.")
        while pos < end:
            self.fields += 1
            if self.fields > self.budget:
                raise OtlpTooLarge(f"The export holds more than {self.budget} protobuf fields.")
            tag, pos = self._varint(pos, end)
            wire = tag & 7
            if wire == 0:
                pos = self._varint(pos, end)[1]
            elif wire in (1, 5):
                pos += 8 if wire == 1 else 4
            elif wire == 2:
                length, pos = self._varint(pos, end)
                if pos + length > end:
                    raise OtlpError(_NOT_PROTOBUF)
                self._field(pos, pos + length, descriptor.fields_by_number.get(tag >> 3), depth)
                pos += length
            else:
                raise OtlpError(_NOT_PROTOBUF)  # groups (3, 4) are not in OTLP; 6, 7 do not exist
        if pos != end:
            raise OtlpError(_NOT_PROTOBUF)

    def _field(self, pos: int, end: int, field: Any, depth: int) -> None:
        message = field.message_type if field is not None else None
        if message is None:
            # bytes, a string or an unknown field: its length bounds it. (A repeated string, such as
            # EntityRef.id_keys, is one field per item, each counted above; trace messages have no
            # packed scalar arrays.)
            return
        if message is Span.DESCRIPTOR:
            self.count += 1
            if self.count > MAX_SPANS:
                raise OtlpTooLarge(f"An export may hold at most {MAX_SPANS} spans; split it.")
        self._message(pos, end, message, depth + 1)

    def _varint(self, pos: int, end: int) -> tuple[int, int]:
        value = shift = 0
        while pos < end and shift < 70:
            byte = self.raw[pos]
            pos += 1
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return value, pos
            shift += 7
        raise OtlpError(_NOT_PROTOBUF)


_NOT_PROTOBUF = "The body is not a valid OTLP ExportTraceServiceRequest protobuf."


def _short(exc: Exception) -> str:
    return str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__


# --- Spans ------------------------------------------------------------------------------------


def decode_spans(request: ExportTraceServiceRequest) -> SpanBatch:
    """Every ``stage.openai_decode`` span of the export; the rest counted as rejected, with reasons."""
    batch = SpanBatch()
    for resource_spans in request.resource_spans:
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                _take(span, batch)
    return batch


def _take(span: Span, batch: SpanBatch) -> None:
    if span.name != DECODE_SPAN:
        batch.reject(f"span(s) other than {DECODE_SPAN} ignored")
        return
    if len(span.trace_id) != 16 or len(span.span_id) != 8 or not any(span.span_id):
        batch.reject(f"{DECODE_SPAN} span(s) without a valid trace and span id")
        return
    attributes = _attributes(span)
    missing = [name for name in REQUIRED if not isinstance(attributes.get(name), str) or not attributes[name]]
    if missing:
        batch.reject(f"{DECODE_SPAN} span(s) missing {', '.join(missing)}")
        return
    batch.spans.append(_decode_span(span, attributes))


def _decode_span(span: Span, attributes: dict[str, JsonValue]) -> DecodeSpan:
    return DecodeSpan(
        trace_id=binascii.hexlify(span.trace_id).decode(),
        span_id=binascii.hexlify(span.span_id).decode(),
        run_id=_text(attributes.get(RUN_ID)),
        stage_id=_text(attributes.get(STAGE_ID)),
        requested_strategy=_text(attributes.get(REQUESTED))[:64],
        effective_strategy=_text(attributes.get(EFFECTIVE))[:64],
        ended_at=_timestamp(span.end_time_unix_nano or span.start_time_unix_nano),
        attributes=attributes,
    )


def _attributes(span: Span) -> dict[str, JsonValue]:
    return {kv.key[:MAX_STRING]: any_value(kv.value) for kv in span.attributes[:MAX_ATTRIBUTES]}


def any_value(value: AnyValue, depth: int = 0) -> JsonValue:
    """An OTLP AnyValue as a storable JSON value (strings and arrays capped, NaN and inf as null)."""
    kind = value.WhichOneof("value")
    if kind == "string_value":
        return _storable(value.string_value)
    if kind in ("bool_value", "int_value"):
        return getattr(value, kind)  # type: ignore[no-any-return]
    if kind == "double_value":
        return value.double_value if math.isfinite(value.double_value) else None
    if kind == "array_value" and depth < 4:
        return [any_value(item, depth + 1) for item in value.array_value.values[:MAX_ARRAY]]
    if kind == "kvlist_value" and depth < 4:
        items = value.kvlist_value.values[:MAX_ARRAY]
        return {_storable(kv.key): any_value(kv.value, depth + 1) for kv in items}
    if kind == "bytes_value":
        return value.bytes_value[:MAX_STRING].hex()
    return None


def _storable(text: str) -> str:
    # PostgreSQL cannot store NUL; protobuf strings are valid UTF-8, so no lone surrogates.
    return text[:MAX_STRING].replace("\x00", "?")


def _text(value: JsonValue) -> str:
    return value if isinstance(value, str) else ""


def _timestamp(nanos: int) -> datetime | None:
    seconds = nanos / 1e9
    if not 946_684_800 <= seconds <= 4_102_444_800:  # 2000..2100, as for report timestamps
        return None
    return datetime.fromtimestamp(seconds, UTC)


def _number(value: JsonValue) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


def _rate(tokens: int, elapsed_ms: JsonValue) -> float | None:
    ms = _number(elapsed_ms)
    return tokens * 1000.0 / ms if ms > 0 else None


def bearer_token(headers: Mapping[str, str]) -> str:
    """The token of an ``Authorization: Bearer`` header (any case), or ``""``."""
    value = next((v for k, v in headers.items() if k.lower() == "authorization"), "")
    scheme, _, token = value.partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""
