"""Read-side selectors for what the fleet runs: served revisions, nodes, topologies, before/after figures.

Selectors only (services layer, read side): they read models and call throughput's public aggregates,
never write, and issue a fixed number of queries however many nodes or reports exist. Which revisions
nodes ran in a window ("served in the last N days"), by how many nodes, and whether MTP went unused
there come from models.Serving (a row per revision x node x topology x split, with its last report
and its last one showing MTP unused), so the catalog's served-revision filters and the nodes pages
cost what the revisions x nodes cost, not what the reports or the days do. What the rows shown did
inside the window (reports, medians from the rollups' sketches, within 1 %) comes from their node's
NodeRollup cells, every strategy and topology in one (day cells for whole days; the window's first
day by its hours, or as its day cell less the hours before the window, whichever is fewer cells:
``_window_terms``; ``window_cells`` for the catalog's every-node cells). The topology page reads the
Rollup cells of its topology, the before/after comparison the two revisions' total cells. Raw reports
are read only for the stage layout of a shown row's newest report.
/nodes/ is paged (NODES_PER_PAGE); each node's rows start from its few busiest Serving rows, read in
index order (a limited, correlated subquery), so a node that served thousands of revisions costs what
one that served three does; where the nodes' rows in the window are fewer than the page shows of them
(a thousand nodes running a few revisions each), all of them are read in one query instead.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import operator
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from django.core.paginator import Page, Paginator
from django.db import connection
from django.db.models import (
    Case,
    Count,
    Exists,
    F,
    IntegerField,
    Max,
    Min,
    Model,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Sum,
    TextField,
    Value,
    When,
    Window,
)
from django.db.models.expressions import RawSQL
from django.db.models.functions import Cast, RowNumber
from django.utils import timezone

from packages_app import sketch, throughput
from packages_app.audit.advice import Advice, Newer, NodeFacts, advise, moved_on, strategy_can_change_cause
from packages_app.audit.assessment import Assessment, Headline, parse_stored
from packages_app.models import LastServed, Node, NodeRollup, NodeRun, Report, Revision, Rollup, Serving
from packages_app.rollups import hourly_since
from packages_app.verdicts import NEEDS_ACTION, Cause, Status, improves, status_of

DEFAULT_WINDOW_DAYS = 7
# Below this many reports on either side a before/after ratio is noise, and is marked so.
FEW_REPORTS = 10


class _Names:
    """Display helpers for a row naming a revision by ``repo_id`` and ``commit_sha``."""

    repo_id: str
    commit_sha: str
    verdict: str
    headline: str
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
    def status(self) -> Status:
        return status_of(self.headline)

    @property
    def broken(self) -> bool:
        """The revision's headline calls for action, or nodes report its MTP weights unused."""
        return self.alert or self.status.needs_action


# Each status's rank (the vocabulary's), for ranking in SQL; an unknown or empty status ranks last.
HEADLINE_RANK = Case(
    *(When(revision__headline=s.value, then=Value(s.rank)) for s in Status),
    default=Value(Status.NOT_ASSESSED.rank),
)
LATEST_HEADLINE_RANK = Case(
    *(When(revision__package__latest_revision__headline=s.value, then=Value(s.rank)) for s in Status),
    default=Value(Status.NOT_ASSESSED.rank),
)


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
    parts = []
    for grain, start, end in _window_ranges(since):
        part = Q(grain=grain, bucket_start__gte=start)
        parts.append(part & Q(bucket_start__lt=end) if end else part)
    return parts


def _window_ranges(since: datetime) -> list[tuple[str, datetime, datetime | None]]:
    """(grain, from, before) of each part of the window: whole days by day, since's day by hour."""
    hour = since.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    day = hour.replace(hour=0)
    if hour < hourly_since():
        return [(Rollup.Grain.DAY.value, day, None)]
    next_day = day + timedelta(days=1)
    return [(Rollup.Grain.DAY.value, next_day, None), (Rollup.Grain.HOUR.value, hour, next_day)]


SqlPart = tuple[str, list[Any]]  # SQL text with %s placeholders, and its parameters


def rows_matching(model: type[Model], keys: Sequence[str], groups: Sequence[Sequence[Any]]) -> RawSQL:
    """The ids of ``model``'s rows whose ``keys`` columns equal one group's values, as a subquery for
    ``pk__in``: the groups as a list (``_values``), each row of it looked up on its own (``_joined``)
    by whichever index serves its keys. (An OR of one term a group took PostgreSQL 175 ms to plan for
    2,600 groups; the ORM's Q objects cost a millisecond a term to build.)"""
    values, names, params = _values(groups)
    quote = connection.ops.quote_name
    where = " AND ".join(f"t.{quote(key)} = v.{name}" for key, name in zip(keys, names, strict=True))
    table = quote(model._meta.db_table)
    return RawSQL(_joined(values, names, table, where, "t.id", "t.id"), params)  # noqa: S611


def _values(groups: Sequence[Sequence[Any]]) -> tuple[str, list[str], list[Any]]:
    """These rows of parameters (at least one) as a list to select from: its text, its columns' names
    (SQLite's own for a VALUES list's) and its parameters. PostgreSQL gets one array a column: with a
    VALUES list of 13,000 placeholders the needing-action page's cells query took 229 ms, most of it
    psycopg parsing them; with arrays 122 ms."""
    width = len(groups[0])
    names = [f"column{i}" for i in range(1, width + 1)]
    if connection.vendor == "postgresql":
        columns = [[group[i] for group in groups] for i in range(width)]
        arrays = ", ".join(f"%s::{_pg_array(column)}" for column in columns)
        return f"unnest({arrays})", names, columns
    adapt = connection.ops.adapt_datetimefield_value
    row = "(" + ", ".join(["%s"] * width) + ")"
    params = [adapt(v) if isinstance(v, datetime) else v for group in groups for v in group]
    return f"(VALUES {', '.join([row] * len(groups))})", names, params


_PG_ARRAYS = {bool: "boolean[]", int: "bigint[]", datetime: "timestamptz[]"}


def _pg_array(column: list[Any]) -> str:
    """The array type of one column of values (text unless its first value says otherwise)."""
    first = next((value for value in column if value is not None), "")
    return _PG_ARRAYS.get(type(first), "text[]")


def _joined(
    values: str, names: list[str], table: str, where: str, picked: str, columns: str, also: str = ""
) -> str:
    """``columns`` of a ``_values`` list (``v``; each of its rows with every row of ``also``, another
    list as ``_aliased`` names it) joined to the rows of ``table`` (``t``) that ``where`` matches to each
    of its rows. PostgreSQL reads them by a LATERAL subquery selecting ``picked`` from them: it keeps the
    planner from hashing the list against a scan of the whole table; SQLite reads a plain join that way.
    Only names and constant text are formatted in: values are the lists' parameters."""
    lists = _aliased(values, names, "v") + (f" CROSS JOIN {also}" if also else "")
    if connection.vendor == "postgresql":
        lateral = f"SELECT {picked} FROM {table} AS t WHERE {where}"  # noqa: S608
        return f"SELECT {columns} FROM {lists} CROSS JOIN LATERAL ({lateral}) AS t"  # noqa: S608
    return f"SELECT {columns} FROM {lists} JOIN {table} AS t ON {where}"  # noqa: S608


def _aliased(values: str, names: list[str], alias: str) -> str:
    """A ``_values`` list as a FROM item named ``alias``, its columns by ``names`` (SQLite's own)."""
    return (
        f"{values} AS {alias} ({', '.join(names)})"
        if connection.vendor == "postgresql"
        else f"{values} AS {alias}"
    )


