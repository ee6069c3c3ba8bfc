"""What a node says about itself (docs/node-report.md section 5), as meshdash-agent reads it: its serving
strategy, split readiness and exchange provenance, cut to meshdash's bounds (what is cut is named in
``trimmed``). Standard library only."""

from __future__ import annotations

import json
import logging
import math
import os
from typing import Any
from urllib.parse import quote

try:
    from packages_app.nodes.agent_common import REF, UNSTORABLE, http
except ModuleNotFoundError:  # run as a file (python3 packages_app/nodes/agent.py): its neighbour
    from agent_common import REF, UNSTORABLE, http  # type: ignore[no-redef]
try:
    from packages_app.nodes.agent_config import Config
except ModuleNotFoundError:  # run as a file (python3 packages_app/nodes/agent.py): its neighbour
    from agent_config import Config  # type: ignore[no-redef]

log = logging.getLogger("meshdash.agent")

# What the node says about itself (docs/node-report.md section 5), bounded as meshdash bounds it
# (nodes/run_schema.py: 8 KiB and 8 levels a group): longer strings, lists and groups are cut here.
MAX_OBSERVED_BYTES = 8 * 1024
MAX_OBSERVED_TEXT = 600
MAX_OBSERVED_ITEMS = 32
MAX_OBSERVED_DEPTH = 6
EXCHANGE_LOG_TAIL = 256 * 1024  # the newest exchanges of a plugin's openai.exchange.v1 log


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


def readiness_of(config: Config, run: dict[str, Any]) -> dict[str, Any] | None:
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
