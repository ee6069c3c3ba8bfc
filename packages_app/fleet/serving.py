"""What one node served of one revision (a row of /nodes/ and of a node's page): its revision, reports,
strategy, layers and stages in the window, and its advice, judged against the node's own release.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from django.db.models import Case, F, Q, QuerySet, TextField, Value, When
from django.db.models.functions import Cast

from packages_app import compiled
from packages_app.audit.advice import Advice, Newer, NodeFacts, advise, moved_on, strategy_can_change_cause
from packages_app.audit.assessment import parse_stored
from packages_app.fleet.figures import Figures, strategy_of, window_figures
from packages_app.fleet.names import RevisionNames
from packages_app.fleet.ranking import SERVED_COUNT_CAP, Tops, shown_groups
from packages_app.fleet.runs import LatestRun, Observations, RunFacts, facts_of_runs
from packages_app.fleet.stages import (
    Stage,
    best_stages,
    layer_range,
    mark_registered,
    newest_topologies,
    run_stages,
    stages_of,
    topology_id_of,
    with_registration,
)
from packages_app.models import NodeRun, Revision
from packages_app.verdicts import Cause, status_of


@dataclass(frozen=True)
class NodeServing(RevisionNames):
    """What one node ran of one revision inside the window (or registered, without a report), and what
    it should do about it, judged against the node's own release (audit.advice)."""

    revision_id: int
    repo_id: str
    commit_sha: str
    verdict: str
    headline: str
    is_latest: bool
    layer_range: str
    stage_splits: str
    topology_id: str
    reports: int
    tps: float | None
    alert: bool
    advice: Advice = field(default_factory=lambda: Advice(Cause.OK, ""))
    version: str = ""  # the node's mesh-llm version for this run, from its agent's registration
    requested: str = ""
    effective: str = ""
    first_at: datetime | None = None  # its first report (or the run's registration), ever
    last_at: datetime | None = None  # its last report (or the run's last update)
    stages: tuple[Stage, ...] = ()  # who holds which layers: the newest report's topology, else the run's
    reported: bool = True  # a row of reports (False: a run registered without any in the window)
    identity: str = ""  # NodeRun.identity: whether the node's own account of its bytes names this revision
    observations: Any = None  # what the node said about itself (NodeRun.observations), for its page

    @property
    def said(self) -> Observations:
        return Observations.of(self.observations)

    @property
    def identity_label(self) -> str:
        """How the page names the revision: confirmed by the node, or named in its reports only."""
        if not self.identity or self.identity not in NodeRun.Identity.values:
            return ""  # the node names no bytes: the page says "named in reports"
        return NodeRun.Identity(self.identity).label

    @property
    def outdated(self) -> bool:
        return not self.is_latest

    @property
    def broken(self) -> bool:
        return self.advice.needs_action


@dataclass(frozen=True)
class NodeServed:
    rows: list[NodeServing]
    hidden: int
    at_least: bool = False


NOTHING_SERVED = NodeServed([], 0)


def served_by_nodes(
    since: datetime,
    names: dict[int, str],
    show_private: bool,
    tops: Tops,
    runs: Mapping[int, LatestRun],
    limit: int,
    placed: bool = True,
    window: list[dict[str, Any]] | None = None,
) -> dict[int, NodeServed]:
    """What each node served in the window: the (revision, split) groups of its candidate rows, ranked
    (those needing action first, then the busiest), the shown groups' revisions with their
    assessments, their reports, medians and strategies in the window from their rollup cells, their
    topologies, the node's mesh-llm version for each and which stages' nodes are registered (6 queries,
    however many groups or reports the window holds). The node's latest registered run joins as a row
    when no report of its revision is shown. Without ``placed``, neither the sketches, the topologies
    nor the stages' registration (4 queries), and the cells only of the groups that ran several
    strategies and whose cause their strategy can change (``_read_to_judge``): the others are judged by
    the strategy they all ran, or by none, and their reports (and advice text) are ``_placed``'s."""
    shown, hidden = shown_groups(since, show_private, tops, limit, window)
    registered = _registered_only(shown, runs, show_private)
    revisions = shown_revisions([g["revision_id"] for g in shown] + [r.revision_id or 0 for r in registered])
    run_facts = facts_of_runs(shown, stages=placed)
    read = shown if placed else [g for g in shown if _read_to_judge(run_facts, g)]
    figures = group_figures(since, read, sketches=placed)
    topologies = last_topologies(shown) if placed else {}
    result: dict[int, list[NodeServing]] = {}
    for group in shown:
        key = (group["node_key"], group["revision_id"], group["stage_splits"])
        serving = _node_serving(
            group,
            revisions[group["revision_id"]],
            figures.get(key) or _sole(group),
            topologies.get(key),
            names[key[0]],
            run_facts.get(key[:2]) or RunFacts(),
            placed,
        )
        result.setdefault(key[0], []).append(serving)
    for run in registered:
        result.setdefault(run.node_id, []).append(_registered_row(run, revisions, names[run.node_id]))
    known = with_registration(s.stages for rows in result.values() for s in rows) if placed else set()
    for items in result.values():
        items[:] = _with_moves(items)
        if placed:
            items[:] = [replace(s, stages=mark_registered(s.stages, known)) for s in items]
        items.sort(key=lambda s: (not s.broken, s.advice.cause.rank, s.is_latest, s.repo_id, s.commit_sha))
    capped = {node for node, count in tops.served.items() if count > SERVED_COUNT_CAP}
    return {node: NodeServed(rows, hidden.get(node, 0), node in capped) for node, rows in result.items()}


