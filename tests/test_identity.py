"""The canonical package_id, computed as mesh-llm's computed_package_id does (docs/rules.md section 4)."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from packages_app.manifest.identity import package_id_of
from packages_app.manifest.v2schema import DecodeError

DIGEST = "0123456789abcdef" * 4
# mesh-llm's own tests.rs::fixture(), byte for byte as docs/rules.md gives it.
FIXTURE = (
    '{"schema_version":2,"package_id":"","model_id":"fixture/model","source_model":{"sha256":"'
    + DIGEST
    + '","metadata_artifact_id":"layer-0","repo":"fixture/model","revision":"revision",'
    '"primary_file":"model.gguf","canonical_ref":"hf://fixture/model@revision/model.gguf",'
    '"distribution_id":"fixture-model","files":[{"path":"model.gguf","byte_size":256,"sha256":"'
    + DIGEST
    + '"}]},"format":"gguf","layer_count":1,"artifact_catalog":{"entries":[{"id":"layer-0",'
    '"path":"layers/layer-00000.gguf","byte_size":256,"sha256":"'
    + DIGEST
    + '"}]},"native_abi_version":"7","generator_version":"0.76.0-rc9","created_at_unix_secs":0}'
)
FIXTURE_ID = "sha256:2236682c8bc746d84b85a33b4b19538e21e9be7197600f54ef76b5d2520414a3"
WRITER_GENERATION = {
    "speculative_decoding": {
        "default": "mtp",
        "strategies": {
            "mtp": {
                "type": "native-mtp",
                "prediction_depth": 1,
                "layer_indices": [0],
                "window_policy": {"default": "fixed", "initial_window": 1, "min_window": 1, "max_window": 1},
            }
        },
    }
}
WRITER_ID = "sha256:ba15749bcd2f988d120a6667cfcbe02362d8578822ef70c14660801119a58dc4"


def fixture() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(FIXTURE)
    return doc


def test_it_computes_mesh_llms_id_for_its_own_fixture() -> None:
    assert package_id_of(fixture()) == FIXTURE_ID


def test_it_computes_the_id_with_the_fixed_writers_generation_block() -> None:
    doc = fixture()
    doc["generation"] = copy.deepcopy(WRITER_GENERATION)

    assert package_id_of(doc) == WRITER_ID


def test_the_declared_id_and_the_timestamp_do_not_change_the_id() -> None:
    doc = fixture()
    doc["package_id"] = FIXTURE_ID
    doc["created_at_unix_secs"] = 1_790_000_000

    assert package_id_of(doc) == FIXTURE_ID


def test_key_order_in_the_file_does_not_change_the_id() -> None:
    doc = fixture()
    reordered = dict(reversed(list(doc.items())))
    reordered["source_model"] = dict(reversed(list(doc["source_model"].items())))

    assert package_id_of(reordered) == FIXTURE_ID


def test_artifact_and_source_file_order_does_not_change_the_id() -> None:
    doc = fixture()
    extra = {"id": "a-first", "path": "shared/common.gguf", "byte_size": 1, "sha256": DIGEST}
    doc["artifact_catalog"]["entries"].append(extra)
    swapped = copy.deepcopy(doc)
    swapped["artifact_catalog"]["entries"].reverse()

    assert package_id_of(doc) == package_id_of(swapped)


def test_generation_null_gives_the_id_of_an_absent_block_but_an_empty_one_does_not() -> None:
    null, empty = fixture(), fixture()
    null["generation"] = None
    empty["generation"] = {}

    assert package_id_of(null) == FIXTURE_ID
    assert package_id_of(empty) != FIXTURE_ID


def test_an_empty_list_gives_the_id_of_an_absent_one() -> None:
    doc = fixture()
    doc["sidecars"] = []
    doc["publisher_metadata"] = []

    assert package_id_of(doc) == FIXTURE_ID


def test_1_and_1_0_in_a_float_field_give_the_same_id() -> None:
    def with_temperature(value: float) -> str:
        doc = fixture()
        doc["generation"] = {"request_defaults": _defaults(value)}
        return package_id_of(doc)

    assert with_temperature(1) == with_temperature(1.0)


@pytest.mark.parametrize(
    ("key", "value"),
    [("native_abi_version", "0.1.54"), ("generator_version", "0.76.1"), ("model_id", "other/model")],
)
def test_the_abi_generator_and_model_are_bound_into_the_id(key: str, value: str) -> None:
    doc = fixture()
    doc[key] = value

    assert package_id_of(doc) != FIXTURE_ID


def test_it_refuses_a_manifest_that_does_not_deserialize() -> None:
    doc = fixture()
    doc["sidecars"] = None

    with pytest.raises(DecodeError, match="expected a sequence"):
        package_id_of(doc)


def _defaults(temperature: float) -> dict[str, Any]:
    revision = "a" * 40
    provenance = {
        "source_repo": "fixture/model",
        "revision": revision,
        "file": "generation_config.json",
        "section": "root",
        "url": f"https://huggingface.co/fixture/model/blob/{revision}/generation_config.json",
    }
    return {
        "selection": {"default": "standard"},
        "profiles": {"standard": {"temperature": temperature, "provenance": provenance}},
    }
