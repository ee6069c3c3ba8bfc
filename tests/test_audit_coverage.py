"""Audit behaviour test_audit.py does not reach: the release matrix's source-size rule, the fix for ngram
settings the runtime refuses, a manifest that names one file twice, and no fix for a manifest that does not
parse. Kept apart from test_audit.py while packages_app/audit/ is being rewritten (issue 26).
"""

from __future__ import annotations

import copy

import pytest

from packages_app.audit import Audit
from tests.audit_fixtures import GLM47, LLAMA, build, ngram_generation


def admission(result: Audit, release: str) -> tuple[bool | None, str]:
    row = next(r for r in result.compatibility if r.release == release)
    return row.admitted, row.why


def test_a_v2_package_whose_source_files_total_zero_bytes_is_refused_by_every_release() -> None:
    package = build(LLAMA, 2)
    admitting = {r.release for r in package.audit().compatibility if r.admitted}
    empty = copy.deepcopy(package.manifest)
    empty["source_model"]["files"][0]["byte_size"] = 0

    result = package.with_manifest(empty).audit()

    assert admitting  # the control: with its bytes, some releases admit the package
    assert not any(r.admitted for r in result.compatibility)
    assert {admission(result, release)[1] for release in admitting} == {
        "the source byte total is not greater than 0."
    }


@pytest.mark.parametrize(
    ("proposer", "fixed"),
    [
        ({"type": "ngram-cache", "ngram_min": 5, "ngram_max": 6}, {"ngram_min": 4, "ngram_max": 4}),
        ({"type": "ngram-suffix", "ngram_min": 1, "ngram_max": 80}, {"ngram_min": 3, "ngram_max": 64}),
    ],
)
def test_the_fix_for_an_ngram_setting_the_runtime_refuses_is_the_nearest_it_accepts(
    proposer: dict[str, int | str], fixed: dict[str, int]
) -> None:
    generation = ngram_generation()
    sd = generation["speculative_decoding"]
    sd["proposers"]["cache"].update(proposer, history_scope="session")
    sd["strategies"]["ngram-cache"]["type"] = proposer["type"]
    if proposer["type"] == "ngram-suffix":
        sd["strategies"] = {"ngram-suffix": {"type": "ngram-suffix", "proposer": "cache"}}
        sd["default"] = "ngram-suffix"

    result = build(LLAMA, 2, generation).audit()

    assert result.verdict == "declaration-mismatch"
    assert result.suggested_generation is not None
    suggested = result.suggested_generation.generation["speculative_decoding"]["proposers"]["cache"]
    assert {k: suggested[k] for k in fixed} == fixed
    assert suggested["history_scope"] == "request"


def test_an_artifact_listed_twice_is_checked_once() -> None:
    package = build(GLM47, 2)
    doubled = copy.deepcopy(package.manifest)
    entries = doubled["artifact_catalog"]["entries"]
    entries.append({**entries[0], "id": "again"})

    result = package.with_manifest(doubled).audit()

    paths = [check.path for check in result.provenance.files]
    assert len(paths) == len(set(paths)) == len(package.audit().provenance.files)


def test_a_manifest_that_does_not_parse_gets_no_suggested_fix() -> None:
    package = build(GLM47, 2)
    result = package.with_manifest(
        {"schema_version": 2, "speculative_decoding": "yes"}, recompute_id=False
    ).audit()

    assert result.verdict == "invalid-manifest"
    assert result.suggested_generation is None
