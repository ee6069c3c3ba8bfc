"""Baseline engine reports: POST /api/v1/baselines (a node's token, the reports API's standards), their join
to a layer package by its source model, and the speedups the pages show (MTP on against MTP off, mesh-llm
against a baseline engine), each figure asserted."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.core.cache import cache
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from packages_app import baselines, sketch, speedup_cells
from packages_app.models import BaselineReport, NodeRun
from packages_app.nodes import identity as nodes
from tests.dashboard_factories import BASE_TIME, make_node, make_package, make_report, make_revision

pytestmark = pytest.mark.django_db
URL = "/api/v1/baselines"
SOURCE = "unsloth/Qwen3.5-35B-A3B-MTP-GGUF"  # the dashboard factories' manifest model_id / source


@pytest.fixture(autouse=True)
def _fresh_cache() -> None:
    cache.clear()  # the rate limiter


@pytest.fixture
def token() -> str:
    return nodes.create_node("baseline-box").token


def window(**changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "report_id": str(uuid.uuid4()),
        "observed_at": datetime.now(UTC).isoformat(),
        "window_seconds": 30.0,
        "engine": "llama.cpp",
        "engine_version": "b6105-1a2b3c4",
        "served_model": "qwen3.5",
        "source_model": SOURCE,
        "source_file": "Qwen3.5-35B-A3B-UD-Q4_K_XL.gguf",
        "counter_reset": False,
        "figures": {
            "predicted_n": 600,
            "predicted_seconds": 10.0,
            "predicted_per_second": 60.0,
            "drafts": None,
            "draft_tokens": None,
            "accepted_tokens": None,
            "accepted_per_position": None,
        },
        "not_reported": ["drafts", "draft_tokens", "accepted_tokens", "accepted_per_position"],
        "trimmed": [],
    }
    for key, value in changes.items():
        if key in body["figures"]:
            body["figures"][key] = value
        else:
            body[key] = value
    return body


def post(client: Client, token: str, body: Any, raw: bytes | None = None, **headers: str) -> Any:
    return client.post(
        URL,
        data=raw if raw is not None else json.dumps(body),
        content_type=headers.pop("content_type", "application/json"),
        headers={"Authorization": f"Bearer {token}"} | headers,
    )


# --- The endpoint ----------------------------------------------------------------------------------


def test_a_window_is_stored_once_with_its_quantization_read_from_the_file(client: Client, token: str) -> None:
    body = window()
    answer = post(client, token, {"reports": [body]})
    assert answer.status_code == 200 and answer.json()["results"][0]["status"] == 201
    row = BaselineReport.objects.get()
    assert (row.engine, row.source_model, row.quantization) == ("llama.cpp", SOURCE, "UD-Q4_K_XL")
    assert (row.predicted_n, row.predicted_per_second, row.flagged) == (600, 60.0, [])
    again = post(client, token, {"reports": [body]})
    assert again.json()["results"][0]["status"] == 200 and BaselineReport.objects.count() == 1
    changed = post(client, token, {"reports": [body | {"window_seconds": 31.0}]})
    result = changed.json()["results"][0]
    assert result["status"] == 409 and result["field"] == "reports.0.report_id"
    assert BaselineReport.objects.get().window_seconds == 30.0  # nothing stored is lost


def test_the_decode_rate_is_recomputed_from_the_counters(client: Client, token: str) -> None:
    post(client, token, {"reports": [window(predicted_per_second=9999.0)]})
    assert BaselineReport.objects.get().predicted_per_second == 60.0  # 600 tokens / 10 s, not what was sent


def test_contradicting_figures_are_kept_and_flagged(client: Client, token: str) -> None:
    bad = window(drafts=10, draft_tokens=30, accepted_tokens=40, accepted_per_position=[11, 2])
    post(client, token, {"reports": [bad]})
    assert BaselineReport.objects.get().flagged == ["accepted_tokens", "accepted_per_position"]


def test_one_bad_item_is_refused_alone_naming_the_field(client: Client, token: str) -> None:
    answer = post(client, token, {"reports": [window(engine="ollama"), window(), window(predicted_n=-1)]})
    results = answer.json()["results"]
    assert [r["status"] for r in results] == [400, 201, 400]
    assert results[0]["field"] == "reports.0.engine"
    assert results[2]["field"] == "reports.2.figures.predicted_n"
    assert BaselineReport.objects.count() == 1


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"source_model": "../../etc"}, "reports.0.source_model"),
        ({"colour": "red"}, "reports.0.colour"),
        ({"accepted_per_position": list(range(33))}, "reports.0.figures.accepted_per_position"),
        ({"engine_version": "v" * 101}, "reports.0.engine_version"),
        ({"window_seconds": 0}, "reports.0.window_seconds"),
        ({"observed_at": 1700000000}, "reports.0.observed_at"),
    ],
)
def test_bad_values_are_refused_by_name(
    client: Client, token: str, changes: dict[str, Any], field: str
) -> None:
    result = post(client, token, {"reports": [window(**changes)]}).json()["results"][0]
    assert result["status"] == 400 and result["field"] == field


def test_the_endpoint_refuses_what_the_reports_api_refuses(client: Client, token: str) -> None:
    assert post(client, "not-a-token", {"reports": [window()]}).status_code == 401
    assert post(client, token, {"reports": [window()]}, content_type="text/plain").status_code == 415
    nan = json.dumps({"reports": [window()]}).replace("60.0", "NaN").encode()
    assert post(client, token, None, raw=nan).status_code == 400
    big = {"reports": [window(trimmed=["x" * 200] * 16) for _ in range(100)]}
    assert post(client, token, big).status_code == 413  # over 256 KiB, refused unread
    assert post(client, token, {"reports": [window()] * 101}).json()["field"] == "reports"
    assert post(client, token, {"reports": []}).status_code == 400
    assert client.get(URL, headers={"Authorization": f"Bearer {token}"}).status_code == 405
    assert BaselineReport.objects.count() == 0


# --- The join and the speedups ----------------------------------------------------------------------


def test_the_package_source_model_and_quantization() -> None:
    package = make_package("meshllm/Qwen3.5-35B-A3B-UD-Q4_K_XL-layers")
    revision = make_revision(package, "consistent-mtp")
    assert baselines.source_of(package, revision) == baselines.Source(
        SOURCE, "UD-Q4_K_XL", "Qwen3.5-35B-A3B-UD-Q4_K_XL.gguf"
    )
    revision.manifest_json = {}
    package.base_model = "Qwen/Qwen3.5-35B-A3B"
    assert baselines.source_of(package, revision) == baselines.Source("Qwen/Qwen3.5-35B-A3B", "UD-Q4_K_XL")


@pytest.mark.parametrize(
    ("name", "quant"),
    [
        ("Qwen3.5-35B-A3B-UD-Q4_K_XL.gguf", "UD-Q4_K_XL"),
        ("Llama-3.2-1B-Instruct-Q4_K_M.gguf", "Q4_K_M"),
        ("model-q8_0.gguf", "Q8_0"),
        ("gpt-oss-20b-MXFP4.gguf", "MXFP4"),
        ("Qwen3-30B-A3B-IQ2_XXS.gguf", "IQ2_XXS"),
        ("Qwen/Qwen3.5-35B-A3B", ""),
    ],
)
def test_quantization_of_a_file_name(name: str, quant: str) -> None:
    assert baselines.quantization_of(name) == quant


def _stored_window(
    node: Any, rate: float, quant_file: str = "Qwen3.5-35B-A3B-UD-Q4_K_XL.gguf", **f: Any
) -> None:
    body = window(source_file=quant_file, predicted_seconds=600 / rate, **f)
    report, digest = baselines.BaselineReportIn.model_validate(body), "0" * 64
    baselines.store_baselines(node, [(report, digest)], BASE_TIME)


def _mtp_fleet(on: list[float], off: list[float], release: str = "0.78.0") -> Any:
    package = make_package("meshllm/Qwen3.5-35B-A3B-UD-Q4_K_XL-layers")
    revision = make_revision(package, "consistent-mtp")
    node_on, node_off = make_node("gpu-on"), make_node("gpu-off")
    for i, rate in enumerate(on):
        make_report(node_on, revision, rate, at=BASE_TIME + timedelta(minutes=i), mtp_used=True)
    for i, rate in enumerate(off):
        make_report(node_off, revision, rate, at=BASE_TIME + timedelta(minutes=i))
    for node in (node_on, node_off):
        NodeRun.objects.create(node=node, run_id=f"run-{node.name}", revision=revision, version=release)
    return package, revision


def test_mtp_on_against_off_is_a_ratio_of_medians_with_its_interval() -> None:
    package, revision = _mtp_fleet([5.0 + i * 0.01 for i in range(30)], [3.0 + i * 0.01 for i in range(30)])
    found = baselines.speedups(package, revision)
    assert found.mtp is not None and found.mtp_missing == ""
    ratio = found.mtp.ratio
    assert ratio is not None and ratio.ratio == pytest.approx(5.145 / 3.145, rel=0.02)
    assert ratio.low is not None and ratio.high is not None and ratio.low < ratio.ratio < ratio.high
    assert found.mtp.scope == "stage split 0..27|27..41, mesh-llm 0.78.0"
    assert found.mtp.apart == ("different nodes ran each side (the hardware may differ)",)
    # The factory's MTP reports: 70 accepted of 100 proposed over 100 windows.
    assert found.mtp.faster.acceptance_rate == pytest.approx(0.7)
    assert found.mtp.faster.mean_acceptance_length == pytest.approx(1.7)


@pytest.mark.parametrize(
    ("on", "off", "expected"),
    [
        (
            [1.5] * 30,
            [3.0] * 30,
            "MTP on decodes {on} tok/s against {off} with MTP off: x0.51 (95 % interval ",
        ),
        (
            [3.0] * 3,
            [3.0] * 3,
            "MTP on decodes {on} tok/s against {off} with MTP off: x1.00 (too few reports",
        ),
    ],
)
def test_the_sentence_says_slower_and_too_few(on: list[float], off: list[float], expected: str) -> None:
    side_on, side_off = (
        baselines.Side("MTP on", len(on), sketch.of_values(on)),
        baselines.Side("MTP off", len(off), sketch.of_values(off)),
    )
    sentence = baselines.Speedup("mtp", "MTP on against MTP off", side_on, side_off, "").sentence
    medians = {k: f"{sketch.median(sketch.of_values(v)):.2f}" for k, v in (("on", on), ("off", off))}
    assert sentence.startswith(expected.format(**medians))  # medians as the 1 % sketch keeps them
    assert sentence.endswith(", 49 % slower.") if on[0] < off[0] else sentence.endswith("interval).")


def test_no_mtp_ratio_across_releases() -> None:
    package, revision = _mtp_fleet([5.0] * 8, [3.0] * 8)
    NodeRun.objects.filter(node__name="gpu-off").update(version="0.72.1")
    found = baselines.speedups(package, revision)
    assert found.mtp is None
    assert found.mtp_missing == "MTP on and MTP off never ran on the same stage split and mesh-llm release."


def test_a_tie_between_splits_is_decided_by_their_figures_and_names_not_the_order_the_cells_come_in() -> None:
    """Two stage splits tie on their thinner side (one MTP-on report each): the one with more reports on
    both sides is paired, and between splits that tie on both too, the first by name, whichever order
    the database returns the cells in (the speedups read them without an ORDER BY)."""
    cell = speedup_cells.NodeCell

    def cells(extra_off: int) -> list[speedup_cells.NodeCell]:
        return [
            cell(1, 1, "0..41", True, 1, 70, 100, 1),
            cell(2, 2, "0..41", False, 2, 0, 0, 2),
            cell(3, 3, "0..20|20..41", True, 1, 70, 100, 1),
            cell(4, 4, "0..20|20..41", False, 2 + extra_off, 0, 0, 2 + extra_off),
        ]

    for extra_off, split in ((0, "0..20|20..41"), (1, "0..20|20..41"), (-1, "0..41")):
        scopes = set()
        for order in (cells(extra_off), cells(extra_off)[::-1]):
            pair, missing = baselines._mtp_pair(order, {True, False}, {})
            assert pair is not None and not missing
            scopes.add(pair.scope)
        assert scopes == {f"stage split {split}, mesh-llm release not reported"}


def test_baseline_speedup_like_for_like_and_another_quantization_apart() -> None:
    package, revision = _mtp_fleet([6.0 + i * 0.01 for i in range(20)], [3.0] * 5)
    box = make_node("baseline-box")
    for i in range(20):
        _stored_window(box, 4.0 + i * 0.01)
        _stored_window(box, 5.0 + i * 0.01, quant_file="Qwen3.5-35B-A3B-Q8_0.gguf")
    found = baselines.speedups(package, revision)
    assert [s.other_quantization for s in found.baselines] == [False, True]
    same, other = found.baselines
    assert same.slower.label == "llama.cpp b6105-1a2b3c4 (UD-Q4_K_XL)" and same.slower.reports == 20
    assert same.ratio is not None and same.ratio.ratio == pytest.approx(6.095 / 4.095, rel=0.02)
    assert same.ratio.low is not None and same.ratio.low < same.ratio.ratio < same.ratio.high  # type: ignore[operator]
    assert other.ratio is not None and other.ratio.ratio == pytest.approx(6.095 / 5.095, rel=0.02)
    assert other.apart[0] == "another quantization: the baseline serves Q8_0, the package is UD-Q4_K_XL"
    assert "mesh-llm splits the model across stages (network hops); the baseline is one process" in same.apart
    assert not any(a.startswith("another quantization") for a in same.apart)
    # Control: merged into one group, the two quantizations would give neither figure.
    both = sketch.of_values([4.0 + i * 0.01 for i in range(20)] + [5.0 + i * 0.01 for i in range(20)])
    mixed = sketch.ratio_of_medians(both, same.faster.sketch)
    assert mixed is not None and abs(mixed.ratio - same.ratio.ratio) > 0.1


def test_a_speculating_baseline_has_its_acceptance_beside_it() -> None:
    package, revision = _mtp_fleet([6.0] * 10, [3.0] * 10)
    box = make_node("baseline-box")
    for _ in range(4):
        _stored_window(
            box, 4.0, drafts=200, draft_tokens=600, accepted_tokens=360, accepted_per_position=[180, 120, 60]
        )
    _stored_window(box, 400.0, drafts=10, draft_tokens=30, accepted_tokens=40)  # flagged: left out
    (row,) = baselines.speedups(package, revision).baselines
    assert row.slower.reports == 4
    assert row.slower.acceptance_rate == pytest.approx(0.6)
    assert row.slower.mean_acceptance_length == pytest.approx(2.8)
    assert row.slower.by_position == pytest.approx([0.9, 0.6, 0.3])
    assert "the baseline speculates too (mean acceptance length 2.80)" in row.apart
    assert "1 baseline windows whose figures contradict each other are left out" in row.apart


def test_nothing_to_join_is_said() -> None:
    package, revision = _mtp_fleet([6.0] * 3, [3.0] * 3)
    missing = baselines.speedups(package, revision).baseline_missing
    assert missing.startswith(
        f"No baseline engine reports for {SOURCE} yet. A plain llama.cpp or vLLM server"
    )


# --- The pages -------------------------------------------------------------------------------------


def _page_fleet() -> tuple[Any, Any, Any]:
    package, revision = _mtp_fleet([6.0 + i * 0.01 for i in range(20)], [3.0 + i * 0.01 for i in range(20)])
    older = make_revision(package, "undeclared-mtp", committed_at=BASE_TIME - timedelta(days=7), latest=False)
    box = make_node("baseline-box")
    for i in range(20):
        _stored_window(
            box,
            4.0 + i * 0.01,
            drafts=100,
            draft_tokens=300,
            accepted_tokens=150,
            accepted_per_position=[80, 50, 20],
        )
        _stored_window(box, 5.0 + i * 0.01, quant_file="Qwen3.5-35B-A3B-Q8_0.gguf")
    return package, revision, older


def test_the_compare_page_states_both_speedups_with_intervals(client: Client) -> None:
    package, revision, older = _page_fleet()
    url = f"/packages/{package.repo_id}/compare?from={older.commit_sha}&to={revision.commit_sha}"
    body = client.get(url).content.decode()
    found = baselines.speedups(package, revision)
    assert found.mtp is not None and found.mtp.ratio is not None and found.mtp.ratio.low is not None
    r = found.mtp.ratio
    assert f"x{r.ratio:.2f} (95 % interval x{r.low:.2f} to x{r.high:.2f})" in found.mtp.sentence
    assert found.mtp.sentence in body and found.mtp.sentence.startswith("MTP on decodes 6.1")
    same = found.baselines[0]
    assert same.sentence in body and "mesh-llm with MTP decodes 6.1" in same.sentence
    assert "with llama.cpp b6105-1a2b3c4 (UD-Q4_K_XL)" in same.sentence
    assert "another quantization: the baseline serves Q8_0, the package is UD-Q4_K_XL" in body
    assert "mesh-llm splits the model across stages (network hops); the baseline is one process" in body
    assert "#1 80%" in body and "#3 20%" in body  # the baseline's acceptance by position (per 100 drafts)
    assert ">2.50<" in body  # the baseline's mean acceptance length: 1 + 150 accepted / 100 drafts


def test_the_package_page_shows_the_speedup_and_says_what_is_missing(client: Client) -> None:
    package, revision, _ = _page_fleet()
    body = client.get(f"/packages/{package.repo_id}/").content.decode()
    mtp = baselines.speedups(package, revision).mtp
    assert 'id="speedup"' in body and mtp is not None and mtp.sentence in body
    lonely = make_package("meshllm/Lonely-Q4_K_M-layers")
    make_revision(lonely, "consistent-mtp", manifest_json={"model_id": "nobody/Lonely-GGUF:Q4_K_M"})
    body = client.get(f"/packages/{lonely.repo_id}/").content.decode()
    assert "MTP on against off: No node has reported decoding this revision yet." in body
    assert "Against a baseline engine: No baseline engine reports for nobody/Lonely-GGUF yet." in body


def test_a_hostile_engine_version_is_escaped(client: Client) -> None:
    package, _ = _mtp_fleet([6.0] * 5, [3.0] * 5)
    _stored_window(make_node("baseline-box"), 4.0, engine_version="<script>alert(1)</script>")
    body = client.get(f"/packages/{package.repo_id}/").content.decode()
    assert "<script>alert(1)</script>" not in body and "&lt;script&gt;alert(1)&lt;/script&gt;" in body


def test_the_compare_page_falls_back_to_the_other_revisions_mtp_off_and_says_so() -> None:
    """The demo's story: 69cbd9fc ran without MTP on mesh-llm 0.72.1, its republish with MTP on 0.78.0."""
    package = make_package("meshllm/Qwen3.5-35B-A3B-UD-Q4_K_XL-layers")
    old = make_revision(package, "undeclared-mtp", committed_at=BASE_TIME - timedelta(days=7), latest=False)
    new = make_revision(package, "consistent-mtp")
    node = make_node("demo-qwen")
    for i in range(12):
        make_report(node, old, 3.2 + i * 0.01, at=BASE_TIME + timedelta(minutes=i))
        make_report(node, new, 5.3 + i * 0.01, at=BASE_TIME + timedelta(hours=1, minutes=i), mtp_used=True)
    NodeRun.objects.create(node=node, run_id="run-old", revision=old, version="0.72.1")
    NodeRun.objects.create(node=node, run_id="run-new", revision=new, version="0.78.0")
    alone = baselines.speedups(package, new)
    assert alone.mtp is None
    assert (
        alone.mtp_missing == "Every report of this revision ran with MTP on: no MTP-off run to compare with."
    )
    found = baselines.speedups(package, new, before=old)
    assert found.mtp is not None and found.mtp_missing == ""
    assert found.mtp.ratio is not None and found.mtp.ratio.ratio == pytest.approx(5.355 / 3.255, rel=0.02)
    assert found.mtp.apart == (
        f"MTP off is {old.short_sha}'s reports: {new.short_sha} never ran without MTP on one split "
        "and release",
        "another mesh-llm release: MTP on ran 0.78.0, MTP off 0.72.1",
    )
    assert found.mtp.scope == f"MTP on: {new.short_sha}, MTP off: {old.short_sha}; stage split 0..27|27..41"
    assert found.mtp.slower.label == f"MTP off ({old.short_sha})"


