"""A node judged against its own mesh-llm release: refused, contradicting the audit, MTP left unused,
outdated, uncertified, or on a release the matrix does not know (which never raises a contradiction)."""

from __future__ import annotations

import itertools

import pytest

from packages_app.audit.advice import Newer, NodeFacts, Observed, advise, strategy_can_change_cause
from packages_app.audit.assessment import Assessment
from packages_app.audit.releases import known_releases
from packages_app.verdicts import Cause, Status
from tests.audit_fixtures import LLAMA, QWEN35, build, mtp_generation

NEWEST = known_releases()[-1].release
NEWEST_VERSION = NEWEST.removeprefix("v")
FIXED_SHA = "e" * 40


def assessment(package: object) -> Assessment:
    a = package.audit().assessment  # type: ignore[attr-defined]
    assert a is not None
    return a


V1_UNDECLARED = assessment(build(QWEN35, 1))
V2_DECLARED = assessment(build(QWEN35, 2, mtp_generation(2, [40])))
V2_UNDECLARED = assessment(build(QWEN35, 2))


def test_the_motivating_node_on_the_release_that_served_v1_is_told_its_mtp_was_unused_and_the_fix() -> None:
    facts = NodeFacts("demo-qwen", "0.72.1", "auto", "disabled", unused=True)
    advice = advise(V1_UNDECLARED, facts, Newer(FIXED_SHA, Status.SERVES_MTP))
    assert advice.cause is Cause.MTP_UNUSED and advice.needs_action
    assert advice.release == "v0.72.1" and advice.predicted == ""
    assert advice.text == (
        "MTP weights unused: requested auto, ran disabled, as the manifest predicts: it declares no MTP and "
        "the node confirms it — run eeeeeeee (serves with MTP)"
    )
    assert advice.observed == Observed.MANIFEST


def test_a_fix_its_release_does_not_load_names_the_release_to_run_it_on() -> None:
    """Issue 45: "run 51e4f78e" to a node on 0.72.1 named neither that the revision needs v0.78.0."""
    fixed = V2_DECLARED
    admitted = tuple(s.release for s in fixed.servable if s.admitted)
    refused = tuple(s.release for s in fixed.servable if s.admitted is False)
    assert "v0.72.1" not in admitted and NEWEST in admitted
    facts = NodeFacts("demo-qwen", "0.72.1", "auto", "disabled", unused=True)
    advice = advise(V1_UNDECLARED, facts, Newer(FIXED_SHA, Status.SERVES_MTP, admitted, refused))
    first = next(r.release for r in known_releases() if r.release in admitted)
    assert advice.text.endswith(
        f"run eeeeeeee (serves with MTP) on mesh-llm {first} (v0.72.1 is not known to load it)"
    )
    outdated = advise(
        V1_UNDECLARED,
        NodeFacts("q", "0.72.1", "auto", "disabled"),
        Newer(FIXED_SHA, Status.SERVES_MTP, admitted, refused),
    )
    assert outdated.cause is Cause.OUTDATED and f"on mesh-llm {first}" in outdated.text
    on_newest = advise(
        V1_UNDECLARED,
        NodeFacts("q", NEWEST_VERSION, ran=False),
        Newer(FIXED_SHA, Status.SERVES_MTP, admitted, refused),
    )
    assert "on mesh-llm" not in on_newest.text  # its own release loads the fix: nothing to add


def test_running_what_the_release_predicts_is_no_contradiction() -> None:
    facts = NodeFacts("demo-qwen", "0.72.1", "auto", "disabled")
    assert advise(V1_UNDECLARED, facts).cause is Cause.OK


def test_a_node_that_ran_what_its_release_refuses_contradicts_the_audit_and_names_everything() -> None:
    facts = NodeFacts("gpu-1", NEWEST_VERSION, "auto", "disabled")
    advice = advise(V1_UNDECLARED, facts)
    assert advice.cause is Cause.CONTRADICTION
    for part in ("gpu-1", f"mesh-llm {NEWEST_VERSION} ({NEWEST})", "speculative.strategy auto", "refused"):
        assert part in advice.text
    assert "it ran without MTP" in advice.text or "disabled" in advice.text


def test_predicted_native_mtp_that_ran_disabled_is_a_contradiction() -> None:
    advice = advise(V2_DECLARED, NodeFacts("gpu-1", NEWEST_VERSION, "auto", "disabled", unused=True))
    assert advice.cause is Cause.CONTRADICTION
    assert "predicted native MTP, but it ran disabled" in advice.text


