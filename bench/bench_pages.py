"""Server time of the dashboard's pages at scale: median and p95 of N in-process requests per page.

Seed first (PostgreSQL is what the target is about), one database per seed shape, then measure both in
one run (each in its own process, one after the other; one table with a column per shape):

    createdb -h 127.0.0.1 -U postgres meshdash_bench_pages
    createdb -h 127.0.0.1 -U postgres meshdash_bench_fleet
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/meshdash_bench_pages .venv/bin/python manage.py migrate
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/meshdash_bench_pages \
        .venv/bin/python manage.py seed_synthetic --packages 10000 --reports 10000000
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/meshdash_bench_fleet .venv/bin/python manage.py migrate
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/meshdash_bench_fleet \
        .venv/bin/python manage.py seed_synthetic --shape fleet --packages 10000 --revisions 3 \
        --reports 10000000
    .venv/bin/python bench/bench_pages.py --requests 20 --cold \
        --database catalog=postgres://postgres@127.0.0.1:5432/meshdash_bench_pages \
        --database fleet=postgres://postgres@127.0.0.1:5432/meshdash_bench_fleet

Without ``--database`` it measures DATABASE_URL alone. It uses Django's test Client (no network, no
web server), so the figures are view + ORM + template time.

Absolute times on these shared machines move 3x from one machine to the next, so every target is a ratio
measured in one run (issue 43):

- the floor: every shape also measures a template-only page (``/glossary/``, FLOOR_URL) in the same
  round-robin; each page's median is printed over the floor's, and must be at most FLOOR_TARGET (20x);
- the busiest package's page (and API) over the small one's (the package with reports nearest 14) at
  most BUSIEST_TARGET (2x); a shape where no package has reports has no such ratio;
- ``--compare A:B:LIMIT`` (repeatable): each page of shape B against the same page of shape A, as
  (B's median / B's floor) over (A's median / A's floor), at most LIMIT: e.g. ``reports-1m:reports-10m:1.15``
  and ``nodes-1k:nodes-10k:1.5``. Dividing by each run's own floor takes out the machine's drift
  between the two shapes' processes (the raw ratio is printed beside it).

Exit status 1 when a page does not answer 200 or any ratio is over its target.

The fleet pages (/nodes/ and its second page, the busiest node's page, the page of the topology the most
nodes served, the catalog's served revisions and the before/after comparison of the package the most
nodes ran) show what nodes reported in the last 7 days. The fleet seed's every node reports on each day
when the total holds it (30 reports a node), so those pages list the same nodes and rows at 1M reports as
at 10M, and ``--compare`` of the two measures the reports' cost, not other rows. Seeded reports end at
the seed's NOW (the midnight UTC before it ran), so those pages are measured with the clock set to the
newest report (``--fleet-clock newest``, the default); ``--fleet-clock now`` measures them at the real
time, which on the day of the seed is nearly the same window. Their windows then start at midnight, so
the nodes pages read whole days only; with ``--fleet-clock noon`` (12 hours before the newest report) the
window's first day is split at noon, the most hour cells those pages read (fleet.window.window_terms).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
# Production-like: DEBUG off (no query log kept in memory); values only for this in-process run.
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "meshdash.settings")
os.environ.setdefault("DEBUG", "false")
os.environ.setdefault("SECRET_KEY", "bench-pages-only")
os.environ.setdefault("ALLOWED_HOSTS", "testserver")


def setup_django() -> None:
    import django
    from django.conf import settings

    django.setup()
    from meshdash.startup import settle

    settle()  # as meshdash/wsgi.py does once Django is set up
    # Plain storage: {% static %} must not need a collectstatic manifest for an in-process benchmark.
    settings.STORAGES = {
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    }


def pick_packages(owner: str) -> dict[str, tuple[str, str]]:  # label -> (repo id, detail)
    """The busiest package (most reports), the busiest with MTP weights, the one whose unused-MTP alert
    spans the most nodes, one at the median, the one with reports nearest 14 (the baseline the busiest must
    stay within 2x of), and one no node reported on. Counted from the rollups (a Count over 10^7 reports
    would take a while)."""
    from django.db.models import Count, F, Q, Sum
    from django.db.models.functions import Coalesce

    from packages_app.models import Package, Rollup

    packages = Package.objects.filter(repo_id__startswith=owner + "/", latest_revision__verdict__gt="")
    totals = Q(latest_revision__rollups__grain="total", latest_revision__rollups__node_key=0)
    ranked = list(
        packages.annotate(n=Coalesce(Sum("latest_revision__rollups__reports", filter=totals), 0))
        .order_by("-n", "repo_id")
        .values_list("repo_id", "n", "latest_revision__mtp_detected")
    )
    if not ranked:
        sys.exit(f"No synthetic packages under {owner}/: run manage.py seed_synthetic first.")
    quiet = next((repo for repo, n, _ in reversed(ranked) if n == 0), ranked[-1][0])
    # With MTP weights the page also counts the unused-MTP alert's reports and nodes.
    mtp = next((row for row in ranked if row[2]), ranked[0])
    # The small package has reports (a page with its throughput section), the nearest SMALL among them: on
    # a seed whose smallest reported package has more than twice SMALL, the nearest was one with none.
    reported = [row for row in ranked if row[1] > 0] or ranked
    small = min(reported, key=lambda row: (abs(row[1] - SMALL), row[0]))
    middle = ranked[len(ranked) // 2]
    # The alert names its nodes: the latest revision with MTP weights whose reports show it unused on the
    # most nodes (else the busiest with MTP).
    alerted = (
        Rollup.objects.filter(
            grain=Rollup.Grain.TOTAL,
            node_key__gt=Rollup.ALL_NODES,
            unused__gt=0,
            revision__mtp_detected=True,
            revision__package__in=packages,
            revision__package__latest_revision=F("revision"),
        )
        .values_list("revision__package__repo_id")
        .annotate(nodes=Count("node_key", distinct=True))
        .order_by("-nodes", "revision__package__repo_id")
        .first()
    )
    widest = (alerted[0], f"{alerted[1]} nodes with MTP unused") if alerted else (mtp[0], "no alert")
    return {
        "busiest": (ranked[0][0], f"{ranked[0][1]} reports"),
        "busiest with MTP": (mtp[0], f"{mtp[1]} reports"),
        "widest alert": widest,
        "median": (middle[0], f"{middle[1]} reports"),
        "small": (small[0], f"{small[1]} reports"),
        "no reports": (quiet, "0 reports"),
    }


SMALL = 14  # reports of the package the busiest is compared with
BUSIEST_TARGET = 2.0  # the busiest package's page over the small one's
FLOOR_URL = "/glossary/"  # a page that renders a template and reads nothing that grows: the floor
FLOOR = "floor: /glossary/ (template only)"
FLOOR_TARGET = 20.0  # every page's median over the floor's, in the same run
COMPARE = "compare page, package of 2+ revisions on the most nodes"
TOPOLOGY = "topology page, topology of the most nodes"


Pages = dict[str, tuple[str, str]]  # label (the same in every shape) -> (url, what it names in this one)


def pages(owner: str) -> tuple[Pages, int]:
    """The catalog and package pages, and how many reports the small package has."""
    urls = {
        "catalog /": "/",
        "catalog any inconsistent": "/?verdict=inconsistent",
        "catalog search + sort by size": "/?q=Qwen3.5&sort=-size",
        "catalog MTP detected, not declared": "/?mtp_detected=yes&mtp_declared=no&sort=-updated",
        "catalog throughput alerts": "/?alert=on",
        "catalog page 100": "/?page=100",
        "api list": "/api/v1/packages?per_page=50",
    }
    found = {FLOOR: (FLOOR_URL, ""), **{label: (url, "") for label, url in urls.items()}}
    picked = pick_packages(owner)
    busiest = picked["busiest"][0]
    found["catalog row of the busiest package"] = (f"/?q={busiest.split('/', 1)[1]}", "")
    for label, (repo_id, detail) in picked.items():
        found[f"package page, {label}"] = (f"/packages/{repo_id}/", detail)
        found[f"api package, {label}"] = (f"/api/v1/packages/{repo_id}", detail)
    return found, int(picked["small"][1].split()[0])


def fleet_pages() -> Pages:
    """/nodes/, its second page and its nodes needing action, the node with the most reports and the
    topology of the most nodes (from the Serving rows, never the reports), the catalog's served revisions
    and the comparison of the package the most nodes ran."""
    from django.db.models import Count, Sum

    from packages_app.models import Package, Revision, Serving

    urls: Pages = {
        "nodes": ("/nodes/", ""),
        "nodes, second page": ("/nodes/?page=2", ""),
        "nodes needing action": ("/nodes/?action=1", ""),
        "catalog /, served revisions in the window": ("/", ""),
    }
    node = (
        Serving.objects.exclude(node_key=0)
        .values("node_key")
        .annotate(n=Sum("reports"))
        .order_by("-n")
        .values_list("node_key", "n")
        .first()
    )
    if node is not None:
        from packages_app.models import Node

        name = Node.objects.get(pk=node[0]).name
        urls["node page, busiest node"] = (f"/nodes/{name}/", f"{name}, {node[1]} reports")
    # The topology the most nodes served, then the busiest of those: the seed makes the same topologies
    # whatever its report count, so the 1M and 10M report databases of one fleet compare one topology's page
    # (by reports alone each picked another, of another model: its audit and layout twice the size).
    topology = (
        Serving.objects.exclude(node_key=0)
        .exclude(topology_id="")
        .values("topology_id")
        .annotate(nodes=Count("node_key", distinct=True), n=Sum("reports"))
        .order_by("-nodes", "-n", "topology_id")
        .values_list("topology_id", "nodes", "n")
        .first()
    )
    if topology is not None:
        urls[TOPOLOGY] = (
            f"/topologies/{topology[0]}/",
            f"{topology[0]}, {topology[1]} nodes, {topology[2]} reports",
        )
    # The package of 2+ revisions that nodes reported on and the most nodes registered runs of: the seed
    # makes the same runs whatever its report count, so the 1M and 10M report databases of one fleet
    # compare one package's page (by reports, each picked another: not the same page).
    several = Revision.objects.values("package_id").annotate(c=Count("id")).filter(c__gt=1).order_by()
    reported = Serving.objects.filter(node_key=0).values("revision__package_id")
    widest = (
        Package.objects.filter(pk__in=several.values("package_id"))
        .filter(pk__in=reported)
        .annotate(n=Count("revisions__node_runs__node", distinct=True))
        .order_by("-n", "repo_id")
        .values_list("repo_id", "n")
        .first()
    )
    if widest is not None:
        urls[COMPARE] = (f"/packages/{widest[0]}/compare", f"{widest[0]}, {widest[1]} nodes")
    return urls


def newest_report() -> Any:
    """When the newest report arrived (from the total rollups: no scan of the reports)."""
    from django.db.models import Max

    from packages_app.models import Rollup

    return Rollup.objects.filter(grain="total", node_key=0).aggregate(at=Max("last_at"))["at"]


def measure_fleet(client: Any, requests: int, cold: bool, clock: str) -> dict[str, dict[str, Any]]:
    """The fleet pages, with django.utils.timezone.now at the newest report, 12 hours before it
    (``clock == "noon"``) or left alone (``"now"``)."""
    from datetime import timedelta
    from unittest import mock

    at = {"newest": newest_report(), "noon": newest_report() - timedelta(hours=12)}.get(clock)
    urls = {FLOOR: (FLOOR_URL, ""), **fleet_pages()}  # the floor again, measured beside these pages
    if at is None:
        return measure_all(client, urls, requests, cold)
    with mock.patch("django.utils.timezone.now", return_value=at):
        return measure_all(client, urls, requests, cold)


def measure_all(client: Any, urls: Pages, requests: int, cold: bool) -> dict[str, dict[str, Any]]:
    """Every page ``requests`` times, round-robin (page 1, page 2, ..., page 1, ...): a burst of load
    from elsewhere on the machine falls on every page alike, so the ratios within a run hold."""
    from django.core.cache import cache

    first = {label: first_request(client, url) for label, (url, _) in urls.items()}
    times: dict[str, list[float]] = {label: [] for label in urls}
    for _ in range(requests):
        for label, (url, _) in urls.items():
            if cold:
                cache.clear()  # as after every new report on that revision
            start = time.perf_counter()
            # HTTPS, as in production (DEBUG off redirects plain HTTP).
            response = client.get(url, secure=True)
            times[label].append((time.perf_counter() - start) * 1000)
            assert response.status_code == first[label][0]
    return {label: {**summary(*first[label], times[label]), "names": urls[label][1]} for label in urls}


def first_request(client: Any, url: str) -> tuple[int, int]:
    """The status and the number of SQL queries of one request (which also warms caches)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as captured:
        status = client.get(url, secure=True).status_code
    return status, len(captured)