def _runs_read_by_the_compare_speedups(repo_id: str, *, mtp_on: bool) -> int:
    """Two revisions of a package each reported on by one node (the newer with MTP on, or not): how many
    queries the compare page's speedups make of the nodes' runs' releases."""
    package = make_package(repo_id)
    old = make_revision(package, "undeclared-mtp", committed_at=BASE_TIME - timedelta(days=7), latest=False)
    new = make_revision(package, "consistent-mtp")
    node = make_node(f"node-of-{package.pk}")
    make_report(node, old, 3.2, at=BASE_TIME)
    make_report(node, new, 5.3, at=BASE_TIME + timedelta(hours=1), mtp_used=mtp_on)
    for revision in (old, new):
        NodeRun.objects.create(node=node, run_id=f"run-{revision.pk}", revision=revision, version="0.78.0")
    with CaptureQueriesContext(connection) as captured:
        baselines.speedups(package, new, before=old)
    # The releases' reads (the cells' own filter names the runs too, for their nodes only).
    return sum(f'"{NodeRun._meta.db_table}"."version"' in q["sql"] for q in captured)


def test_two_revisions_run_without_mtp_are_compared_without_reading_the_nodes_runs() -> None:
    # Nothing for a release to decide (no MTP on at all): the compare page's speedups read no runs, which
    # at 10,000 nodes are a thousand rows. Its control: MTP on in the newer makes them needed, and read
    # (this revision's, and the other's for the pair across them).
    assert _runs_read_by_the_compare_speedups("meshllm/A-layers", mtp_on=False) == 0
    assert _runs_read_by_the_compare_speedups("meshllm/B-layers", mtp_on=True) == 2