def test_predicted_no_mtp_that_ran_native_mtp_is_a_contradiction() -> None:
    advice = advise(V2_UNDECLARED, NodeFacts("gpu-1", NEWEST_VERSION, "auto", "native-mtp", mtp_used=True))
    assert advice.cause is Cause.CONTRADICTION and "predicted no MTP" in advice.text


def test_a_release_the_matrix_does_not_know_never_raises_a_contradiction() -> None:
    advice = advise(V1_UNDECLARED, NodeFacts("old-box", "0.64.0", "auto", "native-mtp", mtp_used=True))
    assert advice.cause is Cause.UNKNOWN_RELEASE and not advice.needs_action
    assert "mesh-llm 0.64.0 is not in the release matrix" in advice.text
    # A build's label (a row of kind "build" has no version a node reports) is named once, not twice.
    build = advise(V1_UNDECLARED, NodeFacts("dev-box", "mesh-llm@00caec16", "auto", "disabled"))
    assert build.cause is Cause.UNKNOWN_RELEASE
    assert build.text.startswith("mesh-llm@00caec16 is not in the release matrix")


def test_a_registered_run_its_release_refuses_is_told_which_release_to_upgrade_to() -> None:
    llama = assessment(build(LLAMA, 2))  # native ABI 0.2.3: the releases comparing ABIs refuse it
    advice = advise(llama, NodeFacts("demo-llama", "0.76.2", ran=False))
    assert advice.cause is Cause.REFUSED
    assert advice.text.startswith("Refused by your release v0.76.2: package-v2 native ABI 0.2.3 differs")
    assert advice.text.endswith(f"Upgrade mesh-llm to {NEWEST}.")


def test_a_release_that_refuses_a_revision_only_older_releases_admit_is_told_the_revisions_fix() -> None:
    # v1 is admitted by v0.72.1 alone: a node on the newest release is not told to "upgrade" to it.
    advice = advise(V1_UNDECLARED, NodeFacts("gpu-1", NEWEST_VERSION, ran=False))
    assert advice.cause is Cause.REFUSED
    assert "Upgrade mesh-llm" not in advice.text
    assert advice.text.endswith(V1_UNDECLARED.headline.action.text)


def test_a_registered_run_its_release_admits_and_runs_needs_nothing() -> None:
    llama = assessment(build(LLAMA, 2))
    advice = advise(llama, NodeFacts("demo-llama", NEWEST_VERSION, ran=False))
    assert advice.cause is Cause.OK and not advice.needs_action
    assert advice.text == f"Runs it as {NEWEST} with auto allows."


def test_a_registered_run_whose_load_fails_is_told_the_revisions_fix() -> None:
    declared_only = assessment(build(QWEN35, 2, mtp_generation(2, [40]), nextn=()))
    advice = advise(declared_only, NodeFacts("gpu-1", NEWEST_VERSION, ran=False))
    assert advice.cause is Cause.FAILS_AT_LOAD and advice.needs_action
    assert advice.text.startswith(f"Fails at load on {NEWEST} with auto: ")
    assert "no blk.N.nextn tensors" in advice.text
    assert advice.text.endswith(declared_only.headline.action.text)


def test_a_revision_not_assessed_yet_gets_no_advice() -> None:
    advice = advise(None, NodeFacts("gpu-1", NEWEST_VERSION))
    assert advice.cause is Cause.OK and advice.text == "The revision is not assessed yet."


def test_a_requested_strategy_other_than_auto_on_a_package_whose_auto_runs_mtp_is_told_to_use_auto() -> None:
    facts = NodeFacts("demo-glm", NEWEST_VERSION, "ngram-cache", "ngram-cache", unused=True)
    advice = advise(V2_DECLARED, facts)
    assert advice.cause is Cause.MTP_UNUSED
    assert 'set speculative.strategy = "auto"' in advice.text


def test_reports_that_do_not_name_the_strategy_are_not_called_auto() -> None:
    advice = advise(V2_DECLARED, NodeFacts("demo-glm", NEWEST_VERSION, unused=True))
    assert advice.cause is Cause.MTP_UNUSED
    assert "do not name the strategy" in advice.text and "requested auto" not in advice.text


