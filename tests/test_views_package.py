"""Package pages: verdict, evidence, declared vs detected, the fix, files, GGUF metadata, history, diffs."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from packages_app.models import Package, PackageFile
from tests import dashboard_factories as f

pytestmark = pytest.mark.django_db

PAGE = "/packages/meshllm/Qwen3.5-35B-A3B-UD-Q4_K_XL-layers/"
OLD_SHA = f.sha("qwen35-old")


@pytest.fixture
def qwen35() -> Package:
    return f.qwen35_package()


def text(response: Any) -> str:
    return response.content.decode()


def chart(response: Any, element_id: str) -> Any:
    body = text(response)
    marker = f'<script id="{element_id}" type="application/json">'
    start = body.index(marker) + len(marker)
    return json.loads(body[start : body.index("</script>", start)])


def test_the_page_shows_the_verdict_its_evidence_and_the_fix(client: Client, qwen35: Package) -> None:
    response = client.get(PAGE)
    body = text(response)
    assert response.status_code == 200
    assert "undeclared-mtp" in body and "Block 40 holds NextN tensors" in body
    assert "<dt>mtp_blocks</dt><dd><code>[40]</code></dd>" in body
    assert '<td data-label="Detected" class="mtp-blocks">40</td>' in body
    box = body[body.index('id="assessment"') : body.index('id="findings"')]
    assert "headline-not-servable" in box and "Synthetic: republish as package-v2." in box
    assert 'id="suggested-generation"' in body and "&quot;native-mtp&quot;" in body
    assert f"manifest.patched.json?revision={f.QWEN35_SHA}" in body


def test_the_layout_chart_highlights_block_40_and_the_reported_stage_split(
    client: Client, qwen35: Package
) -> None:
    f.qwen35_reports(qwen35.revisions.get(commit_sha=f.QWEN35_SHA))
    figure = chart(client.get(PAGE), "chart-layout")
    mtp = [t for t in figure["data"] if t["name"] == "MTP (NextN) block"]
    assert [t["x"] for t in mtp] == [[40]]
    assert [s["x0"] for s in figure["layout"]["shapes"]] == [26.5]


def test_throughput_figures_and_the_alert_appear_once_nodes_report(client: Client, qwen35: Package) -> None:
    f.qwen35_reports(qwen35.revisions.get(commit_sha=f.QWEN35_SHA))
    response = client.get(PAGE)
    body = text(response)
    assert "MTP weights present but never used in 6 reports from 2 nodes" in body
    assert "stage0-a" in body and "auto → disabled" in body
    # The reports fall in one hour: one bar per strategy and topology, not a time axis.
    assert chart(response, "chart-timeline")["data"][0]["x"] == ["disabled @ 0..27|27..41"]


def test_the_alert_links_the_nodes_it_names_and_counts_the_others(
    client: Client, qwen35: Package, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The page names and links what the API names (the nodes with the most unused reports) and says how
    many more there are; with room for both nodes it names both and says no more."""
    from packages_app import node_plans

    f.qwen35_reports(qwen35.revisions.get(commit_sha=f.QWEN35_SHA))
    monkeypatch.setattr(node_plans, "ALERT_NAMES", 1)
    (named,) = client.get(f"/api/v1/packages/{qwen35.repo_id}").json()["alerts"][0]["names"]
    assert alert_sentence(client) == f'<a href="/nodes/{named}/">{named}</a> and 1 more.'
    monkeypatch.setattr(node_plans, "ALERT_NAMES", 10)
    both = alert_sentence(client)
    assert both.count('<a href="/nodes/') == 2 and "more" not in both


