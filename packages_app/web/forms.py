"""Forms that validate what a browser or API client sends: catalog filters and the track-a-package form."""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from django import forms
from django.conf import settings
from django.core.exceptions import ValidationError
from django.utils.safestring import SafeString

from packages_app import repo_ids
from packages_app.audit.releases import known_releases
from packages_app.catalog.filters import ANY_INCONSISTENT, ANY_NEEDS_ACTION, NOT_AUDITED, CatalogFilters
from packages_app.fleet.window import DEFAULT_WINDOW_DAYS
from packages_app.layout import MAX_MANIFEST_BYTES
from packages_app.models import Revision
from packages_app.throughput import RANGES
from packages_app.verdicts import STATUSES_BY_RANK, VERDICTS

SORTS = {
    "repo": "repository A-Z",
    "-repo": "repository Z-A",
    "-updated": "newest revision first",
    "updated": "oldest revision first",
    "-size": "largest first",
    "size": "smallest first",
    "-layers": "most layers first",
    "layers": "fewest layers first",
    "status": "worst status first",
    "-status": "best status first",
    "verdict": "worst MTP verdict first",
    "-verdict": "best MTP verdict first",
}
WINDOW_DAYS = {1: "1 day", 7: "7 days", 30: "30 days", 90: "90 days"}
PER_PAGE_DEFAULT = 50
PER_PAGE_MAX = 200

_ARCHITECTURE = re.compile(r"[A-Za-z0-9._-]{1,64}")
_YES_NO = [("", "any"), ("yes", "yes"), ("no", "no")]


def validate_repo_id(value: str) -> None:
    """Accept ``owner/name`` as the Hub spells repo ids; reject URLs, paths and malformed names."""
    try:
        repo_ids.validate_repo_id(value)
    except repo_ids.InvalidRepoId as exc:
        raise ValidationError(f"{exc}.") from None


def validate_architecture(value: str) -> None:
    if not _ARCHITECTURE.fullmatch(value):
        raise ValidationError("An architecture name is letters, digits, '.', '_' and '-' (e.g. qwen35moe).")


def repo_reference(value: str) -> repo_ids.RepoReference:
    """A repo id or a Hub URL of it (on HF_ENDPOINT or the public Hub), as a ValidationError when neither."""
    try:
        return repo_ids.parse_repo_reference(value, [settings.HF_ENDPOINT])
    except repo_ids.InvalidRepoId as exc:
        raise ValidationError(f"{exc}.") from None


class TrackPackageForm(forms.Form):
    repo_id = forms.CharField(
        label="Repo id or Hub URL",
        max_length=400,
        strip=True,
        widget=forms.TextInput(attrs={"placeholder": "meshllm/Qwen3.5-35B-A3B-UD-Q4_K_XL-layers"}),
    )

    def clean_repo_id(self) -> str:
        """owner/name, from a Hub URL when one was pasted (a revision in it changes nothing: every
        revision of a tracked package is ingested)."""
        return repo_reference(self.cleaned_data["repo_id"]).repo_id


