"""The split-certification gate (docs/rules.md sections 6a and 6b; issue 20 items 1-3, issue 41 item 1):
the bundled rosters, the gate per release (v0.78.0's roster inferred from its ABI), the release rows after
v0.76.2, and `manage.py import_roster`."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command

from packages_app import hub, ingest
from packages_app.audit import certification
from packages_app.audit.certification import Roster, RosterError, split_gate
from packages_app.audit.check import check_manifest
from packages_app.audit.releases import Admission, Release, compatibility, known_releases, parse_releases
from packages_app.devhub.generator import DEMO_PACKAGES, GLM51_REPO
from packages_app.manifest import parse_manifest
from packages_app.manifest.identity import package_id_of
from tests.audit_fixtures import QWEN35, build, mtp_generation
from tests.test_detection_drafts import GLM_DSA
from tests.test_rulebook import mtp_sd, v2_base

ROSTERS = Path(certification.__file__).parent / "rosters"
OLD, NEW = "mesh-llm-173b7cd6", "mesh-llm-00caec16"
# Both stored rosters for v0.78.0's ABI (docs/rules.md 6b).
ABI_0_1_66 = ("mesh-llm-5d067fec", "mesh-llm-97372534")
ABI_0_1_67 = "mesh-llm-b51ef30e"  # a build after v0.78.0 whose tag is unknown
ADDED_IN_0_1_63 = {"bailingmoe2", "deepseek4", "minimax-m2", "mistral3", "muse-glimmer", "nemotron_h"}
ON_BOTH = {"qwen35moe", "qwen35", "deepseek2", "glm4moe", "nemotron_h_moe", "llama", "qwen4exp"}
# A release whose roster is known and which admits any package ABI: the gate alone decides split serving.
KNOWN = Release("built at 00caec16", "any", "0.1.63", False, True, True, "test", True, NEW, "build")


# --- the bundled rosters ----------------------------------------------------------------------------


def test_the_known_rosters_are_read_from_their_files_with_the_commit_each_comes_from() -> None:
    rosters = certification.known_rosters()

    assert set(rosters) == {OLD, NEW, *ABI_0_1_66, ABI_0_1_67}
    for name in (*ABI_0_1_66, ABI_0_1_67):  # the same 84 as 00caec16, for another native recipe each
        assert rosters[name].architectures == rosters[NEW].architectures
        assert rosters[name].recipe != rosters[NEW].recipe
    assert {rosters[n].recipe.skippy_abi for n in ABI_0_1_66} == {"0.1.66"}
    assert rosters[ABI_0_1_66[0]].source.path == "skippy/crates/skippy-api/src/split-certified.json"
    old, new = rosters[OLD], rosters[NEW]
    assert (old.recipe.skippy_abi, len(old.architectures)) == ("0.1.59", 78)
    assert (new.recipe.skippy_abi, len(new.architectures)) == ("0.1.63", 84)
    assert new.architectures - old.architectures == ADDED_IN_0_1_63
    assert old.architectures <= new.architectures
    assert old.architectures >= ON_BOTH
    assert not {"glm-dsa", "glm5next"} & new.architectures
    assert old.source.commit.startswith("173b7cd6") and new.source.commit.startswith("00caec16")
    assert new.source.repo == "Mesh-LLM/mesh-llm" and new.source.path.endswith("split-certified.json")


@pytest.mark.parametrize("name", [OLD, NEW, *ABI_0_1_66, ABI_0_1_67])
def test_a_bundled_roster_file_is_in_mesh_llms_own_format(name: str) -> None:
    doc = json.loads((ROSTERS / f"{name}.json").read_text())

    assert list(doc) == ["schema_version", "native_recipe", "architectures"]
    assert doc["schema_version"] == 2
    assert list(doc["native_recipe"]) == ["llama_upstream_sha", "skippy_abi", "patch_queue_sha256"]
    assert doc["architectures"] == sorted(doc["architectures"])


def test_a_roster_without_its_source_record_is_refused(tmp_path: Path) -> None:
    (tmp_path / f"{NEW}.json").write_bytes((ROSTERS / f"{NEW}.json").read_bytes())

    with pytest.raises(RosterError, match=r"no mesh-llm-00caec16\.source\.json"):
        certification.load_rosters(tmp_path)


# --- the gate ---------------------------------------------------------------------------------------


def admission(package_audit: Any, release: str) -> Admission:
    return next(a for a in package_audit.compatibility if a.release == release)


def test_qwen35moe_is_admitted_and_glm_dsa_refused_by_a_release_whose_roster_is_known() -> None:
    qwen = build(QWEN35, 2, mtp_generation(2, [40])).audit()
    glm = build(GLM_DSA, 2, mtp_generation(2, [78])).audit()

    for release in ("mesh-llm@173b7cd6", "mesh-llm@00caec16"):
        assert admission(qwen, release).gate.outcome == "admitted"
        refused = admission(glm, release)
        assert refused.gate is not None and refused.gate.outcome == "refused"
        assert refused.split is not None and refused.split.admitted is False
        assert refused.split.why.startswith(
            f"architecture glm-dsa is not certified for split serving by {release} (roster mesh-llm-"
        )
        assert refused.split.why.endswith("; `--allow-uncertified-split` overrides")
        assert refused.single_node is not None and refused.single_node.admitted is not False


def test_v0_78_0_refuses_a_glm_dsa_split_and_admits_qwen35moe_on_the_roster_inferred_from_its_abi() -> None:
    qwen = admission(build(QWEN35, 2, mtp_generation(2, [40])).audit(), "v0.78.0")
    glm = admission(build(GLM_DSA, 2, mtp_generation(2, [78])).audit(), "v0.78.0")

    assert qwen.gate is not None and glm.gate is not None
    assert (qwen.gate.outcome, glm.gate.outcome) == ("admitted", "refused")
    assert qwen.split is not None and qwen.split.admitted is True
    assert glm.split is not None and glm.split.admitted is False
    assert glm.single_node is not None and glm.single_node.admitted is True  # one node is not gated
    for gate in (qwen.gate, glm.gate):
        assert gate.roster_inferred and gate.to_json()["roster_inferred"] is True
        assert (
            "roster inferred from its ABI 0.1.66: mesh-llm-5d067fec, mesh-llm-97372534 list the same 84"
            in (gate.why)
        )
    assert glm.gate.why.startswith("architecture glm-dsa is not certified for split serving by v0.78.0")


def test_a_roster_read_for_its_commit_is_not_marked_inferred() -> None:
    glm = admission(build(GLM_DSA, 2, mtp_generation(2, [78])).audit(), "mesh-llm@00caec16")
    assert glm.gate is not None and glm.gate.outcome == "refused" and not glm.gate.roster_inferred
    assert "inferred" not in glm.gate.why


def test_a_roster_inferred_from_an_abi_no_bundled_roster_is_for_stays_unknown() -> None:
    gate = split_gate("glm-dsa", "v9.9.9", True, certification.INFERRED_FROM_ABI, skippy_abi="0.1.99")

    assert gate.outcome == "not-pinned-down" and not gate.roster_inferred
    assert "Skippy ABI 0.1.99 matches no known roster" in gate.why


def test_rosters_bundled_for_one_abi_that_disagree_leave_the_inferred_roster_unknown() -> None:
    bundled = certification.known_rosters()
    other = bundled[ABI_0_1_66[1]]
    rosters = dict(bundled) | {
        other.name: Roster(other.name, other.recipe, frozenset({"llama"}), other.source)
    }

    gate = split_gate("llama", "v0.78.0", True, certification.INFERRED_FROM_ABI, "0.1.66", rosters)
    assert gate.outcome == "not-pinned-down"
    assert "list different architectures" in gate.why
    # The control: with the bundled rosters (which agree) the same call judges.
    assert (
        split_gate("llama", "v0.78.0", True, certification.INFERRED_FROM_ABI, "0.1.66").outcome == "admitted"
    )


def test_where_the_roster_or_the_gate_is_not_pinned_down_the_gate_says_so() -> None:
    glm = build(GLM_DSA, 2, mtp_generation(2, [78])).audit()

    for release in ("v0.76.1", "v0.76.2"):
        gate = admission(glm, release).gate
        assert gate is not None and gate.outcome == "not-pinned-down"
        assert "whether" in gate.why and "split-certification gate" in gate.why


def test_a_gated_release_whose_abi_is_not_recorded_says_only_that_its_roster_is_unknown() -> None:
    gate = split_gate("glm-dsa", "v9.9.9", True, None, skippy_abi="")
    assert gate.outcome == "not-pinned-down"
    assert gate.why == "not pinned down: which roster v9.9.9 carries is not known."


def test_split_serving_needs_the_package_and_the_gate_single_node_only_the_package() -> None:
    parsed = parse_manifest(build(QWEN35, 2).manifest_bytes())
    qwen = compatibility(parsed, (KNOWN,), architecture="qwen35moe")[0]
    glm = compatibility(parsed, (KNOWN,), architecture="glm-dsa")[0]

    assert (qwen.admitted, qwen.split.admitted, qwen.single_node.admitted) == (True, True, True)
    assert (glm.admitted, glm.split.admitted, glm.single_node.admitted) == (True, False, True)
    assert "split-certification" not in glm.single_node.why


def test_the_override_flag_is_named_in_every_refusal() -> None:
    gate = split_gate("glm5next", "vX", True, NEW)

    assert gate.admitted is False
    assert gate.why == (
        "architecture glm5next is not certified for split serving by vX (roster mesh-llm-00caec16: "
        "Skippy ABI 0.1.63, llama.cpp 8212c780, patch queue bc2374dd); `--allow-uncertified-split` overrides"
    )


def test_a_manifest_checked_alone_leaves_the_split_gate_not_pinned_down() -> None:
    doc = v2_base()
    doc["generation"] = {"speculative_decoding": mtp_sd()}
    doc["package_id"] = package_id_of(doc)
    result = check_manifest(json.dumps(doc).encode()).to_json()

    builds = [a for a in result["compatibility"] if a["release"].startswith("mesh-llm@")]
    assert builds and all(a["split"]["gate"]["outcome"] == "not-pinned-down" for a in builds)
    assert all(
        a["split"]["gate"]["why"]
        == "not pinned down: the architecture is read from the metadata carrier, which was not read."
        for a in builds
    )


# --- release rows -----------------------------------------------------------------------------------


def test_each_release_row_names_its_skippy_abi_and_its_roster_or_says_it_is_not_pinned_down() -> None:
    rows = {r.release: r for r in known_releases()}

    assert rows["v0.78.0"].runtime_abi == "0.1.66"
    assert rows["v0.78.0"].roster == certification.INFERRED_FROM_ABI
    assert rows["mesh-llm@173b7cd6"].roster == OLD and rows["mesh-llm@00caec16"].roster == NEW
    assert rows["v0.76.1"].split_gate is None and rows["v0.76.2"].split_gate is None
    assert all(r.runtime_abi for r in rows.values())
    assert "after PR #1959" not in rows


def test_a_package_with_no_source_bytes_is_refused_even_where_the_abi_rule_is_not_pinned_down() -> None:
    doc = v2_base()
    doc["source_model"]["files"][0]["byte_size"] = 0
    doc["package_id"] = package_id_of(doc)

    rows = {a.release: a for a in compatibility(parse_manifest(json.dumps(doc).encode()))}

    assert rows["v0.78.0"].admitted is False and "source byte total" in rows["v0.78.0"].why


_ROW = 'release = "v9.9.9"\nabi_rule = "any"\nruntime_abi = "{abi}"\nsplit_gate = true\nroster = "{roster}"\n'


def test_a_release_row_naming_a_roster_for_another_abi_is_refused() -> None:
    with pytest.raises(ValueError, match="a roster is void for any other build"):
        parse_releases("[[release]]\n" + _ROW.format(abi="0.1.66", roster=NEW))
    # The control: the same row at the roster's own ABI is one data change that parses.
    (row,) = parse_releases("[[release]]\n" + _ROW.format(abi="0.1.63", roster=NEW))
    assert (row.roster, row.split_gate) == (NEW, True)


def test_a_release_row_naming_a_roster_that_is_not_bundled_is_refused() -> None:
    with pytest.raises(ValueError, match="not in rosters/"):
        parse_releases("[[release]]\n" + _ROW.format(abi="0.1.63", roster="mesh-llm-deadbeef"))


# --- manage.py import_roster ------------------------------------------------------------------------


def import_roster(tmp: Path, file: Path, *flags: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    try:
        call_command("import_roster", str(file), "--into", str(tmp), *flags, stdout=out, stderr=err)
    except SystemExit as exited:
        return int(exited.code or 0), out.getvalue(), err.getvalue()
    return 0, out.getvalue(), err.getvalue()


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


@pytest.mark.parametrize("name", [OLD, NEW, *ABI_0_1_66, ABI_0_1_67])
def test_import_roster_adds_each_known_roster_from_its_file_unchanged(tmp_path: Path, name: str) -> None:
    known: Roster = certification.known_rosters()[name]

    source = known.source
    flags = ("--commit", source.commit, "--repo", source.repo, "--path", source.path)
    code, out, _ = import_roster(tmp_path, ROSTERS / f"{name}.json", *flags)

    assert code == 0 and f"imported roster {name}" in out
    assert certification.load_rosters(tmp_path) == {name: known}
    assert (tmp_path / f"{name}.json").read_bytes() == (ROSTERS / f"{name}.json").read_bytes()


def _bundled() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((ROSTERS / f"{NEW}.json").read_text())
    return doc


def _recipe(**changes: str) -> dict[str, Any]:
    return _bundled() | {"native_recipe": _bundled()["native_recipe"] | changes}


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A copy of the bundled roster folder."""
    copy = tmp_path / "rosters"
    copy.mkdir()
    for p in ROSTERS.iterdir():
        (copy / p.name).write_bytes(p.read_bytes())
    return copy


