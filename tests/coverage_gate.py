"""The coverage gate of `make test`: 95 % branch coverage on each pure module, from coverage.py's JSON report.

coverage.py's own `fail_under` judges one figure that mixes statements and branches over every measured
file; the gate here is on branches alone, and on each pure module (or package) by itself, so that a
well-tested module cannot carry an untested one. A pure module that is missing from the report (renamed,
or no longer imported by any test) fails the gate instead of leaving it.

    python -m tests.coverage_gate var/coverage.json
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

GATE = 95.0
PURE = (
    "packages_app/manifest/",
    "packages_app/audit/",
    "packages_app/gguf_header.py",
    "packages_app/gguf_parser.py",
    "packages_app/gguf_errors.py",
    "packages_app/gguf_fields.py",
    "packages_app/gguf_results.py",
    "packages_app/sketch.py",
    "packages_app/report_metrics.py",
    "packages_app/layout.py",
    "packages_app/verdicts.py",
    "packages_app/repo_ids.py",
    "packages_app/glossary.py",
    "packages_app/charts/",
    "packages_app/report_time.py",
    "packages_app/nodes/exposition.py",
    "packages_app/nodes/agent.py",
    "packages_app/nodes/agent_baseline.py",
    "packages_app/nodes/agent_common.py",
    "packages_app/nodes/agent_config.py",
    "packages_app/nodes/agent_observations.py",
    "packages_app/nodes/agent_runs.py",
    "packages_app/nodes/agent_spool.py",
    "packages_app/metrics.py",
    "packages_app/input_budget.py",
    "packages_app/nodes/report_schema.py",
    "packages_app/nodes/run_schema.py",
    "packages_app/nodes/otlp.py",
)
# Pure modules (tests/test_import_rules.py, LAYERS) not gated yet, each with why and its figure in the
# gated pass on 2026-12-06: tests/test_passes.py fails on a pure module in neither list, so a new one is gated
# the day it is written.
NOT_YET_GATED = {
    "packages_app/devhub/": "71.6 %: the imitation Hub, exercised end to end through huggingface_hub",
    "packages_app/devnode/": "67.9 %: the imitation node, exercised end to end by the agent and demo tests",
}
SHOWN_GAPS = 12


@dataclass
class Figures:
    name: str
    statements: int = 0
    covered_statements: int = 0
    branches: int = 0
    covered_branches: int = 0
    files: int = 0

    def add(self, summary: Mapping[str, int]) -> None:
        self.files += 1
        self.statements += summary["num_statements"]
        self.covered_statements += summary["covered_lines"]
        self.branches += summary["num_branches"]
        self.covered_branches += summary["covered_branches"]

    @property
    def branch_percent(self) -> float:
        return 100.0 * self.covered_branches / self.branches if self.branches else 100.0

    @property
    def line_percent(self) -> float:
        return 100.0 * self.covered_statements / self.statements if self.statements else 100.0

    def passes(self, gate: float) -> bool:
        return self.files > 0 and self.branch_percent >= gate


def measure(report: Mapping[str, Any], modules: Sequence[str] = PURE) -> list[Figures]:
    figures = [Figures(module) for module in modules]
    for path, data in report["files"].items():
        for figure in figures:
            if path == figure.name or (figure.name.endswith("/") and path.startswith(figure.name)):
                figure.add(data["summary"])
    return figures


def gaps(report: Mapping[str, Any], module: str) -> list[str]:
    """`file:from->to` for each branch no test took (a negative target is the function's exit)."""
    found = []
    for path, data in sorted(report["files"].items()):
        if path == module or (module.endswith("/") and path.startswith(module)):
            found += [f"{path}:{a}->{'exit' if b < 0 else b}" for a, b in data.get("missing_branches", [])]
    return found


def render(figures: Sequence[Figures], gate: float) -> list[str]:
    lines = [
        f"{'pure module':34} {'files':>5} {'branches':>9} {'branch %':>9} {'lines %':>8}  gate {gate:g} %"
    ]
    for f in figures:
        verdict = "pass" if f.passes(gate) else ("FAIL: not measured" if not f.files else "FAIL")
        branches = f"{f.covered_branches}/{f.branches}"
        row = (
            f"{f.name:34} {f.files:5} {branches:>9} {f.branch_percent:9.1f} {f.line_percent:8.1f}  {verdict}"
        )
        lines.append(row)
    return lines


def main(argv: Sequence[str]) -> int:
    report = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    figures = measure(report)
    print("\n".join(render(figures, GATE)))
    failing = [f for f in figures if not f.passes(GATE)]
    for f in failing:
        missed = gaps(report, f.name)
        more = f" (and {len(missed) - SHOWN_GAPS} more)" if len(missed) > SHOWN_GAPS else ""
        print(f"{f.name}: branches no test takes: {', '.join(missed[:SHOWN_GAPS])}{more}")
    return 1 if failing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
