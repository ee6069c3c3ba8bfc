"""Before and after, the compare page and the package page's compare form: two revisions' decode figures
side by side, like with like where the data allows, with what else changed named.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db.models import QuerySet, TextField, Value
from django.db.models.functions import Cast

from packages_app import sketch, stored_sketch, throughput
from packages_app.fleet.figures import median_of
from packages_app.models import NodeRun, Revision, RevisionRollup, Rollup
from packages_app.rollups.cells import hourly_since

# Below this many reports on either side a before/after ratio is noise, and is marked so.
FEW_REPORTS = 10


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
    cells = _total_cells([old.pk, new.pk], every=True)
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
        cells = [
            c for c in _total_cells([old.pk, new.pk], every=False) if c["node_key"] in nodes[c["revision_id"]]
        ]
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


def _total_cells(revision_ids: list[int], *, every: bool) -> list[dict[str, Any]]:
    """The revisions' total cells: every node's together, or each node's."""
    rows = _cells(revision_ids, Rollup.Grain.TOTAL, every=every)
    return list(rows.annotate(tps=Cast("tps_sketch", TextField())).values(*_CELL_FIELDS))


def _cells(revision_ids: list[int], grain: str, *, every: bool) -> QuerySet[Any]:
    """The revisions' cells of a grain: every node's together (RevisionRollup, its ``node_key`` ALL_NODES),
    or each node's (Rollup)."""
    if every:
        every_node = RevisionRollup.objects.filter(revision_id__in=revision_ids, grain=grain)
        return every_node.annotate(node_key=Value(Rollup.ALL_NODES))
    each_node = Rollup.objects.filter(revision_id__in=revision_ids, grain=grain)
    return each_node.exclude(node_key=Rollup.ALL_NODES)


def _releases_by_node(revision_ids: list[int]) -> dict[tuple[int, int], str]:
    """(revision, node) -> the mesh-llm release the node's agent registered for its run of the revision
    (the newest registration when there are several)."""
    return {(rev, node): version for rev, node, version in NodeRun.objects.releases(revision_ids)}


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
    rows = _cells([r.pk for r in revisions], grain, every=nodes is None)
    if nodes is not None:
        rows = rows.filter(node_key__in=set().union(*nodes.values()))
    if topology:
        rows = rows.filter(stage_splits=topology)
    if requested:
        rows = rows.filter(requested_strategy__in=requested)
    grouped: dict[tuple[int, datetime], tuple[int, list[str]]] = {}
    for revision_id, node_key, at, reports, bins in rows.annotate(
        tps=stored_sketch.stored("tps_sketch")
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
            throughput.Point(at, "", topology, sketch.median(stored_sketch.merged_stored(texts)), total)
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
            "tps": median_of([c["tps"] for c in group]),
            "tps_mtp_on": median_of([c["tps"] for c in on]),
            "tps_mtp_off": median_of([c["tps"] for c in off]),
            "distribution": stored_sketch.merged_stored(c["tps"] for c in group),
        }
    return figures


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
    totals = RevisionRollup.objects.filter(revision_id__in=[r.pk for r in older], grain=Rollup.Grain.TOTAL)
    reported = set(totals.values_list("revision_id", flat=True))
    ran = [r for r in older if r.pk in reported]
    changed = [r for r in ran if r.headline != new.headline]
    old = (changed or ran or older)[0]
    return old.pk, new.pk
