"""The fleet shape: nodes in topologies, each serving 1 to 3 revisions in turn on a release that admits them,
the runs their agents registered, and what each operator's speculative.strategy setting runs there."""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from packages_app.models import NodeRun
from packages_app.seeding.rows import NOW, REPORT_SPAN, Latest

# mesh-llm releases the release matrix knows (audit.releases), weighted as a fleet mid-upgrade has them; the
# nodes on a build's label read as a release the matrix does not know (its build rows have no version).
FLEET_VERSIONS = [
    ("v0.78.0", 40),
    ("v0.76.2", 20),
    ("mesh-llm@00caec16", 15),
    ("v0.76.1", 10),
    ("mesh-llm@173b7cd6", 10),
    ("v0.72.1", 5),
]
# (backend device, VRAM bytes) as mesh-llm's selected_device names them.
FLEET_DEVICES = [("CUDA0", 24 * 2**30), ("CUDA0", 80 * 2**30), ("ROCm0", 64 * 2**30), ("Vulkan0", 16 * 2**30)]
# The operators' speculative.strategy settings (rules: the resolver), and how many of those who set one
# other than auto went back to auto within the span.
FLEET_SETTINGS = [("auto", 85), ("disabled", 7), ("ngram-cache", 5), ("ngram-suffix", 3)]
CHANGED_SETTING = 0.3
TOPOLOGY_SIZES = [1, 2, 2, 3, 3, 4]  # nodes a topology splits its package over
POPULAR_PACKAGES = 300  # the packages topologies choose from, a few of them far more often


class FleetSeeding(Protocol):
    """What the fleet's plan reads and sets on the seeder (seeding.seeder.Seeder)."""

    random: random.Random
    options: dict[str, Any]
    nodes: list[int]
    node_names: dict[int, str]
    versions: dict[int, str]
    devices: dict[int, tuple[str, int]]
    settings: dict[int, list[tuple[datetime, str]]]

    def release_on(self, node: int, revision: Latest) -> tuple[str, str | None]: ...


@dataclass(frozen=True)
class Segment:
    """What a topology served from ``start`` to ``end``: one revision, on one split."""

    revision: Latest
    splits: str
    ranges: tuple[tuple[int, int], ...]
    start: datetime
    end: datetime


@dataclass(frozen=True)
class FleetTopology:
    topology_id: str
    nodes: list[int]  # node ids, in stage order
    segments: list[Segment]

    def runs(self, seeder: FleetSeeding) -> Iterator[NodeRun]:
        """Each node's registered run of each segment: its release, the stages and who holds them."""
        for index, segment in enumerate(self.segments):
            stages = [
                self.stage(seeder, i, node, bounds)
                for i, (node, bounds) in enumerate(zip(self.nodes, segment.ranges, strict=True))
            ]
            for node, stage in zip(self.nodes, stages, strict=True):
                yield NodeRun(
                    node_id=node,
                    run_id=f"{self.topology_id}-run-{index}",
                    topology_id=self.topology_id,
                    model_id=segment.revision.repo_id.rsplit("/", 1)[-1],
                    package_ref=f"{segment.revision.repo_id}@main",
                    repo_id=segment.revision.repo_id,
                    commit_sha=segment.revision.commit_sha,
                    revision_id=segment.revision.id,
                    version=seeder.release_on(node, segment.revision)[0],
                    stage_splits=segment.splits,
                    stages=stages,
                    devices=[stage["raw"]["selected_device"]],
                    certification="certified",
                    first_seen_at=segment.start,
                    updated_at=segment.end,
                )

    @staticmethod
    def stage(seeder: FleetSeeding, index: int, node: int, bounds: tuple[int, int]) -> dict[str, Any]:
        device, vram = seeder.devices[node]
        return {
            "stage_id": f"stage-{index}",
            "stage_index": index,
            "node_id": seeder.node_names[node],
            "layer_start": bounds[0],
            "layer_end": bounds[1],
            "state": "serving",
            "device": device,
            "ctx_size": 8192,
            "lane_count": 1,
            "certification": "certified",
            "weight_quantization": "",
            "raw": {"selected_device": {"backend_device": device, "vram_bytes": vram}},
        }


