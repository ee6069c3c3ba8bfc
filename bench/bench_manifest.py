"""Benchmark: judging a model-package.json (parse + mesh-llm's rules + package_id + resolver + releases)
against plain ``json.loads`` of the same bytes, side by side in one run, as a ratio.

Run from the repo root: ``.venv/bin/python bench/bench_manifest.py [--runs 5]``. Inputs: a realistic v2
manifest (94 layers, like Qwen3-235B), a large one (20,000 artifacts, ~3 MiB) and the 16 MiB hostile
bodies the parser must refuse without hanging. Prints a markdown table: median seconds of each and the
ratio check / json.loads.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from packages_app.audit.check import check_manifest  # noqa: E402
from packages_app.layout import MAX_MANIFEST_BYTES  # noqa: E402
from packages_app.manifest.identity import package_id_of  # noqa: E402

DIGEST = "0123456789abcdef" * 4


def v2_manifest(layers: int) -> bytes:
    entries = [{"id": "metadata", "path": "shared/metadata.gguf", "byte_size": 7_000_000, "sha256": DIGEST}]
    entries += [
        {"id": f"layer-{i:05d}", "path": f"layers/layer-{i:05d}.gguf", "byte_size": 1 << 30, "sha256": DIGEST}
        for i in range(layers)
    ]
    doc = {
        "schema_version": 2,
        "package_id": "",
        "model_id": "unsloth/Qwen3-235B-A22B-GGUF:UD-Q4_K_XL",
        "source_model": {
            "sha256": DIGEST,
            "metadata_artifact_id": "metadata",
            "repo": "unsloth/Qwen3-235B-A22B-GGUF",
            "revision": "a" * 40,
            "primary_file": "model.gguf",
            "files": [{"path": "model.gguf", "byte_size": 134_000_000_000, "sha256": DIGEST}],
        },
        "format": "gguf",
        "layer_count": layers,
        "artifact_catalog": {"entries": entries},
        "native_abi_version": "0.1.54",
        "generator_version": "0.76.1",
        "created_at_unix_secs": 1_790_000_000,
    }
    doc["package_id"] = package_id_of(doc)
    return json.dumps(doc).encode()


def median_seconds(work: Callable[[], object], runs: int) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        work()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    runs = parser.parse_args().runs
    inputs = {
        "v2, 94 layers": v2_manifest(94),
        "v2, 20,000 artifacts": v2_manifest(20_000),
        "16 MiB of []": b"[" + b"[]," * (MAX_MANIFEST_BYTES // 3 - 2) + b"1]",
        "16 MiB of integers": b"[" + b"1," * (MAX_MANIFEST_BYTES // 2 - 2) + b"1]",
    }
    print("| input | bytes | json.loads s | check_manifest s | ratio | valid |")
    print("|---|---|---|---|---|---|")
    for name, data in inputs.items():
        plain = median_seconds(lambda d=data: json.loads(d), runs)
        judged = median_seconds(lambda d=data: check_manifest(d), runs)
        valid = check_manifest(data).valid
        print(f"| {name} | {len(data):,} | {plain:.4f} | {judged:.4f} | {judged / plain:.1f} | {valid} |")


if __name__ == "__main__":
    main()
