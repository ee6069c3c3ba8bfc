"""The admin pages for packages, revisions, files, node runs and reports render for staff, with real rows."""

from __future__ import annotations

import random

import pytest
from django.test import Client
from django.utils import timezone

from packages_app import telemetry
from packages_app.devnode import payloads
from packages_app.models import NodeRun, Report, TrackRequest
from packages_app.nodes import identity
from packages_app.nodes.run_schema import RunIn
from tests import dashboard_factories as f

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("model", ["package", "revision", "packagefile"])
def test_the_changelist_and_a_change_page_render(admin_client: Client, model: str) -> None:
    package = f.qwen35_package(with_history=False)
    revision = package.latest_revision
    assert revision is not None
    pk = {"package": package.pk, "revision": revision.pk, "packagefile": revision.files.first().pk}[model]
    assert admin_client.get(f"/admin/packages_app/{model}/").status_code == 200
    assert admin_client.get(f"/admin/packages_app/{model}/{pk}/change/").status_code == 200


def test_the_node_run_and_span_report_pages_render(admin_client: Client) -> None:
    node = identity.create_node("gpu-1").node
    run = RunIn.model_validate(
        {"run_id": "run-1", "package": {"repo": "meshllm/q-layers", "revision": "a" * 40}}
    )
    telemetry.run_register(node, run)
    plan = payloads.RunPlan(repo="meshllm/q-layers", run_id="run-1")
    rng = random.Random(1)
    measured = payloads.decode(plan, rng, 8)
    span = payloads.decode_span(payloads.span_attributes(plan, measured, "s0"), rng, measured.predicted_ms)
    telemetry.store_spans(node, payloads.export_request([span]), timezone.now())
    for model, pk in (("noderun", NodeRun.objects.get().pk), ("report", Report.objects.get().pk)):
        assert admin_client.get(f"/admin/packages_app/{model}/").status_code == 200
        assert admin_client.get(f"/admin/packages_app/{model}/{pk}/change/").status_code == 200


def test_a_repo_the_hub_does_not_know_is_listed_read_only_and_can_be_cleared(admin_client: Client) -> None:
    asked = TrackRequest.objects.create(
        repo_id="meshllm/does-not-exist-layers",
        status=TrackRequest.Status.MISSING,
        message="not on the Hub",
        requested_at=timezone.now(),
    )
    listing = admin_client.get("/admin/packages_app/trackrequest/")
    assert listing.status_code == 200 and b"meshllm/does-not-exist-layers" in listing.content
    assert admin_client.get("/admin/packages_app/trackrequest/add/").status_code == 403
    change = admin_client.post(
        f"/admin/packages_app/trackrequest/{asked.pk}/change/", {"repo_id": "meshllm/other-layers"}
    )
    assert change.status_code == 403 and TrackRequest.objects.get().repo_id == asked.repo_id
    admin_client.post(f"/admin/packages_app/trackrequest/{asked.pk}/delete/", {"post": "yes"})
    assert not TrackRequest.objects.exists()
