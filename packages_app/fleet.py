"""Read-side selectors for what the fleet runs: served revisions, nodes, topologies, before/after figures.

Selectors only (services layer, read side): they read models and call throughput's public aggregates,
never write, and issue a fixed number of queries however many nodes or reports exist. Which revisions
nodes ran in a window ("served in the last N days"), by how many nodes, and whether MTP went unused
there come from models.Serving (a row per revision x node x topology x split, with its last report
and its last one showing MTP unused), so the catalog's served-revision filters and the nodes pages
cost what the revisions x nodes cost, not what the reports or the days do. What the rows shown did
inside the window (reports, medians from the rollups' sketches, within 1 %) comes from their rollup
cells (``window_cells``: day cells for whole days, hour cells for the window's first day). The
topology page reads the same per topology (both keys carry it), the before/after comparison the two
revisions' total cells. Raw reports are read only for the stage layout of a shown row's newest report.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db.models import Case, Count, F, Max, Q, QuerySet, Sum, TextField, Value, When, Window
from django.db.models.functions import Cast, Coalesce, RowNumber
from django.utils import timezone

from packages_app import glossary, sketch, throughput
from packages_app.models import Node, NodeRun, Report, Revision, Rollup, Serving
from packages_app.rollups import hourly_since
from packages_app.throughput import RevisionThroughput
from packages_app.verdicts import INCONSISTENT_VERDICTS

DEFAULT_WINDOW_DAYS = 7
# Below this many reports on either side a before/after ratio is noise, and is marked so.
FEW_REPORTS = 10
MTP_ON = Q(mtp_used=True)


class _Names:
    """Display helpers for a row naming a revision by ``repo_id`` and ``commit_sha``."""

    repo_id: str
    commit_sha: str
    verdict: str
    alert: bool

    @property
    def short_sha(self) -> str:
        return self.commit_sha[:8]

    @property
    def owner(self) -> str:
        return self.repo_id.split("/", 1)[0]

    @property
    def name(self) -> str:
        return self.repo_id.split("/", 1)[-1]

    @property
    def broken(self) -> bool:
        """Inconsistent verdict, or nodes report the MTP weights unused."""
        return self.alert or self.verdict in INCONSISTENT_VERDICTS


def window_start(days: int = DEFAULT_WINDOW_DAYS, now: datetime | None = None) -> datetime:
    return (now or timezone.now()) - timedelta(days=days)


def window_cells(since: datetime) -> Q:
    """Rollup cells of the reports received since ``since``, to the hour: day cells of the whole days
    after since's day, and since's day by hour from since's hour. Past the hour cells' retention
    (MESHDASH_ROLLUP_HOURLY_DAYS) the window starts at since's day instead."""
    return functools.reduce(operator.or_, window_parts(since))


def window_parts(since: datetime) -> list[Q]:
    """``window_cells`` as conditions that are each one (grain, bucket_start) range: ANDed with a
    revision and a node, each is one range of the rollups' natural key, which PostgreSQL only scans
    as such when the OR is spelled out around them (else it reads every cell of the revision and
    node: 0.9 s instead of 0.05 s for /nodes/' 200 groups at 10M reports)."""
    hour = since.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    day = hour.replace(hour=0)
    if hour < hourly_since():
        return [Q(grain=Rollup.Grain.DAY, bucket_start__gte=day)]
    next_day = day + timedelta(days=1)
    hours = Q(grain=Rollup.Grain.HOUR, bucket_start__gte=hour, bucket_start__lt=next_day)
    return [Q(grain=Rollup.Grain.DAY, bucket_start__gte=next_day), hours]


# --- served revisions (catalog) ------------------------------------------------------------------


@dataclass(frozen=True)
class ServedRevision(_Names):
    """A revision some node reported running inside the window."""

    package_id: int
    revision_id: int
    repo_id: str
    commit_sha: str
    verdict: str
    is_latest: bool
    nodes: int
    reports: int
    alert: bool
    reason: str