MALFORMED: dict[str, tuple[str | bytes, str]] = {
    "not JSON": ('{"schema_version": 2,', "not JSON"),
    "a list": ("[]", "must be a JSON object"),
    "schema 1": (json.dumps(_bundled() | {"schema_version": 1}), "schema_version is 1"),
    "no recipe": (json.dumps({k: v for k, v in _bundled().items() if k != "native_recipe"}), "lacks"),
    "short sha": (
        json.dumps(
            _bundled() | {"native_recipe": _bundled()["native_recipe"] | {"llama_upstream_sha": "8212c78"}}
        ),
        "llama_upstream_sha",
    ),
    "bad ABI": (
        json.dumps(_bundled() | {"native_recipe": _bundled()["native_recipe"] | {"skippy_abi": "latest"}}),
        "skippy_abi",
    ),
    "an architecture twice": (json.dumps(_bundled() | {"architectures": ["llama", "llama"]}), "listed twice"),
    "no architectures": (json.dumps(_bundled() | {"architectures": []}), "non-empty list"),
    "an unknown key": (json.dumps(_bundled() | {"models": []}), "keys mesh-llm's format does not: models"),
    "a repeated key": ('{"schema_version": 2, "schema_version": 2}', "appears twice"),
    "a recipe that is a string": (json.dumps(_bundled() | {"native_recipe": "b8212c7"}), "must be an object"),
    "a recipe without its ABI": (
        json.dumps(
            _bundled()
            | {"native_recipe": {k: v for k, v in _recipe()["native_recipe"].items() if k != "skippy_abi"}}
        ),
        "native_recipe lacks skippy_abi",
    ),
    "a recipe with a key of its own": (json.dumps(_recipe(toolchain="gcc")), "native_recipe has keys"),
    "a short patch-queue hash": (json.dumps(_recipe(patch_queue_sha256="abc")), "patch_queue_sha256"),
    "an architecture that is no GGUF name": (
        json.dumps(_bundled() | {"architectures": ["llama", "<script>"]}),
        "architectures[1] '<script>' is not a GGUF architecture name",
    ),
    "thousands of architectures": (
        json.dumps(_bundled() | {"architectures": [f"arch{i}" for i in range(5000)]}),
        "over the limit of 4096",
    ),
    "a file over a megabyte": (
        json.dumps(_bundled() | {"padding": "x" * (1 << 20)}),
        "over the 1048576-byte limit",
    ),
    "Latin-1 bytes": (b'{"schema_version": "\xe9"}', "not UTF-8"),
}


