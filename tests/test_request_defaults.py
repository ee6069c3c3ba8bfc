"""What a package's request defaults set and which profile a request gets (mesh-llm #1876)."""

from __future__ import annotations

import json
from typing import Any

from packages_app.audit.request_defaults import request_defaults
from packages_app.devhub.generator import llama_request_defaults
from packages_app.manifest import Manifest, parse_manifest
from packages_app.manifest.identity import package_id_of
from tests.test_rulebook import REV, v1_base, v2_base

PROVENANCE = {
    "source_repo": "fixture/model",
    "revision": REV,
    "file": "generation_config.json",
    "section": "root",
    "url": f"https://huggingface.co/fixture/model/blob/{REV}/generation_config.json",
}


def manifest(**top: Any) -> Manifest:
    doc = v2_base() | top
    doc["package_id"] = package_id_of(doc)
    parsed = parse_manifest(json.dumps(doc).encode())
    assert parsed.manifest is not None and parsed.trusted, parsed.problems
    return parsed.manifest


def thinking_and_direct() -> dict[str, Any]:
    """A reasoning model's defaults: a thinking profile by default and for reasoning on, direct for off."""
    thinking = {
        "max_tokens": 32768,
        "temperature": 0.6,
        "top_p": 0.95,
        "top_k": 20,
        "reasoning": {"enabled": "on", "budget": "high"},
        "provenance": PROVENANCE,
    }
    direct = {"max_tokens": 4096, "temperature": 0.7, "reasoning": {"budget": 0}, "provenance": PROVENANCE}
    selection = {"default": "thinking", "reasoning_enabled": "thinking", "reasoning_disabled": "direct"}
    return {"selection": selection, "profiles": {"thinking": thinking, "direct": direct}}


def test_each_profile_lists_what_it_sets_and_the_modes_that_select_it() -> None:
    result = request_defaults(manifest(generation={"request_defaults": thinking_and_direct()}))

    assert result.declared and result.unreadable is None
    profiles = {p.name: p for p in result.profiles}
    thinking, direct = profiles["thinking"], profiles["direct"]
    assert thinking.max_tokens == 32768
    assert thinking.sampling == (("temperature", 0.6), ("top_p", 0.95), ("top_k", 20))
    assert (thinking.reasoning_enabled, thinking.reasoning_budget) == ("on", "high")
    assert thinking.selected_for == ("automatic", "reasoning on")
    assert direct.reasoning_budget == 0  # a budget of 0 tokens, not an absent one
    assert direct.selected_for == ("reasoning off",)
    assert thinking.provenance.revision == REV


def test_a_request_that_says_nothing_about_reasoning_gets_selection_default() -> None:
    result = request_defaults(manifest(generation={"request_defaults": thinking_and_direct()}))

    assert result.default_profile is not None and result.default_profile.name == "thinking"
    assert result.selection is not None
    assert (result.selection.reasoning_on, result.selection.reasoning_off) == ("thinking", "direct")
    assert any("below the request's own values" in n for n in result.notes)


def test_an_undeclared_reasoning_selection_is_not_pinned_down() -> None:
    result = request_defaults(manifest(generation={"request_defaults": llama_request_defaults()}))

    assert result.selection is not None and result.selection.reasoning_on is None
    assert [p.name for p in result.profiles] == ["default"]
    assert result.profiles[0].selected_for == ("automatic",)
    assert result.profiles[0].sampling == (("temperature", 0.6), ("top_p", 0.9))
    notes = " ".join(result.notes)
    assert "selection.reasoning_enabled is not declared" in notes and "not pinned down" in notes


def test_a_manifest_without_request_defaults_declares_none() -> None:
    assert request_defaults(manifest()).declared is False
    assert request_defaults(None).declared is False


def test_a_v1_manifest_has_none_and_says_why() -> None:
    parsed = parse_manifest(json.dumps(v1_base()).encode())

    result = request_defaults(parsed.manifest)

    assert result.declared is False
    assert "v1" in result.notes[0]


def test_publisher_defaults_are_listed_with_where_they_are_read() -> None:
    doc = v2_base()
    doc["publisher_metadata"] = [
        {
            "role": "model_config",
            "artifact_id": "layer-0",
            "source_repo": "fixture/model",
            "source_revision": REV,
            "source_path": "config.json",
        }
    ]
    doc["publisher_defaults"] = {
        "compute_dtype": {"dtype": "bf16", "artifact_id": "layer-0", "json_path": "torch_dtype"}
    }
    doc["package_id"] = package_id_of(doc)
    parsed = parse_manifest(json.dumps(doc).encode())
    assert parsed.manifest is not None

    (dtype,) = request_defaults(parsed.manifest).publisher_defaults

    assert (dtype.key, dtype.dtype, dtype.json_path) == ("compute_dtype", "bf16", "torch_dtype")


def test_to_json_has_the_documented_shape() -> None:
    doc = request_defaults(manifest(generation={"request_defaults": thinking_and_direct()})).to_json()

    assert set(doc) == {
        "declared",
        "profiles",
        "selection",
        "default_profile",
        "publisher_defaults",
        "notes",
        "unreadable",
    }
    assert doc["default_profile"] == "thinking"
    assert set(doc["profiles"][0]) == {
        "name",
        "max_tokens",
        "sampling",
        "stop",
        "ignore_eos",
        "reasoning",
        "provenance",
        "selected_for",
        "is_default",
    }
    assert json.loads(json.dumps(doc)) == doc
