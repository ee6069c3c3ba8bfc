"""`audit_package FOLDER` checks every artifact against the manifest: existence, size, sha256 (streamed)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from django.core.management import call_command
from gguf import GGUFWriter

from packages_app import verify

ARCH = "llama"
BLOCKS = 2
WIDTH = 64


def _write_gguf(path: Path, tensors: dict[str, np.ndarray[Any, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    writer = GGUFWriter(str(path), ARCH)
    writer.add_block_count(BLOCKS)
    writer.add_embedding_length(WIDTH)
    writer.add_context_length(256)
    writer.add_head_count(4)
    for name, data in tensors.items():
        writer.add_tensor(name, data)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def _artifact(folder: Path, rel: str, tensors: dict[str, np.ndarray[Any, Any]]) -> dict[str, Any]:
    _write_gguf(folder / rel, tensors)
    data = (folder / rel).read_bytes()
    return {
        "path": rel,
        "tensor_count": len(tensors),
        "tensor_bytes": sum(t.nbytes for t in tensors.values()),
        "artifact_bytes": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
    }


def _weights(seed: int, *names: str) -> dict[str, np.ndarray[Any, Any]]:
    rng = np.random.default_rng(seed)
    return {name: rng.standard_normal((WIDTH,), dtype=np.float32) for name in names}


@pytest.fixture
def package(tmp_path: Path) -> Path:
    """A tiny schema-v1 llama package (2 blocks, no MTP) whose manifest records the files' true sha256."""
    folder = tmp_path / "tiny-layers"
    shared = {
        "metadata": _artifact(folder, "shared/metadata.gguf", {}),
        "embeddings": _artifact(folder, "shared/embeddings.gguf", _weights(1, "token_embd.weight")),
        "output": _artifact(folder, "shared/output.gguf", _weights(2, "output_norm.weight")),
    }
    layers = [
        {"layer_index": i, **_artifact(folder, f"layers/layer-{i:03d}.gguf", _weights(10 + i, *_block(i)))}
        for i in range(BLOCKS)
    ]
    manifest = {
        "schema_version": 1,
        "model_id": "example/Tiny-GGUF:F32",
        "source_model": {"path": "Tiny-F32.gguf", "sha256": hashlib.sha256(b"source").hexdigest()},
        "format": "layer-package",
        "layer_count": BLOCKS,
        "activation_width": WIDTH,
        "shared": shared,
        "layers": layers,
        "skippy_abi_version": "0.1.53",
        "created_at_unix_secs": 1_767_225_600,
    }
    (folder / "model-package.json").write_text(json.dumps(manifest, indent=2))
    return folder


def _block(i: int) -> tuple[str, ...]:
    return tuple(f"blk.{i}.{part}.weight" for part in ("attn_norm", "attn_q", "ffn_norm", "ffn_down"))


def audit(folder: Path, *flags: str) -> tuple[int, dict[str, Any]]:
    """Run the command in-process: its exit code and its JSON document."""
    out: list[str] = []

    class Sink:
        def write(self, text: str) -> None:
            out.append(text)

        def flush(self) -> None:
            pass

    with pytest.raises(SystemExit) as done:
        call_command("audit_package", str(folder), "--json", *flags, stdout=Sink())
    return int(done.value.code or 0), json.loads("".join(out))


def codes(doc: dict[str, Any]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for p in doc["problems"]:
        found.setdefault(p["code"], []).append(p["message"])
    return found


def _corrupt(path: Path, mutate: Callable[[bytearray], None]) -> None:
    data = bytearray(path.read_bytes())
    mutate(data)
    path.write_bytes(bytes(data))


def test_it_passes_a_folder_whose_files_match_the_manifest(package: Path) -> None:
    code, doc = audit(package)
    assert doc["verdict"] == "consistent-no-mtp"
    assert not {"missing_artifact", "artifact_size_mismatch", "artifact_sha256_mismatch"} & set(codes(doc))
    # The files match; the package is schema v1, which no current release serves: exit 1 says so.
    assert (code, doc["assessment"]["headline"]["status"]) == (1, "not-servable")


def test_it_reports_a_missing_artifact(package: Path) -> None:
    (package / "layers" / "layer-001.gguf").unlink()
    code, doc = audit(package)
    assert code == 1
    assert any("layers/layer-001.gguf" in m for m in codes(doc)["missing_artifact"])


def test_it_reports_an_artifact_of_the_wrong_size(package: Path) -> None:
    _corrupt(package / "shared" / "output.gguf", lambda data: data.extend(b"\0" * 32))
    code, doc = audit(package)
    assert code == 1
    assert any("shared/output.gguf" in m for m in codes(doc)["artifact_size_mismatch"])


def test_it_reports_an_artifact_whose_bytes_differ_at_the_same_size(package: Path) -> None:
    def flip_last_byte(data: bytearray) -> None:
        data[-1] ^= 0xFF

    _corrupt(package / "layers" / "layer-000.gguf", flip_last_byte)
    code, doc = audit(package)
    assert code == 1
    assert [m for m in codes(doc)["artifact_sha256_mismatch"] if "layers/layer-000.gguf" in m]
    assert "artifact_size_mismatch" not in codes(doc)


def test_it_shows_a_progress_bar_on_stderr_while_hashing(
    package: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    audit(package)
    assert "verifying sha256" in capsys.readouterr().err


def test_no_verify_skips_the_hashing_but_still_checks_size_and_existence(
    package: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def flip_last_byte(data: bytearray) -> None:
        data[-1] ^= 0xFF

    _corrupt(package / "layers" / "layer-000.gguf", flip_last_byte)
    code, doc = audit(package, "--no-verify")
    assert "artifact_sha256_mismatch" not in codes(doc)
    assert "verifying sha256" not in capsys.readouterr().err
    (package / "layers" / "layer-001.gguf").unlink()
    code, doc = audit(package, "--no-verify")
    assert code == 1 and "missing_artifact" in codes(doc)


@pytest.mark.parametrize("garbage", [b"not json{", b"[]", b'{"schema_version": "two"}', b""])
def test_a_manifest_that_does_not_parse_is_invalid_manifest_with_exit_1_whatever_the_weights(
    package: Path, garbage: bytes
) -> None:
    (package / "model-package.json").write_bytes(garbage)
    code, doc = audit(package)
    assert (code, doc["verdict"]) == (1, "invalid-manifest")
    for gguf in package.rglob("*.gguf"):
        gguf.unlink()
    code, doc = audit(package)
    assert (code, doc["verdict"]) == (1, "invalid-manifest")


def test_hash_files_streams_in_chunks_and_names_unreadable_files(tmp_path: Path) -> None:
    payload = b"x" * (verify.CHUNK_BYTES * 2 + 5)
    (tmp_path / "big.gguf").write_bytes(payload)
    got = verify.hash_files(
        tmp_path,
        [verify.Candidate("big.gguf", len(payload)), verify.Candidate("gone.gguf", 10)],
    )
    assert got.sha256 == {"big.gguf": hashlib.sha256(payload).hexdigest()}
    assert list(got.unreadable) == ["gone.gguf"]


def test_a_folder_without_a_manifest_is_not_a_package_and_exits_2(
    package: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (package / "model-package.json").unlink()
    with pytest.raises(SystemExit) as done:
        call_command("audit_package", str(package), "--json")
    assert done.value.code == 2
    assert "no model-package.json" in capsys.readouterr().err
