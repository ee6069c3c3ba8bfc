"""`manage.py import_release FILE` (issue 41 item 1; docs/rules.md section 6b): a release's published
native-runtimes.json becomes one row of the release matrix, with its Skippy ABI and its roster inferred from
that ABI; a malformed file exits 2 and writes nothing."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command

from packages_app.audit import releases
from packages_app.audit.releases import compatibility, parse_releases
from packages_app.manifest import parse_manifest
from tests.audit_fixtures import QWEN35, build, mtp_generation
from tests.test_detection_drafts import GLM_DSA

BUNDLED = Path(releases.__file__).parent / "releases.toml"


def artifact(version_key: str, version: str, abi: str) -> dict[str, Any]:
    """One native runtime as mesh-llm's release manifest lists it (manifest.rs's test shape)."""
    return {
        "id": "meshllm-runtime-linux-x86_64-cuda12",
        version_key: version,
        "skippy_abi": abi,
        "platform": {"os": "linux", "arch": "x86_64", "target": "x86_64-unknown-linux-gnu"},
        "backend": {"kind": "cuda", "cuda": {"toolkit_major": 12, "gpu_arches": ["sm_90"]}},
        "rank": 650,
        "libraries": ["lib/libllama.so"],
        "url": "https://github.com/Mesh-LLM/mesh-llm/releases/download/v0.79.0/runtime.tar.gz",
        "sha256": "a" * 64,
    }


def schema_2(version: str = "0.79.0", abi: str = "0.1.67") -> dict[str, Any]:
    return {
        "schema_version": 2,
        "release_version": version,
        "skippy_abi": abi,
        "artifacts": [artifact("release_version", version, abi)],
    }


def legacy(version: str = "0.79.0", abi: str = "0.1.67") -> dict[str, Any]:
    return {"mesh_version": version, "skippy_abi": abi, "artifacts": [artifact("mesh_version", version, abi)]}


@pytest.fixture
def table(tmp_path: Path) -> Path:
    copy = tmp_path / "releases.toml"
    copy.write_bytes(BUNDLED.read_bytes())
    return copy


def run(file: Path, table: Path) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    try:
        call_command("import_release", str(file), "--into", str(table), stdout=out, stderr=err)
    except SystemExit as exc:
        return int(exc.code or 0), out.getvalue(), err.getvalue()
    return 0, out.getvalue(), err.getvalue()


def write(tmp_path: Path, doc: Any, name: str = "native-runtimes.json") -> Path:
    path = tmp_path / name
    path.write_bytes(doc if isinstance(doc, bytes) else json.dumps(doc).encode())
    return path


@pytest.mark.parametrize("shape", [schema_2, legacy], ids=["schema-2", "legacy"])
def test_import_release_adds_the_release_with_its_abi_as_the_newest_row(
    tmp_path: Path, table: Path, shape: Any
) -> None:
    code, out, _ = run(write(tmp_path, shape()), table)

    assert code == 0 and "imported v0.79.0: Skippy ABI 0.1.67" in out
    rows = parse_releases(table.read_text())
    newest = rows[-1]
    assert (newest.release, newest.runtime_abi, newest.kind) == ("v0.79.0", "0.1.67", "tag")
    assert newest.roster == "inferred-from-abi" and newest.split_gate is True
    assert newest.abi_rule == "any" and "inferred" in newest.note and "v0.78.0" in newest.note
    assert [r.release for r in rows[:-1]] == [r.release for r in parse_releases(BUNDLED.read_text())]


def test_the_imported_release_judges_the_split_gate_on_the_roster_its_abi_infers(
    tmp_path: Path, table: Path
) -> None:
    run(write(tmp_path, schema_2()), table)
    rows = parse_releases(table.read_text())

    glm = compatibility(
        parse_manifest(build(GLM_DSA, 2, mtp_generation(2, [78])).manifest_bytes()),
        rows,
        architecture="glm-dsa",
    )
    qwen = compatibility(parse_manifest(build(QWEN35, 2).manifest_bytes()), rows, architecture="qwen35moe")

    assert glm[-1].split is not None and glm[-1].split.admitted is False
    assert qwen[-1].split is not None and qwen[-1].split.admitted is True
    assert glm[-1].gate is not None and "inferred from its ABI 0.1.67: mesh-llm-b51ef30e" in glm[-1].gate.why


def test_a_release_at_a_lower_abi_goes_before_the_newer_ones(tmp_path: Path, table: Path) -> None:
    code, _, _ = run(write(tmp_path, schema_2("0.77.0", "0.1.64")), table)

    names = [r.release for r in parse_releases(table.read_text())]
    assert code == 0
    assert names.index("v0.77.0") == names.index("v0.78.0") - 1 and names[-1] == "v0.78.0"


def test_the_same_release_at_the_same_abi_changes_nothing(tmp_path: Path, table: Path) -> None:
    before = table.read_bytes()
    code, out, _ = run(write(tmp_path, schema_2("0.78.0", "0.1.66")), table)

    assert code == 0 and "already there, unchanged" in out
    assert table.read_bytes() == before


MALFORMED: dict[str, tuple[Any, str]] = {
    "not JSON": (b'{"release_version": "0.79.0",', "not JSON"),
    "a list": ([], "must be a JSON object"),
    "both version keys": (schema_2() | {"mesh_version": "0.79.0"}, "mesh_version"),
    "legacy with both keys": (legacy() | {"release_version": "0.79.0"}, "names both"),
    "neither version key": ({"skippy_abi": "0.1.67", "artifacts": []}, "names neither"),
    "an artifact of the other shape": (
        schema_2() | {"artifacts": [artifact("mesh_version", "0.79.0", "0.1.67")]},
        "mixed shapes",
    ),
    "an artifact at another ABI": (
        schema_2() | {"artifacts": [artifact("release_version", "0.79.0", "0.1.66")]},
        "expected 0.1.67",
    ),
    "a version that is no version": (schema_2("latest"), "MAJOR.MINOR.PATCH"),
    "no skippy_abi": ({k: v for k, v in schema_2().items() if k != "skippy_abi"}, "skippy_abi"),
    "schema 3": (schema_2() | {"schema_version": 3}, "only schema 2"),
    "artifacts not a list": (schema_2() | {"artifacts": {}}, "artifacts must be a list"),
    "a known release at another ABI": (
        schema_2("0.78.0", "0.1.67"),
        "already in releases.toml at Skippy ABI 0.1.66",
    ),
    "a file over the limit": (b" " * (releases.MAX_RUNTIMES_BYTES + 1), "byte limit"),
    "Latin-1 bytes": (b'{"release_version": "\xe9"}', "not JSON"),
    "arrays nested a hundred thousand deep": (b"[" * 100_000 + b"]" * 100_000, "not JSON"),
}


@pytest.mark.parametrize("case", MALFORMED, ids=list(MALFORMED))
def test_a_malformed_native_runtimes_file_exits_2_and_writes_nothing(
    tmp_path: Path, table: Path, case: str
) -> None:
    before = table.read_bytes()
    doc, reason = MALFORMED[case]

    code, out, err = run(write(tmp_path, doc), table)

    assert code == 2 and out == ""
    assert reason in err and "nothing was imported" in err
    assert table.read_bytes() == before
    # The control: a well-formed file with the same flags does change the table.
    assert run(write(tmp_path, schema_2(), "good.json"), table)[0] == 0 and table.read_bytes() != before


def test_a_file_that_cannot_be_read_exits_2(tmp_path: Path, table: Path) -> None:
    code, _, err = run(tmp_path / "missing.json", table)
    assert code == 2 and "cannot read it" in err
