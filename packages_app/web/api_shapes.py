"""The response shapes of the read-only JSON API and of the manifest check, and the catalog filters as
query parameters: for the OpenAPI document (openapi.py) and the tests.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django import forms
from pydantic import BaseModel, Field

from packages_app.web.forms import CatalogFilterForm

DEPRECATED = (
    "Deprecated: kept for one version; read the assessment's fields (headline, mtp, servable) instead."
)


class ActionOut(BaseModel):
    kind: str = Field(description="fix-manifest | republish-v2 | split-override | apply-patch | ...")
    label: str
    text: str = Field(description="One sentence with the specifics.")
    command: str = Field(description="A command to copy, when the action is one ('' otherwise).")


class HeadlineOut(BaseModel):
    """The one answer every surface leads with (packages_app.audit.assessment.Headline)."""

    status: str = Field(
        description="A status of the vocabulary (GET /glossary/#statuses), worst first by rank."
    )
    label: str
    tone: str = Field(description="bad | warn | info | good | none")
    rank: int = Field(description="0 is the worst.")
    sentence: str
    release: str = Field(description="The mesh-llm release it is judged on: the newest the matrix knows.")
    action: ActionOut


class MtpOut(BaseModel):
    """Declared vs detected MTP (the verdict); ``detected`` is null when the weights were not read."""

    verdict: str | None
    declared: bool | None
    detected: bool | None


class NotAssessedOut(BaseModel):
    """Why a revision has no headline yet, as the package page and the catalog say it."""

    status: str = Field(description="Always not-assessed.")
    label: str = Field(
        description='e.g. "not assessed yet", "not assessed: gated", "not assessed: ingest failed".'
    )
    sentence: str


class RevisionSummaryOut(BaseModel):
    commit_sha: str
    headline: HeadlineOut | None
    not_assessed: NotAssessedOut | None = Field(
        description="Why there is no headline; null when there is one."
    )
    mtp: MtpOut
    committed_at: datetime | None
    status: str
    files_total: int
    files_done: int
    error: str | None
    schema_version: int | None
    architecture: str | None
    block_count: int | None
    nextn_predict_layers: int | None
    total_bytes: int | None
    verdict: str | None = Field(deprecated=True, description=DEPRECATED + " (mtp.verdict)")
    mtp_detected: bool | None = Field(deprecated=True, description=DEPRECATED + " (mtp.detected)")
    mtp_declared: bool | None = Field(deprecated=True, description=DEPRECATED + " (mtp.declared)")
    refused_by: list[str] = Field(description="mesh-llm releases (releases.toml) that refuse this revision.")


class CatalogThroughputOut(BaseModel):
    tps_mtp: float | None
    tps_no_mtp: float | None
    reports: int
    alert: bool


class ServedRevisionOut(BaseModel):
    """A revision other than the latest that nodes reported running inside the window (``days``)."""

    commit_sha: str
    status: str = Field(description="Its headline status.")
    verdict: str | None
    nodes: int
    reports: int
    alert: bool
    reason: str | None = Field(description="Its headline sentence (or why the alert).")
    action: str | None = Field(description="Its headline action.")


class PackageRowOut(BaseModel):
    repo_id: str
    url: str
    headline: HeadlineOut | None = Field(description="The latest revision's headline; null until assessed.")
    latest_revision: RevisionSummaryOut | None
    throughput: CatalogThroughputOut | None
    alert: bool
    reason: str | None
    served_revisions: list[ServedRevisionOut]


class PackageListOut(BaseModel):
    """``GET /api/v1/packages``: one page of the catalog; ``facets.headline`` counts packages per status,
    ``facets.verdict`` per MTP verdict, each as its filter would list them."""

    count: int
    page: int
    pages: int
    per_page: int
    next: str | None
    previous: str | None
    facets: dict[str, dict[str, int]]
    results: list[PackageRowOut]


class HistoryEntryOut(BaseModel):
    commit_sha: str
    committed_at: datetime | None
    title: str
    status: str = Field(description="The ingest status.")
    headline_status: str | None = Field(description="The headline status; null until assessed.")
    verdict: str | None


class AlertOut(BaseModel):
    message: str
    reports: int
    nodes: int


class StrategyPlanOut(BaseModel):
    node: str
    stage_splits: str
    requested_strategy: str
    effective_strategy: str
    differs: bool = Field(
        description="A request of a known kind (mtp, disabled, ngram-*) ran as something else."
    )
    reports: int
    from_spans: int = Field(description="How many of the reports came from OTLP stage.openai_decode spans.")
    tps: float | None
    last_seen: datetime | None
    unused: int = Field(default=0, description="Its reports showing MTP weights unused.")
    advice: AdviceOut | None = Field(default=None, description="The node's advice, judged on its release.")


class AdviceOut(BaseModel):
    """What a node should do about a revision (packages_app.audit.advice.Advice), the same sentence as its
    pages give."""

    cause: str = Field(description="A cause of the vocabulary (GET /glossary/#causes).")
    label: str
    needs_action: bool
    text: str
    observed: str | None = Field(
        description="The node's own fact it rests on: serving-strategy, sidecar-draft, "
        "manifest-declares-none, operator-setting, served-bytes; 'predicted' when the node says nothing "
        "and the prediction stays; "
        "'break-even-gate (possible)' for a cause mesh-llm reports no signal for."
    )
    release: str | None
    predicted: str | None
    prediction: str | None = Field(description="A contradiction's predicted side.")
    observation: str | None = Field(description="A contradiction's observed side.")


class NodeServingOut(BaseModel):
    repo_id: str
    commit_sha: str
    status: str
    is_latest: bool
    identity: str | None = Field(description="confirmed | other | unaudited; null: the node names no bytes.")
    identity_label: str
    stage_splits: str
    topology_id: str
    reports: int
    tps: float | None
    requested_strategy: str
    effective_strategy: str
    version: str | None
    advice: AdviceOut


class NodeDetailOut(BaseModel):
    """One node (GET /api/v1/nodes/<name>)."""

    name: str
    version: str | None
    devices: list[str]
    certification: str | None
    needs_action: bool
    days: int
    observations: dict[str, Any] = Field(
        description="What the node says about itself (docs/node-report.md section 5), as registered."
    )
    serving: list[NodeServingOut]


class ThroughputSummaryOut(BaseModel):
    mtp_on: dict[str, Any]
    mtp_off: dict[str, Any]
    by_strategy: list[dict[str, Any]]
    acceptance_rate: float | None
    mean_accepted_length: float | None
    stage_splits: list[str]
    moved: int = Field(0, description="Reports placed when observed, over 5 minutes before they arrived.")
    refused: int = Field(0, description="Reports whose observed time was not believed: placed at arrival.")
    plans: list[StrategyPlanOut] = Field(
        default_factory=list, description="Requested vs effective strategy per node and topology."
    )


class SplitOut(BaseModel):
    """Split serving on one release: the package verdict and its split-certification gate."""

    admitted: bool | None = Field(description="null: not pinned down.")
    why: str
    gate: bool | None = Field(description="The gate alone: the architecture on the release's roster.")
    architecture: str = Field("", description="The carrier's general.architecture it judged; '' if unread.")
    roster_inferred: bool = Field(
        False, description="The release's roster is inferred from its Skippy ABI, not read for its tag."
    )
    gate_unjudged: bool = Field(False, description="The roster is known but no metadata carrier was read.")


class ServableOut(BaseModel):
    release: str
    admitted: bool | None = Field(description="null: not pinned down in mesh-llm's code.")
    why: str
    split: SplitOut | None = None


class SettingOutcomeOut(BaseModel):
    outcome: str = Field(description="native-mtp | no-mtp | load-fails | refused")
    why: str


class ReleaseOutcomesOut(BaseModel):
    release: str
    pinned: bool = Field(description="False where the release's admission is not pinned down.")
    settings: dict[str, SettingOutcomeOut] = Field(description="speculative.strategy -> outcome.")


class AssessmentOut(BaseModel):
    """The one answer for a revision, a folder or a manifest (packages_app.audit.assessment.Assessment)."""

    scope: str = Field(description="revision | folder | manifest")
    headline: HeadlineOut
    mtp: dict[str, Any] = Field(description="verdict, declared, detected, blocks, declared_layers.")
    servable: list[ServableOut]
    outcomes: list[ReleaseOutcomesOut]
    cannot_see: list[str] = Field(description="What this check could not see (e.g. the weights).")


class ModelCardOut(BaseModel):
    base_model: str | None = Field(description="The source model the card names (base_model).")
    experimental: bool = Field(description="The card's experimental tag (mesh-llm's writer warns with it).")
    tags: list[str]


class CatalogRowOut(BaseModel):
    entry: str
    variant: str
    source_repo: str
    source_revision: str = Field(description="The source model's revision, not the package's.")
    layer_count: int | None


class CertifyRevisionOut(BaseModel):
    repo_id: str
    commit_sha: str


class CertifyReportOut(BaseModel):
    """One `mesh-llm models certify` report as meshdash stored it."""

    status: str = Field(description="passed | failed | incomplete | not_required")
    summary: str = Field(description="passed, failed at <gate>, incomplete (<gates>), not required")
    failed_gate: str | None
    manifest_sha256: str
    model_id: str
    resolved_package_ref: str
    layer_count: int
    certified_by: str = Field(description="The node (its token) or user that handed it in.")
    received_at: str
    via: str = Field(description="import | api")
    revision: CertifyRevisionOut | None = Field(description="The revision with these bytes; null: untracked.")


class PackageDetailOut(BaseModel):
    """``GET /api/v1/packages/{owner}/{name}``: one revision's assessment, and the audit behind it."""

    repo_id: str
    sync_error: str | None
    revision: RevisionSummaryOut | None
    assessment: AssessmentOut | None
    revisions: list[HistoryEntryOut]
    verdict: str | None = Field(deprecated=True, description=DEPRECATED + " (assessment.mtp.verdict)")
    detected: dict[str, Any] | None
    declared: dict[str, Any] | None
    problems: list[dict[str, Any]]
    provenance: dict[str, Any] | None
    runtime: dict[str, Any] | None = Field(deprecated=True, description=DEPRECATED + " (assessment.outcomes)")
    compatibility: list[dict[str, Any]] = Field(
        deprecated=True, description=DEPRECATED + " (assessment.servable)"
    )
    suggested_generation: dict[str, Any] | None
    request_defaults: dict[str, Any] | None = Field(
        description="What generation.request_defaults sets: each profile's values, which profile each "
        "reasoning mode gets (default_profile: a request that says nothing), publisher dtype defaults."
    )
    throughput: ThroughputSummaryOut | None
    alerts: list[AlertOut]
    model_card: ModelCardOut | None = None
    catalog: list[CatalogRowOut] = Field(
        default_factory=list, description="The curated catalog's rows that list this package."
    )
    certify_reports: list[CertifyReportOut] = Field(
        default_factory=list,
        description="`mesh-llm models certify` reports for this revision's manifest bytes, newest first.",
    )


