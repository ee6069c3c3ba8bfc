"""devhub: the generated demo catalog and the Hub-compatible server, driven by the real huggingface_hub."""

from __future__ import annotations

import json
import os
import re
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from gguf import GGUFReader
from huggingface_hub import HfApi, get_hf_file_metadata, hf_hub_download, hf_hub_url
from huggingface_hub.errors import (
    EntryNotFoundError,
    GatedRepoError,
    HfHubHTTPError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.hf_api import RepoFile, RepoFolder
from huggingface_hub.utils import get_session

from packages_app.devhub import (
    CATALOG_REPO,
    DEMO_PACKAGES,
    GATED_REPO,
    GLM47_REPO,
    LLAMA_REPO,
    NEMOTRON_REPO,
    PRIVATE_REPO,
    QWEN35_FIRST_SHA,
    QWEN35_REPO,
    QWEN38_GIANT_REPO,
    QWEN38_REPO,
    DevHub,
    ensure_catalog,
    generate_catalog,
    write_package_folder,
)
from packages_app.devhub.store import Store
from packages_app.devhub.weights import SPLIT_BYTES
from packages_app.manifest import identity, parse_manifest, v2schema
from packages_app.verdicts import VERDICTS

MiB = 1 << 20


@pytest.fixture
def api(devhub: DevHub) -> HfApi:
    return HfApi(endpoint=devhub.url, token=False)


@pytest.fixture
def small_pages(demo_catalog: Path) -> Iterator[DevHub]:
    hub = DevHub(demo_catalog, page_size=3).start()
    yield hub
    hub.stop()


def _blob(root: Path, repo_id: str, path: str, revision: str = "main") -> Path:
    record = Store(root).load_repos()[("model", repo_id)]
    commit = record.resolve(revision)
    assert commit is not None
    return Store(root).blob_path(commit.files[path].blob)


def _lfs_sha256(api: HfApi, repo_id: str, revision: str) -> dict[str, str]:
    tree = api.list_repo_tree(repo_id, revision=revision, recursive=True)
    return {e.path: e.lfs.sha256 for e in tree if isinstance(e, RepoFile) and e.lfs}


def _manifest(api: HfApi, repo_id: str, revision: str, tmp_path: Path) -> dict[str, Any]:
    path = hf_hub_download(
        repo_id,
        "model-package.json",
        revision=revision,
        endpoint=api.endpoint,
        cache_dir=tmp_path,
        token=False,
    )
    return json.loads(Path(path).read_text())


class _Header:
    """A minimal GGUF header walk (KV scalars, array counts, tensor names, data offset) for big headers.

    gguf.GGUFReader builds a numpy view per token, which takes ~10 s on a 248k-token vocabulary.
    """

    _SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}

    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0
        assert self._read("4s") == b"GGUF"
        self.version, n_tensors, n_kv = self._read("I"), self._read("Q"), self._read("Q")
        self.kv: dict[str, Any] = {}
        for _ in range(n_kv):
            key = self._string()
            self.kv[key] = self._value(self._read("I"))
        self.tensors = [self._tensor_info() for _ in range(n_tensors)]
        alignment = self.kv.get("general.alignment", 32)
        self.data_offset = (self.pos + alignment - 1) // alignment * alignment

    def _read(self, fmt: str) -> Any:
        (value,) = struct.unpack_from("<" + fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return value

    def _string(self) -> str:
        n = self._read("Q")
        self.pos += n
        return self.data[self.pos - n : self.pos].decode()

    def _value(self, vtype: int) -> Any:
        if vtype == 8:
            return self._string()
        if vtype == 9:
            item_type, count = self._read("I"), self._read("Q")
            items = [self._value(item_type) for _ in range(count)]
            return items if count <= 1024 else ("array", count)
        return self._read(self._SCALARS[vtype])

    def _tensor_info(self) -> tuple[str, list[int], int, int]:
        name = self._string()
        dims = [self._read("Q") for _ in range(self._read("I"))]
        qtype, offset = self._read("I"), self._read("Q")
        return name, dims, qtype, offset


def _header(path: Path) -> _Header:
    with path.open("rb") as handle:
        return _Header(handle.read(16 * MiB))


# --- listing, info, refs, commits -------------------------------------------------------------


def test_it_lists_every_public_demo_package_of_the_namespace(api: HfApi) -> None:
    listed = {m.id for m in api.list_models(author="meshllm")}

    assert {p.repo_id for p in DEMO_PACKAGES} <= listed
    assert GATED_REPO in listed
    assert PRIVATE_REPO not in listed


def test_it_follows_link_pagination_across_model_pages(small_pages: DevHub) -> None:
    api = HfApi(endpoint=small_pages.url, token=False)

    listed = [m.id for m in api.list_models(author="meshllm")]

    assert len(listed) == len(set(listed)) >= len(DEMO_PACKAGES)
    assert small_pages.counters.by_path["/api/models"].requests >= 3


def test_it_filters_the_listing_by_search_text(api: HfApi) -> None:
    assert [m.id for m in api.list_models(author="meshllm", search="nemotron")] == [NEMOTRON_REPO]


def test_the_qwen35_package_starts_at_the_documented_sha(api: HfApi) -> None:
    commits = api.list_repo_commits(QWEN35_REPO)

    assert commits[-1].commit_id == QWEN35_FIRST_SHA
    assert [c.created_at for c in commits] == sorted((c.created_at for c in commits), reverse=True)
    assert api.model_info(QWEN35_REPO, revision=QWEN35_FIRST_SHA).sha == QWEN35_FIRST_SHA


def test_model_info_reports_the_head_sha_date_and_siblings(api: HfApi) -> None:
    demo = next(p for p in DEMO_PACKAGES if p.repo_id == QWEN35_REPO)

    info = api.model_info(QWEN35_REPO, files_metadata=True)

    assert info.sha == demo.main_sha
    assert info.last_modified == demo.revisions[-1].committed_at
    siblings = {s.rfilename: s for s in info.siblings or []}
    assert "model-package.json" in siblings and siblings["model-package.json"].lfs is None
    layer = siblings["layers/layer-00040.gguf"]  # main is the package-v2 republish
    assert layer.lfs is not None and layer.size == layer.lfs.size > 400 * MiB


def test_refs_point_main_at_the_newest_commit(api: HfApi) -> None:
    refs = api.list_repo_refs(GLM47_REPO)

    demo = next(p for p in DEMO_PACKAGES if p.repo_id == GLM47_REPO)
    assert [(b.name, b.ref, b.target_commit) for b in refs.branches] == [
        ("main", "refs/heads/main", demo.main_sha)
    ]


def test_served_history_matches_the_published_demo_list(api: HfApi) -> None:
    for demo in DEMO_PACKAGES:
        commits = api.list_repo_commits(demo.repo_id)
        assert [c.commit_id for c in reversed(commits)] == [r.sha for r in demo.revisions]
        assert [c.title for c in reversed(commits)] == [r.title for r in demo.revisions]
        assert demo.verdict in VERDICTS


def test_the_demo_list_covers_every_verdict() -> None:
    seen = {r.verdict for p in DEMO_PACKAGES for r in p.revisions}

    assert seen == set(VERDICTS)


def test_commit_pages_concatenate_to_the_full_history(small_pages: DevHub) -> None:
    api = HfApi(endpoint=small_pages.url, token=False)

    commits = api.list_repo_commits(QWEN35_REPO)

    assert len(commits) == 4 and commits[-1].commit_id == QWEN35_FIRST_SHA


# --- tree and paths-info ----------------------------------------------------------------------


def test_the_recursive_tree_gives_lfs_sha256_and_sizes_matching_the_manifest(
    api: HfApi, tmp_path: Path
) -> None:
    manifest = _manifest(api, QWEN35_REPO, QWEN35_FIRST_SHA, tmp_path)

    tree = list(api.list_repo_tree(QWEN35_REPO, revision=QWEN35_FIRST_SHA, recursive=True))

    files = {e.path: e for e in tree if isinstance(e, RepoFile)}
    assert {e.path for e in tree if isinstance(e, RepoFolder)} == {"layers", "shared"}
    assert len([p for p in files if p.startswith("layers/")]) == 41
    for layer in manifest["layers"]:
        entry = files[layer["path"]]
        assert entry.lfs is not None
        assert entry.lfs.sha256 == layer["sha256"]
        assert entry.size == layer["artifact_bytes"]


def test_the_tree_lists_one_folder_non_recursively(api: HfApi) -> None:
    entries = list(api.list_repo_tree(GLM47_REPO, path_in_repo="shared"))

    assert [e.path for e in entries] == ["shared/common.gguf", "shared/metadata.gguf"]


def test_tree_pages_concatenate_to_the_whole_listing(small_pages: DevHub, api: HfApi) -> None:
    paged = HfApi(endpoint=small_pages.url, token=False)

    whole = [e.path for e in api.list_repo_tree(LLAMA_REPO, recursive=True)]

    assert [e.path for e in paged.list_repo_tree(LLAMA_REPO, recursive=True)] == whole
    assert len(whole) > 20 and small_pages.counters.requests > 7


def test_expanded_tree_entries_name_the_commit_that_last_changed_them(api: HfApi) -> None:
    demo = next(p for p in DEMO_PACKAGES if p.repo_id == QWEN35_REPO)

    entries = {
        e.path: e for e in api.list_repo_tree(QWEN35_REPO, revision=demo.revisions[2].sha, expand=True)
    }

    assert entries["README.md"].last_commit.oid == demo.revisions[2].sha
    assert entries["model-package.json"].last_commit.oid == demo.revisions[1].sha
    assert entries["layers"].last_commit.oid == QWEN35_FIRST_SHA
    republished = {e.path: e for e in api.list_repo_tree(QWEN35_REPO, expand=True)}
    assert republished["layers"].last_commit.oid == demo.main_sha  # every layer file was rewritten


def test_paths_info_describes_files_and_folders_and_skips_missing_paths(api: HfApi) -> None:
    infos = api.get_paths_info(
        GLM47_REPO, ["model-package.json", "layers", "nope.gguf", "layers/layer-00047.gguf"]
    )

    assert [type(i).__name__ for i in infos] == ["RepoFile", "RepoFolder", "RepoFile"]
    layer = infos[2]
    assert isinstance(layer, RepoFile) and layer.lfs is not None and len(layer.lfs.sha256) == 64


# --- downloads and ranges ---------------------------------------------------------------------


def test_it_serves_the_v1_manifest_of_the_motivating_case(api: HfApi, tmp_path: Path) -> None:
    manifest = _manifest(api, QWEN35_REPO, QWEN35_FIRST_SHA, tmp_path)

    assert manifest["schema_version"] == 1 and manifest["format"] == "layer-package"
    assert manifest["model_id"] == "unsloth/Qwen3.5-35B-A3B-MTP-GGUF:UD-Q4_K_XL"
    assert manifest["source_model"]["path"] == "/source/Qwen3.5-35B-A3B-UD-Q4_K_XL.gguf"
    assert manifest["skippy_abi_version"] == "0.1.24"
    assert manifest["layer_count"] == 41 and [x["layer_index"] for x in manifest["layers"]] == list(range(41))
    assert "generation" not in manifest


def test_the_second_qwen35_revision_declares_mtp_on_the_same_files(api: HfApi, tmp_path: Path) -> None:
    demo = next(p for p in DEMO_PACKAGES if p.repo_id == QWEN35_REPO)

    first = _manifest(api, QWEN35_REPO, demo.revisions[0].sha, tmp_path)
    second = _manifest(api, QWEN35_REPO, demo.revisions[1].sha, tmp_path)

    spec = second["generation"]["speculative_decoding"]
    assert spec["default"] == "native-mtp-n1"
    assert spec["strategies"]["native-mtp-n1"]["layer_indices"] == [40]
    assert second["layers"] == first["layers"]


def test_v2_manifests_point_at_the_hub_files_by_sha256(api: HfApi, tmp_path: Path) -> None:
    manifest = _manifest(api, NEMOTRON_REPO, "main", tmp_path)

    lfs = _lfs_sha256(api, NEMOTRON_REPO, "main")
    entries = manifest["artifact_catalog"]["entries"]
    assert entries[0] == {**entries[0], "id": "metadata", "path": "shared/metadata.gguf"}
    assert all(lfs[e["path"]] == e["sha256"] for e in entries)
    assert manifest["generation"]["speculative_decoding"]["default"] == "mtp-suffix"
    assert manifest["source_model"]["metadata_artifact_id"] == "metadata"


def test_the_stale_llama_revision_disagrees_on_exactly_one_layer(api: HfApi, tmp_path: Path) -> None:
    demo = next(p for p in DEMO_PACKAGES if p.repo_id == LLAMA_REPO)
    manifest = _manifest(api, LLAMA_REPO, demo.revisions[0].sha, tmp_path)

    lfs = _lfs_sha256(api, LLAMA_REPO, demo.revisions[0].sha)

    wrong = [
        e["id"]
        for e in manifest["artifact_catalog"]["entries"]
        if lfs.get(e["path"], e["sha256"]) != e["sha256"]
    ]
    assert wrong == ["layer-00007"]
    assert demo.revisions[0].problems == ("artifact_sha256_mismatch",)


def test_file_metadata_gives_commit_etag_and_linked_size(devhub: DevHub) -> None:
    url = hf_hub_url(QWEN35_REPO, "layers/layer-00040.gguf", revision="main", endpoint=devhub.url)

    meta = get_hf_file_metadata(url, token=False)

    demo = next(p for p in DEMO_PACKAGES if p.repo_id == QWEN35_REPO)
    assert meta.commit_hash == demo.main_sha
    assert meta.etag is not None and len(meta.etag) == 64
    assert meta.size is not None and meta.size > 400 * MiB


def test_a_range_get_returns_just_those_bytes(devhub: DevHub) -> None:
    url = hf_hub_url(QWEN35_REPO, "layers/layer-040.gguf", revision=QWEN35_FIRST_SHA, endpoint=devhub.url)

    head = get_session().get(url, headers={"Range": "bytes=0-7"})
    hole = get_session().get(url, headers={"Range": "bytes=100000000-100000003"})

    assert head.status_code == 206 and head.content[:4] == b"GGUF"
    assert head.headers["Content-Range"].startswith("bytes 0-7/")
    assert head.headers["X-Repo-Commit"] == QWEN35_FIRST_SHA
    assert hole.status_code == 206 and hole.content == bytes(4)


def test_an_unsatisfiable_range_is_answered_416(devhub: DevHub) -> None:
    url = hf_hub_url(LLAMA_REPO, "model-package.json", endpoint=devhub.url)

    response = get_session().get(url, headers={"Range": "bytes=99999999-"})

    assert response.status_code == 416
    assert response.headers["Content-Range"].startswith("bytes */")


def test_one_ranged_response_is_capped(demo_catalog: Path) -> None:
    with DevHub(demo_catalog, max_range_bytes=1000) as hub:
        url = hf_hub_url(QWEN35_REPO, "layers/layer-00000.gguf", endpoint=hub.url)
        response = get_session().get(url, headers={"Range": "bytes=0-999999"})

    assert response.status_code == 206 and len(response.content) == 1000
    assert response.headers["Content-Range"].startswith("bytes 0-999/")


def test_the_catalog_dataset_lists_package_entries(api: HfApi, tmp_path: Path) -> None:
    files = api.list_repo_files(CATALOG_REPO, repo_type="dataset")

    entry_path = "entries/unsloth/Qwen3.5-35B-A3B-MTP-GGUF.json"
    assert entry_path in files
    local = hf_hub_download(
        CATALOG_REPO, entry_path, repo_type="dataset", endpoint=api.endpoint, cache_dir=tmp_path, token=False
    )
    entry = json.loads(Path(local).read_text())
    package = entry["variants"]["UD-Q4_K_XL"]["packages"][0]
    assert package == {"type": "layer-package", "repo": QWEN35_REPO, "layer_count": 41}
    packaged = {
        p["repo"] for f in files if f.startswith("entries/") for p in _entry_packages(api, f, tmp_path)
    }
    assert packaged == {p.repo_id for p in DEMO_PACKAGES}


def _entry_packages(api: HfApi, path: str, tmp_path: Path) -> list[dict[str, Any]]:
    local = hf_hub_download(
        CATALOG_REPO, path, repo_type="dataset", endpoint=api.endpoint, cache_dir=tmp_path
    )
    entry = json.loads(Path(local).read_text())
    variants = entry["variants"]  # an object by variant name, or an array (docs/rules.md section 6b)
    return [p for v in (variants.values() if isinstance(variants, dict) else variants) for p in v["packages"]]


# --- errors, auth, faults, counters -----------------------------------------------------------


def test_an_unknown_repo_raises_repository_not_found(api: HfApi) -> None:
    with pytest.raises(RepositoryNotFoundError):
        api.model_info("meshllm/does-not-exist-layers")


def test_an_unknown_revision_raises_revision_not_found(api: HfApi) -> None:
    with pytest.raises(RevisionNotFoundError):
        api.list_repo_tree(QWEN35_REPO, revision="0" * 40).__next__()


def test_a_missing_file_raises_entry_not_found(devhub: DevHub) -> None:
    url = hf_hub_url(QWEN35_REPO, "layers/layer-041.gguf", endpoint=devhub.url)

    with pytest.raises(EntryNotFoundError):
        get_hf_file_metadata(url, token=False)


def test_a_private_repo_is_invisible_without_the_token(devhub: DevHub) -> None:
    with pytest.raises(RepositoryNotFoundError):
        HfApi(endpoint=devhub.url, token=False).model_info(PRIVATE_REPO)

    assert HfApi(endpoint=devhub.url, token=devhub.token).model_info(PRIVATE_REPO).private is True


def test_a_wrong_token_is_rejected_as_invalid_credentials(devhub: DevHub) -> None:
    with pytest.raises(HfHubHTTPError) as caught:
        HfApi(endpoint=devhub.url, token="hf_wrong_token").model_info(PRIVATE_REPO)

    assert not isinstance(caught.value, RepositoryNotFoundError)
    assert caught.value.response.status_code == 401


def test_a_gated_repo_refuses_downloads_without_the_token(devhub: DevHub) -> None:
    url = hf_hub_url(GATED_REPO, "model-package.json", endpoint=devhub.url)

    with pytest.raises(GatedRepoError):
        get_hf_file_metadata(url, token=False)

    assert get_hf_file_metadata(url, token=devhub.token).size


def test_injected_faults_answer_with_retry_after_then_recover(demo_catalog: Path) -> None:
    with DevHub(demo_catalog) as hub:
        hub.fail_next(2, status=429, retry_after=3, match="/resolve/")
        hub.fail_next(1, status=503, retry_after=1, match="/api/")
        url = hf_hub_url(LLAMA_REPO, "model-package.json", endpoint=hub.url)
        statuses = [get_session().get(url) for _ in range(3)]
        api_status = get_session().get(f"{hub.url}/api/models/{LLAMA_REPO}")

    assert [r.status_code for r in statuses] == [429, 429, 200]
    assert statuses[0].headers["Retry-After"] == "3"
    assert api_status.status_code == 503 and api_status.headers["Retry-After"] == "1"


def test_counters_count_requests_and_bytes_per_path(demo_catalog: Path) -> None:
    with DevHub(demo_catalog) as hub:
        url = hf_hub_url(QWEN35_REPO, "layers/layer-00000.gguf", endpoint=hub.url)
        for _ in range(2):
            get_session().get(url, headers={"Range": "bytes=0-1023"})
        HfApi(endpoint=hub.url, token=False).model_info(QWEN35_REPO)
        stats = hub.counters.snapshot()

    resolve = stats["by_path"][
        "/meshllm/Qwen3.5-35B-A3B-UD-Q4_K_XL-layers/resolve/main/layers/layer-00000.gguf"
    ]
    assert resolve == {"requests": 2, "bytes": 2048}
    assert (stats["requests"], stats["resolve_requests"], stats["api_requests"]) == (3, 2, 1)


def test_hostile_requests_get_clear_errors(devhub: DevHub) -> None:
    session = get_session()
    base = f"{devhub.url}/api/models/{QWEN35_REPO}"

    bad_range = session.get(
        hf_hub_url(QWEN35_REPO, "README.md", endpoint=devhub.url), headers={"Range": "pages=1"}
    )
    no_paths = session.post(f"{base}/paths-info/main", content=b'{"paths": 5}')
    not_json = session.post(f"{base}/paths-info/main", content=b"{nope")
    traversal = session.get(f"{devhub.url}/{QWEN35_REPO}/resolve/main/../../../../etc/passwd")
    nowhere = session.get(f"{devhub.url}/no/such/route/at/all")
    huge_cursor = session.get(f"{devhub.url}/api/models", params={"cursor": "9" * 5000})
    huge_range = session.get(
        hf_hub_url(LLAMA_REPO, "README.md", endpoint=devhub.url), headers={"Range": f"bytes={'9' * 5000}-"}
    )

    assert bad_range.status_code == 416
    assert no_paths.status_code == 400 and "paths" in no_paths.json()["error"]
    assert not_json.status_code == 400
    assert traversal.status_code == 404
    assert nowhere.status_code == 404 and nowhere.json()["error"]
    assert huge_cursor.status_code == 200
    assert huge_range.status_code == 416


def test_an_oversized_body_is_refused_before_it_is_read(devhub: DevHub) -> None:
    response = get_session().post(
        f"{devhub.url}/api/models/{QWEN35_REPO}/paths-info/main", content=b"x" * (2 * MiB)
    )

    assert response.status_code == 413


# --- the generated GGUF files -----------------------------------------------------------------


def test_the_qwen35_mtp_layer_header_is_realistic(demo_catalog: Path) -> None:
    header = _header(_blob(demo_catalog, QWEN35_REPO, "layers/layer-040.gguf", QWEN35_FIRST_SHA))

    names = [name for name, *_ in header.tensors]
    assert header.kv["general.architecture"] == "qwen35moe"
    assert header.kv["qwen35moe.block_count"] == 41 and header.kv["qwen35moe.nextn_predict_layers"] == 1
    assert header.kv["tokenizer.ggml.tokens"] == ("array", 248320)
    assert len(names) == 20
    assert {n for n in names if ".nextn." in n} == {
        f"blk.40.nextn.{t}.weight" for t in ("eh_proj", "enorm", "hnorm", "shared_head_norm")
    }
    assert 6 * MiB <= header.data_offset <= 8 * MiB


def test_qwen35_blocks_mix_ssm_and_full_attention_tensor_counts(demo_catalog: Path) -> None:
    counts = {
        bid: len(
            _header(
                _blob(demo_catalog, QWEN35_REPO, f"layers/layer-{bid:03d}.gguf", QWEN35_FIRST_SHA)
            ).tensors
        )
        for bid in (0, 3)
    }

    assert counts == {0: 19, 3: 16}


@pytest.mark.parametrize(
    ("repo_id", "path", "vocab"),
    [
        (GLM47_REPO, "shared/metadata.gguf", 151552),
        (LLAMA_REPO, "shared/common.gguf", 128256),
        (NEMOTRON_REPO, "shared/common.gguf", 131072),
        (QWEN38_REPO, "shared/metadata.gguf", 248320),
    ],
)
def test_big_vocabulary_headers_are_six_to_eight_mib(
    demo_catalog: Path, repo_id: str, path: str, vocab: int
) -> None:
    header = _header(_blob(demo_catalog, repo_id, path))

    assert header.kv["tokenizer.ggml.tokens"] == ("array", vocab)
    assert header.kv["tokenizer.ggml.token_type"] == ("array", vocab)
    assert 6 * MiB <= header.data_offset <= 8 * MiB


def test_v2_metadata_holds_the_whole_tensor_directory_and_no_data(demo_catalog: Path) -> None:
    path = _blob(demo_catalog, GLM47_REPO, "shared/metadata.gguf")

    header = _header(path)

    assert path.stat().st_size == header.data_offset
    assert header.kv["skippy.package.metadata_only"] is True
    assert header.kv["skippy.package.part_count"] == 49
    assert any(name == "blk.47.nextn.eh_proj.weight" for name, *_ in header.tensors)
    assert len(header.kv["skippy.package.tensor_size"]) == len(header.tensors)


def test_v2_metadata_locates_each_tensor_in_its_part_file(demo_catalog: Path) -> None:
    header = _header(_blob(demo_catalog, GLM47_REPO, "shared/metadata.gguf"))
    index = [name for name, *_ in header.tensors].index("blk.47.nextn.eh_proj.weight")

    part = header.kv["skippy.package.tensor_part"][index]
    layer = _header(_blob(demo_catalog, GLM47_REPO, "layers/layer-00047.gguf"))

    assert part == 48  # part 0 is shared/common.gguf, part i + 1 is layer i
    relative = {name: offset for name, _, _, offset in layer.tensors}["blk.47.nextn.eh_proj.weight"]
    assert header.kv["skippy.package.tensor_offset"][index] == layer.data_offset + relative


def test_gguf_reader_reads_a_v2_mtp_layer_file(demo_catalog: Path) -> None:
    reader = GGUFReader(_blob(demo_catalog, GLM47_REPO, "layers/layer-00047.gguf"))

    tensors = {t.name: t for t in reader.tensors}
    assert {n.split(".")[3] for n in tensors if ".nextn." in n} == {
        "eh_proj", "embed_tokens", "enorm", "hnorm", "shared_head_head", "shared_head_norm"
    }  # fmt: skip
    experts = tensors["blk.47.ffn_gate_exps.weight"]
    assert experts.tensor_type.name == "Q4_K" and [int(d) for d in experts.shape] == [2048, 1536, 64]
    assert reader.data_offset + sum(int(t.n_bytes) for t in reader.tensors) <= os.path.getsize(
        reader.data.filename
    )


def test_the_nemotron_mtp_block_is_blk_88(demo_catalog: Path) -> None:
    reader = GGUFReader(_blob(demo_catalog, NEMOTRON_REPO, "layers/layer-00088.gguf"))

    assert any(t.name == "blk.88.nextn.eh_proj.weight" for t in reader.tensors)
    assert str(bytes(reader.fields["general.architecture"].parts[-1]), "utf-8") == "nemotron_h_moe"


def test_layer_files_are_sparse_on_disk(demo_catalog: Path) -> None:
    stat = _blob(demo_catalog, QWEN35_REPO, "layers/layer-001.gguf", QWEN35_FIRST_SHA).stat()

    assert stat.st_size > 400 * MiB
    assert stat.st_blocks * 512 < 16 * MiB


# --- the demo catalog mirrors the real one (docs/rules.md, docs/domain.md "The real catalog") ---------------


def _parse_error(manifest: dict[str, Any]) -> str | None:
    """What mesh-llm's serde decode (deny_unknown_fields, types, required fields) refuses, if anything."""
    try:
        v2schema.decode_root(manifest)
    except v2schema.DecodeError as exc:
        return str(exc)
    return None


def _stored_manifest(root: Path, repo_id: str, revision: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(_blob(root, repo_id, "model-package.json", revision).read_bytes())
    return data


def _v2_revisions() -> list[Any]:
    return [
        pytest.param(p.repo_id, r.sha, id=f"{p.repo_id}@{r.sha[:8]}")
        for p in DEMO_PACKAGES
        for r in p.revisions
        if r.schema == 2
    ]


# Built to break mesh-llm's parse on purpose: `speculative_decoding` at the top level (deny_unknown_fields).
_BROKEN_ON_PURPOSE = {next(p for p in DEMO_PACKAGES if p.repo_id == QWEN38_REPO).revisions[0].sha}


@pytest.mark.parametrize(("repo_id", "sha"), _v2_revisions())
def test_every_v2_manifest_decodes_as_mesh_llms_structs(demo_catalog: Path, repo_id: str, sha: str) -> None:
    error = _parse_error(_stored_manifest(demo_catalog, repo_id, sha))

    if sha in _BROKEN_ON_PURPOSE:
        assert error is not None and "speculative_decoding" in error
    else:
        assert error is None


@pytest.mark.parametrize(("repo_id", "sha"), _v2_revisions())
def test_every_v2_manifest_passes_mesh_llms_validate_root_with_a_canonical_package_id(
    demo_catalog: Path, repo_id: str, sha: str
) -> None:
    raw = _blob(demo_catalog, repo_id, "model-package.json", sha).read_bytes()
    manifest = json.loads(raw)

    errors = [p.code for p in parse_manifest(raw).problems if p.severity == "error"]
    assert errors == (["invalid_manifest_json"] if sha in _BROKEN_ON_PURPOSE else [])
    manifest.pop(
        "speculative_decoding", None
    )  # the stray key of the broken revision is not bound into the id
    assert manifest["package_id"] == identity.package_id_of(manifest)


def test_v2_packages_carry_the_real_writer_versions_and_abis(demo_catalog: Path) -> None:
    stamps = {
        (m["generator_version"], m["native_abi_version"])
        for p in DEMO_PACKAGES
        for r in p.revisions
        if r.schema == 2
        for m in [_stored_manifest(demo_catalog, p.repo_id, r.sha)]
    }

    assert stamps == {
        ("0.76.0-rc9", "0.1.53"),
        ("0.76.0", "0.1.54"),
        ("0.76.1", "0.1.54"),
        ("0.76.1", "0.1.57"),
        ("0.78.0", "0.1.66"),  # v0.78.0's native runtimes carry skippy ABI 0.1.66
    }


def test_glm_4_7_flash_is_a_deepseek2_gguf(demo_catalog: Path) -> None:
    header = _header(_blob(demo_catalog, GLM47_REPO, "shared/metadata.gguf"))

    assert header.kv["general.architecture"] == "deepseek2"
    assert header.kv["deepseek2.block_count"] == 48 and header.kv["deepseek2.nextn_predict_layers"] == 1
    assert "blk.47.attn_kv_a_mqa.weight" in {name for name, *_ in header.tensors}


def test_the_undeclared_v2_package_is_qwen3_8_27b_with_mtp_block_64(demo_catalog: Path) -> None:
    demo = next(p for p in DEMO_PACKAGES if p.repo_id == QWEN38_REPO)
    header = _header(_blob(demo_catalog, QWEN38_REPO, "shared/metadata.gguf"))

    assert (demo.schema, demo.verdict, demo.mtp_layers) == (2, "undeclared-mtp", (64,))
    assert header.kv["qwen35.block_count"] == 65 and header.kv["qwen35.nextn_predict_layers"] == 1
    assert "blk.64.nextn.eh_proj.weight" in {name for name, *_ in header.tensors}
    assert "generation" not in _stored_manifest(demo_catalog, QWEN38_REPO, demo.main_sha)


def test_qwen3_8_27b_ships_an_mmproj_sidecar(demo_catalog: Path) -> None:
    manifest = _stored_manifest(demo_catalog, QWEN38_REPO, "main")
    (sidecar,) = manifest["sidecars"]
    entry = next(e for e in manifest["artifact_catalog"]["entries"] if e["id"] == sidecar["artifact_id"])

    assert sidecar["kind"] == "mmproj"
    header = _header(_blob(demo_catalog, QWEN38_REPO, entry["path"]))
    assert header.kv["general.architecture"] == "clip" and header.kv["clip.has_vision_encoder"] is True


def test_one_package_splits_its_big_layers_into_part_files(demo_catalog: Path) -> None:
    manifest = _stored_manifest(demo_catalog, QWEN38_GIANT_REPO, "main")
    entries = {e["id"]: e for e in manifest["artifact_catalog"]["entries"]}

    assert [i for i in entries if i.startswith("layer-00000")] == [
        "layer-00000-part00", "layer-00000-part01", "layer-00000-part02"
    ]  # fmt: skip
    assert entries["layer-00093-part02"]["path"] == "layers/layer-00093-part02.gguf"
    assert all(e["byte_size"] <= SPLIT_BYTES for i, e in entries.items() if "-part" in i)
    assert sum(e["byte_size"] for i, e in entries.items() if i.startswith("layer-00000")) > SPLIT_BYTES


def test_the_first_nemotron_revision_says_generation_null(demo_catalog: Path) -> None:
    demo = next(p for p in DEMO_PACKAGES if p.repo_id == NEMOTRON_REPO)
    text = _blob(demo_catalog, NEMOTRON_REPO, "model-package.json", demo.revisions[0].sha).read_text()

    assert '"generation": null' in text and demo.revisions[0].verdict == "undeclared-mtp"


def test_the_llama_head_carries_request_defaults_sourced_to_a_commit(demo_catalog: Path) -> None:
    defaults = _stored_manifest(demo_catalog, LLAMA_REPO, "main")["generation"]["request_defaults"]
    profile = defaults["profiles"][defaults["selection"]["default"]]

    revision = profile["provenance"]["revision"]
    assert re.fullmatch(r"[0-9a-f]{40}", revision) and revision in profile["provenance"]["url"].split("/")
    assert 0 <= profile["temperature"] <= 2 and 0 <= profile["top_p"] <= 1


def test_the_glm_head_binds_publisher_metadata_to_files_of_the_revision(demo_catalog: Path) -> None:
    manifest = _stored_manifest(demo_catalog, GLM47_REPO, "main")
    entries = {e["id"]: e for e in manifest["artifact_catalog"]["entries"]}

    roles = {p["role"]: entries[p["artifact_id"]]["path"] for p in manifest["publisher_metadata"]}
    assert roles == {
        "model_config": "publisher/config.json",
        "generation_config": "publisher/generation_config.json",
    }
    config = json.loads(_blob(demo_catalog, GLM47_REPO, roles["model_config"]).read_bytes())
    assert config["num_nextn_predict_layers"] == 1


# --- generation -------------------------------------------------------------------------------


def test_generation_is_deterministic(tmp_path: Path, demo_catalog: Path) -> None:
    generate_catalog(tmp_path / "a", only=[GLM47_REPO])
    generate_catalog(tmp_path / "b", only=[GLM47_REPO])

    first = Store(tmp_path / "a").record_path("model", GLM47_REPO).read_text()
    assert first == Store(tmp_path / "b").record_path("model", GLM47_REPO).read_text()
    assert first == Store(demo_catalog).record_path("model", GLM47_REPO).read_text()


def test_ensure_catalog_does_not_regenerate_the_same_version(
    demo_catalog: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from packages_app.devhub import generator

    def regenerate(*args: object, **kwargs: object) -> None:
        raise AssertionError("the catalog of this generator version is already there")

    monkeypatch.setattr(generator, "generate_catalog", regenerate)
    monkeypatch.setattr(generator, "_wipe", regenerate)
    assert ensure_catalog(demo_catalog) == demo_catalog


def test_a_package_folder_materialises_one_revision(demo_catalog: Path, tmp_path: Path) -> None:
    folder = write_package_folder(QWEN35_REPO, QWEN35_FIRST_SHA, tmp_path / "pkg", root=demo_catalog)

    manifest = json.loads((folder / "model-package.json").read_text())
    assert "generation" not in manifest
    layer = folder / "layers" / "layer-040.gguf"
    assert layer.stat().st_size == manifest["layers"][40]["artifact_bytes"]
    with layer.open("rb") as handle:
        assert handle.read(4) == b"GGUF"
    assert layer.stat().st_blocks * 512 < 16 * MiB  # linked or sparse, never 500 MB of zeros
    assert sorted(p.name for p in (folder / "shared").iterdir()) == [
        "embeddings.gguf",
        "metadata.gguf",
        "output.gguf",
    ]


def test_a_package_folder_refuses_unknown_repos_and_revisions(demo_catalog: Path, tmp_path: Path) -> None:
    with pytest.raises(LookupError):
        write_package_folder("meshllm/nope-layers", None, tmp_path, root=demo_catalog)
    with pytest.raises(LookupError):
        write_package_folder(QWEN35_REPO, "f" * 40, tmp_path, root=demo_catalog)
