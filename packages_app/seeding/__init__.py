"""Services that write the synthetic catalog and fleet ``manage.py seed_synthetic`` seeds for the scale
benchmarks (bench/bench_pages.py): made-up rows in bulk, every repo id under one owner.

Cut by concern: ``seeder`` (the steps in order: nodes, packages, revisions, files, runs, reports,
judgements), ``catalog`` (the catalog shape's rows: model families, verdicts, a revision's audit, its files),
``fleet`` (the fleet shape: topologies, what each served when, what a node's setting runs there), ``rows``
(what the rows share: the clock, a revision reports name, a report's values) and ``bulk`` (writing rows by
the thousand: batches, COPY, reserved report ids and their keys).

Never imports: a selector, the tasks, web/ or the Hub; no task is enqueued. Callers import each name from the
module that owns it: this file imports nothing.
"""
