"""The package-layout vocabulary: file names, size limits, the layer-file pattern and file roles.

Pure (no Django, no I/O). Every module that needs to know what a layer package looks like on disk or on
the Hub asks here, so a change to the convention is one edit. The conventions are mesh-llm's
(docs/domain.md section 1): `model-package.json` at the root, `layers/layer-NNNNN.gguf` per transformer block
(split blocks as `-partMM`), `shared/metadata.gguf` as the v2 metadata carrier.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

MANIFEST_FILE = "model-package.json"
# The v2 metadata carrier as mesh-llm's writer names it: every KV, and the tensor directory of every layer.
METADATA_CARRIER = "shared/metadata.gguf"
# mesh-llm reads manifests whole; anything larger is not a manifest but an attack on the reader.
MAX_MANIFEST_BYTES = 16 * 1024 * 1024
# A v2 metadata-carrier GGUF sets this key; its tensors then describe every layer file.
METADATA_ONLY_KEY = "skippy.package.metadata_only"
# Repo housekeeping that no manifest names and nobody needs flagged.
HOUSEKEEPING_FILES = frozenset({MANIFEST_FILE, ".gitattributes", "README.md"})

# `layer-00040.gguf`, `layer-00047-part02.gguf`, anywhere in the tree. The writer pads to five digits, but
# mesh-llm does not check artifact naming (docs/rules.md section 2), so any width up to six digits is a
# layer file.
LAYER_FILE_RE = re.compile(r"(?:^|/)layer-(\d{1,6})(?:-part(\d{1,4}))?\.gguf$")


class FileRole(StrEnum):
    MANIFEST = "manifest"
    METADATA = "metadata"
    COMMON = "common"
    LAYER = "layer"
    PROJECTOR = "projector"
    OTHER = "other"


@dataclass(frozen=True)
class FilePlace:
    """Where a file sits in a package: its role and, for layer files, its block and part."""

    role: FileRole
    layer: int | None = None
    part: int | None = None


def classify_path(path: str) -> FilePlace:
    """Role, layer index and part index of a package file, from the path conventions alone."""
    if path == MANIFEST_FILE:
        return FilePlace(FileRole.MANIFEST)
    if match := LAYER_FILE_RE.search(path):
        return FilePlace(FileRole.LAYER, int(match[1]), int(match[2]) if match[2] else None)
    name = path.rsplit("/", 1)[-1]
    if "mmproj" in name or "projector" in path:
        return FilePlace(FileRole.PROJECTOR)
    if name.startswith("metadata") and name.endswith(".gguf"):
        return FilePlace(FileRole.METADATA)
    if path.startswith("shared/") and name.endswith(".gguf"):
        return FilePlace(FileRole.COMMON)
    return FilePlace(FileRole.OTHER)