def served_revisions(package_ids: Iterable[int], since: datetime) -> dict[int, list[ServedRevision]]:
    """Per package, the revisions nodes reported since ``since``, broken first (3 queries): which
    and by how many nodes from the Serving rows, the window's reports from the all-node cells."""
    rows = list(
        Serving.objects.filter(revision__package_id__in=list(package_ids), last_at__gte=since)
        .exclude(node_key=Rollup.ALL_NODES)
        .values(
            "revision_id",
            "revision__package_id",
            "revision__package__repo_id",
            "revision__commit_sha",
            "revision__verdict",
            "revision__mtp_detected",
        )
        .annotate(
            latest_id=F("revision__package__latest_revision_id"),
            nodes=Count("node_key", distinct=True),
            unused=Count("node_key", filter=Q(last_unused_at__gte=since)),
        )
        .order_by()
    )
    revision_ids = [row["revision_id"] for row in rows]
    reports = dict(
        Rollup.objects.filter(window_cells(since), node_key=Rollup.ALL_NODES, revision_id__in=revision_ids)
        .values_list("revision_id")
        .annotate(n=Sum("reports"))
        .order_by()
    )
    reasons = problem_reasons(revision_ids)
    result: dict[int, list[ServedRevision]] = {}
    for row in rows:
        served = _served(row, reports.get(row["revision_id"], 0), reasons.get(row["revision_id"], ""))
        result.setdefault(served.package_id, []).append(served)
    for items in result.values():
        items.sort(key=lambda s: (not s.broken, -s.nodes, s.commit_sha))
    return result


def _served(row: Mapping[str, Any], reports: int, reason: str) -> ServedRevision:
    alert = bool(row["unused"]) and bool(row["revision__mtp_detected"])
    if alert and not reason:
        reason = "Nodes report MTP weights present but never used."
    return ServedRevision(
        package_id=row["revision__package_id"],
        revision_id=row["revision_id"],
        repo_id=row["revision__package__repo_id"],
        commit_sha=row["revision__commit_sha"],
        verdict=row["revision__verdict"] or "",
        is_latest=row["revision_id"] == row["latest_id"],
        nodes=row["nodes"],
        reports=reports,
        alert=alert,
        reason=reason,
    )


def problem_reasons(revision_ids: Iterable[int]) -> dict[int, str]:
    """Each revision's one-line reason: its first error's sentence (one query, the problems key only)."""
    rows = Revision.objects.filter(id__in=list(revision_ids)).values_list("id", "audit__problems")
    return {rid: glossary.first_error(problems) for rid, problems in rows}


def unused_since(since: datetime) -> Q:
    """Serving rows whose nodes reported a revision's MTP weights unused since ``since``."""
    return Q(last_unused_at__gte=since, revision__mtp_detected=True)


def _served_packages_q(servings: QuerySet[Serving]) -> Q:
    """Packages with one of these Serving rows (a subquery, not evaluated)."""
    return Q(id__in=servings.values("revision__package_id"))


def served_inconsistent_q(since: datetime, verdicts: Iterable[str] = INCONSISTENT_VERDICTS) -> Q:
    """Packages that nodes ran a revision of with one of these verdicts since ``since``."""
    recent = Serving.objects.filter(node_key=Rollup.ALL_NODES, last_at__gte=since)
    return _served_packages_q(recent.filter(revision__verdict__in=list(verdicts)))


def served_alert_q(since: datetime) -> Q:
    """Packages whose nodes reported a revision's MTP weights unused since ``since``."""
    return _served_packages_q(Serving.objects.filter(unused_since(since), node_key=Rollup.ALL_NODES))


# --- nodes ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NodeServing(_Names):
    """What one node ran of one revision inside the window."""

    revision_id: int
    repo_id: str
    commit_sha: str
    verdict: str
    is_latest: bool
    layer_range: str
    stage_splits: str
    topology_id: str
    reports: int
    tps: float | None
    alert: bool

    @property
    def outdated(self) -> bool:
        return not self.is_latest


@dataclass(frozen=True)
class NodeRow:
    node: Node
    version: str
    devices: list[str]
    serving: list[NodeServing] = field(default_factory=list)
    hidden: int = 0  # what it served beyond the rows shown
    stale: bool = False  # runs a revision that is not its package's latest, or not consistent

    @property
    def tps(self) -> float | None:
        rates = [s.tps for s in self.serving if s.tps is not None]
        return max(rates) if rates else None

    @property
    def alerts(self) -> int:
        return sum(1 for s in self.serving if s.alert)


# What a node served, per (revision, split): the rows shown per node on /nodes/ and on its own page,
# outdated or inconsistent revisions and MTP unused first, then the busiest. The rest is counted.
NODES_PAGE_ROWS = 5
NODE_PAGE_ROWS = 100


