"""Realistic GGUF weights for devhub: model specs, tokenizers, and writing sparse GGUF files.

Headers are written with `gguf.GGUFWriter` using the KV keys, tensor names, shapes and quant types
that `gguf.constants` knows for each architecture; the file is then extended with `os.truncate` to
the size its tensors declare, so a blob is its real header followed by a hole (little disk).

LFS oid convention: hashing hundreds of GB of holes would make generation slow, so the LFS sha256
of every generated GGUF file is `sha256(header_bytes + str(declared_size).encode("ascii"))`, where
`header_bytes` is everything before the tensor data and `declared_size` the file size in bytes.
It is NOT the sha256 of the file's bytes; see generator.py for how the catalog uses it.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cache
from itertools import count
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGUFWriter
from gguf.constants import (
    GGML_QUANT_SIZES,
    GGUF_DEFAULT_ALIGNMENT,
    MODEL_ARCH,
    MODEL_ARCH_NAMES,
    MODEL_TENSOR,
    MODEL_TENSORS,
    TENSOR_NAMES,
    GGMLQuantizationType,
    GGUFValueType,
    Keys,
    LlamaFileType,
    TokenType,
)

from .store import FileEntry, Store

KV = tuple[str, Any, GGUFValueType, GGUFValueType | None]
SPLIT_BYTES = 8 * 1024**3  # the writer splits a layer group over 8 GiB into -partMM files
_NEXTN = {t for t in MODEL_TENSOR if t.name.startswith("NEXTN_")}
_Q = GGMLQuantizationType
_U32, _F32, _STR, _BOOL, _ARR = (
    GGUFValueType.UINT32,
    GGUFValueType.FLOAT32,
    GGUFValueType.STRING,
    GGUFValueType.BOOL,
    GGUFValueType.ARRAY,
)


# --- tensors ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TensorSpec:
    name: str
    shape: tuple[int, ...]  # GGUF order: ne0 first
    qtype: GGMLQuantizationType

    @property
    def nbytes(self) -> int:
        block, type_size = GGML_QUANT_SIZES[self.qtype]
        if self.shape[0] % block:
            raise ValueError(f"{self.name}: ne0={self.shape[0]} is not a multiple of {block}")
        return int(np.prod(self.shape, dtype=np.int64)) // block * type_size


class _Tensors:
    """Names tensors the way gguf knows them for one architecture; refuses names it does not know."""

    def __init__(self, arch: MODEL_ARCH) -> None:
        self.arch = arch

    def __call__(
        self,
        kind: MODEL_TENSOR,
        shape: tuple[int, ...],
        qtype: _Q,
        bid: int | None = None,
        suffix: str = "weight",
    ) -> TensorSpec:
        # gguf lists nextn tensors only for some architectures; the blk.N.nextn. pattern is the same for all.
        if kind not in MODEL_TENSORS[self.arch] and kind not in _NEXTN:
            raise ValueError(f"gguf has no {kind.name} tensor for {MODEL_ARCH_NAMES[self.arch]}")
        base = TENSOR_NAMES[kind].format(bid=bid)
        return TensorSpec(f"{base}.{suffix}" if suffix else base, shape, qtype)


def _nextn(t: _Tensors, bid: int, hidden: int, vocab: int, full: bool) -> list[TensorSpec]:
    """The NextN (MTP) tensors of block `bid`; `full` adds embed_tokens and shared_head_head (GLM)."""
    out = [
        t(MODEL_TENSOR.NEXTN_EH_PROJ, (2 * hidden, hidden), _Q.Q8_0, bid),
        t(MODEL_TENSOR.NEXTN_ENORM, (hidden,), _Q.F32, bid),
        t(MODEL_TENSOR.NEXTN_HNORM, (hidden,), _Q.F32, bid),
        t(MODEL_TENSOR.NEXTN_SHARED_HEAD_NORM, (hidden,), _Q.F32, bid),
    ]
    if full:
        out.insert(1, t(MODEL_TENSOR.NEXTN_EMBED_TOKENS, (hidden, vocab), _Q.Q4_K, bid))
        out.append(t(MODEL_TENSOR.NEXTN_SHARED_HEAD_HEAD, (hidden, vocab), _Q.Q6_K, bid))
    return out


def _globals(t: _Tensors, hidden: int, vocab: int, tied: bool = False) -> tuple[list[TensorSpec], ...]:
    embeddings = [t(MODEL_TENSOR.TOKEN_EMBD, (hidden, vocab), _Q.Q6_K if tied else _Q.Q4_K)]
    output = [t(MODEL_TENSOR.OUTPUT_NORM, (hidden,), _Q.F32)]
    if not tied:
        output.append(t(MODEL_TENSOR.OUTPUT, (hidden, vocab), _Q.Q6_K))
    return embeddings, output


# --- tokenizers ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class TokenizerSpec:
    key: str
    vocab_size: int
    mean_token_bytes: int  # tuned so headers land where real ones are (6-8 MiB)
    pre: str
    specials: tuple[str, ...]
    eos: str
    pad: str
    bos: str | None
    chat_template: str


_CHATML = (
    "{%- if tools %}{{- '<|im_start|>system\\n' }}{%- if messages[0].role == 'system' %}"
    "{{- messages[0].content + '\\n\\n' }}{%- endif %}{{- '# Tools\\n\\nYou may call one or more "
    "functions to assist with the user query.\\n\\n<tools>' }}{%- for tool in tools %}{{- '\\n' }}"
    "{{- tool | tojson }}{%- endfor %}{{- '\\n</tools><|im_end|>\\n' }}{%- elif messages[0].role == "
    "'system' %}{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}{%- endif %}"
    "{%- for message in messages %}{%- if message.role == 'user' or (message.role == 'system' and not "
    "loop.first) %}{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}"
    "{%- elif message.role == 'assistant' %}{%- set content = message.content %}{%- if '</think>' in "
    "content %}{%- set content = content.split('</think>')[-1].lstrip('\\n') %}{%- endif %}"
    "{{- '<|im_start|>assistant\\n' + content }}{%- if message.tool_calls %}{%- for tool_call in "
    'message.tool_calls %}{{- \'\\n<tool_call>\\n{"name": "\' + tool_call.function.name + \'", '
    "\"arguments\": ' + (tool_call.function.arguments | tojson) + '}\\n</tool_call>' }}{%- endfor %}"
    "{%- endif %}{{- '<|im_end|>\\n' }}{%- elif message.role == 'tool' %}{{- '<|im_start|>user\\n"
    "<tool_response>\\n' + message.content + '\\n</tool_response><|im_end|>\\n' }}{%- endif %}"
    "{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- if "
    "enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}"
    "{%- else %}{{- '<think>\\n' }}{%- endif %}{%- endif %}"
)
_GLM_TEMPLATE = (
    "[gMASK]<sop>{%- if tools -%}<|system|>\\n# Tools\\n{% for tool in tools %}{{ tool | tojson }}\\n"
    "{% endfor %}{%- endif -%}{%- for m in messages -%}{%- if m.role == 'system' -%}<|system|>\\n"
    "{{ m.content }}{%- elif m.role == 'user' -%}<|user|>\\n{{ m.content }}{%- elif m.role == "
    "'assistant' -%}<|assistant|>\\n{%- if m.reasoning_content -%}<think>{{ m.reasoning_content }}"
    "</think>{%- else -%}<think></think>{%- endif -%}{{ m.content }}{%- if m.tool_calls -%}{% for tc "
    "in m.tool_calls %}<tool_call>{{ tc.function.name }}{% for k, v in tc.function.arguments.items() %}"
    "<arg_key>{{ k }}</arg_key><arg_value>{{ v | tojson }}</arg_value>{% endfor %}</tool_call>"
    "{% endfor %}{%- endif -%}{%- elif m.role == 'tool' -%}<|observation|><tool_response>{{ m.content }}"
    "</tool_response>{%- endif -%}{%- endfor -%}{%- if add_generation_prompt -%}<|assistant|>"
    "{%- if enable_thinking is defined and not enable_thinking -%}<think></think>{%- endif -%}{%- endif -%}"
)
_LLAMA3_TEMPLATE = (
    "{{- bos_token }}{%- if not date_string is defined %}{%- set date_string = '26 Jul 2024' %}"
    "{%- endif %}{%- if messages[0]['role'] == 'system' %}{%- set system_message = messages[0]"
    "['content']|trim %}{%- set messages = messages[1:] %}{%- else %}{%- set system_message = '' %}"
    "{%- endif %}{{- '<|start_header_id|>system<|end_header_id|>\\n\\n' }}{{- 'Cutting Knowledge Date: "
    "December 2023\\n' }}{{- 'Today Date: ' + date_string + '\\n\\n' }}{{- system_message }}"
    "{{- '<|eot_id|>' }}{%- for message in messages %}{{- '<|start_header_id|>' + message['role'] + "
    "'<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}"
)
_NEMOTRON_TEMPLATE = (
    "{%- for message in messages -%}{{- '<|im_start|>' + message['role'] + '\\n' }}{%- if "
    "message['role'] == 'assistant' and message.reasoning_content -%}{{- '<think>' + "
    "message.reasoning_content + '</think>' }}{%- endif -%}{{- message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor -%}{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n<think>\\n' }}{%- endif -%}"
)


def _words(text: str) -> tuple[str, ...]:
    return tuple(text.split())


_QWEN_SPECIALS = _words(
    "<|endoftext|> <|im_start|> <|im_end|> <|object_ref_start|> <|object_ref_end|> <|box_start|> "
    "<|box_end|> <|quad_start|> <|quad_end|> <|vision_start|> <|vision_end|> <|vision_pad|> "
    "<|image_pad|> <|video_pad|> <tool_call> </tool_call> <|fim_prefix|> <|fim_middle|> "
    "<|fim_suffix|> <|fim_pad|> <|repo_name|> <|file_sep|> <tool_response> </tool_response> <think> </think>"
)
_GLM_SPECIALS = _words(
    "<|endoftext|> [MASK] [gMASK] [sMASK] <sop> <eop> <|system|> <|user|> <|assistant|> "
    "<|observation|> <|begin_of_image|> <|end_of_image|> <think> </think> <tool_call> </tool_call> "
    "<tool_response> </tool_response> <arg_key> </arg_key> <arg_value> </arg_value>"
)
_LLAMA_SPECIALS = _words(
    "<|begin_of_text|> <|end_of_text|> <|reserved_special_token_0|> <|reserved_special_token_1|> "
    "<|finetune_right_pad_id|> <|reserved_special_token_2|> <|start_header_id|> <|end_header_id|> "
    "<|eom_id|> <|eot_id|> <|python_tag|>"
) + tuple(f"<|reserved_special_token_{i}|>" for i in range(3, 248))
_NEMOTRON_SPECIALS = _words("<unk> <s> </s> <|im_start|> <|im_end|> <think> </think>")

# (key, vocab size, mean token bytes, pre-tokenizer, specials, eos, pad, bos, chat template)
QWEN35_TOKENIZER = TokenizerSpec(
    "qwen35", 248320, 4, "qwen35", _QWEN_SPECIALS, "<|im_end|>", "<|endoftext|>", None, _CHATML
)
QWEN3_TOKENIZER = TokenizerSpec(
    "qwen3", 151936, 11, "qwen2", _QWEN_SPECIALS, "<|im_end|>", "<|endoftext|>", None, _CHATML
)
GLM_TOKENIZER = TokenizerSpec(
    "glm4", 151552, 12, "glm4", _GLM_SPECIALS, "<|endoftext|>", "<|endoftext|>", None, _GLM_TEMPLATE
)
LLAMA3_TOKENIZER = TokenizerSpec(
    "llama3", 128256, 18, "llama-bpe", _LLAMA_SPECIALS, "<|eot_id|>", "<|finetune_right_pad_id|>",
    "<|begin_of_text|>", _LLAMA3_TEMPLATE,
)  # fmt: skip
NEMOTRON_TOKENIZER = TokenizerSpec(
    "nemotron", 131072, 15, "tekken", _NEMOTRON_SPECIALS, "<|im_end|>", "<unk>", "<s>", _NEMOTRON_TEMPLATE
)

_CONSONANTS = "bcdfghjklmnpqrstvwxz"
_VOWEL_RUN = "aeiouy" * 40


def _byte_alphabet() -> list[str]:
    """GPT-2's byte-to-unicode table: the first 256 tokens of every byte-level BPE vocabulary."""
    printable = [*range(33, 127), *range(161, 173), *range(174, 256)]
    extra = (b for b in range(256) if b not in printable)
    table = {b: chr(b) for b in printable} | {b: chr(256 + i) for i, b in enumerate(extra)}
    return [table[b] for b in range(256)]


