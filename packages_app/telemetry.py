"""Services for what nodes send besides reports: OTLP decode spans stored as reports, agent run registrations.

Decoding is nodes/otlp.py (pure) and validation nodes/report_schema.py; this module writes rows, and
every write is idempotent: a span is one Report per (node, report_id), the id derived from its trace
and span ids; a run is one NodeRun per (node, run_id). Spans name only their run id; the agent's
registration of that run names the package, so each side links the other whichever comes first.
A run id belongs to the first node that registers it or exports a span for it (RunClaim): another
node's registration or spans for it are refused (RunConflict), so the node that exports a run's decode
spans and the agent that registers it use the same node token.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import Q
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from pydantic import ValidationError

from packages_app import judgements, metrics, reports
from packages_app.models import Node, NodeRun, PackageFile, Report, Revision, RunClaim
from packages_app.nodes import otlp
from packages_app.nodes.report_schema import Timings, canonical_json
from packages_app.nodes.run_schema import RunIn
from packages_app.report_time import Placement, placement
from packages_app.reports import TIMING_COLUMNS
from packages_app.rollups.adding import add_registered_reports, link_reports

# Fixed forever: a span's report_id must be the same on every export of it.
SPAN_NAMESPACE = uuid.UUID("6d1f0b3e-8f57-4f0e-9d0c-0e5b1d3c7a21")


class RunConflict(Exception):
    """Run ids that belong to another node: what was sent for them is refused (409 / ALREADY_EXISTS)."""

    def __init__(self, run_ids: Sequence[str]) -> None:
        shown = ", ".join(repr(run_id[:80]) for run_id in run_ids[:5])
        more = f" and {len(run_ids) - 5} more" if len(run_ids) > 5 else ""
        super().__init__(f"The run id {shown}{more} belongs to another node; nothing was stored.")
        self.run_ids = list(run_ids)


def claim_runs(node: Node, run_ids: set[str]) -> list[str]:
    """Claim the run ids no node holds yet for ``node``; return those another node holds, sorted."""
    if not run_ids:
        return []
    owners = dict(RunClaim.objects.filter(run_id__in=run_ids).values_list("run_id", "node_id"))
    new = [RunClaim(run_id=run_id, node=node) for run_id in run_ids if run_id not in owners]
    if new:
        RunClaim.objects.bulk_create(new, ignore_conflicts=True)  # a racing node may win one
        owners = dict(RunClaim.objects.filter(run_id__in=run_ids).values_list("run_id", "node_id"))
    return sorted(run_id for run_id, owner in owners.items() if owner != node.pk)


@dataclass(frozen=True)
class ExportOutcome:
    created: int
    duplicates: int
    response: ExportTraceServiceResponse


def store_spans(node: Node, request: ExportTraceServiceRequest, received_at: datetime) -> ExportOutcome:
    """Store the decode spans of one OTLP export; the answer counts what was rejected and why.

    Raises RunConflict, storing nothing, when a span names a run id that belongs to another node.
    """
    batch = otlp.decode_spans(request)
    with transaction.atomic():
        foreign = claim_runs(node, {span.run_id[:200] for span in batch.spans})
        if foreign:
            raise RunConflict(foreign)
        rows, bad_counters = _span_rows(node, batch.spans, received_at)
        created = _insert(node, rows)
    reason = (
        f"{bad_counters} {otlp.DECODE_SPAN} span(s) with counters of the wrong type" if bad_counters else ""
    )
    response = otlp.response_for(
        batch, rejected_extra=bad_counters, extra_reason=reason if bad_counters else ""
    )
    metrics.count_reports("otlp", "created", created)
    metrics.count_reports("otlp", "duplicate", len(rows) - created)
    metrics.count_reports("otlp", "invalid", response.partial_success.rejected_spans)
    return ExportOutcome(created=created, duplicates=len(rows) - created, response=response)


def _insert(node: Node, rows: list[Report]) -> int:
    """Store the spans not stored yet (by an earlier export of them); returns how many."""
    if not rows:
        return 0
    return sum(key.claimed for key in reports.insert_claimed(node, rows).values())


def _span_rows(
    node: Node, spans: Sequence[otlp.DecodeSpan], received_at: datetime
) -> tuple[list[Report], int]:
    runs = _runs_by_id(node, {span.run_id[:200] for span in spans})
    rows: dict[uuid.UUID, Report] = {}
    bad = 0
    for span in spans:
        try:
            timings = Timings.model_validate(span.timings())
        except ValidationError:
            bad += 1
            continue
        row = _span_row(node, span, timings, runs.get(span.run_id[:200]), received_at)
        rows.setdefault(row.report_id, row)  # one export may repeat a span
    return list(rows.values()), bad


def _runs_by_id(node: Node, run_ids: set[str]) -> dict[str, NodeRun]:
    # The node's own registrations only: the run ids were claimed for it just before.
    runs = NodeRun.objects.filter(node=node, run_id__in=run_ids).exclude(repo_id="")
    return {run.run_id: run for run in runs}


def _span_row(
    node: Node, span: otlp.DecodeSpan, timings: Timings, run: NodeRun | None, received_at: datetime
) -> Report:
    observed_at = span.ended_at or received_at
    skew = (observed_at - received_at).total_seconds()
    body = {
        "otlp": {
            "trace_id": span.trace_id,
            "span_id": span.span_id,
            "name": otlp.DECODE_SPAN,
            "attributes": span.attributes,
        },
        "timings": timings.model_dump(exclude_unset=True),
    }
    return Report(
        node=node,
        report_id=uuid.uuid5(SPAN_NAMESPACE, span.key),
        body_sha256=hashlib.sha256(canonical_json(body)).hexdigest(),
        received_at=received_at,
        observed_at=observed_at,
        clock_skew_seconds=skew,
        clock_skew_flagged=placement(observed_at, received_at) is Placement.REFUSED,
        **_run_fields(run),
        requested_strategy=span.requested_strategy,
        effective_strategy=span.effective_strategy,
        **{key: timings.plausible(key) for key in TIMING_COLUMNS},
        mtp_used=span_used_mtp(span, timings),
        body=body,
        timings_flagged=timings.implausible_keys(),
        source=Report.Source.OTLP,
        run_id=span.run_id[:200],
        stage_id=span.stage_id[:200],
    )


def _run_fields(run: NodeRun | None) -> dict[str, object]:
    if run is None:
        return {"repo_id": "", "commit_sha": "", "manifest_sha256": "", "revision_id": None}
    return {
        "repo_id": run.repo_id,
        "commit_sha": run.commit_sha,
        "manifest_sha256": run.manifest_sha256,
        "revision_id": run.revision_id,
        "topology_id": run.topology_id,
        "stage_splits": run.stage_splits,
    }


def span_used_mtp(span: otlp.DecodeSpan, timings: Timings) -> bool:
    """Native MTP really ran, as a span says it: the effective plan names it and its counters moved
    (`reports.mtp_ran`, the same counters as a JSON report's)."""
    return reports.mtp_ran(span.effective_strategy.startswith("native-mtp"), timings)


# --- Runs the agent registers -----------------------------------------------------------------


@dataclass(frozen=True)
class RunOutcome:
    run_id: str
    revision_id: int | None
    reports_linked: int
    unknown_revision: tuple[str, str] | None = None  # (repo id, commit sha) for the caller to ingest
    # Whether the node may be told the run linked: only to a revision of a package known to be public.
    # A private revision answers as an unknown one does, so a node token cannot probe for private
    # (repo, sha) pairs (issue 48); the link itself is stored either way.
    linked_publicly: bool = False


def run_register(node: Node, run: RunIn) -> RunOutcome:
    """Upsert what the node's agent saw for one run, and link the run's spans to its package.

    Raises RunConflict, storing nothing, when the run id belongs to another node.
    """
    with transaction.atomic():
        if claim_runs(node, {run.run_id}):
            raise RunConflict([run.run_id])
        return _run_upsert(node, run)


def _run_upsert(node: Node, run: RunIn) -> RunOutcome:
    package = run.package
    repo, sha, manifest = (
        (package.repo, package.revision, package.manifest_sha256 or "") if package else ("", "", "")
    )
    revision_id = _revision_id(repo, sha, manifest) if repo else None
    fields = {
        "topology_id": run.topology_id,
        "model_id": run.model_id,
        "package_ref": run.package_ref,
        "repo_id": repo,
        "commit_sha": sha,
        "manifest_sha256": manifest,
        "revision_id": revision_id,
        "version": run.version,
        "stage_splits": run.stage_splits(),
        "stages": [stage.model_dump() for stage in run.stages],
        "devices": run.devices,
        "certification": run.certification(),
        **_observed_fields(run),
        **_identity_fields(repo, revision_id, run),
    }
    loaded = fields.pop("loaded")
    if loaded:  # what it says it loaded, each claim with whether a tracked revision holds it, for its page
        fields["observations"] = {**fields["observations"], "loaded": loaded}  # type: ignore[dict-item]
    for ran in {revision_id, fields["served_revision_id"]} - {None}:  # its reports may count publicly now
        add_registered_reports(node.pk, int(ran))  # type: ignore[call-overload]
    NodeRun.objects.update_or_create(node=node, run_id=run.run_id, defaults=fields)
    linked = _link_span_reports(node, run.run_id, fields) if repo else 0
    judgements.judge([node.pk])  # what it registered is judged now, in the registration's transaction
    unknown = (repo, sha) if repo and revision_id is None else None
    told = may_tell_linked(revision_id)
    return RunOutcome(run.run_id, revision_id, linked, unknown_revision=unknown, linked_publicly=told)


def may_tell_linked(revision_id: int | None) -> bool:
    """Whether the answer to a run registration may say it linked: its revision's package is public."""
    return (
        revision_id is not None and Revision.objects.filter(pk=revision_id, package__private=False).exists()
    )


def _revision_id(repo: str, sha: str, manifest: str) -> int | None:
    match = Q(package__repo_id=repo, commit_sha=sha)
    if manifest:
        match |= Q(package__repo_id=repo, manifest_sha256=manifest)
    rows = Revision.objects.filter(match).values_list("id", "commit_sha")
    found = dict((commit, pk) for pk, commit in rows)
    return found.get(sha) or next(iter(found.values()), None)


def _link_span_reports(node: Node, run_id: str, fields: Mapping[str, object]) -> int:
    """The node's spans that arrived before their run was registered get its package now."""
    unlinked = Q(node=node, run_id=run_id, source=Report.Source.OTLP, repo_id="")
    keys = ("repo_id", "commit_sha", "manifest_sha256", "revision_id", "topology_id", "stage_splits")
    return link_reports(unlinked, {key: fields[key] for key in keys}, serving=judgements.serving_changing)


# --- What the node says about itself (docs/node-report.md section 5) ---------------------------


def _observed_fields(run: RunIn) -> dict[str, object]:
    """The run's observations as stored: the whole bounded group, and the few facts advice reads."""
    observed = run.observations
    if observed is None:
        return {"observations": {}, "serving_strategy": "", "strategy_speculative": "", "draft_name": ""}
    strategy = observed.serving_strategy
    return {
        "observations": observed.model_dump(mode="json", exclude_none=True),
        "serving_strategy": (strategy.strategy or "")[:64] if strategy else "",
        "strategy_speculative": strategy.speculative()[:64] if strategy else "",
        "draft_name": observed.draft_name or "",
    }


@dataclass(frozen=True)
class Claims:
    """What the node's own identity of the bytes it loaded says, beside its package ref."""

    package_ids: tuple[str, ...] = ()  # the stages' admission.package_id
    revision: str = ""  # the newest exchange's model_revision
    weights_digest: str = ""  # and its weights_digest

    @property
    def any(self) -> bool:
        return bool(self.package_ids or self.revision or self.weights_digest)


def claims_of(run: RunIn) -> Claims:
    ids = sorted({s.admission.package_id for s in run.stages if s.admission and s.admission.package_id})
    provenance = run.observations.provenance if run.observations else None
    revision = provenance.model_revision.strip().lower() if provenance else ""
    digest = provenance.weights_digest.strip().lower() if provenance else ""
    return Claims(tuple(ids), revision, digest.removeprefix("sha256:"))


def _identity_fields(repo: str, revision_id: int | None, run: RunIn) -> dict[str, object]:
    """Whether what the node says it loaded is the revision its package ref names: ``confirmed``; the
    same package's other tracked revision ``other`` (``served_revision``); ``unaudited`` when a claim
    matches no tracked revision of the package; "" when the node says nothing. Every claim the node
    makes must name the same revision. Read from the package's own revisions only (one query, two when a
    digest is claimed), never another package's: a node's registration costs what its package holds."""
    claims = claims_of(run)
    if not claims.any:
        return {"identity": NodeRun.Identity.NOT_REPORTED, "served_revision_id": None, "loaded": []}
    named = _revisions_claimed(repo, claims) if repo else {}
    loaded = [{"claim": claim[:300], "tracked": pk is not None} for claim, pk in named.items()]
    found = set(named.values())
    if not named or None in found or len(found) != 1:
        return {"identity": NodeRun.Identity.UNAUDITED, "served_revision_id": None, "loaded": loaded}
    served = found.pop()
    identity = NodeRun.Identity.CONFIRMED if served == revision_id else NodeRun.Identity.OTHER
    return {"identity": identity, "served_revision_id": served, "loaded": loaded}


def _revisions_claimed(repo: str, claims: Claims) -> dict[str, int | None]:
    """Each claim -> the revision of ``repo`` it names (None: none does). A package_id is the v2
    manifest's; a model_revision a commit sha (a branch or tag name is no claim of bytes); a
    weights_digest the manifest's sha256, its package_id or one of its files' LFS sha256."""
    rows = list(
        Revision.objects.filter(package__repo_id=repo).values_list(
            "pk", "commit_sha", "manifest_sha256", "manifest_json__package_id"
        )
    )
    named: dict[str, int | None] = {}
    for package_id in claims.package_ids:
        named[f"admission.package_id {package_id}"] = next((r[0] for r in rows if r[3] == package_id), None)
    if SHA_PATTERN.fullmatch(claims.revision):
        named[f"model_revision {claims.revision}"] = next(
            (r[0] for r in rows if r[1] == claims.revision), None
        )
    if claims.weights_digest:
        named[f"weights_digest {claims.weights_digest}"] = _digest_revision(rows, claims.weights_digest)
    return named


SHA_PATTERN = re.compile(r"[0-9a-f]{40}")


def _digest_revision(rows: list[tuple[Any, ...]], digest: str) -> int | None:
    for pk, _, manifest, package_id in rows:
        if digest in (manifest, str(package_id or "").removeprefix("sha256:")):
            return int(pk)
    files = PackageFile.objects.filter(revision_id__in=[r[0] for r in rows], lfs_sha256=digest)
    return files.values_list("revision_id", flat=True).first()