def node_rows(
    since: datetime,
    name: str | None = None,
    stale_only: bool = False,
    show_private: bool = False,
    limit: int | None = None,
) -> list[NodeRow]:
    """Every node (or the one named) with what it served since ``since`` (6 queries), at most
    ``limit`` rows a node (NODES_PAGE_ROWS, or NODE_PAGE_ROWS for one node).

    Private packages' revisions are left out unless ``show_private`` (the edge asks access.py).
    """
    nodes = Node.objects.order_by("name")
    if name is not None:
        nodes = nodes.filter(name=name)
    node_list = list(nodes)
    limit = limit or (NODE_PAGE_ROWS if name is not None else NODES_PAGE_ROWS)
    serving = _serving(since, {n.pk: n.name for n in node_list}, show_private, limit)
    runs = _latest_runs([n.pk for n in node_list])
    rows = [_node_row(n, runs.get(n.pk), serving.get(n.pk, _NOTHING_SERVED)) for n in node_list]
    return [r for r in rows if r.stale] if stale_only else rows


def _node_row(node: Node, run: NodeRun | None, served: NodeServed) -> NodeRow:
    devices = [_device_name(d) for d in run.devices] if run and isinstance(run.devices, list) else []
    version = run.version if run else ""
    return NodeRow(node, version, [d for d in devices if d], served.rows, served.hidden, served.stale)


def _device_name(device: Any) -> str:
    if isinstance(device, dict):
        return str(device.get("name") or device.get("id") or device.get("device") or "")
    return str(device)


def _latest_runs(node_ids: list[int]) -> dict[int, NodeRun]:
    runs: dict[int, NodeRun] = {}
    for run in NodeRun.objects.filter(node_id__in=node_ids).order_by("node_id", "-updated_at", "-id"):
        runs.setdefault(run.node_id, run)
    return runs


_SERVED_REVISION = ("package__repo_id", "commit_sha", "verdict", "package__latest_revision_id")
# A revision that is not its package's latest, or not consistent.
_STALE_REVISION = ~Q(revision_id=F("revision__package__latest_revision_id")) | Q(
    revision__verdict__in=INCONSISTENT_VERDICTS
)


@dataclass(frozen=True)
class NodeServed:
    rows: list[NodeServing]
    hidden: int
    stale: bool


_NOTHING_SERVED = NodeServed([], 0, False)


def _serving(since: datetime, names: dict[int, str], show_private: bool, limit: int) -> dict[int, NodeServed]:
    """What each node served in the window: which (revision, split) groups from the Serving rows (the
    ``limit`` rows a node to show, ranked in SQL, and whether the node runs a stale revision at all),
    the shown groups' revisions, their reports and medians in the window from their rollup cells,
    and their topologies (4 queries, however many groups or reports the window holds)."""
    servings = Serving.objects.filter(last_at__gte=since, node_key__in=list(names))
    if not show_private:
        servings = servings.filter(revision__package__private=False)
    shown = list(_ranked_groups(servings, since, limit))
    revisions = _revisions(g["revision_id"] for g in shown)
    figures = _group_figures(since, shown)
    topologies = _last_topologies(shown)
    result: dict[int, list[NodeServing]] = {}
    hidden: dict[int, int] = {}
    stale: set[int] = set()
    for group in shown:
        key = (group["node_key"], group["revision_id"], group["stage_splits"])
        reports, bins = figures.get(key, (0, []))
        revision = revisions[group["revision_id"]]
        serving = _node_serving(group, revision, reports, bins, topologies.get(key), names[key[0]])
        result.setdefault(key[0], []).append(serving)
        hidden[key[0]] = max(0, group["groups"] - limit)
        if group["stale"]:
            stale.add(key[0])
    for items in result.values():
        items.sort(key=lambda s: (not s.broken, s.is_latest, s.repo_id, s.commit_sha))
    return {node: NodeServed(rows, hidden.get(node, 0), node in stale) for node, rows in result.items()}


