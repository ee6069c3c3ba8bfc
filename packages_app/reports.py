"""Services that write node reports: exactly once per (node, report_id), linked to their revision.

Validation happens before (report_schema.py); reading and aggregating happens after (throughput.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from enum import StrEnum
from typing import Any, NamedTuple
from uuid import UUID

from django.db import connection, transaction
from django.db.models import Q

from packages_app import judgements, report_metrics
from packages_app.models import Node, Report, ReportKey, Revision
from packages_app.nodes.report_schema import ReportIn, Timings
from packages_app.report_time import Placement, placement
from packages_app.rollups.adding import add_reports, link_reports


class Stored(StrEnum):
    CREATED = "created"  # a new row
    DUPLICATE = "duplicate"  # a verbatim replay of a stored report
    CONFLICT = "conflict"  # the report_id was stored with another body


@dataclass(frozen=True)
class StoreOutcome:
    """What happened to one report, and the revision it names when that is not ingested yet."""

    result: Stored
    id: int | None = None
    unknown_revision: tuple[str, str] | None = None  # (repo id, commit sha) for the caller to ingest

    @property
    def duplicate(self) -> bool:
        return self.result is Stored.DUPLICATE


@dataclass(frozen=True)
class ValidReport:
    """A validated report with the digest of its canonical body (what a verbatim replay repeats)."""

    report: ReportIn
    digest: str
    body: dict[str, object]


PackageKey = tuple[str, str, str]  # (repo_id, commit_sha, manifest_sha256 or "")


def store_report(node: Node, item: ValidReport, received_at: datetime) -> StoreOutcome:
    """Store one report: a batch of one."""
    return store_reports(node, [item], received_at)[0]


def store_reports(node: Node, items: Sequence[ValidReport], received_at: datetime) -> list[StoreOutcome]:
    """Store many reports with one insert of keys, one of reports; a result per item, in order.

    An item is 201 when this call claimed its key, else a replay (200) or a conflict (409) by digest.
    """
    revisions = _resolve_revisions({_package_key(item.report) for item in items})
    firsts = _first_occurrences(items)
    rows = [_build_row(node, item, received_at, revisions) for item in firsts.values()]
    keys = insert_claimed(node, rows)
    outcomes = []
    for item in items:
        key = keys[item.report.report_id]
        if key.claimed and firsts[item.report.report_id] is item:
            outcome = StoreOutcome(Stored.CREATED, key.id)
        else:
            outcome = _compare((key.id, key.digest), item.digest)
        outcomes.append(_with_unknown(outcome, item, revisions))
    return outcomes


class StoredKey(NamedTuple):
    id: int  # the report row's id
    digest: str  # body_sha256 of the stored report
    claimed: bool  # by this call: the row is the one it inserted


def insert_claimed(node: Node, rows: Sequence[Report]) -> dict[UUID, StoredKey]:
    """Claim each row's (node, report_id) key, then insert the rows whose key this call claimed and
    add them to the rollups, all in one transaction (a savepoint inside a caller's).

    ``rows`` have distinct report ids; returns the stored key of each. The key's unique constraint
    decides races: a second claimant waits for the first to commit, then finds the key taken, and
    the rows it did not claim are never inserted.
    """
    with transaction.atomic():
        claimed = _claim(node, rows)
        keys = {
            row.report_id: StoredKey(claimed[row.report_id], row.body_sha256, True)
            for row in rows
            if row.report_id in claimed
        }
        others = [row.report_id for row in rows if row.report_id not in claimed]
        if others:
            taken = ReportKey.objects.filter(node=node, report_id__in=others)
            for pk, report_id, digest in taken.values_list("id", "report_id", "body_sha256"):
                keys[report_id] = StoredKey(pk, digest, False)
        mine = [row for row in rows if row.report_id in claimed]
        for row in mine:
            row.id = claimed[row.report_id]
        Report.objects.bulk_create(mine)
        add_reports(mine, serving=judgements.serving_changing)  # their nodes judged: judgements
    return keys


def _claim(node: Node, rows: Sequence[Report]) -> dict[UUID, int]:
    """Insert the rows' keys with ``ON CONFLICT DO NOTHING RETURNING``: the keys this statement
    inserted, report id -> key id (PostgreSQL, and SQLite from 3.35). Django's
    bulk_create(ignore_conflicts=True) cannot say which rows it inserted."""
    table = ReportKey._meta.db_table
    claimed: dict[UUID, int] = {}
    # In report_id order: two batches sharing reports then wait for each other's keys in the same
    # order instead of each holding one the other needs (a deadlock).
    ordered = sorted(rows, key=lambda row: row.report_id)
    with connection.cursor() as cursor:
        for start in range(0, len(ordered), CLAIM_ROWS):
            chunk = ordered[start : start + CLAIM_ROWS]
            params: list[Any] = []
            for row in chunk:
                params.extend((node.pk, *_key_values(row)))
            cursor.execute(
                f"INSERT INTO {table} (node_id, {', '.join(f.name for f in _KEY_COLUMNS)})"  # noqa: S608
                f" VALUES {', '.join(['(%s, %s, %s, %s)'] * len(chunk))}"
                " ON CONFLICT (node_id, report_id) DO NOTHING RETURNING report_id, id",
                params,
            )
            claimed.update((UUID(str(report_id)), pk) for report_id, pk in cursor.fetchall())
    return claimed


CLAIM_ROWS = 500  # keys per statement: 2,000 parameters
KEY_FIELDS = ("report_id", "body_sha256", "received_at")
_KEY_COLUMNS = [field for field in ReportKey._meta.concrete_fields if field.name in KEY_FIELDS]


def _key_values(row: Report) -> list[Any]:
    # Each value as its column stores it (a uuid is 32 hex digits on SQLite, a datetime is UTC).
    return [field.get_db_prep_save(getattr(row, field.name), connection) for field in _KEY_COLUMNS]


def _first_occurrences(items: Iterable[ValidReport]) -> dict[UUID, ValidReport]:
    # A batch may repeat a report_id; the first one is the insert, the rest are replays of it.
    seen: dict[UUID, ValidReport] = {}
    for item in items:
        seen.setdefault(item.report.report_id, item)
    return seen


def _compare(stored: tuple[int, str], digest: str) -> StoreOutcome:
    row_id, stored_digest = stored
    return StoreOutcome(Stored.DUPLICATE if stored_digest == digest else Stored.CONFLICT, row_id)


def _with_unknown(
    outcome: StoreOutcome, item: ValidReport, revisions: dict[PackageKey, int | None]
) -> StoreOutcome:
    key = _package_key(item.report)
    return outcome if revisions.get(key) is not None else replace(outcome, unknown_revision=key[:2])


def _build_row(
    node: Node, item: ValidReport, received_at: datetime, revisions: dict[PackageKey, int | None]
) -> Report:
    report = item.report
    skew = (report.observed_at - received_at).total_seconds()
    return Report(
        node=node,
        report_id=report.report_id,
        body_sha256=item.digest,
        received_at=received_at,
        observed_at=report.observed_at,
        clock_skew_seconds=skew,
        # Flagged when its observed time is not believed (report_time): a replayed spool is not skew.
        clock_skew_flagged=placement(report.observed_at, received_at) is Placement.REFUSED,
        repo_id=report.package.repo,
        commit_sha=report.package.revision,
        manifest_sha256=report.package.manifest_sha256 or "",
        revision_id=revisions.get(_package_key(report)),
        **_topology_fields(report),
        **_timing_fields(report),
        mtp_used=mtp_used(report),
        body=item.body,
        timings_flagged=report.timings.implausible_keys(),
    )


def _topology_fields(report: ReportIn) -> dict[str, str]:
    topology, spec = report.topology, report.speculative
    return {
        "topology_id": topology.topology_id if topology else "",
        "stage_splits": topology.stage_splits() if topology else "",
        "requested_strategy": (spec.requested_strategy or "") if spec else "",
        "effective_strategy": (spec.effective_strategy or "") if spec else "",
        "mtp_source": (spec.mtp_source or "") if spec else "",
    }


def _timing_fields(report: ReportIn) -> dict[str, float | int | None]:
    # An implausible value stays in the body and is named in timings_flagged; its column is left
    # empty so that medians and sums never see it.
    return {key: report.timings.plausible(key) for key in TIMING_COLUMNS}


# The Report columns filled from timings: the metrics table's stored metrics.
TIMING_COLUMNS = report_metrics.stored_columns()


# The speculative counters that move only when drafts were verified: one tuple for every source of
# reports (JSON reports, OTLP spans), so "MTP really ran" means the same whichever way a node reports.
MTP_COUNTERS = ("speculative_proposed_n", "speculative_windows", "draft_n", "native_mtp_verifications")


def mtp_ran(said_on: bool, timings: Timings) -> bool:
    """The node says native MTP was on and one of its speculative counters moved.

    `mtp_source=Disabled` with every counter 0 is the silent failure the dashboard exists for
    (docs/domain.md section 4), so either signal alone is not enough.
    """
    return said_on and any((timings.plausible(key) or 0) > 0 for key in MTP_COUNTERS)


def mtp_used(report: ReportIn) -> bool:
    """Native MTP really ran, as a JSON report says it: `mtp_source` Integrated or External (or a
    native-mtp effective strategy), never Disabled, and its counters moved (`mtp_ran`)."""
    spec = report.speculative
    if spec is None or spec.mtp_source == "Disabled":
        return False
    said_on = spec.mtp_source in ("Integrated", "External") or "native-mtp" in (spec.effective_strategy or "")
    return mtp_ran(said_on, report.timings)


# --- Linking reports to revisions -------------------------------------------------------------


def _package_key(report: ReportIn) -> PackageKey:
    ref = report.package
    return (ref.repo, ref.revision, ref.manifest_sha256 or "")


def _resolve_revisions(keys: set[PackageKey]) -> dict[PackageKey, int | None]:
    """Revision id per package reference: by repo + commit, else by repo + manifest digest."""
    if not keys:
        return {}  # an empty Q() would match every revision
    by_commit = Q()
    for repo, sha, _ in keys:
        by_commit |= Q(package__repo_id=repo, commit_sha=sha)
    known = {
        (repo, sha): pk
        for pk, repo, sha in Revision.objects.filter(by_commit).values_list(
            "id", "package__repo_id", "commit_sha"
        )
    }
    return {key: known.get(key[:2]) or _by_manifest(key) for key in keys}


def _by_manifest(key: PackageKey) -> int | None:
    repo, _, manifest = key
    if not manifest:
        return None
    rows = Revision.objects.filter(package__repo_id=repo, manifest_sha256=manifest)
    return rows.order_by("-committed_at", "-id").values_list("id", flat=True).first()


def link_reports_to_revision(revision: Revision) -> int:
    """Attach the reports that arrived before this revision was ingested; returns how many."""
    repo_id = revision.package.repo_id
    match = Q(repo_id=repo_id, commit_sha=revision.commit_sha)
    if revision.manifest_sha256:
        match |= Q(repo_id=repo_id, manifest_sha256=revision.manifest_sha256)
    return link_reports(
        match & Q(revision__isnull=True), {"revision": revision}, serving=judgements.serving_changing
    )
