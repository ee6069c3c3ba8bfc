"""Pure: what a package's request defaults set, and which profile a request gets (mesh-llm #1876).

A package-v2 manifest may carry ``generation.request_defaults``: named profiles (max tokens, sampling,
reasoning) each sourced to a publisher commit, and a ``selection`` naming the profile per reasoning mode
(docs/rules.md section 2; lib.rs ``GenerationProfileSelection``:
"Selects a package profile after the request's
reasoning mode has been resolved. `default` is used when the mode remains automatic or unknown."). mesh-llm
applies them below the request's own values and the operator's settings ("advisory package data ...
resolved below explicit request and deployment/operator settings by the serving runtime"). It may also
carry ``publisher_defaults`` (compute and KV-cache dtypes read from the publisher's config files).

The values are read through v2schema's decoder, the same table validation uses, so they are exactly what
mesh-llm's serde types hold. No Django, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from packages_app.audit import readback as rb
from packages_app.manifest import Manifest
from packages_app.manifest.v2schema import PUBLISHER_DEFAULTS, REQUEST_DEFAULTS, DecodeError, decode

# The profile keys shown as "sampling", in mesh-llm's struct order (lib.rs GenerationProfile).
SAMPLING_KEYS = (
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "typical_p",
    "top_nsigma",
    "presence_penalty",
    "frequency_penalty",
    "seed",
    "logit_bias",
    "repeat_penalty",
    "repeat_last_n",
    "dynatemp_range",
    "dynatemp_exponent",
    "dry",
    "xtc",
    "mirostat_mode",
    "mirostat_entropy",
    "mirostat_learning_rate",
    "samplers",
    "sampler_sequence",
)
MODES = ("automatic", "reasoning on", "reasoning off")
PRECEDENCE = (
    "mesh-llm applies these below the request's own values and the operator's settings: a request that "
    "sets a value keeps it."
)
_FALLBACK = (
    "selection.{key} is not declared; which profile a {mode} request then gets is not pinned down "
    "(lib.rs documents only that default serves the automatic or unknown mode)."
)


@dataclass(frozen=True)
class ProfileSource:
    source_repo: str
    revision: str
    file: str
    section: str
    url: str

    def to_json(self) -> dict[str, str]:
        return {
            "source_repo": self.source_repo,
            "revision": self.revision,
            "file": self.file,
            "section": self.section,
            "url": self.url,
        }

    @classmethod
    def from_json(cls, doc: Any) -> ProfileSource:
        d = rb.mapping(doc)
        return cls(*(rb.text(d.get(key)) for key in ("source_repo", "revision", "file", "section", "url")))


@dataclass(frozen=True)
class Profile:
    """One declared profile: what it sets (unset values: None / empty) and the modes that choose it."""

    name: str
    max_tokens: int | None
    sampling: tuple[tuple[str, Any], ...]  # (key, value) of each sampling value it sets, struct order
    stop: tuple[str, ...]
    ignore_eos: bool | None
    reasoning_enabled: str | None  # "auto" | "off" | "on"
    reasoning_format: str | None
    reasoning_budget: int | str | None  # a token count or a level name ("low", "high", ...)
    provenance: ProfileSource
    selected_for: tuple[str, ...]  # the MODES that select it

    @property
    def is_default(self) -> bool:
        return "automatic" in self.selected_for

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "max_tokens": self.max_tokens,
            "sampling": dict(self.sampling),
            "stop": list(self.stop),
            "ignore_eos": self.ignore_eos,
            "reasoning": {
                "enabled": self.reasoning_enabled,
                "format": self.reasoning_format,
                "budget": self.reasoning_budget,
            },
            "provenance": self.provenance.to_json(),
            "selected_for": list(self.selected_for),
            "is_default": self.is_default,
        }

    @classmethod
    def from_json(cls, doc: Any) -> Profile | None:
        d = rb.mapping(doc)
        name = rb.optional_text(d.get("name"))
        if name is None:
            return None
        reasoning = rb.mapping(d.get("reasoning"))
        budget = reasoning.get("budget")
        tokens = rb.integer(budget)
        return cls(
            name=name,
            max_tokens=rb.integer(d.get("max_tokens")),
            sampling=tuple(rb.mapping(d.get("sampling")).items()),
            stop=rb.texts(d.get("stop")),
            ignore_eos=rb.tristate(d.get("ignore_eos")),
            reasoning_enabled=rb.optional_text(reasoning.get("enabled")),
            reasoning_format=rb.optional_text(reasoning.get("format")),
            reasoning_budget=tokens if tokens is not None else rb.optional_text(budget),
            provenance=ProfileSource.from_json(d.get("provenance")),
            selected_for=rb.texts(d.get("selected_for")),
        )


@dataclass(frozen=True)
class Selection:
    """Which profile a request gets in each reasoning mode; None where that is not pinned down."""

    automatic: str
    reasoning_on: str | None
    reasoning_off: str | None

    def to_json(self) -> dict[str, str | None]:
        return {
            "automatic": self.automatic,
            "reasoning_on": self.reasoning_on,
            "reasoning_off": self.reasoning_off,
        }

    @classmethod
    def from_json(cls, doc: Any) -> Selection | None:
        d = rb.mapping(doc)
        automatic = rb.optional_text(d.get("automatic"))
        if automatic is None:
            return None
        return cls(
            automatic, rb.optional_text(d.get("reasoning_on")), rb.optional_text(d.get("reasoning_off"))
        )


@dataclass(frozen=True)
class DtypeDefault:
    """A publisher default (compute_dtype / kv_cache_dtype) and where in the publisher's files it is read."""

    key: str
    dtype: str
    artifact_id: str
    json_path: str

    def to_json(self) -> dict[str, str]:
        return {
            "key": self.key,
            "dtype": self.dtype,
            "artifact_id": self.artifact_id,
            "json_path": self.json_path,
        }

    @classmethod
    def from_json(cls, doc: Any) -> DtypeDefault | None:
        d = rb.mapping(doc)
        values = [rb.optional_text(d.get(key)) for key in ("key", "dtype", "artifact_id", "json_path")]
        key, dtype, artifact_id, json_path = values
        if key is None or dtype is None or artifact_id is None or json_path is None:
            return None
        return cls(key, dtype, artifact_id, json_path)