def test_the_mean_acceptance_length_of_otlp_span_reports_reads_the_native_mtp_counters() -> None:
    """A span report carries llama_stage.native_mtp.accepted / .verifications in its body's timings only."""
    package = make_package("meshllm/Qwen3.5-35B-A3B-UD-Q4_K_XL-layers")
    revision = make_revision(package, "consistent-mtp")
    node = make_node("span-node")
    timings = {"predicted_per_second": 5.0, "native_mtp_accepted": 45, "native_mtp_verifications": 60}
    for i in range(4):
        make_report(
            node,
            revision,
            5.0,
            at=BASE_TIME + timedelta(minutes=i),
            mtp_used=True,
            speculative_accepted_n=None,
            speculative_windows=None,
            body={"timings": timings},
        )
    bogus = {"timings": {"native_mtp_accepted": "many", "native_mtp_verifications": True}}
    make_report(
        node, revision, 5.0, mtp_used=True, speculative_accepted_n=None, speculative_windows=None, body=bogus
    )
    _stored_window(make_node("baseline-box"), 4.0)
    (row,) = baselines.speedups(package, revision).baselines
    assert row.faster.mean_acceptance_length == pytest.approx(
        1.75
    )  # 1 + 180 / 240; the bogus report left out


def test_the_admin_lists_and_shows_baseline_windows_read_only(admin_client: Client) -> None:
    _stored_window(make_node("baseline-box"), 4.0)
    row = BaselineReport.objects.get()
    assert admin_client.get("/admin/packages_app/baselinereport/").status_code == 200
    page = admin_client.get(f"/admin/packages_app/baselinereport/{row.pk}/change/")
    assert page.status_code == 200 and b'name="_save"' not in page.content