# --- served revisions (catalog) ------------------------------------------------------------------


@dataclass(frozen=True)
class ServedRevision(_Names):
    """A revision some node reported running inside the window."""

    package_id: int
    revision_id: int
    repo_id: str
    commit_sha: str
    verdict: str
    headline: str
    is_latest: bool
    nodes: int
    reports: int
    alert: bool
    sentence: str  # the revision's headline sentence
    action: str  # and its action

    @property
    def reason(self) -> str:
        if self.alert and not self.status.needs_action:
            return "Nodes report its MTP weights present but never used."
        return self.sentence


def served_revisions(package_ids: Iterable[int], since: datetime) -> dict[int, list[ServedRevision]]:
    """Per package, the revisions nodes reported since ``since``, broken first (2 queries): which, by
    how many nodes and with which headline, each revision counting its nodes' Serving rows in a
    subquery (from the serving_revision_recent index alone); the window's reports from the all-node
    cells. Not each Serving row joined to its revision and grouped: PostgreSQL then read the
    revision's assessment for every row (a page of the catalog shape: 2,451 rows, 40 nodes each, for
    49 revisions, 6.6 ms against 1.6 ms)."""
    window = (
        Serving.objects.filter(revision_id=OuterRef("pk"), last_at__gte=since)
        .exclude(node_key=Rollup.ALL_NODES)
        .order_by()
    )
    nodes = window.values("revision_id").annotate(n=Count("node_key", distinct=True)).values("n")
    rows = list(
        Revision.objects.filter(package_id__in=list(package_ids))
        .annotate(nodes=Subquery(nodes), unused=Exists(window.filter(last_unused_at__gte=since)))
        .filter(nodes__gt=0)
        .values(
            "pk",
            "package_id",
            "package__repo_id",
            "package__latest_revision_id",
            "commit_sha",
            "verdict",
            "headline",
            "mtp_detected",
            "assessment__headline",
            "nodes",
            "unused",
        )
        .order_by()
    )
    reports = dict(
        Rollup.objects.filter(
            window_cells(since), node_key=Rollup.ALL_NODES, revision_id__in=[row["pk"] for row in rows]
        )
        .values_list("revision_id")
        .annotate(n=Sum("reports"))
        .order_by()
    )
    result: dict[int, list[ServedRevision]] = {}
    for row in rows:
        served = _served(row, reports.get(row["pk"], 0))
        result.setdefault(served.package_id, []).append(served)
    for items in result.values():
        items.sort(key=lambda s: (not s.broken, s.status.rank, -s.nodes, s.commit_sha))
    return result


def _served(row: Mapping[str, Any], reports: int) -> ServedRevision:
    headline = Headline.from_json(row["assessment__headline"])
    return ServedRevision(
        package_id=row["package_id"],
        revision_id=row["pk"],
        repo_id=row["package__repo_id"],
        commit_sha=row["commit_sha"],
        verdict=row["verdict"] or "",
        headline=row["headline"] or "",
        is_latest=row["pk"] == row["package__latest_revision_id"],
        nodes=row["nodes"],
        reports=reports,
        alert=bool(row["unused"]) and bool(row["mtp_detected"]),
        sentence=headline.sentence if headline else "",
        action=headline.action.text if headline else "",
    )


def unused_since(since: datetime) -> Q:
    """Serving rows whose nodes reported a revision's MTP weights unused since ``since``."""
    return Q(last_unused_at__gte=since, revision__mtp_detected=True)


def _served_packages_q(served: QuerySet[LastServed]) -> Q:
    """Packages with a revision among these (a subquery, not evaluated)."""
    return Q(id__in=served.values("package_id"))


def served_inconsistent_q(since: datetime, verdicts: Iterable[str]) -> Q:
    """Packages that nodes ran a revision of with one of these verdicts since ``since``."""
    return _served_packages_q(
        LastServed.objects.filter(last_at__gte=since, revision__verdict__in=list(verdicts))
    )


def served_headline_q(since: datetime, statuses: Iterable[str]) -> Q:
    """Packages that nodes ran a revision of with one of these headline statuses since ``since``."""
    return _served_packages_q(
        LastServed.objects.filter(last_at__gte=since, revision__headline__in=list(statuses))
    )


def served_alert_q(since: datetime) -> Q:
    """Packages whose nodes reported a revision's MTP weights unused since ``since``."""
    unused = LastServed.objects.filter(last_unused_at__gte=since, revision__mtp_detected=True)
    return _served_packages_q(unused)


# --- nodes ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NodeServing(_Names):
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
class NodeRow:
    node: Node
    version: str
    devices: list[str]
    serving: list[NodeServing] = field(default_factory=list)
    hidden: int = 0  # what it served beyond the rows shown
    certification: str = ""  # its newest run's split certification: certified | uncertified_override | ""
    at_least: bool = False  # ``hidden`` is a floor: the count stopped at SERVED_COUNT_CAP
    observations: Any = None  # what it said about itself at its newest run (NodeRun.observations)

    @property
    def said(self) -> Observations:
        return Observations.of(self.observations)

    @property
    def tps(self) -> float | None:
        rates = [s.tps for s in self.serving if s.tps is not None]
        return max(rates) if rates else None

    @property
    def alerts(self) -> int:
        return sum(1 for s in self.serving if s.alert)

    @functools.cached_property  # ranking and filtering a thousand rows ask it several times each
    def advice(self) -> Advice | None:
        """The most urgent advice among the rows shown, when one needs action."""
        urgent = [s.advice for s in self.serving if s.advice.needs_action]
        return min(urgent, key=lambda a: a.cause.rank) if urgent else None

    @property
    def needs_action(self) -> bool:
        return self.advice is not None


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


# What a node served, per (revision, split): the rows shown per node on /nodes/ and on its own page,
# those needing action first, then the busiest. The rest is counted, up to SERVED_COUNT_CAP.
NODES_PAGE_ROWS = 5
NODE_PAGE_ROWS = 100
NODES_PER_PAGE = 20
SERVED_COUNT_CAP = 200


class RevisionList(Subquery):
    """The revision ids a correlated, sliced subquery of Serving rows selects, comma-separated in one
    column: a per-row LIMIT (the top rows of each node) in one query on both databases, each node's
    rows read from an index in order until the limit, never all of them sorted (PostgreSQL and SQLite
    both let a subquery in FROM name the outer row)."""

    template = "(SELECT string_agg(CAST(top.revision_id AS text), ',') FROM (%(subquery)s) AS top)"
    output_field = TextField()

    def as_sqlite(self, compiler: Any, connection: Any, **extra: Any) -> Any:
        template = "(SELECT group_concat(top.revision_id) FROM (%(subquery)s) AS top)"
        return self.as_sql(compiler, connection, template=template, **extra)


class CappedCount(Subquery):
    """How many rows a correlated subquery sliced to ``[:cap + 1]`` selects: the count stops there."""

    template = "(SELECT COUNT(*) FROM (%(subquery)s) AS capped)"
    output_field = IntegerField()


@dataclass(frozen=True)
class NodePage:
    """One page of /nodes/: the nodes likeliest to need action first, then by name."""

    rows: list[NodeRow]
    page: Page[Any]


