"""The package-layout vocabulary: which role a path plays in a layer package."""

from __future__ import annotations

import pytest

from packages_app.layout import FilePlace, FileRole, classify_path


@pytest.mark.parametrize(
    ("path", "place"),
    [
        ("layers/layer-040.gguf", FilePlace(FileRole.LAYER, 40)),
        ("layers/layer-00047.gguf", FilePlace(FileRole.LAYER, 47)),
        ("layers/layer-00047-part02.gguf", FilePlace(FileRole.LAYER, 47, 2)),
        ("layer-7.gguf", FilePlace(FileRole.LAYER, 7)),
        ("shared/metadata.gguf", FilePlace(FileRole.METADATA)),
        ("shared/common.gguf", FilePlace(FileRole.COMMON)),
        ("shared/mmproj-F16.gguf", FilePlace(FileRole.PROJECTOR)),
        ("model-package.json", FilePlace(FileRole.MANIFEST)),
        ("README.md", FilePlace(FileRole.OTHER)),
        ("layers/player-00001.gguf", FilePlace(FileRole.OTHER)),
        ("layers/layer-00001.gguf.bak", FilePlace(FileRole.OTHER)),
    ],
)
def test_files_get_their_role_and_layer_index_from_the_path_conventions(path: str, place: FilePlace) -> None:
    assert classify_path(path) == place


def test_the_role_names_are_the_stored_ones() -> None:
    from packages_app.models import PackageFile

    field = PackageFile._meta.get_field("role")
    assert {value for value, _ in field.choices} == {role.value for role in FileRole}
