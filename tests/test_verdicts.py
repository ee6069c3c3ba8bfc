"""The verdict vocabulary: which verdicts mean declaration and weights agree."""

from __future__ import annotations

from django.template import Context, Template

from packages_app.verdicts import INCONSISTENT_VERDICTS, Verdict, is_consistent


def test_only_the_two_consistent_verdicts_count_as_consistent() -> None:
    assert [v for v in Verdict if v.consistent] == [Verdict.CONSISTENT_MTP, Verdict.CONSISTENT_NO_MTP]
    assert "undeclared-mtp" in INCONSISTENT_VERDICTS and not is_consistent("undeclared-mtp")
    assert not is_consistent("") and not is_consistent("consistent")


def test_the_badge_template_asks_the_vocabulary_not_a_list_of_its_own() -> None:
    template = Template("{% load verdicts %}{% verdict_badge verdict %}")
    agree = template.render(Context({"verdict": "consistent-no-mtp"}))
    disagree = template.render(Context({"verdict": "declaration-mismatch"}))
    assert Verdict.CONSISTENT_NO_MTP.sentence in agree and "tone-info" in agree
    assert Verdict.DECLARATION_MISMATCH.sentence in disagree and "tone-bad" in disagree


def test_a_revision_not_assessed_says_why_from_its_ingest() -> None:
    from packages_app.verdicts import NOT_FINISHED, not_assessed, verdict_of

    running = not_assessed("running", "")
    assert (running.label, running.sentence) == ("not assessed yet", NOT_FINISHED)
    gated = not_assessed("failed", "meshllm/x@abc: the repo is gated; set HF_TOKEN", development_hub=True)
    assert gated.label == "not assessed: gated" and gated.expected_in_demo
    failed = not_assessed("failed", "the Hub answered 500")
    assert failed.label == "not assessed: ingest failed" and not failed.expected_in_demo
    assert failed.to_json()["status"] == "not-assessed"
    assert verdict_of("undeclared-mtp") is Verdict.UNDECLARED_MTP
    assert verdict_of("a-verdict-of-a-newer-version") is None and verdict_of(None) is None
