"""Benchmark: what a hostile 16 MiB model-package.json costs the parser, next to a real-sized manifest.

Run from the repo root: ``.venv/bin/python bench/bench_manifest.py [--runs 5]``. Prints a markdown table:
median parse time of each body, its ratio to the real-sized manifest (the demo's 94-layer v2 package, built
here), and the tracemalloc peak. The tests check that each hostile body is refused with a code; this
measures that refusing it stays cheap.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from packages_app.layout import MAX_MANIFEST_BYTES  # noqa: E402
from packages_app.manifest import parse_manifest  # noqa: E402

HEX = "0123456789abcdef" * 4


def real_manifest(layers: int = 94) -> bytes:
    """A v2 manifest of the size of a large real package (one artifact per layer plus the shared files)."""
    entries = [
        {"id": f"layer-{i}", "path": f"layers/layer-{i:05d}.gguf", "byte_size": 1 << 30, "sha256": HEX}
        for i in range(layers)
    ]
    entries.append({"id": "metadata", "path": "shared/metadata.gguf", "byte_size": 1 << 24, "sha256": HEX})
    body = {
        "schema_version": 2,
        "package_id": "sha256:" + HEX,
        "model_id": "bench/model",
        "source_model": {
            "sha256": HEX,
            "metadata_artifact_id": "metadata",
            "primary_file": "model.gguf",
            "files": [{"path": "model.gguf", "byte_size": 1 << 36, "sha256": HEX}],
        },
        "format": "gguf",
        "layer_count": layers,
        "artifact_catalog": {"entries": entries},
        "native_abi_version": "0.1.53",
        "generator_version": "0.76.0-rc9",
        "created_at_unix_secs": 0,
    }
    return json.dumps(body, indent=2).encode()


BODIES: dict[str, Callable[[], bytes]] = {
    "real 94-layer v2 manifest": real_manifest,
    "16 MiB of empty arrays": lambda: b"[" + b"[]," * (MAX_MANIFEST_BYTES // 3 - 2) + b"1]",
    "16 MiB of integers": lambda: b"[" + b"1," * (MAX_MANIFEST_BYTES // 2 - 2) + b"1]",
    "16 MiB of floats": lambda: b"[" + b"1.5e100," * (MAX_MANIFEST_BYTES // 8 - 2) + b"1]",
    "nested to the depth limit + 1": lambda: b"[" * 10_000 + b"]" * 10_000,
    "over 16 MiB": lambda: b"{" + b" " * MAX_MANIFEST_BYTES + b"}",
}


def measure(body: bytes, runs: int) -> tuple[float, int, str]:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        result = parse_manifest(body)
        times.append(time.perf_counter() - started)
    tracemalloc.start()
    parse_manifest(body)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    codes = sorted({p.code for p in result.problems if p.severity == "error"})
    return statistics.median(times), peak, ", ".join(codes) or "valid"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    rows = [(name, len(body := make()), *measure(body, args.runs)) for name, make in BODIES.items()]
    baseline = rows[0][2]
    print("| body | bytes | median parse | x real manifest | tracemalloc peak | answer |")
    print("|---|---:|---:|---:|---:|---|")
    for name, size, seconds, peak, answer in rows:
        print(
            f"| {name} | {size:,} | {seconds * 1000:.1f} ms | {seconds / baseline:.1f}x | "
            f"{peak / 2**20:.1f} MiB | {answer} |"
        )


if __name__ == "__main__":
    main()