class CatalogFilterForm(forms.Form):
    """The catalog's GET parameters; shared by the HTML catalog and ``GET /api/v1/packages``."""

    q = forms.CharField(label="Search", max_length=96, required=False, strip=True)
    headline = forms.ChoiceField(
        label="Status",
        required=False,
        choices=[("", "any status"), (ANY_NEEDS_ACTION, "needs action")]
        + [(s.value, s.label) for s in STATUSES_BY_RANK],
    )
    verdict = forms.ChoiceField(
        label="MTP verdict",
        required=False,
        choices=[("", "any verdict"), (ANY_INCONSISTENT, "any inconsistent")]
        + [(v, v) for v in VERDICTS]
        + [(NOT_AUDITED, "not audited yet")],
    )
    architecture = forms.CharField(max_length=64, required=False, validators=[validate_architecture])
    schema = forms.TypedChoiceField(
        required=False, choices=[("", "any schema"), ("1", "v1"), ("2", "v2")], coerce=int, empty_value=None
    )
    mtp_detected = forms.ChoiceField(label="MTP detected", required=False, choices=_YES_NO)
    mtp_declared = forms.ChoiceField(label="MTP declared", required=False, choices=_YES_NO)
    status = forms.ChoiceField(
        label="Ingest", required=False, choices=[("", "any status"), *Revision.Status.choices]
    )
    alert = forms.BooleanField(label="Only throughput alerts", required=False)
    refused_by = forms.ChoiceField(
        label="Refused by",
        required=False,
        choices=[("", "any release"), *((r.release, r.release) for r in known_releases())],
    )
    sort = forms.ChoiceField(required=False, choices=list(SORTS.items()))
    days = forms.TypedChoiceField(
        label="Served in the last",
        required=False,
        # The default window is the empty choice, so a page without ?days= shows it selected.
        choices=[("" if d == DEFAULT_WINDOW_DAYS else str(d), label) for d, label in WINDOW_DAYS.items()],
        coerce=int,
        empty_value=None,
    )
    page = forms.IntegerField(required=False, min_value=1, max_value=1_000_000)
    per_page = forms.IntegerField(required=False, min_value=1, max_value=PER_PAGE_MAX)

    def filters(self) -> CatalogFilters:
        """The validated filters; call only after ``is_valid()`` returned True."""
        data: dict[str, Any] = self.cleaned_data
        return CatalogFilters(
            q=data["q"],
            verdict=data["verdict"],
            headline=data["headline"],
            architecture=data["architecture"],
            schema=data["schema"],
            mtp_detected=_tri_state(data["mtp_detected"]),
            mtp_declared=_tri_state(data["mtp_declared"]),
            status=data["status"],
            alert=data["alert"],
            sort=data["sort"] or "repo",
            window_days=data["days"] or DEFAULT_WINDOW_DAYS,
            refused_by=data["refused_by"],
        )

    def unknown_parameters(self) -> list[str]:
        """Query parameters this form does not know (the JSON API refuses them)."""
        return sorted(set(self.data) - set(self.fields))

    def with_defaults_for_errors(self) -> CatalogFilterForm:
        """The same filters with every invalid (or stale) one dropped, so it falls back to its default."""
        data = {key: self.data.get(key) for key in self.data if key not in self.errors}
        return CatalogFilterForm(data)

    def page_number(self) -> int:
        return int(self.cleaned_data["page"] or 1)

    def page_size(self) -> int:
        return int(self.cleaned_data["per_page"] or PER_PAGE_DEFAULT)

    def error_sentences(self) -> list[str]:
        """One plain sentence per invalid parameter, naming the parameter."""
        return [f"{field}: {' '.join(str(e) for e in errors)}" for field, errors in self.errors.items()]

    def widgets(self) -> dict[str, SafeString]:
        """The catalog's filter widgets as HTML, by field name. A widget's markup depends only on its field
        (the choices are fixed when this module loads), its value and whether it is invalid, and Django's
        form renderer took about a fifth of the catalog's rendering (a template per option): each is
        rendered once per value and kept."""
        widgets = {}
        for name in WIDGETS:
            bound = self[name]
            key = (name, bound.value(), bool(bound.errors))
            html = RENDERED_WIDGETS.get(key)
            if html is None:
                html = SafeString(str(bound))
                if len(RENDERED_WIDGETS) < MAX_RENDERED_WIDGETS:
                    RENDERED_WIDGETS[key] = html
            widgets[name] = html
        return widgets


# The fields the catalog renders with Django's widgets (the search and the architecture are written out).
WIDGETS = (
    "headline",
    "verdict",
    "schema",
    "mtp_detected",
    "mtp_declared",
    "status",
    "refused_by",
    "sort",
    "days",
    "alert",
)
# A valid form's values are its choices (a checkbox's is a bool), so the kept widgets stay few; the bound
# keeps a value nobody foresaw from growing the dict.
MAX_RENDERED_WIDGETS = 1000
RENDERED_WIDGETS: dict[tuple[str, Any, bool], SafeString] = {}


def _tri_state(value: str) -> bool | None:
    return {"yes": True, "no": False}.get(value)


