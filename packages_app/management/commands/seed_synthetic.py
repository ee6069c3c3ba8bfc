"""``manage.py seed_synthetic``: bulk-insert a large synthetic catalog and node reports, for scale benchmarks.

Rows are realistic in shape (audits as packages_app.audit writes them, per-layer files, reports spread over
weeks with a few very busy packages) but made up; every repo id lives under ``--owner`` so
``--reset`` can remove exactly them. Nothing is downloaded; no task is enqueued.

Two shapes of fleet: ``--shape catalog`` (the default) has 40 nodes that each report on nearly every
revision; ``--shape fleet`` has 1,000 nodes in a few hundred topologies (splits over 1 to 4 nodes),
each topology serving 1 to 3 revisions one after another over the 30 days (an older revision, then
the package's latest, sometimes another package), with the runs the nodes' agents registered
(``NodeRun``: mesh-llm release, stages, devices) as a real fleet has them. A fleet node serves a
revision only on a release that admits it (its own, else the newest that does: its operator moved it
there), and runs what its operator's ``speculative.strategy`` setting does there as the revision's
stored assessment predicts (most ``auto``; a few changed their setting once; a setting whose load
fails is turned off). The catalog shape's reports each pick a strategy at random. ``--nodes N`` sizes
the fleet (up to 10,000 and beyond: about 0.4 topologies a node, TOPOLOGY_SIZES). Last, every node's
kept judgement (packages_app.judgements) is written as at the newest report, the benchmark's clock.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import random
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field, fields, replace
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection, transaction
from django.db.models import Max, Model, OuterRef, Subquery, TextField
from django.db.models.functions import Cast

from packages_app import judgements, partitions, rollups
from packages_app.audit.assessment import Assessment, parse_stored
from packages_app.audit.assessment import synthetic as synthetic_assessment
from packages_app.audit.releases import known_releases, release_for
from packages_app.layout import FileRole
from packages_app.models import (
    LastServed,
    Node,
    NodeJudgement,
    NodeRollup,
    NodeRun,
    Package,
    PackageFile,
    Report,
    ReportKey,
    Revision,
    Rollup,
    Serving,
)
from packages_app.verdicts import Verdict

T = TypeVar("T", bound=Model)
# Reports span the 30 days before today's midnight (UTC), so the pages' recent windows, the hourly
# rollups and this month's partition see them as they would see a live fleet's.
NOW = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)


@dataclass(frozen=True)
class Latest:
    id: int
    block_count: int
    mtp_detected: bool
    repo_id: str
    commit_sha: str
    mtp_declared: bool = False
    # The fleet shape's: its stored assessment (what each release and setting does with it).
    assessment: Assessment | None = field(default=None, compare=False)


@dataclass(frozen=True)
class Profile:
    """A model family: architecture, trunk blocks, bytes per block, whether it ships an MTP block."""

    name: str
    architecture: str
    trunk: int
    block_bytes: int
    mtp: bool


PROFILES = [
    Profile("Qwen3.5-35B-A3B", "qwen35moe", 40, 480_000_000, True),
    Profile("Qwen3.8-27B", "qwen35", 64, 250_000_000, True),
    Profile("GLM-4.7-Flash", "deepseek2", 47, 380_000_000, True),
    Profile("NVIDIA-Nemotron-3-Super-120B-A12B", "nemotron_h_moe", 88, 760_000_000, True),
    Profile("DeepSeek-V3.2", "deepseek2", 61, 6_600_000_000, True),
    Profile("Qwen3-235B-A22B", "qwen3moe", 94, 1_420_000_000, False),
    Profile("Qwen3-30B-A3B-Thinking-2507", "qwen3moe", 48, 360_000_000, False),
    Profile("Llama-3.2-1B-Instruct", "llama", 16, 48_000_000, False),
    Profile("gemma-4-26B-A4B-it-qat", "gemma3", 30, 520_000_000, False),
]
QUANTS = ["UD-Q4_K_XL", "Q4_K_M", "UD-Q3_K_XL", "Q8_0", "UD-Q5_K_XL"]
# (verdict, weight) for packages whose weights hold MTP, and for those without.
MTP_VERDICTS = [
    (Verdict.CONSISTENT_MTP, 45),
    (Verdict.UNDECLARED_MTP, 40),
    (Verdict.DECLARATION_MISMATCH, 10),
    (Verdict.INVALID_MANIFEST, 5),
]
NO_MTP_VERDICTS = [
    (Verdict.CONSISTENT_NO_MTP, 90),
    (Verdict.DECLARED_WITHOUT_WEIGHTS, 7),
    (Verdict.INVALID_MANIFEST, 3),
]
STRATEGIES_ON = ["native-mtp", "native-mtp+ngram-cache", "native-mtp+ngram-suffix"]
STRATEGIES_OFF = ["disabled", "ngram-cache", "ngram-suffix"]


def digest(text: str, size: int = 64) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:size]


def batched(items: Iterator[T], size: int) -> Iterator[list[T]]:
    batch: list[T] = []
    for item in items:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


class Command(BaseCommand):
    help = "Bulk-insert synthetic packages, revisions, files, nodes and reports (for bench/bench_pages.py)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--packages", type=int, default=1000)
        parser.add_argument("--reports", type=int, default=100_000)
        parser.add_argument("--revisions", type=int, default=2, help="Revisions per package, at most.")
        parser.add_argument(
            "--shape",
            choices=("catalog", "fleet"),
            default="catalog",
            help="catalog: 40 nodes each reporting on nearly every revision; fleet: 1,000 nodes in a few "
            "hundred topologies, each serving 1 to 3 revisions over the 30 days, with registered runs.",
        )
        parser.add_argument("--nodes", type=int, default=None, help="40 (catalog) or 1,000 (fleet).")
        parser.add_argument("--owner", default="meshllm-synthetic", help="Namespace of every synthetic repo.")
        parser.add_argument("--batch", type=int, default=5000)
        parser.add_argument("--seed", type=int, default=1)
        parser.add_argument("--reset", action="store_true", help="Delete earlier synthetic rows first.")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["packages"] < 1 or options["reports"] < 0 or options["revisions"] < 1:
            raise CommandError("--packages and --revisions must be at least 1, --reports at least 0")
        if options["nodes"] is None:
            options["nodes"] = 1000 if options["shape"] == "fleet" else 40
        if options["nodes"] < 1:
            raise CommandError("--nodes must be at least 1")
        seeder = Seeder(options, self._progress)
        if options["reset"]:
            seeder.reset()
        elif Package.objects.filter(repo_id__startswith=seeder.prefix).exists():
            raise CommandError(f"Synthetic packages under {seeder.prefix} exist already; pass --reset.")
        seeder.run()

    def _progress(self, message: str) -> None:
        self.stdout.write(message)
        self.stdout.flush()


class Seeder:
    def __init__(self, options: dict[str, Any], say: Callable[[str], None]) -> None:
        self.options = options
        self.say = say
        self.random = random.Random(options["seed"])
        self.prefix = options["owner"] + "/"
        self.batch = options["batch"]
        self.audits: dict[tuple[Profile, str], dict[str, Any]] = {}
        self.assessments: dict[tuple[Profile, str, int], dict[str, Any]] = {}
        self.node_names: dict[int, str] = {}
        # The fleet shape: its topologies, each node's mesh-llm release, its device and its operator's
        # speculative.strategy setting (from when, oldest first).
        self.fleet: list[FleetTopology] = []
        self.versions: dict[int, str] = {}
        self.devices: dict[int, tuple[str, int]] = {}
        self.settings: dict[int, list[tuple[datetime, str]]] = {}

    def timed(self, label: str, action: Callable[[], int]) -> None:
        start = time.perf_counter()
        with transaction.atomic():
            if connection.vendor == "postgresql":
                # Synthetic rows can be re-made: no need to wait for each commit to reach the disk.
                with connection.cursor() as cursor:
                    cursor.execute("SET LOCAL synchronous_commit TO OFF")
            count = action()
        self.say(f"{label}: {count} rows in {time.perf_counter() - start:.1f}s")

    def reset(self) -> None:
        def delete() -> int:
            ids = Report.objects.filter(repo_id__startswith=self.prefix).values("id")
            NodeRun.objects.filter(repo_id__startswith=self.prefix).delete()
            ReportKey.objects.filter(id__in=ids).delete()
            reports, _ = Report.objects.filter(repo_id__startswith=self.prefix).delete()
            files, _ = PackageFile.objects.filter(revision__package__repo_id__startswith=self.prefix).delete()
            packages, _ = Package.objects.filter(repo_id__startswith=self.prefix).delete()
            return reports + files + packages

        self.timed("deleted earlier synthetic rows", delete)

    def run(self) -> None:
        self.timed("nodes", self.create_nodes)
        self.timed("packages", self.create_packages)
        self.timed("revisions", self.create_revisions)
        self.timed("latest revision links", self.link_latest)
        self.timed("files of latest revisions", self.create_files)
        if self.options["shape"] == "fleet":
            self.timed("registered runs", self.create_runs)
            self.timed("reports", self.create_fleet_reports)
        else:
            self.timed("reports", self.create_reports)
        self.timed("node judgements", self.judge_nodes)
        self.vacuum()

    def judge_nodes(self) -> int:
        """Every node's kept judgement (packages_app.judgements), as at the newest report (the benchmark's
        clock): the bulk loads above bypass the paths that keep them."""
        newest = Report.objects.aggregate(at=Max("received_at"))["at"]
        return judgements.rebuild(newest or NOW)

    def vacuum(self) -> None:
        if connection.vendor != "postgresql":
            return
        start = time.perf_counter()
        # Fresh statistics for the planner, and a visibility map so index-only scans work; VACUUM
        # cannot run inside a transaction (a caller's atomic block, or a test), ANALYZE can.
        command = "ANALYZE" if connection.in_atomic_block else "VACUUM ANALYZE"
        with connection.cursor() as cursor:
            filled = (Node, NodeRun, Package, Revision, PackageFile, Report, ReportKey)
            for model in (*filled, Rollup, NodeRollup, Serving, LastServed, NodeJudgement):
                cursor.execute(f"{command} {connection.ops.quote_name(model._meta.db_table)}")
        self.say(f"{command.lower()}: {time.perf_counter() - start:.1f}s")

    # --- nodes and packages -------------------------------------------------------------------

    def create_nodes(self) -> int:
        width = max(3, len(str(self.options["nodes"] - 1)))
        names = [f"{self.options['owner']}-node-{i:0{width}d}" for i in range(self.options["nodes"])]
        nodes = [Node(name=n, token_hash=digest(n), token_prefix=digest(n, 12)) for n in names]
        Node.objects.bulk_create(nodes, ignore_conflicts=True)
        found = dict(Node.objects.filter(name__in=names).values_list("name", "id"))
        self.nodes = [found[name] for name in names]
        self.node_names = {found[name]: name for name in names}
        return len(self.nodes)

    def create_packages(self) -> int:
        count = self.options["packages"]
        self.profiles = [PROFILES[i % len(PROFILES)] for i in range(count)]
        rows = (Package(repo_id=self.repo_id(i, p), private=False) for i, p in enumerate(self.profiles))
        for batch in batched(rows, self.batch):
            Package.objects.bulk_create(batch)
        self.packages = dict(
            Package.objects.filter(repo_id__startswith=self.prefix).values_list("repo_id", "id")
        )
        return len(self.packages)

    def repo_id(self, index: int, profile: Profile) -> str:
        quant = QUANTS[index // len(PROFILES) % len(QUANTS)]
        return f"{self.prefix}{profile.name}-{quant}-v{index:05d}-layers"

    # --- revisions ----------------------------------------------------------------------------

    def create_revisions(self) -> int:
        total = 0
        for batch in batched(self.revision_rows(), max(1, self.batch // 5)):
            Revision.objects.bulk_create(batch)
            total += len(batch)
        return total

    def revision_rows(self) -> Iterator[Revision]:
        for index, profile in enumerate(self.profiles):
            package_id = self.packages[self.repo_id(index, profile)]
            count = self.random.randint(1, self.options["revisions"])
            for age in range(count):
                yield self.revision_row(package_id, index, profile, age, latest=age == 0)

    def revision_row(self, package_id: int, index: int, profile: Profile, age: int, latest: bool) -> Revision:
        sha = digest(f"{index}-{age}", 40)
        status = self.status(latest)
        verdict = self.verdict(profile) if status == Revision.Status.DONE else ""
        blocks = profile.trunk + (1 if profile.mtp else 0)
        schema = 2 if index % 3 == 0 else 1
        assessment = self.assessment(profile, verdict, schema) if verdict else None
        return Revision(
            package_id=package_id,
            commit_sha=sha,
            committed_at=NOW - timedelta(days=age * 20 + self.random.randint(0, 19), minutes=index),
            title="Upload layer package" if age else "Republish layer package",
            status=status,
            error="HubUnavailable: 503 Service Unavailable after 5 tries" if status == "failed" else "",
            files_total=blocks + 3,
            files_done=blocks + 3 if status == "done" else self.random.randint(0, blocks),
            schema_version=schema,
            architecture=profile.architecture if verdict else "",
            block_count=blocks if verdict else None,
            nextn_predict_layers=(1 if profile.mtp else 0) if verdict else None,
            total_bytes=blocks * profile.block_bytes if verdict else 0,
            manifest_sha256=digest(f"manifest-{index}-{age}"),
            verdict=verdict,
            mtp_detected=profile.mtp if verdict else None,
            mtp_declared=self.declared(verdict, profile) if verdict else None,
            audit=self.audit(profile, verdict, sha) if verdict else None,
            headline=assessment["headline"]["status"] if assessment else "",
            assessment=assessment,
            manifest_json=self.manifest(profile, verdict) if verdict else None,
        )

    def status(self, latest: bool) -> str:
        roll = self.random.random()
        if not latest or roll > 0.03:
            return Revision.Status.DONE
        return [Revision.Status.QUEUED, Revision.Status.RUNNING, Revision.Status.FAILED][int(roll * 100)]

    def verdict(self, profile: Profile) -> str:
        choices = MTP_VERDICTS if profile.mtp else NO_MTP_VERDICTS
        names, weights = zip(*choices, strict=True)
        return str(self.random.choices(names, weights=weights, k=1)[0])

    @staticmethod
    def declared(verdict: str, profile: Profile) -> bool:
        return verdict in (
            Verdict.CONSISTENT_MTP,
            Verdict.DECLARED_WITHOUT_WEIGHTS,
            Verdict.DECLARATION_MISMATCH,
        )

    def audit(self, profile: Profile, verdict: str, sha: str) -> dict[str, Any]:
        template = self.audits.get((profile, verdict))
        if template is None:
            template = self.audits[(profile, verdict)] = build_audit(profile, verdict)
        # Shares the nested template; only the revision differs per row.
        return {**template, "provenance": {**template["provenance"], "revision": sha}}

    def assessment(self, profile: Profile, verdict: str, schema: int) -> dict[str, Any]:
        """The real shape and size of an assessment (every release, every setting), shared per kind."""
        key = (profile, verdict, schema)
        if key not in self.assessments:
            blocks = (profile.trunk,) if profile.mtp else ()
            releases = [r.release for r in known_releases()]
            made = synthetic_assessment(Verdict(verdict), schema, releases, blocks)
            self.assessments[key] = made.to_json()
        return self.assessments[key]

    def manifest(self, profile: Profile, verdict: str) -> dict[str, Any]:
        blocks = profile.trunk + (1 if profile.mtp else 0)
        manifest: dict[str, Any] = {
            "schema_version": 1,
            "model_id": f"unsloth/{profile.name}-GGUF:UD-Q4_K_XL",
            "format": "layer-package",
            "layer_count": blocks,
            "layers": [
                {"layer_index": i, "path": layer_path(i), "sha256": digest(f"l{i}")} for i in range(blocks)
            ],
        }
        if self.declared(verdict, profile):
            manifest["generation"] = {"speculative_decoding": {"default": "mtp"}}
        return manifest

    def link_latest(self) -> int:
        newest = (
            Revision.objects.filter(package=OuterRef("pk")).order_by("-committed_at", "-id").values("id")[:1]
        )
        packages = Package.objects.filter(repo_id__startswith=self.prefix)
        return packages.update(latest_revision=Subquery(newest))

    # --- files and reports --------------------------------------------------------------------

    def latest_revisions(self) -> list[Latest]:
        rows = Revision.objects.filter(
            package__repo_id__startswith=self.prefix, id__in=Package.objects.values("latest_revision_id")
        ).exclude(block_count=None)
        fields = ("id", "block_count", "mtp_detected", "package__repo_id", "commit_sha")
        return [Latest(*row) for row in rows.values_list(*fields).order_by("id")]

    def create_files(self) -> int:
        total = 0
        rows = (f for latest in self.latest_revisions() for f in file_rows(latest.id, latest.block_count))
        for batch in batched(rows, self.batch):
            PackageFile.objects.bulk_create(batch)
            total += len(batch)
        return total

    def create_reports(self) -> int:
        """Reports revision by revision (Zipf-like: a few packages get most of the traffic, as on a real
        mesh), streamed into the table by COPY on PostgreSQL, then their keys and rollups."""
        latest = self.latest_revisions()
        if not latest or not self.options["reports"]:
            return 0
        self.random.shuffle(latest)
        counts = zipf_counts(self.options["reports"], len(latest))
        if partitions.is_partitioned():
            partitions.create_months(NOW - REPORT_SPAN, NOW)
        self.next_id = reserve_report_ids(sum(counts))
        first_id = self.next_id
        loader = CopyLoader() if connection.vendor == "postgresql" else BulkLoader(self.batch)
        with loader:
            for revision, count in zip(latest, counts, strict=True):
                for _ in range(count):
                    loader.add(self.report_row(revision))
        add_report_keys(first_id, self.next_id)
        register_reporting_runs(first_id, self.next_id)
        # The rollups as rebuild_rollups makes them (in SQL on PostgreSQL): the cells the store paths
        # would have written report by report.
        rollups.rebuild([revision.id for revision, count in zip(latest, counts, strict=True) if count])
        return loader.total

    # --- the fleet shape: topologies, their runs and reports -------------------------------------

    def create_runs(self) -> int:
        """Plan the fleet (topologies, what each served when) and store the runs its agents registered."""
        self.fleet = FleetPlan.make(self, self.servable_revisions())
        runs = [run for topology in self.fleet for run in topology.runs(self)]
        for batch in batched(iter(runs), self.batch):
            NodeRun.objects.bulk_create(batch)
        # Registration times as the agents sent them (bulk_create stamps auto_now fields with now).
        stored = list(NodeRun.objects.filter(repo_id__startswith=self.prefix).only("id", "node_id", "run_id"))
        times = {(run.node_id, run.run_id): (run.first_seen_at, run.updated_at) for run in runs}
        for run in stored:
            run.first_seen_at, run.updated_at = times[(run.node_id, run.run_id)]
        NodeRun.objects.bulk_update(stored, ["first_seen_at", "updated_at"], batch_size=self.batch)
        last_seen = [Node(pk=node, last_seen_at=at) for node, at in self.fleet_last_seen().items()]
        Node.objects.bulk_update(last_seen, ["last_seen_at"], batch_size=self.batch)
        return len(runs)

    def servable_revisions(self) -> dict[int, list[Latest]]:
        """Per package, its audited revisions that some release admits, oldest first (the latest last);
        packages without one are left out (no node can load them)."""
        rows = Revision.objects.filter(package__repo_id__startswith=self.prefix).exclude(block_count=None)
        fields = (
            *("id", "block_count", "mtp_detected", "package__repo_id", "commit_sha", "mtp_declared"),
            "package_id",
        )
        rows = rows.annotate(assessment_text=Cast("assessment", TextField()))
        by_package: dict[int, list[Latest]] = {}
        for *named, package_id, text in rows.order_by("committed_at", "id").values_list(
            *fields, "assessment_text"
        ):
            latest = replace(Latest(*named), assessment=parse_stored(text))
            if admitting(latest):
                by_package.setdefault(package_id, []).append(latest)
        return by_package

    def release_on(self, node: int, revision: Latest) -> tuple[str, str | None]:
        """The node's mesh-llm version while it serves ``revision``, and the release the matrix names it:
        its own when that admits the revision or the matrix does not know it (it predicts nothing
        there), else the newest release that admits it."""
        version = self.versions[node]
        release = release_for(version)
        admitted = admitting(revision)
        if release is None or release in admitted:
            return version, release
        return admitted[-1], admitted[-1]

    def fleet_last_seen(self) -> dict[int, datetime]:
        seen: dict[int, datetime] = {}
        for topology in self.fleet:
            for node in topology.nodes:
                seen[node] = max(seen.get(node, topology.segments[-1].end), topology.segments[-1].end)
        return seen

    def create_fleet_reports(self) -> int:
        """Reports of each topology (Zipf-like over topologies), each from one of its nodes, on the
        revision it served at the time, with its split and id; then their keys and rollups."""
        total = self.options["reports"]
        if not total:
            return 0
        if partitions.is_partitioned():
            partitions.create_months(NOW - REPORT_SPAN, NOW)
        self.next_id = reserve_report_ids(total)
        first_id = self.next_id
        loader = CopyLoader() if connection.vendor == "postgresql" else BulkLoader(self.batch)
        with loader:
            for topology, count in zip(self.fleet, zipf_counts(total, len(self.fleet)), strict=True):
                for _ in range(count):
                    loader.add(self.fleet_report_row(topology))
        add_report_keys(first_id, self.next_id)
        served = sorted({segment.revision.id for topology in self.fleet for segment in topology.segments})
        rollups.rebuild(served)
        return loader.total

    def fleet_report_row(self, topology: FleetTopology) -> SyntheticReport:
        start, end = topology.segments[0].start, topology.segments[-1].end
        at = start + timedelta(seconds=self.random.uniform(0, (end - start).total_seconds()))
        segment = next(s for s in topology.segments if at <= s.end)
        node = self.random.choice(topology.nodes)
        requested = next(value for since, value in reversed(self.settings[node]) if since <= at)
        _version, release = self.release_on(node, segment.revision)
        row = self.report_row(segment.revision, at, ran=resolved(requested, segment.revision, release))
        row.node_id = node
        row.stage_splits = segment.splits
        row.topology_id = topology.topology_id
        return row

    def report_row(
        self, revision: Latest, at: datetime | None = None, ran: tuple[str, str, bool] | None = None
    ) -> SyntheticReport:
        """A report on ``revision``, with the (requested, effective strategy, MTP used) it ``ran``, or
        (the catalog shape) a strategy picked at random."""
        if ran is None:
            mtp_used = bool(revision.mtp_detected) and self.random.random() < 0.6
            requested, strategy = "auto", self.random.choice(STRATEGIES_ON if mtp_used else STRATEGIES_OFF)
        else:
            requested, strategy, mtp_used = ran
        tps = self.random.gauss(9.5 if mtp_used else 3.2, 0.6)
        proposed = self.random.randint(50, 200) if mtp_used else 0
        if at is None:
            at = NOW - timedelta(seconds=self.random.randint(0, int(REPORT_SPAN.total_seconds())))
        self.next_id += 1
        return SyntheticReport(
            id=self.next_id - 1,
            node_id=self.random.choice(self.nodes),
            report_id=uuid.UUID(int=self.random.getrandbits(128)),
            received_at=at,
            observed_at=at,
            repo_id=revision.repo_id,
            commit_sha=revision.commit_sha,
            revision_id=revision.id,
            stage_splits=self.random.choice(["0..27|27..41", "0..41", "0..20|20..41"]),
            requested_strategy=requested,
            effective_strategy=strategy,
            mtp_source="Integrated" if mtp_used else "Disabled",
            predicted_per_second=max(0.1, tps),
            prompt_per_second=self.random.uniform(200, 900),
            predicted_n=self.random.randint(64, 1024),
            speculative_proposed_n=proposed,
            speculative_accepted_n=int(proposed * self.random.uniform(0.5, 0.8)),
            speculative_windows=proposed,
            mtp_used=mtp_used,
            body=f'{{"timings": {{"predicted_per_second": {round(tps, 3)}}}}}',
        )


@dataclass(slots=True)
class SyntheticReport:
    """A Report row as plain values (its fields are Report's column names), cheap to make by millions."""

    id: int
    node_id: int
    report_id: uuid.UUID
    received_at: datetime
    observed_at: datetime
    repo_id: str
    commit_sha: str
    revision_id: int
    stage_splits: str
    effective_strategy: str
    mtp_source: str
    predicted_per_second: float
    prompt_per_second: float
    predicted_n: int
    speculative_proposed_n: int
    speculative_accepted_n: int
    speculative_windows: int
    mtp_used: bool
    body: str
    body_sha256: str = "0" * 64
    clock_skew_seconds: float = 0.0
    clock_skew_flagged: bool = False
    manifest_sha256: str = ""
    topology_id: str = "two-node"
    requested_strategy: str = "auto"
    draft_n: int | None = None
    draft_n_accepted: int | None = None
    timings_flagged: str = "[]"
    source: str = "report"
    run_id: str = ""
    stage_id: str = ""


REPORT_COLUMNS = tuple(f.name for f in fields(SyntheticReport))

# mesh-llm releases the release matrix knows (audit.releases), weighted as a fleet mid-upgrade has them.
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

    def runs(self, seeder: Seeder) -> Iterator[NodeRun]:
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
    def stage(seeder: Seeder, index: int, node: int, bounds: tuple[int, int]) -> dict[str, Any]:
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
    def make(seeder: Seeder, revisions: dict[int, list[Latest]]) -> list[FleetTopology]:
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


class BulkLoader:
    """Reports by bulk_create, in batches."""

    def __init__(self, chunk: int) -> None:
        self.chunk = chunk
        self.rows: list[SyntheticReport] = []
        self.total = 0

    def __enter__(self) -> BulkLoader:
        return self

    def __exit__(self, *exc: object) -> None:
        if exc[0] is None:
            self.flush()

    def add(self, row: SyntheticReport) -> None:
        self.rows.append(row)
        if len(self.rows) >= self.chunk:
            self.flush()

    def flush(self) -> None:
        Report.objects.bulk_create([Report(**_report_fields(row)) for row in self.rows])
        self.total += len(self.rows)
        self.rows = []


class CopyLoader:
    """PostgreSQL: reports streamed into the table by COPY as they are made."""

    def __init__(self) -> None:
        self.total = 0
        self.stack = ExitStack()

    def __enter__(self) -> CopyLoader:
        cursor = self.stack.enter_context(connection.cursor())
        reports = f"COPY {Report._meta.db_table} ({', '.join(REPORT_COLUMNS)}) FROM STDIN"
        self.copy = self.stack.enter_context(cursor.cursor.copy(reports))
        return self

    def __exit__(self, *exc: object) -> None:
        self.stack.__exit__(*exc)  # type: ignore[arg-type]

    def add(self, row: SyntheticReport) -> None:
        self.copy.write_row([getattr(row, name) for name in REPORT_COLUMNS])
        self.total += 1


REPORT_SPAN = timedelta(days=30)


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


def reserve_report_ids(count: int) -> int:
    """The first of ``count`` consecutive report (and report key) ids no writer will take."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_get_serial_sequence(%s, 'id')", [ReportKey._meta.db_table])
            (sequence,) = cursor.fetchone()
            cursor.execute("SELECT nextval(%s)", [sequence])
            (first,) = cursor.fetchone()
            cursor.execute("SELECT setval(%s, %s)", [sequence, first + max(count, 1) - 1])
        return int(first)
    last = ReportKey.objects.order_by("-id").values_list("id", flat=True).first() or 0
    return last + 1


def register_reporting_runs(first_id: int, next_id: int) -> int:
    """A run for each (node, revision) the seeded reports name, as their agents would have registered
    it, so the reports count in the public figures (rollups.registered_pairs); returns how many."""
    pairs = (
        Report.objects.filter(id__gte=first_id, id__lt=next_id)
        .values_list("node_id", "revision_id", "repo_id", "commit_sha")
        .distinct()
        .order_by()
    )
    runs = [
        NodeRun(
            node_id=node, run_id=f"seed-{node}-{revision}", revision_id=revision, repo_id=repo, commit_sha=sha
        )
        for node, revision, repo, sha in pairs
    ]
    NodeRun.objects.bulk_create(runs, ignore_conflicts=True)
    return len(runs)


def add_report_keys(first_id: int, end_id: int) -> None:
    """The exactly-once keys of the reports just made (ids first_id to end_id - 1), from their rows."""
    columns = "id, node_id, report_id, body_sha256, received_at"
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {ReportKey._meta.db_table} ({columns}) SELECT {columns}"  # noqa: S608
            f" FROM {Report._meta.db_table} WHERE id >= %s AND id < %s",
            [first_id, end_id],
        )


def _report_fields(row: SyntheticReport) -> dict[str, Any]:
    values = {name: getattr(row, name) for name in REPORT_COLUMNS}
    values["body"] = json.loads(row.body)
    values["timings_flagged"] = []
    return values


def zipf_counts(total: int, ranks: int) -> list[int]:
    """``total`` split over ``ranks`` in proportion to 1 / rank**1.1, adding up exactly."""
    weights = [1 / (rank + 1) ** 1.1 for rank in range(ranks)]
    scale = total / sum(weights)
    counts = [int(weight * scale) for weight in weights]
    for rank in range(total - sum(counts)):
        counts[rank % ranks] += 1
    return counts


def layer_path(index: int) -> str:
    return f"layers/layer-{index:05d}.gguf"


def file_rows(revision_id: int, blocks: int) -> Iterator[PackageFile]:
    for i in range(blocks):
        yield PackageFile(
            revision_id=revision_id,
            path=layer_path(i),
            role=FileRole.LAYER,
            layer_index=i,
            size=500_000_000,
            lfs_sha256=digest(f"l{i}"),
            header_status=PackageFile.HeaderStatus.PARSED,
            header_bytes=65_536,
            tensor_count=19,
        )
    for path, role in (("shared/metadata.gguf", "metadata"), ("shared/common.gguf", "common")):
        yield PackageFile(
            revision_id=revision_id, path=path, role=role, size=1_000_000, header_status="parsed"
        )
    yield PackageFile(revision_id=revision_id, path="model-package.json", role="manifest", size=20_000)


def build_audit(profile: Profile, verdict: str) -> dict[str, Any]:
    """An audit dict in packages_app.audit's shape for a synthetic package of ``profile``."""
    blocks = profile.trunk + (1 if profile.mtp else 0)
    mtp_blocks = [profile.trunk] if profile.mtp else []
    declared = Seeder.declared(verdict, profile)
    return {
        "verdict": verdict,
        "detected": {
            "architecture": profile.architecture,
            "block_count": blocks,
            "nextn_predict_layers": len(mtp_blocks),
            "mtp_blocks": mtp_blocks,
            "has_mtp_weights": profile.mtp,
            "key_and_tensors_agree": True,
            "expected_nextn_tensors": ["eh_proj", "enorm", "hnorm", "shared_head_norm"]
            if profile.mtp
            else [],
            "missing_nextn_tensors": {},
            "blocks": [_block(i, profile, i in mtp_blocks) for i in range(blocks)],
        },
        "declared": {
            "present": declared,
            "default_strategy": "mtp" if declared else None,
            "uses_native_mtp": declared,
            "layer_indices": mtp_blocks if declared else [],
            "prediction_depth": 1 if declared else None,
            "strategies": {"mtp": "native-mtp"} if declared else {},
        },
        "problems": _problems(verdict),
        "provenance": {
            "revision": "",
            "manifest_sha256": digest(profile.name),
            "source_model_path": f"/source/{profile.name}.gguf",
            "build_host_path": True,
            "files": [_provenance(i) for i in range(blocks)],
        },
        "runtime": {
            "auto": {"outcome": "native-mtp" if declared and profile.mtp else "no-mtp", "why": "Synthetic."},
            "mtp": {"outcome": "native-mtp" if declared and profile.mtp else "refused", "why": "Synthetic."},
        },
        "suggested_generation": None,
    }


def _block(index: int, profile: Profile, mtp: bool) -> dict[str, Any]:
    kinds = ["attention", "moe"] if index % 4 == 3 else ["ssm", "moe"]
    return {
        "index": index,
        "file": layer_path(index),
        "tensor_count": 20 if mtp else 19,
        "bytes": profile.block_bytes,
        "kinds": [*kinds, "nextn"] if mtp else kinds,
        "mtp": mtp,
    }


def _provenance(index: int) -> dict[str, Any]:
    sha = digest(f"l{index}")
    return {
        "path": layer_path(index),
        "role": "layer",
        "manifest_size": 500_000_000,
        "manifest_sha256": sha,
        "hub_size": 500_000_000,
        "hub_sha256": sha,
        "status": "match",
    }


def _problems(verdict: str) -> list[dict[str, Any]]:
    if verdict.startswith("consistent"):
        return []
    code = verdict.replace("-", "_")
    return [{"code": code, "severity": "error", "message": f"Synthetic {verdict} finding.", "evidence": {}}]
