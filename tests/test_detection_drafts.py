"""Detection of the newer draft-MTP architectures (issue 20 item 5; docs/rules.md section 6a): cohere2moe,
glm-dsa and qwen4exp NextN heads, and NextN tensors without the nextn_predict_layers key those loaders read as
optional."""

from __future__ import annotations

import pytest
from gguf.constants import MODEL_ARCH, MODEL_TENSORS, TENSOR_NAMES

from packages_app import audit as auditing
from packages_app.audit import detection
from tests.audit_fixtures import GLM_NEXTN, QWEN35, Model, Package, build, mtp_generation

_MLA = ("attn_norm", "attn_q_a", "attn_q_a_norm", "attn_q_b", "attn_kv_a_mqa", "attn_kv_a_norm")
_MLA += ("attn_output",)
_INDEXER = ("indexer.k_norm", "indexer.proj", "indexer.attn_k", "indexer.attn_q_b")
_MOE = ("ffn_norm", "ffn_gate_inp", "ffn_gate_exps", "ffn_up_exps", "ffn_down_exps", "ffn_up_shexp")
_QWEN4_HC = ("hc_attn_norm", "hc_attn_down", "hc_attn_up", "hc_ffn_norm", "hc_ffn_down", "hc_ffn_up")
QWEN4_NEXTN = ("eh_proj", "enorm", "hnorm", "hc_head_norm", "hc_head_down", "hc_head_up")


def _glm_dsa_components(index: int) -> tuple[str, ...]:
    return (*_MLA, *_INDEXER, *_MOE)


def _cohere2moe_components(index: int) -> tuple[str, ...]:
    return ("attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", *_MOE)


def _qwen4exp_components(index: int) -> tuple[str, ...]:
    return (*_QWEN4_HC, "attn_q", "attn_k", "attn_v", "attn_output", *_MOE)


GLM_DSA = Model(
    package="meshllm/GLM-5.1-UD-Q4_K_XL-layers",
    model_id="unsloth/GLM-5.1-GGUF:UD-Q4_K_XL",
    source_repo="unsloth/GLM-5.1-GGUF",
    primary_file="GLM-5.1-UD-Q4_K_XL.gguf",
    arch="glm-dsa",
    block_count=79,
    nextn=1,
    nextn_tensors=GLM_NEXTN,
    components=_glm_dsa_components,
    vocab=154_880,
)
COHERE2MOE = Model(
    package="meshllm/Command-A-MoE-Q4_K_M-layers",
    model_id="example/Command-A-MoE-GGUF:Q4_K_M",
    source_repo="example/Command-A-MoE-GGUF",
    primary_file="Command-A-MoE-Q4_K_M.gguf",
    arch="cohere2moe",
    block_count=50,
    nextn=1,
    nextn_tensors=("eh_proj", "enorm", "hnorm", "shared_head_norm"),
    components=_cohere2moe_components,
    vocab=262_144,
)
QWEN4EXP = Model(
    package="meshllm/Qwen3.8-Flash-Next-UD-Q4_K_XL-layers",
    model_id="unsloth/Qwen3.8-Flash-Next-GGUF:UD-Q4_K_XL",
    source_repo="unsloth/Qwen3.8-Flash-Next-GGUF",
    primary_file="Qwen3.8-Flash-Next-UD-Q4_K_XL.gguf",
    arch="qwen4exp",
    block_count=49,
    nextn=1,
    nextn_tensors=QWEN4_NEXTN,
    components=_qwen4exp_components,
    vocab=248_320,
)


def codes(result: auditing.Audit) -> list[str]:
    return [p.code for p in result.problems]


def problem(result: auditing.Audit, code: str) -> auditing.Problem:
    return next(p for p in result.problems if p.code == code)


def without_nextn_key(package: Package, model: Model) -> Package:
    """The GGUF as a converter that leaves the optional key out writes it: NextN tensors, no key."""
    for h in package.headers.values():
        del h["kv"][f"{model.arch}.nextn_predict_layers"]
    return package


# --- the expected NextN tensors -----------------------------------------------------------------


def test_glm_dsa_expects_what_gguf_constants_list_for_it() -> None:
    nextn = [t for t in MODEL_TENSORS[MODEL_ARCH.GLM_DSA] if t.name.startswith("NEXTN")]
    listed = sorted(TENSOR_NAMES[t].rsplit(".", 1)[1] for t in nextn)

    assert auditing.expected_nextn_tensors("glm-dsa") == tuple(listed)
    assert detection.required_nextn_tensors("glm-dsa") == ("eh_proj", "enorm", "hnorm")


