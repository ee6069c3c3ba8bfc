"""meshdash-agent: runs beside a mesh-llm node and tells meshdash what the node serves. No Django.

Each cycle it reads the node's console API (``GET /api/runtime/stages``, ``GET /api/status``, and
``GET /api/diagnostics/split-readiness`` where the node has it), resolves each run's ``package_ref`` to
a commit sha (through the Hub API, for a branch or tag; a ref that does not resolve is not asked again
for ``FAILED_REF_TTL``), and registers the runs with meshdash (``POST /api/v1/runs``) with what the node
says about itself (docs/node-report.md section 5: its serving strategy, twin policy, draft model, each
stage's admission, the split readiness and, from an ``exchange_log``, the newest exchange's serving
provenance), so the node's OTLP spans, which carry only a run id, link to a package revision. What a
node does not report is named in ``not_reported``; what a hostile node sends past the bounds below is
cut and named in ``trimmed``. As an optional transparent OpenAI-compatible proxy it forwards
each completion's ``timings`` as a report. Everything it sends is first written to an on-disk spool
and deleted only once meshdash has answered, so a meshdash outage loses nothing (at-least-once;
meshdash deduplicates by report id and run id). 429 and 503 are honoured with Retry-After (capped).
The spool is capped by size and age (the oldest bodies are dropped first, counted and logged): a node
that produces reports faster than a down meshdash can take them fills a bounded folder, not the disk.

Only the standard library: it runs on GPU hosts next to a node, not in meshdash's environment.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import os
import re
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

try:
    import packages_app.nodes.exposition as exposition
except ModuleNotFoundError:  # run as a file (python3 packages_app/nodes/agent.py): its neighbour
    import exposition  # type: ignore[no-redef]

log = logging.getLogger("meshdash.agent")

TIMEOUT = 10.0
MAX_RESPONSE_BYTES = 16 * 1024 * 1024
MAX_REQUEST_BYTES = 16 * 1024 * 1024  # a proxied OpenAI request; a long prompt is a few MiB at most
FORWARDED_HEADERS = ("content-type", "authorization", "accept")
STREAM_TAIL_BYTES = 256 * 1024  # the last events of a stream, where the timings are
MAX_RETRY_AFTER = 300.0
MAX_BACKOFF = 60.0
REPORT_BATCH = 200
SPOOL_MAX_BYTES = 64 * 1024 * 1024  # ~20,000 reports of ~3 KiB
SPOOL_MAX_AGE = 7 * 24 * 3600.0  # a body meshdash has not taken in a week is not worth a backlog
# meshdash's answers that say the body itself is wrong: sending it again would be refused again.
DROP_STATUSES = frozenset({400, 413, 422})
SHA = re.compile(r"^[0-9a-f]{40}$")
DECIMAL = re.compile(r"[0-9]+")
SHA256 = re.compile(r"^[0-9a-f]{64}$")
UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
REF = re.compile(r"^(?:hf://)?(?P<repo>[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+)(?:@(?P<rev>[^\s@]+))?$")
# A stage's split-certification status (docs/rules.md 6a: "certified", or "uncertified_override" when the node
# split-serves with --allow-uncertified-split). Which JSON key /api/runtime/stages uses is not pinned down,
# so the spellings mesh-llm's own names suggest are all read (its log field is `split_certification`).
CERTIFICATION_KEYS = (
    "split_certification",
    "certification",
    "certification_status",
    "split_certification_status",
    "split_certification_admission",
)
CERTIFICATIONS = {"certified": "certified", "uncertifiedoverride": "uncertified_override"}
MAX_RAW_STAGE_BYTES = 4 * 1024  # meshdash caps each stored stage object; a bigger one is trimmed, never lost
MAX_RUNS = 64  # what one registration of meshdash's takes (RunsIn): a node listing more is cut there
# What the node says about itself (docs/node-report.md section 5), bounded as meshdash bounds it
# (nodes/run_schema.py: 8 KiB and 8 levels a group): longer strings, lists and groups are cut here.
MAX_OBSERVED_BYTES = 8 * 1024
MAX_OBSERVED_TEXT = 600
MAX_OBSERVED_ITEMS = 32
MAX_OBSERVED_DEPTH = 6
EXCHANGE_LOG_TAIL = 256 * 1024  # the newest exchanges of a plugin's openai.exchange.v1 log
MAX_READINESS_LOOKUPS = 16  # split-readiness requests to the node a cycle
# Package refs that did not resolve: not asked again for this long, at most this many new a cycle, and
# at most this many remembered (issue 48: a node naming 2,000 refs cost 2,000 Hub requests a cycle).
FAILED_REF_TTL = 600.0
MAX_REF_LOOKUPS = 16
MAX_REF_CACHE = 4096


class AgentError(Exception):
    """A configuration or node problem the operator must fix; printed as one sentence."""


@dataclass(frozen=True)
class Config:
    node_url: str = "http://127.0.0.1:3131"  # the node's console API
    meshdash_url: str = "http://127.0.0.1:8000"
    token: str = ""
    hub_url: str = "https://huggingface.co"
    spool_dir: str = ""
    interval: float = 30.0
    proxy_listen: str = ""  # host:port; empty = no proxy
    upstream_url: str = ""  # the node's OpenAI API; empty = node_url
    # A JSON-lines log of the node's openai.exchange.v1 events, as a plugin subscribed to that channel
    # keeps it (e.g. capsule-emit-mesh's lifecycle-events.jsonl): the exchanges' serving provenance.
    exchange_log: str = ""
    spool_max_bytes: int = SPOOL_MAX_BYTES
    spool_max_age: float = SPOOL_MAX_AGE  # seconds
    # At start-up, how long to wait quietly for the node's console API to answer before the first poll:
    # the agent usually starts with its node, which takes a while to listen (0 = poll at once).
    node_wait: float = 120.0
    # Baseline engines (a plain llama.cpp or vLLM server) whose Prometheus /metrics is scraped each cycle:
    # [{engine, metrics_url, source_model, served_model?, source_file?, quantization?, version?}]
    # (Baseline below). With baselines, node_url may be "" (no mesh-llm node beside this agent).
    baselines: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def load(cls, path: str | None, overrides: dict[str, Any]) -> Config:
        data: dict[str, Any] = {}
        if path:
            try:
                data = json.loads(Path(path).read_text())
            except (OSError, ValueError) as exc:
                raise AgentError(f"Cannot read the config file {path}: {exc}") from None
            unknown = set(data) - set(cls.__dataclass_fields__)
            if unknown:
                raise AgentError(f"Unknown config keys in {path}: {', '.join(sorted(unknown))}")
        data.update({k: v for k, v in overrides.items() if v is not None})
        data.setdefault("token", os.environ.get("MESHDASH_TOKEN", ""))
        config = cls(**data)
        config.check()
        return config

    def check(self) -> None:
        if not isinstance(self.baselines, list):
            raise AgentError("baselines must be a list of objects.")
        for index, item in enumerate(self.baselines):
            Baseline.of(item, index)
        for name in ("node_url", "meshdash_url", "hub_url"):
            if name == "node_url" and self.baselines and not self.node_url:
                continue  # an agent that only scrapes baseline engines
            if not getattr(self, name).startswith(("http://", "https://")):
                raise AgentError(f"{name} must be an http:// or https:// URL.")
        if not self.token:
            raise AgentError("A node token is required: token in the config file or MESHDASH_TOKEN.")
        for name in ("spool_max_bytes", "spool_max_age"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
                raise AgentError(f"{name} must be a positive number.")
        wait = self.node_wait
        if isinstance(wait, bool) or not isinstance(wait, int | float) or wait < 0:
            raise AgentError("node_wait must be a number of seconds, 0 or more.")

    @property
    def spool(self) -> Path:
        return Path(self.spool_dir or Path(tempfile.gettempdir()) / "meshdash-agent")

    def baseline_list(self) -> list[Baseline]:
        return [Baseline.of(item, index) for index, item in enumerate(self.baselines)]


# --- HTTP (stdlib) ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes
    retry_after: float | None = None

    def json(self) -> Any:
        try:
            return json.loads(self.body)
        except RecursionError:  # a hostile node nesting thousands deep: not JSON the agent reads
            raise ValueError("nested too deep") from None


def http(method: str, url: str, body: bytes | None = None, headers: dict[str, str] | None = None) -> Answer:
    """One request with a timeout and a capped body; HTTP errors are answers, not exceptions."""
    request = urllib.request.Request(url, data=body, headers=headers or {}, method=method)  # noqa: S310
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT) as response:  # noqa: S310
            return Answer(response.status, response.read(MAX_RESPONSE_BYTES))
    except urllib.error.HTTPError as exc:
        return Answer(exc.code, exc.read(64 * 1024), _retry_after(exc.headers.get("Retry-After")))


def _retry_after(value: str | None) -> float | None:
    try:
        return min(MAX_RETRY_AFTER, max(0.0, float(value))) if value else None
    except ValueError:
        return None


# --- The node's console API -> runs -----------------------------------------------------------


def read_runs(config: Config, resolver: RefResolver) -> list[dict[str, Any]]:
    """The runs the node serves, as meshdash's ``POST /api/v1/runs`` takes them (at most MAX_RUNS)."""
    stages = _get_json(config.node_url + "/api/runtime/stages")
    status = _get_json(config.node_url + "/api/status")
    version = status.get("version") if isinstance(status, dict) else None
    by_run: dict[str, list[dict[str, Any]]] = {}
    for stage in stages.get("stages") or [] if isinstance(stages, dict) else []:
        if isinstance(stage, dict) and isinstance(stage.get("run_id"), str) and stage["run_id"]:
            by_run.setdefault(stage["run_id"], []).append(stage)
    resolver.new_cycle()
    said = status_observations(status)
    exchanges = read_exchange_log(config.exchange_log) if config.exchange_log else None
    runs = []
    for index, (run_id, rows) in enumerate(sorted(by_run.items())[:MAX_RUNS]):
        run = _run(run_id, rows, version, resolver)
        readiness = _readiness(config, run) if index < MAX_READINESS_LOOKUPS else None
        run["observations"] = run_observations(said, readiness, exchanges, run)
        runs.append(run)
    return runs