@dataclass(frozen=True)
class RequestDefaults:
    declared: bool  # generation.request_defaults is present (and readable)
    profiles: tuple[Profile, ...] = ()
    selection: Selection | None = None
    publisher_defaults: tuple[DtypeDefault, ...] = ()
    notes: tuple[str, ...] = ()
    unreadable: str | None = None  # why the block could not be read, when it is present but malformed

    @property
    def default_profile(self) -> Profile | None:
        """The profile a request gets when it says nothing about reasoning."""
        name = self.selection.automatic if self.selection else None
        return next((p for p in self.profiles if p.name == name), None)

    def to_json(self) -> dict[str, Any]:
        return {
            "declared": self.declared,
            "profiles": [p.to_json() for p in self.profiles],
            "selection": self.selection.to_json() if self.selection else None,
            "default_profile": self.selection.automatic if self.selection else None,
            "publisher_defaults": [d.to_json() for d in self.publisher_defaults],
            "notes": list(self.notes),
            "unreadable": self.unreadable,
        }

    @classmethod
    def from_json(cls, doc: Any) -> RequestDefaults | None:
        if not isinstance(doc, Mapping):
            return None
        return cls(
            declared=rb.flag(doc.get("declared")),
            profiles=rb.each(doc.get("profiles"), Profile.from_json),
            selection=Selection.from_json(doc.get("selection")),
            publisher_defaults=rb.each(doc.get("publisher_defaults"), DtypeDefault.from_json),
            notes=rb.texts(doc.get("notes")),
            unreadable=rb.optional_text(doc.get("unreadable")),
        )


def request_defaults(manifest: Manifest | None) -> RequestDefaults:
    """Each declared profile's values and which one a request gets, as mesh-llm selects it."""
    if manifest is None:
        return RequestDefaults(False)
    publisher, unreadable = _publisher_defaults(manifest)
    if manifest.schema_version != 2:
        note = "schema v1 has no request_defaults: mesh-llm's v1 preflight ignores keys it does not know."
        return RequestDefaults(False, notes=(note,))
    generation = manifest.generation or {}
    raw = generation.get("request_defaults")
    if raw is None:
        return RequestDefaults(False, publisher_defaults=publisher, unreadable=unreadable)
    try:
        block = decode(REQUEST_DEFAULTS, raw)
    except DecodeError as exc:
        return RequestDefaults(True, publisher_defaults=publisher, unreadable=f"request_defaults: {exc}")
    selection = block["selection"]
    chosen = _selection(selection)
    notes = [PRECEDENCE]
    for key, mode, value in (
        ("reasoning_enabled", "reasoning-on", chosen.reasoning_on),
        ("reasoning_disabled", "reasoning-off", chosen.reasoning_off),
    ):
        if value is None:
            notes.append(_FALLBACK.format(key=key, mode=mode))
    profiles = tuple(_profile(name, p, chosen) for name, p in block["profiles"].items())
    return RequestDefaults(True, profiles, chosen, publisher, tuple(notes), unreadable)


def _selection(selection: dict[str, Any]) -> Selection:
    return Selection(selection["default"], selection["reasoning_enabled"], selection["reasoning_disabled"])


def _profile(name: str, p: dict[str, Any], chosen: Selection) -> Profile:
    reasoning = p["reasoning"] or {}
    prov = p["provenance"]
    modes = (chosen.automatic, chosen.reasoning_on, chosen.reasoning_off)
    return Profile(
        name=name,
        max_tokens=p["max_tokens"],
        sampling=tuple((k, p[k]) for k in SAMPLING_KEYS if p[k] is not None),
        stop=tuple(p["stop"] or ()),
        ignore_eos=p["ignore_eos"],
        reasoning_enabled=reasoning.get("enabled"),
        reasoning_format=reasoning.get("format"),
        reasoning_budget=reasoning.get("budget"),
        provenance=ProfileSource(*(prov[k] for k in ("source_repo", "revision", "file", "section", "url"))),
        selected_for=tuple(mode for mode, selected in zip(MODES, modes, strict=True) if selected == name),
    )


def _publisher_defaults(manifest: Manifest) -> tuple[tuple[DtypeDefault, ...], str | None]:
    raw = manifest.raw.get("publisher_defaults") if manifest.schema_version == 2 else None
    if raw is None:
        return (), None
    try:
        block = decode(PUBLISHER_DEFAULTS, raw)
    except DecodeError as exc:
        return (), f"publisher_defaults: {exc}"
    found = [
        DtypeDefault(key, d["dtype"], d["artifact_id"], d["json_path"])
        for key in ("compute_dtype", "kv_cache_dtype")
        if (d := block[key]) is not None
    ]
    return tuple(found), None
