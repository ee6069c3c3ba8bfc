"""The hub package against devhub through the real huggingface_hub client: pinning, listing, ranged reads."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from packages_app import hub, inspection
from packages_app.devhub import (
    DEMO_PACKAGES,
    DEVHUB_TOKEN,
    GATED_REPO,
    GLM47_REPO,
    PRIVATE_REPO,
    QWEN35_FIRST_SHA,
    QWEN35_REPO,
    DemoPackage,
    DevHub,
    write_package_folder,
)
from packages_app.gguf_header import parse_file

KIB = 1024


@pytest.mark.parametrize(
    "repo_id",
    [
        "https://huggingface.co/meshllm/x-layers",
        "meshllm/../etc",
        "meshllm/a--b",
        "../meshllm",
        "meshllm/x/y",
        "/meshllm/x",
        "meshllm/.hidden",
        "meshllm/x.git",
        "meshllm/" + "a" * 96,
        "meshllm/x y",
        "",
    ],
)
def test_it_refuses_repo_ids_that_are_urls_paths_or_tricks(repo_id: str) -> None:
    with pytest.raises(hub.InvalidRepoId):
        hub.validate_repo_id(repo_id)


def test_it_accepts_a_real_package_repo_id() -> None:
    assert hub.validate_repo_id(QWEN35_REPO) == QWEN35_REPO


def test_it_refuses_a_bad_repo_id_before_any_request(devhub: DevHub) -> None:
    before = devhub.counters.snapshot()["requests"]
    with pytest.raises(hub.InvalidRepoId):
        hub.HubSource("meshllm/../../admin", endpoint=devhub.url)
    assert devhub.counters.snapshot()["requests"] == before


def test_it_pins_a_branch_to_its_commit_sha(hub_source: type[hub.HubSource]) -> None:
    source = hub_source(QWEN35_REPO)
    sha = source.resolve_revision("main")
    assert hub.SHA_RE.match(sha)
    assert sha == source.list_commits()[0].sha


def test_the_history_behind_a_pinned_sha_ends_at_that_sha(hub_source: type[hub.HubSource]) -> None:
    source = hub_source(QWEN35_REPO)
    newest, older = source.list_commits()[:2]
    history = [c.sha for c in source.list_commits(older.sha)]
    assert history[0] == older.sha and newest.sha not in history


def test_it_lists_commits_newest_first_down_to_the_first_upload(hub_source: type[hub.HubSource]) -> None:
    commits = hub_source(QWEN35_REPO).list_commits()
    assert commits[-1].sha == QWEN35_FIRST_SHA
    dates = [c.date for c in commits]
    assert dates == sorted(dates, reverse=True)


def test_it_reads_the_manifest_bytes_at_a_pinned_sha(hub_source: type[hub.HubSource]) -> None:
    manifest = json.loads(hub_source(QWEN35_REPO).read_manifest(QWEN35_FIRST_SHA))
    assert manifest["schema_version"] == 1
    assert "generation" not in manifest


def test_it_lists_files_with_sizes_and_lfs_sha256(hub_source: type[hub.HubSource]) -> None:
    files = {f.path: f for f in hub_source(QWEN35_REPO).list_files(QWEN35_FIRST_SHA)}
    layer = files["layers/layer-040.gguf"]
    assert layer.size > 100 * 1024 * 1024
    assert layer.lfs_sha256 is not None and len(layer.lfs_sha256) == 64
    assert files[hub.MANIFEST_PATH].lfs_sha256 is None


def test_a_missing_repo_is_a_clear_not_found(hub_source: type[hub.HubSource]) -> None:
    with pytest.raises(hub.HubNotFound, match="meshllm/No-Such-Package-layers"):
        hub_source("meshllm/No-Such-Package-layers").resolve_revision(None)


def test_a_missing_revision_is_a_clear_not_found(hub_source: type[hub.HubSource]) -> None:
    with pytest.raises(hub.HubNotFound, match="revision"):
        hub_source(QWEN35_REPO).resolve_revision("f" * 40)


def test_a_gated_repo_lists_without_a_token_but_its_files_need_one(hub_source: type[hub.HubSource]) -> None:
    anonymous = hub_source(GATED_REPO, token="")
    sha = anonymous.resolve_revision(None)
    with pytest.raises(hub.HubUnauthorized, match="HF_TOKEN"):
        anonymous.read_manifest(sha)
    assert json.loads(hub_source(GATED_REPO, token=DEVHUB_TOKEN).read_manifest(sha))["schema_version"]


def test_a_private_repo_is_not_found_without_a_token_and_read_with_one(
    hub_source: type[hub.HubSource],
) -> None:
    with pytest.raises(hub.HubNotFound, match="HF_TOKEN"):
        hub_source(PRIVATE_REPO, token="").resolve_revision(None)
    assert hub.SHA_RE.match(hub_source(PRIVATE_REPO, token=DEVHUB_TOKEN).resolve_revision(None))


def test_it_retries_a_429_and_a_503_then_reads_the_file(
    devhub: DevHub, hub_source: type[hub.HubSource]
) -> None:
    source = hub.HubSource(QWEN35_REPO, endpoint=devhub.url, max_retries=3)
    devhub.fail_next(1, 429, retry_after=0, match="resolve")
    devhub.fail_next(1, 503, retry_after=0, match="resolve")
    assert json.loads(source.read_manifest(QWEN35_FIRST_SHA))["schema_version"] == 1


def test_it_gives_up_with_a_retryable_error_when_the_hub_keeps_failing(devhub: DevHub) -> None:
    source = hub.HubSource(QWEN35_REPO, endpoint=devhub.url, max_retries=0)
    devhub.fail_next(1, 503, retry_after=7, match="resolve")
    with pytest.raises(hub.HubUnavailable) as caught:
        source.read_manifest(QWEN35_FIRST_SHA)
    assert caught.value.retryable
    assert caught.value.retry_after == 7


def test_a_ranged_read_returns_exactly_the_bytes_asked_for(
    hub_source: type[hub.HubSource], demo_catalog: Path, tmp_path: Path
) -> None:
    folder = write_package_folder(QWEN35_REPO, QWEN35_FIRST_SHA, tmp_path / "pkg", root=demo_catalog)
    local = (folder / "layers/layer-040.gguf").read_bytes()[1000:1100]
    assert hub_source(QWEN35_REPO).read_range(QWEN35_FIRST_SHA, "layers/layer-040.gguf", 1000, 100) == local


def test_one_header_of_unknown_size_costs_at_most_3_requests_and_its_size_plus_10_percent(
    hub_source: type[hub.HubSource],
) -> None:
    result = hub.read_header(hub_source(QWEN35_REPO), QWEN35_FIRST_SHA, "layers/layer-040.gguf")
    assert result.header is not None
    assert result.header.header_bytes > 6 * 1024 * 1024
    assert result.requests <= 3
    assert result.bytes <= 1.10 * result.header.header_bytes + 256 * KIB


@pytest.mark.parametrize("package", DEMO_PACKAGES, ids=lambda p: p.repo_id.split("/")[1])
def test_every_big_demo_header_of_unknown_size_costs_at_most_3_requests(
    hub_source: type[hub.HubSource], package: DemoPackage
) -> None:
    source = hub_source(package.repo_id)
    ggufs = [f.path for f in source.list_files(package.main_sha) if f.path.endswith(".gguf")]
    shared = [p for p in ggufs if not p.startswith("layers/")]
    for path in [*shared, next(p for p in ggufs if p.startswith("layers/"))]:
        result = hub.read_header(source, package.main_sha, path)
        assert result.header is not None, result.error
        assert result.requests <= 3, path
        assert result.bytes <= 1.10 * result.header.header_bytes + 256 * KIB, path


def test_a_whole_v1_package_costs_about_one_request_per_file(hub_source: type[hub.HubSource]) -> None:
    source = hub_source(QWEN35_REPO)
    files = source.list_files(QWEN35_FIRST_SHA)
    results = inspection.fetch_package_headers(source, QWEN35_FIRST_SHA, files, schema_version=1)
    assert all(r.header is not None for r in results), [r.error for r in results if r.error]
    assert len([r for r in results if r.path.startswith("layers/")]) == 41
    header_bytes = sum(r.header.header_bytes for r in results if r.header)
    assert source.stats.bytes <= 1.05 * header_bytes
    assert source.stats.requests <= 1.2 * len(results)


def test_a_v2_package_reads_its_metadata_and_skips_the_layer_files(hub_source: type[hub.HubSource]) -> None:
    source = hub_source(GLM47_REPO)
    sha = source.resolve_revision(None)
    skipped: list[str] = []
    results = inspection.fetch_package_headers(
        source,
        sha,
        source.list_files(sha),
        schema_version=2,
        on_skipped=skipped.extend,
    )
    assert "shared/metadata.gguf" in {r.path for r in results}
    assert len(skipped) == 48
    assert not any(r.path.startswith("layers/") for r in results)
    assert source.stats.requests == 2


def test_the_header_read_remotely_equals_the_header_parsed_from_the_file(
    hub_source: type[hub.HubSource], demo_catalog: Path, tmp_path: Path
) -> None:
    folder = write_package_folder(QWEN35_REPO, QWEN35_FIRST_SHA, tmp_path / "pkg", root=demo_catalog)
    remote = hub.read_header(hub_source(QWEN35_REPO), QWEN35_FIRST_SHA, "layers/layer-012.gguf")
    assert remote.header is not None
    assert remote.header.to_json() == parse_file(folder / "layers/layer-012.gguf").to_json()


def test_a_truncated_remote_header_is_a_typed_error_not_a_crash(tmp_path: Path) -> None:
    path = tmp_path / "cut.gguf"
    path.write_bytes(b"GGUF" + (3).to_bytes(4, "little") + (1).to_bytes(8, "little"))
    result = hub.read_header(inspection.LocalFileReader(str(path)), "", "cut.gguf")
    assert result.header is None
    assert result.error_code == "truncated"
    assert "ends inside its GGUF header" in result.error


def test_a_local_folder_is_a_source_with_the_same_interface(demo_catalog: Path, tmp_path: Path) -> None:
    folder = write_package_folder(QWEN35_REPO, QWEN35_FIRST_SHA, tmp_path / "pkg", root=demo_catalog)
    source = hub.LocalFolderSource(folder)
    sha = source.resolve_revision(None)
    paths = [f.path for f in source.list_files(sha)]
    assert "layers/layer-040.gguf" in paths and hub.MANIFEST_PATH in paths
    assert json.loads(source.read_manifest(sha))["schema_version"] == 1


def test_a_local_folder_refuses_paths_outside_it(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    source = hub.LocalFolderSource(tmp_path / "pkg")
    with pytest.raises(hub.HubNotFound):
        source.read_range(hub.LOCAL_REVISION, "../secret", 0, 10)


@pytest.mark.parametrize("uri", ["hf://meshllm/x-layers", "hf://a/b/c@main/x", "hf://../x@main/f.gguf"])
def test_a_malformed_hf_uri_is_refused(uri: str) -> None:
    with pytest.raises(hub.HubError):
        hub.parse_hf_uri(uri)


def test_the_catalog_dataset_lists_its_packages(devhub: DevHub) -> None:
    repos = hub.catalog_package_repos("meshllm/catalog", endpoint=devhub.url)
    assert QWEN35_REPO in repos and GLM47_REPO in repos


def test_the_namespace_listing_finds_the_repos_that_hold_a_manifest_whatever_their_name(
    devhub: DevHub,
) -> None:
    from packages_app.devhub.generator import QWEN38_MTP2_REPO, QWEN38_MTP2_SOURCE

    repos = hub.list_namespace_packages("meshllm", endpoint=devhub.url)
    assert QWEN35_REPO in repos
    assert QWEN38_MTP2_REPO in repos and not QWEN38_MTP2_REPO.endswith("-layers")
    assert QWEN38_MTP2_SOURCE not in repos  # a GGUF repo of the namespace, without model-package.json


def test_v2_layer_headers_are_read_with_small_reads_when_the_metadata_does_not_describe_them(
    demo_catalog: Path, tmp_path: Path
) -> None:
    import gguf

    sha = next(p for p in DEMO_PACKAGES if p.repo_id == GLM47_REPO).main_sha
    folder = write_package_folder(GLM47_REPO, sha, tmp_path / "glm", root=demo_catalog)
    metadata = folder / "shared/metadata.gguf"
    metadata.unlink()  # a hard link to the catalog's blob: replace it, never write into it
    writer = gguf.GGUFWriter(str(metadata), "glm4moe")  # no skippy.package.metadata_only key
    writer.add_block_count(48)
    writer.add_description("x" * 2_000_000)  # a big KV block, as real metadata has (the tokenizer)
    writer.add_tensor("token_embd.weight", np.zeros((4, 4), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    source = hub.LocalFolderSource(folder)
    results = inspection.fetch_package_headers(
        source, hub.LOCAL_REVISION, source.list_files(""), schema_version=2
    )
    layers = [r for r in results if r.path.startswith("layers/")]
    assert len(layers) == 48 and all(r.header is not None for r in layers)
    assert max(r.bytes for r in layers) <= hub.FIRST_READ


# --- only expected failures are retryable --------------------------------------------------------


def closed_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_an_unreachable_hub_is_a_retryable_error_naming_what_was_asked() -> None:
    source = hub.HubSource(QWEN35_REPO, endpoint=f"http://127.0.0.1:{closed_port()}", max_retries=0)
    with pytest.raises(hub.HubUnavailable, match=QWEN35_REPO) as caught:
        source.read_range(QWEN35_FIRST_SHA, "model-package.json", 0, 10)
    assert caught.value.retryable


def test_a_bug_inside_a_hub_call_surfaces_as_itself_not_as_a_retryable_hub_error(
    hub_source: type[hub.HubSource], monkeypatch: pytest.MonkeyPatch
) -> None:
    source = hub_source(QWEN35_REPO)

    def buggy(*args: object, **kwargs: object) -> object:
        raise TypeError("a bug in our code")

    monkeypatch.setattr(source.api, "repo_info", buggy)
    with pytest.raises(TypeError, match="a bug in our code"):
        source.resolve_revision(None)


def test_a_bug_inside_a_ranged_read_surfaces_as_itself(
    hub_source: type[hub.HubSource], monkeypatch: pytest.MonkeyPatch
) -> None:
    from packages_app.hub import net

    def buggy(*args: object, **kwargs: object) -> object:
        raise KeyError("a bug in our code")

    monkeypatch.setattr(net, "_read_cut", buggy)
    with pytest.raises(KeyError, match="a bug in our code"):
        hub_source(QWEN35_REPO).read_range(QWEN35_FIRST_SHA, "model-package.json", 0, 10)
