"""repo_ids (pure): what an operator may paste into the track form or a command, a repo id or a Hub URL of
it, and what a node or webhook may name before meshdash follows it. Each refusal says what is wrong."""

from __future__ import annotations

import pytest

from packages_app.repo_ids import (
    InvalidRepoId,
    RepoReference,
    is_commit_sha,
    parse_repo_reference,
    within_tracking_rules,
)

DEVHUB = "http://127.0.0.1:8765"
REPO = "meshllm/Qwen3.5-35B-A3B-UD-Q4_K_XL-layers"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (REPO, RepoReference(REPO)),
        (f"  {REPO}  ", RepoReference(REPO)),
        (f"https://huggingface.co/{REPO}", RepoReference(REPO)),
        (f"https://HuggingFace.co/{REPO}/", RepoReference(REPO)),
        (f"https://huggingface.co/{REPO}/tree/main", RepoReference(REPO, "main")),
        (f"https://huggingface.co/{REPO}/tree/{'a' * 40}/layers", RepoReference(REPO, "a" * 40)),
        (f"https://huggingface.co/{REPO}/tree/refs%2Fpr%2F1", RepoReference(REPO, "refs/pr/1")),
        (f"{DEVHUB}/{REPO}", RepoReference(REPO)),
        (f"{DEVHUB}/{REPO}/tree/v2", RepoReference(REPO, "v2")),
    ],
)
def test_a_repo_id_or_a_hub_url_of_it_is_taken(value: str, expected: RepoReference) -> None:
    assert parse_repo_reference(value, [DEVHUB]) == expected


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("https://evil.example/meshllm/x-layers", "is not a URL of the Hub (https://huggingface.co, http"),
        (f"{DEVHUB}/{REPO}", "is not a URL of the Hub (https://huggingface.co)"),  # devhub not configured
        ("https://huggingface.co/datasets/meshllm/x", "is a dataset, not a model repo"),
        ("https://huggingface.co/spaces/meshllm/x", "is a space, not a model repo"),
        ("https://huggingface.co/meshllm", "names no repo: a Hub URL is https://huggingface.co/owner/name"),
        (f"https://huggingface.co/{REPO}/blob/main/model-package.json", "has only /tree/<revision>"),
        (f"https://huggingface.co/{REPO}/tree", "has only /tree/<revision>"),
        (f"https://huggingface.co/{REPO}/tree/..%2F..", "is not a branch, tag or commit"),
        (f"https://huggingface.co/{REPO}/tree/a%20b", "is not a branch, tag or commit"),
        (f"https://huggingface.co/{REPO}?x=1", "has no query, fragment or credentials"),
        (f"https://user:pw@huggingface.co/{REPO}", "has no query, fragment or credentials"),
        ("https://[::1/meshllm/x", "is not a URL"),
        ("https://huggingface.co/meshllm/a--b", "cannot contain '--' or '..'"),
    ],
)
def test_anything_else_is_refused_with_what_is_wrong(value: str, reason: str) -> None:
    endpoints = [DEVHUB] if "evil" in value else []
    with pytest.raises(InvalidRepoId) as refused:
        parse_repo_reference(value, endpoints)
    assert reason in str(refused.value)


def test_a_followed_namespace_admits_any_repo_name_a_manifest_may_live_in() -> None:
    # mesh-llm finds a package by its manifest, whatever the repo is called (docs/rules.md section 6b).
    assert within_tracking_rules("meshllm/Qwen3.8-27B-MTP2-UD-Q4_K_XL", ["meshllm"])
    assert not within_tracking_rules("someone/x-layers", ["meshllm"])
    assert not within_tracking_rules("meshllm/", ["meshllm"])


@pytest.mark.parametrize(
    ("value", "pinned"),
    [("a" * 40, True), ("A" * 40, False), ("a" * 39, False), ("main", False), (None, False)],
)
def test_a_pinned_revision_is_a_full_lowercase_sha(value: object, pinned: bool) -> None:
    assert is_commit_sha(value) is pinned


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("", "the repo id is empty"),
        (None, "the repo id is empty"),
        ("/etc/passwd", "is not a URL or a path"),
        ("meshllm\\x", "is not a URL or a path"),
        ("meshllm/x/y", "is not owner/name, with exactly one slash"),
        ("meshllm/x.git", "cannot end with '.git'"),
        ("meshllm/x y", "1-96 characters of letters, digits"),
        ("meshllm/-x", "cannot start or end with '.' or '-'"),
        ("meshllm/" + "x" * 90, "characters long; a repo id is at most 96 characters"),
    ],
)
def test_a_repo_id_that_names_no_hub_repo_is_refused_with_why(value: object, reason: str) -> None:
    with pytest.raises(InvalidRepoId) as refused:
        parse_repo_reference(value)  # type: ignore[arg-type]  # what a hostile caller may pass
    assert reason in str(refused.value)