def _get_json(url: str) -> Any:
    try:
        answer = http("GET", url)
    except OSError as exc:
        raise AgentError(f"The node does not answer at {url}: {exc}") from None
    if answer.status != 200:
        raise AgentError(f"The node answered {answer.status} for {url}.")
    try:
        return answer.json()
    except ValueError:
        raise AgentError(f"The node's {url} is not JSON.") from None


def _run(run_id: str, stages: list[dict[str, Any]], version: Any, resolver: RefResolver) -> dict[str, Any]:
    first = stages[0]
    ref = _text(first.get("package_ref"), 300)
    run: dict[str, Any] = {
        "run_id": run_id[:200],
        "topology_id": _text(first.get("topology_id")),
        "model_id": _text(first.get("model_id")),
        "package_ref": ref,
        "version": _text(version)[:100],
        "stages": [_stage(s) for s in stages if _stage(s) is not None][:64],
        "devices": [s["selected_device"] for s in stages if isinstance(s.get("selected_device"), dict)][:64],
    }
    package = resolver.package(ref, first.get("manifest_sha256"))
    if package:
        run["package"] = package
    return run


def _stage(stage: dict[str, Any]) -> dict[str, Any] | None:
    ints = [stage.get(k) for k in ("stage_index", "layer_start", "layer_end")]
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in ints):
        return None
    device = stage.get("selected_device")
    return {
        "stage_id": _text(stage.get("stage_id")),
        "stage_index": ints[0],
        "node_id": _text(stage.get("node_id")),
        "layer_start": ints[1],
        "layer_end": ints[2],
        "state": _text(stage.get("state")),
        "device": _text(device.get("backend_device")) if isinstance(device, dict) else "",
        "ctx_size": stage.get("ctx_size") if isinstance(stage.get("ctx_size"), int) else None,
        "lane_count": stage.get("lane_count") if isinstance(stage.get("lane_count"), int) else None,
        "certification": certification_of(stage),
        "weight_quantization": _text(stage.get("weight_quantization"), 64),
        "raw": raw_stage(stage),
    } | admission_of(stage)


def admission_of(stage: dict[str, Any]) -> dict[str, Any]:
    """A stage snapshot's ``admission`` (``StageAdmissionDescriptor``): the exact package it loaded."""
    admission = stage.get("admission")
    if not isinstance(admission, dict):
        return {}
    kept = {k: admission[k][:200] for k in ("package_id", "plan_id") if isinstance(admission.get(k), str)}
    return {"admission": kept} if kept else {}


