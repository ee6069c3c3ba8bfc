"""Plain factories for dashboard tests: packages, revisions, files, reports; audits as auditing.py writes.

The motivating case (docs/domain.md section 9) is ``qwen35_package``: qwen35moe, 41 blocks, block 40 holds
the NextN tensors, the manifest declares nothing, so the verdict is ``undeclared-mtp``.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from packages_app import judgements, reports
from packages_app.audit.releases import known_releases
from packages_app.audit.synthetic import synthetic
from packages_app.layout import FileRole
from packages_app.models import Node, NodeRun, Package, PackageFile, Report, Revision
from packages_app.verdicts import Verdict

QWEN35_REPO = "meshllm/Qwen3.5-35B-A3B-UD-Q4_K_XL-layers"
QWEN35_SHA = "69cbd9fc1f928305e8e86e1148a1db6a6f1de8e9"
QWEN35_MANIFEST_SHA = "bac69a30665539535a4018006397ed257d383f96909d991d7a26c6eb3c54d54c"
NEXTN_QWEN35 = ["eh_proj", "enorm", "hnorm", "shared_head_norm"]
BASE_TIME = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
_counter = itertools.count(1)


def sha(seed: str) -> str:
    """A deterministic 40-hex commit sha."""
    return hashlib.sha1(seed.encode(), usedforsecurity=False).hexdigest()


def sha256(seed: str) -> str:
    return hashlib.sha256(seed.encode()).hexdigest()


def layer_path(index: int) -> str:
    return f"layers/layer-{index:03d}.gguf"


def block(index: int, mtp: bool = False, kinds: list[str] | None = None) -> dict[str, Any]:
    # Qwen3.5 MoE: three linear-attention (SSM) blocks, then one full-attention block; all MoE.
    kinds = kinds or (["attention", "moe"] if index % 4 == 3 else ["ssm", "moe"])
    tensor_count = 20 if mtp else (16 if "attention" in kinds else 19)
    return {
        "index": index,
        "file": layer_path(index),
        "tensor_count": tensor_count,
        "bytes": 480_000_000 + (40_000_000 if mtp else 0) + (index % 4) * 1_000_000,
        "kinds": kinds + (["nextn"] if mtp else []),
        "mtp": mtp,
    }


def generation(layer: int = 40) -> dict[str, Any]:
    return {
        "speculative_decoding": {
            "default": "mtp",
            "strategies": {
                "mtp": {
                    "type": "native-mtp",
                    "prediction_depth": 1,
                    "layer_indices": [layer],
                    "window_policy": {
                        "default": "fixed",
                        "initial_window": 1,
                        "min_window": 1,
                        "max_window": 1,
                    },
                }
            },
        }
    }


def manifest_v1(block_count: int = 41, with_generation: bool = False, model_id: str = "") -> dict[str, Any]:
    manifest: dict[str, Any] = {
        "schema_version": 1,
        "model_id": model_id or "unsloth/Qwen3.5-35B-A3B-MTP-GGUF:UD-Q4_K_XL",
        "source_model": {"path": "/source/Qwen3.5-35B-A3B-UD-Q4_K_XL.gguf", "sha256": sha256("source")},
        "format": "layer-package",
        "layer_count": block_count,
        "activation_width": 2048,
        "layers": [
            {
                "layer_index": i,
                "path": layer_path(i),
                "tensor_count": 19,
                "tensor_bytes": 480_000_000,
                "artifact_bytes": 487_000_000,
                "sha256": sha256(f"layer{i}"),
            }
            for i in range(block_count)
        ],
        "skippy_abi_version": "0.1.24",
        "created_at_unix_secs": 1767225600,
    }
    if with_generation:
        manifest["generation"] = generation(block_count - 1)
    return manifest


def provenance_files(block_count: int, mismatch: int | None = None) -> list[dict[str, Any]]:
    files = []
    for i in range(block_count):
        digest = sha256(f"layer{i}")
        hub = sha256("tampered") if i == mismatch else digest
        files.append(
            {
                "path": layer_path(i),
                "role": "layer",
                "manifest_size": 487_000_000,
                "manifest_sha256": digest,
                "hub_size": 487_000_000,
                "hub_sha256": hub,
                "status": "sha256_mismatch" if i == mismatch else "match",
            }
        )
    return files


def audit(
    verdict: str,
    block_count: int = 41,
    mtp_blocks: tuple[int, ...] = (40,),
    declared_layers: tuple[int, ...] = (),
    revision: str = QWEN35_SHA,
    mismatch: int | None = None,
) -> dict[str, Any]:
    """An audit dict in auditing.py's exact shape."""
    declared = bool(declared_layers)
    has_mtp = bool(mtp_blocks)
    manifest = manifest_v1(block_count, with_generation=declared)
    patched = manifest_v1(block_count, with_generation=True)
    return {
        "verdict": verdict,
        "detected": {
            "architecture": "qwen35moe",
            "block_count": block_count,
            "nextn_predict_layers": len(mtp_blocks),
            "mtp_blocks": list(mtp_blocks),
            "has_mtp_weights": has_mtp,
            "key_and_tensors_agree": True,
            "expected_nextn_tensors": NEXTN_QWEN35,
            "missing_nextn_tensors": {},
            "blocks": [block(i, mtp=i in mtp_blocks) for i in range(block_count)],
        },
        "declared": {
            "present": declared,
            "default_strategy": "mtp" if declared else None,
            "uses_native_mtp": declared,
            "layer_indices": list(declared_layers),
            "prediction_depth": 1 if declared else None,
            "strategies": {"mtp": "native-mtp"} if declared else {},
        },
        "problems": _problems(verdict, mtp_blocks),
        "provenance": {
            "revision": revision,
            "manifest_sha256": QWEN35_MANIFEST_SHA,
            "source_model_path": "/source/Qwen3.5-35B-A3B-UD-Q4_K_XL.gguf",
            "build_host_path": True,
            "files": provenance_files(block_count, mismatch),
        },
        "runtime": {
            "auto": {
                "outcome": "native-mtp" if declared and has_mtp else "no-mtp",
                "why": "auto runs the default strategy mtp: effective native-mtp."
                if declared
                else "No declared strategy, and a package load has no local GGUF to prove MTP.",
            },
            "mtp": {
                "outcome": "native-mtp" if declared and has_mtp else "refused",
                "why": 'explicit mtp "requires proven native MTP support".',
            },
        },
        "suggested_generation": _suggestion(manifest, patched) if verdict == "undeclared-mtp" else None,
        "compatibility": [
            {
                "release": "v0.76.2",
                "admitted": False,
                "why": "schema v1 is offline-only; split serving requires package-v2.",
            }
        ],
    }


