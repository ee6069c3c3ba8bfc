"""Advice for the writer's shape (issue 41 item 3; docs/rules.md section 6b): mesh-llm's writer (PR #1937)
emits `generation` only when `<arch>.nextn_predict_layers` is 1 and the NextN tensors sit at the last block.
There the advice names `mesh-llm models package`; for every other shape (the key absent, depth 2, the MTP
block not last) it says the writer refuses the source and gives the exact block to add by hand, on the
headline, the fix section, the pull-request description, the CLI and the API."""

from __future__ import annotations

import io
import json
from dataclasses import replace
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client

from packages_app import fix_plans, hub, ingest
from packages_app.audit.fix import writer_shape
from packages_app.audit.model import Detected
from packages_app.devhub import DEMO_PACKAGES, DevHub
from packages_app.devhub.generator import QWEN38_MTP2_REPO, QWEN38_REPO
from packages_app.models import Package, Revision
from packages_app.verdicts import ActionKind, Status
from tests.audit_fixtures import QWEN35, build
from tests.test_detection import DSV4
from tests.test_detection_drafts import QWEN4EXP, without_nextn_key

WRITER = "mesh-llm models package"
REFUSES = "refuses this source"


# --- the shape, as the writer's infer_native_mtp_generation decides it -------------------------------


def detected(key: int | None, blocks: tuple[int, ...], count: int = 41) -> Detected:
    return Detected(architecture="qwen35moe", block_count=count, nextn_predict_layers=key, mtp_blocks=blocks)


@pytest.mark.parametrize(
    ("key", "blocks", "count", "shape"),
    [
        (1, (40,), 41, "writer"),
        (None, (40,), 41, "key-absent"),
        (0, (40,), 41, "key-absent"),
        (2, (39, 40), 41, "deep"),
        (1, (41,), 41, "not-last"),  # DeepSeek-V4 style: block_count leaves the MTP block out
        (1, (38,), 41, "not-last"),
        (1, (), 41, "no-tensors"),
    ],
)
def test_the_writer_emits_the_declaration_for_one_shape_only(
    key: int | None, blocks: tuple[int, ...], count: int, shape: str
) -> None:
    found = writer_shape(None, detected(key, blocks, count))

    assert found.shape == shape and found.emits is (shape == "writer")
    assert bool(found.reason) is (shape != "writer")


# --- the pure surfaces: the headline and the fix's advice ---------------------------------------------


def undeclared(model: Any, schema: int = 2) -> Any:
    package = build(model, schema)
    if model is QWEN4EXP:
        package = without_nextn_key(package, model)
    if model is DSV4:  # block_count counts the trunk only; the MTP block sits past it
        for h in package.headers.values():
            h["kv"][f"{model.arch}.block_count"] = model.block_count - 1
    audited = package.audit()
    assert audited.verdict == "undeclared-mtp" and audited.suggested_generation is not None
    return audited


# The writer-refused shapes, built from the fixtures: the key absent (the qwen4exp layout), depth 2, and the
# MTP block not last (DeepSeek-V4 GGUFs whose block_count leaves the MTP block out, ik_llama #2256).
REFUSED = {"key absent": QWEN4EXP, "depth 2": replace(QWEN35, block_count=42, nextn=2), "not last": DSV4}


@pytest.mark.parametrize("case", REFUSED, ids=list(REFUSED))
def test_for_a_shape_the_writer_refuses_the_advice_gives_the_block_by_hand_and_never_the_writer_alone(
    case: str,
) -> None:
    audited = undeclared(REFUSED[case])
    suggestion = audited.suggested_generation
    action = audited.assessment.headline.action

    assert suggestion.writer is not None and not suggestion.writer.emits
    block = json.dumps(suggestion.generation, separators=(",", ":"))
    for text in (action.text, suggestion.advice):
        assert f"`{WRITER}` {REFUSES}" in text and block in text
    assert "whose writer emits this block" not in action.text


