"""Decode-rate sketches as the rollups store them (JSON objects of bins), read as text and parsed in one call.

Why not the JSONField's own decoding: ``json.loads`` of the column read as text parses several times faster,
which showed on pages that read hundreds of cells; and many cells' texts parse as one JSON array, one call
into the decoder instead of one a cell (the nodes pages merge thousands).
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from django.db.models import TextField
from django.db.models.functions import Cast

from packages_app import sketch


def stored(column: str) -> Cast:
    """A sketch column read as JSON text: ``json.loads`` parses it several times faster than the
    JSONField's own decoding, which showed on pages that read hundreds of cells."""
    return Cast(column, TextField())


def merged_stored(texts: Iterable[str]) -> sketch.Sketch:
    """Sketches stored as JSON texts, merged. The texts are parsed as one JSON array (one call into the
    decoder, not one per cell: the nodes pages merge thousands of cells)."""
    return merged_bins(parsed_stored(texts))


def parsed_stored(texts: Iterable[str]) -> list[dict[str, int]]:
    """Sketches stored as JSON texts, parsed in one call into the decoder (bins under their text keys)."""
    parsed: list[dict[str, int]] = json.loads("[" + ",".join(texts) + "]")
    return parsed


def merged_bins(parsed: list[dict[str, int]]) -> sketch.Sketch:
    """Parsed stored sketches (bins under their text keys), merged: bins added under their text keys,
    converted once."""
    bins: dict[str, int] = parsed[0] if len(parsed) == 1 else {}
    if len(parsed) > 1:  # (none: an empty sketch)
        for stored_bins in parsed:
            for index, count in stored_bins.items():
                bins[index] = bins.get(index, 0) + count
    # As sketch.from_json, without its per-bin int() of counts that json.loads made ints already.
    return dict(zip(map(int, bins), bins.values(), strict=True))