class FleetPlan:
    """The fleet shape: every node in one topology; each topology serves 1 to 3 revisions in turn."""

    @staticmethod
    def make(seeder: FleetSeeding, revisions: dict[int, list[Latest]]) -> list[FleetTopology]:
        rng = seeder.random
        names, weights = zip(*FLEET_VERSIONS, strict=True)
        seeder.versions = {node: str(rng.choices(names, weights=weights)[0]) for node in seeder.nodes}
        seeder.devices = {node: rng.choice(FLEET_DEVICES) for node in seeder.nodes}
        seeder.settings = {node: FleetPlan.settings(rng) for node in seeder.nodes}
        packages = sorted(revisions)
        rng.shuffle(packages)
        popular = packages[:POPULAR_PACKAGES]
        topologies: list[FleetTopology] = []
        nodes = list(seeder.nodes)
        while nodes:
            size = min(rng.choice(TOPOLOGY_SIZES), len(nodes))
            members, nodes = nodes[:size], nodes[size:]
            served = FleetPlan.served(rng, popular, revisions)
            topology_id = f"{seeder.options['owner']}-topo-{len(topologies):03d}"
            topologies.append(FleetTopology(topology_id, members, FleetPlan.segments(rng, served, size)))
        rng.shuffle(topologies)  # which topologies are the busiest
        return topologies

    @staticmethod
    def settings(rng: random.Random) -> list[tuple[datetime, str]]:
        """A node's speculative.strategy setting over the span: one, or (CHANGED_SETTING of them) one
        until a moment, then auto."""
        names, weights = zip(*FLEET_SETTINGS, strict=True)
        first = str(rng.choices(names, weights=weights)[0])
        setting = [(NOW - REPORT_SPAN, first)]
        if first != "auto" and rng.random() < CHANGED_SETTING:
            setting.append((NOW - REPORT_SPAN * rng.uniform(0.1, 0.9), "auto"))
        return setting

    @staticmethod
    def served(rng: random.Random, popular: list[int], revisions: dict[int, list[Latest]]) -> list[Latest]:
        """The revisions a topology serves in turn: mostly an older revision then the latest, sometimes
        only one of them, sometimes another package's latest after."""
        ranks = [1 / (rank + 1) for rank in range(len(popular))]
        first, other = rng.choices(popular, weights=ranks, k=2)
        own = revisions[first]
        count = rng.choice([1, 2, 2, 3])
        if count == 1:
            # Most run the latest; some never moved off an older revision.
            return [own[-2] if len(own) > 1 and rng.random() < 0.3 else own[-1]]
        turns = own[-2:] if len(own) > 1 else own[-1:]
        turns = [*turns, revisions[other][-1]] if other != first else turns
        return turns[:count]

    @staticmethod
    def segments(rng: random.Random, served: list[Latest], size: int) -> list[Segment]:
        span = REPORT_SPAN.total_seconds()
        cuts = sorted(rng.uniform(0.1, 0.9) * span for _ in served[1:])
        starts = [0.0, *cuts]
        ends = [*cuts, span]
        result = []
        for revision, start, end in zip(served, starts, ends, strict=True):
            bounds = [round(revision.block_count * i / size) for i in range(size + 1)]
            ranges = tuple(itertools.pairwise(bounds))
            splits = "|".join(f"{a}..{b}" for a, b in ranges)
            at = NOW - REPORT_SPAN
            result.append(
                Segment(revision, splits, ranges, at + timedelta(seconds=start), at + timedelta(seconds=end))
            )
        return result


def admitting(revision: Latest) -> list[str]:
    """The releases, oldest first, whose admission the revision's stored assessment grants."""
    assessment = revision.assessment
    if assessment is None:
        return []
    return [s.release for s in assessment.servable if s.admitted]


def resolved(requested: str, revision: Latest, release: str | None) -> tuple[str, str, bool]:
    """(requested, effective strategy, MTP used) of a node set to ``requested`` serving ``revision`` on
    ``release`` (None: one the matrix does not know, run as the newest that admits it), as the revision's
    assessment predicts mesh-llm's resolver runs it (rules: auto runs native MTP only when the package's
    default strategy does; ngram-cache and ngram-suffix turn native MTP off). A setting whose load fails
    or is refused there cannot serve it: its operator turned speculative decoding off to load it."""
    where = release or admitting(revision)[-1]
    row = revision.assessment.outcome(where, requested) if revision.assessment else None
    outcome = row.outcome if row else "no-mtp"
    if outcome in ("load-fails", "refused"):
        return "disabled", "disabled", False
    if outcome == "native-mtp":
        return requested, "native-mtp", True
    return requested, requested if requested in ("ngram-cache", "ngram-suffix") else "disabled", False
