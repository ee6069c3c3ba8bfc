"""Pure: schema 2 (package-v2) manifests -> typed values + problems; no Django, no I/O."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from packages_app.manifest.common import (
    _check_layers,
    _layer_count,
    _parse_source,
)
from packages_app.manifest.generation import (
    _parse_generation,
)
from packages_app.manifest.model import (
    _IDENTIFIER,
    _PACKAGE_ID,
    LAYER_PATH,
    MANIFEST_FILE,
    Artifact,
    Json,
    Manifest,
)
from packages_app.manifest.reader import (
    _as_object,
    _digest,
    _Reader,
    _Report,
    _safe_path,
    _show,
)

# --- schema v2 --------------------------------------------------------------------------------

_V2_KEYS = frozenset(
    {
        "schema_version",
        "package_id",
        "model_id",
        "source_model",
        "format",
        "layer_count",
        "artifact_catalog",
        "sidecars",
        "generation",
        "native_abi_version",
        "generator_version",
        "created_at_unix_secs",
        "publisher_metadata",
        "publisher_defaults",
    }
)
_ENTRY_KEYS = frozenset({"id", "path", "byte_size", "sha256"})


def _parse_v2(report: _Report, raw: Json) -> Manifest:
    top = _Reader(report, raw, "")
    top.reject_unknown(_V2_KEYS)
    package_id = top.text("package_id")
    if package_id is not None and not _PACKAGE_ID.fullmatch(package_id):
        top.fail(
            "invalid_digest",
            "package_id",
            f'must be "sha256:" and 64 lowercase hex digits, not {_show(package_id)}',
        )
        package_id = None
    fmt = top.text("format")
    if fmt is not None and fmt != "gguf":
        top.fail("invalid_value", "format", f'must be "gguf" in schema 2, not {_show(fmt)}')
    layer_count = _layer_count(top)
    source = _parse_source(report, top, v2=True)
    artifacts = _v2_artifacts(report, top, source.metadata_artifact_id, layer_count)
    generation, speculative = _parse_generation(report, raw, layer_count, strict=True)
    top.text("generator_version", required=False)
    top.integer("created_at_unix_secs", required=False)
    return Manifest(
        schema_version=2,
        model_id=top.text("model_id"),
        package_id=package_id,
        format=fmt,
        layer_count=layer_count,
        activation_width=None,
        abi_version=top.text("native_abi_version"),
        source_model=source,
        artifacts=tuple(artifacts),
        generation=generation,
        speculative_decoding=speculative,
        raw=raw,
    )


def _v2_artifacts(
    report: _Report, top: _Reader, metadata_id: str | None, layer_count: int | None
) -> list[Artifact]:
    sidecar_ids = _sidecar_ids(report, top)
    found: list[Artifact] = []
    for i, entry in enumerate(_catalog_entries(report, top)):
        found += _v2_entry(report, entry, f"artifact_catalog.entries[{i}]", metadata_id, sidecar_ids)
    ids: dict[str, str] = {}
    for a in found:
        assert a.artifact_id is not None
        if a.artifact_id in ids:
            report.add(
                "invalid_identifier",
                f"{MANIFEST_FILE} artifact_catalog uses id {_show(a.artifact_id)} twice: "
                f"{ids[a.artifact_id]} and {a.path}.",
                artifact_id=a.artifact_id,
            )
        ids.setdefault(a.artifact_id, a.path)
    _check_metadata_artifact(report, metadata_id, ids)
    for artifact_id in sorted(sidecar_ids - ids.keys()):
        report.add(
            "missing_artifact",
            f"{MANIFEST_FILE} sidecars name artifact {_show(artifact_id)}, absent from artifact_catalog.",
            artifact_id=artifact_id,
        )
    _check_layers(report, found, layer_count, "artifact_catalog")
    return found


def _catalog_entries(report: _Report, top: _Reader) -> list[Any]:
    catalog = top.mapping("artifact_catalog")
    if catalog is None:
        return []
    r = _Reader(report, catalog, "artifact_catalog")
    r.reject_unknown(frozenset({"entries"}))
    entries = r.array("entries")
    if entries == []:
        r.fail("invalid_value", "entries", "is empty; a package has at least its metadata artifact")
    return entries or []


def _v2_entry(
    report: _Report, entry: Any, where: str, metadata_id: str | None, sidecars: set[str]
) -> list[Artifact]:
    body = _as_object(report, entry, where)
    if body is None:
        return []
    r = _Reader(report, body, where)
    r.reject_unknown(_ENTRY_KEYS)
    artifact_id = r.text("id")
    if artifact_id is not None and not _IDENTIFIER.fullmatch(artifact_id):
        r.fail(
            "invalid_identifier", "id", f"{_show(artifact_id)} may only use A-Z, a-z, 0-9, '.', '_' and '-'"
        )
        artifact_id = None
    path = _safe_path(r, "path")
    size = r.integer("byte_size", minimum=1)
    sha = _digest(r, "sha256", lowercase=True)
    if artifact_id is None or path is None:
        return []
    role, index, part = _v2_role(artifact_id, path, metadata_id, sidecars)
    return [Artifact(path, role, index, part, size, sha, artifact_id)]


def _v2_role(
    artifact_id: str, path: str, metadata_id: str | None, sidecars: set[str]
) -> tuple[str, int | None, int | None]:
    if artifact_id == metadata_id:
        return "metadata", None, None
    if artifact_id in sidecars:
        return "projector", None, None
    if match := LAYER_PATH.fullmatch(path):
        return "layer", int(match[1]), int(match[2]) if match[2] else None
    if path == "shared/common.gguf":
        return "common", None, None
    return "other", None, None


def _sidecar_ids(report: _Report, top: _Reader) -> set[str]:
    ids: set[str] = set()
    for i, entry in enumerate(top.array("sidecars", required=False) or []):
        body = _as_object(report, entry, f"sidecars[{i}]")
        if body is None:
            continue
        r = _Reader(report, body, f"sidecars[{i}]")
        r.reject_unknown(frozenset({"kind", "artifact_id", "name"}))
        kind, artifact_id = r.text("kind"), r.text("artifact_id")
        r.text("name", required=False)
        if kind is not None and kind != "mmproj":
            r.fail("invalid_value", "kind", f'must be "mmproj", not {_show(kind)}')
        if artifact_id is not None:
            ids.add(artifact_id)
    return ids


def _check_metadata_artifact(report: _Report, metadata_id: str | None, ids: Mapping[str, str]) -> None:
    if metadata_id is None:
        return
    path = ids.get(metadata_id)
    if path is None:
        problem = "which artifact_catalog does not list"
    elif not path.endswith(".gguf"):
        problem = f"whose file {path} is not a GGUF"
    else:
        return
    report.add(
        "invalid_metadata_artifact",
        f"{MANIFEST_FILE} source_model.metadata_artifact_id names {_show(metadata_id)}, {problem}.",
        artifact_id=metadata_id,
    )
