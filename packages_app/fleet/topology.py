"""A topology's page: what ran on one topology since the window's start, per revision and split, with its
stages and who holds each.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from django.db.models import Case, QuerySet, Value, When

from packages_app import compiled
from packages_app.fleet.figures import Figures, window_figures
from packages_app.fleet.names import RevisionNames
from packages_app.fleet.ranking import SERVED_COUNT_CAP, CappedCount
from packages_app.fleet.runs import Observations
from packages_app.fleet.served import unused_since
from packages_app.fleet.stages import (
    Stage,
    best_stages,
    mark_registered,
    newest_topologies,
    run_stages,
    stages_of,
    with_registration,
)
from packages_app.models import NodeRun, Rollup, Serving


@dataclass(frozen=True)
class TopologyRun(RevisionNames):
    revision_id: int
    repo_id: str
    commit_sha: str
    verdict: str
    headline: str
    stage_splits: str
    reports: int
    tps: float | None
    stages: list[Stage]
    alert: bool = False


# The (revision, split) rows a topology page lists, busiest first; the rest are counted.
TOPOLOGY_ROWS = 50


@dataclass(frozen=True)
class TopologyRuns:
    runs: list[TopologyRun]
    hidden: int = 0  # what ran on it beyond the rows shown
    readiness: Observations = field(default_factory=Observations)  # its newest run's split readiness
    readiness_node: str = ""  # the node whose agent registered it


def topology_runs(topology_id: str, since: datetime, show_private: bool = False) -> TopologyRuns:
    """What ran on one topology since ``since``, per revision and split (5 queries): which, from the
    every-node Serving rows (the TOPOLOGY_ROWS busiest over their life), their reports and medians
    in the window from the topology's rollup cells, the stages from each one's newest report, else
    from the newest run an agent registered on it, and which stage nodes are registered here."""
    read = _shown_read_of(TOPOLOGY_ROWS)
    shown: list[Mapping[str, Any]] = compiled.rows(read, [topology_id], since, show_private)
    if not shown:
        return TopologyRuns([])
    figures = _topology_figures(topology_id, since, shown)
    newest = [(g["revision_id"], g["stage_splits"], g["last_at"]) for g in shown]
    bodies = newest_topologies(("revision_id", "stage_splits"), newest, topology_id)
    registrations = _topology_registrations(topology_id, [g["revision_id"] for g in shown])
    runs = []
    for g in shown:
        key = (g["revision_id"], g["stage_splits"])
        found = figures.get(key) or Figures()
        registered_stages = registrations.get(g["revision_id"], [])
        stages = best_stages(registered_stages, stages_of(bodies.get(key)), g["stage_splits"])
        runs.append(_topology_run(g, found.reports, found.tps, stages))
    known = with_registration(r.stages for r in runs)
    runs = [replace(r, stages=list(mark_registered(r.stages, known))) for r in runs]
    runs.sort(key=lambda r: (-r.reports, r.repo_id, r.commit_sha))
    hidden = max(0, min(shown[0]["groups"], SERVED_COUNT_CAP) - len(shown))
    node, readiness = _topology_readiness(topology_id, [g["revision_id"] for g in shown])
    return TopologyRuns(runs, hidden, readiness, node)


@functools.cache
def _shown_read_of(limit: int) -> Callable[[Sequence[str], datetime, bool], QuerySet[Any, Any]]:
    """``topology_runs``' read of ``limit`` rows (one build, so one compiled read, per limit: the limit is SQL
    text, not a parameter)."""

    def read(topology_ids: Sequence[str], since: datetime, show_private: bool) -> QuerySet[Any, Any]:
        """The topology's every-node Serving rows in the window (its one id, in a list to be bound: compiled
        once per process: built by the ORM for each read, it took 8.8 ms against 5.5 on the catalog seed,
        with a seed running beside), the ``limit`` busiest, each with its alert and the count of all."""
        servings = Serving.objects.filter(
            topology_id=topology_ids[0], node_key=Rollup.ALL_NODES, last_at__gte=since
        )
        if not show_private:
            servings = servings.filter(revision__package__private=False)
        rows: QuerySet[Any, Any] = (
            servings.values(
                "revision_id",
                "stage_splits",
                "last_at",
                "revision__package__repo_id",
                "revision__commit_sha",
                "revision__verdict",
                "revision__headline",
            )
            .annotate(
                alert=Case(When(unused_since(since), then=Value(1)), default=Value(0)),
                # Counted once (an uncorrelated subquery), up to the cap: never every row sorted.
                groups=CappedCount(servings.order_by().values("pk")[: SERVED_COUNT_CAP + 1]),
            )
            .order_by("-reports", "-revision_id", "stage_splits")[:limit]
        )
        return rows

    return read


def _topology_readiness(topology_id: str, revision_ids: list[int]) -> tuple[str, Observations]:
    """The split readiness of the newest run an agent registered on this topology (one query): the
    verdict, blockers and recommendations as the node gave them."""
    row = (
        NodeRun.objects.filter(topology_id=topology_id, revision_id__in=revision_ids)
        .order_by("-updated_at", "-id")
        .values_list("node__name", "observations")
        .first()
    )
    return (row[0], Observations.of(row[1])) if row else ("", Observations())


def _topology_registrations(topology_id: str, revision_ids: list[int]) -> dict[int, list[Stage]]:
    """Per revision, the stages of the newest run an agent registered on this topology (one query):
    OTLP spans name no stages, their run's registration does."""
    rows = NodeRun.objects.filter(topology_id=topology_id, revision_id__in=revision_ids)
    stages: dict[int, list[Stage]] = {}
    for revision_id, registered_stages in rows.order_by("updated_at", "id").values_list(
        "revision_id", "stages"
    ):
        found = run_stages(registered_stages)
        if found:
            stages[revision_id] = found  # the newest wins
    return stages


def _topology_figures(
    topology_id: str, since: datetime, groups: list[Mapping[str, Any]]
) -> dict[Any, Figures]:
    """The shown (revision, split) groups' every-node figures on the topology in the window (one query)."""
    keys = ("revision_id", "node_key", "topology_id", "stage_splits")
    conditions = [(g["revision_id"], Rollup.ALL_NODES, topology_id, g["stage_splits"]) for g in groups]
    found = window_figures(since, conditions, keys)
    return {(key[0], key[3]): figures for key, figures in found.items()}


def _topology_run(
    group: Mapping[str, Any], reports: int, tps: float | None, stages: list[Stage]
) -> TopologyRun:
    return TopologyRun(
        revision_id=group["revision_id"],
        repo_id=group["revision__package__repo_id"],
        commit_sha=group["revision__commit_sha"],
        verdict=group["revision__verdict"] or "",
        headline=group["revision__headline"] or "",
        stage_splits=group["stage_splits"],
        reports=reports,
        tps=tps,
        stages=stages,
        alert=bool(group["alert"]),
    )
