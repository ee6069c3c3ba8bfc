"""The resolver table (docs/rules.md section 5) and the release matrix (section 6), one manifest per row."""

from __future__ import annotations

import json
from typing import Any

import pytest

from packages_app.audit.model import Resolution
from packages_app.audit.releases import Release, compatibility, known_releases, parse_releases
from packages_app.audit.runtime import resolve
from packages_app.manifest import ManifestResult, parse_manifest
from packages_app.manifest.identity import package_id_of
from tests.test_rulebook import _composite_sd, _defaults, _ngram_sd, _publisher, native, v1_base, v2_base

Doc = dict[str, Any]


def judged(sd: Doc | None = None, **top: Any) -> ManifestResult:
    doc = v2_base()
    if sd is not None:
        doc["generation"] = {"speculative_decoding": sd}
    doc |= top
    doc["package_id"] = package_id_of(doc)
    return parse_manifest(json.dumps(doc).encode())


def table(result: ManifestResult) -> dict[str, Resolution]:
    return {r.setting: r for r in resolve(result).rows}


def outcome(result: ManifestResult, setting: str) -> str:
    return table(result)[setting].outcome


def mtp(depth: int = 1, name: str = "mtp") -> Doc:
    return {"default": name, "strategies": {name: native([1], depth)}}


def via_proposer(depth: int) -> Doc:
    return {
        "default": "mtp",
        "proposers": {"head": native([1], depth)},
        "strategies": {"mtp": {"type": "native-mtp", "proposer": "head"}},
    }


# --- auto -------------------------------------------------------------------------------------


def test_auto_without_a_declaration_is_no_mtp_and_says_a_package_load_has_no_local_gguf() -> None:
    row = table(judged())["auto"]

    assert row.outcome == "no-mtp"
    assert "no local GGUF to prove MTP" in row.why


def test_auto_with_a_native_mtp_default_of_depth_1_runs_native_mtp() -> None:
    assert outcome(judged(mtp()), "auto") == "native-mtp"


@pytest.mark.parametrize("sd", [mtp(depth=2), via_proposer(2)], ids=["inline", "proposer"])
def test_auto_with_a_native_mtp_default_of_depth_2_fails_at_load_in_both_forms(sd: Doc) -> None:
    row = table(judged(sd))["auto"]

    assert row.outcome == "load-fails"
    assert "not valid for the embedded runtime" in row.why


def test_auto_with_a_composite_default_runs_native_mtp_plus_ngram() -> None:
    row = table(judged(_composite_sd()))["auto"]

    assert row.outcome == "native-mtp"
    assert "native-mtp+cache" in row.why


def test_auto_with_an_ngram_default_runs_ngram_without_mtp() -> None:
    assert outcome(judged(_ngram_sd()), "auto") == "no-mtp"


def test_auto_with_an_ngram_cache_window_above_4_fails_at_load() -> None:
    assert outcome(judged(_ngram_sd(ngram_max=6)), "auto") == "load-fails"


# --- mtp --------------------------------------------------------------------------------------


def test_mtp_selects_only_a_strategy_keyed_exactly_mtp() -> None:
    assert outcome(judged(mtp()), "mtp") == "native-mtp"
    assert outcome(judged(mtp(name="native-mtp-n1")), "mtp") == "refused"
    assert outcome(judged(mtp(name="fast")), "mtp") == "refused"


def test_mtp_without_a_declaration_is_refused_for_want_of_proven_support() -> None:
    assert "requires proven native MTP support" in table(judged())["mtp"].why


def test_mtp_keyed_inline_with_depth_2_is_refused_but_via_a_proposer_fails_at_load() -> None:
    assert outcome(judged(mtp(depth=2)), "mtp") == "refused"
    assert outcome(judged(via_proposer(2)), "mtp") == "load-fails"


# --- disabled, ngram-*, declared names, anything else ------------------------------------------


