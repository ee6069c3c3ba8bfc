"""Baseline engines and speedup: what MTP buys, not only how often its drafts are accepted (issue 46).

Storing: ``store_baselines`` keeps each window a baseline engine reports (a plain llama.cpp or vLLM server,
scraped by meshdash-agent: packages_app/nodes/exposition.py), exactly once per (node, report_id).

Reading: ``speedups(revision)`` answers, for one revision, the two questions a user of mesh-llm asks
(mesh-llm #1026, #938, #1366; docs/node-report.md section 6):

- **MTP on against MTP off** on the same stage split and mesh-llm release, from the nodes' own rollups;
- **mesh-llm against a baseline engine** serving the same source model (the package manifest's
  ``source_model.repo``, else its card's ``base_model``), each quantization its own row: a baseline of
  another quantization is shown as such, never merged with the like-for-like one.

Each is the ratio of median decode rates with a conservative 95 % interval (sketch.ratio_of_medians), with
the mean acceptance length (1 + accepted / drafts) and the acceptance by draft position beside it where the
counters exist, and the reasons the two sides are not like for like.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import QuerySet

from packages_app import compiled, mesh_acceptance, sketch, speedup_cells
from packages_app.models import BaselineReport, Node, NodeRun, Package, Revision
from packages_app.nodes.exposition import acceptance_by_position, acceptance_rate, mean_acceptance_length
from packages_app.nodes.report_schema import BaselineReportIn
from packages_app.speedup_cells import NodeCell, decoded, merged_sketches

BASELINE_DAYS = 30  # the baseline windows a page reads: the newest, within this many days
MAX_BASELINE_ROWS = 5000
# A GGUF quantization as file and repo names spell it: Q4_K_M, UD-Q4_K_XL, IQ2_XXS, Q8_0, BF16, F16, MXFP4.
_QUANT = re.compile(
    r"(?<![A-Za-z0-9])((?:UD-)?(?:I?Q\d(?:_[A-Z0-9]+)*|BF16|F16|F32|MXFP4(?:_MOE)?))(?![A-Za-z0-9])", re.I
)


def quantization_of(name: str) -> str:
    """The quantization a GGUF file or repo name carries (``UD-Q4_K_XL`` of
    ``Qwen3.5-35B-A3B-UD-Q4_K_XL.gguf``), upper-cased; "" when it names none."""
    found = _QUANT.findall(name.rsplit("/", 1)[-1].removesuffix(".gguf"))
    return found[-1].upper() if found else ""


# --- Storing -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StoredBaseline:
    status: int  # 201 stored, 200 the same report again, 409 the id with another body
    id: int


def store_baselines(
    node: Node, items: Sequence[tuple[BaselineReportIn, str]], received_at: datetime
) -> list[StoredBaseline]:
    """Store a batch: one read of the keys already stored, one insert, one read back (three queries)."""
    ids = [report.report_id for report, _ in items]
    before = set(
        BaselineReport.objects.filter(node=node, report_id__in=ids).values_list("report_id", flat=True)
    )
    firsts: dict[Any, int] = {}
    rows = []
    for index, (report, digest) in enumerate(items):
        if report.report_id in before or report.report_id in firsts:
            continue
        firsts[report.report_id] = index
        rows.append(_row(node, report, digest, received_at))
    with transaction.atomic():
        BaselineReport.objects.bulk_create(rows, ignore_conflicts=True)
    stored = {
        rid: (pk, digest)
        for rid, pk, digest in BaselineReport.objects.filter(node=node, report_id__in=ids).values_list(
            "report_id", "id", "body_sha256"
        )
    }
    out = []
    for index, (report, digest) in enumerate(items):
        pk, kept = stored[report.report_id]
        if kept != digest:
            out.append(StoredBaseline(409, pk))
        else:
            created = report.report_id not in before and firsts.get(report.report_id) == index
            out.append(StoredBaseline(201 if created else 200, pk))
    return out


def _row(node: Node, report: BaselineReportIn, digest: str, received_at: datetime) -> BaselineReport:
    f = report.figures
    rate = report.decode_rate()
    return BaselineReport(
        node=node,
        report_id=report.report_id,
        body_sha256=digest,
        received_at=received_at,
        observed_at=report.observed_at,
        window_seconds=report.window_seconds,
        engine=report.engine,
        engine_version=report.engine_version,
        served_model=report.served_model,
        source_model=report.source_model,
        source_file=report.source_file,
        quantization=(
            report.quantization or quantization_of(report.source_file or report.served_model)
        ).upper(),
        counter_reset=report.counter_reset,
        predicted_n=f.predicted_n,
        predicted_seconds=f.predicted_seconds,
        predicted_per_second=round(rate, 4) if rate is not None else None,
        drafts=f.drafts,
        draft_tokens=f.draft_tokens,
        accepted_tokens=f.accepted_tokens,
        accepted_per_position=f.accepted_per_position,
        flagged=report.flagged(),
        body=report.model_dump(mode="json"),
    )


# --- A package's source model --------------------------------------------------------------------


@dataclass(frozen=True)
class Source:
    repo: str  # the Hub repo of the GGUF / weights the package was cut from; "" unknown
    quantization: str  # "" unknown
    file: str = ""


def source_of(package: Package, revision: Revision) -> Source:
    """The manifest's ``source_model`` (repo, primary file) and quantization (``model_id``'s ``repo:QUANT``,
    else the primary file's name, else the package's name); the card's ``base_model`` when the manifest
    names no repo."""
    manifest: dict[str, Any] = revision.manifest_json if isinstance(revision.manifest_json, dict) else {}
    found = manifest.get("source_model")
    source: dict[str, Any] = found if isinstance(found, dict) else {}
    repo = _text(source.get("repo"))
    primary = _text(source.get("primary_file")) or _text(source.get("path"))
    model_id = _text(manifest.get("model_id"))
    quant = ""
    if ":" in model_id:
        quant = quantization_of(model_id.rsplit(":", 1)[1]) or model_id.rsplit(":", 1)[1].upper()
        repo = repo or model_id.rsplit(":", 1)[0]
    quant = quant or quantization_of(primary) or quantization_of(package.repo_id)
    return Source(repo or package.base_model, quant, primary.rsplit("/", 1)[-1])


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


# --- Speedups ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Side:
    label: str
    reports: int
    sketch: sketch.Sketch
    acceptance_rate: float | None = None
    mean_acceptance_length: float | None = None
    by_position: list[float] | None = None

    @property
    def median(self) -> float | None:
        return sketch.median(self.sketch)


@dataclass(frozen=True)
class Speedup:
    """``faster`` / ``slower`` median decode rate, with its 95 % interval; ``apart`` names what differs
    between the two sides besides what is compared (empty: like for like)."""

    kind: str  # "mtp" | "baseline"
    title: str
    faster: Side
    slower: Side
    scope: str
    apart: tuple[str, ...] = ()
    other_quantization: bool = False

    @property
    def ratio(self) -> sketch.Ratio | None:
        return sketch.ratio_of_medians(self.slower.sketch, self.faster.sketch)

    @property
    def sentence(self) -> str:
        """E.g. ``MTP on decodes 5.32 tok/s against 3.15 with MTP off: x1.69 (95 % interval x1.60 to
        x1.78).``; a ratio whose interval is below 1 says how much slower."""
        ratio, fast, slow = self.ratio, self.faster.median, self.slower.median
        if ratio is None or fast is None or slow is None:
            return f"{self.faster.label} against {self.slower.label}: no decode figures on a side yet."
        text = (
            f"{self.faster.label} decodes {fast:.2f} tok/s against {slow:.2f} with {self.slower.label}: "
            f"x{ratio.ratio:.2f}"
        )
        if ratio.low is not None and ratio.high is not None:
            text += f" (95 % interval x{ratio.low:.2f} to x{ratio.high:.2f})"
        else:
            text += " (too few reports on a side for an interval)"
        if ratio.high is not None and ratio.high < 1:
            text += f", {100 * (1 - ratio.ratio):.0f} % slower"
        elif ratio.low is not None and ratio.low <= 1 <= (ratio.high or 0):
            text += ", not told apart from no speedup"
        return text + "."


@dataclass(frozen=True)
class Speedups:
    source: Source
    mtp: Speedup | None
    mtp_missing: str  # why there is no MTP on/off ratio, when there is none
    baselines: list[Speedup] = field(default_factory=list)
    baseline_missing: str = ""


def speedups(
    package: Package,
    revision: Revision,
    before: Revision | None = None,
) -> Speedups:
    """The revision's MTP on / off speedup and its speedup over each baseline engine group. With ``before``
    (the compare page's other revision), a revision that never ran with MTP off on one split and release is
    compared with ``before``'s MTP-off reports instead, and the page says it is not like for like.

    The revision's per-node cells (a node's stage split, MTP on or off: speedup_cells, from SplitRollup)
    are read without their sketches, and only when a speedup can be shown (MTP ran both on and off, or on
    beside ``before``, or a baseline engine reported the source model): the sketches of the sides shown only
    are read (one query) and merged, not every node's."""
    source = source_of(package, revision)
    groups = _baseline_groups(source.repo) if source.repo else []
    ran = speedup_cells.ran(revision.pk)
    crossed = before is not None and True in ran
    if _nothing_to_show(ran, crossed, groups):
        return Speedups(source, None, _mtp_missing(ran), [], _baseline_missing(source, groups, None))
    node_cells = speedup_cells.node_cells(revision.pk)
    # The nodes' releases tell MTP on from off apart on one release, or name the releases of a
    # cross-revision pair (its MTP-on side is this revision's): read only when one of them can be.
    releases = _releases(revision) if len(ran) > 1 or crossed else {}
    pair, missing = _mtp_pair(node_cells, ran, releases)
    if pair is None and before is not None and crossed:
        pair = _cross_revision_pair(revision, node_cells, releases, before)
        missing = "" if pair else missing
    on_cells = pair.on if pair else [c for c in node_cells if c.mtp_used]
    # Against a baseline: mesh-llm with MTP where it ran, else mesh-llm as it ran (a revision served
    # without MTP is compared too: how far is mesh-llm without MTP from plain llama.cpp?).
    used = decoded(on_cells) > 0
    mesh_cells = on_cells if used else [c for c in node_cells if not c.mtp_used]
    # The sketches of the sides shown only, merged in one query: the pair's, and mesh-llm's against a
    # baseline when it is not the pair's MTP-on side.
    against = bool(groups and decoded(mesh_cells))
    on_sketch, off_sketch, mesh_sketch = merged_sketches(
        [
            on_cells if pair or (against and used) else [],
            pair.off if pair else [],
            mesh_cells if against and not used else [],
        ]
    )
    mesh_on = _side(pair.on_label if pair else "mesh-llm, MTP on", on_cells, on_sketch)
    if mesh_on.reports:
        mesh_on = _with_mesh_acceptance(mesh_on, revision)
    mtp = None
    if pair:
        off = _side(pair.off_label, pair.off, off_sketch)
        mtp = Speedup("mtp", "MTP on against MTP off", mesh_on, off, pair.scope, pair.apart)
    mesh = mesh_on if used else _side("mesh-llm without MTP", mesh_cells, mesh_sketch)
    splits = {c.stage_splits for c in node_cells if c.mtp_used == used}
    rows = [_baseline_speedup(mesh, group, source, splits, used) for group in groups] if mesh.reports else []
    rows.sort(key=lambda s: (s.other_quantization, -s.slower.reports))
    return Speedups(source, mtp, missing, rows, _baseline_missing(source, groups, mesh))


