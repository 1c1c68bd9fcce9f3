"""Padded vs packed (rl.packing): the two training passes' time on a response-length distribution.

    python -m microcoder_jax.plan.packing --config=configs/paper.py:qwen3-1.7b,microcoder --topology=v5e-8
    ... --mean=0.45 --at_cap=0.05      # lognormal responses: mean and share at the cap (of max_new)
    ... --paper                        # the paper's lengths: ~2,000-3,700 of 4K (mean 0.7, 10% at the cap)

Prompts are spread uniformly over the upper half of the widest bucket. The real packer
(rl.packing) lays a sampled batch out, and the planner's analytic model (plan.analytic) times
both passes on each layout: compute as the roofline max(FLOPs / peak, HBM bytes / bandwidth),
plus the FSDP collectives (weights gathered per micro-batch, gradients reduced) over the chip's
ICI bandwidth, not overlapped. An estimate from public peak figures, not a measurement.
"""

from __future__ import annotations

import dataclasses
import math
import sys

import numpy as np


def lognormal_lengths(rng, n: int, cap: int, mean_frac: float, at_cap: float) -> np.ndarray:
    """n lengths in [1, cap]: lognormal with P(X >= cap) = at_cap, E[min(X, cap)] = mean_frac * cap."""
    z = _normal_quantile(1 - at_cap)
    phi = lambda x: 0.5 * (1 + math.erf(x / math.sqrt(2)))  # noqa: E731
    mean = lambda s: math.exp(-z * s + s * s / 2) * phi(z - s) + at_cap  # noqa: E731  (units of cap)
    sigma = min((i / 1000 for i in range(1, 3000)), key=lambda s: abs(mean(s) - mean_frac))
    x = rng.lognormal(math.log(cap) - z * sigma, sigma, n)
    return np.clip(np.round(x), 1, cap).astype(np.int32)


def _normal_quantile(p: float) -> float:
    lo, hi = -8.0, 8.0
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if 0.5 * (1 + math.erf(mid / math.sqrt(2))) < p else (lo, mid)
    return (lo + hi) / 2


