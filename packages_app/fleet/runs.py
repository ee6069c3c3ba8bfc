"""What the nodes' agents registered (models.NodeRun): each node's newest run, the facts of its newest run
of a revision that advice reads, and what the node said about itself (its observations).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import OuterRef, Q, QuerySet, Subquery

from packages_app import compiled
from packages_app.audit.advice import NodeFacts
from packages_app.fleet.sql import Fenced, rows_matching
from packages_app.models import Node, NodeRun


@dataclass(frozen=True)
class Observations:
    """What a node said about itself (NodeRun.observations, docs/node-report.md section 5), as its pages
    show it: each group the node reported, and what its version does not report or the agent cut."""

    serving_strategy: Mapping[str, Any] | None = None
    twin_policy: str = ""  # as JSON text: its shape is not pinned down, so it is shown as the node sent it
    draft_name: str = ""
    split_readiness: Mapping[str, Any] | None = None
    provenance: Mapping[str, Any] | None = None
    not_reported: tuple[str, ...] = ()
    trimmed: tuple[str, ...] = ()
    loaded: tuple[
        Mapping[str, Any], ...
    ] = ()  # each claim of its bytes, and whether a tracked revision holds it
    any: bool = False  # the agent registered observations at all (an agent before issue 47 sends none)

    @classmethod
    def of(cls, stored: Any) -> Observations:
        if not isinstance(stored, dict) or not stored:
            return cls()
        twin = stored.get("twin_policy")
        return cls(
            serving_strategy=_mapping(stored.get("serving_strategy")),
            twin_policy=json.dumps(twin, sort_keys=True)[:2000] if twin is not None else "",
            draft_name=str(stored.get("draft_name") or ""),
            split_readiness=_mapping(stored.get("split_readiness")),
            provenance=_mapping(stored.get("provenance")),
            not_reported=tuple(str(n) for n in stored.get("not_reported") or () if isinstance(n, str)),
            trimmed=tuple(str(n) for n in stored.get("trimmed") or () if isinstance(n, str)),
            loaded=tuple(c for c in stored.get("loaded") or () if isinstance(c, dict)),
            any=True,
        )

    @property
    def readiness_label(self) -> str:
        verdict = (self.split_readiness or {}).get("verdict")
        return str(verdict).replace("_", " ") if verdict else ""


def _mapping(value: Any) -> Mapping[str, Any] | None:
    return value if isinstance(value, dict) else None


NodeIds = list[int] | QuerySet[Node, int]  # ids, or a query selecting them (``values_list("pk", flat=True)``)


@dataclass(frozen=True)
class LatestRun:
    """A node's newest registered run (NodeRun's fields the nodes pages show)."""

    node_id: int
    revision_id: int | None
    public: bool  # its revision's package is known to be public
    version: str
    certification: str
    topology_id: str
    stage_splits: str
    first_seen_at: datetime
    updated_at: datetime
    serving_strategy: str = ""
    strategy_speculative: str = ""
    draft_name: str = ""
    identity: str = ""
    stages: Any = None  # read only for the rows shown (``latest_runs``)
    devices: Any = None
    observations: Any = None


def latest_runs(node_ids: NodeIds, show_private: bool, stages: bool = True) -> dict[int, LatestRun]:
    """Each node's newest registered run (one query), with (``stages``) its stages and devices, which
    only the rows shown need (parsing them for 1,000 nodes took 25 ms). Without ``show_private``, its
    newest run of a public package or of none (a run of a private package, of one whose privacy is
    unknown, or naming a repo no stored revision confirms would show its version and devices beside it).
    Read as values: a thousand model instances with their revisions and packages took longer than the
    query. Each node's newest run is the first its index on (node, updated_at, id) gives, read backwards
    (noderun_node_newest), once a node (``Fenced``): ranking every run of the nodes by a window function
    took 124 ms for /nodes/' 20 nodes on the catalog seed, where each registered 3,800 runs; this, 1 ms.
    For every node of the 10,000-node fleet seed (judging), where a node has a run or two, both take
    about 100 ms, most of it building the rows. A list of ids (a page's nodes) reads SQL compiled once
    per number of nodes (``compiled.rows``): built by the ORM on each read, one node's took 3.0 ms
    against 0.8."""
    if isinstance(node_ids, list):
        rows = compiled.rows(_latest_runs_read, node_ids, show_private, stages)
    else:
        rows = list(_latest_runs_read(node_ids, show_private, stages))
    return {row[0]: LatestRun(row[0], row[1], row[2] is False, *row[3:]) for row in rows}


def _latest_runs_read(node_ids: Any, show_private: bool, stages: bool) -> QuerySet[NodeRun, tuple[Any, ...]]:
    """``latest_runs``' read: each node's newest run (ids, or a query selecting them)."""
    shown = NodeRun.objects.filter(node_id=OuterRef("pk"))
    if not show_private:
        shown = shown.filter(Q(revision__package__private=False) | Q(revision__isnull=True, repo_id=""))
    newest = shown.order_by("-updated_at", "-id").values("pk")[:1]
    rows: QuerySet[NodeRun, tuple[Any, ...]] = (
        NodeRun.objects.filter(
            pk__in=Fenced(Node.objects.filter(pk__in=node_ids).order_by().values(run=Subquery(newest)))
        )
        .order_by()
        .values_list(
            "node_id",
            "revision_id",
            "revision__package__private",
            *(f.name for f in dataclasses.fields(LatestRun)[3 : None if stages else -3]),
        )
    )
    return rows


@dataclass(frozen=True)
class RunFacts:
    """What a node's agent registered for its newest run of a revision, and what the node said about
    itself then (docs/node-report.md section 5; RUN_COLUMNS in order)."""

    version: str = ""
    certification: str = ""
    topology_id: str = ""
    serving_strategy: str = ""
    strategy_speculative: str = ""
    draft_name: str = ""
    identity: str = ""
    served_sha: str | None = None  # the other tracked revision its identity names
    not_reported: Any = None  # observations' not_reported: what its version does not report
    stages: Any = None  # NodeRun.stages: node_id, layer_start, layer_end, device, raw per stage
    observations: Any = None  # NodeRun.observations, whole: read for the rows shown only

    def facts(self, node: str, **ran: Any) -> NodeFacts:
        """The node's facts for advice: these, and what its reports ran (``ran``)."""
        said = self.not_reported if isinstance(self.not_reported, list) else []
        return NodeFacts(
            node,
            self.version,
            certification=self.certification,
            serving_strategy=self.serving_strategy,
            strategy_speculative=self.strategy_speculative,
            draft_name=self.draft_name,
            identity=self.identity,
            served_sha=self.served_sha or "",
            not_reported=tuple(str(name) for name in said),
            **ran,
        )


# NodeRun's columns that RunFacts holds, in its order (``stages`` and ``observations`` only when asked).
RUN_COLUMNS = (
    "version",
    "certification",
    "topology_id",
    "serving_strategy",
    "strategy_speculative",
    "draft_name",
    "identity",
    "served_revision__commit_sha",
    "observations__not_reported",
)


def facts_of_runs(groups: list[dict[str, Any]], stages: bool = True) -> dict[tuple[int, int], RunFacts]:
    """Each shown (node, revision)'s mesh-llm version, split certification, topology, what the node says
    about itself and (with ``stages``) its stages and whole observations, from its agent's newest run
    (one query)."""
    pairs = {(g["node_key"], g["revision_id"]) for g in groups}
    if not pairs:
        return {}
    facts: dict[tuple[int, int], RunFacts] = {}
    ordered = sorted(pairs)
    nodes, revisions = [n for n, _r in ordered], [r for _n, r in ordered]
    for node_id, revision_id, *values in compiled.rows(_runs_read, nodes, revisions, stages):
        facts[(node_id, revision_id)] = RunFacts(*values)  # the newest wins
    return facts


def _runs_read(
    node_ids: Sequence[int], revision_ids: Sequence[int], stages: bool
) -> QuerySet[NodeRun, tuple[Any, ...]]:
    """``facts_of_runs``' read, compiled once per number of pairs: every run of these (node, revision)
    pairs, the newest last."""
    runs = rows_matching(NodeRun, ("node_id", "revision_id"), list(zip(node_ids, revision_ids, strict=True)))
    columns = (*RUN_COLUMNS, *(("stages", "observations") if stages else ()))
    rows: QuerySet[NodeRun, tuple[Any, ...]] = (
        NodeRun.objects.filter(pk__in=runs)
        .order_by("updated_at", "id")
        .values_list("node_id", "revision_id", *columns)
    )
    return rows