def _token_text(rank: int, n_regular: int, mean_bytes: int) -> str:
    """A unique BPE-looking token whose byte length grows with its rank (merged later = longer)."""
    target = 1 + (2 * (mean_bytes - 1) * rank) // n_regular
    core, n = "", rank
    while n:
        n, digit = divmod(n, len(_CONSONANTS))
        core += _CONSONANTS[digit]
    text = ("Ġ" if rank % 3 else "") + core  # consonant-only cores keep tokens unique
    pad = target - len(text.encode())
    return text + _VOWEL_RUN[rank % 6 : rank % 6 + pad] if pad > 0 else text


def _vocabulary(spec: TokenizerSpec) -> tuple[list[str], list[int], list[str]]:
    n_regular = spec.vocab_size - len(spec.specials)
    tokens = _byte_alphabet()
    tokens += [_token_text(r, n_regular, spec.mean_token_bytes) for r in range(256, n_regular)]
    merges = [f"{tok[: len(tok) // 2]} {tok[len(tok) // 2 :]}" for tok in tokens[256:]]
    types = [TokenType.NORMAL.value] * n_regular + [TokenType.CONTROL.value] * len(spec.specials)
    return tokens + list(spec.specials), types, merges


class _Prepacked(Sequence[Any]):
    """An array value serialized once by gguf and reused: 41 layer files repeat the same tokenizer."""

    def __init__(self, payload: bytes, length: int) -> None:
        self.payload = payload
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: Any) -> Any:
        raise TypeError("a prepacked GGUF array is opaque")


class _Writer(GGUFWriter):
    def _pack_val(
        self, val: Any, vtype: GGUFValueType, add_vtype: bool, sub_type: GGUFValueType | None = None
    ) -> bytes:
        if isinstance(val, _Prepacked):
            return (self._pack("I", vtype) if add_vtype else b"") + val.payload
        return super()._pack_val(val, vtype, add_vtype, sub_type)


def _prepack(values: Sequence[Any], sub_type: GGUFValueType) -> _Prepacked:
    payload = GGUFWriter(None, "devhub")._pack_val(values, _ARR, add_vtype=False, sub_type=sub_type)
    return _Prepacked(payload, len(values))


@cache
def tokenizer_kv(spec: TokenizerSpec) -> tuple[KV, ...]:
    """The tokenizer KV of a model, built once per process."""
    tokens, types, merges = _vocabulary(spec)
    ids = {tok: i for i, tok in enumerate(tokens[-len(spec.specials) :], len(tokens) - len(spec.specials))}
    kv: list[KV] = [
        (Keys.Tokenizer.MODEL, "gpt2", _STR, None),
        (Keys.Tokenizer.PRE, spec.pre, _STR, None),
        (Keys.Tokenizer.LIST, _prepack(tokens, _STR), _ARR, None),
        (Keys.Tokenizer.TOKEN_TYPE, _prepack(types, GGUFValueType.INT32), _ARR, None),
        (Keys.Tokenizer.MERGES, _prepack(merges, _STR), _ARR, None),
        (Keys.Tokenizer.EOS_ID, ids[spec.eos], _U32, None),
        (Keys.Tokenizer.PAD_ID, ids[spec.pad], _U32, None),
    ]
    if spec.bos is not None:
        kv.append((Keys.Tokenizer.BOS_ID, ids[spec.bos], _U32, None))
    kv.append((Keys.Tokenizer.ADD_BOS, spec.bos is not None, _BOOL, None))
    kv.append((Keys.Tokenizer.CHAT_TEMPLATE, spec.chat_template, _STR, None))
    return tuple(kv)


