"""audit.synthetic (pure): the seeded rows' assessments have the real shape, say they are
synthetic, and read back as they were written (the benchmark seeds thousands of them)."""

from __future__ import annotations

import pytest

from packages_app.audit.assessment import Assessment
from packages_app.audit.synthetic import synthetic
from packages_app.verdicts import ActionKind, Status, Verdict

RELEASES = ("0.72.1", "0.76.2", "0.78.0")


@pytest.mark.parametrize("verdict", list(Verdict))
def test_a_package_v2_revision_gets_its_verdicts_headline_on_the_newest_release(verdict: Verdict) -> None:
    made = synthetic(verdict, 2, RELEASES, (40,) if verdict is Verdict.UNDECLARED_MTP else ())
    assert made.headline.release == "0.78.0" and made.headline.sentence.startswith("Synthetic: ")
    admitted = [s.admitted for s in made.servable]
    assert admitted == [verdict is not Verdict.INVALID_MANIFEST] * 3
    assert Assessment.from_json(made.to_json()) == made


def test_a_v1_revision_is_not_servable_after_the_first_release_and_says_republish() -> None:
    made = synthetic(Verdict.UNDECLARED_MTP, 1, RELEASES, (40,))
    assert made.status is Status.NOT_SERVABLE
    assert made.headline.action.kind is ActionKind.REPUBLISH_V2
    assert [s.admitted for s in made.servable] == [True, False, False]
    assert made.mtp.blocks == (40,) and not made.mtp.declared


def test_an_invalid_v1_manifest_stays_invalid() -> None:
    made = synthetic(Verdict.INVALID_MANIFEST, 1, RELEASES)
    assert made.status is Status.INVALID_MANIFEST and not any(s.admitted for s in made.servable)