_SERVED_REVISION = (
    "package__repo_id",
    "commit_sha",
    "verdict",
    "headline",
    "package__latest_revision_id",
    "package__latest_revision__commit_sha",
    "package__latest_revision__headline",
)


def shown_revisions(ids: Iterable[int]) -> dict[int, dict[str, Any]]:
    """The shown revisions' names, assessments (read as text and parsed once a process for each distinct
    text: ``parse_stored``) and their package's latest (one query). The latest's assessment is read only
    for a revision that is not its package's latest (``_newer`` reads it): PostgreSQL's cast of a
    stored assessment to text is most of this read's time (about 25 microseconds each on the catalog
    seed), and most rows the fleet pages show are of a latest revision. Its SQL is compiled once per
    number of revisions (``compiled.rows``): built by the ORM for each read, 2 ms of a node page's 5.8."""
    rows = compiled.rows(_revisions_read, sorted(set(ids)))
    return {
        row["pk"]: {
            **row,
            "assessment": parse_stored(row["assessment_text"]),
            "latest_assessment": parse_stored(row["latest_text"]),
        }
        for row in rows
    }


def _revisions_read(ids: Sequence[int]) -> QuerySet[Any, Any]:
    """``shown_revisions``' read."""
    others = ~Q(package__latest_revision_id=F("pk"))
    latest = Cast("package__latest_revision__assessment", TextField())
    rows: QuerySet[Any, Any] = Revision.objects.filter(pk__in=ids).values(
        "pk",
        *_SERVED_REVISION,
        assessment_text=Cast("assessment", TextField()),
        latest_text=Case(When(others, then=latest), default=Value(None), output_field=TextField()),
    )
    return rows


def _registered_only(
    shown: list[dict[str, Any]], runs: Mapping[int, LatestRun], show_private: bool
) -> list[LatestRun]:
    """Each node's latest registered run whose revision has no report among the rows shown."""
    ran = {(g["node_key"], g["revision_id"]) for g in shown}
    return [
        run
        for run in runs.values()
        if run.revision_id is not None
        and (run.node_id, run.revision_id) not in ran
        and (show_private or run.public)
    ]


def _read_to_judge(run_facts: Mapping[tuple[int, int], RunFacts], group: Mapping[str, Any]) -> bool:
    """Whether judging the group's advice reads its cells' strategies: its reports ran more than one
    (``Serving.sole_strategy``), and the strategy can change the advice's cause, as it can where the
    node's run names a release the matrix knows (audit.advice.strategy_can_change_cause). At noon, a
    thousand nodes' groups read up to 18 cells each."""
    if group["sole_strategy"]:
        return False
    run = run_facts.get((group["node_key"], group["revision_id"])) or RunFacts()
    return strategy_can_change_cause(run.version)


def _sole(group: Mapping[str, Any]) -> Figures:
    """The figures of a group whose cells were not read: the strategy its reports all ran, if one."""
    sole = group.get("sole_strategy")
    return Figures(strategies={strategy_of(sole): 1}) if sole else Figures()


def group_figures(since: datetime, groups: list[dict[str, Any]], sketches: bool = True) -> dict[Any, Figures]:
    """The shown (node, revision, split) groups' figures in the window (one query)."""
    keys = ("node_key", "revision_id", "stage_splits")
    return window_figures(since, [tuple(g[k] for k in keys) for g in groups], keys, sketches)


def last_topologies(groups: list[dict[str, Any]]) -> dict[Any, Any]:
    """The topology of each (node, revision, split) group's newest report (one query)."""
    newest = [(g["node_key"], g["revision_id"], g["stage_splits"], g["last_at_max"]) for g in groups]
    return newest_topologies(("node_id", "revision_id", "stage_splits"), newest)