def certification_of(stage: dict[str, Any]) -> str:
    """``certified`` / ``uncertified_override`` under any of CERTIFICATION_KEYS (``UncertifiedOverride``,
    ``uncertified-override`` and ``{"status": ...}`` too); another value is kept as the node wrote it."""
    for key in CERTIFICATION_KEYS:
        value = stage.get(key)
        if isinstance(value, dict):
            inner = (value.get(k) for k in ("status", "admission", "state"))
            value = next((v for v in inner if isinstance(v, str)), "")
        if isinstance(value, str) and value.strip():
            return CERTIFICATIONS.get(re.sub(r"[^a-z]", "", value.lower()), value.strip()[:64])
    return ""


def raw_stage(stage: dict[str, Any]) -> dict[str, Any]:
    """The stage object as the node sent it, so fields meshdash does not read yet are kept. Over
    MAX_RAW_STAGE_BYTES, the largest values are dropped first and named in ``_trimmed``."""
    if len(json.dumps(stage)) <= MAX_RAW_STAGE_BYTES:
        return stage
    sizes = sorted(((len(json.dumps(v)), k) for k, v in stage.items()), reverse=True)
    kept = dict(stage)
    trimmed: list[str] = []
    for _, key in sizes:
        if len(json.dumps(kept | {"_trimmed": trimmed})) <= MAX_RAW_STAGE_BYTES:
            break
        del kept[key]
        trimmed.append(key[:64])
    raw = kept | {"_trimmed": trimmed[:32]}
    return raw if len(json.dumps(raw)) <= MAX_RAW_STAGE_BYTES else {"_trimmed": ["(every key)"]}


def _text(value: Any, limit: int = 200) -> str:
    return value[:limit] if isinstance(value, str) else ""


class RefResolver:
    """``owner/repo@ref`` -> ``{repo, revision, manifest_sha256}``; a branch or tag via the Hub API."""

    def __init__(self, hub_url: str) -> None:
        self.hub_url = hub_url.rstrip("/")
        self._cache: dict[tuple[str, str], str] = {}
        self._failed: dict[tuple[str, str], float] = {}  # ref -> when it may be asked again (monotonic)
        self.lookups = 0  # Hub requests this cycle
        self.requests = 0  # Hub requests since start

    def new_cycle(self) -> None:
        self.lookups = 0

    def package(self, ref: str, manifest: Any) -> dict[str, Any] | None:
        match = REF.match(ref or "")
        if not match:
            return None
        repo, rev = match["repo"], match["rev"] or "main"
        sha = rev if SHA.match(rev) else self._resolve(repo, rev)
        if sha is None:
            return None
        package: dict[str, Any] = {"repo": repo, "revision": sha}
        if isinstance(manifest, str) and SHA256.match(manifest):
            package["manifest_sha256"] = manifest
        return package

    def _resolve(self, repo: str, rev: str) -> str | None:
        key = (repo, rev)
        if key in self._cache:
            return self._cache[key]
        if self._failed.get(key, 0.0) > time.monotonic() or self.lookups >= MAX_REF_LOOKUPS:
            return None  # failed lately, or this cycle's lookups are spent: asked again later
        self.lookups += 1
        self.requests += 1
        sha = self._ask_hub(repo, rev)
        if sha is None:
            log.warning(
                "could not resolve %s@%s to a commit; asking again in %.0f s", repo, rev, FAILED_REF_TTL
            )
            _remember(self._failed, key, time.monotonic() + FAILED_REF_TTL)
            return None
        _remember(self._cache, key, sha)
        return sha

    def _ask_hub(self, repo: str, rev: str) -> str | None:
        url = f"{self.hub_url}/api/models/{repo}/revision/{quote(rev, safe='')}"
        try:
            answer = http("GET", url)
            sha = answer.json().get("sha") if answer.status == 200 else None
        except (OSError, ValueError, AttributeError):
            sha = None
        return sha if isinstance(sha, str) and SHA.match(sha) else None


def _remember(cache: dict[Any, Any], key: Any, value: Any) -> None:
    """Store, dropping the oldest entries past MAX_REF_CACHE (dicts keep insertion order)."""
    cache.pop(key, None)
    cache[key] = value
    while len(cache) > MAX_REF_CACHE:
        del cache[next(iter(cache))]


# --- What the node says about itself (docs/node-report.md section 5) ---------------------------


def status_observations(status: Any) -> dict[str, Any]:
    """From ``/api/status``: ``runtime.serving_strategy``, ``twin_policy`` and ``draft_name``, bounded;
    each field this node's version does not report is named in ``not_reported``."""
    said: dict[str, Any] = {"not_reported": [], "trimmed": []}
    status = status if isinstance(status, dict) else {}
    runtime = status.get("runtime") if isinstance(status.get("runtime"), dict) else {}
    strategy = runtime.get("serving_strategy", status.get("serving_strategy"))
    if strategy is None:
        said["not_reported"].append("serving_strategy")
    else:
        shaped = _strategy_plan(strategy, said["trimmed"])
        if shaped is not None:
            said["serving_strategy"] = shaped
    if "twin_policy" in status:
        said["twin_policy"] = _group(status["twin_policy"], "twin_policy", said["trimmed"])
    else:
        said["not_reported"].append("twin_policy")
    draft = status.get("draft_name")
    if isinstance(draft, str) and draft:
        said["draft_name"] = _clip_text(draft, "draft_name", said["trimmed"], 300)
    elif draft is not None and not isinstance(draft, str):
        said["trimmed"].append("draft_name (not a string)")
    return said


def _strategy_plan(value: Any, trimmed: list[str]) -> dict[str, Any] | None:
    """``{strategy, applied: [{axis, value, because}], declined: [...]}`` (serving_strategy.rs), its
    known keys of the right type only; the rest kept, bounded."""
    if not isinstance(value, dict):
        trimmed.append("serving_strategy (not an object)")
        return None
    shaped = _group(value, "serving_strategy", trimmed)
    if not isinstance(shaped.get("strategy"), str | None):
        trimmed.append("serving_strategy.strategy (not a string)")
        del shaped["strategy"]
    _limit(shaped, "strategy", 64, "serving_strategy", trimmed)
    for side in ("applied", "declined"):
        items = shaped.get(side, [])
        if not isinstance(items, list):
            trimmed.append(f"serving_strategy.{side} (not a list)")
            items = []
        kept = [d for d in items if isinstance(d, dict) and isinstance(d.get("axis"), str)]
        kept = [{k: v for k, v in d.items() if k == "axis" or isinstance(v, str)} for d in kept]
        for decision in kept:
            for key, limit in (("axis", 100), ("value", 300)):
                _limit(decision, key, limit, f"serving_strategy.{side}", trimmed)
        if len(kept) != len(items):
            trimmed.append(f"serving_strategy.{side} (entries without a string axis)")
        shaped[side] = kept
    return shaped