def test_a_revision_served_without_mtp_is_compared_with_the_baseline_as_it_ran() -> None:
    package = make_package("meshllm/Qwen3.5-35B-A3B-UD-Q4_K_XL-layers")
    revision = make_revision(package, "undeclared-mtp")
    node = make_node("demo-qwen")
    for i in range(20):
        make_report(node, revision, 3.2 + i * 0.01, at=BASE_TIME + timedelta(minutes=i))
    box = make_node("baseline-box")
    for i in range(20):
        _stored_window(box, 4.0 + i * 0.01)
    found = baselines.speedups(package, revision)
    assert found.mtp is None and found.mtp_missing == "No report of this revision ran with MTP on."
    (row,) = found.baselines
    assert row.title == "mesh-llm without MTP against llama.cpp b6105-1a2b3c4"
    assert row.ratio is not None and row.ratio.ratio == pytest.approx(3.295 / 4.095, rel=0.02)
    assert row.sentence.startswith("mesh-llm without MTP decodes 3.")
    assert row.sentence.endswith("% slower.")
    assert row.faster.mean_acceptance_length is None


# --- The package page's speedups from the plans' cells --------------------------------------------


def _baselines(*quant_files: str) -> None:
    box = make_node("baseline-box")
    for quant_file in quant_files:
        for i in range(12):
            _stored_window(box, 4.0 + i * 0.01, quant_file=quant_file)