def _ranked_groups(servings: QuerySet[Serving], since: datetime, limit: int) -> QuerySet[Serving, Any]:
    """Per (node, revision, split), its Serving rows (one a topology) added up: at most ``limit`` a
    node, stale ones first (an outdated or inconsistent revision, or MTP unused in the window), then
    the busiest over their life (one query; ``groups`` counts a node's groups, ``stale`` is 1 for a
    stale one, so a node runs something stale when its first row is). The rows carry keys and flags
    only (names come after, for the rows shown): at 10M reports a node can have served thousands of
    revisions, and the sort is narrower without them."""
    per_node = [F("node_key")]
    unused = Q(unused_recently=1, revision__mtp_detected=True)
    return (
        servings.values(
            "node_key",
            "revision_id",
            "stage_splits",
            "revision__package__latest_revision_id",
            "revision__verdict",
            "revision__mtp_detected",
        )
        .annotate(
            reports_n=Sum("reports"),
            last_at_max=Max("last_at"),
            unused_recently=Max(Case(When(last_unused_at__gte=since, then=Value(1)), default=Value(0))),
        )
        .annotate(stale=Case(When(_STALE_REVISION | unused, then=Value(1)), default=Value(0)))
        .annotate(
            rank=Window(
                RowNumber(),
                partition_by=per_node,
                order_by=[
                    F("stale").desc(),
                    F("reports_n").desc(),
                    F("revision_id").desc(),
                    F("stage_splits"),
                ],
            ),
            groups=Window(Count("*"), partition_by=per_node),
        )
        .filter(rank__lte=limit)
        .order_by()
    )


def _revisions(ids: Iterable[int]) -> dict[int, dict[str, Any]]:
    """The shown revisions' names and verdicts (one query)."""
    rows = Revision.objects.filter(pk__in=set(ids)).values("pk", *_SERVED_REVISION)
    return {row["pk"]: row for row in rows}


Figures = tuple[int, list[str]]  # reports, and their decode-rate sketches as JSON texts


def _group_figures(since: datetime, groups: list[dict[str, Any]]) -> dict[Any, Figures]:
    """The shown (node, revision, split) groups' figures in the window (one query)."""
    keys = ("node_key", "revision_id", "stage_splits")
    return _window_figures(since, [Q(**{k: g[k] for k in keys}) for g in groups], keys)


def _window_figures(since: datetime, groups: list[Q], keys: tuple[str, ...]) -> dict[Any, Figures]:
    """Reports and sketches of the rollup cells of each group (a condition naming its revision and
    node key) in the window, by ``keys``. The OR is spelled out per group and window part, so each
    term is one range of the natural key (window_parts)."""
    wanted = Q(pk__in=[])
    for group in groups:
        for part in window_parts(since):
            wanted |= group & part
    rows = Rollup.objects.filter(wanted).annotate(bins=Cast("tps_sketch", TextField()))
    result: dict[Any, Figures] = {}
    for *key, reports, text in rows.values_list(*keys, "reports", "bins"):
        total, texts = result.get(tuple(key), (0, []))
        texts.append(text)
        result[tuple(key)] = (total + reports, texts)
    return result


def _last_topologies(groups: list[dict[str, Any]]) -> dict[Any, Any]:
    """The topology of each (node, revision, split) group's newest report (one query)."""
    newest = [
        Q(
            node_id=g["node_key"],
            revision_id=g["revision_id"],
            stage_splits=g["stage_splits"],
            received_at=g["last_at_max"],
        )
        for g in groups
    ]
    return _newest_topologies(Q(), newest, ("node_id", "revision_id", "stage_splits"))


def _newest_topologies(among: Q, reports: list[Q], keys: tuple[str, ...]) -> dict[Any, Any]:
    """The ``topology`` of the body of each report named (by its key and arrival time, which the
    Serving rows and cells hold as their last), by ``keys`` (one query)."""
    if not reports:
        return {}
    rows = Report.objects.filter(among, functools.reduce(operator.or_, reports)).order_by("id")
    return {tuple(key): topology for *key, topology in rows.values_list(*keys, "body__topology")}


def _node_serving(
    group: Mapping[str, Any],
    revision: Mapping[str, Any],
    reports: int,
    bins: list[str],
    topology: Any,
    node_name: str,
) -> NodeServing:
    return NodeServing(
        revision_id=group["revision_id"],
        repo_id=revision["package__repo_id"],
        commit_sha=revision["commit_sha"],
        verdict=revision["verdict"] or "",
        is_latest=group["revision_id"] == revision["package__latest_revision_id"],
        layer_range=_layer_range(topology, node_name),
        stage_splits=group["stage_splits"],
        topology_id=str(topology.get("topology_id", "")) if isinstance(topology, dict) else "",
        reports=reports,
        tps=_median(bins),
        alert=bool(group["unused_recently"]) and bool(group["revision__mtp_detected"]),
    )


