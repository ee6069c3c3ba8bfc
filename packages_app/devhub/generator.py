"""Deterministic generator of devhub's demo catalog: which repos exist, their manifests and commits.

The weights come from weights.py (sparse GGUF files whose LFS oid is
`sha256(header_bytes + str(declared_size))`, not the hash of the bytes). The Hub listing
(`lfs.sha256`), the resolve headers (`X-Linked-Etag`) and the manifests' `sha256` fields all use
that same oid, except where a demo revision deliberately disagrees (`DemoRevision.problems`), so a
client compares manifest and Hub values and never hashes payloads. Regular git files (manifests,
READMEs, catalog entries) carry their true sha256 and git blob ids.

Commit shas are 40-hex digests of (generator version, repo, position, title), except the pinned
first revision of the Qwen3.5 package (`QWEN35_FIRST_SHA`), so `DEMO_PACKAGES` is known without
generating anything. Generation is idempotent per `GENERATOR_VERSION` (a marker file in the root).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from packages_app.manifest.identity import package_id_of
from packages_app.manifest.v2schema import DecodeError

from .store import Commit, FileEntry, RepoRecord, Store, copy_sparse
from .weights import (
    BuiltFile,
    ModelSpec,
    PackageFiles,
    build_v1_files,
    build_v2_files,
    glm4moe_spec,
    llama_spec,
    nemotron_spec,
    pad,
    qwen3moe_spec,
    qwen35_dense_spec,
    qwen35moe_spec,
)

GENERATOR_VERSION = "3"
DEFAULT_ROOT = Path(__file__).resolve().parents[2] / "var" / "devhub"
OWNER = "meshllm"
# Unlocks the private and gated demo repos; a local test credential, not a secret.
DEVHUB_TOKEN = "hf_devhub_local_test_token"  # noqa: S105
QWEN35_REPO = f"{OWNER}/Qwen3.5-35B-A3B-UD-Q4_K_XL-layers"
QWEN35_FIRST_SHA = "69cbd9fc1f928305e8e86e1148a1db6a6f1de8e9"
GLM47_REPO = f"{OWNER}/GLM-4.7-Flash-UD-Q4_K_XL-layers"
QWEN38_REPO = f"{OWNER}/Qwen3.8-27B-UD-Q4_K_XL-layers"
LLAMA_REPO = f"{OWNER}/Llama-3.2-1B-Instruct-Q4_K_M-layers"
NEMOTRON_REPO = f"{OWNER}/NVIDIA-Nemotron-3-Super-120B-A12B-UD-Q4_K_XL-MTPv2-layers"
GLM53_REPO = f"{OWNER}/GLM-5.3-Flash-UD-Q4_K_XL-layers"
BENCH_REPO = f"{OWNER}/Qwen3-235B-A22B-UD-Q4_K_XL-layers"
CATALOG_REPO = f"{OWNER}/catalog"
PRIVATE_REPO = f"{OWNER}/Llama-3.2-1B-Instruct-Q4_K_M-staging-layers"
GATED_REPO = f"{OWNER}/Llama-3.2-1B-Instruct-Q4_K_M-gated-layers"
MANIFEST_PATH = "model-package.json"
VERDICTS = (
    "consistent-mtp",
    "consistent-no-mtp",
    "undeclared-mtp",
    "declared-without-weights",
    "declaration-mismatch",
    "invalid-manifest",
)
_MARKER = "devhub.json"


# --- the demo catalog: what exists, and what an audit must conclude --------------------------------

_FIXED_WINDOW = {"default": "fixed", "initial_window": 1, "min_window": 1, "max_window": 1}


def mtp_generation(layer: int, name: str = "mtp") -> dict[str, Any]:
    """The declaration a correct writer emits for one MTP block (domain.md section 3)."""
    strategy = {
        "type": "native-mtp",
        "prediction_depth": 1,
        "layer_indices": [layer],
        "window_policy": _FIXED_WINDOW,
    }
    return {"speculative_decoding": {"default": name, "strategies": {name: strategy}}}


def mtp_suffix_generation(layer: int) -> dict[str, Any]:
    """A composite native-MTP + ngram-suffix declaration, `mtp-suffix` by default."""
    proposers = {
        "mtp": {"type": "native-mtp", "prediction_depth": 1, "layer_indices": [layer]},
        "suffix": {
            "type": "ngram-suffix",
            "ngram_min": 3,
            "ngram_max": 16,
            "max_proposal_tokens": 8,
            "history_scope": "request",
        },
    }
    strategies = {
        "mtp": {"type": "native-mtp", "proposer": "mtp", "window_policy": _FIXED_WINDOW},
        "ngram-suffix": {"type": "ngram-suffix", "proposer": "suffix"},
        "mtp-suffix": {
            "type": "composite",
            "primary": "mtp",
            "extender": "suffix",
            "extension_policy": {"max_tokens": 8, "initial_tokens": 2, "tail_backoff_proposals": 2},
            "window_policy": {
                "default": "adaptive",
                "initial_window": 2,
                "min_window": 1,
                "max_window": 4,
                "pipeline_depth": 2,
            },
        },
    }
    return {
        "speculative_decoding": {"default": "mtp-suffix", "proposers": proposers, "strategies": strategies}
    }


@dataclass(frozen=True)
class RevisionPlan:
    title: str
    date: datetime
    verdict: str
    generation: Mapping[str, Any] | None = None
    extra_keys: Mapping[str, Any] = field(default_factory=dict)  # unknown top-level keys (invalid v2)
    stale_sha_layer: int | None = None  # manifest sha256 of this layer disagrees with the Hub's
    problems: tuple[str, ...] = ()
    note: str = ""


@dataclass(frozen=True)
class PackagePlan:
    repo_id: str
    schema: int
    model: Callable[[], ModelSpec]
    source_repo: str
    quant: str
    revisions: tuple[RevisionPlan, ...]
    layer_digits: int = 5
    architecture: str = ""
    layer_count: int = 0
    mtp_layers: tuple[int, ...] = ()
    nextn_key: int = 0


@dataclass(frozen=True)
class DemoRevision:
    sha: str
    title: str
    committed_at: datetime
    verdict: str
    problems: tuple[str, ...] = ()  # problem codes an audit of this revision must also report


@dataclass(frozen=True)
class DemoPackage:
    """What tests elsewhere may assert: revisions oldest first; `verdict` is that of `main`."""

    repo_id: str
    schema: int
    verdict: str
    revisions: tuple[DemoRevision, ...]
    architecture: str
    layer_count: int
    mtp_layers: tuple[int, ...]  # blocks whose weights hold NextN tensors
    nextn_key: int  # the value of <arch>.nextn_predict_layers in the headers

    @property
    def main_sha(self) -> str:
        return self.revisions[-1].sha


def _at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def _plans() -> tuple[PackagePlan, ...]:
    return (
        PackagePlan(
            QWEN35_REPO,
            1,
            qwen35moe_spec,
            "unsloth/Qwen3.5-35B-A3B-MTP-GGUF",
            "UD-Q4_K_XL",
            (
                RevisionPlan("Upload layer package", _at("2026-03-02T14:11:09"), "undeclared-mtp"),
                RevisionPlan(
                    "Declare native MTP (native-mtp-n1)",
                    _at("2026-03-09T09:30:00"),
                    "consistent-mtp",
                    generation=mtp_generation(40, "native-mtp-n1"),
                ),
                RevisionPlan(
                    "Update README",
                    _at("2026-03-10T08:00:00"),
                    "consistent-mtp",
                    generation=mtp_generation(40, "native-mtp-n1"),
                    note="Republished with MTP declared.",
                ),
            ),
            layer_digits=3,
            architecture="qwen35moe",
            layer_count=41,
            mtp_layers=(40,),
            nextn_key=1,
        ),
        PackagePlan(
            GLM47_REPO,
            2,
            glm4moe_spec,
            "unsloth/GLM-4.7-Flash-GGUF",
            "UD-Q4_K_XL",
            (
                RevisionPlan(
                    "Upload layer package",
                    _at("2026-02-11T10:02:41"),
                    "declaration-mismatch",
                    generation=mtp_generation(46),
                ),
                RevisionPlan(
                    "Fix MTP layer index (46 -> 47)",
                    _at("2026-02-12T16:45:00"),
                    "consistent-mtp",
                    generation=mtp_generation(47),
                ),
            ),
            architecture="glm4moe",
            layer_count=48,
            mtp_layers=(47,),
            nextn_key=1,
        ),
        PackagePlan(
            QWEN38_REPO,
            2,
            qwen35_dense_spec,
            "unsloth/Qwen3.8-27B-GGUF",
            "UD-Q4_K_XL",
            (
                RevisionPlan(
                    "Upload layer package",
                    _at("2026-04-01T12:00:00"),
                    "invalid-manifest",
                    extra_keys={"speculative_decoding": mtp_generation(63)["speculative_decoding"]},
                ),
                RevisionPlan(
                    "Move speculative_decoding under generation",
                    _at("2026-04-02T07:15:00"),
                    "declared-without-weights",
                    generation=mtp_generation(63),
                ),
            ),
            architecture="qwen35",
            layer_count=64,
            mtp_layers=(),
            nextn_key=0,
        ),
        PackagePlan(
            LLAMA_REPO,
            1,
            llama_spec,
            "unsloth/Llama-3.2-1B-Instruct-GGUF",
            "Q4_K_M",
            (
                RevisionPlan(
                    "Upload layer package",
                    _at("2026-01-20T09:00:00"),
                    "consistent-no-mtp",
                    stale_sha_layer=7,
                    problems=("artifact_sha256_mismatch",),
                ),
                RevisionPlan("Regenerate manifest hashes", _at("2026-01-21T11:30:00"), "consistent-no-mtp"),
            ),
            architecture="llama",
            layer_count=16,
            mtp_layers=(),
            nextn_key=0,
        ),
        PackagePlan(
            NEMOTRON_REPO,
            2,
            nemotron_spec,
            "unsloth/NVIDIA-Nemotron-3-Super-120B-A12B-GGUF",
            "UD-Q4_K_XL",
            (
                RevisionPlan(
                    "Upload layer package",
                    _at("2026-03-20T18:00:00"),
                    "consistent-mtp",
                    generation=mtp_generation(88),
                ),
                RevisionPlan(
                    "Default to mtp-suffix (native MTP + ngram-suffix)",
                    _at("2026-03-27T10:00:00"),
                    "consistent-mtp",
                    generation=mtp_suffix_generation(88),
                ),
            ),
            architecture="nemotron_h_moe",
            layer_count=89,
            mtp_layers=(88,),
            nextn_key=1,
        ),
        PackagePlan(
            GLM53_REPO,
            2,
            _glm53_spec,
            "unsloth/GLM-5.3-Flash-GGUF",
            "UD-Q4_K_XL",
            (RevisionPlan("Upload layer package", _at("2026-04-10T13:00:00"), "consistent-no-mtp"),),
            architecture="glm4moe",
            layer_count=48,
            mtp_layers=(),
            nextn_key=1,
        ),
    )


def _bench_plan() -> PackagePlan:
    return PackagePlan(
        BENCH_REPO,
        1,
        qwen3moe_spec,
        "unsloth/Qwen3-235B-A22B-GGUF",
        "UD-Q4_K_XL",
        (RevisionPlan("Upload layer package", _at("2026-02-01T08:00:00"), "consistent-no-mtp"),),
        layer_digits=3,
        architecture="qwen3moe",
        layer_count=94,
    )


def _glm53_spec() -> ModelSpec:
    # The conversion bug: the key still says one NextN layer, the nextn tensors were dropped.
    return glm4moe_spec("GLM-5.3-Flash", nextn_tensors=False)


def commit_sha(repo_id: str, index: int, title: str) -> str:
    if repo_id == QWEN35_REPO and index == 0:
        return QWEN35_FIRST_SHA
    text = f"devhub/{GENERATOR_VERSION}/{repo_id}/{index}/{title}"
    return hashlib.sha1(text.encode(), usedforsecurity=False).hexdigest()


def _demo(plan: PackagePlan) -> DemoPackage:
    revisions = tuple(
        DemoRevision(commit_sha(plan.repo_id, i, r.title), r.title, r.date, r.verdict, r.problems)
        for i, r in enumerate(plan.revisions)
    )
    return DemoPackage(
        plan.repo_id,
        plan.schema,
        revisions[-1].verdict,
        revisions,
        plan.architecture,
        plan.layer_count,
        plan.mtp_layers,
        plan.nextn_key,
    )


DEMO_PACKAGES: tuple[DemoPackage, ...] = tuple(_demo(p) for p in _plans())
BENCH_PACKAGE: DemoPackage = _demo(_bench_plan())


# --- manifests ------------------------------------------------------------------------------------


def _fake_sha256(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def _fake_sha1(*parts: str) -> str:
    return hashlib.sha1("\0".join(parts).encode(), usedforsecurity=False).hexdigest()


def _source(plan: PackagePlan, spec: ModelSpec, files: PackageFiles) -> dict[str, Any]:
    primary = f"{spec.name}-{plan.quant}.gguf"
    size = files.all()[0].header_bytes + sum(pad(t.nbytes) for f in files.all() for t in f.tensors)
    sha = _fake_sha256("source", plan.source_repo, primary)
    return {
        "repo": plan.source_repo,
        "revision": _fake_sha1("source-revision", plan.source_repo),
        "primary_file": primary,
        "sha256": sha,
        "files": [{"path": primary, "size_bytes": size, "sha256": sha}],
    }


def _artifact_v1(built: BuiltFile, sha: str | None = None) -> dict[str, Any]:
    return {
        "path": built.path,
        "tensor_count": len(built.tensors),
        "tensor_bytes": built.tensor_bytes,
        "artifact_bytes": built.entry.size,
        "sha256": sha or built.entry.lfs_sha256,
    }


def manifest_v1(plan: PackagePlan, rev: RevisionPlan, spec: ModelSpec, files: PackageFiles) -> dict[str, Any]:
    source = _source(plan, spec, files)
    source["path"] = f"/source/{source['primary_file']}"  # a build-host path, absent on serving nodes
    layers = []
    for i, built in enumerate(files.layers):
        stale = _fake_sha256("stale", built.path) if i == rev.stale_sha_layer else None
        layers.append({"layer_index": i, **_artifact_v1(built, stale)})
    manifest: dict[str, Any] = {
        "schema_version": 1,
        "model_id": f"{plan.source_repo}:{plan.quant}",
        "source_model": source,
        "format": "layer-package",
        "layer_count": spec.block_count,
        "activation_width": spec.hidden,
        "shared": {role: _artifact_v1(built) for role, built in files.shared.items()},
        "layers": layers,
    }
    if rev.generation is not None:
        manifest["generation"] = rev.generation
    manifest["skippy_abi_version"] = "0.1.24"
    manifest["created_at_unix_secs"] = int(rev.date.timestamp()) - 1800
    return manifest | dict(rev.extra_keys)


def manifest_v2(plan: PackagePlan, rev: RevisionPlan, spec: ModelSpec, files: PackageFiles) -> dict[str, Any]:
    v1_source = _source(plan, spec, files)
    primary = v1_source["files"][0]
    source = {k: v for k, v in v1_source.items() if k != "files"}
    source["canonical_ref"] = f"hf://{plan.source_repo}@{source['revision']}/{source['primary_file']}"
    source["metadata_artifact_id"] = "metadata"
    source["files"] = [
        {"path": primary["path"], "byte_size": primary["size_bytes"], "sha256": primary["sha256"]}
    ]
    entries = [_entry(role, built) for role, built in files.shared.items()]
    for i, built in enumerate(files.layers):
        stale = _fake_sha256("stale", built.path) if i == rev.stale_sha_layer else None
        entries.append(_entry(f"layer-{i:05d}", built, stale))
    catalog = {"entries": entries}
    identity = json.dumps(
        {"source": source["sha256"], "catalog": catalog}, sort_keys=True, separators=(",", ":")
    )
    manifest: dict[str, Any] = {
        "schema_version": 2,
        "package_id": "sha256:" + hashlib.sha256(identity.encode()).hexdigest(),
        "model_id": f"{plan.source_repo}:{plan.quant}",
        "source_model": source,
        "format": "gguf",
        "layer_count": spec.block_count,
        "artifact_catalog": catalog,
    }
    if rev.generation is not None:
        manifest["generation"] = rev.generation
    manifest["native_abi_version"] = "0.3.2"
    manifest["generator_version"] = "skippy-package 0.4.1"
    manifest["created_at_unix_secs"] = int(rev.date.timestamp()) - 1800
    manifest |= dict(rev.extra_keys)
    # mesh-llm binds every field into the id; a manifest that does not parse keeps the placeholder.
    with contextlib.suppress(DecodeError):
        manifest["package_id"] = package_id_of(manifest)
    return manifest


def _entry(artifact_id: str, built: BuiltFile, sha: str | None = None) -> dict[str, Any]:
    return {
        "id": artifact_id,
        "path": built.path,
        "byte_size": built.entry.size,
        "sha256": sha or built.entry.lfs_sha256,
    }


# --- repos and commits --------------------------------------------------------------------------

_GITATTRIBUTES = (
    "*.7z filter=lfs diff=lfs merge=lfs -text\n*.bin filter=lfs diff=lfs merge=lfs -text\n"
    "*.gguf filter=lfs diff=lfs merge=lfs -text\n*.safetensors filter=lfs diff=lfs merge=lfs -text\n"
    "*.zip filter=lfs diff=lfs merge=lfs -text\n"
)


def _readme(plan: PackagePlan, spec: ModelSpec, note: str) -> bytes:
    front = (
        f"---\nlicense: {spec.license}\nbase_model: {plan.source_repo}\nlibrary_name: gguf\n"
        f"tags:\n- gguf\n- mesh-llm\n- layer-package\n- {spec.arch_name}\n---\n"
    )
    body = (
        f"# {spec.name} {plan.quant} - mesh-llm layer package\n\n"
        f"{spec.block_count} per-block GGUF files cut from `{plan.source_repo}` ({plan.quant}), "
        f"manifest schema v{plan.schema}. Each mesh-llm node downloads only the blocks of its stage.\n"
    )
    return (front + body + (f"\n{note}\n" if note else "")).encode()


def _json_bytes(data: Mapping[str, Any]) -> bytes:
    return (json.dumps(data, indent=2) + "\n").encode()


def _package_record(store: Store, plan: PackagePlan) -> RepoRecord:
    spec = plan.model()
    files = (
        build_v1_files(store, spec, plan.layer_digits) if plan.schema == 1 else build_v2_files(store, spec)
    )
    weights = {built.path: built.entry for built in files.all()}
    weights[".gitattributes"] = store.put_bytes(_GITATTRIBUTES.encode())
    build = manifest_v1 if plan.schema == 1 else manifest_v2
    record = _new_record(plan.repo_id, "model", plan.revisions[0].date, spec.arch_name)
    record.card_data = {"license": spec.license, "base_model": plan.source_repo, "library_name": "gguf"}
    manifests: dict[str, FileEntry] = {}
    for index, rev in enumerate(plan.revisions):
        # A revision that changes only the README keeps the manifest (and its created_at) it had.
        content = json.dumps([rev.generation, rev.extra_keys, rev.stale_sha_layer], sort_keys=True)
        if content not in manifests:
            manifests[content] = store.put_bytes(_json_bytes(build(plan, rev, spec, files)))
        snapshot = dict(weights)
        snapshot[MANIFEST_PATH] = manifests[content]
        snapshot["README.md"] = store.put_bytes(_readme(plan, spec, rev.note))
        _append_commit(record, commit_sha(plan.repo_id, index, rev.title), rev.title, rev.date, snapshot)
    return record


def _new_record(repo_id: str, repo_type: str, first: datetime, *tags: str) -> RepoRecord:
    base_tags = ("gguf", "mesh-llm", "layer-package") if repo_type == "model" else ("mesh-llm",)
    return RepoRecord(repo_id, repo_type, created_at=first - timedelta(hours=1), tags=base_tags + tags)


def _append_commit(
    record: RepoRecord, sha: str, title: str, date: datetime, files: dict[str, FileEntry]
) -> None:
    parents = (record.commits[-1].sha,) if record.commits else ()
    record.commits.append(Commit(sha, parents, date, title, "", "meshllm-bot", files))
    record.branches["main"] = sha


def _catalog_entry(plan: PackagePlan, spec: ModelSpec) -> dict[str, Any]:
    size_gb = sum(t.nbytes for b in spec.blocks for t in b) / 1e9
    variant = {
        "source": {
            "repo": plan.source_repo,
            "file": f"{spec.name}-{plan.quant}.gguf",
            "revision": _fake_sha1("source-revision", plan.source_repo),
        },
        "curated": {
            "name": f"{spec.name} {plan.quant}",
            "size": f"{size_gb:.1f} GB",
            "description": f"{spec.name} ({spec.arch_name}, {spec.block_count} blocks) for mesh-llm.",
        },
        "packages": [{"type": "layer-package", "repo": plan.repo_id, "layer_count": spec.block_count}],
    }
    return {"schema_version": 1, "source_repo": plan.source_repo, "variants": {plan.quant: variant}}


def _catalog_record(store: Store, plans: Sequence[PackagePlan]) -> RepoRecord:
    """The `meshllm/catalog` dataset: two commits, the second adding the newer packages."""
    record = _new_record(CATALOG_REPO, "dataset", _at("2026-01-15T00:00:00"))
    files = {
        ".gitattributes": store.put_bytes(_GITATTRIBUTES.encode()),
        "README.md": store.put_bytes(
            b"# meshllm catalog\n\nCurated mesh-llm layer packages, one entry per source repo.\n"
        ),
    }
    batches = (
        (plans[:4], "Add catalog entries", _at("2026-03-01T00:00:00")),
        (plans[4:], "Add Nemotron 3 Super MTPv2 and GLM-5.3-Flash", _at("2026-04-11T00:00:00")),
    )
    for index, (batch, title, date) in enumerate(batches):
        for plan in batch:
            path = f"entries/{plan.source_repo}.json"
            files[path] = store.put_bytes(_json_bytes(_catalog_entry(plan, plan.model())))
        _append_commit(record, commit_sha(CATALOG_REPO, index, title), title, date, dict(files))
    return record


def _restricted_records(llama: RepoRecord) -> list[RepoRecord]:
    """A private and a gated copy of the Llama package (same blobs), to exercise authentication."""
    out = []
    for repo_id, private, gated in ((PRIVATE_REPO, True, False), (GATED_REPO, False, "manual")):
        head = llama.commits[-1]
        record = RepoRecord(
            repo_id,
            "model",
            created_at=llama.created_at,
            private=private,
            gated=gated,
            tags=llama.tags,
            card_data=llama.card_data,
        )
        _append_commit(record, commit_sha(repo_id, 0, head.title), head.title, head.date, dict(head.files))
        out.append(record)
    return out


# --- entry points ---------------------------------------------------------------------------------


def generate_catalog(root: Path, *, only: Sequence[str] | None = None, include_bench: bool = False) -> None:
    """Write the demo repos under `root` (all of them, or only the package repo ids in `only`)."""
    store = Store(root)
    plans = _plans()
    for plan in plans:
        if only is None or plan.repo_id in only:
            record = _package_record(store, plan)
            store.save_repo(record)
            if only is None and plan.repo_id == LLAMA_REPO:
                for restricted in _restricted_records(record):
                    store.save_repo(restricted)
    if only is None:
        store.save_repo(_catalog_record(store, plans))
    if include_bench or (only is not None and BENCH_REPO in only):
        store.save_repo(_package_record(store, _bench_plan()))
    shutil.rmtree(root / "tmp", ignore_errors=True)


def ensure_catalog(root: Path = DEFAULT_ROOT, *, include_bench: bool = False) -> Path:
    """Generate the demo catalog under `root` unless this generator version already did; return root."""
    root.mkdir(parents=True, exist_ok=True)
    with _locked(root):
        marker = _read_marker(root)
        if marker.get("generator_version") != GENERATOR_VERSION:
            _wipe(root)
            generate_catalog(root, include_bench=include_bench)
            _write_marker(root, include_bench)
        elif include_bench and not marker.get("bench"):
            generate_catalog(root, only=[BENCH_REPO])
            _write_marker(root, True)
    return root


def write_package_folder(
    repo_id: str, revision: str | None, dest: Path, *, root: Path = DEFAULT_ROOT
) -> Path:
    """Materialise one revision as a local package folder (as `audit_package <folder>` reads it).

    GGUF files are hard links to the blobs when possible (else sparse copies): replace them, never
    write into them. Small files are real copies, safe to edit.
    """
    ensure_catalog(root, include_bench=repo_id == BENCH_REPO)
    store = Store(root)
    record = store.load_repos().get(("model", repo_id))
    if record is None:
        raise LookupError(f"devhub has no repo {repo_id!r}")
    commit = record.resolve(revision or "main")
    if commit is None:
        raise LookupError(f"{repo_id} has no revision {revision!r}")
    for path, entry in commit.files.items():
        _materialise(store.blob_path(entry.blob), dest / path, link=entry.lfs_sha256 is not None)
    return dest


def _materialise(blob: Path, target: Path, *, link: bool) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    target.unlink(missing_ok=True)
    if link:
        try:
            os.link(blob, target)
            return
        except OSError:  # another filesystem, or links not allowed
            pass
    copy_sparse(blob, target)


@contextlib.contextmanager
def _locked(root: Path) -> Iterator[None]:
    # Two processes (a test run and `manage.py devhub`) may ask for the same root at once.
    with (root / ".lock").open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _read_marker(root: Path) -> dict[str, Any]:
    try:
        data = json.loads((root / _MARKER).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_marker(root: Path, bench: bool) -> None:
    marker = {"generator_version": GENERATOR_VERSION, "bench": bench}
    (root / _MARKER).write_text(json.dumps(marker) + "\n")


def _wipe(root: Path) -> None:
    # Only devhub's own entries: the root may be a folder the user chose.
    (root / _MARKER).unlink(missing_ok=True)
    for name in ("blobs", "repos", "tmp"):
        shutil.rmtree(root / name, ignore_errors=True)