# --- model specs --------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelSpec:
    arch: MODEL_ARCH
    name: str
    size_label: str
    license: str
    hidden: int
    hparams: tuple[tuple[str, Any, GGUFValueType, GGUFValueType | None], ...]  # keys with {arch}
    tokenizer: TokenizerSpec
    embeddings: tuple[TensorSpec, ...]
    output: tuple[TensorSpec, ...]
    blocks: tuple[tuple[TensorSpec, ...], ...]

    @property
    def arch_name(self) -> str:
        return MODEL_ARCH_NAMES[self.arch]

    @property
    def block_count(self) -> int:
        return len(self.blocks)

    @property
    def mtp_blocks(self) -> tuple[int, ...]:
        """Blocks that really hold NextN tensors."""
        return tuple(i for i, b in enumerate(self.blocks) if any(".nextn." in t.name for t in b))

    def model_kv(self) -> list[KV]:
        """Every KV of the model except general.architecture (GGUFWriter adds that one first)."""
        general: list[KV] = [
            (Keys.General.TYPE, "model", _STR, None),
            (Keys.General.NAME, self.name, _STR, None),
            (Keys.General.BASENAME, self.name.rsplit("-", 1)[0], _STR, None),
            (Keys.General.SIZE_LABEL, self.size_label, _STR, None),
            (Keys.General.LICENSE, self.license, _STR, None),
            (Keys.General.QUANTIZED_BY, "Unsloth", _STR, None),
        ]
        arch = [(k.format(arch=self.arch_name), v, t, s) for k, v, t, s in self.hparams]
        tail: list[KV] = [
            (Keys.General.FILE_TYPE, LlamaFileType.MOSTLY_Q4_K_M.value, _U32, None),
            (Keys.General.QUANTIZATION_VERSION, 2, _U32, None),
        ]
        return general + arch + list(tokenizer_kv(self.tokenizer)) + tail

    def core_kv(self) -> list[KV]:
        """What a v2 layer file repeats: enough to place the block, no tokenizer."""
        return [
            (Keys.General.NAME, self.name, _STR, None),
            (Keys.LLM.BLOCK_COUNT.format(arch=self.arch_name), self.block_count, _U32, None),
            *[(k.format(arch=self.arch_name), v, t, s) for k, v, t, s in self.hparams if "nextn" in k],
        ]


def _hp(key: str, value: Any, vtype: GGUFValueType = _U32, sub: GGUFValueType | None = None) -> KV:
    return (key, value, vtype, sub)


@dataclass(frozen=True)
class MoeShape:
    """The sizes that tell one qwen35moe model from another."""

    name: str
    size_label: str
    hidden: int
    experts: int
    expert_ffn: int
    n_trunk: int
    mtp: bool  # one appended NextN block after the trunk
    n_head: int = 16
    n_kv: int = 2
    v_heads: int = 32


QWEN35_35B = MoeShape("Qwen3.5-35B-A3B", "35B-A3B", 2048, 256, 512, 40, mtp=True)
# Trunk-only (no NextN block); an expert group is ~15 GB, so every layer splits into -partMM files.
QWEN38_2T = MoeShape(
    "Qwen3.8-2.4T", "2.4T-A60B", 8192, 512, 2048, 94, mtp=False, n_head=64, n_kv=8, v_heads=64
)


def qwen35moe_spec(shape: MoeShape = QWEN35_35B) -> ModelSpec:
    """Qwen3.5-style MoE: gated-delta-net (SSM) and full-attention blocks, plus an optional MTP block."""
    t, h, vocab = _Tensors(MODEL_ARCH.QWEN35MOE), shape.hidden, 248320
    n_blocks, experts, eff = shape.n_trunk + int(shape.mtp), shape.experts, shape.expert_ffn

    def moe(bid: int) -> list[TensorSpec]:
        return [
            t(MODEL_TENSOR.ATTN_POST_NORM, (h,), _Q.F32, bid),
            t(MODEL_TENSOR.FFN_GATE_INP, (h, experts), _Q.F32, bid),
            t(MODEL_TENSOR.FFN_GATE_EXP, (h, eff, experts), _Q.Q4_K, bid),
            t(MODEL_TENSOR.FFN_UP_EXP, (h, eff, experts), _Q.Q4_K, bid),
            t(MODEL_TENSOR.FFN_DOWN_EXP, (eff, h, experts), _Q.Q5_K, bid),
            t(MODEL_TENSOR.FFN_GATE_INP_SHEXP, (h,), _Q.F32, bid),
            t(MODEL_TENSOR.FFN_GATE_SHEXP, (h, eff), _Q.Q8_0, bid),
            t(MODEL_TENSOR.FFN_UP_SHEXP, (h, eff), _Q.Q8_0, bid),
            t(MODEL_TENSOR.FFN_DOWN_SHEXP, (eff, h), _Q.Q8_0, bid),
        ]

    def block(bid: int) -> list[TensorSpec]:
        norm = [t(MODEL_TENSOR.ATTN_NORM, (h,), _Q.F32, bid)]
        mtp_block = shape.mtp and bid == n_blocks - 1
        if (bid + 1) % 4 == 0 or mtp_block:
            mixer = _gated_attention(t, bid, h, n_head=shape.n_head, n_kv=shape.n_kv, head_dim=256)
        else:
            mixer = _gated_delta_net(t, bid, h, qk_heads=16, v_heads=shape.v_heads, head_dim=128)
        mtp = _nextn(t, bid, h, vocab, full=False) if mtp_block else []
        return norm + mixer + moe(bid) + mtp

    hparams = [
        _hp(Keys.LLM.CONTEXT_LENGTH, 262144),
        _hp(Keys.LLM.EMBEDDING_LENGTH, h),
        _hp(Keys.LLM.BLOCK_COUNT, n_blocks),
        _hp(Keys.Attention.HEAD_COUNT, shape.n_head),
        _hp(Keys.Attention.HEAD_COUNT_KV, shape.n_kv),
        _hp(Keys.Attention.KEY_LENGTH, 256),
        _hp(Keys.Attention.VALUE_LENGTH, 256),
        _hp(Keys.Rope.FREQ_BASE, 10000000.0, _F32),
        _hp(Keys.Rope.DIMENSION_COUNT, 64),
        _hp(Keys.Rope.DIMENSION_SECTIONS, [11, 11, 10, 0], _ARR, GGUFValueType.INT32),
        _hp(Keys.Attention.LAYERNORM_RMS_EPS, 1e-6, _F32),
        _hp(Keys.LLM.EXPERT_COUNT, experts),
        _hp(Keys.LLM.EXPERT_USED_COUNT, 8),
        _hp(Keys.LLM.EXPERT_FEED_FORWARD_LENGTH, eff),
        _hp(Keys.LLM.EXPERT_SHARED_FEED_FORWARD_LENGTH, eff),
        *_ssm_hparams(conv=4, state=128, groups=16, rank=shape.v_heads, inner=shape.v_heads * 128),
        _hp(Keys.LLM.FULL_ATTENTION_INTERVAL, 4),
        _hp(Keys.LLM.NEXTN_PREDICT_LAYERS, int(shape.mtp)),
    ]
    emb, out = _globals(t, h, vocab)
    return _spec(
        MODEL_ARCH.QWEN35MOE,
        shape.name,
        shape.size_label,
        "apache-2.0",
        h,
        hparams,
        QWEN35_TOKENIZER,
        emb,
        out,
        [block(b) for b in range(n_blocks)],
    )


def qwen38_giant_spec() -> ModelSpec:
    return qwen35moe_spec(QWEN38_2T)