def test_outdated_only_when_the_newer_revision_has_a_better_headline() -> None:
    facts = NodeFacts("n", NEWEST_VERSION, "auto", "native-mtp", mtp_used=True)
    assert advise(V2_DECLARED, facts, Newer(FIXED_SHA, Status.SERVES_MTP)).cause is Cause.OK
    worse = advise(
        V2_UNDECLARED, NodeFacts("n", NEWEST_VERSION, "auto", "disabled"), Newer(FIXED_SHA, Status.SERVES_MTP)
    )
    assert worse.cause is Cause.OUTDATED and worse.text == "Outdated: upgrade to eeeeeeee (serves with MTP)."


def test_a_newer_revision_not_assessed_yet_is_no_fix_to_recommend() -> None:
    """Just published, before its ingest: what it does is not known, so it is neither an upgrade to make
    nor the fix for MTP left unused (the own revision's fix is); assessed, it is both."""
    facts = NodeFacts("n", "0.72.1", "auto", "disabled", unused=True)
    pending = Newer(FIXED_SHA, Status.NOT_ASSESSED)
    unused = advise(V1_UNDECLARED, facts, pending)
    assert unused.cause is Cause.MTP_UNUSED and "eeeeeeee" not in unused.text
    assert unused.text.endswith(V1_UNDECLARED.headline.action.text)
    plain = NodeFacts("n", NEWEST_VERSION, "auto", "disabled")
    assert advise(V2_UNDECLARED, plain, pending).cause is not Cause.OUTDATED
    assert advise(V2_UNDECLARED, plain, Newer(FIXED_SHA, Status.SERVES_MTP)).cause is Cause.OUTDATED


def test_a_split_served_with_the_override_is_flagged() -> None:
    facts = NodeFacts(
        "n", NEWEST_VERSION, "auto", "native-mtp", mtp_used=True, certification="uncertified_override"
    )
    advice = advise(V2_DECLARED, facts)
    assert advice.cause is Cause.UNCERTIFIED and advice.needs_action


def test_the_most_urgent_cause_wins() -> None:
    facts = NodeFacts("n", NEWEST_VERSION, "auto", "disabled", unused=True)
    advice = advise(V2_DECLARED, facts, Newer(FIXED_SHA, Status.SERVES_MTP))
    assert advice.cause is Cause.CONTRADICTION  # rank 0, ahead of MTP unused


STRATEGIES = [
    ("", "", False),
    ("auto", "disabled", False),
    ("auto", "native-mtp", True),
    ("ngram-cache", "ngram-cache", False),
    ("disabled", "native-mtp+ngram-suffix", True),
]


@pytest.mark.parametrize("version", ["", "0.64.0", "0.76.0-rc9"])
def test_without_a_known_release_the_strategy_changes_the_advice_text_never_its_cause(version: str) -> None:
    """What the nodes page leans on to judge a thousand nodes without reading their strategies
    (fleet.serving._read_to_judge): on a release the matrix does not know, every strategy gets one cause."""
    assert not strategy_can_change_cause(version)
    for assessment, newer, unused, certification in itertools.product(
        (V1_UNDECLARED, V2_DECLARED, V2_UNDECLARED, None),
        (None, Newer(FIXED_SHA, Status.SERVES_MTP)),
        (False, True),
        ("", "uncertified_override"),
    ):
        judged = {
            (a.cause, a.release, a.predicted)
            for requested, effective, used in STRATEGIES
            for a in [
                advise(
                    assessment,
                    NodeFacts("n", version, requested, effective, used, unused, certification=certification),
                    newer,
                )
            ]
        }
        assert len(judged) == 1, (assessment, newer, unused, certification, judged)


def test_on_a_known_release_the_strategy_can_change_the_cause() -> None:
    """The control: there, what the node ran can contradict the prediction."""
    assert strategy_can_change_cause(NEWEST_VERSION)
    causes = {advise(V2_DECLARED, NodeFacts("n", NEWEST_VERSION, r, e, u)).cause for r, e, u in STRATEGIES}
    assert Cause.CONTRADICTION in causes and Cause.OK in causes


# --- Advice by observed cause (issue 47): what the node says about itself, else the prediction --------


def test_a_serving_strategy_that_set_ngram_suffix_is_named_with_mesh_llms_remedy() -> None:
    """--strategy interactive set speculative.strategy = ngram-suffix where the operator left it unset
    (docs/rules.md 6b); its spans then request and run ngram-suffix, which is no contradiction."""
    facts = NodeFacts(
        "demo-glm",
        NEWEST_VERSION,
        "ngram-suffix",
        "ngram-suffix",
        serving_strategy="interactive",
        strategy_speculative="ngram-suffix",
    )
    advice = advise(V2_DECLARED, facts)
    assert advice.cause is Cause.MTP_UNUSED and advice.observed == Observed.SERVING_STRATEGY
    assert advice.text.startswith(
        'MTP off by --strategy interactive: it set speculative.strategy = "ngram-suffix" where the operator '
        "left it unset"
    )
    assert "set speculative.strategy explicitly" in advice.text
    assert "a serving strategy never overrides an explicit value" in advice.text
    assert "check the node's speculative.strategy" not in advice.text