def _readiness(config: Config, run: dict[str, Any]) -> dict[str, Any] | None:
    """``GET /api/diagnostics/split-readiness?model_ref=`` for the run's package: None when the node
    does not answer it (an older node: 404), else the report, bounded."""
    match = REF.match(run.get("package_ref") or "")
    model_ref = match["repo"] if match else run.get("model_id") or ""
    if not model_ref:
        return None
    try:
        answer = http(
            "GET", f"{config.node_url}/api/diagnostics/split-readiness?model_ref={quote(model_ref)}"
        )
        report = answer.json() if answer.status == 200 else None
    except (OSError, ValueError):
        return None
    if not isinstance(report, dict):
        return None
    trimmed: list[str] = []
    report.pop("serving_strategy", None)  # the same as /api/status says, registered from there
    shaped = _group(report, "split_readiness", trimmed)
    for key, limit in (("model_ref", 300), ("verdict", 64)):
        if key in shaped and not isinstance(shaped[key], str):
            trimmed.append(f"split_readiness.{key} (not a string)")
            del shaped[key]
        _limit(shaped, key, limit, "split_readiness", trimmed)
    for key in ("participant_count", "exclusion_count"):
        value = shaped.get(key)
        if key in shaped and not (
            isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 10**12
        ):
            trimmed.append(f"split_readiness.{key} (not a count)")
            del shaped[key]
    shaped["blockers"] = [
        _blocker(b, trimmed) for b in _list(shaped, "blockers", trimmed) if isinstance(b, dict)
    ]
    shaped["recommendations"] = [r for r in _list(shaped, "recommendations", trimmed) if isinstance(r, str)]
    return {"report": shaped, "trimmed": trimmed}


def _blocker(value: dict[str, Any], trimmed: list[str]) -> dict[str, Any]:
    kept: dict[str, Any] = {k: v for k, v in value.items() if k not in ("count", "short_node_ids")}
    for key in ("reason", "recommendation"):
        if key in kept and not isinstance(kept[key], str):
            trimmed.append(f"split_readiness.blockers.{key} (not a string)")
            del kept[key]
    _limit(kept, "reason", 100, "split_readiness.blockers", trimmed)
    count = value.get("count")
    kept["count"] = (
        count if isinstance(count, int) and not isinstance(count, bool) and 0 <= count <= 10**12 else 0
    )
    ids = value.get("short_node_ids")
    kept["short_node_ids"] = [i[:100] for i in ids if isinstance(i, str)] if isinstance(ids, list) else []
    return kept


def _list(group: dict[str, Any], key: str, trimmed: list[str]) -> list[Any]:
    value = group.get(key, [])
    if isinstance(value, list):
        return value
    trimmed.append(f"split_readiness.{key} (not a list)")
    return []


PROVENANCE_TEXT = (
    "served_by_node_id",
    "model_canonical_ref",
    "model_revision",
    "weights_digest",
    "model_identity_hash",
)


def read_exchange_log(path: str) -> dict[str, dict[str, Any]]:
    """The newest ``openai.exchange.v1`` terminal event with serving provenance per model, from the last
    EXCHANGE_LOG_TAIL bytes of a plugin's JSON-lines log; {} when it cannot be read."""
    try:
        with open(path, "rb") as log_file:
            log_file.seek(0, os.SEEK_END)
            size = log_file.tell()
            log_file.seek(max(0, size - EXCHANGE_LOG_TAIL))
            tail = log_file.read(EXCHANGE_LOG_TAIL)
    except OSError as exc:
        log.warning("cannot read the exchange log %s: %s", path, exc)
        return {}
    newest: dict[str, dict[str, Any]] = {}
    for line in tail.splitlines()[1 if len(tail) == EXCHANGE_LOG_TAIL else 0 :]:
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if (
            isinstance(event, dict)
            and isinstance(event.get("model"), str)
            and isinstance(event.get("serving_provenance"), dict)
        ):
            newest[event["model"][:300]] = event  # later lines are newer
    return newest


def provenance_of(event: dict[str, Any], trimmed: list[str]) -> dict[str, Any]:
    """An exchange's ``serving_provenance``, with the envelope's ``dispatch_path`` and ``usage``."""
    shaped = _group(event["serving_provenance"], "provenance", trimmed)
    for key in PROVENANCE_TEXT:
        if key in shaped and not isinstance(shaped[key], str):
            trimmed.append(f"provenance.{key} (not a string)")
            del shaped[key]
        _limit(shaped, key, 300 if key == "model_canonical_ref" else 200, "provenance", trimmed)
    if isinstance(event.get("dispatch_path"), str):
        shaped["dispatch_path"] = event["dispatch_path"][:64]
    if isinstance(event.get("usage"), dict):
        shaped["usage"] = {
            k: v for k, v in _group(event["usage"], "usage", trimmed).items() if isinstance(v, int)
        }
    return _fit(shaped, "provenance", trimmed)


def run_observations(
    said: dict[str, Any],
    readiness: dict[str, Any] | None,
    exchanges: dict[str, dict[str, Any]] | None,
    run: dict[str, Any],
) -> dict[str, Any]:
    """What meshdash's RunIn.observations takes for one run: the node's status facts, the run's split
    readiness and, from the exchange log, the newest exchange of the run's model."""
    observed = {**said, "not_reported": list(said["not_reported"]), "trimmed": list(said["trimmed"])}
    if readiness is None:
        observed["not_reported"].append("split_readiness")
    else:
        observed["split_readiness"] = readiness["report"]
        observed["trimmed"] += readiness["trimmed"]
    if exchanges is None:
        observed["not_reported"].append("provenance")
    else:
        match = REF.match(run.get("package_ref") or "")
        names = {
            run.get("model_id") or "",
            match["repo"] if match else "",
            match["repo"].split("/")[-1] if match else "",
        }
        event = next((exchanges[n] for n in names if n and n in exchanges), None)
        if event is not None:
            observed["provenance"] = provenance_of(event, observed["trimmed"])
    observed["not_reported"] = observed["not_reported"][:16]
    observed["trimmed"] = [t[:200] for t in dict.fromkeys(observed["trimmed"])][:64]
    return observed


def _group(value: Any, path: str, trimmed: list[str]) -> dict[str, Any]:
    """A JSON object as the node sent it, its strings, lists and depth cut to the bounds (named in
    ``trimmed``), then its largest keys dropped until it fits MAX_OBSERVED_BYTES."""
    clipped = _clip(value, path, trimmed, 0)
    return _fit(clipped if isinstance(clipped, dict) else {}, path, trimmed)


