"""The assessment: one typed answer per revision, folder or manifest (headline, MTP, per-release admission
and outcomes), and the vocabulary it speaks, which has one owner (packages_app.verdicts)."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from packages_app.audit import FileInfo
from packages_app.audit.assessment import Assessment, Headline
from packages_app.audit.check import check_manifest
from packages_app.audit.release_tables import OutcomeGroup, ReleaseTable, release_tables, shared_outcomes
from packages_app.audit.releases import known_releases, release_for
from packages_app.verdicts import (
    STATUSES_BY_RANK,
    ActionKind,
    Cause,
    Status,
    Term,
    Tone,
    Verdict,
    _Vocabulary,
    status_of,
)
from tests.audit_fixtures import GLM47, LLAMA, NEMOTRON, QWEN35, build, mtp_generation, ngram_generation

CSS = Path(__file__).resolve().parent.parent / "static" / "packages_app" / "meshdash.css"
VOCABULARIES: list[type[_Vocabulary]] = [Status, Verdict, ActionKind, Cause]
NEWEST = known_releases()[-1].release


# --- the vocabulary has one owner, and every member is complete ---------------------------------


def vocabulary_gaps(vocabulary: type[_Vocabulary]) -> list[str]:
    """What a member lacks: a term, a label, a sentence, a known tone, an anchor; ranks must be 0..n-1."""
    gaps = []
    for member in vocabulary:
        try:
            term = member.term
        except KeyError:
            gaps.append(f"{member.value}: no term")
            continue
        if not term.label or not term.sentence.strip():
            gaps.append(f"{member.value}: no label or sentence")
        if term.tone not in Tone:
            gaps.append(f"{member.value}: tone {term.tone!r}")
        if not re.fullmatch(r"[a-z]+-[a-z0-9-]+", member.anchor):
            gaps.append(f"{member.value}: anchor {member.anchor!r}")
    ranks = sorted(m.term.rank for m in vocabulary if m.value in vocabulary._terms())
    if ranks != list(range(len(ranks))):
        gaps.append(f"ranks {ranks} are not 0..{len(ranks) - 1}")
    return gaps


@pytest.mark.parametrize("vocabulary", VOCABULARIES, ids=lambda v: v.__name__)
def test_every_member_of_the_vocabulary_has_a_label_rank_tone_sentence_and_anchor(
    vocabulary: type[_Vocabulary],
) -> None:
    assert vocabulary_gaps(vocabulary) == []


def test_the_vocabulary_walk_fails_on_a_member_that_lacks_a_term() -> None:
    class Planted(_Vocabulary):
        KNOWN = "known"
        FORGOTTEN = "forgotten"

        @classmethod
        def _kind(cls) -> str:
            return "planted"

        @classmethod
        def _terms(cls) -> dict[str, Term]:
            return {"known": Term("known", 0, Tone.GOOD, "A member with its term.")}

    assert vocabulary_gaps(Planted) == ["forgotten: no term"]


def test_every_tone_has_a_css_rule_so_every_badge_is_coloured() -> None:
    css = CSS.read_text()
    for tone in Tone:
        assert f".tone-{tone.value} {{" in css, tone


def test_a_stored_status_this_version_does_not_know_reads_as_not_assessed() -> None:
    assert status_of("serves-mtp") is Status.SERVES_MTP
    assert status_of("from-a-newer-meshdash") is Status.NOT_ASSESSED
    assert status_of("") is Status.NOT_ASSESSED


def test_statuses_by_rank_put_what_needs_action_first() -> None:
    needing = [s for s in STATUSES_BY_RANK if s.needs_action]
    assert STATUSES_BY_RANK[: len(needing)] == tuple(needing)
    assert STATUSES_BY_RANK[-1] is Status.NOT_ASSESSED


# --- headlines, judged on the newest known release ------------------------------------------------


def assessment_of(package: object) -> Assessment:
    result = package.audit()  # type: ignore[attr-defined]
    assert result.assessment is not None
    return result.assessment


def test_the_motivating_v1_package_is_not_servable_and_must_be_republished_as_package_v2() -> None:
    a = assessment_of(build(QWEN35, 1))
    assert a.status is Status.NOT_SERVABLE
    assert a.headline.release == NEWEST
    assert a.headline.action.kind is ActionKind.REPUBLISH_V2
    assert "layer 40" in a.headline.action.text and "package-v2" in a.headline.action.text
    assert a.mtp.verdict is Verdict.UNDECLARED_MTP and a.mtp.blocks == (40,)
    # The release that served schema v1 is named, and the newest refuses every setting.
    assert a.admitting_releases == ["v0.72.1"]
    assert {r.outcome for r in next(o for o in a.outcomes if o.release == NEWEST).rows} == {"refused"}


def test_on_the_release_that_served_v1_auto_decodes_without_mtp_as_the_motivating_node_did() -> None:
    a = assessment_of(build(QWEN35, 1))
    auto = a.outcome("v0.72.1", "auto")
    assert auto is not None and auto.outcome == "no-mtp"


def test_a_v2_package_with_undeclared_mtp_serves_with_its_mtp_weights_unused() -> None:
    a = assessment_of(build(QWEN35, 2))
    assert a.status is Status.MTP_UNUSED
    assert a.headline.action.kind is ActionKind.APPLY_PATCH
    assert "recomputes package_id" in a.headline.action.text
    assert "layer 40" in a.headline.sentence


def test_a_v2_package_that_declares_its_block_serves_with_mtp_and_needs_nothing() -> None:
    a = assessment_of(build(QWEN35, 2, mtp_generation(2, [40])))
    assert a.status is Status.SERVES_MTP
    assert a.headline.action.kind is ActionKind.NOTHING
    assert not a.status.needs_action


def test_a_dense_model_without_mtp_serves_with_nothing_to_enable() -> None:
    a = assessment_of(build(LLAMA, 2))
    assert a.status is Status.SERVES_NO_MTP
    assert a.mtp.detected is False


def test_a_declaration_naming_the_wrong_block_fails_at_load_and_the_patch_corrects_it() -> None:
    a = assessment_of(build(GLM47, 2, mtp_generation(2, [46])))
    assert a.status is Status.FAILS_AT_LOAD
    assert a.headline.action.kind is ActionKind.APPLY_PATCH
    assert "corrects the declaration" in a.headline.action.text


def test_a_declaration_whose_weights_are_gone_fails_at_load_and_says_to_drop_it() -> None:
    a = assessment_of(build(GLM47, 2, mtp_generation(2, [47]), nextn=()))
    assert a.status is Status.FAILS_AT_LOAD
    assert a.headline.action.kind is ActionKind.FIX_DECLARATION


def test_mtp_declared_beside_an_ngram_default_leaves_the_weights_unused_and_names_the_setting() -> None:
    generation = mtp_generation(2, [40])
    speculative = generation["speculative_decoding"]
    speculative["strategies"] |= ngram_generation()["speculative_decoding"]["strategies"]
    speculative["proposers"] = {
        **speculative.get("proposers", {}),
        **ngram_generation()["speculative_decoding"].get("proposers", {}),
    }
    speculative["default"] = "ngram-cache"
    a = assessment_of(build(QWEN35, 2, generation))
    assert a.status is Status.MTP_UNUSED
    assert a.headline.action.kind is ActionKind.SET_STRATEGY
    assert 'speculative.strategy = "mtp"' in a.headline.action.text


def test_files_that_disagree_with_the_manifest_get_their_own_status_and_the_path() -> None:
    package = build(LLAMA, 2)
    path = "layers/layer-00007.gguf"
    files = [f if f.path != path else dataclasses.replace(f, lfs_sha256="f" * 64) for f in package.files]
    a = dataclasses.replace(package, files=files).audit().assessment
    assert a is not None and a.status is Status.FILES_MISMATCH
    assert a.headline.action.kind is ActionKind.FIX_MANIFEST and path in a.headline.action.text


def test_a_manifest_that_does_not_parse_is_invalid_and_the_action_names_the_code() -> None:
    package = build(NEMOTRON, 2, mtp_generation(2, [88]))
    raw = dict(package.manifest)
    raw["speculative_decoding"] = raw.pop("generation")
    a = package.with_manifest(raw).audit().assessment
    assert a is not None and a.status is Status.INVALID_MANIFEST
    assert a.headline.action.kind is ActionKind.FIX_MANIFEST
    assert "invalid_manifest_json" in a.headline.sentence


def test_no_manifest_at_all_is_an_invalid_manifest_that_says_so() -> None:
    from packages_app.audit import audit

    a = audit(None, [FileInfo("README.md", 10)], {}).assessment
    assert a is not None and a.status is Status.INVALID_MANIFEST
    assert "no model-package.json" in a.headline.sentence


# --- a manifest alone says what it cannot see -----------------------------------------------------


def test_a_valid_manifest_alone_is_never_called_servable_because_the_weights_were_not_read() -> None:
    manifest = json.dumps(build(QWEN35, 2).manifest).encode()
    check = check_manifest(manifest, source="meshllm/Qwen3.5-35B-A3B-UD-Q4_K_XL-layers")
    a = check.assessment
    assert check.valid and check.passes
    assert a.status is Status.WEIGHTS_UNREAD and a.scope == "manifest"
    assert "weights were not read" in a.headline.sentence
    assert a.headline.action.kind is ActionKind.READ_WEIGHTS
    assert (
        a.headline.action.command
        == "python manage.py audit_package meshllm/Qwen3.5-35B-A3B-UD-Q4_K_XL-layers"
    )
    assert a.mtp.verdict is None and a.mtp.detected is None
    assert any("weights" in item for item in a.cannot_see)


def test_a_v1_manifest_alone_is_not_servable_and_does_not_pass() -> None:
    check = check_manifest(json.dumps(build(QWEN35, 1).manifest).encode())
    assert check.valid and not check.passes
    assert check.assessment.status is Status.NOT_SERVABLE


# --- stored as JSON, read back typed ---------------------------------------------------------------


@pytest.mark.parametrize(
    "package",
    [build(QWEN35, 1), build(QWEN35, 2), build(GLM47, 2, mtp_generation(2, [46])), build(LLAMA, 2)],
    ids=["v1-undeclared", "v2-undeclared", "glm-mismatch", "llama"],
)
def test_an_assessment_reads_back_from_its_json_unchanged(package: object) -> None:
    a = assessment_of(package)
    stored = json.loads(json.dumps(a.to_json()))
    assert Assessment.from_json(stored) == a


@pytest.mark.parametrize("stored", [None, [], "text", {}, {"headline": {"status": "serves-mtp"}}])
def test_a_missing_or_malformed_stored_assessment_reads_as_none(stored: object) -> None:
    assert Assessment.from_json(stored) is None


def test_junk_inside_a_stored_assessment_is_dropped_not_raised() -> None:
    doc = assessment_of(build(QWEN35, 2)).to_json()
    doc["servable"].append({"release": 7})
    doc["outcomes"].append("nonsense")
    doc["mtp"]["blocks"] = [40, "x", True]
    a = Assessment.from_json(doc)
    assert a is not None and a.mtp.blocks == (40,)
    assert len(a.servable) == len(known_releases())


def test_a_headline_from_a_newer_vocabulary_reads_as_none_so_the_page_says_not_assessed() -> None:
    doc = assessment_of(build(QWEN35, 2)).headline.to_json()
    doc["status"] = "teleports"
    assert Headline.from_json(doc) is None


# --- release tables collapse what behaves the same -----------------------------------------------


def test_releases_that_refuse_for_the_same_reason_share_one_row_with_every_setting() -> None:
    tables = release_tables(assessment_of(build(QWEN35, 1)))
    refusing = [t for t in tables if t.admitted is False]
    assert len(refusing) == 1 and set(refusing[0].releases) == {
        r.release for r in known_releases() if not r.serves_v1
    }
    assert len(refusing[0].groups) == 1


def test_a_release_names_a_node_version_exactly() -> None:
    assert release_for("0.72.1") == "v0.72.1" == release_for("v0.72.1") == release_for(" mesh-llm 0.72.1")
    assert release_for("0.72.1-rc1") is None and release_for("") is None


NGRAM_WHY = "no package strategy is named ngram-cache"


def release_table(release: str, admitted: bool | None, *groups: OutcomeGroup) -> ReleaseTable:
    return ReleaseTable((release,), admitted, "why", groups)


def test_settings_with_one_outcome_share_a_line_and_keep_a_reason_only_when_they_share_it() -> None:
    table = release_table(
        "v0.78.0",
        True,
        OutcomeGroup(("auto", "mtp"), "native-mtp", "mtp is declared"),
        OutcomeGroup(("ngram-cache",), "refused", NGRAM_WHY),
        OutcomeGroup(("ngram-suffix",), "refused", "another reason"),
    )
    assert table.settings == 4
    assert table.by_outcome == (
        OutcomeGroup(("auto", "mtp"), "native-mtp", "mtp is declared"),
        OutcomeGroup(("ngram-cache", "ngram-suffix"), "refused", ""),
    )


def test_outcomes_every_loading_release_agrees_on_are_shown_once() -> None:
    same = (OutcomeGroup(("auto",), "no-mtp", "x"), OutcomeGroup(("mtp",), "refused", "y"))
    tables = [release_table("v0.76.1", True, *same), release_table("v0.78.0", None, *same)]
    refusing = release_table("v0.79.0", False)
    assert shared_outcomes([*tables, refusing]) == same


def test_control_releases_that_differ_or_a_single_release_have_no_shared_outcomes() -> None:
    a = release_table("v0.76.1", True, OutcomeGroup(("auto",), "no-mtp", "x"))
    b = release_table("v0.78.0", True, OutcomeGroup(("auto",), "native-mtp", "x"))
    assert shared_outcomes([a, b]) == ()
    assert shared_outcomes([a]) == ()
