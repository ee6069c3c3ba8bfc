"""Benchmark: `audit_package FOLDER` hashing (verify.hash_files) against hashlib.file_digest, and its memory.

Run from the repo root: ``.venv/bin/python bench/bench_verify.py [--gib 2] [--runs 3]``.
Writes one file of ``--gib`` GiB in a temp dir (8 MiB of random bytes, then a hole, so the disk holds
little and the page cache serves the rest), then hashes it ``--runs`` times per case, interleaved:
verify.hash_files with its progress bar drawn (to /dev/null), without a bar, and the standard
library's hashlib.file_digest as the baseline. Prints a markdown table: median seconds, MB/s and
the ratio to the baseline; then the peak-RSS growth of a fresh subprocess that hashes the file once.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from packages_app import verify  # noqa: E402

GiB = 1 << 30
MiB = 1 << 20

_CHILD = """
import resource, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from packages_app import verify
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
path = Path(sys.argv[2])
verify.hash_files(path.parent, [verify.Candidate(path.name, path.stat().st_size)], open("/dev/null", "w"))
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)
"""


def make_file(folder: Path, size: int) -> Path:
    path = folder / "layer-00000.gguf"
    with path.open("wb") as fh:
        fh.write(os.urandom(8 * MiB))
    os.truncate(path, size)
    return path


def cases(path: Path) -> dict[str, Callable[[], str]]:
    candidate = [verify.Candidate(path.name, path.stat().st_size)]
    devnull = open(os.devnull, "w")  # noqa: SIM115 - kept open for the whole run

    def with_bar() -> str:
        return verify.hash_files(path.parent, candidate, devnull).sha256[path.name]

    def without_bar() -> str:
        return verify.hash_files(path.parent, candidate).sha256[path.name]

    def baseline() -> str:
        with path.open("rb") as fh:
            return hashlib.file_digest(fh, "sha256").hexdigest()

    return {"verify.hash_files, bar drawn": with_bar, "verify.hash_files, no bar": without_bar,
            "hashlib.file_digest (baseline)": baseline}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=2.0)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = make_file(Path(tmp), int(args.gib * GiB))
        size = path.stat().st_size
        runs = cases(path)
        times: dict[str, list[float]] = {name: [] for name in runs}
        digests = set()
        for _ in range(args.runs):
            for name, run in runs.items():
                started = time.perf_counter()
                digests.add(run())
                times[name].append(time.perf_counter() - started)
        assert len(digests) == 1, "the cases disagree on the digest"
        base = statistics.median(times["hashlib.file_digest (baseline)"])
        print(f"file: {size / GiB:.1f} GiB, {args.runs} runs per case, interleaved\n")
        print("| case | median s | MB/s | time / baseline |")
        print("|---|---|---|---|")
        for name, values in times.items():
            median = statistics.median(values)
            print(f"| {name} | {median:.2f} | {size / median / 1e6:.0f} | {median / base:.3f} |")
        child = subprocess.run(
            [sys.executable, "-c", _CHILD, str(ROOT), str(path)], capture_output=True, text=True, check=True
        )
        growth_kib = int(child.stdout.strip())
        print(f"\npeak RSS growth while hashing {size / GiB:.1f} GiB once: {growth_kib / 1024:.1f} MiB")


if __name__ == "__main__":
    main()