def _fit(group: dict[str, Any], path: str, trimmed: list[str]) -> dict[str, Any]:
    while group and len(json.dumps(group)) > MAX_OBSERVED_BYTES:
        largest = max(group, key=lambda k: len(json.dumps(group[k])))
        trimmed.append(f"{path}.{largest[:64]} (too large)")
        del group[largest]
    return group


def _clip(value: Any, path: str, trimmed: list[str], depth: int) -> Any:
    if depth > MAX_OBSERVED_DEPTH and isinstance(value, dict | list):
        trimmed.append(f"{path} (too deep)")
        return None
    if isinstance(value, str):
        return _clip_text(value, path, trimmed, MAX_OBSERVED_TEXT)
    if isinstance(value, list):
        if len(value) > MAX_OBSERVED_ITEMS:
            trimmed.append(f"{path} ({len(value)} items, kept {MAX_OBSERVED_ITEMS})")
        return [_clip(v, path, trimmed, depth + 1) for v in value[:MAX_OBSERVED_ITEMS]]
    if isinstance(value, dict):
        if len(value) > 2 * MAX_OBSERVED_ITEMS:
            trimmed.append(f"{path} ({len(value)} keys, kept {2 * MAX_OBSERVED_ITEMS})")
        items = list(value.items())[: 2 * MAX_OBSERVED_ITEMS]
        return {str(k)[:100]: _clip(v, f"{path}.{str(k)[:64]}", trimmed, depth + 1) for k, v in items}
    if isinstance(value, float) and not math.isfinite(value):  # JSON has no NaN nor infinities
        return None
    return value if value is None or isinstance(value, bool | int | float) else None


def _limit(group: dict[str, Any], key: str, limit: int, path: str, trimmed: list[str]) -> None:
    """A known text key cut to meshdash's bound for it (nodes/run_schema.py)."""
    if isinstance(group.get(key), str):
        group[key] = _clip_text(group[key], f"{path}.{key}", trimmed, limit)


def _clip_text(value: str, path: str, trimmed: list[str], limit: int) -> str:
    if len(value) > limit:
        trimmed.append(f"{path} ({len(value)} characters, kept {limit})")
    # meshdash cannot store NUL nor a lone surrogate (PostgreSQL text, UTF-8): replaced, not refused.
    return UNSTORABLE.sub("?", value[:limit])


# --- Baseline engines: a plain llama.cpp or vLLM server's Prometheus /metrics ----------------


BASELINE_TEXT = {"served_model": 300, "source_file": 300, "quantization": 64, "version": 100}
MAX_VERSION_BYTES = 64 * 1024


@dataclass(frozen=True)
class Baseline:
    """One engine to scrape: what it is, where its ``/metrics`` is, and which source model it serves (the
    Hub repo of the GGUF or weights: a layer package's ``source_model.repo`` / card ``base_model``)."""

    engine: str  # "llama.cpp" or "vllm"
    metrics_url: str
    source_model: str
    served_model: str = ""  # the model name the engine serves (vLLM labels its series with it)
    source_file: str = ""  # e.g. Qwen3.5-35B-A3B-UD-Q4_K_XL.gguf
    quantization: str = ""  # e.g. UD-Q4_K_XL; else read from source_file's name by meshdash
    version: str = ""  # the engine's version; empty: asked of the engine (llama.cpp /props, vLLM /version)

    @classmethod
    def of(cls, item: Any, index: int) -> Baseline:
        where = f"baselines[{index}]"
        if not isinstance(item, dict):
            raise AgentError(f"{where} must be an object.")
        unknown = set(item) - set(cls.__dataclass_fields__)
        if unknown:
            raise AgentError(f"Unknown keys in {where}: {', '.join(sorted(map(str, unknown)))}")
        if item.get("engine") not in exposition.ENGINES:
            raise AgentError(f"{where}.engine must be one of {', '.join(exposition.ENGINES)}.")
        url = item.get("metrics_url")
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise AgentError(f"{where}.metrics_url must be an http:// or https:// URL.")
        source = item.get("source_model")
        if not isinstance(source, str) or not REF.match(source) or "@" in source or source.startswith("hf:"):
            raise AgentError(f"{where}.source_model must be a Hub repo id, like owner/name.")
        for key, limit in BASELINE_TEXT.items():
            value = item.get(key, "")
            if not isinstance(value, str) or len(value) > limit:
                raise AgentError(f"{where}.{key} must be text of at most {limit} characters.")
        return cls(**item)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # a redirect is answered as the 3xx it is, not followed


_NO_REDIRECTS = urllib.request.build_opener(_NoRedirect)


def fetch_capped(url: str, cap: int) -> bytes:
    """GET ``url`` (no redirects, TIMEOUT): its body, refused when over ``cap`` bytes."""
    try:
        with _NO_REDIRECTS.open(urllib.request.Request(url), timeout=TIMEOUT) as response:  # noqa: S310
            body: bytes = response.read(cap + 1)
    except urllib.error.HTTPError as exc:
        raise AgentError(f"The engine answered {exc.code} for {url}.") from None
    except OSError as exc:
        raise AgentError(f"The engine does not answer at {url}: {exc}") from None
    if len(body) > cap:
        raise AgentError(f"The engine's {url} is over {cap // 1024} KiB; not read.")
    return body


