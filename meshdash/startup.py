"""What a serving process does once Django is set up (wsgi.py, asgi.py; bench/bench_pages.py measures
the pages in a process set up the same way).

``settle`` moves every object made at start-up (Django, the apps, the settings, the release matrix) into
the garbage collector's permanent generation (``gc.freeze``). They live as long as the process, yet each
full collection would scan them all again. Frozen, they are out of every scan; nothing is lost: frozen
objects are still freed by reference counting, and only a cycle among them is kept, as it would be
anyway for the life of the process.

Freezing alone makes full collections frequent: CPython runs one every 10 collections of the middle
generation once the objects that survived into the oldest since the last full one outnumber a quarter
of those it held then, and after a freeze that quarter counts only what is not frozen. So ``settle``
also asks for FULL_EVERY collections of the middle generation between two full ones: each full one
scans only what start-up did not make, a tenth as often. Unreachable cycles in the oldest generation
wait longer to be freed (at most FULL_EVERY x the middle threshold x the young one, 700,000 container
allocations at CPython's defaults).

Measured on the fleet-shape seed (10,000,000 reports, ``bench/bench_pages.py --requests 20 --cold``,
three rounds interleaved, 2026-12-03): /nodes/?action=1's p95 220 ms as Django sets up, 178 ms frozen,
164 ms frozen with full collections every FULL_EVERY; every page's median within 2 % of the others.
"""

from __future__ import annotations

import gc

FULL_EVERY = 100  # middle-generation collections before a full one (CPython's default: 10)


def settle() -> None:
    gc.freeze()
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, FULL_EVERY)