def _layer_range(topology: Any, node_name: str) -> str:
    """The layers ``node_name`` holds in a report's topology, as ``start..end`` (several joined by ', ')."""
    stages = topology.get("stages") if isinstance(topology, dict) else None
    if not isinstance(stages, list):
        return ""
    ranges = [
        f"{s.get('layer_start')}..{s.get('layer_end')}"
        for s in stages
        if isinstance(s, dict) and s.get("node") == node_name
    ]
    return ", ".join(ranges)


def _rounded(value: float | None, digits: int = 2) -> float | None:
    return None if value is None else round(float(value), digits)


# --- before and after ----------------------------------------------------------------------------


@dataclass(frozen=True)
class RevisionFigures:
    """One revision's decode figures (on ``topology`` when both sides share one, else over all)."""

    revision: Revision
    reports: int = 0
    tps: float | None = None
    tps_mtp_on: float | None = None
    tps_mtp_off: float | None = None
    on_reports: int = 0
    acceptance_rate: float | None = None


@dataclass(frozen=True)
class Comparison:
    old: RevisionFigures
    new: RevisionFigures
    topology: str

    @property
    def ratio(self) -> float | None:
        if not self.old.tps or self.new.tps is None:
            return None
        return round(self.new.tps / self.old.tps, 2)

    @property
    def too_few(self) -> bool:
        return min(self.old.reports, self.new.reports) < FEW_REPORTS

    @property
    def sentence(self) -> str:
        return effect_sentence(self)


def effect_sentence(c: Comparison) -> str:
    """E.g. ``69cbd9fc -> 964edc7e: 3.15 -> 5.32 tok/s median, x1.69, 24 vs 31 reports``."""
    head = f"{c.old.revision.short_sha} -> {c.new.revision.short_sha}"
    if c.old.tps is None or c.new.tps is None:
        missing = c.old if c.old.tps is None else c.new
        return f"{head}: no decode figures for {missing.revision.short_sha} yet, nothing to compare."
    ratio = f", x{c.ratio:.2f}" if c.ratio is not None else ""
    text = (
        f"{head}: {c.old.tps:.2f} -> {c.new.tps:.2f} tok/s median{ratio}, "
        f"{c.old.reports} vs {c.new.reports} reports"
    )
    if c.topology:
        text += f" on topology {c.topology}"
    if c.too_few:
        text += f" (too few reports to tell: fewer than {FEW_REPORTS} on a side)"
    return text


def compare_revisions(old: Revision, new: Revision) -> Comparison:
    """Both revisions' figures, on their most-shared stage split when they have one (one query over
    their every-node total rollups; medians from the sketches, within 1 %)."""
    cells = list(
        Rollup.objects.filter(
            revision_id__in=[old.pk, new.pk], grain=Rollup.Grain.TOTAL, node_key=Rollup.ALL_NODES
        )
        .annotate(tps=Cast("tps_sketch", TextField()))
        .values("revision_id", "stage_splits", "mtp_used", "reports", "accepted", "proposed", "tps")
    )
    topology = shared_topology(cells)
    figures = _figures([c for c in cells if not topology or c["stage_splits"] == topology])
    return Comparison(
        RevisionFigures(old, **figures.get(old.pk, {})),
        RevisionFigures(new, **figures.get(new.pk, {})),
        topology,
    )


def shared_topology(cells: Iterable[Mapping[str, Any]]) -> str:
    """The stage split both revisions ran with most (the larger smaller side), or '' if none is shared."""
    counts: dict[str, dict[int, int]] = {}
    for cell in cells:
        if cell["stage_splits"]:
            by_revision = counts.setdefault(cell["stage_splits"], {})
            by_revision[cell["revision_id"]] = by_revision.get(cell["revision_id"], 0) + cell["reports"]
    shared = [(min(c.values()), split) for split, c in counts.items() if len(c) == 2]
    return max(shared)[1] if shared else ""


