"""Benchmark: gguf_header.parse_file vs gguf.GGUFReader on a realistic ~7 MiB Qwen3.5-like GGUF header.

Run from the repo root: ``.venv/bin/python bench/bench_gguf_header.py [--runs 15] [--reader-runs 3]``.
Builds the file with gguf.GGUFWriter in a temp dir (header + a sparse data section, since GGUFReader maps
tensor data too), then prints a markdown table: median parse time, tracemalloc peak, and the peak-RSS
growth of a fresh subprocess that does one parse.
"""

from __future__ import annotations

import argparse
import random
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gguf import GGUFReader, GGUFWriter  # noqa: E402
from gguf.constants import (  # noqa: E402
    GGML_QUANT_SIZES,
    MODEL_TENSOR,
    TENSOR_NAMES,
    GGMLQuantizationType,
)

from packages_app.gguf_header import parse_file  # noqa: E402

ARCH = "qwen35moe"
VOCAB = 248320
MERGES = 247_000
HIDDEN, EXPERTS, EXPERT_FF, TRUNK_BLOCKS = 2048, 256, 512, 40
Q = GGMLQuantizationType

CHAT_TEMPLATE = (
    "{%- for message in messages %}{{- '<|im_start|>' + message.role + '\\n' }}"
    "{%- if message.content is string %}{{- message.content }}{%- endif %}{{- '<|im_end|>\\n' }}"
    "{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n<think>\\n' }}{%- endif %}"
) * 24


def bpe_vocab(rng: random.Random) -> tuple[list[str], list[str]]:
    """GPT-2 style byte-level tokens ("Ġ" marks a leading space) and merges "left right" that build them."""
    letters = "abcdefghijklmnopqrstuvwxyz" * 3 + "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789" + "éàüñ中文"
    byte_tokens = [chr(0x100 + i) if i < 33 or i > 126 else chr(i) for i in range(256)]
    words: list[str] = []
    while len(words) < VOCAB - 256 - 300:
        body = "".join(rng.choices(letters, k=rng.randint(2, 6)))
        words.append(("Ġ" if rng.random() < 0.55 else "") + body)
    specials = [f"<|special_{i}|>" for i in range(300)]
    merges = [
        f"{word[:cut]} {word[cut:]}" for word in words[:MERGES] for cut in [rng.randint(1, len(word) - 1)]
    ]
    return byte_tokens + words + specials, merges


def block_tensors(bid: int) -> list[tuple[str, tuple[int, ...], Q]]:
    """(name, numpy-order shape, type) for one qwen35moe block; every 4th block is full attention."""

    def name(tensor: MODEL_TENSOR) -> str:
        return TENSOR_NAMES[tensor].format(bid=bid) + ".weight"

    tensors = [
        (name(MODEL_TENSOR.ATTN_NORM), (HIDDEN,), Q.F32),
        (name(MODEL_TENSOR.ATTN_POST_NORM), (HIDDEN,), Q.F32),
        (name(MODEL_TENSOR.FFN_GATE_INP), (EXPERTS, HIDDEN), Q.F32),
        (name(MODEL_TENSOR.FFN_GATE_EXP), (EXPERTS, EXPERT_FF, HIDDEN), Q.Q4_K),
        (name(MODEL_TENSOR.FFN_UP_EXP), (EXPERTS, EXPERT_FF, HIDDEN), Q.Q4_K),
        (name(MODEL_TENSOR.FFN_DOWN_EXP), (EXPERTS, HIDDEN, EXPERT_FF), Q.Q6_K),
        (name(MODEL_TENSOR.FFN_GATE_INP_SHEXP), (1, HIDDEN), Q.BF16),
        (name(MODEL_TENSOR.FFN_GATE_SHEXP), (EXPERT_FF, HIDDEN), Q.Q4_K),
        (name(MODEL_TENSOR.FFN_UP_SHEXP), (EXPERT_FF, HIDDEN), Q.Q4_K),
        (name(MODEL_TENSOR.FFN_DOWN_SHEXP), (HIDDEN, EXPERT_FF), Q.Q6_K),
    ]
    if bid % 4 == 3 or bid == TRUNK_BLOCKS:
        tensors += [
            (name(MODEL_TENSOR.ATTN_Q), (8192, HIDDEN), Q.Q4_K),
            (name(MODEL_TENSOR.ATTN_K), (512, HIDDEN), Q.Q4_K),
            (name(MODEL_TENSOR.ATTN_V), (512, HIDDEN), Q.Q6_K),
            (name(MODEL_TENSOR.ATTN_OUT), (HIDDEN, 4096), Q.Q4_K),
            (name(MODEL_TENSOR.ATTN_Q_NORM), (256,), Q.F32),
            (name(MODEL_TENSOR.ATTN_K_NORM), (256,), Q.F32),
        ]
    else:
        tensors += [
            (name(MODEL_TENSOR.ATTN_QKV), (8192, HIDDEN), Q.Q4_K),
            (name(MODEL_TENSOR.ATTN_GATE), (4096, HIDDEN), Q.Q4_K),
            (name(MODEL_TENSOR.SSM_A), (32,), Q.F32),
            (name(MODEL_TENSOR.SSM_CONV1D), (8192, 4), Q.F32),
            (name(MODEL_TENSOR.SSM_DT), (32,), Q.F32),
            (name(MODEL_TENSOR.SSM_NORM), (128,), Q.F32),
            (name(MODEL_TENSOR.SSM_OUT), (HIDDEN, 4096), Q.Q4_K),
            (name(MODEL_TENSOR.SSM_ALPHA), (32, HIDDEN), Q.BF16),
            (name(MODEL_TENSOR.SSM_BETA), (32, HIDDEN), Q.BF16),
        ]
    if bid == TRUNK_BLOCKS:
        tensors += [
            (name(MODEL_TENSOR.NEXTN_EH_PROJ), (HIDDEN, 2 * HIDDEN), Q.Q4_K),
            (name(MODEL_TENSOR.NEXTN_ENORM), (HIDDEN,), Q.F32),
            (name(MODEL_TENSOR.NEXTN_HNORM), (HIDDEN,), Q.F32),
            (name(MODEL_TENSOR.NEXTN_SHARED_HEAD_NORM), (HIDDEN,), Q.F32),
        ]
    return tensors