def node_page(
    since: datetime, number: Any = 1, needs_action: bool = False, show_private: bool = False
) -> NodePage:
    """A page of NODES_PER_PAGE nodes with what each served since ``since`` (node_rows' queries and the
    count). Ranked in SQL by whether the node served, since ``since``, a revision whose headline or
    whose package's newer latest calls for action, or one whose MTP went unused; the advice of the rows
    shown is then judged in Python, against each node's release.

    ``needs_action`` keeps the nodes whose advice calls for action, judged in Python for every node: the
    SQL flag only ranks, it cannot see what a node's own release refuses (an upgrade to make), so filtering
    on it would hide such a node from the answer to "which of my nodes need action". Every node is judged
    without what advice never reads (where each report's topology placed the node, the decode-rate
    sketches, the reports in the window), and without its cells' strategies where its reports all ran
    one or its release is unknown (``_read_to_judge``); then the page's rows get them (``_placed``)."""
    if needs_action:
        judged = node_rows(since, needs_action=True, show_private=show_private, placed=False)
        page_of_rows = Paginator(judged, NODES_PER_PAGE).get_page(number)
        return NodePage(_placed(list(page_of_rows.object_list), since, show_private), page_of_rows)
    nodes = Node.objects.annotate(attention=Exists(_flagged(_window(since, show_private), since)))
    page = Paginator(nodes.order_by("-attention", "name"), NODES_PER_PAGE).get_page(number)
    return NodePage(_rows_of(list(page.object_list), since, show_private, NODES_PAGE_ROWS), page)


def node_rows(
    since: datetime,
    name: str | None = None,
    needs_action: bool = False,
    show_private: bool = False,
    limit: int | None = None,
    placed: bool = True,
) -> list[NodeRow]:
    """Every node (or the one named) with what it served since ``since`` (9 queries; 10 where the
    nodes' rows in the window outnumber those shown: ``_few_window_rows``), at most
    ``limit`` rows a node (NODES_PAGE_ROWS, or NODE_PAGE_ROWS for one node), each with its advice;
    a run the node's agent registered without any report in the window is a row too.

    Private packages' revisions are left out unless ``show_private`` (the edge asks web/access.py).
    Without ``placed``, the rows are for their advice only (7 queries, or 8): no median decode rate, no
    layers, stages or topology, and the reports and strategies in the window read only where the
    advice's cause needs them (``_read_to_judge``; elsewhere its text may name the strategy otherwise);
    the nodes' names only, and neither their devices nor their registered-only rows' layers
    (``_placed``).
    """
    nodes = Node.objects.order_by("name")
    if name is not None:
        nodes = nodes.filter(name=name)
    if not placed:
        nodes = nodes.only("pk", "name")  # the page's rows read the rest (``_placed``)
    limit = limit or (NODE_PAGE_ROWS if name is not None else NODES_PAGE_ROWS)
    rows = _rows_of(list(nodes), since, show_private, limit, placed, among=nodes.values_list("pk", flat=True))
    return [r for r in rows if r.needs_action] if needs_action else rows


def judged_rows(
    nodes: list[Node], since: datetime, show_private: bool, among: NodeIds | None = None
) -> list[NodeRow]:
    """The nodes' rows for their judgement only, as ``node_rows(placed=False)`` judges every node for the
    needing-action list (packages_app.judgements keeps each node's)."""
    return _rows_of(nodes, since, show_private, NODES_PAGE_ROWS, placed=False, among=among)


def rows_of_nodes(node_ids: Sequence[int], since: datetime, show_private: bool) -> list[NodeRow]:
    """The whole rows of these nodes (a page of /nodes/), those needing action first, then by name."""
    found = Node.objects.in_bulk(list(node_ids))
    return _rows_of([found[i] for i in node_ids if i in found], since, show_private, NODES_PAGE_ROWS)


NodeIds = list[int] | QuerySet[Node, int]  # ids, or a query selecting them (``values_list("pk", flat=True)``)


def _rows_of(
    nodes: list[Node],
    since: datetime,
    show_private: bool,
    limit: int,
    placed: bool = True,
    among: NodeIds | None = None,
) -> list[NodeRow]:
    """The rows of these nodes, those needing action first (by the urgency of their advice). ``among`` is
    the query the nodes came from, read as a subquery where a list of a thousand ids took psycopg and
    PostgreSQL a few milliseconds a query to format, split and parse."""
    ids = among if among is not None else [n.pk for n in nodes]
    runs = _latest_runs(ids, show_private, stages=placed)
    window = _few_window_rows(ids, since, show_private, len(nodes) * limit)
    tops = _tops(ids, since, show_private, limit) if window is None else _tops_of(window, since, limit)
    serving = _serving(since, {n.pk: n.name for n in nodes}, show_private, tops, runs, limit, placed, window)
    rows = [_node_row(n, runs.get(n.pk), serving.get(n.pk, _NOTHING_SERVED)) for n in nodes]
    rows.sort(key=lambda r: (not r.needs_action, r.advice.cause.rank if r.advice else 0, r.node.name))
    return rows


def _window(since: datetime, show_private: bool) -> QuerySet[Serving]:
    """Each node's own Serving rows (never node_key 0) of the rows it served since ``since``."""
    servings = Serving.objects.filter(node_key=OuterRef("pk"), last_at__gte=since)
    return servings if show_private else servings.exclude(revision_id__in=_hidden_revisions())


def _hidden_revisions() -> QuerySet[Revision, Any]:
    """The revisions of packages not known to be public, as a subquery: PostgreSQL hashes it once and
    probes it per row, where joining each row to its revision and package (to count a node's rows in
    the window) took 0.75 ms a node."""
    return Revision.objects.exclude(package__private=False).values("pk")


def _flagged(servings: QuerySet[Serving], since: datetime) -> QuerySet[Serving]:
    """The rows likely to need action: a revision whose headline calls for action, one whose
    package's latest revision has a better headline (verdicts.improves), or MTP unused in the window
    (the advice itself is judged in Python for the rows shown, against the node's release)."""
    unused = Q(last_unused_at__gte=since, revision__mtp_detected=True)
    better = Q(latest_rank__gt=F("own_rank")) & ~Q(latest_rank=Status.NOT_ASSESSED.rank)  # verdicts.improves
    flagged = Q(revision__headline__in=NEEDS_ACTION) | better | unused
    return servings.annotate(own_rank=HEADLINE_RANK, latest_rank=LATEST_HEADLINE_RANK).filter(flagged)


@dataclass(frozen=True)
class Tops:
    """Per node: the revisions of its busiest Serving rows and of its busiest flagged ones (at most the
    limit each), and how many rows it served in the window (counted up to SERVED_COUNT_CAP + 1)."""

    revisions: dict[int, set[int]]
    served: dict[int, int]


_BUSIEST = ("-reports", "-revision_id", "stage_splits", "topology_id")


def _tops(node_ids: NodeIds, since: datetime, show_private: bool, limit: int) -> Tops:
    """Each node's candidate revisions (one query): of its busiest rows over their life, and of its
    busiest flagged rows."""
    if isinstance(node_ids, list) and not node_ids:
        return Tops({}, {})
    mine = _window(since, show_private)
    rows = Node.objects.filter(pk__in=node_ids).values_list(
        "pk",
        RevisionList(mine.order_by(*_BUSIEST).values("revision_id")[:limit]),
        RevisionList(_flagged(mine, since).order_by(*_BUSIEST).values("revision_id")[:limit]),
        CappedCount(mine.order_by().values("pk")[: SERVED_COUNT_CAP + 1]),
    )
    revisions: dict[int, set[int]] = {}
    served: dict[int, int] = {}
    for node_id, busiest, flagged, count in rows:
        revisions[node_id] = {int(i) for text in (busiest, flagged) if text for i in str(text).split(",")}
        served[node_id] = int(count or 0)
    return Tops(revisions, served)


