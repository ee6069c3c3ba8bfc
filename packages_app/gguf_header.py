"""Pure GGUF header reader: bytes in (whole or in pieces), a validated GGUFHeader out; no Django, no network.

Why not gguf-py's ``GGUFReader``: it memory-maps the complete file and turns every field into numpy arrays,
so it needs the whole file, and for one real 6.5 MB header it took ~10 s and ~700 MiB. We read the headers of
multi-GB remote files from HTTP range requests, so this parser takes bytes as they arrive, says how many more
it needs (``bytes_wanted``, ``estimate_total``), walks the big tokenizer arrays without materialising them,
and turns hostile input into typed ``GGUFHeaderError`` subclasses. Names, keys and type codes come from
``gguf.constants``.

Run ``python -m packages_app.gguf_header FILE`` to print a local file's header as JSON.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Final

from packages_app.gguf_errors import GGUFHeaderError
from packages_app.gguf_parser import Bytes, HeaderParser, byte_view
from packages_app.gguf_results import DEFAULT_LIMITS, GGUFHeader, HeaderLimits, MiB

_READ_CHUNK: Final = 1 * MiB


def parse_header(data: Bytes, limits: HeaderLimits = DEFAULT_LIMITS) -> GGUFHeader:
    """Parse a header from bytes starting at offset 0, in place (no copy); TruncatedHeader if they end."""
    view = byte_view(data)
    parser = HeaderParser(limits)
    window = view[: limits.max_header_bytes]
    parser.received = len(view)
    parser.advance(window, 0)
    return parser.finish()


def parse_file(path: str | os.PathLike[str], limits: HeaderLimits = DEFAULT_LIMITS) -> GGUFHeader:
    """Parse a local file's header, reading it in chunks (never the whole file); OSError if unreadable."""
    parser = HeaderParser(limits)
    with open(path, "rb") as handle:
        while not parser.done:
            chunk = handle.read(max(parser.bytes_wanted(), _READ_CHUNK))
            if not chunk:
                break
            parser.feed(chunk)
    return parser.finish()


_USAGE: Final = "usage: python -m packages_app.gguf_header FILE"


def main(argv: list[str] | None = None) -> int:
    """CLI: print FILE's header JSON; exit 1 on a bad header, 2 on usage errors or an unreadable file."""
    args = sys.argv[1:] if argv is None else argv
    if args in (["-h"], ["--help"]):
        print(_USAGE)
        return 0
    if len(args) != 1:
        print(_USAGE, file=sys.stderr)
        return 2
    path = args[0]
    try:
        header = parse_file(path)
    except OSError as exc:
        print(f"error: {path}: cannot read: {exc.strerror or exc}", file=sys.stderr)
        return 2
    except GGUFHeaderError as exc:
        print(f"error: {path}: {exc}", file=sys.stderr)
        return 1
    return _print_json(header.to_json())


def _print_json(document: dict[str, object]) -> int:
    try:
        json.dump(document, sys.stdout, indent=2)
        sys.stdout.write("\n")
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader went away (e.g. `| head`); stay quiet instead of a traceback at interpreter exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
