"""The GGUF header read loop: ranged reads sized by the parser's own estimate, many files at once.

Works on any ``RangeReader`` (a Hub repo, a URL, a local folder); does no HTTP itself and imports
nothing from Django or huggingface_hub.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass

from packages_app.gguf_errors import GGUFHeaderError
from packages_app.gguf_parser import HeaderParser
from packages_app.gguf_results import DEFAULT_LIMITS, GGUFHeader
from packages_app.hub.records import RangeReader

# Range sizing. A first read of unknown size asks for FIRST_READ; the parser's estimate of the rest
# is padded by a small factor so the third request, when needed, is the last.
FIRST_READ = 256 * 1024
ESTIMATE_PAD = 1.06
TENSOR_INFO_SLACK = 16 * 1024


@dataclass(frozen=True)
class HeaderResult:
    path: str
    header: GGUFHeader | None = None
    error: str = ""
    error_code: str = ""
    requests: int = 0
    bytes: int = 0


def read_header(source: RangeReader, sha: str, path: str, *, first_read: int = FIRST_READ) -> HeaderResult:
    """Parse one file's GGUF header from ranged reads sized by the parser's own estimate.

    A source may carry ``header_limits`` (the per-file caps of its configuration, e.g. tensors per file).
    """
    parser = HeaderParser(getattr(source, "header_limits", DEFAULT_LIMITS))
    requests = 0
    want = first_read
    while True:
        data = source.read_range(sha, path, parser.received, want)
        requests += 1
        try:
            parser.feed(data)
        except GGUFHeaderError as exc:
            return HeaderResult(
                path, error=f"{path}: {exc}", error_code=exc.code, requests=requests, bytes=parser.received
            )
        if parser.done:
            return HeaderResult(path, header=parser.result(), requests=requests, bytes=parser.received)
        if len(data) < want:  # a short (or empty) read is the end of the file
            return HeaderResult(
                path,
                error=f"{path}: the file ends inside its GGUF header",
                error_code="truncated",
                requests=requests,
                bytes=parser.received,
            )
        want = _next_read(parser)


def _next_read(parser: HeaderParser) -> int:
    """Read up to the estimated end plus a margin: estimates from a vocabulary's early, short tokens
    run low, and one more round trip costs more than a few percent of extra bytes."""
    target = int(parser.estimate_total() * ESTIMATE_PAD) + 4096
    return max(parser.bytes_wanted(), target - parser.received)


class HeaderFetcher:
    """Reads the headers of many files of one revision concurrently, with a bound.

    The first file is read alone with no assumption about its size; the rest then start with one
    request sized from it (v1 layer files repeat the same multi-MB KV block), so a 41-file package
    costs about one request per file.
    """

    def __init__(self, source: RangeReader, sha: str, *, concurrency: int = 8) -> None:
        self.source = source
        self.sha = sha
        self.concurrency = max(1, concurrency)

    def fetch(
        self,
        paths: Sequence[str],
        on_result: Callable[[HeaderResult], None] | None = None,
        *,
        learned: HeaderResult | None = None,
        first_read: int = FIRST_READ,
    ) -> list[HeaderResult]:
        """Headers of ``paths``; ``learned`` is a header of the same package already read."""
        results: list[HeaderResult] = []
        rest = list(paths)
        if rest and (learned is None or learned.header is None):
            learned = read_header(self.source, self.sha, rest.pop(0), first_read=first_read)
            results.append(learned)
            if on_result:
                on_result(learned)
        guess = _learned_first_read(learned)
        with ThreadPoolExecutor(max_workers=self.concurrency) as pool:
            futures = [pool.submit(read_header, self.source, self.sha, p, first_read=guess) for p in rest]
            try:
                for future in as_completed(futures):
                    result = future.result()
                    results.append(result)
                    if on_result:
                        on_result(result)
            except BaseException:
                # on_result failed (the database went away) or the task is being stopped: the reads
                # not started yet are dropped instead of all being waited for.
                pool.shutdown(wait=True, cancel_futures=True)
                raise
        order = {p: i for i, p in enumerate(paths)}
        return sorted(results, key=lambda r: order[r.path])


def _learned_first_read(first: HeaderResult | None) -> int:
    if first is None or first.header is None:
        return FIRST_READ
    h = first.header
    tensor_info = h.tensor_info_end - h.kv_end
    return h.kv_end + max(2 * tensor_info, TENSOR_INFO_SLACK)