def catalog_query_parameters() -> list[dict[str, Any]]:
    """The catalog filters as OpenAPI query parameters, read from the form so the two never drift."""
    return [_query_parameter(name, field) for name, field in CatalogFilterForm.base_fields.items()]


def _query_parameter(name: str, field: forms.Field) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "integer" if isinstance(field, forms.IntegerField) else "string"}
    if isinstance(field, forms.ChoiceField):
        choices: Any = field.choices  # always a list of pairs on this form
        schema["enum"] = [str(value) for value, _ in choices if value != ""]
    if isinstance(field, forms.BooleanField):
        schema = {"type": "boolean"}
    description = str(field.label or name.replace("_", " ").capitalize())
    return {"name": name, "in": "query", "required": False, "schema": schema, "description": description}


# --- POST /api/v1/check-manifest (documented here with the other answer models) -----------------


class CheckProblemOut(BaseModel):
    code: str
    severity: str
    message: str
    path: str | None


class PackageIdOut(BaseModel):
    declared: str | None
    computed: str | None
    matches: bool | None


class ResolutionOut(BaseModel):
    outcome: str  # native-mtp | no-mtp | load-fails | refused
    why: str


class AdmissionOut(BaseModel):
    release: str
    admitted: bool | None  # null: mesh-llm's behaviour for this release is not pinned down
    why: str


class ManifestCheckOut(BaseModel):
    """One model-package.json judged as mesh-llm judges it (packages_app.audit.check)."""

    schema_: int | None = Field(alias="schema")
    valid: bool
    passes: bool = Field(
        description="What `manage.py check_manifest` exits 0 on: valid, admitted by the newest release, "
        "not refused split by a known roster, no error finding. The same for the same bytes on every surface."
    )
    assessment: AssessmentOut
    problems: list[CheckProblemOut]
    package_id: PackageIdOut
    runtime: dict[str, ResolutionOut] = Field(
        deprecated=True, description=DEPRECATED + " (assessment.outcomes)"
    )
    compatibility: list[AdmissionOut] = Field(
        deprecated=True, description=DEPRECATED + " (assessment.servable)"
    )