def sample_mask(rows: int, prompt_width: int, max_new: int, mean_frac: float, at_cap: float, seed: int = 0):
    """An attention mask [rows, P + max_new] of the rollout layout with these lengths."""
    rng = np.random.default_rng(seed)
    prompts = rng.integers(max(prompt_width // 2, 1), prompt_width + 1, rows)
    responses = lognormal_lengths(rng, rows, max_new, mean_frac, at_cap)
    cols = np.arange(prompt_width + max_new)[None]
    return ((cols >= prompt_width - prompts[:, None]) & (cols < prompt_width + responses[:, None])).astype(np.int32)


def collective_bytes(mc, mesh, micro_steps: int, train: bool, chunks: int = 0) -> float:
    """Per-device bytes of one pass's FSDP collectives: each micro-batch gathers the bf16 weights
    (twice in the train step: forward, and backward under remat) and the train step reduces their
    gradient; `chunks` > 0 adds the head gathered (and its gradient reduced) in every chunk. LoRA
    (`lora.rank` > 0): the base is gathered at its stored bytes (1 per weight for an int8 base) and
    only the adapters' float32 gradient is reduced: no gradient of the frozen base or head moves."""
    from microcoder_jax import sharding
    from microcoder_jax.plan.analytic import _dims, weights_read

    d, _, _, _, _, v, l, layer = _dims(mc)
    shards, t = sharding.batch_shards(mesh), mesh.shape["tensor"]
    share = (shards - 1) / max(shards, 1)
    weights = weights_read(mc) / t * share
    head = v * d * 2 / t * share
    if getattr(mc, "lora_rank", 0):
        adapters = mc.num_adapter_params() * 4 / t * share
        per_micro = (2 * weights + adapters if train else weights) + chunks * head
    else:
        per_micro = (3 if train else 1) * weights + chunks * head * (2 if train else 1)
    return micro_steps * per_micro


def compare(config, topology, mean_frac: float = 0.45, at_cap: float = 0.05, seed: int = 0) -> dict:
    """Useful-token fractions and each pass's estimated seconds, padded and packed (see the module doc)."""
    from microcoder_jax import config as config_lib
    from microcoder_jax.plan import planner, programs

    rl = dataclasses.replace(config_lib.rl_config_of(config), packing=True)
    sh = programs.shapes_of(config, rl, planner.abstract_mesh(config, topology.num_devices))
    return compare_mask(config, topology, sample_mask(sh.rows, sh.prompt_width, sh.max_new, mean_frac, at_cap, seed))


def compare_mask(config, topology, mask) -> dict:
    """`compare` on a given rollout attention mask [rows, P + max_new] (the planner's length profile)."""
    from microcoder_jax import config as config_lib
    from microcoder_jax.plan import analytic, planner, programs
    from microcoder_jax.rl import packing

    rl = dataclasses.replace(config_lib.rl_config_of(config), packing=True)
    mesh = planner.abstract_mesh(config, topology.num_devices)
    sh = programs.shapes_of(config, rl, mesh)
    progs = {
        "old log-probs": programs.logprob_program(config, rl, mesh, sh, topology.platform),
        "train step": programs.train_program(config, rl, mesh, sh, topology.platform),
    }
    useful = int(mask.sum())
    chip, n, ici = topology.chip, topology.num_devices, topology.chip.ici_bandwidth or float("nan")
    step_pack = packing.for_step(mask, rl, mesh)
    lp_pack, lp_micro = packing.for_logprobs(mask, rl, mesh)
    width = step_pack.src.shape[1]
    out = {
        "useful_padded": useful / mask.size,
        "useful_packed_step": packing.useful_fraction(step_pack),
        "packed_rows_step": step_pack.src.shape[0],
        "packed_rows_logprobs": lp_pack.src.shape[0],
        "rows": sh.rows,
        "width": width,
        "seq": sh.seq,
        "passes": {},
    }
    step_micro = packing.micro_rows(sh.step_micro, sh.seq, rl.pack_width)
    padded = dataclasses.replace(sh, prompt_block=True)  # padded rows skip the prompt's LM head
    layouts = {
        "padded": (padded, padded),
        "packed": (
            dataclasses.replace(sh, rows=lp_pack.src.shape[0], prompt_width=width - sh.max_new, micro=lp_micro),
            dataclasses.replace(
                sh, rows=step_pack.src.shape[0], prompt_width=width - sh.max_new, step_micro=step_micro
            ),
        ),
    }
    for name, (lp_sh, st_sh) in layouts.items():
        for prog_name, s, train in (("old log-probs", lp_sh, False), ("train step", st_sh, True)):
            est = (analytic.train_step if train else analytic.logprobs)(progs[prog_name], mesh, s, rl)
            steps = s.rows // (s.step_micro if train else s.micro)
            coll = collective_bytes(progs[prog_name].model_config, mesh, steps, train) / ici
            out["passes"][(prog_name, name)] = {
                "compute_s": est.seconds(chip, n),
                "ici_s": coll,
                "model_flops": est.model_flops,
            }
    return out


def render(result: dict, mean_frac: float, at_cap: float) -> str:
    r = result
    lines = [
        f"responses: lognormal, mean {mean_frac:.0%} of max_new, {at_cap:.0%} at the cap; prompts uniform "
        f"in the upper half of the bucket ({r['rows']} rows of {r['seq']})",
        f"useful tokens: {r['useful_padded']:.1%} of padded positions, {r['useful_packed_step']:.1%} of "
        f"packed ({r['packed_rows_step']} packed rows of {r['width']} in the train step, "
        f"{r['packed_rows_logprobs']} in the log-prob pass)",
        f"{'pass':14s} {'padded s':>9s} {'packed s':>9s} {'speed-up':>9s}   (compute + ICI each, estimate)",
    ]
    for prog in ("old log-probs", "train step"):
        pad, pack = (r["passes"][(prog, k)] for k in ("padded", "packed"))
        tp, tk = pad["compute_s"] + pad["ici_s"], pack["compute_s"] + pack["ici_s"]
        lines.append(
            f"{prog:14s} {tp:9.1f} {tk:9.1f} {tp / tk:8.2f}x   ({pad['compute_s']:.1f} + {pad['ici_s']:.1f}"
            f" -> {pack['compute_s']:.1f} + {pack['ici_s']:.1f})"
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    from microcoder_jax import cli
    from microcoder_jax.plan.flags import define_flags as _define_flags
    from microcoder_jax.plan.topologies import parse_topology

    argv = sys.argv[1:] if argv is None else list(argv)

    def flags(fv):
        from absl import flags as f

        _define_flags(fv)
        f.DEFINE_float("mean", 0.45, "mean response length, a fraction of max_new", flag_values=fv)
        f.DEFINE_float("at_cap", 0.05, "share of responses cut at max_new", flag_values=fv)
        f.DEFINE_boolean("paper", False, "the paper's lengths (mean 0.7, 10% at the cap)", flag_values=fv)

    def body() -> int:
        fv = cli.parse(
            argv, prog="python -m microcoder_jax.plan.packing", doc=__doc__, default_file=None, define_flags=flags
        )
        mean, at_cap = (0.7, 0.1) if fv.paper else (fv.mean, fv.at_cap)
        topology = parse_topology(fv.topology, fv.devices, fv.hbm_gib)
        print(render(compare(fv.config, topology, mean, at_cap), mean, at_cap))
        return 0

    return cli.main_guard(body)


if __name__ == "__main__":
    sys.exit(main())
