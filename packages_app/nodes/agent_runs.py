"""meshdash-agent's reading of the node's console API into runs (``POST /api/v1/runs``): stages, their
admission and certification, and each run's package ref resolved to a commit sha through the Hub, with
failed refs remembered. Standard library only."""

from __future__ import annotations

import json
import logging
import re
import time
from typing import Any
from urllib.parse import quote

try:
    from packages_app.nodes.agent_common import REF, AgentError, http
except ModuleNotFoundError:  # run as a file (python3 packages_app/nodes/agent.py): its neighbour
    from agent_common import REF, AgentError, http  # type: ignore[no-redef]
try:
    from packages_app.nodes.agent_config import Config
except ModuleNotFoundError:  # run as a file (python3 packages_app/nodes/agent.py): its neighbour
    from agent_config import Config  # type: ignore[no-redef]
try:
    from packages_app.nodes.agent_observations import (
        read_exchange_log,
        readiness_of,
        run_observations,
        status_observations,
    )
except ModuleNotFoundError:  # run as a file (python3 packages_app/nodes/agent.py): its neighbour
    from agent_observations import read_exchange_log, readiness_of, run_observations, status_observations  # type: ignore[no-redef]

log = logging.getLogger("meshdash.agent")

SHA = re.compile(r"^[0-9a-f]{40}$")
SHA256 = re.compile(r"^[0-9a-f]{64}$")
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
MAX_READINESS_LOOKUPS = 16  # split-readiness requests to the node a cycle
# Package refs that did not resolve: not asked again for this long, at most this many new a cycle, and
# at most this many remembered (issue 48: a node naming 2,000 refs cost 2,000 Hub requests a cycle).
FAILED_REF_TTL = 600.0
MAX_REF_LOOKUPS = 16
MAX_REF_CACHE = 4096


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
        readiness = readiness_of(config, run) if index < MAX_READINESS_LOOKUPS else None
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
