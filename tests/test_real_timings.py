"""Every timings object a real mesh-llm node emits is stored (docs/node-report.md section 1.5, verbatim)."""

from __future__ import annotations

import copy
import json
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from django.test import Client

from packages_app.models import Package, Report, Revision
from packages_app.nodes import identity
from packages_app.throughput import revision_throughput
from tests.dashboard_factories import register_run

QWEN = "meshllm/Qwen3.5-35B-A3B-UD-Q4_K_XL-layers"
SHA = "a" * 40

# docs/node-report.md section 1.5, copied verbatim.
NO_TELEMETRY = """{"draft_n":0,"draft_n_accepted":0,"native_mtp_proposal_compute_us":0,"native_mtp_rejected":0,"native_mtp_verification_compute_us":0,"native_mtp_verifications":0,"predicted_ms":100.0,"predicted_n":8,"predicted_per_second":80.0,"prompt_ms":20.0,"prompt_n":4,"prompt_per_second":200.0}"""  # noqa: E501
NATIVE_MTP = """{"draft_n":7,"draft_n_accepted":5,"native_mtp_proposal_compute_us":100,"native_mtp_rejected":2,"native_mtp_verification_compute_us":200,"native_mtp_verifications":7,"predicted_ms":100.0,"predicted_n":7,"predicted_per_second":70.0,"prompt_ms":20.0,"prompt_n":4,"prompt_per_second":200.0}"""  # noqa: E501
STANDALONE_NGRAM = """{"draft_n":12,"draft_n_accepted":9,"native_mtp_proposal_compute_us":0,"native_mtp_rejected":0,"native_mtp_verification_compute_us":0,"native_mtp_verifications":0,"predicted_ms":100.0,"predicted_n":8,"predicted_per_second":80.0,"prompt_ms":20.0,"prompt_n":4,"prompt_per_second":200.0,"speculative_accept_rate":0.75,"speculative_accepted_n":9,"speculative_proposed_n":12,"speculative_rejected_n":3,"speculative_windows":3,"verify_window_downstream_wait_ms":0.0,"verify_window_forward_write_ms":0.0,"verify_window_stage0_compute_ms":0.0,"verify_window_verify_elapsed_ms":0.0}"""  # noqa: E501
EXAMPLES = {"no-telemetry": NO_TELEMETRY, "native-mtp": NATIVE_MTP, "standalone-ngram": STANDALONE_NGRAM}


def cache_hit() -> dict[str, Any]:
    """30,000 prompt tokens from the prefix cache, 5 ms of uncached prefill: 6,000,000 tok/s."""
    timings = json.loads(NO_TELEMETRY)
    timings.update(prompt_n=30000, prompt_ms=5.0, prompt_per_second=6_000_000.0)
    return timings


def deep_window() -> dict[str, Any]:
    """Pipeline depth 64: 65 occupancy entries, with the hybrid n-gram and verify-window groups."""
    timings = json.loads(NATIVE_MTP)
    timings.update(
        native_mtp_ngram_hybrid_enabled=True,
        native_mtp_ngram_proposer="suffix",
        native_mtp_ngram_size=3,
        verify_window_depth=64,
        verify_window_direct_prediction_return=False,
        verify_window_occupancy_ms_by_depth=[float(i) * 1.5 for i in range(65)],
        verify_window_occupancy_parallel_fraction=None,  # serde writes NaN as null
        verify_window_stale_drain_ms=0.25,
    )
    return timings


@pytest.fixture
def token(db: None) -> str:
    return identity.create_node("node-a").token


@pytest.fixture
def revision(db: None) -> Revision:
    return Revision.objects.create(
        package=Package.objects.create(repo_id=QWEN, private=False), commit_sha=SHA
    )


def post(client: Client, token: str, timings: dict[str, Any]) -> Any:
    body = {
        "report_id": str(uuid.uuid4()),
        "observed_at": datetime.now(UTC).isoformat(),
        "package": {"repo": QWEN, "revision": SHA},
        "timings": timings,
    }
    return client.post(
        "/api/v1/reports",
        json.dumps(body),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )


@pytest.mark.parametrize("name", list(EXAMPLES))
def test_every_example_timings_object_is_stored_as_sent(client: Client, token: str, name: str) -> None:
    timings = json.loads(EXAMPLES[name])
    response = post(client, token, timings)
    assert response.status_code == 201, response.content
    report = Report.objects.get()
    assert report.body["timings"] == timings
    assert report.timings_flagged == []
    assert report.predicted_per_second == timings["predicted_per_second"]


def test_a_prefix_cache_hit_is_stored_flagged_and_left_out_of_medians(
    client: Client, token: str, revision: Revision
) -> None:
    assert post(client, token, cache_hit()).status_code == 201
    report = Report.objects.get()
    assert report.body["timings"]["prompt_per_second"] == 6_000_000.0
    assert report.timings_flagged == ["prompt_per_second"]
    assert report.prompt_per_second is None  # what medians read
    assert report.predicted_per_second == 80.0


def test_a_65_entry_occupancy_array_and_every_value_type_are_kept(client: Client, token: str) -> None:
    timings = deep_window()
    assert post(client, token, timings).status_code == 201
    stored = Report.objects.get().body["timings"]
    assert stored == timings
    assert len(stored["verify_window_occupancy_ms_by_depth"]) == 65


def test_a_negative_or_huge_known_value_is_kept_and_flagged_not_refused(client: Client, token: str) -> None:
    timings = json.loads(NATIVE_MTP)
    timings.update(prompt_ms=-1.0, predicted_n=10**19, speculative_accept_rate=1.5)
    assert post(client, token, timings).status_code == 201
    report = Report.objects.get()
    assert report.timings_flagged == ["predicted_n", "prompt_ms", "speculative_accept_rate"]
    assert report.predicted_n is None and report.body["timings"]["predicted_n"] == 10**19


def test_the_package_page_shows_the_flag_and_the_medians_skip_the_value(
    client: Client, token: str, revision: Revision
) -> None:
    register_run(identity.get_node("node-a"), revision)  # its agent's run: its reports count on the page
    post(client, token, cache_hit())
    post(client, token, json.loads(NO_TELEMETRY))
    figures = revision_throughput(revision.pk)
    assert figures is not None and figures.reports == 2
    assert [r["timings_flagged"] for r in figures.recent] == [[], ["prompt_per_second"]]
    page = client.get(f"/packages/{QWEN}/").content.decode()
    assert "implausible: prompt_per_second" in page


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("verify_window_occupancy_ms_by_depth", [1.0] * 257),
        ("native_mtp_ngram_proposer", "x" * 201),
        ("nested", {"a": 1}),
        ("k" * 101, 1),
    ],
)
def test_the_hard_limits_still_refuse_with_the_key_named(
    client: Client, token: str, key: str, value: Any
) -> None:
    timings = copy.deepcopy(json.loads(NO_TELEMETRY))
    timings[key] = value
    response = post(client, token, timings)
    assert response.status_code == 400
    assert response.json()["field"] == f"timings.{key}"