def qwen35_dense_spec(mtp_depth: int = 1) -> ModelSpec:
    """Qwen3.8-27B: 64 dense trunk blocks (SSM and full attention) plus the MTP block 64 (65 blocks); with
    ``mtp_depth`` 2, two MTP blocks (64, 65) and ``nextn_predict_layers = 2``: a deep-MTP source, which
    mesh-llm's writer refuses (docs/rules.md section 6b)."""
    t, h, vocab, n_trunk, ffn = _Tensors(MODEL_ARCH.QWEN35), 5120, 248320, 64, 17408

    def block(bid: int) -> list[TensorSpec]:
        mtp_block = bid >= n_trunk
        if (bid + 1) % 4 == 0 or mtp_block:
            mixer = _gated_attention(t, bid, h, n_head=24, n_kv=4, head_dim=256)
        else:
            mixer = _gated_delta_net(t, bid, h, qk_heads=16, v_heads=48, head_dim=128)
        return [
            t(MODEL_TENSOR.ATTN_NORM, (h,), _Q.F32, bid),
            *mixer,
            t(MODEL_TENSOR.ATTN_POST_NORM, (h,), _Q.F32, bid),
            t(MODEL_TENSOR.FFN_GATE, (h, ffn), _Q.Q4_K, bid),
            t(MODEL_TENSOR.FFN_UP, (h, ffn), _Q.Q4_K, bid),
            t(MODEL_TENSOR.FFN_DOWN, (ffn, h), _Q.Q6_K, bid),
            *(_nextn(t, bid, h, vocab, full=False) if mtp_block else []),
        ]

    hparams = [
        _hp(Keys.LLM.CONTEXT_LENGTH, 262144),
        _hp(Keys.LLM.EMBEDDING_LENGTH, h),
        _hp(Keys.LLM.BLOCK_COUNT, n_trunk + mtp_depth),
        _hp(Keys.LLM.FEED_FORWARD_LENGTH, ffn),
        _hp(Keys.Attention.HEAD_COUNT, 24),
        _hp(Keys.Attention.HEAD_COUNT_KV, 4),
        _hp(Keys.Attention.KEY_LENGTH, 256),
        _hp(Keys.Attention.VALUE_LENGTH, 256),
        _hp(Keys.Rope.FREQ_BASE, 10000000.0, _F32),
        _hp(Keys.Rope.DIMENSION_COUNT, 64),
        _hp(Keys.Rope.DIMENSION_SECTIONS, [11, 11, 10, 0], _ARR, GGUFValueType.INT32),
        _hp(Keys.Attention.LAYERNORM_RMS_EPS, 1e-6, _F32),
        *_ssm_hparams(conv=4, state=128, groups=16, rank=48, inner=6144),
        _hp(Keys.LLM.FULL_ATTENTION_INTERVAL, 4),
        _hp(Keys.LLM.NEXTN_PREDICT_LAYERS, mtp_depth),
    ]
    emb, out = _globals(t, h, vocab)
    return _spec(
        MODEL_ARCH.QWEN35,
        "Qwen3.8-27B" if mtp_depth == 1 else f"Qwen3.8-27B-MTP{mtp_depth}",
        "27B",
        "apache-2.0",
        h,
        hparams,
        QWEN35_TOKENIZER,
        emb,
        out,
        [block(b) for b in range(n_trunk + mtp_depth)],
    )


def qwen38_mmproj() -> tuple[list[KV], list[TensorSpec]]:
    """The vision projector (mmproj) sidecar of Qwen3.8-27B: a `clip` GGUF, F16, 27 ViT blocks."""
    t, width, ffn, n_blocks = _Tensors(MODEL_ARCH.MMPROJ), 1152, 4352, 27
    vision = Keys.ClipVision
    kv: list[KV] = [
        (Keys.General.TYPE, "mmproj", _STR, None),
        (Keys.General.NAME, "Qwen3.8-27B", _STR, None),
        (Keys.Clip.HAS_VISION_ENCODER, True, _BOOL, None),
        (Keys.Clip.PROJECTOR_TYPE, "qwen3vl_merger", _STR, None),
        (vision.BLOCK_COUNT, n_blocks, _U32, None),
        (vision.EMBEDDING_LENGTH, width, _U32, None),
        (vision.FEED_FORWARD_LENGTH, ffn, _U32, None),
        (vision.IMAGE_SIZE, 768, _U32, None),
        (vision.PATCH_SIZE, 16, _U32, None),
        (vision.PROJECTION_DIM, 5120, _U32, None),
        (vision.Attention.HEAD_COUNT, 16, _U32, None),
        (vision.Attention.LAYERNORM_EPS, 1e-6, _F32, None),
    ]
    tensors = [
        t(MODEL_TENSOR.V_ENC_EMBD_PATCH, (16, 16, 3, width), _Q.F16),
        t(MODEL_TENSOR.V_ENC_EMBD_POS, (width, 2304), _Q.F16),
    ]
    for bid in range(n_blocks):
        tensors += [
            t(MODEL_TENSOR.V_ENC_INPUT_NORM, (width,), _Q.F32, bid),
            t(MODEL_TENSOR.V_ENC_ATTN_QKV, (width, 3 * width), _Q.F16, bid),
            t(MODEL_TENSOR.V_ENC_ATTN_O, (width, width), _Q.F16, bid),
            t(MODEL_TENSOR.V_ENC_POST_ATTN_NORM, (width,), _Q.F32, bid),
            t(MODEL_TENSOR.V_ENC_FFN_UP, (width, ffn), _Q.F16, bid),
            t(MODEL_TENSOR.V_ENC_FFN_DOWN, (ffn, width), _Q.F16, bid),
        ]
    tensors += [
        t(MODEL_TENSOR.V_POST_NORM, (width,), _Q.F32),
        t(MODEL_TENSOR.V_MMPROJ, (4 * width, 4 * width), _Q.F16, 0),
        t(MODEL_TENSOR.V_MMPROJ, (4 * width, 5120), _Q.F16, 2),
    ]
    return kv, tensors


def _gated_attention(
    t: _Tensors, bid: int, h: int, n_head: int, n_kv: int, head_dim: int
) -> list[TensorSpec]:
    # attn_q carries query and output gate together, hence 2 * n_head * head_dim.
    return [
        t(MODEL_TENSOR.ATTN_Q, (h, 2 * n_head * head_dim), _Q.Q8_0, bid),
        t(MODEL_TENSOR.ATTN_K, (h, n_kv * head_dim), _Q.Q8_0, bid),
        t(MODEL_TENSOR.ATTN_V, (h, n_kv * head_dim), _Q.Q8_0, bid),
        t(MODEL_TENSOR.ATTN_OUT, (n_head * head_dim, h), _Q.Q8_0, bid),
        t(MODEL_TENSOR.ATTN_Q_NORM, (head_dim,), _Q.F32, bid),
        t(MODEL_TENSOR.ATTN_K_NORM, (head_dim,), _Q.F32, bid),
    ]


def _gated_delta_net(
    t: _Tensors, bid: int, h: int, qk_heads: int, v_heads: int, head_dim: int
) -> list[TensorSpec]:
    qkv = 2 * qk_heads * head_dim + v_heads * head_dim
    return [
        t(MODEL_TENSOR.ATTN_QKV, (h, qkv), _Q.Q8_0, bid),
        t(MODEL_TENSOR.ATTN_GATE, (h, v_heads * head_dim), _Q.Q8_0, bid),
        t(MODEL_TENSOR.SSM_A, (v_heads,), _Q.F32, bid, suffix=""),
        t(MODEL_TENSOR.SSM_CONV1D, (4, qkv), _Q.F32, bid),
        t(MODEL_TENSOR.SSM_DT, (v_heads,), _Q.F32, bid, suffix="bias"),
        t(MODEL_TENSOR.SSM_NORM, (head_dim,), _Q.F32, bid),
        t(MODEL_TENSOR.SSM_BETA, (h, v_heads), _Q.Q8_0, bid),
        t(MODEL_TENSOR.SSM_ALPHA, (h, v_heads), _Q.Q8_0, bid),
        t(MODEL_TENSOR.SSM_OUT, (v_heads * head_dim, h), _Q.Q8_0, bid),
    ]