def _problems(verdict: str, mtp_blocks: tuple[int, ...]) -> list[dict[str, Any]]:
    if verdict == "undeclared-mtp":
        return [
            {
                "code": "undeclared_mtp",
                "severity": "error",
                "message": f"Block {mtp_blocks[0]} holds NextN tensors but the manifest declares no "
                "native-MTP strategy; mesh-llm will never load it.",
                "evidence": {"mtp_blocks": list(mtp_blocks), "generation": None},
            },
            {
                "code": "build_host_path",
                "severity": "warning",
                "message": "source_model.path is a build-host path that serving nodes cannot read.",
                "evidence": {"path": "/source/Qwen3.5-35B-A3B-UD-Q4_K_XL.gguf"},
            },
        ]
    return []


def _suggestion(manifest: dict[str, Any], patched: dict[str, Any]) -> dict[str, Any]:
    import difflib

    old = json.dumps(manifest, indent=2, sort_keys=True).splitlines()
    new = json.dumps(patched, indent=2, sort_keys=True).splitlines()
    diff = "\n".join(
        difflib.unified_diff(old, new, "a/model-package.json", "b/model-package.json", lineterm="")
    )
    return {
        "generation": patched["generation"],
        "patched_manifest": json.dumps(patched, indent=2, sort_keys=True),
        "diff": diff,
    }