def _on_off_and_baselines() -> tuple[Any, Any]:
    fleet = _mtp_fleet([6.0 + i * 0.01 for i in range(12)], [3.0] * 6)
    _baselines("Qwen3.5-35B-A3B-UD-Q4_K_XL.gguf", "Qwen3.5-35B-A3B-Q8_0.gguf")
    return fleet


def _mtp_on_only_and_a_baseline() -> tuple[Any, Any]:
    fleet = _mtp_fleet([6.0 + i * 0.01 for i in range(12)], [])
    _baselines("Qwen3.5-35B-A3B-UD-Q4_K_XL.gguf")
    return fleet


def _mtp_off_only_and_a_baseline() -> tuple[Any, Any]:
    fleet = _mtp_fleet([], [3.0 + i * 0.01 for i in range(12)])
    _baselines("Qwen3.5-35B-A3B-UD-Q4_K_XL.gguf")
    return fleet


def _two_releases_and_a_baseline() -> tuple[Any, Any]:
    fleet = _mtp_fleet([6.0] * 8, [3.0] * 8)
    NodeRun.objects.filter(node__name="gpu-off").update(version="0.72.1")
    _baselines("Qwen3.5-35B-A3B-UD-Q4_K_XL.gguf")
    return fleet


# Per fleet: the SplitRollup cells' sketches the page's speedups read (one query each time).
FLEETS = {
    "MTP on and off, no baseline": (lambda: _mtp_fleet([5.0 + i * 0.01 for i in range(12)], [3.0] * 12), 1),
    "MTP on and off, two baselines": (_on_off_and_baselines, 1),
    "MTP on only, a baseline": (_mtp_on_only_and_a_baseline, 1),
    "MTP on only, no baseline": (lambda: _mtp_fleet([6.0] * 5, []), 0),
    "MTP off only, a baseline": (_mtp_off_only_and_a_baseline, 1),
    "MTP off only, no baseline": (lambda: _mtp_fleet([], [3.0] * 5), 0),
    "on and off on two releases, a baseline": (_two_releases_and_a_baseline, 1),
}


