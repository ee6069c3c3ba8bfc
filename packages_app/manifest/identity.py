"""Pure: the canonical package_id mesh-llm computes for a package-v2 manifest (docs/rules.md section 4).

The id is ``sha256:`` + the SHA-256 of the compact serialization of the decoded root with
``package_id`` set to "" and ``created_at_unix_secs`` to 0, source files sorted by path, artifacts by
id, sidecars by (kind, name, artifact_id) and publisher metadata by (role order, then its strings).
No Django, no I/O.
"""

from __future__ import annotations

import hashlib
from typing import Any

from packages_app.manifest.v2schema import PUBLISHER_ROLES, Json, decode_root, serialize


def canonical_package_id(root: Json) -> str:
    """The package_id of a decoded root (v2schema.decode_root), as mesh-llm's computed_package_id."""
    # Shallow copies: only the re-ordered lists and the two blanked fields differ from the decoded root.
    source = root["source_model"]
    normalized = {
        **root,
        "package_id": "",
        "created_at_unix_secs": 0,
        "source_model": {**source, "files": sorted(source["files"], key=lambda f: f["path"])},
        "artifact_catalog": {"entries": sorted(root["artifact_catalog"]["entries"], key=lambda a: a["id"])},
        "sidecars": sorted(root["sidecars"], key=_sidecar_order),
        "publisher_metadata": sorted(root["publisher_metadata"], key=_publisher_order),
    }
    return "sha256:" + hashlib.sha256(serialize(normalized)).hexdigest()


def package_id_of(raw: Any) -> str:
    """The canonical id of a raw (json.loads) manifest; raises v2schema.DecodeError if it cannot parse."""
    return canonical_package_id(decode_root(raw))


def _sidecar_order(sidecar: Json) -> tuple[str, bool, str, str]:
    name = sidecar.get("name")
    return sidecar["kind"], name is not None, name or "", sidecar["artifact_id"]


def _publisher_order(entry: Json) -> tuple[int, str, str, str, str]:
    return (
        PUBLISHER_ROLES.index(entry["role"]),
        entry["artifact_id"],
        entry["source_repo"],
        entry["source_revision"],
        entry["source_path"],
    )