class BaselineScraper:
    """Scrapes one engine each cycle; the counters' growth since the last scrape is one report."""

    def __init__(self, baseline: Baseline) -> None:
        self.baseline = baseline
        self.version = baseline.version
        self._before: dict[str, float] | None = None
        self._before_at = 0.0

    def scrape(self) -> dict[str, Any] | None:
        """The report of the window since the last scrape; None on the first scrape (no window yet) and
        when the engine decoded and drafted nothing in it. AgentError when the engine cannot be read."""
        b = self.baseline
        try:
            parsed = exposition.parse(
                fetch_capped(b.metrics_url, exposition.MAX_BODY_BYTES), exposition.wanted_names(b.engine)
            )
        except exposition.ExpositionError as exc:
            raise AgentError(f"{b.metrics_url}: {exc}") from None
        now, at = exposition.snapshot(parsed, b.engine, b.served_model), time.monotonic()
        if parsed.trimmed:
            log.warning("%s: left out %s", b.metrics_url, "; ".join(parsed.trimmed))
        before, before_at = self._before, self._before_at
        self._before, self._before_at = now, at
        if before is None:
            return None
        window, reset = exposition.deltas(before, now)
        figures = exposition.figures(window)
        if not figures["predicted_n"] and not figures["drafts"]:
            return None
        not_reported = figures.pop("not_reported")
        if not self.version:
            self.version = self._ask_version()
        if not self.version:
            not_reported.append("engine_version")
        return {
            "report_id": str(uuid.uuid4()),
            "observed_at": datetime.now(UTC).isoformat(),
            "window_seconds": round(at - before_at, 3),
            "engine": b.engine,
            "engine_version": self.version,
            "served_model": b.served_model,
            "source_model": b.source_model,
            "source_file": b.source_file,
            "quantization": b.quantization,
            "counter_reset": reset,
            "figures": figures,
            "not_reported": not_reported,
            "trimmed": [t[:200] for t in parsed.trimmed][:16],
        }

    def _ask_version(self) -> str:
        """llama.cpp: ``/props``'s ``build_info``; vLLM: ``/version``'s ``version``; "" when not told."""
        parts = urlsplit(self.baseline.metrics_url)
        llama = self.baseline.engine == "llama.cpp"
        path, key = ("/props", "build_info") if llama else ("/version", "version")
        try:
            answer = json.loads(fetch_capped(f"{parts.scheme}://{parts.netloc}{path}", MAX_VERSION_BYTES))
        except (AgentError, ValueError, RecursionError):
            return ""
        value = answer.get(key) if isinstance(answer, dict) else None
        return UNSTORABLE.sub("?", value[:100]) if isinstance(value, str) else ""


# --- The spool: nothing is lost while meshdash is down ----------------------------------------


class Spool:
    """Outgoing bodies as files, oldest first; a file is deleted once meshdash has answered it.

    Capped: past ``max_bytes`` in all, or ``max_age`` seconds old, the oldest files are dropped (and
    counted in ``dropped``). The sizes are kept in memory, so a put costs no directory listing.
    """

    def __init__(
        self, directory: Path, max_bytes: int = SPOOL_MAX_BYTES, max_age: float = SPOOL_MAX_AGE
    ) -> None:
        self.directory = directory
        self.directory.mkdir(parents=True, exist_ok=True)
        self.max_bytes, self.max_age = max_bytes, max_age
        self.dropped = 0
        self._lock = threading.Lock()
        self._sizes: dict[Path, int] = {}
        for path in sorted(self.directory.glob("*.json")):
            with contextlib.suppress(OSError):
                self._sizes[path] = path.stat().st_size
        self._bytes = sum(self._sizes.values())

    def put(self, kind: str, body: dict[str, Any]) -> Path:
        name = f"{time.time_ns():020d}-{uuid.uuid4().hex[:8]}.{kind}.json"
        data = json.dumps(body).encode()
        tmp = self.directory / (name + ".tmp")
        tmp.write_bytes(data)
        path = self.directory / name
        tmp.replace(path)  # atomic: a crash leaves a whole file or none
        with self._lock:
            self._sizes[path] = len(data)
            self._bytes += len(data)
            self._trim()
        return path

    def pending(self) -> Iterator[tuple[Path, str, dict[str, Any]]]:
        with self._lock:
            self._trim()
            paths = sorted(self._sizes)
        for path in paths:
            try:
                body = json.loads(path.read_text())
            except (OSError, ValueError):
                continue  # being written, or already sent by another thread
            yield path, path.name.split(".")[-2], body

    def remove(self, path: Path) -> None:
        """A body meshdash has answered."""
        path.unlink(missing_ok=True)
        with self._lock:
            self._bytes -= self._sizes.pop(path, 0)

    def count(self) -> int:
        with self._lock:
            return len(self._sizes)

    @property
    def size(self) -> int:
        with self._lock:
            return self._bytes

    def _trim(self) -> None:
        """Drop the oldest files past the size cap, and every file past the age cap (lock held)."""
        oldest_kept = time.time_ns() - int(self.max_age * 1e9)
        too_old = [p for p in self._sizes if _spooled_at(p) < oldest_kept]
        dropped_bytes = sum(self._sizes[p] for p in too_old)
        for path in too_old:
            self._drop(path)
        over = sorted(self._sizes) if self._bytes > self.max_bytes else []
        for path in over:
            if self._bytes <= self.max_bytes:
                break
            dropped_bytes += self._sizes[path]
            self._drop(path)
        if dropped_bytes:
            log.warning(
                "spool over its caps (%d bytes, %.0f s): dropped the oldest %d bytes; %d bodies since start",
                self.max_bytes,
                self.max_age,
                dropped_bytes,
                self.dropped,
            )

    def _drop(self, path: Path) -> None:
        path.unlink(missing_ok=True)
        self._bytes -= self._sizes.pop(path)
        self.dropped += 1


def _spooled_at(path: Path) -> int:
    """The time_ns a spool file was written, from its name (a foreign name counts as new)."""
    stamp = path.name.split("-", 1)[0]
    return int(stamp) if stamp.isdigit() else time.time_ns()


@dataclass
class Sender:
    """Sends spooled bodies in order; stops at the first that meshdash cannot take now."""

    config: Config
    spool: Spool
    dry_run: bool = False
    wait_until: float = 0.0
    failures: int = 0
    sent: int = 0
    refused: int = 0
    endpoints: dict[str, str] = field(
        default_factory=lambda: {
            "runs": "/api/v1/runs",
            "reports": "/api/v1/reports/batch",
            "baselines": "/api/v1/baselines",
        }
    )

    def flush(self) -> bool:
        """True when the spool is empty afterwards."""
        if time.monotonic() < self.wait_until:
            return False
        for path, kind, body in self.spool.pending():
            if not self._send(kind, body):
                return False
            self.spool.remove(path)
        return True

    def _send(self, kind: str, body: dict[str, Any]) -> bool:
        if self.dry_run:
            print(json.dumps({"would_send": kind, "body": body}, indent=2))
            return True
        url = self.config.meshdash_url.rstrip("/") + self.endpoints[kind]
        headers = {"Content-Type": "application/json", "Authorization": f"Bearer {self.config.token}"}
        try:
            answer = http("POST", url, json.dumps(body).encode(), headers)
        except OSError as exc:
            return self._back_off(None, f"meshdash unreachable ({exc})")
        if answer.status in DROP_STATUSES:
            # The body itself is wrong: sending it again would be refused again, and block the rest.
            log.error("meshdash refused a %s body with %s: %s", kind, answer.status, answer.body[:500])
            self.refused += 1
        elif not 200 <= answer.status < 300:
            # 401/403 (a token being rotated), 404 (a proxy or an old meshdash), 429, 5xx: not about
            # the body, so it is kept and sent again later; the spool's caps bound what waits.
            return self._back_off(answer.retry_after, f"meshdash answered {answer.status}")
        else:
            self.sent += 1
        self.failures = 0
        return True

    def _back_off(self, retry_after: float | None, reason: str) -> bool:
        self.failures += 1
        delay = retry_after if retry_after is not None else min(MAX_BACKOFF, 2.0 ** min(self.failures, 6))
        self.wait_until = time.monotonic() + delay
        log.warning("%s; %d waiting in the spool, retrying in %.0f s", reason, self.spool.count(), delay)
        return False