def test_the_same_node_without_the_field_gets_the_prediction_labelled_as_one() -> None:
    said = NodeFacts("demo-glm", NEWEST_VERSION, unused=True, not_reported=("serving_strategy",))
    advice = advise(V2_DECLARED, said)
    assert advice.cause is Cause.MTP_UNUSED and advice.observed == Observed.PREDICTED
    assert (
        "predicted, not observed" in advice.text and "its version reports no serving strategy" in advice.text
    )
    assert "check the node's speculative.strategy" in advice.text


def test_a_serving_strategy_reports_reports_that_name_no_strategy_are_judged_by_what_it_set() -> None:
    """Reports through the agent's proxy carry timings only: the serving strategy says what ran."""
    facts = NodeFacts(
        "demo-glm",
        NEWEST_VERSION,
        unused=True,
        serving_strategy="interactive",
        strategy_speculative="ngram-suffix",
    )
    advice = advise(V2_DECLARED, facts)
    assert advice.cause is Cause.MTP_UNUSED and advice.observed == Observed.SERVING_STRATEGY


def test_throughput_is_told_that_its_batched_last_stage_drafts_nothing_too() -> None:
    facts = NodeFacts(
        "n",
        NEWEST_VERSION,
        "disabled",
        "disabled",
        serving_strategy="throughput",
        strategy_speculative="disabled",
    )
    advice = advise(V2_DECLARED, facts)
    assert advice.cause is Cause.MTP_UNUSED and "throughput.last_stage_decode_batch = false" in advice.text


def test_an_operator_setting_the_serving_strategy_kept_is_not_blamed_on_the_strategy() -> None:
    """A declined axis (the operator's own speculative.strategy) is the operator's choice."""
    facts = NodeFacts(
        "n", NEWEST_VERSION, "ngram-cache", "ngram-cache", unused=True, serving_strategy="interactive"
    )
    advice = advise(V2_DECLARED, facts)
    assert advice.observed == Observed.OPERATOR and 'set speculative.strategy = "auto"' in advice.text


def test_a_serving_strategy_costs_nothing_on_a_revision_whose_auto_runs_no_mtp() -> None:
    facts = NodeFacts(
        "n",
        NEWEST_VERSION,
        "ngram-suffix",
        "ngram-suffix",
        serving_strategy="interactive",
        strategy_speculative="ngram-suffix",
    )
    assert advise(V2_UNDECLARED, facts).observed != Observed.SERVING_STRATEGY


def test_native_mtp_that_drafted_nothing_names_the_break_even_gate_as_a_possible_cause_only() -> None:
    facts = NodeFacts("n", NEWEST_VERSION, "auto", "native-mtp", mtp_used=False, unused=True)
    advice = advise(V2_DECLARED, facts)
    assert advice.cause is Cause.MTP_UNUSED and advice.observed == Observed.GATE
    assert "Possible cause, which mesh-llm reports no signal for: the break-even gate" in advice.text
    assert "SKIPPY_SPECULATION_GATE" in advice.text


def test_a_contradiction_names_spec_default_as_a_possible_cause_and_shows_both_sides() -> None:
    advice = advise(V2_DECLARED, NodeFacts("gpu-1", NEWEST_VERSION, "auto", "disabled", unused=True))
    assert advice.cause is Cause.CONTRADICTION
    assert "Possible causes the node reports no signal for: spec_default = false" in advice.text
    assert advice.prediction.startswith("auto runs the default strategy") and NEWEST in advice.prediction
    assert advice.observation == "requested auto, ran disabled"


def test_the_control_a_serving_strategy_that_set_disabled_explains_it_and_is_no_contradiction() -> None:
    facts = NodeFacts(
        "gpu-1",
        NEWEST_VERSION,
        "disabled",
        "disabled",
        serving_strategy="throughput",
        strategy_speculative="disabled",
    )
    advice = advise(V2_DECLARED, facts)
    assert advice.cause is Cause.MTP_UNUSED and advice.prediction == ""


