"""The header parser's size estimate while it is fed, for both tokenizer families, and its edges.

`hub.read_header` sizes its second and third ranged reads from `HeaderParser.estimate_total()`: an
estimate far too low costs another request, one far too high reads bytes for nothing. These feed real
headers (written by gguf-py's GGUFWriter) in 64 KiB steps and hold the estimate to the truth at each step.
"""

from __future__ import annotations

import random
import runpy
from collections.abc import Callable
from pathlib import Path

import pytest
from gguf import GGUFWriter

from packages_app import gguf_header
from packages_app.gguf_errors import BadMagic
from packages_app.gguf_header import parse_header
from packages_app.gguf_parser import HeaderParser
from tests.test_gguf_header import TENSORS, bpe_fill, write_gguf

STEP = 64 * 1024


def sentencepiece_fill(vocab: int, model: str = "llama") -> Callable[[GGUFWriter], None]:
    """A SentencePiece tokenizer (llama's): tokens, then float scores and token types, no merges."""

    def fill(writer: GGUFWriter) -> None:
        rng = random.Random(vocab)
        writer.add_tokenizer_model(model)
        writer.add_token_list(
            ["▁" + "".join(rng.choices("abcdefghij", k=rng.randint(1, 9))) for _ in range(vocab)]
        )
        writer.add_token_scores([-float(i) for i in range(vocab)])
        writer.add_token_types([1] * vocab)
        writer.add_eos_token_id(2)

    return fill


def estimates(data: bytes) -> list[tuple[int, int]]:
    """(bytes fed, estimate_total) after each 64 KiB step until the header is parsed."""
    parser, seen = HeaderParser(), []
    for start in range(0, len(data), STEP):
        parser.feed(data[start : start + STEP])
        if parser.done:
            break
        seen.append((start + STEP, parser.estimate_total()))
    return seen


@pytest.mark.parametrize(
    ("name", "fill"),
    [
        ("bpe", bpe_fill(40_000)),
        ("sentencepiece", sentencepiece_fill(40_000)),
        ("another tokenizer model", sentencepiece_fill(40_000, model="bert")),
    ],
)
def test_once_the_vocabulary_is_read_the_estimate_stays_within_a_quarter_of_the_truth(
    tmp_path: Path, name: str, fill: Callable[[GGUFWriter], None]
) -> None:
    data = write_gguf(tmp_path / f"{name}.gguf", "llama", fill, tensors=TENSORS[:3]).read_bytes()
    truth = parse_header(data).tensor_info_end
    steps = estimates(data)
    assert len(steps) >= 4, "the header must take several steps for the test to mean anything"

    past_vocabulary = steps[len(steps) // 3 :]
    off = [(fed, guess) for fed, guess in past_vocabulary if not 0.75 * truth <= guess <= 1.25 * truth]
    assert off == [], f"truth {truth}"


def test_the_estimate_never_falls_below_what_was_already_read(tmp_path: Path) -> None:
    data = write_gguf(tmp_path / "spm.gguf", "llama", sentencepiece_fill(20_000)).read_bytes()

    assert all(guess >= fed - STEP for fed, guess in estimates(data))


def test_asking_for_the_result_before_the_header_is_complete_says_to_feed_more(tmp_path: Path) -> None:
    data = write_gguf(tmp_path / "spm.gguf", "llama", sentencepiece_fill(2_000)).read_bytes()
    parser = HeaderParser()
    parser.feed(data[:1000])

    with pytest.raises(RuntimeError, match=r"not complete yet; feed more bytes"):
        parser.result()


def test_after_a_bad_header_the_result_raises_the_same_error() -> None:
    parser = HeaderParser()
    with pytest.raises(BadMagic) as fed:
        parser.feed(b"GGML" + bytes(60))

    with pytest.raises(BadMagic) as asked:
        parser.result()
    assert asked.value is fed.value


def test_the_cli_prints_its_usage_on_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert gguf_header.main(["--help"]) == 0
    assert capsys.readouterr().out == "usage: python -m packages_app.gguf_header FILE\n"


def test_the_module_run_as_a_script_is_the_cli(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("sys.argv", ["gguf_header.py", "--help"])
    with pytest.raises(SystemExit) as exited:
        runpy.run_path(gguf_header.__file__, run_name="__main__")
    assert exited.value.code == 0
    assert capsys.readouterr().out == "usage: python -m packages_app.gguf_header FILE\n"