@pytest.mark.parametrize("sd", [None, mtp(), _composite_sd()])
def test_disabled_clears_everything(sd: Doc | None) -> None:
    assert outcome(judged(sd), "disabled") == "no-mtp"


def test_ngram_cache_without_a_package_strategy_of_that_name_needs_operator_bounds() -> None:
    row = table(judged(mtp()))["ngram-cache"]

    assert row.outcome == "refused"
    assert "requires both ngram_min and ngram_max" in row.why


def test_ngram_cache_uses_the_package_strategy_of_the_same_name() -> None:
    assert outcome(judged(_ngram_sd()), "ngram-cache") == "no-mtp"


def test_each_declared_strategy_name_is_a_row() -> None:
    sd = _composite_sd()
    sd["strategies"]["plain"] = native([1])
    rows = table(judged(sd))

    assert rows["mtp-cache"].outcome == "native-mtp"
    assert rows["plain"].outcome == "native-mtp"


def test_an_undeclared_name_is_refused() -> None:
    row = table(judged(mtp()))["native-mtp-n1"]

    assert row.outcome == "refused"
    assert "must be auto, disabled, mtp, ngram-cache, ngram-suffix, dflash, or a strategy declared" in row.why


def test_a_v1_package_resolves_like_any_other_where_a_release_loads_it() -> None:
    # Whether a release loads schema v1 is the release matrix's answer (v0.72.1 did; none since PR
    # #1693); the resolver table says what a release that loads it does with each setting.
    doc = v1_base()
    doc["generation"] = {"speculative_decoding": mtp()}
    table = resolve(parse_manifest(json.dumps(doc).encode()))

    auto, disabled = table.row("auto"), table.row("disabled")
    assert auto is not None and auto.outcome == "native-mtp"
    assert disabled is not None and disabled.outcome == "no-mtp"


def test_an_invalid_manifest_fails_every_load() -> None:
    doc = v2_base()  # package_id "" never matches
    rows = resolve(parse_manifest(json.dumps(doc).encode())).rows

    assert {r.outcome for r in rows} == {"load-fails"}


def test_the_table_says_what_is_not_pinned_down() -> None:
    assert any("not pinned down" in note for note in resolve(judged()).uncertain)


# --- releases ---------------------------------------------------------------------------------


# A release without PR #1959's ABI check, as the catch-all row used to stand for one: no row of the real table
# is pinned down to it any more (docs/rules.md section 7), so the rule is exercised on this row.
AFTER_1959 = Release("after PR #1959", "any", "", False, True, True, "test")


def matrix(
    result: ManifestResult, releases: tuple[Release, ...] | None = None
) -> dict[str, tuple[bool | None, str]]:
    return {a.release: (a.admitted, a.why) for a in compatibility(result, releases)}


def with_after_1959(result: ManifestResult) -> dict[str, tuple[bool | None, str]]:
    return matrix(result, (*known_releases(), AFTER_1959))


def test_the_release_file_lists_the_releases_up_to_v0_78_0_and_no_catch_all_row() -> None:
    rows = {r.release: r for r in known_releases()}

    assert rows["v0.76.2"].abi_rule == "equal" and rows["v0.78.0"].runtime_abi == "0.1.66"
    assert "after PR #1959" not in rows


@pytest.mark.parametrize(
    ("abi", "admitted_by_0762"), [("0.1.53", True), ("0.1.54", False), ("0.1.57", False)]
)
def test_before_pr_1959_only_the_runtimes_own_abi_is_admitted(abi: str, admitted_by_0762: bool) -> None:
    rows = with_after_1959(judged(native_abi_version=abi))

    assert rows["v0.76.2"][0] is admitted_by_0762
    assert rows["after PR #1959"][0] is True
    if not admitted_by_0762:
        assert f"native ABI {abi} differs from runtime ABI 0.1.53" in rows["v0.76.2"][1]


