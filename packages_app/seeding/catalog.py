"""The catalog shape's made-up rows: model families and quantisations, the verdicts they get, the strategies
a report picks, a revision's audit in packages_app.audit's shape, and its files."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from packages_app.layout import FileRole
from packages_app.models import PackageFile
from packages_app.seeding.rows import digest
from packages_app.verdicts import Verdict


@dataclass(frozen=True)
class ModelFamily:
    """A model family: architecture, trunk blocks, bytes per block, whether it ships an MTP block."""

    name: str
    architecture: str
    trunk: int
    block_bytes: int
    mtp: bool


PROFILES = [
    ModelFamily("Qwen3.5-35B-A3B", "qwen35moe", 40, 480_000_000, True),
    ModelFamily("Qwen3.8-27B", "qwen35", 64, 250_000_000, True),
    ModelFamily("GLM-4.7-Flash", "deepseek2", 47, 380_000_000, True),
    ModelFamily("NVIDIA-Nemotron-3-Super-120B-A12B", "nemotron_h_moe", 88, 760_000_000, True),
    ModelFamily("DeepSeek-V3.2", "deepseek2", 61, 6_600_000_000, True),
    ModelFamily("Qwen3-235B-A22B", "qwen3moe", 94, 1_420_000_000, False),
    ModelFamily("Qwen3-30B-A3B-Thinking-2507", "qwen3moe", 48, 360_000_000, False),
    ModelFamily("Llama-3.2-1B-Instruct", "llama", 16, 48_000_000, False),
    ModelFamily("gemma-4-26B-A4B-it-qat", "gemma3", 30, 520_000_000, False),
]
QUANTS = ["UD-Q4_K_XL", "Q4_K_M", "UD-Q3_K_XL", "Q8_0", "UD-Q5_K_XL"]
# (verdict, weight) for packages whose weights hold MTP, and for those without.
MTP_VERDICTS = [
    (Verdict.CONSISTENT_MTP, 45),
    (Verdict.UNDECLARED_MTP, 40),
    (Verdict.DECLARATION_MISMATCH, 10),
    (Verdict.INVALID_MANIFEST, 5),
]
NO_MTP_VERDICTS = [
    (Verdict.CONSISTENT_NO_MTP, 90),
    (Verdict.DECLARED_WITHOUT_WEIGHTS, 7),
    (Verdict.INVALID_MANIFEST, 3),
]
STRATEGIES_ON = ["native-mtp", "native-mtp+ngram-cache", "native-mtp+ngram-suffix"]
STRATEGIES_OFF = ["disabled", "ngram-cache", "ngram-suffix"]


def mtp_declared(verdict: str, profile: ModelFamily) -> bool:
    return verdict in (
        Verdict.CONSISTENT_MTP,
        Verdict.DECLARED_WITHOUT_WEIGHTS,
        Verdict.DECLARATION_MISMATCH,
    )


def layer_path(index: int) -> str:
    return f"layers/layer-{index:05d}.gguf"


def file_rows(revision_id: int, blocks: int) -> Iterator[PackageFile]:
    for i in range(blocks):
        yield PackageFile(
            revision_id=revision_id,
            path=layer_path(i),
            role=FileRole.LAYER,
            layer_index=i,
            size=500_000_000,
            lfs_sha256=digest(f"l{i}"),
            header_status=PackageFile.HeaderStatus.PARSED,
            header_bytes=65_536,
            tensor_count=19,
        )
    for path, role in (("shared/metadata.gguf", "metadata"), ("shared/common.gguf", "common")):
        yield PackageFile(
            revision_id=revision_id, path=path, role=role, size=1_000_000, header_status="parsed"
        )
    yield PackageFile(revision_id=revision_id, path="model-package.json", role="manifest", size=20_000)


def build_audit(profile: ModelFamily, verdict: str) -> dict[str, Any]:
    """An audit dict in packages_app.audit's shape for a synthetic package of ``profile``."""
    blocks = profile.trunk + (1 if profile.mtp else 0)
    mtp_blocks = [profile.trunk] if profile.mtp else []
    declared = mtp_declared(verdict, profile)
    return {
        "verdict": verdict,
        "detected": {
            "architecture": profile.architecture,
            "block_count": blocks,
            "nextn_predict_layers": len(mtp_blocks),
            "mtp_blocks": mtp_blocks,
            "has_mtp_weights": profile.mtp,
            "key_and_tensors_agree": True,
            "expected_nextn_tensors": ["eh_proj", "enorm", "hnorm", "shared_head_norm"]
            if profile.mtp
            else [],
            "missing_nextn_tensors": {},
            "blocks": [_block(i, profile, i in mtp_blocks) for i in range(blocks)],
        },
        "declared": {
            "present": declared,
            "default_strategy": "mtp" if declared else None,
            "uses_native_mtp": declared,
            "layer_indices": mtp_blocks if declared else [],
            "prediction_depth": 1 if declared else None,
            "strategies": {"mtp": "native-mtp"} if declared else {},
        },
        "problems": _problems(verdict),
        "provenance": {
            "revision": "",
            "manifest_sha256": digest(profile.name),
            "source_model_path": f"/source/{profile.name}.gguf",
            "build_host_path": True,
            "files": [_provenance(i) for i in range(blocks)],
        },
        "runtime": {
            "auto": {"outcome": "native-mtp" if declared and profile.mtp else "no-mtp", "why": "Synthetic."},
            "mtp": {"outcome": "native-mtp" if declared and profile.mtp else "refused", "why": "Synthetic."},
        },
        "suggested_generation": None,
    }


def _block(index: int, profile: ModelFamily, mtp: bool) -> dict[str, Any]:
    kinds = ["attention", "moe"] if index % 4 == 3 else ["ssm", "moe"]
    return {
        "index": index,
        "file": layer_path(index),
        "tensor_count": 20 if mtp else 19,
        "bytes": profile.block_bytes,
        "kinds": [*kinds, "nextn"] if mtp else kinds,
        "mtp": mtp,
    }


def _provenance(index: int) -> dict[str, Any]:
    sha = digest(f"l{index}")
    return {
        "path": layer_path(index),
        "role": "layer",
        "manifest_size": 500_000_000,
        "manifest_sha256": sha,
        "hub_size": 500_000_000,
        "hub_sha256": sha,
        "status": "match",
    }


def _problems(verdict: str) -> list[dict[str, Any]]:
    if verdict.startswith("consistent"):
        return []
    code = verdict.replace("-", "_")
    return [{"code": code, "severity": "error", "message": f"Synthetic {verdict} finding.", "evidence": {}}]
