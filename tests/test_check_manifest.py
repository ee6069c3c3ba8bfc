"""`manage.py check_manifest PATH [--json]`: one manifest judged alone; the JSON contract and exit codes."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command

from packages_app.layout import MAX_MANIFEST_BYTES
from packages_app.manifest.identity import package_id_of
from tests.test_rulebook import mtp_sd, v1_base, v2_base

# The command looks the bytes up among the tracked revisions (the split gate's architecture), as the check
# page does: every run touches the database.
pytestmark = pytest.mark.django_db


def run(path: Path | str, *flags: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with pytest.raises(SystemExit) as exited:
        call_command("check_manifest", str(path), *flags, stdout=out, stderr=err)
    code = exited.value.code
    return (code if isinstance(code, int) else 1), out.getvalue(), err.getvalue()


def write(tmp_path: Path, doc: Any) -> Path:
    path = tmp_path / "model-package.json"
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return path


def valid_v2() -> dict[str, Any]:
    doc = v2_base()
    doc["generation"] = {"speculative_decoding": mtp_sd()}
    doc["package_id"] = package_id_of(doc)
    return doc


def test_a_valid_v2_manifest_exits_0_with_exactly_the_documented_json(tmp_path: Path) -> None:
    code, out, _ = run(write(tmp_path, valid_v2()), "--json")
    doc = json.loads(out)

    assert code == 0
    assert set(doc) == {
        "schema",
        "valid",
        "passes",
        "assessment",
        "problems",
        "package_id",
        "runtime",
        "compatibility",
    }
    assert doc["passes"] is True
    headline = doc["assessment"]["headline"]
    assert headline["status"] == "weights-unread" and "weights were not read" in headline["sentence"]
    assert headline["action"]["command"] == f"python manage.py audit_package {tmp_path}"
    assert (doc["schema"], doc["valid"], doc["problems"]) == (2, True, [])
    assert doc["package_id"]["matches"] is True
    assert doc["package_id"]["declared"] == doc["package_id"]["computed"]
    assert doc["runtime"]["auto"] == {"outcome": "native-mtp", "why": doc["runtime"]["auto"]["why"]}
    assert {"auto", "mtp", "disabled"} <= set(doc["runtime"])
    assert all(set(r) == {"outcome", "why"} for r in doc["runtime"].values())
    assert [set(a) for a in doc["compatibility"]] == [
        {"release", "admitted", "why", "single_node", "split"}
    ] * len(doc["compatibility"])


def test_a_stale_package_id_exits_1_and_names_both_ids(tmp_path: Path) -> None:
    doc = valid_v2()
    doc["native_abi_version"] = "0.1.57"

    code, out, _ = run(write(tmp_path, doc), "--json")
    result = json.loads(out)

    assert code == 1
    assert [p["code"] for p in result["problems"]] == ["package_identity_mismatch"]
    assert result["problems"][0]["path"] == "package_id"
    assert result["package_id"]["matches"] is False


@pytest.mark.parametrize("body", ['{"schema_version": 2,', "[]", '{"schema_version": 2}', "\x00"])
def test_a_file_that_is_not_a_manifest_is_invalid_not_unreadable(tmp_path: Path, body: str) -> None:
    code, out, _ = run(write(tmp_path, body), "--json")

    assert code == 1
    assert json.loads(out)["valid"] is False


def test_a_v1_manifest_is_valid_for_the_preflight_but_exits_1_as_no_current_release_serves_it(
    tmp_path: Path,
) -> None:
    code, out, _ = run(write(tmp_path, v1_base()), "--json")
    doc = json.loads(out)

    assert code == 1
    assert doc["schema"] == 1 and doc["valid"] is True
    assert [p["code"] for p in doc["problems"]] == ["v1_offline_only"]
    assert doc["package_id"] == {"declared": None, "computed": None, "matches": None}
    assert {a["release"] for a in doc["compatibility"] if a["admitted"]} == {"v0.72.1"}
    assert doc["assessment"]["headline"]["status"] == "not-servable"
    assert doc["assessment"]["headline"]["action"]["kind"] == "republish-v2"


def test_a_manifest_over_16_mib_is_invalid(tmp_path: Path) -> None:
    path = tmp_path / "model-package.json"
    path.write_bytes(b"{" + b" " * MAX_MANIFEST_BYTES + b"}")

    code, out, _ = run(path, "--json")

    assert code == 1
    assert json.loads(out)["problems"][0]["code"] == "manifest_too_large"


@pytest.mark.parametrize("name", ["missing.json", "."])
def test_a_file_that_cannot_be_read_exits_2(tmp_path: Path, name: str) -> None:
    code, out, err = run(tmp_path / name)

    assert code == 2
    assert out == "" and "cannot read" in err


def test_the_text_report_lists_problems_the_resolver_table_and_releases(tmp_path: Path) -> None:
    code, out, _ = run(write(tmp_path, valid_v2()))

    assert code == 0
    assert out.startswith("status: weights not read (weights-unread)\n")
    assert f"  $ python manage.py audit_package {tmp_path}" in out
    assert "valid as mesh-llm judges it" in out
    assert "  auto: native-mtp:" in out
    assert "(not pinned down) Whether a split package load" in out
    assert "  v0.76.2: refused: package-v2 native ABI 0.1.53" not in out
    assert "v0.78.0: admitted" in out
    assert "what this check cannot see:" in out


def test_in_a_package_folder_the_carrier_beside_the_manifest_feeds_the_split_gate(
    demo_catalog: Path, tmp_path: Path
) -> None:
    from packages_app.devhub import write_package_folder
    from packages_app.devhub.generator import GLM51_REPO

    folder = write_package_folder(GLM51_REPO, None, tmp_path / "glm51", root=demo_catalog)
    code, out, _ = run(folder / "model-package.json", "--json")
    headline = json.loads(out)["assessment"]["headline"]

    assert code == 1
    assert headline["status"] == "not-servable" and headline["action"]["kind"] == "split-override"
    assert headline["sentence"].startswith(
        "Not servable split by v0.78.0 (roster inferred from its ABI 0.1.66)"
    )
    assert "does not list glm-dsa" in headline["sentence"]
    (folder / "shared" / "metadata.gguf").unlink()  # control: without the carrier the gate cannot tell
    code, out, _ = run(folder / "model-package.json", "--json")
    assert json.loads(out)["assessment"]["headline"]["status"] == "weights-unread"


REPEATED_OUTCOME = re.compile(r"\b(admitted|refused|not pinned down|load-fails|no-mtp|native-mtp): \1:")


def test_the_text_report_says_values_in_words_and_each_reason_once(tmp_path: Path) -> None:
    broken = valid_v2()
    broken["layers"] = "oops"  # an unknown field: the manifest does not parse
    code, out, _ = run(write(tmp_path, broken))
    assert code == 1
    parse_error = "unknown field `layers`"
    assert out.count(parse_error) == 2, out  # the headline and the problem, not every setting and release
    assert "invalid_manifest_json, above" in out
    assert "not computed (the manifest does not parse)" in out
    assert "auto, mtp, disabled" in out  # the settings that share the outcome, on one line
    for text in (out, run(write(tmp_path, valid_v2()))[1]):
        assert not re.search(r"\b(None|True|False)\b", text), text
        assert not REPEATED_OUTCOME.search(text), REPEATED_OUTCOME.search(text)
    assert ": they match" in run(write(tmp_path, valid_v2()))[1]