def _node_serving(
    group: Mapping[str, Any],
    revision: Mapping[str, Any],
    figures: Figures,
    topology: Any,
    node_name: str,
    run: RunFacts,
    placed: bool = True,
) -> NodeServing:
    """A reported row; without ``placed``, with ``_UNPLACED`` for what ``_placed`` fills in."""
    alert = bool(group["unused_recently"]) and bool(group["revision__mtp_detected"])
    return NodeServing(
        revision_id=group["revision_id"],
        repo_id=revision["package__repo_id"],
        commit_sha=revision["commit_sha"],
        verdict=revision["verdict"] or "",
        headline=revision["headline"] or "",
        is_latest=group["revision_id"] == revision["package__latest_revision_id"],
        stage_splits=group["stage_splits"],
        alert=alert,
        version=run.version,
        first_at=group["first_at_min"],
        last_at=group["last_at_max"],
        identity=run.identity,
        observations=run.observations,
        **ran_in_window(revision, figures, run, node_name, alert),
        **(placement(group["stage_splits"], topology, run, node_name, figures.tps) if placed else _UNPLACED),
    )


def ran_in_window(
    revision: Mapping[str, Any], figures: Figures, run: RunFacts, node_name: str, alert: bool
) -> dict[str, Any]:
    """A reported row's reports in the window, its most-reported strategy and its advice."""
    requested, effective, used = figures.main_strategy
    facts = run.facts(node_name, requested=requested, effective=effective, mtp_used=used, unused=alert)
    advice = advise(revision["assessment"], facts, _newer(revision))
    return {"reports": figures.reports, "requested": requested, "effective": effective, "advice": advice}


def placement(splits: str, topology: Any, run: RunFacts, node_name: str, tps: float | None) -> dict[str, Any]:
    """A reported row's fields that advice never reads: the layers and stages the node holds (as the
    newest report's topology places it, else as its agent registered them), the topology, and its
    median decode rate ``tps``."""
    return {
        "layer_range": layer_range(topology, node_name) or layer_range({"stages": run.stages}, node_name),
        "topology_id": topology_id_of(topology) or run.topology_id,
        "tps": tps,
        "stages": tuple(best_stages(run_stages(run.stages), stages_of(topology), splits)),
    }


_UNPLACED: dict[str, Any] = {"layer_range": "", "topology_id": "", "tps": None, "stages": ()}


def unless_moved_on(judged: Advice, advice: Advice) -> Advice:
    """``advice`` in place of the judged one, unless that said the node moved on (``_with_moves``): a
    text the strategies never change."""
    return judged if judged.cause is Cause.MOVED_ON else advice


def _registered_row(
    run: LatestRun, revisions: Mapping[int, Mapping[str, Any]], node_name: str
) -> NodeServing:
    """A run the node's agent registered with no report in the window: judged as registered only."""
    revision = revisions[run.revision_id or 0]
    facts = NodeFacts(
        node_name,
        run.version,
        ran=False,
        certification=run.certification,
        serving_strategy=run.serving_strategy,
        strategy_speculative=run.strategy_speculative,
        draft_name=run.draft_name,
        identity=run.identity,
    )
    return NodeServing(
        revision_id=run.revision_id or 0,
        repo_id=revision["package__repo_id"],
        commit_sha=revision["commit_sha"],
        verdict=revision["verdict"] or "",
        headline=revision["headline"] or "",
        is_latest=run.revision_id == revision["package__latest_revision_id"],
        stage_splits=run.stage_splits,
        topology_id=run.topology_id,
        reports=0,
        tps=None,
        alert=False,
        advice=advise(revision["assessment"], facts, _newer(revision)),
        version=run.version,
        first_at=run.first_seen_at,
        last_at=run.updated_at,
        reported=False,
        identity=run.identity,
        **registered_layout(run, node_name),
    )


def registered_layout(run: LatestRun, node_name: str) -> dict[str, Any]:
    """A registered-only row's fields that advice never reads: the layers and stages its run registered."""
    layers = layer_range({"stages": run.stages}, node_name) if isinstance(run.stages, list) else ""
    return {"layer_range": layers, "stages": tuple(run_stages(run.stages)), "observations": run.observations}


def _with_moves(rows: list[NodeServing]) -> list[NodeServing]:
    """A row whose node later started another revision of the same package (its first report, or
    its run's registration, after this row's last report) has moved on: nothing to do about it."""
    moved = []
    for row in rows:
        later = [
            (r.first_at, r)
            for r in rows
            if r.repo_id == row.repo_id
            and r.revision_id != row.revision_id
            and r.first_at is not None
            and row.last_at is not None
            and r.first_at > row.last_at
        ]
        if later:
            newest = max(later, key=lambda pair: pair[0])[1]
            row = replace(row, advice=moved_on(row.advice, Newer(newest.commit_sha, newest.status)))
        moved.append(row)
    return moved


def _newer(revision: Mapping[str, Any]) -> Newer | None:
    """The package's latest revision, when this one is another."""
    sha = revision.get("package__latest_revision__commit_sha")
    if not sha or sha == revision["commit_sha"]:
        return None
    latest = revision.get("latest_assessment")
    status = status_of(revision.get("package__latest_revision__headline"))
    if latest is None:
        return Newer(sha, status)
    admitted = tuple(s.release for s in latest.servable if s.admitted)
    refused = tuple(s.release for s in latest.servable if s.admitted is False)
    return Newer(sha, status, admitted, refused)
