"""How far the rollups' medians are from the exact ones, on a seeded database (PostgreSQL).

    .venv/bin/python bench/check_medians.py [--revisions 200]

For the busiest revisions (and a sample of the rest), the exact median decode rate of every
(revision, strategy) and of MTP on / off, by ``percentile_cont`` over the raw reports, beside the
median ``throughput`` reads from the sketches; prints the largest relative error and checks that
the counts agree exactly. Exit status 1 when an error exceeds sketch.ALPHA or a count differs.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "meshdash.settings")

EXACT = """
SELECT revision_id, effective_strategy, count(*),
       percentile_cont(0.5) WITHIN GROUP (ORDER BY predicted_per_second)
FROM packages_app_report WHERE revision_id = ANY(%s) AND predicted_per_second IS NOT NULL
GROUP BY 1, 2
"""


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--revisions", type=int, default=200)
    args = parser.parse_args()
    import django

    django.setup()
    from django.db import connection
    from django.db.models import Sum

    from packages_app import sketch, throughput
    from packages_app.models import Rollup

    totals = Rollup.objects.filter(grain="total", node_key=0).values("revision_id")
    ranked = list(totals.annotate(n=Sum("reports")).order_by("-n").values_list("revision_id", flat=True))
    picked = (
        ranked[: args.revisions // 2] + ranked[args.revisions // 2 :: max(1, len(ranked) // args.revisions)]
    )
    started = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute(EXACT, [picked])
        exact = {(rid, strategy): (n, median) for rid, strategy, n, median in cursor.fetchall()}
    exact_seconds = time.perf_counter() - started
    worst, count_errors = 0.0, 0
    for revision_id in picked:
        figures = throughput.revision_throughput(revision_id)
        if figures is None:
            continue
        for row in figures.by_strategy:
            n, median = exact.get((revision_id, row.strategy), (0, None))
            count_errors += n != row.reports
            if median and row.tps is not None:
                worst = max(worst, abs(row.tps - median) / median)
    print(
        f"{len(picked)} revisions, {len(exact)} (revision, strategy) medians: largest relative error "
        f"{worst:.4%} (bound {sketch.ALPHA:.0%}), count mismatches {count_errors}; "
        f"exact medians from raw reports took {exact_seconds:.1f} s"
    )
    return 1 if worst > sketch.ALPHA or count_errors else 0


if __name__ == "__main__":
    sys.exit(main())