def _sketch_reads(queries: Any) -> int:
    return sum('"tps_sketch"' in q["sql"] and "packages_app_splitrollup" in q["sql"] for q in queries)


@pytest.mark.parametrize("fleet", FLEETS)
def test_the_speedups_read_the_sketches_of_the_sides_shown_only(fleet: str) -> None:
    """The speedups read which ways the cells ran, then, only when a speedup can be shown (MTP ran both on
    and off, or a baseline engine reported), the per-node cells without their sketches and the sketches of
    the sides shown in one query (none when no side is shown), and the nodes' releases only when MTP ran
    both on and off. Each read of cells, and of the reports' acceptance counts, names the registered nodes'
    runs (rollups/public_weight.py)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    build, reads = FLEETS[fleet]
    package, revision = build()
    with CaptureQueriesContext(connection) as queries:
        speedups = baselines.speedups(package, revision)
    assert _sketch_reads(queries.captured_queries) == reads
    both = len({c.mtp_used for c in speedup_cells.node_cells(revision.pk)}) == 2
    cells_read = both or "no baseline" not in fleet
    cell_reads = sum(
        '"accepted"' in q["sql"] and "packages_app_splitrollup" in q["sql"] for q in queries.captured_queries
    )
    assert cell_reads == int(cells_read)
    # The mean acceptance length's read names them too (mesh_acceptance), where MTP ran.
    acceptance = [q["sql"] for q in queries.captured_queries if "native_mtp_verifications" in q["sql"]]
    assert len(acceptance) == int(cells_read and "off only" not in fleet)
    assert all("packages_app_noderun" in sql for sql in acceptance)
    runs = sum("packages_app_noderun" in q["sql"] for q in queries.captured_queries) - len(acceptance)
    assert runs == 1 + int(cells_read) + int(both)
    assert speedups.mtp is not None or speedups.baselines or reads == 0


@pytest.mark.parametrize("fleet", [name for name in FLEETS if "no baseline" in name])
def test_speedups_that_read_no_cells_answer_what_reading_them_does(
    fleet: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where nothing can be shown (no baseline engine, MTP ran one way or not at all), the speedups answer
    from the ways the cells ran without reading them: the same answer as reading them (the control)."""
    package, revision = FLEETS[fleet][0]()
    short = baselines.speedups(package, revision)
    monkeypatch.setattr(baselines, "_nothing_to_show", lambda ran, crossed, groups: False)
    assert baselines.speedups(package, revision) == short


def test_a_cells_decode_count_is_its_sketchs_count() -> None:
    """What the speedups count a side's reports by, without reading its sketch."""
    from packages_app.models import SplitRollup

    _on_off_and_baselines()
    cells = list(SplitRollup.objects.values_list("tps_n", "tps_sketch"))
    assert cells and all(n == sketch.count(sketch.from_json(bins)) for n, bins in cells)