def _nothing_to_show(ran: set[bool], crossed: bool, groups: list[_Group]) -> bool:
    """Nothing to pair and nothing to set mesh-llm against: which ways the cells ran says why, and the cells
    are not read (the busiest seeded revision, never run with MTP: 2,180 of them at 10,000 nodes)."""
    return len(ran) < 2 and not crossed and not groups


def _baseline_missing(source: Source, groups: list[_Group], mesh: Side | None) -> str:
    """Why there is no speedup over a baseline engine, when there is none (``mesh``: None when no baseline
    group reported, so no side was read)."""
    if not source.repo:
        return "The package names no source model (manifest source_model, card base_model): nothing to join."
    if not groups:
        return (
            f"No baseline engine reports for {source.repo} yet. A plain llama.cpp or vLLM server serving it "
            'reports through meshdash-agent\'s baselines (docs/api.md, "Baseline engines").'
        )
    if mesh is None or not mesh.reports:
        return "No node has reported decoding this revision yet."
    return ""


@dataclass(frozen=True)
class _Pair:
    """The cells of MTP on and of MTP off a speedup compares, and how they are not like for like."""

    on: list[NodeCell]
    off: list[NodeCell]
    scope: str
    apart: tuple[str, ...]
    on_label: str = "MTP on"
    off_label: str = "MTP off"