def _ssm_hparams(conv: int, state: int, groups: int, rank: int, inner: int) -> list[KV]:
    return [
        _hp(Keys.SSM.CONV_KERNEL, conv),
        _hp(Keys.SSM.STATE_SIZE, state),
        _hp(Keys.SSM.GROUP_COUNT, groups),
        _hp(Keys.SSM.TIME_STEP_RANK, rank),
        _hp(Keys.SSM.INNER_SIZE, inner),
    ]


@dataclass(frozen=True)
class _Mla:
    """Multi-head latent attention (DeepSeek-V2's, as GLM-4.7-Flash and the glm-dsa GLM-5 models use it)."""

    heads: int
    q_lora: int
    kv_lora: int
    rope: int
    nope: int
    v_dim: int

    def tensors(self, t: _Tensors, bid: int, h: int) -> list[TensorSpec]:
        return [
            t(MODEL_TENSOR.ATTN_NORM, (h,), _Q.F32, bid),
            t(MODEL_TENSOR.ATTN_Q_A, (h, self.q_lora), _Q.Q8_0, bid),
            t(MODEL_TENSOR.ATTN_Q_A_NORM, (self.q_lora,), _Q.F32, bid),
            t(MODEL_TENSOR.ATTN_Q_B, (self.q_lora, self.heads * (self.nope + self.rope)), _Q.Q8_0, bid),
            t(MODEL_TENSOR.ATTN_KV_A_MQA, (h, self.kv_lora + self.rope), _Q.Q8_0, bid),
            t(MODEL_TENSOR.ATTN_KV_A_NORM, (self.kv_lora,), _Q.F32, bid),
            t(MODEL_TENSOR.ATTN_K_B, (self.nope, self.kv_lora, self.heads), _Q.Q8_0, bid),
            t(MODEL_TENSOR.ATTN_V_B, (self.kv_lora, self.v_dim, self.heads), _Q.Q8_0, bid),
            t(MODEL_TENSOR.ATTN_OUT, (self.heads * self.v_dim, h), _Q.Q8_0, bid),
        ]

    def hparams(self, h: int, n_blocks: int) -> list[KV]:
        return [
            _hp(Keys.LLM.CONTEXT_LENGTH, 202752),
            _hp(Keys.LLM.EMBEDDING_LENGTH, h),
            _hp(Keys.LLM.BLOCK_COUNT, n_blocks),
            _hp(Keys.LLM.FEED_FORWARD_LENGTH, 10240),
            _hp(Keys.Attention.HEAD_COUNT, self.heads),
            _hp(Keys.Attention.HEAD_COUNT_KV, 1),
            _hp(Keys.Attention.KEY_LENGTH, self.kv_lora + self.rope),
            _hp(Keys.Attention.VALUE_LENGTH, self.kv_lora),
            _hp(Keys.Attention.KEY_LENGTH_MLA, self.nope + self.rope),
            _hp(Keys.Attention.VALUE_LENGTH_MLA, self.v_dim),
            _hp(Keys.Attention.Q_LORA_RANK, self.q_lora),
            _hp(Keys.Attention.KV_LORA_RANK, self.kv_lora),
            _hp(Keys.Rope.FREQ_BASE, 1000000.0, _F32),
            _hp(Keys.Rope.DIMENSION_COUNT, self.rope),
            _hp(Keys.Attention.LAYERNORM_RMS_EPS, 1e-5, _F32),
        ]


def glm47_flash_spec() -> ModelSpec:
    """GLM-4.7-Flash: GGUF architecture `deepseek2` (MLA attention), 47 trunk blocks + MTP block 47."""
    t, h, vocab, n_blocks, experts, eff = _Tensors(MODEL_ARCH.DEEPSEEK2), 2048, 151552, 48, 64, 1536
    mla = _Mla(heads=20, q_lora=768, kv_lora=512, rope=64, nope=192, v_dim=256)

    def block(bid: int) -> list[TensorSpec]:
        mtp = _nextn(t, bid, h, vocab, full=True) if bid == n_blocks - 1 else []
        attention = [*mla.tensors(t, bid, h), t(MODEL_TENSOR.FFN_NORM, (h,), _Q.F32, bid)]
        return attention + _glm_ffn(t, bid, h, experts, eff) + mtp

    hparams = [*mla.hparams(h, n_blocks), *_glm_moe_hparams(experts, eff)]
    emb, out = _globals(t, h, vocab)
    return _spec(
        MODEL_ARCH.DEEPSEEK2,
        "GLM-4.7-Flash",
        "30B-A3B",
        "mit",
        h,
        hparams,
        GLM_TOKENIZER,
        emb,
        out,
        [block(b) for b in range(n_blocks)],
    )


def _glm_moe_hparams(experts: int, eff: int) -> list[KV]:
    """GLM's expert routing (4 of `experts`, one shared, sigmoid gating) and its one NextN layer key."""
    return [
        _hp(Keys.LLM.EXPERT_COUNT, experts),
        _hp(Keys.LLM.EXPERT_USED_COUNT, 4),
        _hp(Keys.LLM.EXPERT_SHARED_COUNT, 1),
        _hp(Keys.LLM.EXPERT_FEED_FORWARD_LENGTH, eff),
        _hp(Keys.LLM.LEADING_DENSE_BLOCK_COUNT, 1),
        _hp(Keys.LLM.EXPERT_WEIGHTS_SCALE, 1.8, _F32),
        _hp(Keys.LLM.EXPERT_WEIGHTS_NORM, True, _BOOL),
        _hp(Keys.LLM.EXPERT_GATING_FUNC, 2),
        _hp(Keys.LLM.NEXTN_PREDICT_LAYERS, 1),
    ]


def _glm_ffn(t: _Tensors, bid: int, h: int, experts: int, eff: int) -> list[TensorSpec]:
    """GLM's feed-forward: block 0 dense, the others MoE with one shared expert."""
    if bid == 0:
        return [
            t(MODEL_TENSOR.FFN_GATE, (h, 10240), _Q.Q4_K, bid),
            t(MODEL_TENSOR.FFN_UP, (h, 10240), _Q.Q4_K, bid),
            t(MODEL_TENSOR.FFN_DOWN, (10240, h), _Q.Q6_K, bid),
        ]
    return [
        t(MODEL_TENSOR.FFN_GATE_INP, (h, experts), _Q.F32, bid),
        t(MODEL_TENSOR.FFN_EXP_PROBS_B, (experts,), _Q.F32, bid, suffix="bias"),
        t(MODEL_TENSOR.FFN_GATE_EXP, (h, eff, experts), _Q.Q4_K, bid),
        t(MODEL_TENSOR.FFN_UP_EXP, (h, eff, experts), _Q.Q4_K, bid),
        t(MODEL_TENSOR.FFN_DOWN_EXP, (eff, h, experts), _Q.Q5_K, bid),
        t(MODEL_TENSOR.FFN_GATE_SHEXP, (h, eff), _Q.Q8_0, bid),
        t(MODEL_TENSOR.FFN_UP_SHEXP, (h, eff), _Q.Q8_0, bid),
        t(MODEL_TENSOR.FFN_DOWN_SHEXP, (eff, h), _Q.Q8_0, bid),
    ]