@pytest.mark.parametrize("case", MALFORMED, ids=list(MALFORMED))
def test_import_roster_on_a_malformed_file_exits_2_and_changes_nothing(
    tmp_path: Path, folder: Path, case: str
) -> None:
    before = snapshot(folder)
    body, reason = MALFORMED[case]
    bad = tmp_path / "split-certified.json"
    bad.write_bytes(body if isinstance(body, bytes) else body.encode())

    code, out, err = import_roster(folder, bad, "--commit", "a" * 40, "--name", "mesh-llm-aaaaaaaa")

    assert code == 2 and out == ""
    assert reason in err and "nothing was imported" in err
    assert snapshot(folder) == before


BAD_SOURCES = {
    "a repo that is a URL": (
        ("https://github.com/Mesh-LLM/mesh-llm", "a" * 40, "split-certified.json"),
        "owner/name",
    ),
    "a branch for a commit": (("Mesh-LLM/mesh-llm", "main", "split-certified.json"), "40-hex"),
    "an absolute path": (("Mesh-LLM/mesh-llm", "a" * 40, "/etc/passwd"), "relative path"),
    "a path out of the repository": (
        ("Mesh-LLM/mesh-llm", "a" * 40, "../split-certified.json"),
        "relative path",
    ),
}


@pytest.mark.parametrize("case", BAD_SOURCES, ids=list(BAD_SOURCES))
def test_import_roster_refuses_a_source_that_names_no_file_at_a_commit(
    tmp_path: Path, folder: Path, case: str
) -> None:
    (repo, commit, path), reason = BAD_SOURCES[case]
    good = tmp_path / "split-certified.json"
    good.write_text(json.dumps(_recipe(skippy_abi="0.1.99")))
    before = snapshot(folder)

    code, _, err = import_roster(folder, good, "--repo", repo, "--commit", commit, "--path", path)

    assert code == 2 and reason in err
    assert snapshot(folder) == before