def _figures(cells: list[Mapping[str, Any]]) -> dict[int, dict[str, Any]]:
    """Per revision: reports, with MTP on, the acceptance rate and the three medians."""
    by_revision: dict[int, list[Mapping[str, Any]]] = {}
    for cell in cells:
        by_revision.setdefault(cell["revision_id"], []).append(cell)
    figures = {}
    for revision_id, group in by_revision.items():
        on = [c for c in group if c["mtp_used"]]
        off = [c for c in group if not c["mtp_used"]]
        accepted, proposed = sum(c["accepted"] for c in group), sum(c["proposed"] for c in group)
        figures[revision_id] = {
            "reports": sum(c["reports"] for c in group),
            "on_reports": sum(c["reports"] for c in on),
            "acceptance_rate": round(accepted / proposed, 3) if proposed else None,
            "tps": _median([c["tps"] for c in group]),
            "tps_mtp_on": _median([c["tps"] for c in on]),
            "tps_mtp_off": _median([c["tps"] for c in off]),
        }
    return figures


def _median(sketches: list[str]) -> float | None:
    """The median decode rate of sketches stored as JSON texts, rounded (None without any)."""
    return _rounded(sketch.median(throughput.merged_stored(sketches))) if sketches else None


def default_comparison_pair(revisions: list[Revision], latest_id: int | None) -> tuple[int, int] | None:
    """(old, new) ids: the latest against the newest older revision that nodes ran, else the one before."""
    if len(revisions) < 2:
        return None
    new = next((r for r in revisions if r.pk == latest_id), revisions[0])
    older = [r for r in revisions if r.pk != new.pk]
    totals = Rollup.objects.filter(
        revision_id__in=[r.pk for r in older], grain=Rollup.Grain.TOTAL, node_key=Rollup.ALL_NODES
    )
    ran = set(totals.values_list("revision_id", flat=True))
    old = next((r for r in older if r.pk in ran), older[0])
    return old.pk, new.pk


# --- audit vs reports ----------------------------------------------------------------------------


@dataclass(frozen=True)
class RanCounts:
    reports: int = 0
    nodes: int = 0
    mtp_on: int = 0
    auto_off: int = 0


def ran_counts(revision_id: int) -> RanCounts:
    """How often nodes ran the revision, with MTP, and without it although they asked for auto
    (one query over the revision's total rollups)."""
    every, per_node = Q(node_key=Rollup.ALL_NODES), ~Q(node_key=Rollup.ALL_NODES)
    row = Rollup.objects.filter(revision_id=revision_id, grain=Rollup.Grain.TOTAL).aggregate(
        ran=Coalesce(Sum("reports", filter=every), 0),
        nodes=Count("node_key", filter=per_node, distinct=True),
        mtp_on=Coalesce(Sum("reports", filter=every & MTP_ON), 0),
        auto_off=Coalesce(Sum("reports", filter=every & ~MTP_ON & Q(requested_strategy="auto")), 0),
    )
    return RanCounts(row["ran"], row["nodes"], row["mtp_on"], row["auto_off"])


def ran_counts_of(throughput: RevisionThroughput) -> RanCounts:
    """The same counts from figures the package page has read already (no query)."""
    return RanCounts(
        reports=throughput.reports,
        nodes=throughput.nodes,
        mtp_on=throughput.mtp_on.reports,
        auto_off=throughput.auto_off,
    )


def auto_outcome(runtime: Any, verdict: str) -> str:
    """What the audit predicts for ``strategy = auto``: native-mtp, no-mtp, load-fails or refused.

    Reads the resolver table (``runtime.auto.outcome``); an audit written before it existed has
    ``native_mtp`` instead, and a declared head without weights fails to load.
    """
    auto = runtime.get("auto") if isinstance(runtime, dict) else None
    if not isinstance(auto, dict):
        return ""
    if isinstance(auto.get("outcome"), str):
        return str(auto["outcome"])
    if verdict == "declared-without-weights":
        return "load-fails"
    native = auto.get("native_mtp")
    return "" if native is None else ("native-mtp" if native else "no-mtp")