def glm4moe_spec(name: str = "GLM-5.3-Flash", nextn_tensors: bool = True) -> ModelSpec:
    """A glm4moe model: 47 trunk blocks (block 0 dense) + MTP block 47 with the six nextn tensors."""
    t, h, vocab, n_blocks, experts, eff = _Tensors(MODEL_ARCH.GLM4_MOE), 2048, 151552, 48, 64, 1536

    def block(bid: int) -> list[TensorSpec]:
        attn = [
            t(MODEL_TENSOR.ATTN_NORM, (h,), _Q.F32, bid),
            t(MODEL_TENSOR.ATTN_Q, (h, 20 * 128), _Q.Q8_0, bid),
            t(MODEL_TENSOR.ATTN_K, (h, 4 * 128), _Q.Q8_0, bid),
            t(MODEL_TENSOR.ATTN_V, (h, 4 * 128), _Q.Q8_0, bid),
            t(MODEL_TENSOR.ATTN_OUT, (20 * 128, h), _Q.Q8_0, bid),
            t(MODEL_TENSOR.ATTN_POST_NORM, (h,), _Q.F32, bid),
        ]
        mtp = _nextn(t, bid, h, vocab, full=True) if bid == n_blocks - 1 and nextn_tensors else []
        return attn + _glm_ffn(t, bid, h, experts, eff) + mtp

    hparams = [
        _hp(Keys.LLM.CONTEXT_LENGTH, 202752),
        _hp(Keys.LLM.EMBEDDING_LENGTH, h),
        _hp(Keys.LLM.BLOCK_COUNT, n_blocks),
        _hp(Keys.LLM.FEED_FORWARD_LENGTH, 10240),
        _hp(Keys.Attention.HEAD_COUNT, 20),
        _hp(Keys.Attention.HEAD_COUNT_KV, 4),
        _hp(Keys.Attention.KEY_LENGTH, 128),
        _hp(Keys.Attention.VALUE_LENGTH, 128),
        _hp(Keys.Rope.FREQ_BASE, 1000000.0, _F32),
        _hp(Keys.Rope.DIMENSION_COUNT, 64),
        _hp(Keys.Attention.LAYERNORM_RMS_EPS, 1e-5, _F32),
        *_glm_moe_hparams(experts, eff),
    ]
    emb, out = _globals(t, h, vocab)
    return _spec(
        MODEL_ARCH.GLM4_MOE,
        name,
        "30B-A3B",
        "mit",
        h,
        hparams,
        GLM_TOKENIZER,
        emb,
        out,
        [block(b) for b in range(n_blocks)],
    )


def glm_dsa_spec() -> ModelSpec:
    """A glm-dsa model shaped like GLM-5.1 (llama.cpp src/models/glm-dsa.cpp): MLA attention with the DSA
    lightning indexer, 78 trunk blocks (block 0 dense) + MTP block 78 with the six nextn tensors. No known
    split-certification roster lists glm-dsa (docs/rules.md 6a), which is what the demo shows with it."""
    t, h, vocab, n_blocks, experts, eff = _Tensors(MODEL_ARCH.GLM_DSA), 6144, 151552, 79, 256, 2048
    mla = _Mla(heads=64, q_lora=2048, kv_lora=512, rope=64, nope=192, v_dim=256)
    idx_heads, idx_dim = 32, 128

    def indexer(bid: int) -> list[TensorSpec]:
        return [
            t(MODEL_TENSOR.INDEXER_K_NORM, (idx_dim,), _Q.F32, bid),
            t(MODEL_TENSOR.INDEXER_K_NORM, (idx_dim,), _Q.F32, bid, suffix="bias"),
            t(MODEL_TENSOR.INDEXER_PROJ, (h, idx_heads), _Q.F32, bid),
            t(MODEL_TENSOR.INDEXER_ATTN_K, (h, idx_dim), _Q.Q8_0, bid),
            t(MODEL_TENSOR.INDEXER_ATTN_Q_B, (mla.q_lora, idx_heads * idx_dim), _Q.Q8_0, bid),
        ]

    def block(bid: int) -> list[TensorSpec]:
        mtp = _nextn(t, bid, h, vocab, full=True) if bid == n_blocks - 1 else []
        attention = [*mla.tensors(t, bid, h), *indexer(bid), t(MODEL_TENSOR.FFN_NORM, (h,), _Q.F32, bid)]
        return attention + _glm_ffn(t, bid, h, experts, eff) + mtp

    hparams = [
        *mla.hparams(h, n_blocks),
        _hp(Keys.Attention.Indexer.HEAD_COUNT, idx_heads),
        _hp(Keys.Attention.Indexer.KEY_LENGTH, idx_dim),
        _hp(Keys.Attention.Indexer.TOP_K, 2048),
        *_glm_moe_hparams(experts, eff),
    ]
    emb, out = _globals(t, h, vocab)
    return _spec(
        MODEL_ARCH.GLM_DSA,
        "GLM-5.1",
        "744B-A40B",
        "mit",
        h,
        hparams,
        GLM_TOKENIZER,
        emb,
        out,
        [block(b) for b in range(n_blocks)],
    )


def llama_spec() -> ModelSpec:
    """Llama-3.2-1B-Instruct: 16 dense blocks, tied embeddings, no MTP."""
    t, h, vocab, n_blocks, ffn = _Tensors(MODEL_ARCH.LLAMA), 2048, 128256, 16, 8192

    def block(bid: int) -> list[TensorSpec]:
        return [
            t(MODEL_TENSOR.ATTN_NORM, (h,), _Q.F32, bid),
            t(MODEL_TENSOR.ATTN_Q, (h, h), _Q.Q4_K, bid),
            t(MODEL_TENSOR.ATTN_K, (h, 512), _Q.Q4_K, bid),
            t(MODEL_TENSOR.ATTN_V, (h, 512), _Q.Q6_K, bid),
            t(MODEL_TENSOR.ATTN_OUT, (h, h), _Q.Q4_K, bid),
            t(MODEL_TENSOR.FFN_NORM, (h,), _Q.F32, bid),
            t(MODEL_TENSOR.FFN_GATE, (h, ffn), _Q.Q4_K, bid),
            t(MODEL_TENSOR.FFN_UP, (h, ffn), _Q.Q4_K, bid),
            t(MODEL_TENSOR.FFN_DOWN, (ffn, h), _Q.Q6_K, bid),
        ]

    hparams = [
        _hp(Keys.LLM.CONTEXT_LENGTH, 131072),
        _hp(Keys.LLM.EMBEDDING_LENGTH, h),
        _hp(Keys.LLM.BLOCK_COUNT, n_blocks),
        _hp(Keys.LLM.FEED_FORWARD_LENGTH, ffn),
        _hp(Keys.Attention.HEAD_COUNT, 32),
        _hp(Keys.Attention.HEAD_COUNT_KV, 8),
        _hp(Keys.Attention.KEY_LENGTH, 64),
        _hp(Keys.Attention.VALUE_LENGTH, 64),
        _hp(Keys.Rope.FREQ_BASE, 500000.0, _F32),
        _hp(Keys.Rope.DIMENSION_COUNT, 64),
        _hp(Keys.Attention.LAYERNORM_RMS_EPS, 1e-5, _F32),
        _hp(Keys.LLM.VOCAB_SIZE, vocab),
    ]
    emb, out = _globals(t, h, vocab, tied=True)
    out.append(t(MODEL_TENSOR.ROPE_FREQS, (32,), _Q.F32))
    return _spec(
        MODEL_ARCH.LLAMA,
        "Llama-3.2-1B-Instruct",
        "1B",
        "llama3.2",
        h,
        hparams,
        LLAMA3_TOKENIZER,
        emb,
        out,
        [block(b) for b in range(n_blocks)],
    )


def _nemotron_kind(bid: int, n_trunk: int) -> str:
    """Layer pattern: M = Mamba-2, E = latent MoE, * = attention; the appended MTP block is X."""
    if bid >= n_trunk:
        return "X"
    if bid % 2:
        return "E"
    return "*" if bid % 8 == 4 else "M"