def _releases(revision: Revision) -> dict[int, str]:
    """node -> the mesh-llm release its agent registered for its run of the revision (the newest)."""
    return {node: version for _, node, version in compiled.rows(_releases_of, revision.pk)}


def _releases_of(revision_id: int) -> QuerySet[NodeRun, tuple[int, int, str]]:
    return NodeRun.objects.releases([revision_id])


def _cross_revision_pair(
    revision: Revision, cells: list[NodeCell], releases: Mapping[int, str], before: Revision
) -> _Pair | None:
    """This revision's MTP on against ``before``'s MTP off, on their most-reported shared stage split
    (``before``'s cells are read without their sketches, as this revision's)."""
    before_cells = speedup_cells.node_cells(before.pk)
    off_cells = [c for c in before_cells if not c.mtp_used]
    if not off_cells:
        return None
    on_cells = [c for c in cells if c.mtp_used]
    apart = [
        f"MTP off is {before.short_sha}'s reports: {revision.short_sha} never ran without MTP on one split "
        "and release"
    ]
    shared = {c.stage_splits for c in on_cells} & {c.stage_splits for c in off_cells}
    # The most reported, the first by name of those that tie (not the set's order, which varies by process).
    reported = {x: sum(c.reports for c in cells if c.stage_splits == x) for x in sorted(shared)}
    split = max(reported, key=reported.__getitem__) if shared else ""
    if shared:
        on_cells = [c for c in on_cells if c.stage_splits == split]
        off_cells = [c for c in off_cells if c.stage_splits == split]
    else:
        apart.append("the two sides ran on different stage splits")
    on_releases = sorted({releases.get(c.node_key, "") for c in on_cells} - {""})
    before_releases = _releases(before)
    off_releases = sorted({before_releases.get(c.node_key, "") for c in off_cells} - {""})
    if on_releases != off_releases:
        apart.append(
            f"another mesh-llm release: MTP on ran {', '.join(on_releases) or 'a release not reported'}, "
            f"MTP off {', '.join(off_releases) or 'a release not reported'}"
        )
    if {c.node_key for c in on_cells} != {c.node_key for c in off_cells}:
        apart.append("different nodes ran each side (the hardware may differ)")
    scope = f"MTP on: {revision.short_sha}, MTP off: {before.short_sha}" + (
        f"; stage split {split}" if split else ""
    )
    return _Pair(on_cells, off_cells, scope, tuple(apart), off_label=f"MTP off ({before.short_sha})")