def test_v0_78_0_admits_any_abi_and_says_the_rule_is_inferred() -> None:
    for abi in ("0.1.53", "0.1.66", "99.0.0"):
        admitted, why = matrix(judged(native_abi_version=abi))["v0.78.0"]
        assert admitted is True and "any ABI" in why and "inferred" in why


def test_a_build_whose_abi_rule_is_not_pinned_down_admits_only_its_own_abi() -> None:
    rows = {a.release: a for a in compatibility(judged(native_abi_version="0.1.59"))}
    assert rows["mesh-llm@173b7cd6"].admitted is True
    admitted, why = matrix(judged(native_abi_version="0.1.53"))["mesh-llm@173b7cd6"]
    assert admitted is None and "not pinned down" in why and "PR #1959" in why


def test_request_defaults_are_refused_by_v0_76_1_and_unknown_for_v0_76_2() -> None:
    rows = with_after_1959(judged(generation={"request_defaults": _defaults()}))

    assert rows["v0.76.1"][0] is False and "unknown field" in rows["v0.76.1"][1]
    assert rows["v0.76.2"][0] is None and "not pinned down" in rows["v0.76.2"][1]
    assert rows["after PR #1959"][0] is True
    assert rows["v0.78.0"][0] is True


def test_a_known_refusal_wins_over_a_field_whose_parsing_is_not_pinned_down() -> None:
    rows = matrix(judged(native_abi_version="0.1.54", generation={"request_defaults": _defaults()}))

    assert rows["v0.76.2"][0] is False and "native ABI 0.1.54 differs" in rows["v0.76.2"][1]


def test_only_the_release_before_pr_1693_serves_a_v1_package() -> None:
    rows = matrix(parse_manifest(json.dumps(v1_base()).encode()))

    assert {name for name, (admitted, _) in rows.items() if admitted is not False} == {"v0.72.1"}
    assert rows["v0.72.1"][0] is True and "schema v1" in rows["v0.72.1"][1]
    assert all("offline-only" in why for name, (_, why) in rows.items() if name != "v0.72.1")


def test_whether_the_release_before_pr_1693_loads_package_v2_is_not_pinned_down() -> None:
    rows = matrix(judged())

    assert rows["v0.72.1"][0] is None and "not pinned down" in rows["v0.72.1"][1]


def test_publisher_metadata_is_admitted_after_pr_1959() -> None:
    doc = v2_base()
    _publisher()(doc)
    doc["package_id"] = package_id_of(doc)

    rows = with_after_1959(parse_manifest(json.dumps(doc).encode()))
    assert rows["after PR #1959"][0] is True and rows["v0.78.0"][0] is True


def test_adding_a_release_is_one_row() -> None:
    text = (
        'release = "v9.9.9"\nabi_rule = "equal"\nruntime_abi = "0.1.57"\nserves_v1 = false\n'
        'request_defaults = true\npublisher_metadata = true\nsource = "test"\n'
    )
    releases = parse_releases("[[release]]\n" + text)

    assert releases == (Release("v9.9.9", "equal", "0.1.57", False, True, True, "test"),)
    admitted = compatibility(judged(native_abi_version="0.1.57"), releases)
    assert [(a.release, a.admitted) for a in admitted] == [("v9.9.9", True)]


def test_a_malformed_release_row_is_refused() -> None:
    with pytest.raises(ValueError, match="abi_rule"):
        parse_releases('[[release]]\nrelease = "x"\nabi_rule = "loose"\n')


def test_the_refused_by_key_names_releases_that_refuse_to_load_or_to_split() -> None:
    from packages_app.audit.releases import refused_key

    matrix = [
        {"release": "v1", "admitted": False, "why": "."},
        {"release": "v2", "admitted": True, "why": ".", "split": {"admitted": False, "why": "gate"}},
        {"release": "v3", "admitted": True, "why": ".", "split": {"admitted": None, "why": "?"}},
    ]
    assert refused_key(matrix) == "|v1|v2|"