def nemotron_spec() -> ModelSpec:
    """Nemotron 3 Super 120B-A12B: hybrid Mamba-2 / latent-MoE / attention, 88 trunk blocks + MTP blk.88."""
    t, h, vocab, n_trunk = _Tensors(MODEL_ARCH.NEMOTRON_H_MOE), 4096, 131072, 88
    experts, latent, eff, shared = 512, 1024, 2560, 5120

    def attention(bid: int) -> list[TensorSpec]:
        return [
            t(MODEL_TENSOR.ATTN_Q, (h, 32 * 128), _Q.Q8_0, bid),
            t(MODEL_TENSOR.ATTN_K, (h, 2 * 128), _Q.Q8_0, bid),
            t(MODEL_TENSOR.ATTN_V, (h, 2 * 128), _Q.Q8_0, bid),
            t(MODEL_TENSOR.ATTN_OUT, (32 * 128, h), _Q.Q8_0, bid),
        ]

    def moe(bid: int) -> list[TensorSpec]:
        return [
            t(MODEL_TENSOR.FFN_GATE_INP, (h, experts), _Q.F32, bid),
            t(MODEL_TENSOR.FFN_EXP_PROBS_B, (experts,), _Q.F32, bid, suffix="bias"),
            t(MODEL_TENSOR.MOE_LATENT_DOWN, (h, latent), _Q.Q8_0, bid),
            t(MODEL_TENSOR.MOE_LATENT_UP, (latent, h), _Q.Q8_0, bid),
            t(MODEL_TENSOR.FFN_UP_EXP, (latent, eff, experts), _Q.Q4_K, bid),
            t(MODEL_TENSOR.FFN_DOWN_EXP, (eff, latent, experts), _Q.Q4_K, bid),
            t(MODEL_TENSOR.FFN_UP_SHEXP, (h, shared), _Q.Q8_0, bid),
            t(MODEL_TENSOR.FFN_DOWN_SHEXP, (shared, h), _Q.Q8_0, bid),
        ]

    def mamba(bid: int) -> list[TensorSpec]:
        inner, groups, state, heads = 8192, 8, 128, 64
        return [
            t(MODEL_TENSOR.SSM_IN, (h, 2 * inner + 2 * groups * state + heads), _Q.Q8_0, bid),
            t(MODEL_TENSOR.SSM_CONV1D, (4, inner + 2 * groups * state), _Q.F32, bid),
            t(MODEL_TENSOR.SSM_DT, (heads,), _Q.F32, bid, suffix="bias"),
            t(MODEL_TENSOR.SSM_A, (heads,), _Q.F32, bid, suffix=""),
            t(MODEL_TENSOR.SSM_D, (heads,), _Q.F32, bid),
            t(MODEL_TENSOR.SSM_NORM, (inner // groups, groups), _Q.F32, bid),
            t(MODEL_TENSOR.SSM_OUT, (inner, h), _Q.Q8_0, bid),
        ]

    def block(bid: int) -> list[TensorSpec]:
        kind = _nemotron_kind(bid, n_trunk)
        body = {"M": mamba, "E": moe, "*": attention}.get(kind)
        norm = [t(MODEL_TENSOR.ATTN_NORM, (h,), _Q.F32, bid)]
        if body is not None:
            return norm + body(bid)
        return norm + attention(bid) + moe(bid) + _nextn(t, bid, h, vocab, full=False)

    kv_heads = [2 if _nemotron_kind(b, n_trunk) in "*X" else 0 for b in range(n_trunk + 1)]
    hparams = [
        _hp(Keys.LLM.CONTEXT_LENGTH, 262144),
        _hp(Keys.LLM.EMBEDDING_LENGTH, h),
        _hp(Keys.LLM.BLOCK_COUNT, n_trunk + 1),
        _hp(Keys.Attention.HEAD_COUNT, 32),
        _hp(Keys.Attention.HEAD_COUNT_KV, kv_heads, _ARR, _U32),
        _hp(Keys.Attention.KEY_LENGTH, 128),
        _hp(Keys.Attention.VALUE_LENGTH, 128),
        _hp(Keys.Attention.LAYERNORM_RMS_EPS, 1e-5, _F32),
        *_ssm_hparams(conv=4, state=128, groups=8, rank=64, inner=8192),
        _hp(Keys.LLM.EXPERT_COUNT, experts),
        _hp(Keys.LLM.EXPERT_USED_COUNT, 22),
        _hp(Keys.LLM.EXPERT_FEED_FORWARD_LENGTH, eff),
        _hp(Keys.LLM.EXPERT_SHARED_FEED_FORWARD_LENGTH, shared),
        _hp(Keys.LLM.MOE_LATENT_SIZE, latent),
        _hp(Keys.LLM.EXPERT_WEIGHTS_NORM, True, _BOOL),
        _hp(Keys.LLM.EXPERT_WEIGHTS_SCALE, 2.5, _F32),
        _hp(Keys.LLM.EXPERT_GATING_FUNC, 2),
        _hp(Keys.LLM.NEXTN_PREDICT_LAYERS, 1),
    ]
    emb, out = _globals(t, h, vocab)
    return _spec(
        MODEL_ARCH.NEMOTRON_H_MOE,
        "NVIDIA-Nemotron-3-Super-120B-A12B",
        "120B-A12B",
        "other",
        h,
        hparams,
        NEMOTRON_TOKENIZER,
        emb,
        out,
        [block(b) for b in range(n_trunk + 1)],
    )


def qwen3moe_spec() -> ModelSpec:
    """Qwen3-235B-A22B: 94 MoE blocks, 151936 vocab; the optional ingest-scaling benchmark package."""
    t, h, vocab, n_blocks, experts, eff = _Tensors(MODEL_ARCH.QWEN3MOE), 4096, 151936, 94, 128, 1536

    def block(bid: int) -> list[TensorSpec]:
        return [
            t(MODEL_TENSOR.ATTN_NORM, (h,), _Q.F32, bid),
            t(MODEL_TENSOR.ATTN_Q, (h, 64 * 128), _Q.Q8_0, bid),
            t(MODEL_TENSOR.ATTN_K, (h, 4 * 128), _Q.Q8_0, bid),
            t(MODEL_TENSOR.ATTN_V, (h, 4 * 128), _Q.Q8_0, bid),
            t(MODEL_TENSOR.ATTN_OUT, (64 * 128, h), _Q.Q8_0, bid),
            t(MODEL_TENSOR.ATTN_Q_NORM, (128,), _Q.F32, bid),
            t(MODEL_TENSOR.ATTN_K_NORM, (128,), _Q.F32, bid),
            t(MODEL_TENSOR.FFN_NORM, (h,), _Q.F32, bid),
            t(MODEL_TENSOR.FFN_GATE_INP, (h, experts), _Q.F32, bid),
            t(MODEL_TENSOR.FFN_GATE_EXP, (h, eff, experts), _Q.Q4_K, bid),
            t(MODEL_TENSOR.FFN_UP_EXP, (h, eff, experts), _Q.Q4_K, bid),
            t(MODEL_TENSOR.FFN_DOWN_EXP, (eff, h, experts), _Q.Q5_K, bid),
        ]

    hparams = [
        _hp(Keys.LLM.CONTEXT_LENGTH, 40960),
        _hp(Keys.LLM.EMBEDDING_LENGTH, h),
        _hp(Keys.LLM.BLOCK_COUNT, n_blocks),
        _hp(Keys.Attention.HEAD_COUNT, 64),
        _hp(Keys.Attention.HEAD_COUNT_KV, 4),
        _hp(Keys.Attention.KEY_LENGTH, 128),
        _hp(Keys.Attention.VALUE_LENGTH, 128),
        _hp(Keys.Rope.FREQ_BASE, 1000000.0, _F32),
        _hp(Keys.Attention.LAYERNORM_RMS_EPS, 1e-6, _F32),
        _hp(Keys.LLM.EXPERT_COUNT, experts),
        _hp(Keys.LLM.EXPERT_USED_COUNT, 8),
        _hp(Keys.LLM.EXPERT_FEED_FORWARD_LENGTH, eff),
    ]
    emb, out = _globals(t, h, vocab)
    return _spec(
        MODEL_ARCH.QWEN3MOE,
        "Qwen3-235B-A22B",
        "235B-A22B",
        "apache-2.0",
        h,
        hparams,
        QWEN3_TOKENIZER,
        emb,
        out,
        [block(b) for b in range(n_blocks)],
    )


def _spec(
    arch: MODEL_ARCH,
    name: str,
    size_label: str,
    license_: str,
    hidden: int,
    hparams: list[KV],
    tokenizer: TokenizerSpec,
    embeddings: list[TensorSpec],
    output: list[TensorSpec],
    blocks: list[list[TensorSpec]],
) -> ModelSpec:
    return ModelSpec(
        arch,
        name,
        size_label,
        license_,
        hidden,
        tuple(hparams),
        tokenizer,
        tuple(embeddings),
        tuple(output),
        tuple(tuple(b) for b in blocks),
    )


# --- writing GGUF files -----------------------------------------------------------------------


@dataclass(frozen=True)
class BuiltFile:
    path: str
    entry: FileEntry
    tensors: tuple[TensorSpec, ...]
    tensor_offsets: tuple[int, ...]  # absolute file offsets of each tensor's data
    header_bytes: int

    @property
    def tensor_bytes(self) -> int:
        return sum(t.nbytes for t in self.tensors)


def pad(n: int, align: int = GGUF_DEFAULT_ALIGNMENT) -> int:
    return (n + align - 1) // align * align


_tmp_names = count()


def write_gguf(
    store: Store,
    path: str,
    arch: str,
    kv: Sequence[KV],
    tensors: Sequence[TensorSpec],
    *,
    with_data: bool = True,
) -> BuiltFile:
    """Write one header with GGUFWriter, extend it to its declared size as a hole, store it by oid.

    `with_data=False` writes a metadata-only file: the tensor directory without the tensors.
    """
    tmp = store.root / "tmp" / f"{os.getpid()}-{next(_tmp_names)}.gguf"
    tmp.parent.mkdir(parents=True, exist_ok=True)
    with _quiet_gguf():
        _write_header(tmp, arch, kv, tensors)
    header = tmp.read_bytes()
    offsets = [len(header)]
    for t in tensors:
        offsets.append(offsets[-1] + pad(t.nbytes))
    size = offsets[-1] if with_data else len(header)
    oid = hashlib.sha256(header + str(size).encode("ascii")).hexdigest()
    os.truncate(tmp, size)
    entry = store.put_lfs_file(tmp, oid, size)
    return BuiltFile(path, entry, tuple(tensors), tuple(offsets[:-1]), len(header))


def _write_header(tmp: Path, arch: str, kv: Sequence[KV], tensors: Sequence[TensorSpec]) -> None:
    writer = _Writer(tmp, arch)
    for key, value, vtype, sub in kv:
        writer.add_key_value(key, value, vtype, sub)
    for t in tensors:
        # GGUFWriter takes numpy order (outermost first) and writes it reversed, ne0 first.
        writer.add_tensor_info(t.name, t.shape[::-1], np.dtype(np.float32), t.nbytes, raw_dtype=t.qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    assert writer.fout is not None
    writer.write_padding(writer.fout[0], writer.fout[0].tell())
    writer.close()


class _NoEndianNote(logging.Filter):
    """Drops GGUFWriter's "This GGUF file is for Little Endian only" note. Every GGUFWriter logs it at INFO
    as it is built (devhub builds one per packed array too, outside _quiet_gguf); the GGUF format is
    little-endian by default and devhub never writes anything else, so the line tells nobody anything.
    Any other line of that logger passes."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Little Endian only" not in record.getMessage()


logging.getLogger(GGUFWriter.__module__).addFilter(_NoEndianNote())


@contextlib.contextmanager
def _quiet_gguf() -> Iterator[None]:
    # GGUFWriter logs its plan at INFO for every file; hundreds of files would flood the console.
    gguf_logger = logging.getLogger(GGUFWriter.__module__)
    level = gguf_logger.level
    gguf_logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        gguf_logger.setLevel(level)


@dataclass
class PackageFiles:
    """The GGUF files of one package build, by role."""

    shared: dict[str, BuiltFile] = field(default_factory=dict)  # v1: metadata/embeddings/output; v2: ids
    layers: list[BuiltFile] = field(default_factory=list)  # in block order; v2 split parts in part order
    sidecars: dict[str, BuiltFile] = field(default_factory=dict)  # v2: artifact id -> file (mmproj)

    def all(self) -> list[BuiltFile]:
        return [*self.shared.values(), *self.layers, *self.sidecars.values()]


def build_v1_files(store: Store, spec: ModelSpec, digits: int) -> PackageFiles:
    """Schema v1: every file repeats the whole KV metadata (tokenizer included)."""
    kv, arch, files = spec.model_kv(), spec.arch_name, PackageFiles()
    files.shared["metadata"] = write_gguf(store, "shared/metadata.gguf", arch, kv, [])
    files.shared["embeddings"] = write_gguf(store, "shared/embeddings.gguf", arch, kv, spec.embeddings)
    files.shared["output"] = write_gguf(store, "shared/output.gguf", arch, kv, spec.output)
    for i, block in enumerate(spec.blocks):
        files.layers.append(write_gguf(store, f"layers/layer-{i:0{digits}d}.gguf", arch, kv, block))
    return files


def build_v2_files(store: Store, spec: ModelSpec, mmproj: Sidecar | None = None) -> PackageFiles:
    """Schema v2: common + layer files, then shared/metadata.gguf describing where every tensor lives.

    A block whose tensors exceed SPLIT_BYTES is written as `layer-NNNNN-partMM.gguf` files, as the
    real writer does; an mmproj sidecar, if any, is its own `clip` GGUF outside the locator.
    """
    arch, files = spec.arch_name, PackageFiles()
    common = write_gguf(store, "shared/common.gguf", arch, spec.model_kv(), spec.embeddings + spec.output)
    for i, block in enumerate(spec.blocks):
        groups = split_groups(block)
        for part, group in enumerate(groups):
            suffix = f"-part{part:02d}" if len(groups) > 1 else ""
            path = f"layers/layer-{i:05d}{suffix}.gguf"
            files.layers.append(write_gguf(store, path, arch, spec.core_kv(), group))
    parts = [common, *files.layers]
    files.shared["metadata"] = write_gguf(
        store,
        "shared/metadata.gguf",
        arch,
        spec.model_kv() + _locator_kv(parts),
        [t for p in parts for t in p.tensors],
        with_data=False,
    )
    files.shared["common"] = common
    if mmproj is not None:
        kv, tensors = mmproj.header()
        files.sidecars[mmproj.artifact_id] = write_gguf(store, mmproj.path, "clip", kv, tensors)
    return files


@dataclass(frozen=True)
class Sidecar:
    """A loader sidecar file of a v2 package (today only `mmproj`)."""

    artifact_id: str
    path: str
    name: str
    header: Callable[[], tuple[list[KV], list[TensorSpec]]]


def split_groups(tensors: Sequence[TensorSpec], limit: int = SPLIT_BYTES) -> list[list[TensorSpec]]:
    """Tensors in order, cut into groups of at most `limit` bytes (a lone bigger tensor keeps its own)."""
    groups: list[list[TensorSpec]] = [[]]
    size = 0
    for t in tensors:
        if groups[-1] and size + pad(t.nbytes) > limit:
            groups.append([])
            size = 0
        groups[-1].append(t)
        size += pad(t.nbytes)
    return groups


def _locator_kv(parts: Sequence[BuiltFile]) -> list[KV]:
    """skippy.package.* keys: part i is the i-th catalog entry after metadata; offsets are absolute."""
    part_of = [i for i, p in enumerate(parts) for _ in p.tensors]
    offsets = [o for p in parts for o in p.tensor_offsets]
    sizes = [t.nbytes for p in parts for t in p.tensors]
    return [
        ("skippy.package.metadata_only", True, _BOOL, None),
        ("skippy.package.part_count", len(parts), _U32, None),
        ("skippy.package.locator_schema", 1, _U32, None),
        ("skippy.package.tensor_part", part_of, _ARR, _U32),
        ("skippy.package.tensor_offset", offsets, _ARR, GGUFValueType.UINT64),
        ("skippy.package.tensor_size", sizes, _ARR, GGUFValueType.UINT64),
        ("skippy.package.tensor_alignment", [GGUF_DEFAULT_ALIGNMENT] * len(sizes), _ARR, _U32),
    ]