def test_a_source_record_with_keys_of_its_own_or_a_roster_with_a_bad_name_is_refused() -> None:
    with pytest.raises(RosterError, match="unknown keys: branch"):
        certification.parse_source(
            json.dumps({"repo": "a/b", "commit": "a" * 40, "path": "x", "branch": "m"})
        )
    source = certification.parse_source(json.dumps({"repo": "a/b", "commit": "a" * 40, "path": "x.json"}))
    body = json.dumps(_recipe(skippy_abi="0.1.99"))
    for name in ("../escape", "roster.source", ""):
        with pytest.raises(RosterError, match="roster name"):
            certification.parse_roster(body, name, source)
    assert certification.parse_roster(body, "mesh-llm-aaaaaaaa", source).recipe.skippy_abi == "0.1.99"


def test_a_roster_file_that_fails_to_parse_is_named_when_the_folder_loads(folder: Path) -> None:
    (folder / f"{NEW}.json").write_text("[]")
    with pytest.raises(RosterError, match=f"^{NEW}.json: the roster must be a JSON object"):
        certification.load_rosters(folder)


def test_import_roster_on_a_valid_new_file_changes_the_folder(tmp_path: Path, folder: Path) -> None:
    # The control for the test above: the same folder and flags, a well-formed file.
    before = snapshot(folder)
    good = tmp_path / "split-certified.json"
    good.write_text(json.dumps(_recipe(skippy_abi="0.1.99")))

    code, _, _ = import_roster(folder, good, "--commit", "a" * 40, "--name", "mesh-llm-aaaaaaaa")

    assert code == 0
    assert set(snapshot(folder)) - set(before) == {"mesh-llm-aaaaaaaa.json", "mesh-llm-aaaaaaaa.source.json"}
    assert certification.load_rosters(folder)["mesh-llm-aaaaaaaa"].recipe.skippy_abi == "0.1.99"