class CheckManifestForm(forms.Form):
    """The "Check a manifest" page: a pasted model-package.json or an uploaded one, exactly one of them."""

    manifest = forms.CharField(required=False, strip=False, widget=forms.Textarea(attrs={"rows": 14}))
    file = forms.FileField(required=False, label="or upload model-package.json")

    def __init__(self, *args: Any, max_bytes: int = MAX_MANIFEST_BYTES, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.max_bytes = max_bytes  # lower for anonymous visitors (check_budget.size_limit)

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        pasted, uploaded = data.get("manifest"), data.get("file")
        if bool(pasted) == bool(uploaded):
            raise ValidationError("Paste a manifest or upload one (exactly one of the two).")
        if uploaded is not None and uploaded.size > self.max_bytes:
            signed_in = "" if self.max_bytes >= MAX_MANIFEST_BYTES else ", 16 MiB signed in"
            raise ValidationError(
                f"The file is {uploaded.size} bytes; the limit is {self.max_bytes} "
                f"({self.max_bytes / 2**20:.1f} MiB{signed_in})."
            )
        return data

    def manifest_bytes(self) -> bytes:
        uploaded = self.cleaned_data.get("file")
        if uploaded is not None:
            return bytes(uploaded.read(self.max_bytes + 1))
        return str(self.cleaned_data["manifest"]).encode("utf-8", "surrogatepass")

    def error_sentences(self) -> list[str]:
        return [str(e) for errors in self.errors.values() for e in errors]


# What the package page's range picker offers for its timeline, by its ``?range=`` value.
TIME_RANGE_LABELS = {
    "": "every report",
    "24h": "the last 24 h",
    "7d": "the last 7 days",
    "30d": "the last 30 days",
    "custom": "these dates (UTC)",
}
FIRST_DAY = date(2000, 1, 1)  # as the report schema: a report observed outside 2000..2100 is refused
LAST_DAY = date(2099, 12, 31)


def _day_field(label: str) -> forms.DateField:
    return forms.DateField(
        label=label,
        required=False,
        input_formats=["%Y-%m-%d"],
        error_messages={"invalid": f"{label} should be a date like 2026-11-30."},
        widget=forms.DateInput(
            attrs={"type": "date", "min": FIRST_DAY.isoformat(), "max": LAST_DAY.isoformat()}
        ),
    )


class TimeRangeForm(forms.Form):
    """The package page's timeline range: ``?range=24h|7d|30d``, or ``?range=custom&start=&end=`` with
    UTC days (both included; either may be left empty for an open end). Anything else is an error
    message on the page and the timeline of every report, never a 500."""

    range = forms.ChoiceField(
        choices=list(TIME_RANGE_LABELS.items()),
        required=False,
        error_messages={"invalid_choice": "Unknown time range %(value)s: pick 24h, 7d, 30d or custom dates."},
    )
    start = _day_field("From")
    end = _day_field("To")

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        start, end = data.get("start"), data.get("end")
        if data.get("range") != "custom" or self.errors:
            return data
        for day in (start, end):
            if day is not None and not FIRST_DAY <= day <= LAST_DAY:
                raise ValidationError(f"Dates should be between {FIRST_DAY} and {LAST_DAY}, not {day}.")
        if start is not None and end is not None and start > end:
            raise ValidationError(f"From ({start}) is after To ({end}): the range would be empty.")
        return data

    def window(self, now: datetime) -> tuple[str, datetime | None, datetime | None]:
        """(range, since, until) for the timeline; ("", None, None): every report (also when invalid)."""
        if not self.is_valid():
            return "", None, None
        chosen = self.cleaned_data.get("range") or ""
        if chosen in RANGES:
            return chosen, now - RANGES[chosen], None
        if chosen != "custom":
            return "", None, None
        start, end = self.cleaned_data.get("start"), self.cleaned_data.get("end")
        since = datetime.combine(start, time.min, UTC) if start else None
        until = datetime.combine(end + timedelta(days=1), time.min, UTC) if end else None
        return chosen, since, until