def nbytes(shape: tuple[int, ...], qtype: Q) -> int:
    block, size = GGML_QUANT_SIZES[qtype]
    return int(np.prod(shape)) // block * size


def build(path: Path) -> None:
    rng = random.Random(35)
    writer = GGUFWriter(path, ARCH)
    writer.add_type("model")
    writer.add_name("Qwen3.5-35B-A3B")
    writer.add_quantization_version(2)
    writer.add_file_type(15)
    writer.add_block_count(TRUNK_BLOCKS + 1)
    writer.add_nextn_predict_layers(1)
    writer.add_context_length(262144)
    writer.add_embedding_length(HIDDEN)
    writer.add_head_count(16)
    writer.add_expert_count(EXPERTS)
    writer.add_expert_used_count(8)
    writer.add_rope_freq_base(10_000_000.0)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("qwen35")
    tokens, merges = bpe_vocab(rng)
    writer.add_token_list(tokens)
    writer.add_token_types([1] * (VOCAB - 300) + [3] * 300)
    writer.add_token_merges(merges)
    writer.add_eos_token_id(VOCAB - 300)
    writer.add_pad_token_id(VOCAB - 299)
    writer.add_chat_template(CHAT_TEMPLATE)
    tensors = [("token_embd.weight", (VOCAB, HIDDEN), Q.Q4_K), ("output_norm.weight", (HIDDEN,), Q.F32)]
    tensors.append(("output.weight", (VOCAB, HIDDEN), Q.Q6_K))
    for bid in range(TRUNK_BLOCKS + 1):
        tensors += block_tensors(bid)
    for name, shape, qtype in tensors:
        writer.add_tensor_info(name, shape, np.dtype(np.float32), nbytes(shape, qtype), raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    writer.close()
    header = parse_file(path)
    data = sum(-(-tensor.nbytes // header.alignment) * header.alignment for tensor in header.tensors)
    with open(path, "r+b") as handle:
        handle.truncate(header.header_bytes + data)  # sparse: GGUFReader maps the data but never reads it


def median_seconds(function: Callable[[], object], runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def traced_peak(function: Callable[[], object]) -> int:
    tracemalloc.start()
    function()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak


# VmHWM (peak RSS of this process image) rather than ru_maxrss: Linux carries ru_maxrss across exec, so a
# child of this already-large benchmark process would start with the parent's high-water mark.
RSS_PROBE = """
import re, sys
sys.path.insert(0, sys.argv[1])
from gguf import GGUFReader
from packages_app.gguf_header import parse_file
def peak_kib():
    with open("/proc/self/status") as status:
        return int(re.search(r"VmHWM:\\s+(\\d+)", status.read()).group(1))
before = peak_kib()
(parse_file if sys.argv[3] == "ours" else GGUFReader)(sys.argv[2])
print(peak_kib() - before)
"""


def rss_growth_kib(path: Path, which: str) -> int:
    probe = [sys.executable, "-c", RSS_PROBE, str(ROOT), str(path), which]
    return int(subprocess.run(probe, check=True, capture_output=True, text=True).stdout)


def mib(size: float) -> str:
    return f"{size / 2**20:.1f} MiB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=15, help="timed runs of parse_file")
    parser.add_argument("--reader-runs", type=int, default=3, help="timed runs of GGUFReader (slow)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "qwen35moe-like.gguf"
        started = time.perf_counter()
        build(path)
        header = parse_file(path)
        print(
            f"built in {time.perf_counter() - started:.1f} s: header {mib(header.header_bytes)} "
            f"({header.header_bytes} bytes), {len(header.kv)} KVs, {len(header.tensors)} tensors, "
            f"vocab {VOCAB}"
        )
        ours = median_seconds(lambda: parse_file(path), args.runs)
        theirs = median_seconds(lambda: GGUFReader(path), args.reader_runs)
        ours_peak, theirs_peak = traced_peak(lambda: parse_file(path)), traced_peak(lambda: GGUFReader(path))
        ours_rss, theirs_rss = rss_growth_kib(path, "ours") * 1024, rss_growth_kib(path, "reader") * 1024
    print()
    print("| measure | `parse_file` (ours) | `gguf.GGUFReader` | ratio |")
    print("|---|---:|---:|---:|")
    print(
        f"| parse time, median ({args.runs} / {args.reader_runs} runs) | {ours * 1000:.1f} ms "
        f"| {theirs * 1000:.0f} ms | {theirs / ours:.0f}x faster |"
    )
    print(
        f"| tracemalloc peak | {mib(ours_peak)} | {mib(theirs_peak)} | {theirs_peak / ours_peak:.0f}x less |"
    )
    ratio = f"{theirs_rss / ours_rss:.0f}x less" if ours_rss > 0 else "n/a"
    print(f"| peak RSS growth (VmHWM), fresh process | {mib(ours_rss)} | {mib(theirs_rss)} | {ratio} |")


if __name__ == "__main__":
    main()