def test_import_roster_of_a_roster_already_bundled_changes_nothing(folder: Path) -> None:
    known = certification.known_rosters()[NEW]
    before = snapshot(folder)

    flags = ("--commit", known.source.commit, "--path", known.source.path)
    code, out, _ = import_roster(folder, ROSTERS / f"{NEW}.json", *flags)

    assert code == 0 and out.strip() == f"roster {NEW} is already bundled, unchanged"
    assert snapshot(folder) == before


def test_import_roster_refuses_a_second_list_for_a_bundled_recipe(tmp_path: Path) -> None:
    (tmp_path / f"{NEW}.json").write_bytes((ROSTERS / f"{NEW}.json").read_bytes())
    (tmp_path / f"{NEW}.source.json").write_bytes((ROSTERS / f"{NEW}.source.json").read_bytes())
    before = snapshot(tmp_path)
    other = tmp_path.parent / "other.json"
    other.write_text(json.dumps(_bundled() | {"architectures": ["glm-dsa"]}))

    code, _, err = import_roster(tmp_path, other, "--commit", "b" * 40)

    assert code == 2 and "already bundled for the same native recipe" in err
    assert snapshot(tmp_path) == before


def test_import_roster_refuses_a_commit_that_is_not_a_sha(tmp_path: Path) -> None:
    code, _, err = import_roster(tmp_path, ROSTERS / f"{NEW}.json", "--commit", "main")

    assert code == 2 and "not a 40-hex" in err
    assert list(tmp_path.iterdir()) == []


