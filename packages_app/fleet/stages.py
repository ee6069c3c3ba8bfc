"""The shared stages of the fleet pages: who holds which layers on which device, as a report's topology names
them or as a node's agent registered them, and which of those nodes are registered here.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from django.db.models import Q, QuerySet

from packages_app import compiled
from packages_app.fleet.sql import rows_matching
from packages_app.models import Node, Report


def node_devices(stages: Any, devices: Any, node_name: str) -> list[str]:
    """The devices a node's agent registered, each as ``name (backend, VRAM)``: those of the stages the
    node holds itself when a stage names it, else every device the run lists (a node id that is not
    the node's name says nothing of which stage is whose)."""
    own = [s for s in stages if isinstance(s, dict) and s.get("node_id") == node_name] if stages else []
    if own:
        labels = [device_label(_stage_device(s)) for s in own]
    else:
        labels = [device_label(d) for d in devices] if isinstance(devices, list) else []
    return list(dict.fromkeys(label for label in labels if label))


def _stage_device(stage: Mapping[str, Any]) -> Any:
    """A registered stage's ``selected_device`` as the node listed it (kept in ``raw``), else its name."""
    raw = stage.get("raw")
    selected = raw.get("selected_device") if isinstance(raw, dict) else None
    return selected if isinstance(selected, dict) else stage.get("device", "")


# mesh-llm's backend device names: the backend, then the device index (CUDA0, Vulkan1, ROCm0).
BACKEND_DEVICE = re.compile(r"([A-Za-z]+)[_:-]?[0-9]+")


def device_label(device: Any) -> str:
    """``CUDA0 (CUDA, 24 GiB)`` from mesh-llm's ``selected_device`` (``backend_device``, ``vram_bytes``);
    the backend is the device name without its index. A plain name stays as it is."""
    if not isinstance(device, dict):
        return str(device or "")[:80]
    name = device.get("backend_device") or device.get("name") or device.get("id") or device.get("device")
    if not isinstance(name, str) or not name:
        return ""
    backend = BACKEND_DEVICE.fullmatch(name)
    details = [backend[1]] if backend else []
    vram = device.get("vram_bytes")
    if isinstance(vram, int) and not isinstance(vram, bool) and vram > 0:
        details.append(_vram(vram))
    return f"{name[:80]} ({', '.join(details)})" if details else name[:80]


def _vram(size: int) -> str:
    gib = size / 2**30
    return f"{gib:.0f} GiB" if gib >= 10 else f"{gib:.1f} GiB" if gib >= 1 else f"{size // 2**20} MiB"


def newest_topologies(
    keys: tuple[str, ...], reports: list[tuple[Any, ...]], topology_id: str | None = None
) -> dict[Any, Any]:
    """The ``topology`` of the body of each report named (by the values of ``keys`` and its arrival
    time, last, which the Serving rows and cells hold as their last), by ``keys``, of reports on
    ``topology_id`` only where one is given (one query, its SQL compiled once per shape: built by the
    ORM for each read, 1.5 ms of the nodes page's 5.6 on the catalog seed, a seed running beside)."""
    if not reports:
        return {}
    # The reports' own times also bound the partitions read (the planner prunes the others).
    times = [report[-1] for report in reports]
    columns = [list(column) for column in zip(*reports, strict=True)]
    on = [topology_id] if topology_id is not None else []
    read = _newest_of(keys, topology_id is not None)
    rows = compiled.rows(read, *columns, min(times), max(times), on)
    return {tuple(key): topology for *key, topology in rows}


@functools.cache
def _newest_of(keys: tuple[str, ...], on_topology: bool) -> Callable[..., QuerySet[Any, Any]]:
    """``newest_topologies``' read for these keys: each key's values, the reports' times, their first
    and last, and the topology's id (a list of one, or empty)."""

    def read(*args: Any) -> QuerySet[Any, Any]:
        *columns, first, last, on = args
        named = rows_matching(Report, (*keys, "received_at"), list(zip(*columns, strict=True)))
        among = Q(topology_id=on[0]) if on_topology else Q()
        rows: QuerySet[Any, Any] = (
            Report.objects.filter(among, pk__in=named, received_at__range=(first, last))
            .order_by("id")
            .values_list(*keys, "body__topology")
        )
        return rows

    return read


def topology_id_of(topology: Any) -> str:
    value = topology.get("topology_id") if isinstance(topology, dict) else None
    return value if isinstance(value, str) else ""


def layer_range(topology: Any, node_name: str) -> str:
    """The layers ``node_name`` holds in a report's topology, as ``start..end`` (several joined by ', ')."""
    stages = topology.get("stages") if isinstance(topology, dict) else None
    if not isinstance(stages, list):
        return ""
    ranges = [
        f"{s.get('layer_start')}..{s.get('layer_end')}"
        for s in stages
        if isinstance(s, dict) and node_name in (s.get("node"), s.get("node_id"))
    ]
    return ", ".join(ranges)


@dataclass(frozen=True)
class Stage:
    """One stage of a split: the node holding it, its layers and device. ``registered``: a node of that
    name is registered here (its page exists); set by ``with_registration``."""

    node: str
    layer_start: Any
    layer_end: Any
    device: str
    registered: bool = False


def stages_of(topology: Any) -> list[Stage]:
    """The stages a report's ``topology`` names (node, layers, device)."""
    stages = topology.get("stages") if isinstance(topology, dict) else None
    if not isinstance(stages, list):
        return []
    return [
        Stage(str(s.get("node", "")), s.get("layer_start"), s.get("layer_end"), device_label(s.get("device")))
        for s in stages
        if isinstance(s, dict)
    ]


def run_stages(stages: Any) -> list[Stage]:
    """The stages an agent registered for a run (NodeRun.stages), in stage order, each with the node id
    that holds it and its selected device."""
    if not isinstance(stages, list):
        return []
    rows = sorted((s for s in stages if isinstance(s, dict)), key=lambda s: s.get("stage_index") or 0)
    return [
        Stage(
            str(s.get("node_id") or ""),
            s.get("layer_start"),
            s.get("layer_end"),
            device_label(_stage_device(s)),
        )
        for s in rows
    ]


def best_stages(registered: list[Stage], reported: list[Stage], splits: str) -> list[Stage]:
    """The stages an agent registered (each with its device's backend and VRAM) when they are this split,
    else those the newest report names, else the registered ones whatever their split."""
    ranges = sorted((s.layer_start, s.layer_end) for s in registered)
    if registered and "|".join(f"{a}..{b}" for a, b in ranges) == splits:
        return registered
    return reported or registered


def with_registration(groups: Iterable[Iterable[Stage]]) -> set[str]:
    """The node names among these stages that are registered nodes (one query)."""
    names = {stage.node for stages in groups for stage in stages if stage.node}
    return set(Node.objects.filter(name__in=names).values_list("name", flat=True)) if names else set()


def mark_registered(stages: Iterable[Stage], known: set[str]) -> tuple[Stage, ...]:
    return tuple(replace(stage, registered=stage.node in known) for stage in stages)