def test_nodes_with_alike_advice_share_one_note_in_the_headline_box(
    client: Client, qwen35: Package, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both nodes ran the undeclared revision without MTP and read the same advice: the box says it once,
    naming and linking both (it said it once per node); with one name allowed it counts the other."""
    from packages_app.fleet import plans

    f.qwen35_reports(qwen35.revisions.get(commit_sha=f.QWEN35_SHA))
    notes = box_notes(client)
    assert len(notes) == 1
    assert notes[0].startswith(
        '<a href="/nodes/stage0-a/">stage0-a</a>, <a href="/nodes/stage1-b/">stage1-b</a>: '
    )
    monkeypatch.setattr(plans, "NOTE_NAMES", 1)
    (capped,) = box_notes(client)
    assert '<a href="/nodes/stage0-a/">stage0-a</a> and 1 more: ' in capped


def box_notes(client: Client) -> list[str]:
    """The per-node notes of the headline box, each after its badge (the alert's line has no class)."""
    body = text(client.get(PAGE))
    box = body[body.index('class="node-notes"') :].split("</ul>")[0]
    found = re.findall(r'<li class="finding-[^"]+">(.*?)</li>', box, re.S)
    return [note.split("</a>", 1)[1].strip() for note in found]  # after the cause's badge


def alert_sentence(client: Client) -> str:
    """The names the alert lists on the page, to the end of its sentence."""
    body = text(client.get(PAGE))
    return (
        body[body.index("from 2 nodes: ") + len("from 2 nodes: ") :]
        .split("</li>")[0]
        .split(" The package")[0]
    )


def test_without_reports_the_page_says_so(client: Client, qwen35: Package) -> None:
    body = text(client.get(PAGE))
    assert "No node has reported running this revision yet." in body
    assert 'id="chart-timeline"' not in body


def test_the_file_table_flags_a_sha256_mismatch_between_manifest_and_hub(client: Client) -> None:
    package = f.make_package("meshllm/m-layers")
    revision = f.make_revision(package, "consistent-mtp", files=True)
    revision.audit["provenance"]["files"] = f.provenance_files(41, mismatch=12)
    revision.save()
    body = text(client.get("/packages/meshllm/m-layers/?files=all"))
    assert body.count("sha-sha256_mismatch") == 1
    assert body.count('class="badge sha sha-match"') == 40


def files_section(body: str) -> str:
    start = body.index('<section id="files">')
    return body[start : body.index("</section>", start)]


def test_the_files_summary_groups_clean_layers_and_expands_the_mismatch_and_the_mtp_block(
    client: Client,
) -> None:
    package = f.make_package("meshllm/m-layers")
    revision = f.make_revision(package, "consistent-mtp", files=True)
    revision.audit["provenance"]["files"] = f.provenance_files(41, mismatch=12)
    revision.save()
    files = files_section(text(client.get("/packages/meshllm/m-layers/")))
    # Blocks 0-11 and 13-39 are ranges; block 12 (sha256 mismatch) and block 40 (MTP) keep their rows.
    assert files.count('<tr class="file-range">') == 2
    assert "layers 0\u201311" in files and "layers 13\u201339" in files
    assert files.count("sha-sha256_mismatch") == 1
    assert files.count('<span class="badge mtp">MTP</span>') == 1
    assert "layer-012.gguf" in files and "layer-040.gguf" in files
    # The range's size is the sum of its files, in decimal units with the exact bytes on hover.
    assert 'title="13,149,000,000 bytes">13.1 GB</span>' in files
    assert "All 42 files, one row each" in files


def test_control_the_full_file_list_still_has_one_row_per_file(client: Client) -> None:
    package = f.make_package("meshllm/m-layers")
    revision = f.make_revision(package, "consistent-mtp", files=True)
    revision.audit["provenance"]["files"] = f.provenance_files(41, mismatch=12)
    revision.save()
    files = files_section(text(client.get("/packages/meshllm/m-layers/?files=all")))
    assert files.count('<tr class="file-range">') == 0
    assert files.count('<td data-label="Path" class="path">') == 42


def test_a_failed_header_breaks_the_range_and_shows_its_error(client: Client) -> None:
    package = f.make_package("meshllm/m-layers")
    revision = f.make_revision(package, "consistent-no-mtp", files=True)
    PackageFile.objects.filter(revision=revision, layer_index=20).update(
        header_status=PackageFile.HeaderStatus.FAILED, header_error="truncated <header>"
    )
    files = files_section(text(client.get("/packages/meshllm/m-layers/")))
    assert "layers 0\u201319" in files and "layers 21\u2013" in files
    assert 'title="truncated &lt;header&gt;">failed</span>' in files


def test_the_page_leads_with_a_section_nav_that_reaches_every_section_by_anchor(
    client: Client, qwen35: Package
) -> None:
    body = text(client.get(PAGE + f"?revision={f.QWEN35_SHA}"))
    nav = body[
        body.index('<nav class="section-nav"') : body.index("</nav>", body.index('<nav class="section-nav"'))
    ]
    anchors = [a.split('"')[0] for a in nav.split('href="#')[1:]]
    assert anchors == ["fix", "audit", "throughput", "files", "history", "compare"]
    for anchor in anchors:
        assert f'id="{anchor}"' in body
    # The headline and the action come before the nav; the nav before every section it names.
    assert body.index('id="action"') < body.index('class="section-nav"') < body.index('id="fix"')


def test_the_history_is_a_timeline_with_each_revision_its_status_and_a_diff_link(
    client: Client, qwen35: Package
) -> None:
    body = text(client.get(PAGE))
    start = body.index('<section id="history">')
    history = body[start : body.index("</section>", start)]
    assert history.count("<li") == 2
    assert history.count("diff with previous") == 1
    assert f.QWEN35_SHA[:8] in history and OLD_SHA[:8] in history
    assert 'aria-current="true"' in history


def test_another_revision_is_chosen_by_sha_prefix(client: Client, qwen35: Package) -> None:
    body = text(client.get(PAGE, {"revision": OLD_SHA[:7]}))
    assert 'class="badge verdict verdict-consistent-mtp ' in body.split('id="declared-detected"')[0]
    assert 'id="fix"' not in body


@pytest.mark.parametrize(
    ("ref", "status", "message"),
    [
        ("deadbeef", 404, "has no revision deadbeef"),
        ("not-a-sha", 404, "is not a commit sha"),
    ],
)
def test_an_unknown_revision_is_a_404_with_a_reason(
    client: Client, qwen35: Package, ref: str, status: int, message: str
) -> None:
    response = client.get(PAGE, {"revision": ref})
    assert response.status_code == status
    assert message in text(response)


def test_an_ambiguous_prefix_is_a_400(client: Client) -> None:
    package = f.make_package("meshllm/amb-layers")
    f.make_revision(package, commit_sha="abcd" + "1" * 36)
    f.make_revision(package, commit_sha="abcd" + "2" * 36)
    response = client.get("/packages/meshllm/amb-layers/", {"revision": "abcd"})
    assert response.status_code == 400 and "give more digits" in text(response)


def test_an_unknown_package_is_a_404(client: Client) -> None:
    response = client.get("/packages/meshllm/nothing-here/")
    assert response.status_code == 404 and "No package meshllm/nothing-here is tracked." in text(response)


def test_a_package_without_revisions_says_its_ingest_is_pending(client: Client) -> None:
    f.make_package("meshllm/new-layers")
    response = client.get("/packages/meshllm/new-layers/")
    assert response.status_code == 200 and "No revision of this package has been ingested yet" in text(
        response
    )


def test_the_patched_manifest_downloads_as_a_json_attachment(client: Client, qwen35: Package) -> None:
    response = client.get(PAGE + "manifest.patched.json", {"revision": f.QWEN35_SHA})
    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    assert response["Content-Disposition"].startswith("attachment; filename=")
    assert "69cbd9fc" in response["Content-Disposition"]
    patched = json.loads(response.content)
    assert patched["generation"]["speculative_decoding"]["strategies"]["mtp"]["layer_indices"] == [40]


def test_a_consistent_revision_has_no_patched_manifest(client: Client, qwen35: Package) -> None:
    response = client.get(PAGE + "manifest.patched.json", {"revision": OLD_SHA})
    assert response.status_code == 404 and "needs no fix" in text(response)


def test_the_gguf_metadata_page_summarises_arrays_and_lists_tensors(client: Client, qwen35: Package) -> None:
    response = client.get(PAGE + "files/layers/layer-040.gguf")
    body = text(response)
    assert response.status_code == 200
    assert "STRING[151936]" in body
    assert "blk.40.nextn.eh_proj.weight" in body and body.count('class="mtp-row"') == 4
    assert "<details><summary>" in body  # the long chat template is folded


def test_a_size_reads_the_same_in_the_files_table_and_on_the_file_page(client: Client) -> None:
    package = f.make_package("meshllm/u-layers")
    revision = f.make_revision(package, "consistent-mtp", files=True)
    PackageFile.objects.filter(revision=revision, layer_index=40).update(
        size=537_961_472, header_bytes=8_080_000
    )
    shown = '<span class="size" title="537,961,472 bytes">538 MB</span>'
    header = '<span class="size" title="8,080,000 bytes">8.1 MB</span>'
    table = files_section(text(client.get("/packages/meshllm/u-layers/")))
    page = text(client.get("/packages/meshllm/u-layers/files/layers/layer-040.gguf"))
    for body in (table, page):
        assert shown in body and header in body
        assert "MiB" not in body and "513.0 MB" not in body


def test_a_missing_file_is_a_404(client: Client, qwen35: Package) -> None:
    response = client.get(PAGE + "files/layers/layer-099.gguf")
    assert response.status_code == 404 and "has no file layers/layer-099.gguf" in text(response)


def test_the_diff_page_shows_the_manifest_change_and_the_verdict_change(
    client: Client, qwen35: Package
) -> None:
    response = client.get(PAGE + "diff", {"from": OLD_SHA[:8], "to": f.QWEN35_SHA[:8]})
    body = text(response)
    assert response.status_code == 200
    assert "MTP verdict changed: <strong>consistent-mtp</strong> → <strong>undeclared-mtp</strong>" in body
    assert '<span class="d-del">-  &quot;generation&quot;: {</span>' in body
    assert "No file added, removed or changed." in body


def test_the_diff_defaults_to_the_latest_revision_against_its_predecessor(
    client: Client, qwen35: Package
) -> None:
    body = text(client.get(PAGE + "diff"))
    assert f"Changes from <code>{OLD_SHA[:8]}</code> to <code>{f.QWEN35_SHA[:8]}</code>" in body


def test_the_oldest_revision_has_nothing_to_diff_against(client: Client, qwen35: Package) -> None:
    response = client.get(PAGE + "diff", {"to": OLD_SHA})
    assert response.status_code == 404 and "oldest revision" in text(response)


def test_untrusted_text_is_escaped_and_never_evaluated_as_a_template(client: Client) -> None:
    hostile = "</script><script>alert(1)</script> <img src=x onerror=alert(1)> {{7*7}}"
    package = f.make_package("meshllm/x-layers")
    revision = f.make_revision(package, "undeclared-mtp", title=hostile, files=True)
    revision.audit["problems"][0]["message"] = hostile
    revision.audit["detected"]["blocks"][3]["file"] = hostile
    revision.save()
    f.make_report(f.make_node(hostile[:90]), revision, 3.0, effective_strategy=hostile[:60])
    PackageFile.objects.filter(revision=revision).update(kv={"general.name": hostile})
    for url in ("/packages/meshllm/x-layers/", "/packages/meshllm/x-layers/files/layers/layer-001.gguf"):
        body = text(client.get(url))
        assert "<script>alert(1)</script>" not in body and "<img src=x" not in body
        assert "{{7*7}}" in body  # rendered as a template it would read 49
    # Chart labels are entity-escaped for plotly, then json_script escapes "&" and "<" again.
    assert "\\u0026lt;/script\\u0026gt;" in text(client.get("/packages/meshllm/x-layers/"))


def page_queries(client: Client, url: str) -> int:
    with CaptureQueriesContext(connection) as queries:
        assert client.get(url).status_code == 200
    return len(queries)


def test_the_number_of_queries_does_not_grow_with_revisions_files_or_reports(
    client: Client, django_assert_num_queries: Any
) -> None:
    package = f.make_package("meshllm/q-layers")
    node = f.make_node()
    for i in range(3):
        revision = f.make_revision(
            package, "undeclared-mtp", committed_at=f.BASE_TIME + timedelta(days=i), files=i == 2
        )
        f.make_report(node, revision, 3.0)
    few = page_queries(client, "/packages/meshllm/q-layers/")
    for i in range(3, 30):
        revision = f.make_revision(
            package, "undeclared-mtp", committed_at=f.BASE_TIME + timedelta(days=i), files=i == 29
        )
        for hour in range(5):
            f.make_report(
                node, revision, 3.0 + hour, at=f.BASE_TIME + timedelta(hours=hour), stage_splits=f"{hour}"
            )
    with django_assert_num_queries(few):
        client.get("/packages/meshllm/q-layers/")


@pytest.mark.parametrize(
    ("model", "schema", "verdict"),
    [("QWEN35", 1, "undeclared-mtp"), ("GLM47", 2, "undeclared-mtp"), ("LLAMA", 1, "consistent-no-mtp")],
)
def test_the_page_renders_what_capability_audit_really_writes(
    client: Client, model: str, schema: int, verdict: str
) -> None:
    from tests import audit_fixtures

    built = audit_fixtures.build(getattr(audit_fixtures, model), schema)
    result = built.audit()
    audit, assessment = result.to_json(), result.assessment
    assert assessment is not None
    package = f.make_package("meshllm/real")
    f.make_revision(
        package,
        audit["verdict"],
        audit=audit,
        manifest_json=built.manifest,
        assessment=assessment.to_json(),
        headline=assessment.status.value,
    )
    response = client.get("/packages/meshllm/real/")
    assert response.status_code == 200
    body = text(response)
    assert f'class="badge verdict verdict-{verdict} ' in body
    assert f"headline-{assessment.status.value} " in body and assessment.headline.sentence in body
    releases = body[body.index('id="releases"') : body.index('id="layout"')]
    for row in audit["compatibility"]:  # the release matrix, every release in releases.toml
        assert f"<code>{row['release']}</code>" in releases
    for setting in audit["runtime"]:  # the settings, on the releases that load it
        if assessment.admitting_releases:
            assert f"<code>{setting}</code>" in releases
    mtp_bars = [t["x"] for t in chart(response, "chart-layout")["data"] if t["name"] == "MTP (NextN) block"]
    assert mtp_bars == ([audit["detected"]["mtp_blocks"]] if audit["detected"]["mtp_blocks"] else [])
    if audit["suggested_generation"] and schema == 1:  # v1: the block alone does not make it servable
        assert "Republish it as package-v2" in text(response)
    if audit["suggested_generation"]:
        download = client.get("/packages/meshllm/real/manifest.patched.json")
        assert json.loads(download.content)["generation"] == audit["suggested_generation"]["generation"]


def test_the_size_filter_shows_an_unknown_size_as_a_dash_and_never_a_zero() -> None:
    from packages_app.templatetags.verdicts import bytes_size

    for unknown in (None, 0, -1, True, "12"):
        assert bytes_size(unknown) == '<span class="muted">\u2013</span>'  # type: ignore[arg-type]
    assert bytes_size(999) == '<span class="size" title="999 bytes">999 bytes</span>'
    assert bytes_size(1_500_000_000_000) == '<span class="size" title="1,500,000,000,000 bytes">1.5 TB</span>'


def test_the_time_range_is_offered_kept_and_an_unknown_one_ignored(client: Client, qwen35: Package) -> None:
    f.qwen35_reports(qwen35.revisions.get(commit_sha=f.QWEN35_SHA))
    page = text(client.get(PAGE + f"?revision={f.QWEN35_SHA}&range=7d"))
    assert '<option value="7d" selected>the last 7 days</option>' in page
    unknown = client.get(PAGE + f"?revision={f.QWEN35_SHA}&range=1y")
    assert unknown.status_code == 200
    assert '<option value="" selected>every report</option>' in text(unknown)


def test_the_timeline_bands_the_middle_half_and_marks_where_each_revision_was_first_served(
    client: Client,
) -> None:
    package = f.make_package("meshllm/band-layers")
    node = f.make_node()
    old = f.make_revision(package, "undeclared-mtp", committed_at=f.BASE_TIME)
    new = f.make_revision(package, "consistent-mtp", committed_at=f.BASE_TIME + timedelta(days=1))
    start = timezone.now().replace(minute=0, second=0, microsecond=0) - timedelta(hours=10)
    for hour in range(4):
        for tps in (2.0, 3.0, 4.0, 5.0, 6.0):
            f.make_report(node, old, tps, at=start + timedelta(hours=hour, minutes=10))
    f.make_report(node, new, 9.0, at=start + timedelta(hours=2, minutes=30))
    body = text(client.get(f"/packages/meshllm/band-layers/?revision={old.commit_sha}"))
    found = re.search(r'<script id="chart-timeline" type="application/json">(.*?)</script>', body, re.S)
    assert found
    figure = json.loads(found.group(1))
    band, line = figure["data"]
    # 2, 3, 4, 5, 6 each hour: p25 3, median 4, p75 5 (within the sketch's 1 %).
    assert band["y"][0] == pytest.approx(5.0, rel=0.01) and band["y"][-1] == pytest.approx(3.0, rel=0.01)
    assert line["y"][0] == pytest.approx(4.0, rel=0.01)
    texts = [a["text"] for a in figure["layout"]["annotations"]]
    assert texts == [f"{old.short_sha} first served", f"{new.short_sha} first served"]


def test_the_recent_reports_table_has_a_column_per_shown_metric_of_the_table(client: Client) -> None:
    from packages_app import report_metrics

    package = f.make_package("meshllm/recent-layers")
    revision = f.make_revision(package, "undeclared-mtp")
    f.make_report(f.make_node(), revision, 3.25, at=timezone.now())
    body = text(client.get("/packages/meshllm/recent-layers/"))
    table = body[body.index('class="recent-reports"') :]
    table = table[: table.index("</table>")]
    shown = [report_metrics.BY_NAME[n] for n in report_metrics.shown_columns()]
    assert re.findall(r'<th scope="col" class="num">([^<]+)</th>', table) == [m.label for m in shown]
    assert '<td data-label="Decode tokens/s" class="num">3.25</td>' in table


def _timeline(body: str) -> dict[str, Any]:
    found = re.search(r'<script id="chart-timeline" type="application/json">(.*?)</script>', body, re.S)
    assert found
    figure: dict[str, Any] = json.loads(found.group(1))
    return figure


@pytest.fixture
def three_days() -> Any:
    """A package with reports on 2026-03-01, 03-05 and 03-20 (UTC), four a day."""
    package = f.make_package("meshllm/range-layers")
    node = f.make_node()
    revision = f.make_revision(package, "consistent-mtp", committed_at=f.BASE_TIME)
    for day in (1, 5, 20):
        for hour in range(4):
            at = datetime(2026, 3, day, 10 + hour, 5, tzinfo=UTC)
            f.make_report(node, revision, 3.0 + day, at=at)
    return f"/packages/meshllm/range-layers/?revision={revision.commit_sha}"


def test_a_custom_range_keeps_its_dates_and_draws_only_the_days_between_them(
    client: Client, three_days: str
) -> None:
    every = _timeline(text(client.get(three_days)))
    assert {x[:10] for trace in every["data"] for x in trace["x"]} == {
        "2026-03-01",
        "2026-03-05",
        "2026-03-20",
    }
    response = client.get(three_days + "&range=custom&start=2026-03-01&end=2026-03-05")
    body = text(response)
    assert response.status_code == 200
    assert '<option value="custom" selected>' in body
    assert 'name="start" value="2026-03-01"' in body and 'name="end" value="2026-03-05"' in body
    days = {x[:10] for trace in _timeline(body)["data"] for x in trace["x"]}
    assert days == {"2026-03-01", "2026-03-05"}  # the end day is included, 03-20 is out
    assert "the figures and charts below cover this range" in body
    assert "tok/s · 8 reports" in body and "tok/s · 12 reports" not in body  # MTP off: 4 a day, two days
    assert 'id="range-error"' not in body
    # An open end: from 03-05 on.
    later = _timeline(text(client.get(three_days + "&range=custom&start=2026-03-05")))
    assert {x[:10] for trace in later["data"] for x in trace["x"]} == {"2026-03-05", "2026-03-20"}
    # One old day (older than the hourly rollups) is one day bucket: a bar for it, not a 2 ms axis.
    one = _timeline(text(client.get(three_days + "&range=custom&start=2026-03-20&end=2026-03-20")))
    assert [trace["type"] for trace in one["data"]] == ["bar"]
    assert one["data"][0]["y"] == [pytest.approx(23.0, rel=0.01)]
    assert "2026-03-20" in one["layout"]["title"]["text"]


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("range=custom&start=2026-13-01", "From should be a date like 2026-11-30."),
        ("range=custom&end=yesterday", "To should be a date like 2026-11-30."),
        ("range=custom&start=2026-03-20&end=2026-03-01", "From (2026-03-20) is after To (2026-03-01)"),
        (
            "range=custom&start=1999-12-31",
            "Dates should be between 2000-01-01 and 2099-12-31, not 1999-12-31.",
        ),
        ("range=custom&end=9999-12-31", "Dates should be between 2000-01-01 and 2099-12-31, not 9999-12-31."),
        ("range=custom&start=99999-01-01", "From should be a date like 2026-11-30."),
        ("range=1y", "Unknown time range 1y: pick 24h, 7d, 30d or custom dates."),
    ],
)
def test_a_bad_range_says_what_is_wrong_and_shows_every_report(
    client: Client, three_days: str, query: str, message: str
) -> None:
    response = client.get(three_days + "&" + query)
    assert response.status_code == 200
    body = text(response)
    error = re.search(r'<p class="error-box" role="alert" id="range-error">(.*?)</p>', body, re.S)
    assert error and message in error.group(1)
    assert "Showing every report." in error.group(1)
    assert "tok/s · 12 reports" in body  # the figures too are over every report
    days = {x[:10] for trace in _timeline(body)["data"] for x in trace["x"]}
    assert days == {"2026-03-01", "2026-03-05", "2026-03-20"}


def test_control_a_good_range_shows_no_error_and_markup_in_a_date_is_escaped(
    client: Client, three_days: str
) -> None:
    assert 'id="range-error"' not in text(client.get(three_days + "&range=7d"))
    body = text(client.get(three_days + "&range=custom&start=<b>x</b>"))
    assert "<b>x</b>" not in body and "&lt;b&gt;x&lt;/b&gt;" in body
