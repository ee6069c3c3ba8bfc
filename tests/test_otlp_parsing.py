"""nodes/otlp.py (pure): what a node's trace export becomes before anything is stored, with no database.

The spans are the ones mesh-llm emits (docs/node-report.md section 4: ``stage.openai_decode`` with the
strategy, run and stage attributes, native-MTP or speculative counters) in both encodings, gzip or not;
each malformed or oversized body is refused with a sentence naming what is wrong, and each span that cannot
become a report is counted with its reason for the partial-success answer.
"""

from __future__ import annotations

import base64
import gzip
import json
import math
import random
from typing import Any

import pytest
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, KeyValue, KeyValueList
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

from packages_app.devnode import payloads
from packages_app.nodes import otlp
from packages_app.nodes.otlp import Budget, OtlpError, OtlpTooLarge

REPO = "meshllm/Qwen3.5-35B-A3B-UD-Q4_K_XL-layers"
MTP_PLAN = payloads.RunPlan(repo=REPO, run_id="run-7", requested_strategy="auto")
NGRAM_PLAN = payloads.RunPlan(
    repo=REPO, run_id="run-8", requested_strategy="ngram-cache", effective_strategy="ngram-cache"
)
NO_SPEC_PLAN = payloads.RunPlan(
    repo=REPO, run_id="run-9", requested_strategy="disabled", effective_strategy="disabled"
)


def decode_span(plan: payloads.RunPlan = MTP_PLAN, seed: int = 1, **overrides: Any) -> Span:
    rng = random.Random(seed)
    measured = payloads.decode(plan, rng, 128)
    attributes = payloads.span_attributes(plan, measured, "stage-0") | overrides
    return payloads.decode_span(attributes, rng, measured.predicted_ms)


def export(*spans: Span) -> ExportTraceServiceRequest:
    return payloads.export_request(list(spans))


def as_otlp_json(request: ExportTraceServiceRequest) -> dict[str, Any]:
    """OTLP/JSON as an exporter writes it: camelCase keys, trace and span ids in hex."""
    data = json_format.MessageToDict(request)
    for resource in data["resourceSpans"]:
        for scope in resource["scopeSpans"]:
            for span in scope["spans"]:
                for key in ("traceId", "spanId"):
                    span[key] = base64.b64decode(span[key]).hex()
    return data


# --- Spans of each kind nodes emit ------------------------------------------------------------


def test_a_native_mtp_decode_span_becomes_a_decode_with_its_plan_and_mtp_counters() -> None:
    span = decode_span(MTP_PLAN)
    batch = otlp.decode_spans(otlp.parse_export(export(span).SerializeToString(), "application/x-protobuf"))
    assert batch.rejected == 0 and batch.message() == ""
    [decode] = batch.spans
    assert (decode.run_id, decode.stage_id) == ("run-7", "stage-0")
    assert (decode.requested_strategy, decode.effective_strategy) == ("auto", "native-mtp")
    assert decode.key == f"{span.trace_id.hex()}:{span.span_id.hex()}"
    assert decode.ended_at is not None and decode.ended_at.timestamp() == pytest.approx(
        span.end_time_unix_nano / 1e9
    )
    timings = decode.timings()
    attrs = decode.attributes
    assert timings["predicted_n"] == attrs["llama_stage.decode_token_count"]
    assert timings["predicted_ms"] == attrs["llama_stage.elapsed_ms"]
    expected_rate = timings["predicted_n"] * 1000.0 / attrs["llama_stage.elapsed_ms"]
    assert timings["predicted_per_second"] == pytest.approx(expected_rate)
    # no speculative windows: the draft counts are native MTP's
    assert timings["draft_n"] == attrs["llama_stage.native_mtp.drafted"]
    assert timings["draft_n_accepted"] == attrs["llama_stage.native_mtp.accepted"]