def reconcile(outcome: str, ran: RanCounts) -> list[str]:
    """Findings where what nodes report contradicts what the audit predicts (pure; [] when they agree)."""
    if not ran.reports:
        return []
    nodes = f"{ran.nodes} node{'s' if ran.nodes != 1 else ''}"
    if outcome in ("load-fails", "refused"):
        how = " without MTP" if not ran.mtp_on else ""
        verb = "fails to load" if outcome == "load-fails" else "is refused"
        return [
            f"The audit predicts this revision {verb} "
            f"under auto, yet {ran.reports} reports from {nodes} ran it{how}: "
            "the runtime fell back instead of failing, or the audit misses something."
        ]
    if outcome == "no-mtp" and ran.mtp_on:
        return [
            f"The audit predicts no native MTP under auto, yet {ran.mtp_on} reports show MTP in use: "
            "the nodes found another signal (a local GGUF or an explicit strategy)."
        ]
    if outcome == "native-mtp" and ran.auto_off:
        return [
            f"The audit predicts native MTP under auto, yet {ran.auto_off} reports that asked for auto "
            "ran without it: check the node's mesh-llm version and its load log."
        ]
    return []


# --- topologies ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Stage:
    node: str
    layer_start: Any
    layer_end: Any
    device: str


@dataclass(frozen=True)
class TopologyRun(_Names):
    revision_id: int
    repo_id: str
    commit_sha: str
    verdict: str
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


def topology_runs(topology_id: str, since: datetime, show_private: bool = False) -> TopologyRuns:
    """What ran on one topology since ``since``, per revision and split (3 queries): which, from the
    every-node Serving rows (the TOPOLOGY_ROWS busiest over their life), their reports and medians
    in the window from the topology's rollup cells, the stages from each one's newest report."""
    servings = Serving.objects.filter(topology_id=topology_id, node_key=Rollup.ALL_NODES, last_at__gte=since)
    if not show_private:
        servings = servings.filter(revision__package__private=False)
    shown: list[Mapping[str, Any]] = list(
        servings.values(
            "revision_id",
            "stage_splits",
            "last_at",
            "revision__package__repo_id",
            "revision__commit_sha",
            "revision__verdict",
        )
        .annotate(
            alert=Case(When(unused_since(since), then=Value(1)), default=Value(0)),
            groups=Window(Count("*")),
        )
        .order_by("-reports", "-revision_id", "stage_splits")[:TOPOLOGY_ROWS]
    )
    if not shown:
        return TopologyRuns([])
    figures = _topology_figures(topology_id, since, shown)
    newest = [
        Q(revision_id=g["revision_id"], stage_splits=g["stage_splits"], received_at=g["last_at"])
        for g in shown
    ]
    bodies = _newest_topologies(Q(topology_id=topology_id), newest, ("revision_id", "stage_splits"))
    runs = []
    for g in shown:
        key = (g["revision_id"], g["stage_splits"])
        reports, bins = figures.get(key, (0, []))
        runs.append(_topology_run(g, reports, bins, bodies.get(key)))
    runs.sort(key=lambda r: (-r.reports, r.repo_id, r.commit_sha))
    return TopologyRuns(runs, max(0, shown[0]["groups"] - len(shown)))


def _topology_figures(
    topology_id: str, since: datetime, groups: list[Mapping[str, Any]]
) -> dict[Any, Figures]:
    """The shown (revision, split) groups' every-node figures on the topology in the window (one query)."""
    conditions = [
        Q(
            revision_id=g["revision_id"],
            node_key=Rollup.ALL_NODES,
            topology_id=topology_id,
            stage_splits=g["stage_splits"],
        )
        for g in groups
    ]
    return _window_figures(since, conditions, ("revision_id", "stage_splits"))


def _topology_run(group: Mapping[str, Any], reports: int, bins: list[str], topology: Any) -> TopologyRun:
    return TopologyRun(
        revision_id=group["revision_id"],
        repo_id=group["revision__package__repo_id"],
        commit_sha=group["revision__commit_sha"],
        verdict=group["revision__verdict"] or "",
        stage_splits=group["stage_splits"],
        reports=reports,
        tps=_median(bins),
        stages=stages_of(topology),
        alert=bool(group["alert"]),
    )


def stages_of(topology: Any) -> list[Stage]:
    stages = topology.get("stages") if isinstance(topology, dict) else None
    if not isinstance(stages, list):
        return []
    return [
        Stage(str(s.get("node", "")), s.get("layer_start"), s.get("layer_end"), str(s.get("device", "")))
        for s in stages
        if isinstance(s, dict)
    ]