def summary(status: int, queries: int, times: list[float]) -> dict[str, Any]:
    times = sorted(times)
    p95 = times[min(len(times) - 1, round(0.95 * (len(times) - 1)))]
    return {"status": status, "queries": queries, "median_ms": statistics.median(times), "p95_ms": p95}


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=30)
    parser.add_argument("--owner", default="meshllm-synthetic")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--cold", action="store_true", help="Clear the cache before every request.")
    parser.add_argument(
        "--fleet-clock",
        choices=("newest", "noon", "now"),
        default="newest",
        help="The time the fleet pages' window ends: the newest report (default), 12 hours before it, "
        "or now.",
    )
    parser.add_argument("--no-fleet", action="store_true", help="Leave the fleet pages out.")
    parser.add_argument(
        "--compare",
        action="append",
        default=[],
        metavar="A:B:LIMIT",
        help="Each page of shape B over the same page of shape A (each over its own floor), at most LIMIT.",
    )
    parser.add_argument(
        "--database",
        action="append",
        default=[],
        metavar="SHAPE=URL",
        help="A seeded database to measure, named by its seed shape (repeat it: one column each); "
        "default: DATABASE_URL alone.",
    )
    args = parser.parse_args()
    comparisons = [comparison(text) for text in args.compare]
    if args.database:
        shapes = {name: measure_in_subprocess(url, args) for name, url in map(shape_and_url, args.database)}
    else:
        shapes = {"": measure_here(args)}
    for a, b, _ in comparisons:
        if a not in shapes or b not in shapes:
            sys.exit(f"--compare {a}:{b}: both must be shapes named by --database")
    compared = {(a, b): (limit, compare(shapes[a], shapes[b])) for a, b, limit in comparisons}
    if args.json:
        print(
            json.dumps(
                {**shapes, "compared": {f"{a}:{b}": c for (a, b), (_, c) in compared.items()}}, indent=2
            )
        )
    else:
        print_table(shapes, args.requests, ", cache cleared before each request" if args.cold else "")
        print_comparisons(compared)
    missed = any(over_target(shape) for shape in shapes.values())
    missed |= any(r["ratio"] > limit for limit, rows in compared.values() for r in rows.values())
    return 1 if missed else 0


