"""Detection edge cases (issue 9 item 8): DeepSeek-V4 NextN names, a block_count that leaves the MTP block
out (ik_llama #2256), and MTP-only GGUFs."""

from __future__ import annotations

from dataclasses import replace

from packages_app import audit as auditing
from tests.audit_fixtures import GLM47, Model, Package, block_tensors, build, header, mtp_generation

_DSV4_NEXTN = ("e_proj", "h_proj", "enorm", "hnorm", "hc_head_fn", "hc_head_base", "hc_head_scale")


def _dsv4_components(index: int) -> tuple[str, ...]:
    return (
        "attn_norm",
        "attn_q_a",
        "attn_kv_a_mqa",
        "attn_output",
        "ffn_gate_exps",
        "ffn_up_exps",
        "ffn_down_exps",
    )


DSV4 = Model(
    package="meshllm/DeepSeek-V4-Flash-UD-Q4_K_XL-layers",
    model_id="unsloth/DeepSeek-V4-Flash-GGUF:UD-Q4_K_XL",
    source_repo="unsloth/DeepSeek-V4-Flash-GGUF",
    primary_file="DeepSeek-V4-Flash-UD-Q4_K_XL.gguf",
    arch="deepseek4",
    block_count=44,
    nextn=1,
    nextn_tensors=_DSV4_NEXTN,
    components=_dsv4_components,
    vocab=129_280,
)


def codes(result: auditing.Audit) -> list[str]:
    return [p.code for p in result.problems]


def test_deepseek_v4_nextn_names_are_an_mtp_head() -> None:
    result = build(DSV4, 2).audit()

    assert result.verdict == "undeclared-mtp"
    assert result.detected.mtp_blocks == (43,)
    assert result.detected.expected_nextn_tensors == ("e_proj", "h_proj")
    assert result.detected.missing_nextn_tensors == {}
    assert "incomplete_mtp_head" not in codes(result)


def test_a_deepseek_v4_head_without_its_projections_is_incomplete() -> None:
    result = build(DSV4, 2, nextn=("enorm", "hnorm", "hc_head_fn")).audit()

    assert result.detected.missing_nextn_tensors == {43: ("e_proj", "h_proj")}
    assert "incomplete_mtp_head" in codes(result)


def _block_count_without_mtp(package: Package, model: Model) -> Package:
    """The GGUF says block_count = trunk only, with the MTP block appended past it (ik_llama #2256)."""
    for h in package.headers.values():
        h["kv"][f"{model.arch}.block_count"] = model.block_count - 1
    return package


def test_a_block_count_that_leaves_the_mtp_block_out_does_not_flag_a_trunk_block() -> None:
    result = _block_count_without_mtp(build(DSV4, 2), DSV4).audit()

    assert result.detected.block_count == 43
    assert result.detected.mtp_blocks == (43,)
    assert result.detected.key_and_tensors_agree is True
    assert result.verdict == "undeclared-mtp"
    for code in ("nextn_tensors_missing", "nextn_key_mismatch", "layer_count_mismatch"):
        assert code not in codes(result)
    assert result.suggested_generation is not None
    strategy = result.suggested_generation.generation["speculative_decoding"]["strategies"]["mtp"]
    assert strategy["layer_indices"] == [43]


def test_the_same_package_declared_is_consistent() -> None:
    result = _block_count_without_mtp(build(DSV4, 2, mtp_generation(2, [43])), DSV4).audit()

    assert result.verdict == "consistent-mtp"
    assert [r.outcome for r in result.runtime.rows if r.setting == "auto"] == ["native-mtp"]


def test_an_mtp_only_gguf_is_read_as_the_head_it_holds() -> None:
    head = header(GLM47, block_tensors(GLM47, 47))  # blk.47.* only, the NextN head included
    detected = auditing.detect(None, {"mtp-GLM-4.7-Flash-Q8_0.gguf": head})

    assert detected.mtp_blocks == (47,)
    assert detected.key_blocks == (47,)
    assert detected.key_and_tensors_agree is True


def test_an_mtp_only_gguf_whose_block_count_counts_only_its_head() -> None:
    head = header(replace(GLM47, block_count=1), block_tensors(GLM47, 47))
    detected = auditing.detect(None, {"mtp.gguf": head})

    assert detected.mtp_blocks == (47,)
    assert detected.key_blocks == (47,)
    assert detected.key_and_tensors_agree is True