# --- the demo ---------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_demos_glm_dsa_package_is_refused_split_serving_where_the_roster_is_known(
    hub_source: type[hub.HubSource],
) -> None:
    demo = next(p for p in DEMO_PACKAGES if p.repo_id == GLM51_REPO)
    rev = ingest.ingest_revision(GLM51_REPO, demo.main_sha, source=hub_source(GLM51_REPO)).revision

    assert demo.architecture == "glm-dsa" and rev.verdict == "consistent-mtp"
    rows = {a["release"]: a for a in rev.audit["compatibility"]}
    for release in ("mesh-llm@173b7cd6", "mesh-llm@00caec16"):
        assert rows[release]["split"]["admitted"] is False
        why = rows[release]["split"]["why"]
        assert why.startswith(f"architecture glm-dsa is not certified for split serving by {release}")
    assert rows["v0.78.0"]["single_node"]["admitted"] is True  # written by v0.78.0's packager at its ABI
    assert rows["v0.78.0"]["split"]["admitted"] is False
    assert rows["v0.78.0"]["split"]["gate"]["roster_inferred"] is True
    headline = rev.assessment["headline"]
    assert (headline["status"], headline["release"]) == ("not-servable", "v0.78.0")
    assert headline["sentence"].startswith(
        "Not servable split by v0.78.0 (roster inferred from its ABI 0.1.66)"
    )
    assert "00caec16" not in headline["sentence"]  # judged on the newest release, not an older build


def test_the_default_roster_path_is_where_the_tree_keeps_it_now() -> None:
    from packages_app.management.commands.import_roster import ROSTER_PATH

    assert ROSTER_PATH == "skippy/crates/skippy-api/src/split-certified.json"