def _answers(url: str) -> bool:
    try:
        return http("GET", url).status == 200
    except OSError:
        return False


# --- The proxy: timings of each completion become a report ------------------------------------


class Agent:
    def __init__(self, config: Config, *, dry_run: bool = False) -> None:
        self.config = config
        self.spool = Spool(config.spool, config.spool_max_bytes, config.spool_max_age)
        self.sender = Sender(config, self.spool, dry_run=dry_run)
        self.resolver = RefResolver(config.hub_url)
        self.runs: list[dict[str, Any]] = []
        self._spooled_runs: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self.scrapers = [BaselineScraper(b) for b in config.baseline_list()]

    def cycle(self) -> bool:
        """Poll the node, spool its runs, scrape the baseline engines, flush; True when all was sent."""
        if self.config.node_url:
            try:
                self.runs = read_runs(self.config, self.resolver)
            except AgentError as exc:
                log.warning("%s", exc)
            else:
                # Registrations are upserts of the node's current state: spool one only when it changed.
                if self.runs and self.runs != self._spooled_runs:
                    self.spool.put("runs", {"runs": self.runs})
                    self._spooled_runs = self.runs
        baseline_reports = []
        for scraper in self.scrapers:
            try:
                report = scraper.scrape()
            except AgentError as exc:
                log.warning("%s", exc)
                continue
            if report is not None:
                baseline_reports.append(report)
        if baseline_reports:
            self.spool.put("baselines", {"reports": baseline_reports})
        return self.sender.flush()

    def wait_for_node(self) -> bool:
        """Wait, quietly, until the node's console API answers (for an agent of baseline engines only, each
        engine's /metrics) or ``node_wait`` seconds pass; True when it answered. A node or engine that is
        still starting is normal: only one that never answers is worth a line."""
        if self.config.node_url:
            urls = [self.config.node_url + "/api/status"]
        else:
            urls = [b.metrics_url for b in self.config.baseline_list()]
        deadline = time.monotonic() + self.config.node_wait
        delay = 0.2
        while urls and not self._stop.is_set():
            urls = [url for url in urls if not _answers(url)]
            if not urls:
                return True
            if time.monotonic() + delay > deadline:
                break
            self._stop.wait(delay)
            delay = min(delay * 2, 5.0)
        if urls and self.config.node_wait:
            log.warning(
                "%s did not answer in %g s; polling anyway", ", ".join(urls)[:500], self.config.node_wait
            )
        return False

    def run_forever(self) -> None:
        while not self._stop.is_set():
            self.cycle()
            self._stop.wait(self.config.interval if self.sender.failures == 0 else 1.0)

    def stop(self) -> None:
        self._stop.set()

    def report_timings(self, timings: dict[str, Any]) -> bool:
        """Spool one report of a completion's timings, for the run the node serves now."""
        run = next((r for r in self.runs if "package" in r), None)
        if run is None:
            log.warning("timings dropped: the node's package is not known yet")
            return False
        report = {
            "report_id": str(uuid.uuid4()),
            "observed_at": datetime.now(UTC).isoformat(),
            "package": run["package"],
            "topology": {
                "topology_id": run["topology_id"],
                "stages": [
                    {
                        "node": s["node_id"] or "?",
                        "layer_start": s["layer_start"],
                        "layer_end": s["layer_end"],
                        "device": s["device"] or None,
                        "stage_index": min(s["stage_index"], 63),
                    }
                    for s in run["stages"]
                    if s["layer_end"] > s["layer_start"]
                ][:16],
            },
            "timings": timings,
        }
        self.spool.put("reports", {"reports": [report]})
        return True

    def serve_proxy(self) -> ThreadingHTTPServer:
        host, _, port = self.config.proxy_listen.rpartition(":")
        server = ThreadingHTTPServer((host or "127.0.0.1", int(port)), _ProxyHandler)
        server.daemon_threads = True
        server.agent = self  # type: ignore[attr-defined]
        threading.Thread(target=server.serve_forever, name="agent-proxy", daemon=True).start()
        return server


