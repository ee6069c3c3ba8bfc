"""Pure: what each problem code and runtime outcome means, in one sentence; no Django, no I/O.

The glossary page lists these beside the vocabulary of statuses, actions, verdicts and causes (which
packages_app.verdicts owns with their sentences); every badge links to its entry (``anchor``).
"""

from __future__ import annotations

from packages_app.audit import detection

PROBLEMS: dict[str, str] = {
    "undeclared_mtp": "A block holds NextN tensors but generation.speculative_decoding declares no "
    "native-MTP strategy.",
    "declared_without_weights": "A native-MTP strategy is declared but no block holds NextN tensors.",
    "mtp_layer_mismatch": "The declared layer_indices are not the blocks that hold NextN tensors.",
    "mtp_depth_mismatch": "The declared prediction_depth differs from the GGUF's nextn_predict_layers.",
    "mtp_not_default": "Native MTP is declared but is not the default strategy, so auto does not pick it.",
    "nextn_key_mismatch": "The GGUF's nextn_predict_layers key disagrees with the NextN tensors present.",
    "nextn_tensors_missing": "An MTP block lacks some of the NextN tensors the architecture needs.",
    "incomplete_mtp_head": "The MTP head is incomplete: the runtime cannot load it.",
    "layer_count_mismatch": "The manifest's layer_count differs from the GGUF block count.",
    "missing_artifact": "A file the manifest names is not in the repository.",
    "artifact_size_mismatch": "A file's size on the Hub differs from the manifest's artifact_bytes.",
    "artifact_sha256_mismatch": "A file's sha256 on the Hub differs from the manifest's.",
    "weights_not_inspected": "Some GGUF headers could not be read, so the audit cannot see every block.",
    "build_host_source_path": "source_model.path is a path on the build machine; serving nodes cannot "
    "read it, so only the manifest can enable MTP.",
    "build_host_path": "source_model.path is a path on the build machine that serving nodes cannot read.",
    "v1_offline_only": "The manifest is schema v1 (layer-package), offline-only since mesh-llm PR #1693: "
    "every serving load refuses it (docs/rules.md section 3). Republish it as package-v2.",
    "invalid_manifest_json": "model-package.json is not JSON, or does not parse as its schema (an unknown or "
    "missing field, a wrong type): mesh-llm rejects it before anything else.",
    "mtp_strategy_not_keyed_mtp": "Native MTP is declared in a strategy not named mtp, so an operator's "
    "speculative.strategy = mtp is refused; auto still runs the default.",
    "strategy_fails_at_load": "A declared strategy passes the format's checks but fails when a node "
    "loads it.",
    "too_many_problems": "The manifest has more problems than are listed; fix those shown and check it "
    "again.",
    **detection.GLOSSARY,
}

# What a node reports it did: effective strategies and MTP sources (docs/node-report.md).
RUNTIME: dict[str, str] = {
    "disabled": "No speculative decoding: one token per forward pass.",
    "native-mtp": "The package's MTP (NextN) head drafts tokens that the main model verifies.",
    "native-mtp+ngram-cache": "Native MTP, continued by n-gram proposals from a cache.",
    "native-mtp+ngram-suffix": "Native MTP, continued by n-gram proposals from a suffix index.",
    "ngram-cache": "Draft tokens from repeated n-grams (cache); no MTP weights used.",
    "ngram-suffix": "Draft tokens from repeated n-grams (suffix index); no MTP weights used.",
    "mtp-source-Disabled": "mtp_source=Disabled: the node ran without MTP.",
    "mtp-source-Integrated": "mtp_source=Integrated: MTP ran from the package's own weights.",
    "public-figures": "Decode throughput (median tok/s, reports, nodes): from the nodes that registered "
    "a run of the revision, each counting at most a day's share of its reports (1,440 a day by default); "
    "a node's other reports are on its own page only.",
    "alert": "Throughput alert: the weights hold MTP, yet nodes report it unused while their operator asked "
    "for a strategy that could use it.",
    "queued": "Ingest status: the revision waits for a worker to read its files.",
    "running": "Ingest status: a worker is reading the revision's GGUF headers (files read / total).",
    "done": "Ingest status: every file was listed and every GGUF header read; the audit is current.",
    "failed": "Ingest status: the ingest stopped; the badge's tooltip and the ingest page say why.",
}


def anchor(kind: str, name: str) -> str:
    """The glossary fragment id of an entry, e.g. ``verdict-undeclared-mtp``."""
    return f"{kind}-{name}".replace("_", "-").replace("+", "-")


_DECIMAL_UNITS = ("bytes", "kB", "MB", "GB", "TB", "PB")
UNKNOWN = "\u2013"  # an en dash, as the tables show a missing value


def format_decimal_size(value: int | None) -> str:
    """``18.6 GB`` for 18_600_000_000: decimal units (kB = 10^3 ... TB = 10^12) as the Hub labels them."""
    if not value or value < 0:
        return UNKNOWN
    size, unit = float(value), 0
    while size >= 1000 and unit < len(_DECIMAL_UNITS) - 1:
        size, unit = size / 1000, unit + 1
    if unit == 0:
        return f"{value} byte{'s' if value != 1 else ''}"
    return f"{size:.1f} {_DECIMAL_UNITS[unit]}" if size < 100 else f"{size:.0f} {_DECIMAL_UNITS[unit]}"
