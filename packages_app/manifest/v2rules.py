"""Pure: mesh-llm's ``validate_root`` for a decoded package-v2 root: the same ValidationCodes, paths and
order (skippy-package-format lib.rs, docs/rules.md section 2). No Django, no I/O.

The tensor-catalog checks of the full ``validate()`` need the metadata carrier's inventory and are not
made here. Input is what v2schema.decode_root returns, so every field is present and typed.
"""

from __future__ import annotations

from packages_app.manifest.identity import canonical_package_id
from packages_app.manifest.v2generation import validate_generation
from packages_app.manifest.v2issues import HEX40, Issue, Issues
from packages_app.manifest.v2schema import Json


def validate_root(root: Json, computed_id: str | None = None) -> list[Issue]:
    """Every issue mesh-llm's validate_root reports, in its order (lib.rs:134-157).

    ``computed_id`` is the root's canonical package_id when the caller already has it.
    """
    issues = Issues()
    _manifest_fields(root, computed_id or canonical_package_id(root), issues)
    artifacts = _collect_artifacts(root["artifact_catalog"]["entries"], issues)
    _metadata_binding(root, artifacts, issues)
    _sidecars(root["sidecars"], artifacts, issues)
    _publisher_metadata(root, artifacts, issues)
    _publisher_defaults(root, artifacts, issues)
    if root["generation"] is not None:
        validate_generation(root["generation"], root["layer_count"], issues)
    return list(issues)


# --- manifest fields, artifacts, bindings -----------------------------------------------------


def _manifest_fields(root: Json, expected: str, issues: Issues) -> None:
    if root["schema_version"] != 2:
        issues.push(
            "unsupported_schema_version",
            "schema_version",
            f"expected schema version 2, got {root['schema_version']}",
        )
    for key in ("model_id", "format", "native_abi_version", "generator_version"):
        issues.nonempty(key, root[key])
    if root["layer_count"] == 0:
        issues.push("missing_value", "layer_count", "layer count must be greater than zero")
    _prefixed_sha256(root["package_id"], issues)
    source = root["source_model"]
    issues.sha256("source_model.sha256", source["sha256"])
    issues.nonempty("source_model.metadata_artifact_id", source["metadata_artifact_id"])
    if not source["files"]:
        issues.push("missing_value", "source_model.files", "source file inventory must not be empty")
    if not root["artifact_catalog"]["entries"]:
        issues.push("missing_value", "artifact_catalog.entries", "artifact catalog must not be empty")
    if root["package_id"] != expected:
        issues.push(
            "package_identity_mismatch",
            "package_id",
            f"package identity {root['package_id']!r} does not match canonical identity {expected!r}",
        )
    _source_files(source, issues)


def _prefixed_sha256(value: str, issues: Issues) -> None:
    if not value.startswith("sha256:"):
        issues.push("invalid_digest", "package_id", "digest must use the sha256:<hex> form")
        return
    issues.sha256("package_id", value.removeprefix("sha256:"))


def _source_files(source: Json, issues: Issues) -> None:
    paths: set[str] = set()
    for i, f in enumerate(source["files"]):
        issues.relative_path(f"source_model.files[{i}].path", f["path"])
        issues.sha256(f"source_model.files[{i}].sha256", f["sha256"])
        if f["path"] in paths:
            issues.push(
                "invalid_path",
                f"source_model.files[{i}].path",
                f"source file path {f['path']!r} appears more than once",
            )
        paths.add(f["path"])
    primary = source["primary_file"]
    if primary is None:
        issues.push("missing_value", "source_model.primary_file", "primary source file is required")
        return
    issues.relative_path("source_model.primary_file", primary)
    if primary not in paths:
        issues.push(
            "unknown_source_file",
            "source_model.primary_file",
            f"primary file {primary!r} is absent from source files",
        )


def _collect_artifacts(entries: list[Json], issues: Issues) -> dict[str, Json]:
    by_id: dict[str, Json] = {}
    paths: set[str] = set()
    for i, a in enumerate(entries):
        issues.identifier(f"artifacts[{i}].id", a["id"])
        issues.relative_path(f"artifacts[{i}].path", a["path"])
        issues.sha256(f"artifacts[{i}].sha256", a["sha256"])
        if a["id"] in by_id:
            issues.push(
                "duplicate_artifact", f"artifacts[{i}].id", f"artifact id {a['id']!r} appears more than once"
            )
        by_id[a["id"]] = a
        if a["path"] in paths:
            issues.push(
                "duplicate_artifact_path",
                f"artifacts[{i}].path",
                f"artifact path {a['path']!r} appears more than once",
            )
        paths.add(a["path"])
    return by_id


def path_extension(path: str) -> str | None:
    """Rust's ``Path::extension``: after the file name's last dot, none for ``.hidden`` or ``..``."""
    name = path.rstrip("/").rsplit("/", 1)[-1]
    if name in ("", "..") or "." not in name[1:]:
        return None
    return name.rsplit(".", 1)[1]


