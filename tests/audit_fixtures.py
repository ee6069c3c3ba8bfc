"""Builders of realistic layer packages for the audit tests: manifest dicts, Hub listings, header dicts."""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from packages_app import audit as auditing
from packages_app.manifest.identity import package_id_of
from packages_app.manifest.v2schema import DecodeError

QWEN35_NEXTN = ("eh_proj", "enorm", "hnorm", "shared_head_norm")
GLM_NEXTN = ("eh_proj", "embed_tokens", "enorm", "hnorm", "shared_head_head", "shared_head_norm")
_ATTENTION = ("attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "attn_q_norm", "attn_k_norm")
_MOE = (
    "ffn_gate_inp",
    "ffn_gate_exps",
    "ffn_up_exps",
    "ffn_down_exps",
    "ffn_gate_inp_shexp",
    "ffn_gate_shexp",
    "ffn_up_shexp",
    "ffn_down_shexp",
)
_DENSE = ("ffn_norm", "ffn_gate", "ffn_up", "ffn_down")
_QWEN_SSM = (
    "attn_norm",
    "attn_qkv",
    "attn_gate",
    "ssm_conv1d",
    "ssm_dt",
    "ssm_a",
    "ssm_alpha",
    "ssm_beta",
    "ssm_norm",
    "ssm_out",
)
_MAMBA = ("attn_norm", "ssm_in", "ssm_conv1d", "ssm_dt", "ssm_a", "ssm_d", "ssm_norm", "ssm_out")


def fake_sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class Model:
    """The weights of one source GGUF: architecture, blocks and which of them carry a NextN head."""

    package: str
    model_id: str
    source_repo: str
    primary_file: str
    arch: str
    block_count: int
    nextn: int | None  # the <arch>.nextn_predict_layers key; None = absent
    nextn_tensors: tuple[str, ...]  # what each MTP block holds (empty: the conversion dropped them)
    components: Callable[[int], tuple[str, ...]]  # the blk.N.* names of an ordinary block
    vocab: int = 151_936
    width: int = 2048

    @property
    def mtp_blocks(self) -> tuple[int, ...]:
        return tuple(range(self.block_count - (self.nextn or 0), self.block_count)) if self.nextn else ()


def _qwen35_components(index: int) -> tuple[str, ...]:
    # Qwen3.5: three gated-delta-net (SSM) blocks, then one full-attention block; every block is MoE.
    full = index % 4 == 3 or index == 40
    return (*_ATTENTION, "post_attention_norm", *_MOE) if full else (*_QWEN_SSM, "post_attention_norm", *_MOE)


def _glm_components(index: int) -> tuple[str, ...]:
    return (*_ATTENTION, *(_DENSE if index == 0 else ("ffn_norm", *_MOE)))


def _llama_components(index: int) -> tuple[str, ...]:
    return ("attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", *_DENSE)


def _nemotron_components(index: int) -> tuple[str, ...]:
    # Nemotron-H: mostly Mamba2 blocks, a few attention blocks, MoE blocks between them.
    if index % 8 == 7 or index == 88:
        return ("attn_norm", "attn_q", "attn_k", "attn_v", "attn_output")
    if index % 2 == 1:
        return ("attn_norm", "ffn_gate_inp", "ffn_up_exps", "ffn_down_exps", "ffn_up_shexp", "ffn_down_shexp")
    return _MAMBA


QWEN35 = Model(
    package="meshllm/Qwen3.5-35B-A3B-UD-Q4_K_XL-layers",
    model_id="unsloth/Qwen3.5-35B-A3B-MTP-GGUF:UD-Q4_K_XL",
    source_repo="unsloth/Qwen3.5-35B-A3B-MTP-GGUF",
    primary_file="Qwen3.5-35B-A3B-UD-Q4_K_XL.gguf",
    arch="qwen35moe",
    block_count=41,
    nextn=1,
    nextn_tensors=QWEN35_NEXTN,
    components=_qwen35_components,
)
GLM47 = Model(
    package="meshllm/GLM-4.7-Flash-UD-Q4_K_XL-layers",
    model_id="unsloth/GLM-4.7-Flash-GGUF:UD-Q4_K_XL",
    source_repo="unsloth/GLM-4.7-Flash-GGUF",
    primary_file="GLM-4.7-Flash-UD-Q4_K_XL.gguf",
    arch="glm4moe",
    block_count=48,
    nextn=1,
    nextn_tensors=GLM_NEXTN,
    components=_glm_components,
    vocab=154_880,
)
LLAMA = Model(
    package="meshllm/Llama-3.2-1B-Instruct-Q4_K_M-layers",
    model_id="bartowski/Llama-3.2-1B-Instruct-GGUF:Q4_K_M",
    source_repo="bartowski/Llama-3.2-1B-Instruct-GGUF",
    primary_file="Llama-3.2-1B-Instruct-Q4_K_M.gguf",
    arch="llama",
    block_count=16,
    nextn=None,
    nextn_tensors=(),
    components=_llama_components,
    vocab=128_256,
)
NEMOTRON = Model(
    package="meshllm/NVIDIA-Nemotron-3-Super-120B-A12B-UD-Q4_K_XL-MTPv2-layers",
    model_id="unsloth/NVIDIA-Nemotron-3-Super-120B-A12B-GGUF:UD-Q4_K_XL",
    source_repo="unsloth/NVIDIA-Nemotron-3-Super-120B-A12B-GGUF",
    primary_file="NVIDIA-Nemotron-3-Super-120B-A12B-UD-Q4_K_XL.gguf",
    arch="nemotron_h_moe",
    block_count=89,
    nextn=1,
    nextn_tensors=QWEN35_NEXTN,
    components=_nemotron_components,
    vocab=131_072,
)


# --- generation declarations ------------------------------------------------------------------


def mtp_name(schema: int) -> str:
    """The fixed writer (PR #1937) keys the strategy mtp in both schemas; explicit mtp selects only that."""
    return "mtp"


def mtp_generation(schema: int, layers: list[int], depth: int = 1) -> dict[str, Any]:
    """What a correct writer emits (docs/domain.md section 3), v1 or v2 naming."""
    name = mtp_name(schema)
    strategy = auditing.writer_mtp_strategy(layers)
    strategy["prediction_depth"] = depth
    return {"speculative_decoding": {"default": name, "strategies": {name: strategy}}}


def composite_generation(layers: list[int]) -> dict[str, Any]:
    """Native MTP extended by an n-gram suffix proposer, default mtp-suffix (Nemotron MTPv2-like)."""
    suffix = {"type": "ngram-suffix", "ngram_min": 3, "ngram_max": 8, "max_proposal_tokens": 8}
    return {
        "speculative_decoding": {
            "default": "mtp-suffix",
            "proposers": {
                "mtp": {"type": "native-mtp", "prediction_depth": 1, "layer_indices": layers},
                "suffix": {**suffix, "history_scope": "request"},
            },
            "strategies": {
                "mtp": {"type": "native-mtp", "proposer": "mtp"},
                "ngram-suffix": {"type": "ngram-suffix", "proposer": "suffix"},
                "mtp-suffix": {
                    "type": "composite",
                    "primary": "mtp",
                    "extender": "suffix",
                    "extension_policy": {"max_tokens": 8, "initial_tokens": 2},
                    "window_policy": {
                        "default": "adaptive",
                        "initial_window": 2,
                        "min_window": 1,
                        "max_window": 4,
                    },
                },
            },
        }
    }


def ngram_generation(ngram_max: int = 4) -> dict[str, Any]:
    cache = {"type": "ngram-cache", "ngram_min": 1, "ngram_max": ngram_max, "max_proposal_tokens": 8}
    return {
        "speculative_decoding": {
            "default": "ngram-cache",
            "proposers": {"cache": {**cache, "history_scope": "request"}},
            "strategies": {"ngram-cache": {"type": "ngram-cache", "proposer": "cache"}},
        }
    }


# --- headers ----------------------------------------------------------------------------------


def _tensor(name: str, seed: int) -> dict[str, Any]:
    nbytes = 4096 * (1 + seed % 97)
    return {"name": f"{name}.weight", "type": "Q4_K", "shape": [nbytes // 4, 8], "offset": 0, "bytes": nbytes}


def block_tensors(model: Model, index: int, nextn: tuple[str, ...] | None = None) -> list[dict[str, Any]]:
    names = [f"blk.{index}.{c}" for c in model.components(index)]
    if index in model.mtp_blocks:
        names += [f"blk.{index}.nextn.{s}" for s in (model.nextn_tensors if nextn is None else nextn)]
    tensors = [_tensor(n, index * 31 + i) for i, n in enumerate(names)]
    offset = 0
    for t in tensors:
        t["offset"] = offset
        offset += t["bytes"]
    return tensors


def kv(model: Model, **extra: Any) -> dict[str, Any]:
    values: dict[str, Any] = {
        "general.architecture": model.arch,
        "general.name": model.model_id.split("/")[1],
        f"{model.arch}.block_count": model.block_count,
        f"{model.arch}.embedding_length": model.width,
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.tokens": {"array": "STRING", "count": model.vocab},
        "tokenizer.ggml.merges": {"array": "STRING", "count": model.vocab - 256},
    }
    if model.nextn is not None:
        values[f"{model.arch}.nextn_predict_layers"] = model.nextn
    return values | extra


def header(model: Model, tensors: list[dict[str, Any]], **extra_kv: Any) -> dict[str, Any]:
    # Tokenizer arrays dominate a header: roughly 40 bytes per token.
    return {
        "version": 3,
        "header_bytes": 64 + model.vocab * 40 + 96 * len(tensors),
        "alignment": 32,
        "kv": kv(model, **extra_kv),
        "tensors": tensors,
    }


# --- packages ---------------------------------------------------------------------------------


@dataclass
class Package:
    manifest: dict[str, Any]
    files: list[auditing.FileInfo]
    headers: dict[str, dict[str, Any]]
    header_errors: dict[str, str] = field(default_factory=dict)
    revision: str = "69cbd9fc1f928305e8e86e1148a1db6a6f1de8e9"

    def manifest_bytes(self) -> bytes:
        return json.dumps(self.manifest, indent=2).encode()

    def audit(self) -> auditing.Audit:
        return auditing.audit(
            self.manifest_bytes(), self.files, self.headers, self.revision, header_errors=self.header_errors
        )

    def with_manifest(self, manifest: Mapping[str, Any], recompute_id: bool = True) -> Package:
        """The package with another manifest; a v2 one gets its canonical package_id, as a writer does."""
        doc = copy.deepcopy(dict(manifest))
        return replace(self, manifest=with_canonical_id(doc) if recompute_id else doc)


def with_canonical_id(manifest: dict[str, Any]) -> dict[str, Any]:
    """A v2 manifest with package_id set to what mesh-llm computes (unchanged when it cannot parse)."""
    if manifest.get("schema_version") != 2:
        return manifest
    with contextlib.suppress(DecodeError):
        manifest["package_id"] = package_id_of(manifest)
    return manifest


def build(
    model: Model,
    schema: int,
    generation: dict[str, Any] | None = None,
    nextn: tuple[str, ...] | None = None,
) -> Package:
    """A package of ``model`` in schema 1 (one header per layer file) or 2 (shared/metadata.gguf only)."""
    blocks = {i: block_tensors(model, i, nextn) for i in range(model.block_count)}
    return _build_v1(model, blocks, generation) if schema == 1 else _build_v2(model, blocks, generation)


def _source(model: Model, v2: bool) -> dict[str, Any]:
    size_key = "byte_size" if v2 else "size_bytes"
    primary = {
        "path": model.primary_file,
        size_key: 22_100_000_000,
        "sha256": fake_sha256(model.primary_file),
    }
    source: dict[str, Any] = {} if v2 else {"path": f"/source/{model.primary_file}"}
    source |= {
        "repo": model.source_repo,
        "revision": fake_sha256(model.source_repo)[:40],
        "primary_file": model.primary_file,
        "sha256": primary["sha256"],
    }
    if v2:
        source["metadata_artifact_id"] = "metadata"
    source["files"] = [primary]
    return source


def _file_size(h: dict[str, Any]) -> int:
    return int(h["header_bytes"]) + sum(t["bytes"] for t in h["tensors"])


def _build_v1(
    model: Model, blocks: dict[int, list[dict[str, Any]]], generation: dict[str, Any] | None
) -> Package:
    headers = {
        "shared/metadata.gguf": header(model, []),
        "shared/embeddings.gguf": header(model, [_tensor("token_embd", 1)]),
        "shared/output.gguf": header(model, [_tensor("output_norm", 2), _tensor("output", 3)]),
    }
    layers = []
    for i, tensors in blocks.items():
        path = f"layers/layer-{i:03d}.gguf"
        headers[path] = header(model, tensors)
        layers.append({"layer_index": i, "path": path, **_v1_artifact(path, headers[path])})
    manifest: dict[str, Any] = {
        "schema_version": 1,
        "model_id": model.model_id,
        "source_model": _source(model, v2=False),
        "format": "layer-package",
        "layer_count": model.block_count,
        "activation_width": model.width,
        "shared": {
            role: {
                "path": f"shared/{role}.gguf",
                **_v1_artifact(f"shared/{role}.gguf", headers[f"shared/{role}.gguf"]),
            }
            for role in ("metadata", "embeddings", "output")
        },
        "layers": layers,
    }
    if generation is not None:
        manifest["generation"] = generation
    manifest |= {"skippy_abi_version": "0.1.24", "created_at_unix_secs": 1_767_225_600}
    files = [auditing.FileInfo(p, _file_size(h), fake_sha256(p)) for p, h in headers.items()]
    return Package(manifest, _with_housekeeping(files), headers)


def _v1_artifact(path: str, h: dict[str, Any]) -> dict[str, Any]:
    tensors = h["tensors"]
    return {
        "tensor_count": len(tensors),
        "tensor_bytes": sum(t["bytes"] for t in tensors),
        "artifact_bytes": _file_size(h),
        "sha256": fake_sha256(path),
    }


def _build_v2(
    model: Model, blocks: dict[int, list[dict[str, Any]]], generation: dict[str, Any] | None
) -> Package:
    common = [_tensor("token_embd", 1), _tensor("output_norm", 2), _tensor("output", 3)]
    every = common + [t for tensors in blocks.values() for t in tensors]
    metadata = header(model, every, **{auditing.METADATA_ONLY_KEY: True, "skippy.package.part_count": 1})
    sizes = {
        "shared/metadata.gguf": int(metadata["header_bytes"]),
        "shared/common.gguf": _file_size(header(model, common)),
    }
    for i, tensors in blocks.items():
        sizes[f"layers/layer-{i:05d}.gguf"] = _file_size(header(model, tensors))
    ids = {"shared/metadata.gguf": "metadata", "shared/common.gguf": "common"}
    entries = [
        {
            "id": ids.get(p, p.rsplit("/", 1)[1].removesuffix(".gguf")),
            "path": p,
            "byte_size": s,
            "sha256": fake_sha256(p),
        }
        for p, s in sizes.items()
    ]
    manifest: dict[str, Any] = {
        "schema_version": 2,
        "package_id": "sha256:" + fake_sha256(model.package),
        "model_id": model.model_id,
        "source_model": _source(model, v2=True),
        "format": "gguf",
        "layer_count": model.block_count,
        "artifact_catalog": {"entries": entries},
    }
    if generation is not None:
        manifest["generation"] = generation
    manifest |= {
        "native_abi_version": "0.2.3",
        "generator_version": "skippy-package 0.4.0",
        "created_at_unix_secs": 1_767_225_600,
    }
    with_canonical_id(manifest)
    files = [auditing.FileInfo(p, s, fake_sha256(p)) for p, s in sizes.items()]
    # v2 ingest reads shared/metadata.gguf only: it describes every tensor of the package.
    return Package(manifest, _with_housekeeping(files), {"shared/metadata.gguf": metadata})


def _with_housekeeping(files: list[auditing.FileInfo]) -> list[auditing.FileInfo]:
    return [
        auditing.FileInfo("model-package.json", 9_000),
        auditing.FileInfo(".gitattributes", 1_519),
        *files,
    ]


def speculative(package: Package) -> dict[str, Any]:
    """The package's generation.speculative_decoding, for tests that edit it in place."""
    value: dict[str, Any] = package.manifest["generation"]["speculative_decoding"]
    return value
