"""What a hostile body costs each parser of untrusted input, against a well-formed body of the same size.

Issue 48: no input from a node, a visitor or the Hub may cost more than 5x the CPU of a well-formed body
of the same (inflated) size, and a refused body about what the protobuf path's refusal costs. For each parser
(node report batches, OTLP/JSON, OTLP/protobuf, Hub webhooks, model-package.json) this builds a well-formed
body, then the same adversarial shapes (arrays of empty strings, of zeros, of ``{}``, of ``[]``, and of
4-byte values, of 9-byte strings, the densest a JSON body's value budget lets through; arrays nested
5,000 deep) at that body's size, and
times each (CPU seconds of this process, the best of --runs, each pair measured side by side in one run):
parse, validate and decode, everything the edge does before storing. Then each shape filled to the parser's
byte cap (refused by the budget) against the reference: the protobuf path refusing the issue's body (500,000
empty ``entityRefs[].idKeys``, 1 MiB from ~1 KB of gzip).

    .venv/bin/python bench/bench_input_budget.py [--runs 3]

Ratios are per byte (a hostile body filled to the cap against the well-formed body's cost per byte). Exits
1 when a shape costs more than 5x its well-formed body, unless it was refused within the issue's 0.04 s (the
protobuf refusal it measured). No database, no network.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import gzip
import json
import os
import platform
import random
import sys
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "meshdash.settings")

import django  # noqa: E402

django.setup()

from google.protobuf import json_format  # noqa: E402

from packages_app import input_budget  # noqa: E402
from packages_app.devnode import payloads  # noqa: E402
from packages_app.manifest import parse_manifest  # noqa: E402
from packages_app.nodes import otlp  # noqa: E402
from packages_app.nodes.report_schema import BodyError, validate_batch, validate_report_body  # noqa: E402
from packages_app.web import api, webhooks  # noqa: E402

MAX_RATIO = 5.0
REFUSAL_CEILING = 0.04  # seconds: the protobuf path's refusal in the production-shaped run
DIGEST = "0123456789abcdef" * 4
SHA = "a" * 40
ITEMS = {
    "empty strings": b'""',
    "zeros": b"0",
    "empty objects": b"{}",
    "empty arrays": b"[]",
    "4-byte values": b"1.5",
    "9-byte strings": b'"abcdef"',  # one value per 9 bytes: past the JSON bodies' one per 8, accepted
}


# --- the parsers, as the edges run them before storing -------------------------------------------------


def parse_reports(raw: bytes) -> None:
    data = input_budget.load_json(raw, api.json_budget(api.MAX_BATCH_BYTES))
    for index, item in enumerate(validate_batch(data)):
        with contextlib.suppress(BodyError):  # one bad report is refused alone, as the batch endpoint does
            validate_report_body(item, f"reports.{index}")


def parse_otlp_json(raw: bytes) -> None:
    sent = gzip.compress(raw, 6)
    budget = otlp.Budget(len(sent))
    otlp.decode_spans(
        otlp.parse_export(otlp.gunzip_capped(sent, budget.inflated_bytes), "application/json", budget)
    )


def parse_otlp_protobuf(raw: bytes) -> None:
    sent = gzip.compress(raw, 6)
    budget = otlp.Budget(len(sent))
    inflated = otlp.gunzip_capped(sent, budget.inflated_bytes)
    otlp.decode_spans(otlp.parse_export(inflated, "application/x-protobuf", budget))


def parse_webhook(raw: bytes) -> None:
    with contextlib.suppress(webhooks.WebhookRejected):
        webhooks.parse_event(input_budget.load_json(raw, webhooks.BUDGET))


def parse_model_package(raw: bytes) -> None:
    codes = {problem.code for problem in parse_manifest(raw).problems}
    refused = codes & {"manifest_too_large", "too_deeply_nested"}
    if refused:
        raise ValueError(", ".join(sorted(refused)))  # parse_manifest never raises: its problems say it


# --- well-formed bodies ---------------------------------------------------------------------------------


def report(n: int) -> dict[str, Any]:
    """One report as meshdash-agent spools it (nodes/agent.py report_timings): a two-stage split."""
    plan = payloads.RunPlan(
        repo="meshllm/qwen3-layers", ref="main", run_id=f"run-{n}", requested_strategy="auto"
    )
    stages = [("node-a", 0, 27, "CUDA0"), ("node-b", 27, 41, "Metal")]
    return {
        "report_id": str(uuid.UUID(int=n)),
        "observed_at": datetime.now(UTC).isoformat(),
        "package": {"repo": "meshllm/qwen3-layers", "revision": SHA, "manifest_sha256": DIGEST},
        "topology": {
            "topology_id": f"topo-{n % 4}",
            "stages": [
                {"node": node, "layer_start": start, "layer_end": end, "device": device, "stage_index": index}
                for index, (node, start, end, device) in enumerate(stages)
            ],
        },
        "timings": payloads.timings(plan, payloads.decode(plan, random.Random(n), 256)),
    }


def well_formed_reports() -> bytes:
    return json.dumps({"reports": [report(n) for n in range(500)]}).encode()  # MAX_BATCH reports


def _export(count: int) -> Any:
    plan = payloads.RunPlan(
        repo="meshllm/qwen3-layers", ref="main", run_id="run-42", requested_strategy="auto"
    )
    rng = random.Random(1)
    spans = []
    for _ in range(count):
        measured = payloads.decode(plan, rng, 128)
        spans.append(
            payloads.decode_span(
                payloads.span_attributes(plan, measured, "stage-0"), rng, measured.predicted_ms
            )
        )
    return payloads.export_request(spans)


def well_formed_otlp_protobuf() -> bytes:
    return bytes(_export(512).SerializeToString())  # an exporter's default batch


def well_formed_otlp_json() -> bytes:
    data = json_format.MessageToDict(_export(512))
    for resource in data["resourceSpans"]:
        for scope in resource["scopeSpans"]:
            for span in scope["spans"]:
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:
                        span[key] = base64.b64decode(span[key]).hex()  # OTLP/JSON writes ids as hex
    return json.dumps(data).encode()


def well_formed_webhook() -> bytes:
    comment = (
        "The patched manifest audits to serves with MTP; merging it. " * 4000
    )  # a long discussion comment
    body = {
        "event": {"action": "create", "scope": "discussion.comment"},
        "repo": {"type": "model", "name": "meshllm/qwen3-layers", "id": "x", "headSha": SHA},
        "discussion": {"num": 7, "isPullRequest": True, "title": "Fix", "status": "open"},
        "comment": {"content": comment[: webhooks.MAX_BODY_BYTES - 2048], "author": {"id": "u"}},
    }
    return json.dumps(body).encode()


def well_formed_manifest() -> bytes:
    sys.path.insert(0, str(ROOT / "bench"))
    from bench_manifest import v2_manifest

    return v2_manifest(20_000)


# --- adversarial shapes ---------------------------------------------------------------------------------

# where each parser reads an array: prefix, suffix (JSON); the protobuf shapes are built on the wire
PLACES = {
    "reports": (b'{"reports": ', b"}"),
    "otlp-json": (b'{"resourceSpans": [{"resource": {"entityRefs": [{"idKeys": ', b"}]}}]}"),
    "webhook": (b'{"event": {"scope": "repo", "action": "update"}, "repo": ', b"}"),
    "model-package.json": (b'{"schema_version": 1, "layers": ', b"}"),
}


def filled(parser: str, item: bytes, size: int) -> bytes:
    prefix, suffix = PLACES[parser]
    count = max(1, (size - len(prefix) - len(suffix) - 2) // (len(item) + 1))
    return prefix + b"[" + b",".join([item] * count) + b"]" + suffix


def deep(parser: str, levels: int = 5_000) -> bytes:
    prefix, suffix = PLACES[parser]
    return prefix + b"[" * levels + b"]" * levels + suffix


_delimited = payloads.length_delimited


def protobuf_shape(shape: str, size: int) -> bytes:
    """The same shapes on the wire: repeated empty id_keys (strings), empty KeyValue attributes of one span
    (objects), empty spans (objects in an array), resource attributes with empty array values."""
    if shape in ("empty strings", "zeros", "4-byte values", "9-byte strings"):
        text = {"empty strings": b"", "zeros": b"0", "4-byte values": b"00", "9-byte strings": b"abcdefg"}[
            shape
        ]
        item = _delimited(3, text)
        return _delimited(1, _delimited(1, _delimited(3, item * (size // len(item)))))
    if shape == "empty objects":
        attribute = _delimited(9, b"")
        return _delimited(1, _delimited(2, _delimited(2, attribute * (size // len(attribute)))))
    if shape == "empty arrays":  # KeyValue{value: AnyValue{array_value: {}}}
        kv = _delimited(1, _delimited(2, _delimited(5, b"")))
        return _delimited(1, _delimited(1, kv * (size // len(kv))))
    value = b""  # nested AnyValue.array_value.values, 5,000 deep
    for _ in range(5_000):
        value = _delimited(5, _delimited(1, value))
    return _delimited(1, _delimited(1, _delimited(1, _delimited(2, value))))


# --- measuring ----------------------------------------------------------------------------------------


def cpu(work: Callable[[bytes], None], raw: bytes, runs: int) -> tuple[float, str]:
    """The best of ``runs`` CPU times, and how the parser answered (``ok`` or the refusal's class)."""
    best, answer = float("inf"), "ok"
    for _ in range(runs):
        started = time.process_time()
        try:
            work(raw)
            answer = "ok"
        except (otlp.OtlpError, input_budget.OverBudget, BodyError, ValueError) as exc:
            answer = f"refused ({type(exc).__name__})"
        best = min(best, time.process_time() - started)
    return best, answer


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    parsers: list[tuple[str, Callable[[bytes], None], bytes, int]] = [
        ("reports", parse_reports, well_formed_reports(), api.MAX_BATCH_BYTES),
        ("otlp-json", parse_otlp_json, well_formed_otlp_json(), otlp.INFLATE_FLOOR),
        ("otlp-protobuf", parse_otlp_protobuf, well_formed_otlp_protobuf(), otlp.INFLATE_FLOOR),
        ("webhook", parse_webhook, well_formed_webhook(), webhooks.MAX_BODY_BYTES),
        ("model-package.json", parse_model_package, well_formed_manifest(), 16 * 1024 * 1024),
    ]
    reference, answer = cpu(
        parse_otlp_protobuf, protobuf_shape("empty strings", otlp.INFLATE_FLOOR), args.runs
    )
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
        f"runs {args.runs}"
    )
    print(
        f"reference: the protobuf path refusing 1 MiB of empty id_keys: {reference * 1000:.1f} ms ({answer})"
    )
    misses: list[str] = []
    print(f"\n{'parser':19} {'shape':20} {'bytes':>10} {'CPU':>9} {'per byte':>9}  answer")
    for name, work, good, cap in parsers:
        base, _ = cpu(work, good, args.runs)
        per_byte = base / len(good)
        print(f"{name:19} {'well-formed':20} {len(good):>10,} {base * 1000:>7.1f}ms {'1.00x':>9}  ok")
        bodies: list[tuple[str, bytes]] = []
        for size, label in ((len(good), ""), (cap, " (cap)")):
            for shape, item in ITEMS.items():
                if name == "otlp-protobuf":
                    bodies.append((shape + label, protobuf_shape(shape, size)))
                else:
                    bodies.append((shape + label, filled(name, item, size)))
        bodies.append(
            ("nested 5,000 deep", protobuf_shape("deep", 0) if name == "otlp-protobuf" else deep(name))
        )
        for shape, raw in bodies:
            spent, answer = cpu(work, raw, args.runs)
            ratio = spent / len(raw) / per_byte
            miss = ratio > MAX_RATIO and not (answer != "ok" and spent <= REFUSAL_CEILING)
            misses += [f"{name} / {shape}: {ratio:.1f}x, {spent * 1000:.1f} ms, {answer}"] if miss else []
            mark = "  MISS" if miss else ""
            print(f"{'':19} {shape:20} {len(raw):>10,} {spent * 1000:>7.1f}ms {ratio:>8.2f}x  {answer}{mark}")
    print()
    if misses:
        print("MISSED:", "; ".join(misses))
        return 1
    print(
        f"every hostile shape within {MAX_RATIO:.0f}x its well-formed body per byte, or refused within "
        f"{REFUSAL_CEILING * 1000:.0f} ms"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