def _side(label: str, cells: Sequence[NodeCell], merged: sketch.Sketch) -> Side:
    """The side's figures with its cells' merged sketch (a side no speedup shows, read only for its count of
    decode rates, keeps none: ``merged`` is empty)."""
    accepted = sum(c.accepted for c in cells)
    proposed = sum(c.proposed for c in cells)
    return Side(label, decoded(cells), merged, acceptance_rate(accepted, proposed) if proposed else None)


def _mtp_pair(cells: list[NodeCell], ran: set[bool], releases: Mapping[int, str]) -> tuple[_Pair | None, str]:
    """MTP on and off on one stage split and release: the one with the most reports on its thinner side,
    then the most on both, then the first split and release by name (whatever order the cells were read
    in); ``ran``: whether the cells ran with MTP, as the caller found it."""
    groups: dict[tuple[str, str], list[NodeCell]] = {}
    # Nothing to group when every cell ran one way (the busiest revision has 2,180 cells at 10,000 nodes).
    for cell in cells if len(ran) > 1 else ():
        groups.setdefault((cell.stage_splits, releases.get(cell.node_key, "")), []).append(cell)
    best = None
    for (splits, release), mine in groups.items():
        on = [c for c in mine if c.mtp_used]
        off = [c for c in mine if not c.mtp_used]
        on_reports, off_reports = sum(c.reports for c in on), sum(c.reports for c in off)
        rank = (-min(on_reports, off_reports), -(on_reports + off_reports), splits, release)
        if on and off and (best is None or rank < best[0]):
            best = (rank, splits, release, on, off)
    if best is None:
        return None, _mtp_missing(ran)
    _, splits, release, on, off = best
    scope = f"stage split {splits or 'not reported'}, mesh-llm {release or 'release not reported'}"
    apart = []
    if {c.node_key for c in on} != {c.node_key for c in off}:
        apart.append("different nodes ran each side (the hardware may differ)")
    if not release:
        apart.append("the nodes' mesh-llm release is not reported, so it is not held equal")
    return _Pair(on, off, scope, tuple(apart)), ""


def _mtp_missing(ran: set[bool]) -> str:
    """Why there is no MTP on / off pair, by the ways the revision's cells ran (none: no cell)."""
    if not ran:
        return "No node has reported decoding this revision yet."
    if ran == {True}:
        return "Every report of this revision ran with MTP on: no MTP-off run to compare with."
    if ran == {False}:
        return "No report of this revision ran with MTP on."
    return "MTP on and MTP off never ran on the same stage split and mesh-llm release."