_WINDOW_ROW = (
    "node_key",
    "revision_id",
    "stage_splits",
    "topology_id",
    "reports",
    "first_at",
    "last_at",
    "last_unused_at",
    "revision__package__latest_revision_id",
    "revision__package__latest_revision__headline",
    "revision__headline",
    "revision__mtp_detected",
    "sole_strategy",
)


def _few_window_rows(
    ids: NodeIds, since: datetime, show_private: bool, cap: int
) -> list[dict[str, Any]] | None:
    """The nodes' Serving rows in the window with what ranking them reads, when there are at most ``cap``
    (the rows a page shows of these nodes; two queries, the first counting at most ``cap + 1``); else
    None (one query). A fleet of a thousand nodes each running a few revisions has fewer rows in the
    window than the per-node queries of ``_tops`` and ``_shown_groups`` cost (about 40 ms at 1,000
    nodes); a few nodes serving thousands each have many more, and there those read each node's
    busiest rows only. The count takes in the rows of private packages too: never fewer than shown."""
    if isinstance(ids, list) and not ids:
        return []
    rows = Serving.objects.filter(node_key__in=ids, last_at__gte=since).order_by()
    if rows.values("pk")[: cap + 1].count() > cap:  # counted first, from the index alone
        return None
    if not show_private:
        rows = rows.filter(revision__package__private=False)
    return list(rows.values(*_WINDOW_ROW))


def _tops_of(window: list[dict[str, Any]], since: datetime, limit: int) -> Tops:
    """``_tops`` from every row of the window (``_few_window_rows``): the same busiest and flagged rows'
    revisions, by the same order, and each node's count of rows."""
    by_node: dict[int, list[dict[str, Any]]] = {}
    for row in window:
        by_node.setdefault(row["node_key"], []).append(row)
    revisions: dict[int, set[int]] = {}
    served: dict[int, int] = {}
    for node, rows in by_node.items():
        rows.sort(key=lambda r: (-r["reports"], -r["revision_id"], r["stage_splits"], r["topology_id"]))
        flagged = [r for r in rows if _likely_stale({**r, "unused_recently": _recently_unused(r, since)})]
        revisions[node] = {r["revision_id"] for r in rows[:limit] + flagged[:limit]}
        served[node] = min(len(rows), SERVED_COUNT_CAP + 1)
    return Tops(revisions, served)


def _recently_unused(row: Mapping[str, Any], since: datetime) -> int:
    """1 when the row's last report showing MTP unused is in the window (``_ranked_groups``' column)."""
    return int(row["last_unused_at"] is not None and row["last_unused_at"] >= since)


def _node_row(node: Node, run: LatestRun | None, served: NodeServed) -> NodeRow:
    devices = node_devices(run.stages, run.devices, node.name) if run else []
    version = run.version if run else ""
    certification = run.certification if run else ""
    observations = run.observations if run else None
    return NodeRow(
        node, version, devices, served.rows, served.hidden, certification, served.at_least, observations
    )


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
    stages: Any = None  # read only for the rows shown (``_latest_runs``)
    devices: Any = None
    observations: Any = None


def _latest_runs(node_ids: NodeIds, show_private: bool, stages: bool = True) -> dict[int, LatestRun]:
    """Each node's newest registered run (one query), with (``stages``) its stages and devices, which
    only the rows shown need (parsing them for 1,000 nodes took 25 ms). Without ``show_private``, its
    newest run of a public package or of none (a run of a private package, of one whose privacy is
    unknown, or naming a repo no stored revision confirms would show its version and devices beside it).
    Read as values: a thousand model instances with their revisions and packages took longer than the
    query. Each node's runs ranked by a window function: a correlated subquery per run took PostgreSQL
    27 ms at 1,000 nodes."""
    shown = NodeRun.objects.filter(node_id__in=node_ids)
    if not show_private:
        shown = shown.filter(Q(revision__package__private=False) | Q(revision__isnull=True, repo_id=""))
    newest = Window(RowNumber(), partition_by=F("node_id"), order_by=(F("updated_at").desc(), F("id").desc()))
    rows = (
        shown.annotate(newest=newest)
        .filter(newest=1)
        .values_list(
            "node_id",
            "revision_id",
            "revision__package__private",
            *(f.name for f in dataclasses.fields(LatestRun)[3 : None if stages else -3]),
        )
    )
    return {row[0]: LatestRun(row[0], row[1], row[2] is False, *row[3:]) for row in rows}


@dataclass(frozen=True)
class NodeServed:
    rows: list[NodeServing]
    hidden: int
    at_least: bool = False


_NOTHING_SERVED = NodeServed([], 0)


