"""Browser views of what the fleet runs: nodes, a node, a topology, before/after, the glossary, CSV exports.

Thin edges like pages.py: validate the request, call the selectors in fleet/ and catalog/, render.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Sequence
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils.http import content_disposition_header
from django.views.decorators.http import require_safe

from packages_app import (
    baselines,
    glossary,
    judgements,
    report_metrics,
    staticfinders,
)
from packages_app.catalog.errors import LookupFailed
from packages_app.catalog.listing import CatalogRow, catalog_page
from packages_app.catalog.lookups import get_package, require_revision, revision_history
from packages_app.charts.compare import comparison_timeline_figure, distribution_figure
from packages_app.charts.layers import StageGap, layer_layout_figure, stage_gaps
from packages_app.fleet.compare import Comparison, compare_revisions, default_comparison_pair
from packages_app.fleet.nodes import node_page, node_rows
from packages_app.fleet.topology import topology_runs
from packages_app.fleet.window import DEFAULT_WINDOW_DAYS, window_start
from packages_app.models import Package, Report, Revision
from packages_app.verdicts import STATUSES_BY_RANK, VERDICTS_BY_RANK, ActionKind, Cause
from packages_app.web import access
from packages_app.web.forms import WINDOW_DAYS
from packages_app.web.pages import lookup_errors, valid_catalog_form

CSV_REPORT_LIMIT = 100_000


def _window_days(request: HttpRequest) -> int:
    """``?days=`` when it is one of the offered windows, else the default (never an error page)."""
    raw = request.GET.get("days", "")
    return int(raw) if raw.isdigit() and int(raw) in WINDOW_DAYS else DEFAULT_WINDOW_DAYS


@require_safe
def nodes(request: HttpRequest) -> HttpResponse:
    days = _window_days(request)
    # ?stale=1 is the filter's name before issue 19, kept so bookmarks still work.
    action_only = request.GET.get("action") == "1" or request.GET.get("stale") == "1"
    private = access.can_see_private(request.user)
    since = window_start(days)
    number = request.GET.get("page", 1)
    if judgements.is_kept(days):  # the kept judgements (packages_app.judgements)
        found = judgements.node_page(number, needs_action=action_only, show_private=private)
    else:
        found = node_page(since, number, needs_action=action_only, show_private=private)
    context = {
        "rows": found.rows,
        "page": found.page,
        "days": days,
        "windows": WINDOW_DAYS,
        "action_only": action_only,
        "kept": judgements.is_kept(days),
    }
    return render(request, "packages_app/nodes.html", context)


@require_safe
@lookup_errors
def node_detail(request: HttpRequest, name: str) -> HttpResponse:
    days = _window_days(request)
    private = access.can_see_private(request.user)
    rows = node_rows(window_start(days), name=name, show_private=private)
    if not rows:
        raise LookupFailed(f"No node named {name} is registered.", back="nodes")
    row = rows[0]
    main = max(row.serving, key=lambda s: s.reports, default=None)
    context: dict[str, Any] = {"row": row, "days": days, "windows": WINDOW_DAYS, "main": main}
    if main is not None:
        context.update(_layout(main.revision_id, main.stage_splits))
        context["plotly_guard_ids"] = staticfinders.installed_plotly_guard_ids()
    return render(request, "packages_app/node_detail.html", context)


@require_safe
@lookup_errors
def topology_detail(request: HttpRequest, topology_id: str) -> HttpResponse:
    days = _window_days(request)
    private = access.can_see_private(request.user)
    ran = topology_runs(topology_id, window_start(days), private)
    if not ran.runs:
        raise LookupFailed(f"No report in the last {days} days ran on topology {topology_id}.", back="nodes")
    main = ran.runs[0]
    context = {
        "topology_id": topology_id,
        "runs": ran.runs,
        "hidden": ran.hidden,
        "readiness": ran.readiness,
        "readiness_node": ran.readiness_node,
        "main": main,
        "days": days,
        "windows": WINDOW_DAYS,
        **_layout(main.revision_id, main.stage_splits),
        "plotly_guard_ids": staticfinders.installed_plotly_guard_ids(),
    }
    return render(request, "packages_app/topology_detail.html", context)


def _layout(revision_id: int, split: str) -> dict[str, Any]:
    """The revision's layer layout with the split's stages (``layout_chart``) and the blocks no stage of
    the split holds, MTP blocks named (``stage_gaps``), from one read of its audit (about 24 kB each on
    the catalog seed: read and parsed once, not for each)."""
    revision = Revision.objects.only("id", "block_count", "audit").get(pk=revision_id)
    detected = revision.audited.detected
    gaps: list[StageGap] = stage_gaps(split, revision.block_count, list(detected.mtp_blocks))
    chart = layer_layout_figure(detected.blocks, [split] if split else [])
    return {"layout_chart": chart, "stage_gaps": gaps}


@require_safe
@lookup_errors
def compare(request: HttpRequest, owner: str, name: str) -> HttpResponse:
    """Two revisions' throughput side by side; by default the latest against the last one nodes ran."""
    package = get_package(owner, name, access.can_see_private(request.user))
    history = revision_history(package)
    old, new = _compared_pair(package, history, request.GET.get("from"), request.GET.get("to"))
    comparison = compare_revisions(old, new)
    context = {
        "package": package,
        "history": history,
        "comparison": comparison,
        "speedups": baselines.speedups(package, new, before=old),
        "charts": comparison_charts(comparison),
        "plotly_guard_ids": staticfinders.installed_plotly_guard_ids(),
    }
    return render(request, "packages_app/compare.html", context)