def _with_mesh_acceptance(side: Side, revision: Revision) -> Side:
    """The mean acceptance length of mesh-llm's own counters: accepted tokens over drafts, a draft being a
    speculative window (n-gram) or a native-MTP verification (packages_app.mesh_acceptance)."""
    accepted, drafts = mesh_acceptance.counts(revision.pk)
    return Side(
        side.label, side.reports, side.sketch, side.acceptance_rate, mean_acceptance_length(accepted, drafts)
    )


@dataclass
class _Group:
    engine: str
    version: str
    quantization: str
    files: set[str] = field(default_factory=set)
    rates: list[float] = field(default_factory=list)
    drafts: int = 0
    draft_tokens: int = 0
    accepted: int = 0
    per_position: list[int] = field(default_factory=list)
    positions_drafts: int = 0
    flagged: int = 0


def _baseline_groups(source_model: str) -> list[_Group]:
    """The newest baseline windows for the source model, one group per engine, version and quantization."""
    newest = (
        BaselineReport.objects.filter(source_model=source_model)
        .order_by("-received_at")
        .values_list("received_at", flat=True)
        .first()
    )
    if newest is None:
        return []
    rows = (
        BaselineReport.objects.filter(
            source_model=source_model, received_at__gte=newest - timedelta(days=BASELINE_DAYS)
        )
        .order_by("-received_at")
        .values_list(
            "engine",
            "engine_version",
            "quantization",
            "source_file",
            "predicted_per_second",
            "drafts",
            "draft_tokens",
            "accepted_tokens",
            "accepted_per_position",
            "flagged",
        )[:MAX_BASELINE_ROWS]
    )
    groups: dict[tuple[str, str, str], _Group] = {}
    for engine, version, quant, file, rate, drafts, draft_tokens, accepted, per_pos, flagged in rows:
        group = groups.setdefault((engine, version, quant), _Group(engine, version, quant))
        if file:
            group.files.add(file)
        if flagged:
            group.flagged += 1
            continue
        if rate is not None:
            group.rates.append(rate)
        if drafts and draft_tokens is not None and accepted is not None:
            group.drafts += drafts
            group.draft_tokens += draft_tokens
            group.accepted += accepted
            if isinstance(per_pos, list) and per_pos:
                _add_positions(group.per_position, per_pos)
                group.positions_drafts += drafts
    return [g for g in groups.values() if g.rates]


def _add_positions(into: list[int], more: list[Any]) -> None:
    for index, value in enumerate(more):
        if index >= len(into):
            into.append(0)
        into[index] += int(value) if isinstance(value, int) else 0


def _baseline_speedup(mesh: Side, group: _Group, source: Source, splits: set[str], mtp: bool) -> Speedup:
    engine = f"{group.engine} {group.version}".strip()
    quant = group.quantization or "quantization not known"
    baseline = Side(
        f"{engine} ({quant})",
        len(group.rates),
        sketch.of_values(group.rates),
        acceptance_rate(group.accepted, group.draft_tokens) if group.drafts else None,
        mean_acceptance_length(group.accepted, group.drafts) if group.drafts else None,
        acceptance_by_position(group.per_position, group.positions_drafts)
        if group.positions_drafts
        else None,
    )
    apart = []
    other = bool(group.quantization and source.quantization and group.quantization != source.quantization)
    if other:
        apart.append(
            f"another quantization: the baseline serves {group.quantization}, "
            f"the package is {source.quantization}"
        )
    elif not group.quantization or not source.quantization:
        apart.append("the quantization of one side is not known, so it may differ")
    if any("|" in s for s in splits):
        apart.append("mesh-llm splits the model across stages (network hops); the baseline is one process")
    if group.drafts:
        apart.append(
            f"the baseline speculates too (mean acceptance length {baseline.mean_acceptance_length:.2f})"
        )
    apart.append("meshdash does not know that both ran on the same hardware")
    if group.flagged:
        apart.append(f"{group.flagged} baseline windows whose figures contradict each other are left out")
    return Speedup(
        "baseline",
        f"mesh-llm {'MTP on' if mtp else 'without MTP'} against {engine}",
        replace(mesh, label="mesh-llm with MTP" if mtp else "mesh-llm without MTP"),
        baseline,
        f"{source.repo}, {quant}" + (f" ({', '.join(sorted(group.files)[:2])})" if group.files else ""),
        tuple(apart),
        other,
    )