def _serving(
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
    shown, hidden = _shown_groups(since, show_private, tops, limit, window)
    registered = _registered_only(shown, runs, show_private)
    revisions = _revisions([g["revision_id"] for g in shown] + [r.revision_id or 0 for r in registered])
    run_facts = _run_facts(shown, stages=placed)
    read = shown if placed else [g for g in shown if _read_to_judge(run_facts, g)]
    figures = _group_figures(since, read, sketches=placed)
    topologies = _last_topologies(shown) if placed else {}
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


def _shown_groups(
    since: datetime, show_private: bool, tops: Tops, limit: int, window: list[dict[str, Any]] | None = None
) -> tuple[list[dict[str, Any]], dict[int, int]]:
    """The (node, revision, split) groups of each node's candidate revisions, added up over their
    topologies, ``limit`` a node at most, flagged first then the busiest (one query, or none from the
    ``window``'s rows), and how many more each node served."""
    pairs = sorted((node, revision) for node, found in tops.revisions.items() for revision in found)
    if not pairs:
        return [], {}
    if window is not None:
        groups = _groups_of(window, since, set(pairs))
    else:
        servings = Serving.objects.filter(
            pk__in=rows_matching(Serving, ("revision_id", "node_key"), [(r, n) for n, r in pairs]),
            last_at__gte=since,
        )
        if not show_private:
            servings = servings.filter(revision__package__private=False)
        groups = _ranked_groups(servings, since)
    by_node: dict[int, list[dict[str, Any]]] = {}
    for group in groups:
        by_node.setdefault(group["node_key"], []).append(group)
    shown: list[dict[str, Any]] = []
    hidden: dict[int, int] = {}
    for node, groups in by_node.items():
        groups.sort(key=lambda g: (-g["stale"], -g["reports_n"], -g["revision_id"], g["stage_splits"]))
        shown += groups[:limit]
        hidden[node] = max(0, min(tops.served.get(node, 0), SERVED_COUNT_CAP) - min(len(groups), limit))
    return shown, hidden


def _ranked_groups(servings: QuerySet[Serving], since: datetime) -> list[dict[str, Any]]:
    """Per (node, revision, split), its Serving rows (one a topology) added up, flagged (``stale``) as
    likely to need action by ``_flagged``'s conditions, judged here from the values read (one query)."""
    rows = (
        servings.values(
            "node_key",
            "revision_id",
            "stage_splits",
            "revision__package__latest_revision_id",
            "revision__package__latest_revision__headline",
            "revision__headline",
            "revision__mtp_detected",
        )
        .annotate(
            reports_n=Sum("reports"),
            last_at_max=Max("last_at"),
            first_at_min=Min("first_at"),
            unused_recently=Max(Case(When(last_unused_at__gte=since, then=Value(1)), default=Value(0))),
            sole_low=Min("sole_strategy"),
            sole_high=Max("sole_strategy"),
        )
        .order_by()
    )
    return [{**row, "stale": int(_likely_stale(row)), "sole_strategy": _one_of(row)} for row in rows]


def _one_of(row: Mapping[str, Any]) -> str:
    """The strategy a group's Serving rows all ran, or "" (``Serving.sole_strategy``)."""
    low, high = row["sole_low"], row["sole_high"]
    return str(low) if low == high else ""


def _groups_of(
    window: list[dict[str, Any]], since: datetime, pairs: set[tuple[int, int]]
) -> list[dict[str, Any]]:
    """``_ranked_groups`` of the window's rows (``_few_window_rows``) of these (node, revision) pairs."""
    groups: dict[tuple[int, int, str], dict[str, Any]] = {}
    for row in window:
        if (row["node_key"], row["revision_id"]) not in pairs:
            continue
        key = (row["node_key"], row["revision_id"], row["stage_splits"])
        unused = _recently_unused(row, since)
        group = groups.get(key)
        if group is None:
            groups[key] = {
                **{name: row[name] for name in _WINDOW_ROW[:3] + _WINDOW_ROW[8:]},
                "reports_n": row["reports"],
                "last_at_max": row["last_at"],
                "first_at_min": row["first_at"],
                "unused_recently": unused,
            }
            continue
        group["reports_n"] += row["reports"]
        group["last_at_max"] = max(group["last_at_max"], row["last_at"])
        group["first_at_min"] = min(group["first_at_min"], row["first_at"])
        group["unused_recently"] = max(group["unused_recently"], unused)
        if group["sole_strategy"] != row["sole_strategy"]:
            group["sole_strategy"] = ""
    return [{**group, "stale": int(_likely_stale(group))} for group in groups.values()]


def _likely_stale(row: Mapping[str, Any]) -> bool:
    own, latest = (
        status_of(row["revision__headline"]),
        status_of(row["revision__package__latest_revision__headline"]),
    )
    unused = bool(row["unused_recently"]) and bool(row["revision__mtp_detected"])
    return own.value in NEEDS_ACTION or improves(latest, own) or unused


_SERVED_REVISION = (
    "package__repo_id",
    "commit_sha",
    "verdict",
    "headline",
    "package__latest_revision_id",
    "package__latest_revision__commit_sha",
    "package__latest_revision__headline",
)


def _revisions(ids: Iterable[int]) -> dict[int, dict[str, Any]]:
    """The shown revisions' names, assessments (read as text and parsed once a process for each distinct
    text: ``parse_stored``) and their package's latest (one query)."""
    rows = Revision.objects.filter(pk__in=set(ids)).values(
        "pk",
        *_SERVED_REVISION,
        assessment_text=Cast("assessment", TextField()),
        latest_text=Cast("package__latest_revision__assessment", TextField()),
    )
    return {
        row["pk"]: {
            **row,
            "assessment": parse_stored(row["assessment_text"]),
            "latest_assessment": parse_stored(row["latest_text"]),
        }
        for row in rows
    }


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


def _run_facts(groups: list[dict[str, Any]], stages: bool = True) -> dict[tuple[int, int], RunFacts]:
    """Each shown (node, revision)'s mesh-llm version, split certification, topology, what the node says
    about itself and (with ``stages``) its stages and whole observations, from its agent's newest run
    (one query)."""
    pairs = {(g["node_key"], g["revision_id"]) for g in groups}
    if not pairs:
        return {}
    facts: dict[tuple[int, int], RunFacts] = {}
    runs = rows_matching(NodeRun, ("node_id", "revision_id"), sorted(pairs))
    rows = NodeRun.objects.filter(pk__in=runs).order_by("updated_at", "id")
    columns = (*RUN_COLUMNS, *(("stages", "observations") if stages else ()))
    for node_id, revision_id, *values in rows.values_list("node_id", "revision_id", *columns):
        facts[(node_id, revision_id)] = RunFacts(*values)  # the newest wins
    return facts


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
    return Figures(strategies={_strategy(sole): 1}) if sole else Figures()


@dataclass
class Figures:
    """A group's cells in the window: reports, decode-rate sketches (JSON texts), and the reports per
    (requested, effective strategy, MTP used)."""

    reports: int = 0
    bins: list[str] = field(default_factory=list)
    less: list[str] = field(default_factory=list)  # sketches taken away (``_window_terms``)
    strategies: dict[tuple[str, str, bool], int] = field(default_factory=dict)

    @property
    def main_strategy(self) -> tuple[str, str, bool]:
        """The (requested, effective, MTP used) most reports ran with."""
        ran = {pair: n for pair, n in self.strategies.items() if n > 0}
        if not ran:
            return ("", "", False)
        return max(ran.items(), key=lambda item: (item[1], item[0]))[0]

    @property
    def tps(self) -> float | None:
        """The median decode rate of the sketches, less those taken away (bin counts subtract exactly),
        rounded; None without any report."""
        if not self.less:
            return _median(self.bins)
        bins = throughput.merged_stored(self.bins)
        for index, count in throughput.merged_stored(self.less).items():
            bins[index] = bins.get(index, 0) - count
        return _rounded(sketch.median({index: count for index, count in bins.items() if count > 0}))


def _group_figures(
    since: datetime, groups: list[dict[str, Any]], sketches: bool = True
) -> dict[Any, Figures]:
    """The shown (node, revision, split) groups' figures in the window (one query)."""
    keys = ("node_key", "revision_id", "stage_splits")
    return _window_figures(since, [tuple(g[k] for k in keys) for g in groups], keys, sketches)


def _window_figures(
    since: datetime, groups: list[tuple[Any, ...]], keys: tuple[str, ...], sketches: bool = True
) -> dict[Any, Figures]:
    """Reports, sketches and strategies of the cells of each group (the values of ``keys``, naming its
    revision and node key) in the window, by ``keys`` (one query, ``_window_cells_sql``). A node's groups
    (``keys`` without a topology) read its NodeRollup cells, every strategy and topology in one; a
    topology's read the Rollup cells of it, a strategy each. Without ``sketches``, no decode rates."""
    if not groups:
        return {}
    nodes = "topology_id" not in keys
    strategies = ("t.strategies", "CAST(t.strategies AS TEXT)") if nodes else (_STRATEGIES,) * 2
    sketch_text = "CAST(t.tps_sketch AS TEXT)" if sketches else "NULL"
    sql, params = _window_cells_sql(
        NodeRollup if nodes else Rollup,
        keys,
        groups,
        since,
        f"t.reports, t.tps_sketch, {strategies[0]}",
        f"t.reports, {sketch_text}, {strategies[1]}",
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    result: dict[Any, Figures] = {}
    width = len(keys)
    # A node cell's strategies, parsed as one JSON array (one call into the decoder for thousands of cells),
    # added up by their keys and named once a group (``_named``).
    parsed = json.loads("[" + ",".join(row[width + 2] for row in rows) + "]") if nodes else []
    by_key: dict[Any, dict[str, int]] = {}
    for i, row in enumerate(rows):
        key = row[:width]
        figures = result.get(key)
        if figures is None:
            figures = result[key] = Figures()
        reports, text, *strategy, sign = row[width:]
        figures.reports += sign * reports
        if text is not None:
            (figures.bins if sign > 0 else figures.less).append(text)
        if nodes:
            counts = by_key.get(key)
            if counts is None:
                counts = by_key[key] = {}
            for pair, n in parsed[i].items():
                counts[pair] = counts.get(pair, 0) + sign * n
        else:
            named = (strategy[0], strategy[1], bool(strategy[2]))
            figures.strategies[named] = figures.strategies.get(named, 0) + sign * reports
    for key, counts in by_key.items():
        result[key].strategies = _named(counts)
    return result


def _named(counts: Mapping[str, int]) -> dict[tuple[str, str, bool], int]:
    """Reports per strategy keyed by NodeRollup.strategies' JSON keys, as (requested, effective, MTP used)
    (two spellings of one strategy add up)."""
    named: dict[tuple[str, str, bool], int] = {}
    for pair, n in counts.items():
        strategy = _strategy(pair)
        named[strategy] = named.get(strategy, 0) + n
    return named


_STRATEGIES = "t.requested_strategy, t.strategy, t.mtp_used"  # a Rollup cell's strategy


@functools.lru_cache(maxsize=1024)
def _strategy(key: str) -> tuple[str, str, bool]:
    """(requested, effective, MTP used) of a NodeRollup.strategies key (rollups.strategy_key)."""
    requested, effective, used = json.loads(key)
    return str(requested), str(effective), bool(used)


def _window_cells_sql(
    model: type[Model],
    keys: Sequence[str],
    groups: list[tuple[Any, ...]],
    since: datetime,
    picked: str,
    columns: str,
) -> SqlPart:
    """The window's ``model`` cells (Rollup or NodeRollup) of each group, ``columns`` of each (of those
    ``picked``) and the sign it is added with (``_window_terms``): the groups and window terms as a list
    (``_values``), each row of it read as one range of the natural key (revision, grain, node, bucket
    start; ``_joined``). An OR of one term a group and part took PostgreSQL 1.07 s to plan for
    /nodes/?action=1 at 1,000 nodes; the list read the 35,000 Rollup cells there in 0.12 s. The keys'
    values come back as passed."""
    values, names, params = _values(groups)
    terms, (grain, start, end, sign), term_params = _values(_window_terms(since))
    quote = connection.ops.quote_name
    matches = [f"t.{quote(key)} = v.{name}" for key, name in zip(keys, names, strict=True)]
    matches += [f"t.grain = w.{grain}", f"t.bucket_start >= w.{start}", f"t.bucket_start < w.{end}"]
    where = " AND ".join(matches)
    group = ", ".join(f"v.{name}" for name in names)
    table = quote(model._meta.db_table)
    also = _aliased(terms, [grain, start, end, sign], "w")
    sql = _joined(values, names, table, where, picked, f"{group}, {columns}, w.{sign}", also)
    return sql, params + term_params


def _window_terms(since: datetime) -> list[tuple[str, datetime, datetime, int]]:
    """(grain, from, before, sign) of the cells that add up to the window: whole days by day, and since's
    day by the hours from since's, or, where that is fewer cells, as its day cell less its hours before
    since's (a day cell holds exactly its hour cells' reports and bins while the hours are kept). So a
    page reads at most 12 hour cells a strategy instead of 24. Past the hour cells' retention, as
    ``_window_ranges``."""
    hour = since.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    day = hour.replace(hour=0)
    next_day = day + timedelta(days=1)
    kept = hourly_since()
    if hour < kept:
        return [(Rollup.Grain.DAY.value, day, _END_OF_TIME, 1)]
    if day >= kept and hour - day < next_day - hour:
        before = [(Rollup.Grain.HOUR.value, day, hour, -1)] if hour > day else []
        return [(Rollup.Grain.DAY.value, day, _END_OF_TIME, 1), *before]
    return [(Rollup.Grain.DAY.value, next_day, _END_OF_TIME, 1), (Rollup.Grain.HOUR.value, hour, next_day, 1)]


_END_OF_TIME = datetime(9999, 1, 1, tzinfo=UTC)


def _last_topologies(groups: list[dict[str, Any]]) -> dict[Any, Any]:
    """The topology of each (node, revision, split) group's newest report (one query)."""
    newest = [(g["node_key"], g["revision_id"], g["stage_splits"], g["last_at_max"]) for g in groups]
    return _newest_topologies(Q(), ("node_id", "revision_id", "stage_splits"), newest)


def _newest_topologies(among: Q, keys: tuple[str, ...], reports: list[tuple[Any, ...]]) -> dict[Any, Any]:
    """The ``topology`` of the body of each report named (by the values of ``keys`` and its arrival
    time, last, which the Serving rows and cells hold as their last), by ``keys`` (one query)."""
    if not reports:
        return {}
    # The reports' own times also bound the partitions read (the planner prunes the others).
    times = [report[-1] for report in reports]
    named = rows_matching(Report, (*keys, "received_at"), reports)
    rows = Report.objects.filter(among, pk__in=named, received_at__range=(min(times), max(times))).order_by(
        "id"
    )
    return {tuple(key): topology for *key, topology in rows.values_list(*keys, "body__topology")}


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
        **_ran(revision, figures, run, node_name, alert),
        **(_placement(group["stage_splits"], topology, run, node_name, figures.tps) if placed else _UNPLACED),
    )


def _ran(
    revision: Mapping[str, Any], figures: Figures, run: RunFacts, node_name: str, alert: bool
) -> dict[str, Any]:
    """A reported row's reports in the window, its most-reported strategy and its advice."""
    requested, effective, used = figures.main_strategy
    facts = run.facts(node_name, requested=requested, effective=effective, mtp_used=used, unused=alert)
    advice = advise(revision["assessment"], facts, _newer(revision))
    return {"reports": figures.reports, "requested": requested, "effective": effective, "advice": advice}


def _placement(
    splits: str, topology: Any, run: RunFacts, node_name: str, tps: float | None
) -> dict[str, Any]:
    """A reported row's fields that advice never reads: the layers and stages the node holds (as the
    newest report's topology places it, else as its agent registered them), the topology, and its
    median decode rate ``tps``."""
    return {
        "layer_range": _layer_range(topology, node_name) or _layer_range({"stages": run.stages}, node_name),
        "topology_id": _topology_id(topology) or run.topology_id,
        "tps": tps,
        "stages": tuple(best_stages(run_stages(run.stages), stages_of(topology), splits)),
    }


_UNPLACED: dict[str, Any] = {"layer_range": "", "topology_id": "", "tps": None, "stages": ()}


def _placed(rows: list[NodeRow], since: datetime, show_private: bool) -> list[NodeRow]:
    """Rows judged without their placement (``node_rows(placed=False)``) with it, as node_rows reads
    them: each reported row's ``_placement``, its reports and strategy in the window, and its advice
    again with them (the same cause: ``_read_to_judge``); each node's devices and its registered-only
    row's layers from its newest run, the nodes whole, and which stages' nodes are registered
    (7 queries)."""
    groups: list[dict[str, Any]] = [
        {
            "node_key": r.node.pk,
            "revision_id": s.revision_id,
            "stage_splits": s.stage_splits,
            "last_at_max": s.last_at,
        }
        for r in rows
        for s in r.serving
        if s.reported
    ]
    figures = _group_figures(since, groups)
    topologies = _last_topologies(groups)
    run_facts = _run_facts(groups)
    revisions = _revisions(g["revision_id"] for g in groups)
    newest = _latest_runs([row.node.pk for row in rows], show_private)
    whole = Node.objects.in_bulk([row.node.pk for row in rows])
    placed: list[NodeRow] = []
    for row in rows:
        serving = []
        latest = newest.get(row.node.pk)
        for s in row.serving:
            key = (row.node.pk, s.revision_id, s.stage_splits)
            if s.reported:
                run, found = run_facts.get(key[:2]) or RunFacts(), figures.get(key) or Figures()
                if s.revision_id in revisions:
                    ran = _ran(revisions[s.revision_id], found, run, row.node.name, s.alert)
                    s = replace(s, **{**ran, "advice": _unless_moved_on(s.advice, ran["advice"])})
                s = replace(s, identity=run.identity, observations=run.observations)
                s = replace(
                    s, **_placement(s.stage_splits, topologies.get(key), run, row.node.name, found.tps)
                )
            elif latest is not None:
                s = replace(s, **_registered_layout(latest, row.node.name))
            serving.append(s)
        devices = node_devices(latest.stages, latest.devices, row.node.name) if latest else []
        said = latest.observations if latest else None
        node = whole.get(row.node.pk, row.node)
        placed.append(replace(row, node=node, serving=serving, devices=devices, observations=said))
    known = with_registration(s.stages for row in placed for s in row.serving)
    return [
        replace(row, serving=[replace(s, stages=mark_registered(s.stages, known)) for s in row.serving])
        for row in placed
    ]


def _unless_moved_on(judged: Advice, advice: Advice) -> Advice:
    """``advice`` in place of the judged one, unless that said the node moved on (``_with_moves``): a
    text the strategies never change."""
    return judged if judged.cause is Cause.MOVED_ON else advice


def _topology_id(topology: Any) -> str:
    value = topology.get("topology_id") if isinstance(topology, dict) else None
    return value if isinstance(value, str) else ""


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
        **_registered_layout(run, node_name),
    )