def assessment(
    verdict: str, schema_version: int | None = 1, mtp_blocks: tuple[int, ...] = ()
) -> dict[str, Any]:
    """An assessment in assessment.py's exact shape for a revision of ``verdict`` (no manifest bytes
    to audit here): a package-v2 revision's headline, or "not servable" for a schema v1 one."""
    releases = [r.release for r in known_releases()]
    return synthetic(Verdict(verdict), schema_version or 1, releases, mtp_blocks).to_json()


def make_package(repo_id: str) -> Package:
    return Package.objects.create(repo_id=repo_id, private=False)


def make_revision(
    package: Package,
    verdict: str = "consistent-no-mtp",
    commit_sha: str | None = None,
    committed_at: datetime | None = None,
    latest: bool = True,
    files: bool = False,
    **fields: Any,
) -> Revision:
    """A finished (or ``status=...``) revision; the package's latest unless ``latest=False``."""
    commit_sha = commit_sha or sha(f"{package.repo_id}-{next(_counter)}")
    block_count = fields.pop("block_count", 41)
    n = block_count or 41
    mtp = verdict in ("consistent-mtp", "undeclared-mtp", "declaration-mismatch")
    declared = verdict in ("consistent-mtp", "declared-without-weights", "declaration-mismatch")
    values: dict[str, Any] = {
        "committed_at": committed_at or BASE_TIME,
        "title": "Upload layer package",
        "status": Revision.Status.DONE,
        "schema_version": 1,
        "architecture": "qwen35moe",
        "block_count": block_count,
        "nextn_predict_layers": 1 if mtp else 0,
        "total_bytes": n * 487_000_000,
        "verdict": verdict,
        "mtp_detected": mtp,
        "mtp_declared": declared,
        "manifest_sha256": QWEN35_MANIFEST_SHA,
        "manifest_json": manifest_v1(n, with_generation=declared),
        "audit": audit(
            verdict,
            n,
            mtp_blocks=(n - 1,) if mtp else (),
            declared_layers=(n - 1,) if declared else (),
            revision=commit_sha,
        ),
    }
    values.update(fields)
    if values.get("audit") is not None and verdict and "headline" not in fields:
        values["assessment"] = assessment(verdict, values["schema_version"], (n - 1,) if mtp else ())
        values["headline"] = values["assessment"]["headline"]["status"]
    revision = Revision.objects.create(package=package, commit_sha=commit_sha, **values)
    if files:
        make_files(revision, n)
    if latest:
        Package.objects.filter(pk=package.pk).update(latest_revision=revision)
        package.latest_revision = revision
    judgements.revisions_changed([revision.pk])  # as an ingest's audit and its package's new latest do
    return revision


def make_files(revision: Revision, block_count: int, kv: dict[str, Any] | None = None) -> list[PackageFile]:
    rows = [
        PackageFile(
            revision=revision,
            path=layer_path(i),
            role=FileRole.LAYER,
            layer_index=i,
            size=487_000_000,
            lfs_sha256=sha256(f"layer{i}"),
            header_status=PackageFile.HeaderStatus.PARSED,
            header_bytes=6_500_000,
            architecture="qwen35moe",
            block_count=block_count,
            nextn_predict_layers=1,
            kv=kv or qwen35_kv(block_count),
            tensors=qwen35_tensors(i, mtp=i == block_count - 1),
            tensor_count=20 if i == block_count - 1 else 19,
        )
        for i in range(block_count)
    ]
    rows.append(
        PackageFile(
            revision=revision,
            path="model-package.json",
            role=FileRole.MANIFEST,
            size=9000,
            header_status=PackageFile.HeaderStatus.SKIPPED,
        )
    )
    return PackageFile.objects.bulk_create(rows)


