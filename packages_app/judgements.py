"""Each node's judgement, kept (NodeJudgement) rather than made for every node on every request.

"Which of my nodes need action" judged every node per request (fleet.nodes.node_rows): at 1,000 nodes
87 ms, most of it Python growing with the node count (issue 43). Here each node's judgement over the default
window is stored, once per audience (public packages only, or with private ones), and the pages read one
indexed query for the rows they show:

- ``judge`` writes the rows of some nodes (or of all) in the caller's transaction, computed by the same code
  the pages used (``fleet.nodes.judged_rows``, the needing-action list's judgement); ``rebuild`` (``manage.py
  rebuild_judgements``) writes every node's rows from scratch, the same rows.
- Whatever changes a judgement calls ``judge`` in its own transaction: a report stored or linked
  (``serving_changing``, which rollups.adding.add_reports calls for reports.py and telemetry.py, judging only
  the nodes whose judgement the batch can change), a run registered (telemetry), an ingest or re-audit of a
  revision or its package's latest or privacy changing (ingest: ``revisions_changed``), a release or
  roster imported
  (``rebuild``), a node created or renamed (models.node_judgements: its rows expired at once).
- The window moves: a row is valid until its first report in the window leaves it, its last report showing
  MTP unused leaves it, or (where its cells' strategies are read) the window's first hour moves on
  (``_valid_until``); ``fresh`` judges anew the rows read past that, and those judged against another
  release matrix or rosters, or by other code, than this process's (``basis``), before a page reads them.

Only the default window (fleet.window.DEFAULT_WINDOW_DAYS) is kept; a page asking for another judges as
before.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from django.core.paginator import Paginator
from django.db import transaction
from django.db.models import Case, Count, F, Max, Min, Q, QuerySet, Value, When
from django.utils import timezone

from packages_app import compiled
from packages_app.audit import certification, releases
from packages_app.audit.advice import strategy_can_change_cause
from packages_app.fleet.nodes import NodePage, NodeRow, judged_rows, rows_of_nodes
from packages_app.fleet.ranking import NODES_PAGE_ROWS, NODES_PER_PAGE
from packages_app.fleet.runs import NodeIds
from packages_app.fleet.window import DEFAULT_WINDOW_DAYS, window_start
from packages_app.models import JUDGEMENT_EXPIRED, Node, NodeJudgement, NodeRun, Revision, Serving
from packages_app.rollups.cells import Cell
from packages_app.rollups.serving import ServingKey
from packages_app.verdicts import Cause

WINDOW_DAYS = DEFAULT_WINDOW_DAYS
AUDIENCES = (
    False,
    True,
)  # NodeJudgement.private: judged for visitors, and for those who see private packages
CHUNK = 1000  # nodes judged a round: a list of ids in each query, not the whole fleet's
FOREVER = datetime(9999, 1, 1, tzinfo=UTC)
EXPIRED = JUDGEMENT_EXPIRED
_JUST_AFTER = timedelta(microseconds=1)
_FIELDS = ("node_name", "needs_action", "cause", "cause_rank", "revision", "advice", "valid_until", "basis")


# --- what a judgement rests on ------------------------------------------------------------------

_BASES: dict[tuple[int, int, str], tuple[Any, Any, str]] = {}


def basis() -> str:
    """What this process judges with, as a digest: the release matrix and rosters (their canonical JSON) and
    the judging code (``code_digest``). A row judged with others (a deploy with a new releases.toml or new
    rules, an import) is judged anew when read."""
    known, rosters = releases.known_releases(), certification.known_rosters()
    code = code_digest()
    key = (id(known), id(rosters), code)
    found = _BASES.get(key)
    if found is None:
        text = json.dumps(
            [
                code,
                [dataclasses.asdict(r) for r in known],
                {k: dataclasses.asdict(v) for k, v in rosters.items()},
            ],
            sort_keys=True,
            default=_canonical,
        )
        found = _BASES[key] = (known, rosters, hashlib.sha256(text.encode()).hexdigest()[:32])
    return found[2]


@functools.cache
def code_digest() -> str:
    """The code this process judges with: a digest of packages_app's Python sources (its migrations aside),
    read once a process. A deploy that changes how a node is judged (mesh-llm's rules move every week, and
    meshdash's with them) then judges every node anew on the first read, as a new release matrix does.
    Every source counts, not the judging modules alone: which modules a judgement reads is easy to get
    wrong, and judging every node anew is cheap (10,000 nodes in 4.4 s: ``manage.py rebuild_judgements``)."""
    root = Path(__file__).resolve().parent
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root)
        if relative.parts[0] != "migrations":
            digest.update(relative.as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def _canonical(value: Any) -> Any:
    return sorted(map(str, value)) if isinstance(value, set | frozenset) else str(value)


# --- writing -------------------------------------------------------------------------------------


def judge(node_ids: Iterable[int] | None = None, now: datetime | None = None) -> int:
    """Judge these nodes (None: every node) over the default window ending ``now`` and store their rows,
    in the caller's transaction (a savepoint of its own). Returns how many nodes were judged."""
    now = now or timezone.now()
    since = window_start(WINDOW_DAYS, now)
    judged = 0
    with transaction.atomic():
        if node_ids is None:
            everyone = Node.objects.order_by("name").only("pk", "name")
            judged += _judge_nodes(list(everyone), since, everyone.values_list("pk", flat=True))
        else:
            ids = sorted(set(node_ids))
            for start in range(0, len(ids), CHUNK):
                nodes = list(Node.objects.filter(pk__in=ids[start : start + CHUNK]).only("pk", "name"))
                judged += _judge_nodes(nodes, since, [n.pk for n in nodes])
    return judged


def rebuild(now: datetime | None = None) -> int:
    """Every node's rows from scratch (``manage.py rebuild_judgements``): the rows ``judge`` keeps."""
    with transaction.atomic():
        NodeJudgement.objects.all().delete()
        return judge(None, now)


def revisions_changed(revision_ids: Iterable[int], now: datetime | None = None) -> int:
    """Judge anew the nodes whose judgement may read these revisions: every node that served, in the
    window, or registered a run of any revision of their packages (a package's latest changes what its
    older revisions' nodes are told)."""
    packages = Revision.objects.filter(pk__in=list(revision_ids)).values("package_id")
    return packages_changed(packages, now)


def packages_changed(package_ids: Any, now: datetime | None = None) -> int:
    """``revisions_changed`` by package (ids, or a query selecting them)."""
    now = now or timezone.now()
    since = window_start(WINDOW_DAYS, now)
    served = Serving.objects.filter(revision__package_id__in=package_ids, last_at__gte=since).exclude(
        node_key=0
    )
    ran = NodeRun.objects.filter(revision__package_id__in=package_ids)
    nodes = set(served.values_list("node_key", flat=True).distinct()) | set(
        ran.values_list("node_id", flat=True).distinct()
    )
    return judge(nodes, now) if nodes else 0


def _judge_nodes(nodes: list[Node], since: datetime, among: NodeIds) -> int:
    if not nodes:
        return 0
    everything = judged_rows(nodes, since, True, among)
    ids = [n.pk for n in nodes]
    # Visitors are told the same where nothing of the node's is hidden from them (as
    # fleet.ranking.servings_in_window and fleet.runs.latest_runs hide it): judged again only for the nodes
    # with a row or run it hides.
    hiding = _hiding(ids, since)
    again = [n for n in nodes if n.pk in hiding]
    public = {r.node.pk: r for r in judged_rows(again, since, False)} if again else {}
    by_audience = {True: everything, False: [public.get(r.node.pk, r) for r in everything]}
    until = _valid_until(ids, since, by_audience)
    digest, judged_at = basis(), since + timedelta(days=WINDOW_DAYS)
    rows = [
        _row(row, private, until.get(row.node.pk, FOREVER), digest, judged_at)
        for private, judged in by_audience.items()
        for row in judged
    ]
    rows.sort(key=lambda r: (r.node_id, r.private))  # every writer locks rows in one order: no deadlock
    NodeJudgement.objects.bulk_create(
        rows,
        update_conflicts=True,
        unique_fields=["node", "private"],
        update_fields=[*_FIELDS, "judged_at"],
    )
    return len(nodes)


def _hiding(ids: list[int], since: datetime) -> set[int]:
    """The nodes with a Serving row in the window or a registered run that visitors are not shown: of a
    package not known to be public (two queries)."""
    hidden = Revision.objects.exclude(package__private=False).values("pk")
    served = Serving.objects.filter(node_key__in=ids, last_at__gte=since, revision_id__in=hidden)
    shown_runs = Q(revision__package__private=False) | Q(revision__isnull=True, repo_id="")
    ran = NodeRun.objects.filter(node_id__in=ids).exclude(shown_runs)
    return set(served.values_list("node_key", flat=True).distinct()) | set(
        ran.values_list("node_id", flat=True).distinct()
    )


def _row(row: NodeRow, private: bool, until: datetime, digest: str, at: datetime) -> NodeJudgement:
    advice = row.advice
    about = next((s for s in row.serving if advice is not None and s.advice is advice), None)
    return NodeJudgement(
        node_id=row.node.pk,
        private=private,
        node_name=row.node.name,
        needs_action=advice is not None,
        cause=advice.cause.value if advice else "",
        cause_rank=advice.cause.rank if advice else 0,
        revision_id=about.revision_id if about else None,
        advice=_advice_fields(advice) if advice else {},
        valid_until=until,
        basis=digest,
        judged_at=at,
    )


def _advice_fields(advice: Any) -> dict[str, Any]:
    return {
        "cause": advice.cause.value,
        "text": advice.text,
        "release": advice.release,
        "predicted": advice.predicted,
        "observed": advice.observed,
        "prediction": advice.prediction,
        "observation": advice.observation,
    }


def _valid_until(
    ids: list[int], since: datetime, by_audience: Mapping[bool, list[NodeRow]]
) -> dict[int, datetime]:
    """When the moving window changes each node's judgement (one query): the first of its Serving rows
    in the window leaving it (its last report older than the window's start), its newest report showing
    MTP unused leaving it, and, where a row ran several strategies and the strategy can change the
    cause (fleet.serving._read_to_judge), the window's first hour moving on (its cells are read by the hour).
    Every row in the window counts, shown or not: a conservative bound, never a late one."""
    days = timedelta(days=WINDOW_DAYS)
    window = (
        Serving.objects.filter(node_key__in=ids, last_at__gte=since)
        .values("node_key")
        .annotate(
            leaves=Min("last_at"),
            unused=Min(Case(When(last_unused_at__gte=since, then=F("last_unused_at")))),
            mixed=Max(Case(When(sole_strategy="", then=Value(1)), default=Value(0))),
        )
        .order_by()
    )
    next_hour = since.astimezone(UTC).replace(minute=0, second=0, microsecond=0) + timedelta(hours=1) + days
    reads_cells = {
        row.node.pk
        for rows in by_audience.values()
        for row in rows
        if any(s.reported and strategy_can_change_cause(s.version) for s in row.serving)
    }
    until: dict[int, datetime] = {}
    for row in window:
        bounds = [row["leaves"] + days + _JUST_AFTER]
        if row["unused"] is not None:
            bounds.append(row["unused"] + days + _JUST_AFTER)
        if row["mixed"] and row["node_key"] in reads_cells:
            bounds.append(next_hour)
        until[row["node_key"]] = min(bounds)
    return until


def serving_changing(servings: Mapping[ServingKey, Cell]) -> Callable[[], object]:
    """Before a batch of reports is added to the Serving rows: which of their nodes to judge once it is,
    all but those whose judgement the batch cannot change (``_unchanged_by``)."""
    nodes = {node for _revision, node, _topology, _splits in servings if node}
    if not nodes:
        return lambda: 0
    now = timezone.now()
    changed = nodes - _unchanged_by(servings, nodes, now)
    return lambda: judge(changed, now) if changed else 0


def _unchanged_by(servings: Mapping[ServingKey, Cell], nodes: set[int], now: datetime) -> set[int]:
    """The nodes whose kept judgement a batch adding ``servings`` leaves as it is (three queries): their
    rows are fresh, and every row the batch adds to is already in the window, keeps the one strategy all
    its reports ran (or ran several already, on a node whose release cannot make them change the cause)
    and either stays without MTP unused or had it in the window already; and the node's
    judgement reads every row it has (at most NODES_PAGE_ROWS in the window, so no ranking picks which),
    all of one revision with no run of another (so no row can move on, fleet.serving._with_moves). Then
    nothing it reads changes: not which rows, their flags, their strategies nor the cells they are judged by
    (fleet.serving._read_to_judge reads cells only of rows that ran several). Its ``valid_until`` may come
    earlier than a new judgement's (a later last report): conservative."""
    since = window_start(WINDOW_DAYS, now)
    fresh = NodeJudgement.objects.filter(
        node_id__in=nodes, valid_until__gt=now, judged_at__lte=now, basis=basis()
    ).values_list("node_id", flat=True)
    counted: dict[int, int] = {}
    for node in fresh:
        counted[node] = counted.get(node, 0) + 1
    candidates = {node for node, n in counted.items() if n == len(AUDIENCES)}
    if not candidates:
        return set()
    rows: dict[int, dict[tuple[int, str, str], tuple[Any, str]]] = {}
    window = Serving.objects.filter(node_key__in=candidates, last_at__gte=since)
    for node, revision, topology, splits, unused_at, sole in window.values_list(
        "node_key", "revision_id", "topology_id", "stage_splits", "last_unused_at", "sole_strategy"
    ):
        rows.setdefault(node, {})[(revision, topology, splits)] = (unused_at, sole)
    runs: dict[int, set[int]] = {}
    reads_cells: set[int] = set()
    ran = NodeRun.objects.filter(node_id__in=candidates, revision__isnull=False)
    for node, revision, version in ran.values_list("node_id", "revision_id", "version").distinct():
        runs.setdefault(node, set()).add(revision)
        if strategy_can_change_cause(version):
            reads_cells.add(node)
    unchanged = set()
    for node in candidates:
        mine = rows.get(node, {})
        revisions = {revision for revision, _topology, _splits in mine} | runs.get(node, set())
        if not mine or len(mine) > NODES_PAGE_ROWS or len(revisions) != 1:
            continue
        if all(
            _keeps(mine.get((revision, topology, splits)), cell, since, node in reads_cells)
            for (revision, batch_node, topology, splits), cell in servings.items()
            if batch_node == node
        ):
            unchanged.add(node)
    return unchanged


def _keeps(row: tuple[Any, str] | None, cell: Cell, since: datetime, reads_cells: bool) -> bool:
    """Whether adding ``cell`` to a Serving row in the window (``row``: its last MTP-unused report and
    sole strategy; None: not in the window) leaves what judging it reads. A row that ran one strategy must
    keep it. A row that ran several stays so whatever the cell ran, and its strategies are read only where
    the node's release can make them change the cause (``reads_cells``: a run naming a release the matrix
    knows; fleet.serving._read_to_judge): without one, more reports on it change nothing the judgement
    reads. (Judging such a node anew on every report cost a single report about 16 of its 27 ms: 52
    single reports/s under bench_reports.py, against 312 before the judgements were kept.)"""
    if row is None:
        return False
    unused_at, sole = row
    if (sole and cell.sole_strategy != sole) or (not sole and reads_cells):
        return False
    return cell.last_unused_at is None or (unused_at is not None and unused_at >= since)


# --- reading -------------------------------------------------------------------------------------


def fresh(now: datetime | None = None) -> int:
    """Judge anew the rows read past their ``valid_until`` or judged against another release matrix or
    rosters, or judged at a clock later than ``now`` (a clock set back: a benchmark's, a test's). One
    query, reading four ranges of the indexes ``judgement_expiry``, ``judgement_clock`` and
    ``judgement_basis``. Returns how many nodes were judged."""
    now = now or timezone.now()
    ids = {node_id for (node_id,) in compiled.rows(_stale_read, now, basis())}
    return judge(ids, now) if ids else 0


def _stale_read(now: datetime, digest: str) -> QuerySet[NodeJudgement, tuple[int]]:
    """``fresh``'s read, compiled once per process and digest (every nodes page reads it first: built by
    the ORM each time, it took 0.7 ms against 0.2 on the catalog seed; the paginator's count 0.5 against
    0.2)."""
    stale = NodeJudgement.objects.filter(
        Q(valid_until__lte=now) | Q(judged_at__gt=now) | Q(basis__lt=digest) | Q(basis__gt=digest)
    )
    return stale.values_list("node_id")


def is_kept(days: int) -> bool:
    """Whether the pages' window is the one kept (another is judged per request, as before)."""
    return days == WINDOW_DAYS


def node_page(number: Any, needs_action: bool, show_private: bool, now: datetime | None = None) -> NodePage:
    """A page of /nodes/ (``needs_action``: of /nodes/?action=1) from the kept judgements: the nodes
    needing action first, the most urgent advice first, then by name; the page's rows whole
    (fleet.nodes.rows_of_nodes)."""
    now = now or timezone.now()
    fresh(now)
    ranked = NodeJudgement.objects.filter(private=show_private)
    if needs_action:
        ranked = ranked.filter(needs_action=True)
    order = ranked.order_by("-needs_action", "cause_rank", "node_name").values_list("node_id", flat=True)
    paginator = Paginator(order, NODES_PER_PAGE)
    counted = compiled.rows(_count_read, show_private, needs_action)  # compiled, as fresh's read
    paginator.count = counted[0][0] if counted else 0
    page = paginator.get_page(number)
    ids = list(page.object_list)
    rows = rows_of_nodes(ids, window_start(WINDOW_DAYS, now), show_private)
    return NodePage(rows, page)


def _count_read(show_private: bool, needs_action: bool) -> QuerySet[NodeJudgement, tuple[int]]:
    """How many rows ``node_page`` pages through, for its paginator (one row; none when there are none)."""
    ranked = NodeJudgement.objects.filter(private=show_private)
    if needs_action:
        ranked = ranked.filter(needs_action=True)
    return ranked.values("private").annotate(n=Count("pk")).values_list("n").order_by()


def needing_action_by_cause(now: datetime | None = None) -> dict[str, int]:
    """Nodes needing action by their most urgent advice's cause, as those who see private packages are
    told (the Prometheus gauge)."""
    fresh(now)
    counts = {cause.value: 0 for cause in Cause if cause.needs_action}
    rows = (
        NodeJudgement.objects.filter(private=True, needs_action=True).values("cause").annotate(n=Count("pk"))
    )
    for row in rows.order_by():
        counts[row["cause"]] = counts.get(row["cause"], 0) + row["n"]
    return counts
