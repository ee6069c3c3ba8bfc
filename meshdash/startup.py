"""What a serving process does once Django is set up (wsgi.py, asgi.py; bench/bench_pages.py measures
the pages in a process set up the same way).

``settle`` moves every object made at start-up (Django, the apps, the settings, the release matrix) into
the garbage collector's permanent generation (``gc.freeze``). They live as long as the process, yet each
full collection would scan them all again: on the nodes page at 10,000,000 reports, a full collection
came every other request and took 75 to 130 ms with them, 6 to 14 ms without. Nothing is lost: frozen
objects are still freed by reference counting; only a cycle among them is kept, as it would be anyway
for the life of the process.
"""

from __future__ import annotations

import gc


def settle() -> None:
    gc.freeze()