def test_an_ngram_decode_span_takes_its_draft_counts_from_the_speculative_counters() -> None:
    [decode] = otlp.decode_spans(export(decode_span(NGRAM_PLAN))).spans
    timings, attrs = decode.timings(), decode.attributes
    assert decode.effective_strategy == "ngram-cache"
    assert timings["speculative_windows"] == attrs["llama_stage.spec.windows"] > 0
    assert timings["draft_n"] == attrs["llama_stage.spec.proposed"]
    assert timings["draft_n_accepted"] == attrs["llama_stage.spec.accepted"]
    assert timings["speculative_accept_rate"] == pytest.approx(attrs["llama_stage.spec.accept_rate"])


def test_a_decode_without_speculation_has_no_draft_counts() -> None:
    [decode] = otlp.decode_spans(export(decode_span(NO_SPEC_PLAN))).spans
    timings = decode.timings()
    assert decode.effective_strategy == "disabled"
    assert "draft_n" not in timings and "draft_n_accepted" not in timings
    assert timings["predicted_n"] > 0


def test_the_request_summary_token_count_stands_in_and_a_zero_elapsed_time_gives_no_rate() -> None:
    span = decode_span(NO_SPEC_PLAN)
    kept = [kv for kv in span.attributes if kv.key != "llama_stage.decode_token_count"]
    del span.attributes[:]
    span.attributes.extend(kept)
    span.attributes.append(KeyValue(key="llama_stage.completion_token_count", value=AnyValue(int_value=9)))
    span.attributes.append(KeyValue(key="llama_stage.elapsed_ms", value=AnyValue(int_value=0)))
    [decode] = otlp.decode_spans(export(span)).spans
    timings = decode.timings()
    assert timings["predicted_n"] == 9 and timings["predicted_per_second"] is None


def test_a_token_count_that_is_not_an_integer_is_left_out() -> None:
    span = decode_span(NO_SPEC_PLAN, **{"llama_stage.decode_token_count": True})
    [decode] = otlp.decode_spans(export(span)).spans
    assert "predicted_n" not in decode.timings() and "predicted_per_second" not in decode.timings()


def test_a_span_with_no_plausible_time_falls_back_to_its_start_then_to_none() -> None:
    span = decode_span()
    span.end_time_unix_nano = 0
    [decode] = otlp.decode_spans(export(span)).spans
    assert decode.ended_at is not None
    assert decode.ended_at.timestamp() == pytest.approx(span.start_time_unix_nano / 1e9)
    span.start_time_unix_nano = 5  # 1970: not a time a node measured
    [decode] = otlp.decode_spans(export(span)).spans
    assert decode.ended_at is None


def test_attribute_values_of_every_kind_become_storable_json() -> None:
    nested = AnyValue(kvlist_value=KeyValueList(values=[KeyValue(key="k\x00", value=AnyValue(int_value=1))]))
    deep = AnyValue(string_value="bottom")
    for _ in range(6):
        deep = AnyValue(array_value=ArrayValue(values=[deep]))
    values = {
        "text": AnyValue(string_value="a\x00b" + "x" * 500),
        "flag": AnyValue(bool_value=True),
        "count": AnyValue(int_value=-3),
        "rate": AnyValue(double_value=0.5),
        "nan": AnyValue(double_value=math.nan),
        "inf": AnyValue(double_value=math.inf),
        "list": AnyValue(array_value=ArrayValue(values=[AnyValue(int_value=i) for i in range(300)])),
        "map": nested,
        "deep": deep,
        "bytes": AnyValue(bytes_value=b"\x01\xff"),
        "unset": AnyValue(),
    }
    span = decode_span()
    span.attributes.extend(KeyValue(key=key, value=value) for key, value in values.items())
    [decode] = otlp.decode_spans(export(span)).spans
    got = decode.attributes
    assert got["text"] == "a?b" + "x" * (otlp.MAX_STRING - 3)  # NUL replaced, capped
    assert (got["flag"], got["count"], got["rate"]) == (True, -3, 0.5)
    assert got["nan"] is None and got["inf"] is None  # JSON has no NaN: stored as null
    assert got["list"] == list(range(otlp.MAX_ARRAY))
    assert got["map"] == {"k?": 1}
    assert got["deep"] == [[[[None]]]]  # four levels kept, deeper dropped
    assert got["bytes"] == "01ff" and got["unset"] is None