class _ProxyHandler(BaseHTTPRequestHandler):
    """Forwards every request to the node unchanged; reads ``timings`` from JSON completions."""

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("proxy: " + format, *args)

    def do_GET(self) -> None:
        self._forward()

    def do_POST(self) -> None:
        self._forward()

    def _forward(self) -> None:
        agent: Agent = self.server.agent  # type: ignore[attr-defined]
        length, refusal = request_length(self.headers)
        if refusal is not None:
            self.close_connection = True  # the unread body must not be parsed as the next request
            message = json.dumps({"error": {"message": refusal[1]}}).encode()
            return self._answer(refusal[0], "application/json", message)
        upstream = upstream_target(agent.config.upstream_url or agent.config.node_url, self.path)
        if upstream is None:
            self.close_connection = True
            path_only = "The request target must be a path, like /v1/chat/completions."
            return self._answer(
                400, "application/json", json.dumps({"error": {"message": path_only}}).encode()
            )
        body = self.rfile.read(length) if length else None
        headers = {k: v for k, v in self.headers.items() if k.lower() in FORWARDED_HEADERS}
        request = urllib.request.Request(upstream, data=body, headers=headers, method=self.command)  # noqa: S310
        try:
            response = urllib.request.urlopen(request, timeout=TIMEOUT)  # noqa: S310
        except urllib.error.HTTPError as exc:
            response = exc  # an answer like any other: forwarded as the node gave it
        except OSError as exc:
            message = json.dumps({"error": {"message": f"upstream unreachable: {exc}"}}).encode()
            return self._answer(502, "application/json", message)
        with response:
            completion = response.status == 200 and urlsplit(self.path).path.endswith("completions")
            content_type = response.headers.get("Content-Type", "application/json")
            if content_type.startswith("text/event-stream"):
                return self._stream(agent, response, content_type, completion)
            self._forward_whole(
                agent, response.status, content_type, response.read(MAX_RESPONSE_BYTES), completion
            )

    def _forward_whole(
        self, agent: Agent, status: int, content_type: str, body: bytes, completion: bool
    ) -> None:
        # Spooled before the client hears back (a local file write), sent after: the node's client
        # never waits on meshdash, and a report exists on disk once its completion was answered.
        reported = completion and self._spool_report(agent, _timings_of(body))
        self._answer(status, content_type, body)
        if reported:
            agent.sender.flush()

    def _stream(self, agent: Agent, response: Any, content_type: str, completion: bool) -> None:
        """Server-sent events pass through as they come; the last event holding ``timings`` is reported."""
        self.send_response(response.status)
        self.send_header("Content-Type", content_type)
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        tail = b""
        while chunk := response.read1(64 * 1024):
            self.wfile.write(chunk)
            self.wfile.flush()
            tail = (tail + chunk)[-STREAM_TAIL_BYTES:]
        if completion and self._spool_report(agent, _last_event_timings(tail)):
            agent.sender.flush()

    def _answer(self, status: int, content_type: str, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _spool_report(self, agent: Agent, timings: Any) -> bool:
        return isinstance(timings, dict) and agent.report_timings(timings)


def upstream_target(base: str, target: str) -> str | None:
    """The node URL a proxied request goes to: ``base`` with the request's path and query, or None when
    the request target is not a plain path. Only the origin-form (``/v1/...``) is forwarded, and the
    result must keep ``base``'s scheme and host:port: a target like ``:8080/admin`` or ``@host/`` glued
    to a base without a port would otherwise reach another port or host (issue 48)."""
    if not target.startswith("/") or target.startswith("//") or "\\" in target:
        return None
    url = base.rstrip("/") + target
    want, got = urlsplit(base), urlsplit(url)
    if (got.scheme, got.netloc) != (want.scheme, want.netloc):
        return None
    return url


def request_length(headers: Any) -> tuple[int, tuple[int, str] | None]:
    """The body length a proxied request declares, or the status and sentence that refuse it unread."""
    if headers.get("Transfer-Encoding"):
        return 0, (411, "A request body must be sent with a Content-Length, not chunked.")
    declared = (headers.get("Content-Length") or "0").strip()
    if not DECIMAL.fullmatch(declared):  # "-1", "1e9", "0x10", "5, 5": never read as "until the end"
        return 0, (400, f"Content-Length must be a non-negative integer, not {declared[:40]!r}.")
    if len(declared) > 12 or int(declared) > MAX_REQUEST_BYTES:
        return 0, (413, f"A request body must be at most {MAX_REQUEST_BYTES // (1024 * 1024)} MiB.")
    return int(declared), None


def _timings_of(body: bytes) -> Any:
    try:
        return json.loads(body).get("timings")
    except (ValueError, AttributeError):
        return None  # not a JSON object: forwarded untouched, nothing to report


def _last_event_timings(tail: bytes) -> Any:
    """``timings`` of the last ``data:`` event that has them (llama.cpp-style streams put them last)."""
    for line in reversed(tail.split(b"\n")):
        if line.startswith(b"data:") and b'"timings"' in line:
            return _timings_of(line[5:].strip())
    return None


# --- Command line -----------------------------------------------------------------------------


EPILOG = """\
environment:
  MESHDASH_TOKEN  the node's token (manage.py create_node NAME prints it), used when the config file has
                  no "token"; prefer it (or a config file of mode 600) to a token on the command line

A flag overrides the config file's key of the same name; the config file also takes interval,
upstream_url, spool_max_bytes, spool_max_age, node_wait and baselines: the llama.cpp or vLLM servers
whose /metrics is scraped as a baseline (see docs/api.md, "Run meshdash-agent beside the node", and
"Baseline engines")."""


def parser() -> argparse.ArgumentParser:
    defaults = Config()
    cli = argparse.ArgumentParser(
        prog="meshdash-agent",
        description=__doc__.split("\n\n")[0],
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    cli.add_argument(
        "--config",
        metavar="FILE",
        help="JSON file with the keys of the agent's config (node_url, meshdash_url, token, ...)",
    )
    cli.add_argument(
        "--node-url",
        dest="node_url",
        metavar="URL",
        help=f"the mesh-llm node's console API, read for its runs (default {defaults.node_url})",
    )
    cli.add_argument(
        "--meshdash-url",
        dest="meshdash_url",
        metavar="URL",
        help=f"meshdash, where runs and reports are posted (default {defaults.meshdash_url})",
    )
    cli.add_argument(
        "--hub-url",
        dest="hub_url",
        metavar="URL",
        help=f"the Hub that resolves a package ref's branch or tag to a commit (default {defaults.hub_url})",
    )
    cli.add_argument(
        "--spool-dir",
        dest="spool_dir",
        metavar="DIR",
        help="where bodies wait until meshdash has answered (default: meshdash-agent in the temp folder)",
    )
    cli.add_argument(
        "--proxy",
        dest="proxy_listen",
        metavar="HOST:PORT",
        help="serve an OpenAI-compatible proxy to the node there, reporting each completion's timings",
    )
    cli.add_argument(
        "--node-wait",
        dest="node_wait",
        type=float,
        metavar="SECONDS",
        help=f"wait this long for the node to answer before the first poll (default {defaults.node_wait:g}; "
        "with --once, 0)",
    )
    cli.add_argument("--once", action="store_true", help="one poll and flush, then exit (1 if unsent)")
    cli.add_argument("--dry-run", action="store_true", help="print what would be sent; send nothing")
    return cli


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    keys = ("node_url", "meshdash_url", "hub_url", "spool_dir", "proxy_listen", "node_wait")
    overrides = {k: getattr(args, k) for k in keys}
    try:
        config = Config.load(args.config, overrides)
    except (AgentError, TypeError) as exc:
        print(f"meshdash-agent: {exc}", file=sys.stderr)
        return 2
    agent = Agent(config, dry_run=args.dry_run)
    if not args.once or args.node_wait is not None:  # --once polls at once unless told to wait
        agent.wait_for_node()
    if args.once:
        return 0 if agent.cycle() else 1
    if config.proxy_listen:
        agent.cycle()  # learn the node's package first, so the first completions are reported too
        agent.serve_proxy()
    try:
        agent.run_forever()
    except KeyboardInterrupt:
        agent.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