def comparison(text: str) -> tuple[str, str, float]:
    a, _, rest = text.partition(":")
    b, _, limit = rest.partition(":")
    try:
        return a, b, float(limit)
    except ValueError:
        sys.exit(f"--compare takes A:B:LIMIT (two shapes and a ratio), not {text!r}")


def compare(a: dict[str, Any], b: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Per page in both: B's median over A's, raw and each over its own run's floor (``ratio``)."""
    rows = {}
    for label, r in b["pages"].items():
        if label.startswith(FLOOR) or label not in a["pages"]:
            continue
        before = a["pages"][label]
        rows[label] = {
            "raw": r["median_ms"] / before["median_ms"],
            "ratio": r["over_floor"] / before["over_floor"],
        }
    return rows


def shape_and_url(text: str) -> tuple[str, str]:
    name, _, url = text.partition("=")
    if not name or not url:
        sys.exit(f"--database takes SHAPE=URL, not {text!r}")
    return name, url


def measure_in_subprocess(url: str, args: argparse.Namespace) -> dict[str, Any]:
    """One database measured by this script in a process of its own (Django binds one DATABASE_URL)."""
    command = [sys.executable, __file__, "--json", "--requests", str(args.requests), "--owner", args.owner]
    command += ["--fleet-clock", args.fleet_clock]
    command += ["--cold"] * args.cold + ["--no-fleet"] * args.no_fleet
    done = subprocess.run(command, env={**os.environ, "DATABASE_URL": url}, capture_output=True, text=True)
    if not done.stdout.strip():
        sys.exit(f"measuring {url} failed:\n{done.stderr[-3000:]}")
    return dict(json.loads(done.stdout)[""])


def measure_here(args: argparse.Namespace) -> dict[str, Any]:
    setup_django()
    from django.db import connection
    from django.test import Client

    client = Client()
    urls, small_reports = pages(args.owner)
    results = measure_all(client, urls, args.requests, args.cold)
    for r in results.values():
        r["floor_ms"] = results[FLOOR]["median_ms"]
    if not args.no_fleet:
        fleet = measure_fleet(client, args.requests, args.cold, args.fleet_clock)
        for r in fleet.values():  # each fleet page over the floor measured beside it, at its clock
            r["floor_ms"] = fleet[FLOOR]["median_ms"]
        results.update({label: r for label, r in fleet.items() if label != FLOOR})
        results[FLOOR + ", fleet clock"] = fleet[FLOOR]
    for r in results.values():
        r["over_floor"] = r["median_ms"] / r["floor_ms"]
    ratios = busiest_ratios(results) if small_reports else {}  # no package with reports: none
    return {"database": connection.vendor, "pages": results, "busiest_ratios": ratios}


def over_target(shape: dict[str, Any]) -> bool:
    results = shape["pages"].values()
    over = any(r["over_floor"] > FLOOR_TARGET or r["status"] != 200 for r in results)
    return over or any(ratio > BUSIEST_TARGET for ratio in shape["busiest_ratios"].values())


def busiest_ratios(results: dict[str, dict[str, Any]]) -> dict[str, float]:
    """Median of the busiest package's page (and API) over the small package's, measured in this run."""
    return {
        kind: results[f"{kind}, busiest"]["median_ms"] / results[f"{kind}, small"]["median_ms"]
        for kind in ("package page", "api package")
    }


def print_table(shapes: dict[str, dict[str, Any]], requests: int, cold: str) -> None:
    """One row per page, per shape its queries, median, p95 and median over the floor; then the busiest
    package's ratio and what the picked pages name."""
    vendors = ", ".join(sorted({shape["database"] for shape in shapes.values()}))
    print(
        f"{vendors}, {requests} requests per page{cold}; target: every page <= {FLOOR_TARGET:.0f}x the floor"
    )
    heads = "".join(f" | {name or 'this database':^37}" for name in shapes)
    print(f"{'page':<48}{heads}")
    print(f"{'':<48}" + f" | {'queries':>7} {'median ms':>10} {'p95 ms':>8} {'/floor':>7} " * len(shapes))
    labels = list(dict.fromkeys(label for shape in shapes.values() for label in shape["pages"]))
    for label in labels:
        cells = [_cell(shape["pages"].get(label)) for shape in shapes.values()]
        print(f"{label:<48}" + "".join(cells))
    for name, shape in shapes.items():
        if not shape["busiest_ratios"]:
            print(f"{name or 'this database'}: no package has reports, so no busiest / small ratio")
        for kind, ratio in shape["busiest_ratios"].items():
            flag = "" if ratio <= BUSIEST_TARGET else "  OVER"
            figure = f"{kind} busiest / small = {ratio:.2f}x (target <= {BUSIEST_TARGET}x){flag}"
            print(f"{name or 'this database'}: {figure}")
        named = {label: r["names"] for label, r in shape["pages"].items() if r.get("names")}
        print(f"{name or 'this database'} names: " + "; ".join(f"{k}: {v}" for k, v in named.items()))


def print_comparisons(compared: dict[tuple[str, str], tuple[float, dict[str, dict[str, float]]]]) -> None:
    for (a, b), (limit, rows) in compared.items():
        print(f"\n{b} against {a}: each page's median over its run's floor, B / A (target <= {limit}x)")
        print("(in brackets: the raw medians' B / A)")
        for label, r in rows.items():
            flag = "" if r["ratio"] <= limit else "  OVER"
            print(f"{label:<48} {r['ratio']:>6.2f}x  ({r['raw']:.2f}x){flag}")


def _cell(r: dict[str, Any] | None) -> str:
    if r is None:
        return f" | {'-':>7} {'-':>10} {'-':>8} {'-':>7} "
    flag = "!" if r["over_floor"] > FLOOR_TARGET else " "
    flag = flag if r["status"] == 200 else "x"
    return f" | {r['queries']:>7} {r['median_ms']:>10.1f} {r['p95_ms']:>8.1f} {r['over_floor']:>6.1f}{flag}"


if __name__ == "__main__":
    sys.exit(main())
