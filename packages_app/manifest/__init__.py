"""Pure: model-package.json (schema v1 and v2) -> typed manifest + problems with mesh-llm's own codes.

Owns: bounded JSON loading, both schemas' validation, the typed manifest, the canonical package_id.
Never imports: Django, packages_app.models or any service, hub/ (no network, no file I/O), audit/.
"""

from packages_app.layout import LAYER_FILE_RE as LAYER_PATH
from packages_app.layout import MANIFEST_FILE, MAX_MANIFEST_BYTES
from packages_app.manifest.jsonload import load_json
from packages_app.manifest.model import (
    BUILD_HOST_PATH,
    COMPOSITE,
    LEGACY_MTP_NAME,
    MAX_DEPTH,
    MAX_PROBLEMS,
    MTP_NAME,
    NATIVE_MTP,
    NGRAM_TYPES,
    SEVERITIES,
    Artifact,
    ExtensionPolicy,
    Json,
    Manifest,
    ManifestResult,
    NativeMtp,
    Ngram,
    Problem,
    Proposer,
    Severity,
    SourceFile,
    SourceModel,
    SpeculativeDecoding,
    Strategy,
    WindowPolicy,
)
from packages_app.manifest.parse import parse_manifest, render_manifest
from packages_app.manifest.reader import describe_layers, unsafe_path_reason

__all__ = [
    "BUILD_HOST_PATH",
    "COMPOSITE",
    "LAYER_PATH",
    "LEGACY_MTP_NAME",
    "MANIFEST_FILE",
    "MAX_DEPTH",
    "MAX_MANIFEST_BYTES",
    "MAX_PROBLEMS",
    "MTP_NAME",
    "NATIVE_MTP",
    "NGRAM_TYPES",
    "SEVERITIES",
    "Artifact",
    "ExtensionPolicy",
    "Json",
    "Manifest",
    "ManifestResult",
    "NativeMtp",
    "Ngram",
    "Problem",
    "Proposer",
    "Severity",
    "SourceFile",
    "SourceModel",
    "SpeculativeDecoding",
    "Strategy",
    "WindowPolicy",
    "describe_layers",
    "load_json",
    "parse_manifest",
    "render_manifest",
    "unsafe_path_reason",
]