def qwen35_kv(block_count: int = 41) -> dict[str, Any]:
    return {
        "general.architecture": "qwen35moe",
        "general.name": "Qwen3.5-35B-A3B",
        "qwen35moe.block_count": block_count,
        "qwen35moe.nextn_predict_layers": 1,
        "qwen35moe.context_length": 262144,
        "tokenizer.ggml.tokens": {"array": "STRING", "count": 151936},
        "tokenizer.chat_template": "{% for message in messages %}<|im_start|>{{ message.role }}\n"
        + "{{ message.content }}<|im_end|>\n{% endfor %}" * 8,
    }


def qwen35_tensors(index: int, mtp: bool = False) -> list[dict[str, Any]]:
    names = [f"blk.{index}.attn_norm.weight", f"blk.{index}.ffn_gate_exps.weight"]
    if mtp:
        names += [f"blk.{index}.nextn.{n}.weight" for n in NEXTN_QWEN35]
    return [
        {"name": name, "type": "Q4_K", "shape": [2048, 512], "offset": i * 589824, "bytes": 589824}
        for i, name in enumerate(names)
    ]


def qwen35_package(with_history: bool = True) -> Package:
    """The motivating case: latest revision undeclared-mtp; an older one that declared MTP correctly."""
    package = make_package(QWEN35_REPO)
    if with_history:
        make_revision(
            package,
            "consistent-mtp",
            commit_sha=sha("qwen35-old"),
            committed_at=BASE_TIME - timedelta(days=30),
            latest=False,
            files=True,
            title="Publish with MTP declared",
        )
    make_revision(
        package,
        "undeclared-mtp",
        commit_sha=QWEN35_SHA,
        committed_at=BASE_TIME,
        files=True,
        title="Republish layers (generation dropped)",
    )
    return package


def catalog_mix() -> dict[str, Package]:
    """One package per verdict plus one still ingesting: the catalog's realistic population."""
    names = {
        "consistent-mtp": "meshllm/GLM-4.7-Flash-UD-Q4_K_XL-layers",
        "consistent-no-mtp": "meshllm/Llama-3.2-1B-Instruct-Q4_K_M-layers",
        "declared-without-weights": "meshllm/NVIDIA-Nemotron-3-Super-120B-A12B-UD-Q4_K_XL-MTPv2-layers",
        "declaration-mismatch": "meshllm/Qwen3.8-27B-UD-Q4_K_XL-layers",
        "invalid-manifest": "meshllm/Kimi-K3-UD-Q4_K_XL-layers",
    }
    packages = {"undeclared-mtp": qwen35_package(with_history=False)}
    for verdict, repo_id in names.items():
        packages[verdict] = make_package(repo_id)
        make_revision(packages[verdict], verdict, schema_version=2 if verdict == "consistent-mtp" else 1)
    running = make_package("meshllm/DeepSeek-V4-Flash-UD-Q4_K_XL-layers")
    make_revision(
        running,
        "",
        status=Revision.Status.RUNNING,
        files_total=64,
        files_done=17,
        audit=None,
        mtp_detected=None,
        mtp_declared=None,
        architecture="",
        block_count=None,
        total_bytes=0,
    )
    packages["running"] = running
    return packages


def make_node(name: str = "node-a") -> Node:
    return Node.objects.create(name=name, token_hash=sha256(f"token-{name}"), token_prefix=name[:12])


def register_run(node: Node, revision: Revision, at: datetime | None = None) -> NodeRun:
    """The run a node's agent registers before its reports count in a revision's public figures (as
    ``POST /api/v1/runs`` stores it: the package ref resolved to the revision), registered ``at`` (its
    first report's time) when given."""
    run, created = NodeRun.objects.get_or_create(
        node=node,
        revision=revision,
        defaults={
            "run_id": f"run-{node.pk}-{revision.pk}",
            "repo_id": revision.package.repo_id,
            "commit_sha": revision.commit_sha,
        },
    )
    if created and at is not None:
        NodeRun.objects.filter(pk=run.pk).update(first_seen_at=at, updated_at=at)
    return run