def _registered_layout(run: LatestRun, node_name: str) -> dict[str, Any]:
    """A registered-only row's fields that advice never reads: the layers and stages its run registered."""
    layers = _layer_range({"stages": run.stages}, node_name) if isinstance(run.stages, list) else ""
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


def _layer_range(topology: Any, node_name: str) -> str:
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
    # The decode-rate sketch of the compared reports: the spread and the interval come from it.
    distribution: sketch.Sketch = field(default_factory=dict)

    @property
    def spread(self) -> dict[str, float] | None:
        """p5, p25, p50, p75, p95 of the decode rate (within 1 %), None without reports."""
        return sketch.summary(self.distribution)


@dataclass(frozen=True)
class SideContext:
    """What else a revision's reports ran with: the nodes' mesh-llm releases (as their agents registered
    them; empty when no node said), the strategies operators asked for and the stage splits."""

    releases: tuple[str, ...] = ()
    requested: tuple[str, ...] = ()
    splits: tuple[str, ...] = ()


@dataclass(frozen=True)
class Confounder:
    """Something besides the revision that differs between the two sides, and whether the comparison
    could hold it equal (``held``: only the reports that share it are compared)."""

    what: str  # "mesh-llm release", "requested strategy", "stage split"
    before: tuple[str, ...]
    after: tuple[str, ...]
    held: tuple[str, ...] = ()  # the values both sides share, which the comparison kept to

    @property
    def sentence(self) -> str:
        change = f"{self.what}: {_listed(self.before)} before, {_listed(self.after)} after"
        if self.held:
            return f"{change}; only reports on {_listed(self.held)} are compared, so it is held equal"
        return f"{change}; no report shares one, so the ratio includes this change"


