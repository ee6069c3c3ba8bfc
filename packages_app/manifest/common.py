"""Pure: source_model and layer coverage, read the same way in both schemas; no Django, no I/O."""

from __future__ import annotations

from packages_app.manifest.model import (
    MANIFEST_FILE,
    MAX_LAYER_COUNT,
    Artifact,
    SourceFile,
    SourceModel,
)
from packages_app.manifest.reader import (
    _as_object,
    _digest,
    _Reader,
    _Report,
    _safe_path,
    _show,
    describe_layers,
)

# --- shared by both schemas -------------------------------------------------------------------


def _layer_count(top: _Reader) -> int | None:
    value = top.integer("layer_count", minimum=1)
    if value is not None and value > MAX_LAYER_COUNT:
        top.fail(
            "invalid_value", "layer_count", f"is {value}, more than the {MAX_LAYER_COUNT} this audit accepts"
        )
        return None
    return value


_SOURCE_V2_KEYS = frozenset(
    {
        "sha256",
        "metadata_artifact_id",
        "repo",
        "revision",
        "primary_file",
        "canonical_ref",
        "distribution_id",
        "files",
    }
)


def _parse_source(report: _Report, top: _Reader, v2: bool) -> SourceModel:
    body = top.mapping("source_model")
    if body is None:
        return SourceModel()
    r = _Reader(report, body, "source_model")
    if v2:
        r.reject_unknown(_SOURCE_V2_KEYS)
    files = _source_files(report, r, v2)
    primary = r.text("primary_file", required=False)
    if primary is not None and files and primary not in {f.path for f in files}:
        r.fail("unknown_source_file", "primary_file", f"{_show(primary)} is not one of source_model.files")
    return SourceModel(
        path=r.text("path", required=not v2),
        repo=r.text("repo", required=False),
        revision=r.text("revision", required=False),
        primary_file=primary,
        sha256=_digest(r, "sha256", lowercase=v2),
        canonical_ref=r.text("canonical_ref", required=False),
        distribution_id=r.text("distribution_id", required=False),
        metadata_artifact_id=r.text("metadata_artifact_id") if v2 else None,
        files=files,
    )


def _source_files(report: _Report, r: _Reader, v2: bool) -> tuple[SourceFile, ...]:
    entries = r.array("files", required=False)
    if entries is None:
        return ()
    if not entries and v2:
        r.fail("invalid_value", "files", "is empty; leave it out or list the source files")
    size_key = "byte_size" if v2 else "size_bytes"
    found: list[SourceFile] = []
    for i, entry in enumerate(entries):
        body = _as_object(report, entry, f"source_model.files[{i}]")
        if body is None:
            continue
        fr = _Reader(report, body, f"source_model.files[{i}]")
        if v2:
            fr.reject_unknown(frozenset({"path", size_key, "sha256"}))
        path = _safe_path(fr, "path")
        size, sha = fr.integer(size_key, required=v2), _digest(fr, "sha256", lowercase=v2, required=v2)
        if path is not None:
            found.append(SourceFile(path, size, sha))
    return tuple(found)


def _check_layers(report: _Report, artifacts: list[Artifact], layer_count: int | None, where: str) -> None:
    seen: dict[tuple[int, int | None], str] = {}
    for a in artifacts:
        if a.role != "layer" or a.layer_index is None:
            continue
        index = a.layer_index
        if layer_count is not None and index >= layer_count:
            report.add(
                "layer_out_of_bounds",
                f"{MANIFEST_FILE} names {a.path} as layer {index}, but layer_count is {layer_count}.",
                path=a.path,
                layer_index=index,
            )
        key = (index, a.part_index)
        if key in seen:
            report.add(
                "duplicate_layer",
                f"{MANIFEST_FILE} names layer {index} twice: {seen[key]} and {a.path}.",
                layer_index=index,
                paths=[seen[key], a.path],
            )
        seen[key] = a.path
    if layer_count is not None:
        present = {index for index, _ in seen}
        missing = [i for i in range(layer_count) if i not in present]
        if missing:
            report.add(
                "missing_layer",
                f"{MANIFEST_FILE} {where} has no file for {describe_layers(missing)} (of {layer_count}).",
                layer_indices=missing[:100],
            )
