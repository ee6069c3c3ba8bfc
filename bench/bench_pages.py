"""Server time of the dashboard's pages at scale: median and p95 of N in-process requests per page.

Seed first, then run against the same database (PostgreSQL is what the target is about):

    createdb -h 127.0.0.1 -U postgres meshdash_bench_pages
    export DATABASE_URL=postgres://postgres@127.0.0.1:5432/meshdash_bench_pages
    .venv/bin/python manage.py migrate
    .venv/bin/python manage.py seed_synthetic --packages 10000 --reports 1000000
    .venv/bin/python bench/bench_pages.py --requests 30

It uses Django's test Client (no network, no web server), so the figures are view + ORM + template
time. Exit status 1 when a page's median is over --target milliseconds.

The fleet pages (/nodes/, a node page, the catalog's served revisions, the busiest topology's page and
the busiest package's before/after comparison) show what nodes reported in the last 7 days. Seeded
reports end at the seed's NOW (the midnight UTC before it ran), so those pages are measured with the
clock set to the newest report (``--fleet-clock newest``, the default); ``--fleet-clock now`` measures
them at the real time, which on the day of the seed is nearly the same window.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
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
    # Plain storage: {% static %} must not need a collectstatic manifest for an in-process benchmark.
    settings.STORAGES = {
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    }


def pick_packages(owner: str) -> dict[str, str]:  # label -> repo id
    """The busiest package (most reports), the busiest with MTP weights, one at the median, one with
    about 14 reports (the baseline the busiest must stay within 1.5x of), and one no node reported on.
    Counted from the rollups (a Count over 10^7 reports would take a while)."""
    from django.db.models import Q, Sum
    from django.db.models.functions import Coalesce

    from packages_app.models import Package

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
    small = min(ranked, key=lambda row: (abs(row[1] - SMALL), row[0]))
    return {
        f"busiest ({ranked[0][1]} reports)": ranked[0][0],
        f"busiest with MTP ({mtp[1]} reports)": mtp[0],
        f"median ({ranked[len(ranked) // 2][1]} reports)": ranked[len(ranked) // 2][0],
        f"small ({small[1]} reports)": small[0],
        "no reports": quiet,
    }


SMALL = 14  # reports of the package the busiest is compared with
RATIO_TARGET = 1.5


def pages(owner: str) -> dict[str, str]:
    urls = {
        "catalog /": "/",
        "catalog any inconsistent": "/?verdict=inconsistent",
        "catalog search + sort by size": "/?q=Qwen3.5&sort=-size",
        "catalog MTP detected, not declared": "/?mtp_detected=yes&mtp_declared=no&sort=-updated",
        "catalog throughput alerts": "/?alert=on",
        "catalog page 100": "/?page=100",
        "api list": "/api/v1/packages?per_page=50",
    }
    picked = pick_packages(owner)
    busiest = next(iter(picked.values()))
    urls["catalog row of the busiest package"] = f"/?q={busiest.split('/', 1)[1]}"
    for label, repo_id in picked.items():
        urls[f"package page, {label}"] = f"/packages/{repo_id}/"
        urls[f"api package, {label}"] = f"/api/v1/packages/{repo_id}"
    return urls


def fleet_pages() -> dict[str, str]:
    from django.db.models import Count, Sum

    from packages_app.models import Node, Package, Revision, Serving

    node = Node.objects.order_by("name").values_list("name", flat=True).first()
    urls = {"nodes": "/nodes/", "catalog /, served revisions in the window": "/"}
    if node is not None:
        urls[f"node page ({node})"] = f"/nodes/{node}/"
    busiest_topology = (
        Serving.objects.filter(node_key=0)
        .values("topology_id")
        .annotate(n=Sum("reports"))
        .order_by("-n")
        .values_list("topology_id", flat=True)
        .first()
    )
    if busiest_topology:
        urls[f"topology page ({busiest_topology})"] = f"/topologies/{busiest_topology}/"
    ranked = list(
        Package.objects.filter(revisions__servings__node_key=0)
        .annotate(n=Sum("revisions__servings__reports"))
        .order_by("-n")
        .values_list("pk", "repo_id")[:50]
    )
    several = Revision.objects.filter(package_id__in=[pk for pk, _ in ranked]).values("package_id")
    several = several.annotate(c=Count("id")).filter(c__gt=1).order_by()
    comparable = set(several.values_list("package_id", flat=True))
    busiest = next((repo_id for pk, repo_id in ranked if pk in comparable), None)
    if busiest is not None:
        urls["compare page, busiest package with 2+ revisions"] = f"/packages/{busiest}/compare"
    return urls


def newest_report() -> Any:
    """When the newest report arrived (from the total rollups: no scan of the reports)."""
    from django.db.models import Max

    from packages_app.models import Rollup

    return Rollup.objects.filter(grain="total", node_key=0).aggregate(at=Max("last_at"))["at"]


def measure_fleet(client: Any, requests: int, cold: bool, clock: str) -> dict[str, dict[str, Any]]:
    """The fleet pages, with django.utils.timezone.now at the newest report unless ``clock == "now"``."""
    from unittest import mock

    at = newest_report() if clock == "newest" else None
    labels = {label: f"{label}{', clock at newest report' if at else ''}" for label in fleet_pages()}
    urls = {labels[label]: url for label, url in fleet_pages().items()}
    if at is None:
        return measure_all(client, urls, requests, cold)
    with mock.patch("django.utils.timezone.now", return_value=at):
        return measure_all(client, urls, requests, cold)


def measure_all(client: Any, urls: dict[str, str], requests: int, cold: bool) -> dict[str, dict[str, Any]]:
    """Every page ``requests`` times, round-robin (page 1, page 2, ..., page 1, ...): a burst of load
    from elsewhere on the machine falls on every page alike, so the ratios within a run hold."""
    from django.core.cache import cache

    first = {label: first_request(client, url) for label, url in urls.items()}
    times: dict[str, list[float]] = {label: [] for label in urls}
    for _ in range(requests):
        for label, url in urls.items():
            if cold:
                cache.clear()  # as after every new report on that revision
            start = time.perf_counter()
            # HTTPS, as in production (DEBUG off redirects plain HTTP).
            response = client.get(url, secure=True)
            times[label].append((time.perf_counter() - start) * 1000)
            assert response.status_code == first[label][0]
    return {label: summary(*first[label], times[label]) for label in urls}


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
    parser.add_argument("--target", type=float, default=100.0, help="Milliseconds a median must not exceed.")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--cold", action="store_true", help="Clear the cache before every request.")
    parser.add_argument(
        "--fleet-clock",
        choices=("newest", "now"),
        default="newest",
        help="The time the fleet pages' window ends: the newest report (default) or now.",
    )
    parser.add_argument("--no-fleet", action="store_true", help="Leave the fleet pages out.")
    args = parser.parse_args()
    setup_django()
    from django.db import connection
    from django.test import Client

    client = Client()
    urls = pages(args.owner)
    results = measure_all(client, urls, args.requests, args.cold)
    if not args.no_fleet:
        results.update(measure_fleet(client, args.requests, args.cold, args.fleet_clock))
    if args.json:
        document = {"database": connection.vendor, "requests": args.requests, "pages": results}
        print(json.dumps({**document, "busiest_ratios": busiest_ratios(results)}, indent=2))
    else:
        print_table(
            results,
            connection.vendor,
            args.requests,
            args.target,
            ", cache cleared before each request" if args.cold else "",
        )
    over = any(r["median_ms"] > args.target or r["status"] != 200 for r in results.values())
    return 1 if over or any(ratio > RATIO_TARGET for ratio in busiest_ratios(results).values()) else 0


def busiest_ratios(results: dict[str, dict[str, Any]]) -> dict[str, float]:
    """Median of the busiest package's page (and API) over the small package's, measured in this run."""
    ratios = {}
    for kind in ("package page", "api package"):
        busiest = next(r for label, r in results.items() if label.startswith(f"{kind}, busiest ("))
        small = next(r for label, r in results.items() if label.startswith(f"{kind}, small ("))
        ratios[kind] = busiest["median_ms"] / small["median_ms"]
    return ratios


def print_table(
    results: dict[str, dict[str, Any]], vendor: str, requests: int, target: float, cold: str
) -> None:
    print(f"{vendor}, {requests} requests per page, target median <= {target:.0f} ms{cold}")
    print(f"{'page':<52} {'status':>6} {'queries':>7} {'median ms':>10} {'p95 ms':>8}")
    for label, r in results.items():
        flag = "" if r["median_ms"] <= target else "  OVER"
        flag = flag if r["status"] == 200 else "  NOT 200"
        figures = f"{r['status']:>6} {r['queries']:>7} {r['median_ms']:>10.1f} {r['p95_ms']:>8.1f}"
        print(f"{label:<52} {figures}{flag}")
    for kind, ratio in busiest_ratios(results).items():
        flag = "" if ratio <= RATIO_TARGET else "  OVER"
        print(f"{kind}: busiest / small = {ratio:.2f}x (target <= {RATIO_TARGET}x){flag}")


if __name__ == "__main__":
    sys.exit(main())