def _listed(values: tuple[str, ...]) -> str:
    return ", ".join(values) if values else "not reported"


@dataclass(frozen=True)
class Comparison:
    old: RevisionFigures
    new: RevisionFigures
    topology: str
    # Median decode rate per time bucket of each revision, on the compared topology: [(revision, points)].
    series: list[tuple[Revision, list[throughput.Point]]] = field(default_factory=list)
    bucket: str = "day"
    before: SideContext = field(default_factory=SideContext)
    after: SideContext = field(default_factory=SideContext)
    confounders: tuple[Confounder, ...] = ()

    @property
    def mixed(self) -> tuple[Confounder, ...]:
        """The changes the ratio could not hold equal: it measures them together with the revision's."""
        return tuple(c for c in self.confounders if not c.held)

    @property
    def interval(self) -> sketch.Ratio | None:
        """The ratio of medians with its 95 % distribution-free interval (see sketch.ratio_of_medians)."""
        return sketch.ratio_of_medians(self.old.distribution, self.new.distribution)

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
    if c.mixed:
        changes = "; ".join(f"{m.what} {_listed(m.before)} -> {_listed(m.after)}" for m in c.mixed)
        ratio_name = f"x{c.ratio:.2f}" if c.ratio is not None else "the change"
        text += f". Also changed: {changes}; {ratio_name} measures the new revision and that change together"
    return text


def compare_revisions(old: Revision, new: Revision) -> Comparison:
    """Both revisions' figures, like with like where the data allows: on their most-shared stage split,
    the requested strategies both ran and, when the nodes' releases differ but some release ran both,
    only the nodes on a shared release. What still differs is named (``confounders``): a x1.65 that is
    also a mesh-llm upgrade says so. Two queries over the every-node total rollups and the nodes' runs,
    a third over per-node cells only when a release is held equal; medians from the sketches, within 1 %."""
    cells = _total_cells([old.pk, new.pk], Rollup.ALL_NODES)
    releases = _releases_by_node([old.pk, new.pk])
    before, after = _side_context(old.pk, cells, releases), _side_context(new.pk, cells, releases)
    topology = shared_topology(cells)
    requested = _shared(before.requested, after.requested)
    confounders = _confounders(before, after, topology, requested)
    held_releases = next((c.held for c in confounders if c.what == "mesh-llm release"), ())
    nodes: dict[int, set[int]] | None = None
    if held_releases:
        nodes = {
            revision_id: {
                node
                for (rev, node), version in releases.items()
                if rev == revision_id and version in held_releases
            }
            for revision_id in (old.pk, new.pk)
        }
        cells = [c for c in _total_cells([old.pk, new.pk], None) if c["node_key"] in nodes[c["revision_id"]]]
    compared: list[Mapping[str, Any]] = [
        c
        for c in cells
        if (not topology or c["stage_splits"] == topology)
        and (not requested or c["requested_strategy"] in requested)
    ]
    figures = _figures(compared)
    bucket, series = _both_series([old, new], compared, topology, requested, nodes)
    return Comparison(
        RevisionFigures(old, **figures.get(old.pk, {})),
        RevisionFigures(new, **figures.get(new.pk, {})),
        topology,
        series,
        bucket,
        before,
        after,
        confounders,
    )


_CELL_FIELDS = (
    "revision_id",
    "node_key",
    "stage_splits",
    "requested_strategy",
    "mtp_used",
    "reports",
    "accepted",
    "proposed",
    "tps",
    "first_at",
    "last_at",
)


def _total_cells(revision_ids: list[int], node_key: int | None) -> list[dict[str, Any]]:
    """The revisions' total cells: every node's together (``Rollup.ALL_NODES``) or each node's (None)."""
    rows = Rollup.objects.filter(revision_id__in=revision_ids, grain=Rollup.Grain.TOTAL)
    rows = rows.filter(node_key=node_key) if node_key is not None else rows.exclude(node_key=Rollup.ALL_NODES)
    return list(rows.annotate(tps=Cast("tps_sketch", TextField())).values(*_CELL_FIELDS))


def _releases_by_node(revision_ids: list[int]) -> dict[tuple[int, int], str]:
    """(revision, node) -> the mesh-llm release the node's agent registered for its run of the revision
    (the newest registration when there are several)."""
    runs = NodeRun.objects.filter(revision_id__in=revision_ids).exclude(version="").order_by("updated_at")
    return {
        (rev, node): version for rev, node, version in runs.values_list("revision_id", "node_id", "version")
    }