def test_a_span_keeps_at_most_its_attribute_cap() -> None:
    span = decode_span()
    span.attributes.extend(
        KeyValue(key=f"extra.{i}", value=AnyValue(int_value=i)) for i in range(otlp.MAX_ATTRIBUTES)
    )
    [decode] = otlp.decode_spans(export(span)).spans
    assert len(decode.attributes) == otlp.MAX_ATTRIBUTES


# --- Spans that cannot become a report: counted, with the reason ------------------------------


def test_spans_that_cannot_become_reports_are_counted_by_reason() -> None:
    other = Span(name="stage.prefill", trace_id=b"t" * 16, span_id=b"s" * 8)
    no_ids = decode_span(seed=2)
    no_ids.span_id = bytes(8)  # an all-zero span id is invalid in OTLP
    short_trace = decode_span(seed=3)
    short_trace.trace_id = b"abc"
    no_run = decode_span(seed=4)
    kept = [kv for kv in no_run.attributes if kv.key != otlp.RUN_ID]
    del no_run.attributes[:]
    no_run.attributes.extend(kept)
    empty_effective = decode_span(seed=5, **{otlp.EFFECTIVE: ""})
    batch = otlp.decode_spans(
        export(other, no_ids, short_trace, no_run, empty_effective, decode_span(seed=6))
    )
    assert len(batch.spans) == 1 and batch.rejected == 5
    assert batch.message() == (
        "1 span(s) other than stage.openai_decode ignored; "
        "1 stage.openai_decode span(s) missing llama_stage.spec.effective_strategy; "
        "1 stage.openai_decode span(s) missing skippy.run_id; "
        "2 stage.openai_decode span(s) without a valid trace and span id"
    )
    response = otlp.response_for(batch, rejected_extra=2, extra_reason="2 spans over the node's rate limit")
    assert response.partial_success.rejected_spans == 7
    assert response.partial_success.error_message.endswith("; 2 spans over the node's rate limit")


def test_an_export_with_every_span_taken_answers_without_partial_success() -> None:
    batch = otlp.decode_spans(export(decode_span(), decode_span(seed=2)))
    assert len(batch.spans) == 2
    assert not otlp.response_for(batch).HasField("partial_success")
    only_extra = otlp.response_for(batch, rejected_extra=1, extra_reason="1 span over the limit")
    assert only_extra.partial_success.error_message == "1 span over the limit"


def test_span_count_counts_every_span_of_every_resource_and_scope() -> None:
    request = export(decode_span(), Span(name="other"))
    request.resource_spans.append(
        ResourceSpans(scope_spans=[ScopeSpans(spans=[Span(name="x")]), ScopeSpans()])
    )
    assert otlp.span_count(request) == 3


# --- Bodies: the encodings, gzip, and what is refused ----------------------------------------


def test_otlp_json_with_hex_ids_parses_to_the_same_spans_as_protobuf() -> None:
    request = export(decode_span(), decode_span(NGRAM_PLAN, seed=2))
    body = json.dumps(as_otlp_json(request)).encode()
    parsed = otlp.parse_export(body, "application/json")
    assert parsed == request
    assert [s.key for s in otlp.decode_spans(parsed).spans] == [
        s.key for s in otlp.decode_spans(request).spans
    ]


def test_otlp_json_with_snake_case_keys_and_stray_items_is_accepted() -> None:
    span = {
        "trace_id": "0f" * 16,
        "span_id": "0e" * 8,
        "name": otlp.DECODE_SPAN,
        "attributes": [
            {"key": otlp.RUN_ID, "value": {"stringValue": "run-1"}},
            {"key": otlp.EFFECTIVE, "value": {"stringValue": "native-mtp"}},
        ],
    }
    body = {"resource_spans": [{"scope_spans": [{"spans": [span]}], "resource": {}}], "futureField": 1}
    [decode] = otlp.decode_spans(otlp.parse_export(json.dumps(body).encode(), "application/json")).spans
    assert (decode.trace_id, decode.span_id, decode.run_id) == ("0f" * 16, "0e" * 8, "run-1")
    assert decode.requested_strategy == "" and decode.stage_id == ""


def test_a_gzip_body_inflates_to_the_export() -> None:
    raw = export(decode_span()).SerializeToString()
    assert otlp.gunzip_capped(gzip.compress(raw)) == raw