@pytest.mark.parametrize(
    ("arch", "expected"),
    [
        ("cohere2moe", ("eh_proj", "embed_tokens", "enorm", "hnorm", "shared_head_head", "shared_head_norm")),
        ("qwen4exp", ("eh_proj", "enorm", "hc_head_down", "hc_head_norm", "hc_head_up", "hnorm")),
    ],
)
def test_architectures_gguf_does_not_list_expect_what_llama_cpps_loader_creates(
    arch: str, expected: tuple[str, ...]
) -> None:
    assert arch not in {a.name.lower() for a in MODEL_ARCH}  # gguf 0.19: the fallback is what answers
    assert auditing.expected_nextn_tensors(arch) == expected
    assert detection.required_nextn_tensors(arch) == ("eh_proj", "enorm", "hnorm")


# --- NextN tensors present, key absent -----------------------------------------------------------


def test_a_qwen4exp_header_with_nextn_tensors_and_no_key_gets_its_own_finding() -> None:
    result = without_nextn_key(build(QWEN4EXP, 2, mtp_generation(2, [48])), QWEN4EXP).audit()

    assert result.detected.nextn_predict_layers is None
    assert result.detected.mtp_blocks == (48,)
    assert result.detected.key_and_tensors_agree is True
    assert "nextn_key_mismatch" not in codes(result)
    finding = problem(result, detection.NEXTN_KEY_ABSENT)
    assert finding.severity == "warning"
    assert "qwen4exp.nextn_predict_layers is absent" in finding.message
    assert "not a disagreement" in finding.message
    assert "blk.48.nextn.{eh_proj,enorm,hc_head_down,hc_head_norm,hc_head_up,hnorm}" in finding.message
    assert result.verdict == "consistent-mtp"


def test_the_same_shape_undeclared_is_still_undeclared_mtp_with_the_finding() -> None:
    result = without_nextn_key(build(QWEN4EXP, 2), QWEN4EXP).audit()

    assert result.verdict == "undeclared-mtp"
    assert detection.NEXTN_KEY_ABSENT in codes(result)
    assert "nextn_key_mismatch" not in codes(result)


def test_for_an_architecture_that_requires_the_key_it_stays_a_key_tensor_disagreement() -> None:
    # The control: qwen35moe's loader finds its MTP block through the key, so without it the head is ignored.
    result = without_nextn_key(build(QWEN35, 2, mtp_generation(2, [40])), QWEN35).audit()

    assert "nextn_key_mismatch" in codes(result)
    assert detection.NEXTN_KEY_ABSENT not in codes(result)
    assert result.detected.key_and_tensors_agree is False


def test_a_key_that_is_present_but_marks_other_blocks_is_still_a_disagreement() -> None:
    package = build(QWEN4EXP, 2, mtp_generation(2, [48]))
    for h in package.headers.values():
        h["kv"]["qwen4exp.nextn_predict_layers"] = 0

    result = package.audit()

    assert "nextn_key_mismatch" in codes(result)
    assert detection.NEXTN_KEY_ABSENT not in codes(result)


def test_the_finding_has_a_glossary_entry() -> None:
    assert "not a key/tensor disagreement" in detection.GLOSSARY[detection.NEXTN_KEY_ABSENT]


# --- incomplete heads -----------------------------------------------------------------------------


@pytest.mark.parametrize("model", [COHERE2MOE, GLM_DSA], ids=lambda m: m.arch)
def test_a_head_missing_a_required_nextn_tensor_is_reported(model: Model) -> None:
    mtp = model.block_count - 1
    result = build(model, 2, mtp_generation(2, [mtp]), nextn=("eh_proj", "enorm")).audit()

    assert result.detected.missing_nextn_tensors == {mtp: ("hnorm",)}
    message = problem(result, "incomplete_mtp_head").message
    assert f"blk.{mtp}.nextn.hnorm" in message and f"a {model.arch} NextN head" in message


@pytest.mark.parametrize("model", [COHERE2MOE, GLM_DSA], ids=lambda m: m.arch)
def test_a_head_with_the_required_tensors_is_complete(model: Model) -> None:
    # The control: llama.cpp creates embed_tokens, shared_head_head and shared_head_norm as optional.
    mtp = model.block_count - 1
    result = build(model, 2, mtp_generation(2, [mtp]), nextn=("eh_proj", "enorm", "hnorm")).audit()

    assert result.detected.missing_nextn_tensors == {}
    assert "incomplete_mtp_head" not in codes(result)
    assert result.verdict == "consistent-mtp"