def _side_context(
    revision_id: int, cells: list[dict[str, Any]], releases: dict[tuple[int, int], str]
) -> SideContext:
    mine = [c for c in cells if c["revision_id"] == revision_id]
    return SideContext(
        releases=tuple(
            sorted({v for (rev, _), v in releases.items() if rev == revision_id}, key=_version_key)
        ),
        requested=tuple(sorted({c["requested_strategy"] for c in mine} - {""})),
        splits=tuple(sorted({c["stage_splits"] for c in mine} - {""})),
    )


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version))


def _shared(before: tuple[str, ...], after: tuple[str, ...]) -> tuple[str, ...]:
    """The values both sides have, when the sides differ (identical sides need no restriction)."""
    return tuple(sorted(set(before) & set(after))) if set(before) != set(after) else ()


def _confounders(
    before: SideContext, after: SideContext, topology: str, requested: tuple[str, ...]
) -> tuple[Confounder, ...]:
    found = []
    if before.releases and after.releases and set(before.releases) != set(after.releases):
        found.append(
            Confounder(
                "mesh-llm release", before.releases, after.releases, _shared(before.releases, after.releases)
            )
        )
    if set(before.requested) != set(after.requested):
        found.append(Confounder("requested strategy", before.requested, after.requested, requested))
    if set(before.splits) != set(after.splits):
        found.append(Confounder("stage split", before.splits, after.splits, (topology,) if topology else ()))
    return tuple(found)


def _both_series(
    revisions: list[Revision],
    cells: Sequence[Mapping[str, Any]],
    topology: str,
    requested: tuple[str, ...] = (),
    nodes: dict[int, set[int]] | None = None,
) -> tuple[str, list[tuple[Revision, list[throughput.Point]]]]:
    """One line per revision: the median decode rate per bucket over its compared reports (one query
    over hour or day cells; the bucket suits the span both revisions were reported over). ``nodes``
    (revision -> node ids) reads those nodes' own cells instead of every node's."""
    if not cells:
        return "day", [(r, []) for r in revisions]
    start, end = min(c["first_at"] for c in cells), max(c["last_at"] for c in cells)
    bucket = throughput.time_bucket(end - start)
    if bucket == "hour" and start < hourly_since():
        bucket = "day"
    grain = Rollup.Grain.HOUR if bucket == "hour" else Rollup.Grain.DAY
    rows = Rollup.objects.filter(revision_id__in=[r.pk for r in revisions], grain=grain)
    if nodes is None:
        rows = rows.filter(node_key=Rollup.ALL_NODES)
    else:
        rows = rows.filter(node_key__in=set().union(*nodes.values()))
    if topology:
        rows = rows.filter(stage_splits=topology)
    if requested:
        rows = rows.filter(requested_strategy__in=requested)
    grouped: dict[tuple[int, datetime], tuple[int, list[str]]] = {}
    for revision_id, node_key, at, reports, bins in rows.annotate(
        tps=throughput.stored("tps_sketch")
    ).values_list("revision_id", "node_key", "bucket_start", "reports", "tps"):
        if nodes is not None and node_key not in nodes[revision_id]:
            continue
        key = (revision_id, throughput.bucket_start(at, bucket))
        total, texts = grouped.get(key, (0, []))
        texts.append(bins)
        grouped[key] = (total + reports, texts)
    series = []
    for revision in revisions:
        points = [
            throughput.Point(at, "", topology, sketch.median(throughput.merged_stored(texts)), total)
            for (revision_id, at), (total, texts) in sorted(grouped.items())
            if revision_id == revision.pk
        ]
        series.append((revision, points))
    return bucket, series


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
            "distribution": throughput.merged_stored(c["tps"] for c in group),
        }
    return figures


def _median(sketches: list[str]) -> float | None:
    """The median decode rate of sketches stored as JSON texts, rounded (None without any)."""
    return _rounded(sketch.median(throughput.merged_stored(sketches))) if sketches else None


def default_comparison_pair(revisions: list[Revision], new_id: int | None) -> tuple[int, int] | None:
    """(old, new) ids: ``new_id`` (the latest when it is None or not listed) against the newest revision
    older than it that nodes ran and whose headline differs (the change a fix made), else the newest
    older one nodes ran, else the one just before it. None when nothing is older.

    The package page's compare form and ``/compare`` opened directly both default to this pair, so
    "Compare throughput" never lands on a revision without decode figures when one with them exists."""
    ids = [r.pk for r in revisions]
    at = ids.index(new_id) if new_id in ids else 0
    if at + 1 >= len(revisions):
        return None
    new, older = revisions[at], revisions[at + 1 :]
    totals = Rollup.objects.filter(
        revision_id__in=[r.pk for r in older], grain=Rollup.Grain.TOTAL, node_key=Rollup.ALL_NODES
    )
    reported = set(totals.values_list("revision_id", flat=True))
    ran = [r for r in older if r.pk in reported]
    changed = [r for r in ran if r.headline != new.headline]
    old = (changed or ran or older)[0]
    return old.pk, new.pk


# --- audit vs reports ----------------------------------------------------------------------------


@dataclass(frozen=True)
class PlanAdvice:
    """One node's plan on a revision (throughput.Plan) with the node's release and what it predicts."""

    plan: throughput.Plan
    version: str
    advice: Advice


def plan_advice(
    revision_id: int, assessment: Assessment | None, plans: list[throughput.Plan]
) -> list[PlanAdvice]:
    """Each plan judged against its node's release: the package page's per-node column and its findings
    (contradictions name the node, its version, what was predicted and what it did). One query."""
    names = {p.node for p in plans}
    runs: dict[str, RunFacts] = {}
    rows = NodeRun.objects.filter(revision_id=revision_id, node__name__in=names).order_by("updated_at", "id")
    for name, *values in rows.values_list("node__name", *RUN_COLUMNS):
        runs[name] = RunFacts(*values)  # the newest wins
    return [_plan_advice(p, runs.get(p.node) or RunFacts(), assessment) for p in plans]


def _plan_advice(plan: throughput.Plan, run: RunFacts, assessment: Assessment | None) -> PlanAdvice:
    used = plan.effective_strategy.startswith("native-mtp")
    facts = run.facts(
        plan.node,
        requested=plan.requested_strategy,
        effective=plan.effective_strategy,
        mtp_used=used,
        unused=bool(plan.unused) and assessment is not None and bool(assessment.mtp.detected),
    )
    return PlanAdvice(plan, run.version, advise(assessment, facts))


# --- topologies ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Stage:
    """One stage of a split: the node holding it, its layers and device. ``registered``: a node of that
    name is registered here (its page exists); set by ``with_registration``."""

    node: str
    layer_start: Any
    layer_end: Any
    device: str
    registered: bool = False


@dataclass(frozen=True)
class TopologyRun(_Names):
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
            "revision__headline",
        )
        .annotate(
            alert=Case(When(unused_since(since), then=Value(1)), default=Value(0)),
            # Counted once (an uncorrelated subquery), up to the cap: never every row sorted.
            groups=CappedCount(servings.order_by().values("pk")[: SERVED_COUNT_CAP + 1]),
        )
        .order_by("-reports", "-revision_id", "stage_splits")[:TOPOLOGY_ROWS]
    )
    if not shown:
        return TopologyRuns([])
    figures = _topology_figures(topology_id, since, shown)
    newest = [(g["revision_id"], g["stage_splits"], g["last_at"]) for g in shown]
    bodies = _newest_topologies(Q(topology_id=topology_id), ("revision_id", "stage_splits"), newest)
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
    found = _window_figures(since, conditions, keys)
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
