"""The resolver as it is now (issue 41 item 4; docs/rules.md section 6b): `dflash` in the strategies and the
refusal text; the table's stated assumptions, a typed value stored with the assessment; and a package that
ships a *draft*/*eagle* GGUF with NextN tensors judged as mesh-llm judges an MTP sidecar."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from packages_app import audit as auditing
from packages_app.audit.assessment import Assessment
from packages_app.audit.model import ResolverAssumptions
from packages_app.audit.runtime import OPERATOR_SETTINGS
from packages_app.verdicts import ActionKind, Status
from tests.audit_fixtures import QWEN35, Package, block_tensors, build, fake_sha256, header, mtp_generation

# The trunk of Qwen3.5-35B-A3B without its MTP block (40 blocks), and the MTP head as a GGUF of its own.
TRUNK = replace(QWEN35, block_count=40, nextn=None)


def with_draft(package: Package, path: str, nextn: bool = True, listed: bool = True) -> Package:
    """The package with one more GGUF: blk.40 of Qwen3.5 (with its NextN tensors, or without)."""
    tensors = block_tensors(QWEN35, 40, None if nextn else ())
    head = header(QWEN35, tensors)
    files = [*package.files, auditing.FileInfo(path, 900_000_000, fake_sha256(path))]
    manifest = json.loads(json.dumps(package.manifest))
    if listed:
        entry = {"id": "mtp-draft", "path": path, "byte_size": 900_000_000, "sha256": fake_sha256(path)}
        manifest["artifact_catalog"]["entries"].append(entry)
    return replace(package, files=files, headers={**package.headers, path: head}).with_manifest(manifest)


def rows(result: Any) -> dict[str, Any]:
    return {r.setting: r for r in result.runtime.rows}


# --- dflash ------------------------------------------------------------------------------------------


def test_dflash_is_a_setting_of_the_table_and_never_runs_native_mtp() -> None:
    table = rows(build(QWEN35, 2, mtp_generation(2, [40])).audit())

    assert "dflash" in OPERATOR_SETTINGS
    assert table["dflash"].outcome == "refused"
    assert "requires a draft_model whose GGUF architecture is dflash" in table["dflash"].why
    assert "never native MTP" in table["dflash"].why


def test_the_refusal_of_an_undeclared_name_lists_dflash_as_mesh_llm_does() -> None:
    table = rows(build(QWEN35, 2).audit())
    assert table["native-mtp-n1"].outcome == "refused"
    assert "auto, disabled, mtp, ngram-cache, ngram-suffix, dflash, or a strategy declared" in (
        table["native-mtp-n1"].why
    )


# --- the assumptions ---------------------------------------------------------------------------------


def test_the_table_states_its_assumptions_and_the_assessment_keeps_them_typed() -> None:
    result = build(QWEN35, 2, mtp_generation(2, [40])).audit()
    assessment = result.assessment
    assert assessment is not None

    assumed = assessment.assumptions
    assert assumed == ResolverAssumptions()  # default config, balanced, spec_default, no sidecar, no gate
    assert (assumed.operator_config, assumed.serving_strategy) == ("default", "balanced")
    assert assumed.spec_default is True and assumed.gate_tripped is False and assumed.sidecar == ""
    text = " ".join(assumed.sentences())
    for phrase in (
        "default operator config",
        "spec_default is true",
        "No MTP draft sidecar",
        "break-even gate",
    ):
        assert phrase in text
    stored = Assessment.from_json(json.loads(json.dumps(assessment.to_json())))
    assert stored is not None and stored.assumptions == assumed


def test_an_assessment_stored_before_the_assumptions_reads_back_with_the_defaults() -> None:
    doc = build(QWEN35, 2).audit().assessment.to_json()
    del doc["assumptions"]
    stored = Assessment.from_json(doc)
    assert stored is not None and stored.assumptions == ResolverAssumptions()
    hostile = Assessment.from_json(doc | {"assumptions": {"spec_default": "no", "sidecar": 7}})
    assert hostile is not None and hostile.assumptions == ResolverAssumptions()


# --- the MTP draft sidecar ----------------------------------------------------------------------------


def test_a_draft_gguf_with_nextn_tensors_is_an_mtp_sidecar_only_explicit_mtp_runs() -> None:
    result = with_draft(build(TRUNK, 2), "Qwen3.5-35B-A3B-MTP-draft-Q8_0.gguf").audit()

    assert result.detected.mtp_blocks == ()  # the sidecar's tensors are not the package's blocks
    assert result.detected.sidecar == "Qwen3.5-35B-A3B-MTP-draft-Q8_0.gguf"
    assert result.detected.sidecar_mtp_blocks == (40,)
    table = rows(result)
    assert table["mtp"].outcome == "native-mtp" and "through the MTP sidecar" in table["mtp"].why
    assert "pairing_fault warn_disable" in table["mtp"].why
    assert table["auto"].outcome == "no-mtp" and "does not run the MTP sidecar" in table["auto"].why
    assert "mtp_sidecar" in result.codes()
    headline = result.assessment.headline
    assert headline.status is Status.MTP_UNUSED and headline.action.kind is ActionKind.SET_STRATEGY
    assert 'speculative.strategy = "mtp"' in headline.action.text
    assert result.assessment.assumptions.sidecar == "Qwen3.5-35B-A3B-MTP-draft-Q8_0.gguf"


def test_an_eagle_gguf_counts_as_a_draft_too_and_a_head_under_another_name_does_not() -> None:
    eagle = with_draft(build(TRUNK, 2), "eagle3-Qwen3.5-35B-A3B.gguf").audit()
    assert eagle.detected.sidecar == "eagle3-Qwen3.5-35B-A3B.gguf"
    # The control: the same head under a name mesh-llm does not take for a draft is the package's own MTP
    # block, undeclared.
    head = with_draft(build(TRUNK, 2), "Qwen3.5-35B-A3B-MTP-head-Q8_0.gguf").audit()
    assert head.detected.sidecar is None and head.detected.mtp_blocks == (40,)
    assert head.verdict == "undeclared-mtp" and rows(head)["mtp"].outcome == "refused"


def test_a_draft_without_nextn_tensors_or_not_shipped_runs_no_mtp() -> None:
    plain = with_draft(build(TRUNK, 2), "Qwen3.5-0.8B-draft-Q8_0.gguf", nextn=False).audit()
    unlisted = with_draft(build(TRUNK, 2), "Qwen3.5-35B-A3B-MTP-draft-Q8_0.gguf", listed=False).audit()

    for result in (plain, unlisted):
        assert rows(result)["mtp"].outcome == "refused"
        assert result.assessment.status is Status.SERVES_NO_MTP
    assert unlisted.detected.mtp_blocks == ()  # still a separate draft model, not the package's block
    assert "unlisted_file" in unlisted.codes()


def test_a_package_that_declares_mtp_and_ships_a_sidecar_says_the_pairing_can_turn_it_off() -> None:
    declared = with_draft(build(QWEN35, 2, mtp_generation(2, [40])), "mtp-draft.gguf").audit()

    auto = rows(declared)["auto"]
    assert auto.outcome == "native-mtp" and "through the sidecar mtp-draft.gguf" in auto.why
    assert declared.assessment.status is Status.SERVES_MTP