def _compared_pair(
    package: Package, history: list[Revision], old_ref: str | None, new_ref: str | None
) -> tuple[Revision, Revision]:
    """The revisions named, or the default pair (fleet.compare.default_comparison_pair) for what is missing:
    ``to`` alone gets the revision nodes ran before it, ``from`` alone the latest."""
    if old_ref:
        new = require_revision(package, new_ref)
        return require_revision(package, old_ref), new
    new_id = require_revision(package, new_ref).pk if new_ref else package.latest_revision_id
    pair = default_comparison_pair(history, new_id)
    if pair is None:
        single = len(history) < 2
        raise LookupFailed(
            f"{package.repo_id} has a single revision; there is nothing to compare."
            if single
            else f"{new_ref} is the oldest revision; there is nothing to compare it with."
        )
    by_id = {r.pk: r for r in history}
    return by_id[pair[0]], by_id[pair[1]]


def comparison_charts(c: Comparison) -> dict[str, Any]:
    """Both revisions on one timeline, and each one's spread from its sketch."""
    sides = (("before", c.old), ("after", c.new))
    labels = {figures.revision.pk: f"{side} {figures.revision.short_sha}" for side, figures in sides}
    return {
        "timeline": comparison_timeline_figure(
            [(labels[revision.pk], [dict(vars(p)) for p in points]) for revision, points in c.series],
            c.bucket,
        ),
        "spread": distribution_figure([(labels[f.revision.pk], f.spread, f.reports) for _, f in sides]),
    }


@require_safe
def glossary_page(request: HttpRequest) -> HttpResponse:
    context = {
        "statuses": STATUSES_BY_RANK,
        "actions": sorted(ActionKind, key=lambda a: a.rank),
        "verdicts": VERDICTS_BY_RANK,
        "causes": sorted(Cause, key=lambda c: c.rank),
        "problems": _entries("problem", glossary.PROBLEMS),
        "runtime": _entries("runtime", glossary.RUNTIME),
    }
    return render(request, "packages_app/glossary.html", context)


def _entries(kind: str, texts: dict[str, str]) -> list[tuple[str, str, str]]:
    return [(glossary.anchor(kind, name), str(name), text) for name, text in texts.items()]


# --- CSV exports ---------------------------------------------------------------------------------


class _Echo:
    def write(self, value: str) -> str:
        return value


def _csv_response(filename: str, rows: Iterable[list[Any]]) -> HttpResponse:
    writer = csv.writer(_Echo())
    body = "".join(writer.writerow([_cell(v) for v in row]) for row in rows)
    response = HttpResponse(body, content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = content_disposition_header(True, filename)
    return response


def _cell(value: Any) -> Any:
    # A cell starting with = + - @ would run as a formula in a spreadsheet: quote it as text.
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + value
    return "" if value is None else value


CATALOG_COLUMNS = [
    "repo_id",
    "latest_commit_sha",
    "status",
    "headline",
    "action",
    "verdict",
    "architecture",
    "block_count",
    "total_bytes",
    "mtp_detected",
    "mtp_declared",
    "tps_mtp_on",
    "tps_mtp_off",
    "reports",
    "alert",
    "served_broken_revisions",
]


@require_safe
def catalog_csv(request: HttpRequest) -> HttpResponse:
    """The whole filtered catalog (every page) as CSV; same filters as the page."""
    form = valid_catalog_form(request)
    private = access.can_see_private(request.user)
    result = catalog_page(form.filters(), 1, 10**6, show_private=private)
    return _csv_response("meshdash-catalog.csv", [CATALOG_COLUMNS, *map(_catalog_csv_row, result.rows)])


def _catalog_csv_row(row: CatalogRow) -> list[Any]:
    rev = row.revision
    tp: dict[str, Any] = row.throughput.as_dict() if row.throughput else {}
    headline = row.headline
    return [
        row.package.repo_id,
        rev.commit_sha if rev else None,
        row.status.value,
        headline.sentence if headline else None,
        headline.action.text if headline else None,
        rev.verdict if rev else None,
        rev.architecture if rev else None,
        rev.block_count if rev else None,
        (rev.total_bytes or None) if rev else None,
        rev.mtp_detected if rev else None,
        rev.mtp_declared if rev else None,
        _round(tp.get("tps_mtp")),
        _round(tp.get("tps_no_mtp")),
        tp.get("reports", 0),
        row.alert,
        " ".join(f"{s.commit_sha}:{s.status.value}:{s.verdict}:{s.nodes}" for s in row.served_broken),
    ]


def _round(value: Any) -> Any:
    return round(value, 2) if isinstance(value, float) else value


def report_columns(metrics: Sequence[report_metrics.ReportMetric] | None = None) -> list[str]:
    """The reports CSV's header: the report's context, then the table's shown metrics."""
    return [
        "received_at",
        "observed_at",
        "node",
        "topology_id",
        "stage_splits",
        "requested_strategy",
        "effective_strategy",
        "mtp_source",
        "mtp_used",
        *report_metrics.shown_columns(metrics),
        "source",
        "run_id",
    ]


REPORT_COLUMNS = report_columns()


@require_safe
@lookup_errors
def reports_csv(request: HttpRequest, owner: str, name: str) -> HttpResponse:
    """Every report of one revision (newest first) as CSV."""
    package = get_package(owner, name, access.can_see_private(request.user))
    revision = require_revision(package, request.GET.get("revision"))
    reports = (
        Report.objects.filter(revision=revision)
        .order_by("-received_at", "-id")
        .values_list(*[c if c != "node" else "node__name" for c in REPORT_COLUMNS])[:CSV_REPORT_LIMIT]
    )
    rows = ([v.isoformat() if hasattr(v, "isoformat") else v for v in r] for r in reports)
    filename = f"{package.name}-{revision.short_sha}-reports.csv"
    return _csv_response(filename, [REPORT_COLUMNS, *rows])