@pytest.mark.parametrize(
    ("body", "message"),
    [
        pytest.param(b"not gzip at all", "The gzip body is corrupt", id="corrupt"),
        pytest.param(
            gzip.compress(b"x" * 1000, mtime=0)[:-12], "The gzip body is truncated.", id="truncated"
        ),
    ],
)
def test_a_broken_gzip_body_is_refused_naming_what_is_wrong(body: bytes, message: str) -> None:
    with pytest.raises(OtlpError, match=message) as refused:
        otlp.gunzip_capped(body)
    assert not isinstance(refused.value, OtlpTooLarge)


def test_a_decompression_bomb_is_refused_at_the_cap_not_inflated() -> None:
    bomb = gzip.compress(bytes(4 * 1024 * 1024))  # 4 KiB sent, 4 MiB inflated: over 100 times
    with pytest.raises(OtlpTooLarge, match="inflates past 1048576 bytes"):
        otlp.gunzip_capped(bomb)
    control = gzip.compress(bytes(4 * 1024 * 1024))
    assert (
        len(otlp.gunzip_capped(control, limit=4 * 1024 * 1024)) == 4 * 1024 * 1024
    )  # the cap is what refused
    with pytest.raises(OtlpTooLarge):
        otlp.gunzip_capped(gzip.compress(bytes(2000)), limit=1000)


def test_the_budget_grows_with_the_bytes_sent_between_its_floor_and_its_cap() -> None:
    small, huge = Budget(10), Budget(10**9)
    assert (small.inflated_bytes, small.fields) == (otlp.INFLATE_FLOOR, otlp.FIELDS_FLOOR)
    assert (Budget(20_000).inflated_bytes, Budget(5_000).fields) == (100 * 20_000, 16 * 5_000)
    assert (huge.inflated_bytes, huge.fields) == (otlp.MAX_BODY_BYTES, otlp.MAX_FIELDS)
    assert huge.json_budget().max_depth == otlp.MAX_JSON_DEPTH


def test_a_body_of_another_content_type_is_refused_naming_the_two_accepted() -> None:
    with pytest.raises(OtlpError, match="application/x-protobuf or application/json"):
        otlp.parse_export(b"{}", "text/plain")


def fixed32(number: int, value: int) -> bytes:
    return bytes([number << 3 | 5]) + value.to_bytes(4, "little")


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(bytes([0x0B]), id="a group (wire type 3)"),
        pytest.param(bytes([0x0E]), id="wire type 6"),
        pytest.param(bytes([0x0A, 0x05, 0x01]), id="a length past the end"),
        pytest.param(bytes([0x08, 0x80]), id="a truncated varint"),
        pytest.param(bytes([0x08]) + b"\xff" * 11, id="a varint over 10 bytes"),
        pytest.param(bytes([0x09, 0x01]), id="a fixed64 past the end"),
        pytest.param(
            payloads.length_delimited(1, payloads.length_delimited(3, b"\xff\xfe")),
            id="a schema_url not utf-8",
        ),
    ],
)
def test_a_body_that_is_not_an_otlp_protobuf_is_refused(body: bytes) -> None:
    with pytest.raises(OtlpError, match="not a valid OTLP ExportTraceServiceRequest protobuf") as refused:
        otlp.parse_protobuf(body)
    assert not isinstance(refused.value, OtlpTooLarge)


def test_wire_fields_of_every_kind_are_walked_and_unknown_fields_kept_out() -> None:
    span = decode_span()
    span.flags = 0x101  # fixed32 (wire type 5); the times are fixed64 (wire type 1)
    body = export(span).SerializeToString() + payloads.length_delimited(99, b"unknown field")
    parsed = otlp.parse_protobuf(body)
    assert otlp.span_count(parsed) == 1 and parsed.resource_spans[0].scope_spans[0].spans[0].flags == 0x101


