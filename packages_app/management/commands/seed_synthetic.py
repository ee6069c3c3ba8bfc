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
fails is turned off). Every fleet node answers at least one request on each day of the 30 when
``--reports`` holds them all (30 a node), so a fleet page's window holds the same nodes at 1M reports as
at 10M; the rest go Zipf-like over the topologies. The catalog shape's reports each pick a strategy at
random. ``--nodes N`` sizes the fleet (up to 10,000 and beyond: about 0.4 topologies a node,
TOPOLOGY_SIZES). Last, every node's kept judgement (packages_app.judgements) is written as at the newest
report, the benchmark's clock.
"""

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from packages_app.models import Package
from packages_app.seeding.seeder import Seeder


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