def test_an_mtp_sidecar_draft_explains_native_mtp_the_manifest_does_not_give() -> None:
    facts = NodeFacts(
        "n", NEWEST_VERSION, "auto", "native-mtp", mtp_used=True, draft_name="Qwen3.5-MTP-draft.gguf"
    )
    advice = advise(V2_UNDECLARED, facts)
    assert advice.cause is Cause.OK and advice.observed == Observed.SIDECAR
    assert advice.text.startswith(
        "An MTP sidecar draft supplies MTP: the node names draft model Qwen3.5-MTP-draft.gguf"
    )
    without = advise(V2_UNDECLARED, NodeFacts("n", NEWEST_VERSION, "auto", "native-mtp", mtp_used=True))
    assert without.cause is Cause.CONTRADICTION  # the control: without the draft it contradicts the audit


def test_a_node_serving_bytes_no_tracked_revision_holds_is_flagged() -> None:
    unaudited = advise(
        V2_DECLARED, NodeFacts("n", NEWEST_VERSION, "auto", "native-mtp", True, identity="unaudited")
    )
    assert unaudited.cause is Cause.SERVED_BYTES and unaudited.needs_action
    assert unaudited.text.startswith("Serves bytes meshdash has not audited")
    other = advise(
        V2_DECLARED,
        NodeFacts("n", NEWEST_VERSION, "auto", "native-mtp", True, identity="other", served_sha="f" * 40),
    )
    assert other.cause is Cause.SERVED_BYTES and other.text.startswith("Serves ffffffff by its own account")
    confirmed = advise(
        V2_DECLARED, NodeFacts("n", NEWEST_VERSION, "auto", "native-mtp", True, identity="confirmed")
    )
    assert confirmed.cause is Cause.OK


def test_the_uncertified_split_advice_names_the_action() -> None:
    """Issue 45: the package page had an action for it; the nodes pages did not."""
    facts = NodeFacts("n", NEWEST_VERSION, "auto", "native-mtp", True, certification="uncertified_override")
    advice = advise(V2_DECLARED, facts)
    assert advice.cause is Cause.UNCERTIFIED
    assert "serve it on one node (without --split)" in advice.text


def test_alike_advice_is_one_note_naming_its_nodes_and_other_advice_its_own() -> None:
    """The package page's headline box: plans whose advice reads the same (cause, text, both sides) make one
    note naming their nodes in the plans' order, each node once; another text, or the same text with other
    sides, is a note of its own; past NOTE_NAMES the nodes are counted. Control: one note per plan, as the
    box listed them, would be five lines."""
    from packages_app.audit.advice import Advice
    from packages_app.fleet import plans as fleet_plans
    from packages_app.node_plans import NodePlan

    def plan(node: str, advice: Advice) -> fleet_plans.PlanAdvice:
        shape = NodePlan(node, "0..27|27..41", "auto", "disabled", False, 3, 0, 3.2, None, unused=3)
        return fleet_plans.PlanAdvice(shape, "0.78.0", advice)

    unused = Advice(Cause.MTP_UNUSED, "MTP weights unused: requested auto, ran disabled")
    contradiction = Advice(
        Cause.CONTRADICTION, "Not as predicted", prediction="native-mtp", observation="off"
    )
    other_sides = Advice(
        Cause.CONTRADICTION, "Not as predicted", prediction="native-mtp", observation="failed"
    )
    plans = [
        plan("node-b", unused),
        plan("node-a", contradiction),
        plan("node-c", unused),
        plan("node-b", unused),  # node-b's second split: named once
        plan("node-d", other_sides),
        plan("node-e", Advice(Cause.OK, "Nothing to do")),  # not a cause the box lists
    ]
    causes = (Cause.MTP_UNUSED, Cause.CONTRADICTION)
    notes = fleet_plans.node_notes(plans, causes)
    assert [(n.advice, n.nodes, n.unnamed) for n in notes] == [
        (unused, ("node-b", "node-c"), 0),
        (contradiction, ("node-a",), 0),
        (other_sides, ("node-d",), 0),
    ]
    assert len([p for p in plans if p.advice.cause in causes]) == 5
    cap = fleet_plans.NOTE_NAMES
    many = [plan(f"node-{i:02}", unused) for i in range(cap + 3)] + [plan("", unused)]
    (note,) = fleet_plans.node_notes(many, causes)
    assert note.nodes == tuple(f"node-{i:02}" for i in range(cap)) and note.unnamed == 4  # one deleted node