def test_an_export_past_the_span_cap_is_refused_before_it_is_built() -> None:
    spans = b"".join(payloads.length_delimited(2, b"") for _ in range(otlp.MAX_SPANS + 1))  # empty spans
    body = payloads.length_delimited(1, payloads.length_delimited(2, spans))
    with pytest.raises(OtlpTooLarge, match=f"at most {otlp.MAX_SPANS} spans; split it"):
        otlp.parse_protobuf(body, Budget(10**9))
    control = payloads.length_delimited(1, payloads.length_delimited(2, spans[2:]))  # one span fewer
    assert otlp.span_count(otlp.parse_protobuf(control, Budget(10**9))) == otlp.MAX_SPANS


def test_an_export_past_the_field_budget_is_refused() -> None:
    body = bytes([0x08, 0x01]) * (otlp.FIELDS_FLOOR + 1)  # unknown varint fields of the request
    with pytest.raises(OtlpTooLarge, match=f"more than {otlp.FIELDS_FLOOR} protobuf fields"):
        otlp.parse_protobuf(body, Budget(10))
    assert otlp.span_count(otlp.parse_protobuf(body[2:], Budget(10))) == 0  # one field fewer passes


def test_messages_nested_past_the_depth_cap_are_refused() -> None:
    value = b""
    for _ in range(otlp.MAX_DEPTH):  # AnyValue.array_value (5) -> ArrayValue.values (1) -> AnyValue
        value = payloads.length_delimited(5, payloads.length_delimited(1, value))
    attribute = payloads.length_delimited(2, value)  # KeyValue.value
    span = payloads.length_delimited(9, attribute)  # Span.attributes
    body = payloads.length_delimited(1, payloads.length_delimited(2, payloads.length_delimited(2, span)))
    with pytest.raises(OtlpError, match=f"nests messages more than {otlp.MAX_DEPTH} deep"):
        otlp.parse_protobuf(body)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        pytest.param(b"{not json", "not a valid OTLP/JSON trace export", id="not json"),
        pytest.param(b"[]", r"\(expected an object\)", id="an array"),
        pytest.param(b'{"resourceSpans": ["x"]}', r"\(expected an object\)", id="a resource not an object"),
        pytest.param(
            b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "zz"}]}]}]}',
            r"\(traceId must be hex\)",
            id="an id not hex",
        ),
        pytest.param(
            b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"name": 5}]}]}]}',
            "not a valid OTLP/JSON trace export",
            id="a name not a string",
        ),
    ],
)
def test_a_json_body_that_is_not_an_otlp_export_is_refused_naming_why(body: bytes, message: str) -> None:
    with pytest.raises(OtlpError, match=message) as refused:
        otlp.parse_export(body, "application/json")
    assert not isinstance(refused.value, OtlpTooLarge)


def test_a_json_span_that_is_not_an_object_is_counted_as_rejected_not_a_crash() -> None:
    body = b'{"resourceSpans": [{"scopeSpans": [{"spans": ["x"]}]}]}'
    batch = otlp.decode_spans(otlp.parse_export(body, "application/json"))
    assert batch.spans == [] and batch.rejected == 1


def test_a_json_export_past_the_span_cap_or_the_value_budget_is_too_large() -> None:
    spans = [{}] * (otlp.MAX_SPANS + 1)
    body = json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}).encode()
    with pytest.raises(OtlpTooLarge, match="at most 2048 spans"):
        otlp.parse_export(body, "application/json", Budget(10**9))
    values = json.dumps({"x": [0] * otlp.FIELDS_FLOOR}).encode()  # with the object and the array: past it
    with pytest.raises(OtlpTooLarge, match="more than 50000 values"):
        otlp.parse_export(values, "application/json", Budget(10))
    fewer = json.dumps({"x": [0] * (otlp.FIELDS_FLOOR // 2)}).encode()
    assert otlp.parse_export(fewer, "application/json", Budget(10)) == ExportTraceServiceRequest()


# --- The node's token --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("headers", "token"),
    [
        ({"Authorization": "Bearer abc "}, "abc"),
        ({"authorization": "bearer abc"}, "abc"),
        ({"Authorization": "Basic abc"}, ""),
        ({"Content-Type": "application/json"}, ""),
    ],
)
def test_the_bearer_token_is_read_from_any_case_of_the_header(headers: dict[str, str], token: str) -> None:
    assert otlp.bearer_token(headers) == token