def _metadata_binding(root: Json, artifacts: dict[str, Json], issues: Issues) -> None:
    source = root["source_model"]
    artifact_id = source["metadata_artifact_id"]
    if not artifact_id.strip():
        return
    where = "source_model.metadata_artifact_id"
    artifact = artifacts.get(artifact_id)
    if artifact is None:
        issues.push(
            "unknown_artifact", where, f"metadata artifact {artifact_id!r} is absent from artifact catalog"
        )
        return
    if path_extension(artifact["path"]) != "gguf":
        issues.push(
            "invalid_metadata_artifact", where, f"metadata artifact {artifact['id']!r} is not a GGUF artifact"
        )
    if any(s["artifact_id"] == artifact["id"] for s in root["sidecars"]):
        issues.push(
            "invalid_metadata_artifact", where, f"metadata artifact {artifact['id']!r} has a sidecar role"
        )
    primary = next((f for f in source["files"] if f["path"] == source["primary_file"]), None)
    if primary is not None and source["sha256"] != primary["sha256"]:
        issues.push(
            "source_identity_mismatch",
            "source_model.sha256",
            "source model digest does not match the primary source file",
        )


def _sidecars(sidecars: list[Json], artifacts: dict[str, Json], issues: Issues) -> None:
    seen: set[tuple[str, str | None]] = set()
    for i, s in enumerate(sidecars):
        key = (s["kind"], s["name"])
        if key in seen:
            issues.push(
                "duplicate_sidecar",
                f"sidecars[{i}]",
                f"sidecar semantic identity {key!r} appears more than once",
            )
        seen.add(key)
        _known_artifact(f"sidecars[{i}].artifact_id", s["artifact_id"], artifacts, issues)
        if s["name"] is not None:
            issues.nonempty(f"sidecars[{i}].name", s["name"])


def _known_artifact(path: str, artifact_id: str, artifacts: dict[str, Json], issues: Issues) -> None:
    if artifact_id not in artifacts:
        issues.push("unknown_artifact", path, f"artifact {artifact_id!r} does not exist")


def _publisher_metadata(root: Json, artifacts: dict[str, Json], issues: Issues) -> None:
    seen: set[tuple[str, str]] = set()
    source = root["source_model"]
    for i, m in enumerate(root["publisher_metadata"]):
        where = f"publisher_metadata[{i}]"
        if (m["role"], m["source_path"]) in seen:
            issues.push(
                "duplicate_sidecar",
                where,
                f"publisher metadata semantic identity ({m['role']!r}, {m['source_path']!r}) "
                "appears more than once",
            )
        seen.add((m["role"], m["source_path"]))
        _known_artifact(f"{where}.artifact_id", m["artifact_id"], artifacts, issues)
        issues.nonempty(f"{where}.source_repo", m["source_repo"])
        issues.nonempty(f"{where}.source_revision", m["source_revision"])
        if not HEX40.fullmatch(m["source_revision"]):
            issues.push(
                "source_identity_mismatch",
                f"{where}.source_revision",
                "publisher metadata revision must be an immutable 40-character commit",
            )
        issues.relative_path(f"{where}.source_path", m["source_path"])
        if source["repo"] != m["source_repo"]:
            issues.push(
                "source_identity_mismatch",
                f"{where}.source_repo",
                "publisher metadata repository differs from source_model.repo",
            )
        if source["revision"] != m["source_revision"]:
            issues.push(
                "source_identity_mismatch",
                f"{where}.source_revision",
                "publisher metadata revision differs from source_model.revision",
            )


_DEFAULT_ROLES = {"compute_dtype": ("model_config",), "kv_cache_dtype": ("model_config", "hf_quant_config")}


def _publisher_defaults(root: Json, artifacts: dict[str, Json], issues: Issues) -> None:
    defaults = root["publisher_defaults"]
    if defaults is None:
        return
    for name, roles in _DEFAULT_ROLES.items():
        declaration = defaults[name]
        if declaration is None:
            continue
        where = f"publisher_defaults.{name}"
        _known_artifact(f"{where}.artifact_id", declaration["artifact_id"], artifacts, issues)
        bound = next(
            (m for m in root["publisher_metadata"] if m["artifact_id"] == declaration["artifact_id"]), None
        )
        if bound is None:
            issues.push(
                "source_identity_mismatch",
                f"{where}.artifact_id",
                "typed publisher default is not bound to publisher_metadata",
            )
        elif bound["role"] not in roles:
            issues.push(
                "source_identity_mismatch",
                f"{where}.artifact_id",
                f"publisher default {name} cannot be sourced from {bound['role']}",
            )
        issues.nonempty(f"{where}.json_path", declaration["json_path"])