def test_an_mtp_block_before_the_last_is_refused_by_the_writer() -> None:
    # DeepSeek-V4 style: the manifest's layer_count counts one block past the NextN tensors.
    found = writer_shape(None, detected(1, (60,), 62))
    assert found.shape == "not-last" and "not at the last block (61)" in found.reason


def test_for_the_writers_shape_the_advice_names_the_writer() -> None:
    audited = undeclared(QWEN35)
    suggestion = audited.suggested_generation
    action = audited.assessment.headline.action

    assert suggestion.writer is not None and suggestion.writer.emits
    assert f"`{WRITER}`, whose writer emits this block for this source" in action.text
    assert REFUSES not in action.text and REFUSES not in suggestion.advice
    assert WRITER in suggestion.advice


def test_a_v1_package_of_a_refused_shape_is_told_the_writer_refuses_it_and_given_the_block() -> None:
    audited = undeclared(REFUSED["depth 2"], schema=1)
    action = audited.assessment.headline.action

    assert audited.assessment.status is Status.NOT_SERVABLE and action.kind is ActionKind.REPUBLISH_V2
    assert f"`{WRITER}` {REFUSES}" in action.text and '"generation": {"speculative_decoding"' in action.text
    assert "Republishing it as package-v2 with" in audited.suggested_generation.advice
    # The control: the writer's own shape in v1 is told to republish with the writer.
    writer = undeclared(QWEN35, schema=1).assessment.headline.action.text
    assert REFUSES not in writer and "(the writer since PR #1937, which declares the MTP block at" in writer


# --- every stored surface: the page's headline and fix section, the API, the CLI, the PR description ----


def ingested(repo_id: str, hub_settings: DevHub) -> Revision:
    demo = next(p for p in DEMO_PACKAGES if p.repo_id == repo_id)
    source = hub.HubSource(repo_id, endpoint=hub_settings.url, max_retries=1)
    return ingest.ingest_revision(repo_id, demo.main_sha, source=source).revision


def surfaces(client: Client, rev: Revision) -> dict[str, str]:
    owner, name = rev.package.repo_id.split("/")
    page = (
        client.get(f"/packages/{owner}/{name}/")
        .content.decode()
        .replace("&quot;", '"')
        .replace("&#x27;", "'")
    )
    api = client.get(f"/api/v1/packages/{owner}/{name}").json()
    out = io.StringIO()
    with pytest.raises(SystemExit):
        call_command("audit_package", rev.package.repo_id, "--revision", rev.commit_sha, stdout=out)
    plan = fix_plans.plan(Package.objects.get(pk=rev.package_id), rev)
    return {
        "headline": page[page.index('id="assessment"') : page.index('id="findings"')],
        "fix section": page[page.index('<section id="fix">') : page.index('id="audit"')],
        "API": api["assessment"]["headline"]["action"]["text"] + api["suggested_generation"]["advice"],
        "CLI": out.getvalue(),
        "PR description": plan.description,
    }


@pytest.mark.django_db
def test_every_surface_tells_the_deep_mtp_package_the_writer_refuses_it_and_gives_the_block(
    hub_settings: DevHub, client: Client
) -> None:
    rev = ingested(QWEN38_MTP2_REPO, hub_settings)
    assert rev.headline == Status.MTP_UNUSED and "-layers" not in rev.package.repo_id

    found = surfaces(client, rev)

    block = '{"speculative_decoding":{"default":"mtp","strategies":{"mtp":{"type":"native-mtp"'
    for surface, text in found.items():
        assert REFUSES in text, surface
        if surface != "PR description":  # the PR carries the block as the diff itself
            assert block in text and "[64,65]" in text, surface
    assert "written by hand" in found["PR description"]


@pytest.mark.django_db
def test_every_surface_tells_the_writers_shape_to_republish_with_the_writer(
    hub_settings: DevHub, client: Client
) -> None:
    rev = ingested(QWEN38_REPO, hub_settings)  # qwen35, nextn_predict_layers = 1, NextN at the last block 64

    found = surfaces(client, rev)

    for surface, text in found.items():
        assert WRITER in text or "fixed writer (mesh-llm PR #1937)" in text, surface
        assert REFUSES not in text, surface