def make_report(
    node: Node,
    revision: Revision,
    tps: float,
    at: datetime = BASE_TIME,
    registered: bool = True,
    **fields: Any,
) -> Report:
    """A stored node report; ``mtp_used=True`` gives a native-MTP report, otherwise MTP was disabled. A node
    that reports registered a run of the revision first, unless not ``registered``."""
    if registered:
        register_run(node, revision, at)
    mtp = fields.pop("mtp_used", False)
    values: dict[str, Any] = {
        "effective_strategy": "native-mtp" if mtp else "disabled",
        "requested_strategy": "auto",
        "mtp_source": "Integrated" if mtp else "Disabled",
        "stage_splits": "0..27|27..41",
        "topology_id": "two-node",
        "speculative_proposed_n": 100 if mtp else 0,
        "speculative_accepted_n": 70 if mtp else 0,
        "speculative_windows": 100 if mtp else 0,
        "predicted_n": 256,
    }
    values.update(fields)
    body = values.pop("body", {"timings": {"predicted_per_second": tps}})
    report = Report(
        node=node,
        report_id=uuid.uuid4(),
        body_sha256="0" * 64,
        received_at=at,
        observed_at=at,
        repo_id=revision.package.repo_id,
        commit_sha=revision.commit_sha,
        revision=revision,
        predicted_per_second=tps,
        mtp_used=mtp,
        body=body,
        **values,
    )
    reports.insert_claimed(node, [report])  # claims its key, inserts it, adds it to the rollups
    return report


def qwen35_reports(revision: Revision, count: int = 6) -> list[Report]:
    """The motivating split: two nodes, 0..27 / 27..41, MTP disabled at about 3.17 tok/s."""
    nodes = [make_node("stage0-a"), make_node("stage1-b")]
    return [
        make_report(nodes[i % 2], revision, 3.17 + (i % 3) * 0.05, at=BASE_TIME + timedelta(hours=i))
        for i in range(count)
    ]


QWEN35_FIXED_SHA = "964edc7e" + "0" * 32
FLEET_NODES = ("gpu-box-1", "mac-studio", "a100-1", "rx7900-1")


def topology_body(node: str, start: int, end: int, tps: float) -> dict[str, Any]:
    """A report body whose topology puts ``node`` on layers start..end of a two-stage split."""
    stages = [{"node": node, "layer_start": start, "layer_end": end, "device": "CUDA0"}]
    other = {"node": "peer", "layer_start": end, "layer_end": 41, "device": "Metal"}
    return {
        "timings": {"predicted_per_second": tps},
        "topology": {"topology_id": "lab-2", "stages": [*stages, other]},
    }


def qwen35_fleet(now: datetime, old_reports: int = 24, new_reports: int = 31) -> tuple[Revision, Revision]:
    """The issue's fleet: 964edc7e (package-v2, MTP declared) is the latest, yet nodes ran 69cbd9fc.

    69cbd9fc: ``old_reports`` reports near 3.15 tok/s, MTP never used; 964edc7e: ``new_reports`` near
    5.32 tok/s with MTP on. All inside the last day, on the same stage split 0..27|27..41.
    """
    package = qwen35_package(with_history=False)
    broken = package.revisions.get(commit_sha=QWEN35_SHA)
    fixed = make_revision(  # republished as package-v2, as schema v1 is offline-only since PR #1693
        package,
        "consistent-mtp",
        commit_sha=QWEN35_FIXED_SHA,
        committed_at=BASE_TIME + timedelta(days=1),
        schema_version=2,
    )
    nodes = [make_node(name) for name in FLEET_NODES]
    for i in range(old_reports):
        tps = (3.10, 3.15, 3.20)[i % 3]
        node = nodes[i % 4]
        make_report(
            node,
            broken,
            tps,
            at=now - timedelta(hours=2, minutes=i),
            topology_id="lab-2",
            body=topology_body(node.name, 0, 27, tps),
        )
    for i in range(new_reports):
        tps = (5.30, 5.32, 5.34)[i % 3]
        make_report(
            nodes[0],
            fixed,
            tps,
            at=now - timedelta(hours=1, minutes=i),
            mtp_used=True,
            topology_id="lab-2",
            body=topology_body(nodes[0].name, 0, 27, tps),
        )
    return broken, fixed
