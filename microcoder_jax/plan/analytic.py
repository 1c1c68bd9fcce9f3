"""The planner's own per-device memory and time model of each program, beside XLA's figures.

Memory: arguments are exact (the abstract inputs' shard shapes); temporaries are the terms a
reader can check by hand: gradients and optimizer temporaries, one layer's gathered weights,
activations under the remat policy, the vocab-projection chunk, the KV cache. Time: FLOPs and
HBM bytes per program with every loop's trip count counted here (XLA's cost analysis counts a
loop body once), against the chip's peak and bandwidth: a roofline bound, not a measurement.

LoRA (`lora.rank` > 0, models/lora.py): the train state's bytes are the abstract state's (the base
in the compute dtype or int8, fp32 adapters, Adam moments of the adapters); gradients and the
optimizer's temporaries are the adapters'; the training passes read the base at its stored bytes
(1 per weight for an int8 base) and add the adapters' (x A) B; the train step forms no weight
gradient for the base or the head (backward = activation gradients + the adapters' own). The
forward-only log-prob pass merges the adapters into a compute-dtype copy first and reads that.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp

from microcoder_jax import sharding
from microcoder_jax.plan.programs import Program, Shapes, local_bytes


@dataclasses.dataclass
class Estimate:
    """Per-device bytes by component, and the program's FLOPs / bytes / time on the whole mesh."""

    components: dict  # name -> bytes per device
    flops: float = 0.0  # whole program, all devices
    model_flops: float = 0.0  # without rematerialisation (MFU numerator)
    hbm_bytes: float = 0.0  # per device
    tokens: int = 0  # decode: tokens generated (rows x steps), for tokens/s

    @property
    def total(self) -> int:
        return int(sum(self.components.values()))

    def seconds(self, chip, devices: int) -> float:
        if not chip.peak_flops:
            return float("nan")
        return max(self.flops / (devices * chip.peak_flops), self.hbm_bytes / chip.hbm_bandwidth)


def _dims(mc):
    d, h, k, hd, f, v, l = (
        mc.hidden_size,
        mc.num_heads,
        mc.num_kv_heads,
        mc.head_dim,
        mc.intermediate_size,
        mc.vocab_size,
        mc.num_layers,
    )
    layer = d * hd * (h + 2 * k) + h * hd * d + 3 * d * f  # matmul weights of one layer
    return d, h, k, hd, f, v, l, layer


def _lora(mc) -> bool:
    return bool(getattr(mc, "lora_rank", 0))


def _layer_weight_bytes(mc) -> int:
    """Bytes per element of the layers' matmul weights as a training pass gathers and reads them:
    2 (the fp32 master is cast to bf16 before its gather; a LoRA base is stored in the compute
    dtype), 1 for an int8 base (lora.base_dtype=int8: gathered as int8, scaled after the matmul)."""
    return 1 if getattr(mc, "base_dtype", "") == "int8" else 2


def _gathered_for_training(mc, layer: int) -> int:
    """One layer's weights alive in the train step, double-buffered: two bf16 copies; an int8 base
    gathers two int8 copies and casts one to bf16 for its matmuls (the forward's `astype`), which
    XLA keeps alive too (two Qwen3-1.7B-wide layers on v5e:2x2: int8 temporaries within 1% of bf16's)."""
    if _layer_weight_bytes(mc) == 1:
        return 2 * layer + layer * 2
    return 2 * layer * 2


def weights_read(mc) -> float:
    """Bytes of one read of every matmul weight in a training pass (all layers and the embedding /
    head, whole, before any tensor split): the layers at `_layer_weight_bytes`, the head in bf16."""
    d, _, _, _, _, v, l, layer = _dims(mc)
    return float(l * layer * _layer_weight_bytes(mc) + v * d * 2)


def _unmerged(mc) -> bool:
    return _lora(mc) and getattr(mc, "lora_decode", "merged") == "unmerged"


def decode_weight_bytes(mc) -> int:
    """Bytes of the weights one decode step reads (whole, before any tensor split): the merged
    compute-dtype copy (2 a weight); under lora.decode=unmerged the stored base (1 a weight for an
    int8 base, plus its float32 scales), the adapters in the compute dtype and the head."""
    d, _, _, _, _, v, l, layer = _dims(mc)
    if not _unmerged(mc):
        return (l * layer + v * d) * 2
    scales = l * sum(o for _, o in mc.projection_dims().values()) * 4 if _layer_weight_bytes(mc) == 1 else 0
    return l * layer * _layer_weight_bytes(mc) + scales + mc.num_adapter_params() * 2 + v * d * 2


def decode_flops_per_token(mc) -> float:
    """Matmul FLOPs of one decoded token (every layer and the head); unmerged adds (x A) B."""
    d, _, _, _, _, v, l, layer = _dims(mc)
    return 2.0 * (l * layer + v * d) + (2.0 * mc.num_adapter_params() if _unmerged(mc) else 0.0)


def adapter_flops(mc, tokens: float) -> float:
    """Forward FLOPs of the LoRA adapters over `tokens`: (x A) B per adapted projection, 2 r (in + out)
    per token (0 without LoRA)."""
    return 2.0 * mc.num_adapter_params() * tokens if _lora(mc) else 0.0


def recompute(mc, slots: int, width: int, max_new: int, prompts: int) -> tuple[float, float, int]:
    """`paged_engine.recompute` once (train.partial_recompute, at each weight update): FLOPs, HBM
    bytes (the weights, once per chunk of RECOMPUTE_CHUNK sequences) and tokens. It prefills every slot at the
    full width P + W (its real tokens are fewer: the cost of one static shape) and every prompt
    position at P, dense, whole; the prompts' last-position head is left out."""
    *_, l, layer = _dims(mc)
    full = width + max_new
    tokens = slots * full + prompts * width
    causal_skip = mc.attention in ("splash", "cudnn")
    flops = 2.0 * l * layer * tokens + adapter_flops(mc, tokens)
    flops += _attention_flops(mc, slots, full, full, causal_skip) + _attention_flops(
        mc, prompts, width, width, causal_skip
    )
    from microcoder_jax.sampling.paged_sampler import RECOMPUTE_CHUNK as c

    chunks = -(-slots // c) + -(-prompts // c)
    return flops, chunks * weights_read(mc), tokens


def _split(n: int, mesh) -> int:
    """Rows per device of `n` rows on `mesh`: split over the data axes when they divide them, else
    every device holds all (sharding.rows_split, the rule sharding.put_batch places them by)."""
    return n // sharding.batch_shards(mesh) if sharding.rows_split(mesh, n) else n


def _mesh(mesh):
    """(tensor, devices) of `mesh`."""
    return mesh.shape["tensor"], mesh.size


def _attention_flops(mc, rows, q_len, k_len, causal_skip: bool) -> float:
    """QK^T and PV of every layer (a causal kernel skips the masked half)."""
    _, h, _, hd, _, _, l, _ = _dims(mc)
    return 4.0 * rows * q_len * k_len * h * hd * l * (0.5 if causal_skip else 1.0)


def _learner_work(mc, sh: Shapes, micro: int, local: int, splash: bool) -> tuple[float, float]:
    """(token columns, attention FLOPs) of the learner's layers over all rows, in micro-batches of
    `micro` with `local` rows on each device: each row's own columns, or under rl.share_prompts
    each device's slice runs one prompt per group it holds rows of (Shapes.learner_tokens)."""
    w = sh.shared_width
    if not w:
        return float(sh.rows * sh.seq), _attention_flops(mc, sh.rows, sh.seq, sh.seq, splash)
    slices = sh.rows / local  # (micro-batch, device) slices
    prompts = slices * -(-local // sh.sharing(micro))
    attn = _attention_flops(mc, prompts, w, w, splash) + _attention_flops(mc, sh.rows, sh.seq - w, sh.seq, False)
    return float(slices * sh.learner_tokens(local, micro)), attn


def _shared_scores(mc, sh: Shapes, local: int, t: int) -> int:
    """Under rl.share_prompts, one layer's attention scores (f32) and probabilities (bf16) of the
    answers over the shared prompt and themselves: that attention is XLA's, no fused kernel."""
    _, h, _, _, _, _, _, _ = _dims(mc)
    return local * (h // t) * (sh.seq - sh.shared_width) * sh.seq * 6 if sh.shared_width else 0


def _layer_activations(mc, tokens: int, splash: bool, t: int, seq: int) -> int:
    """One layer's working set in the backward pass (recomputed under remat), per device."""
    d, h, k, hd, f, _, _, _ = _dims(mc)
    per_token = 2 * ((2 * h + 2 * k) * hd // t + 3 * f // t) * 2 + 4 * d * 4
    attn = 0 if splash else (tokens // seq) * (h // t) * seq * seq * 10  # scores f32, probs f32 + bf16
    return tokens * per_token + attn


def train_step(program: Program, mesh, sh: Shapes, rl_config) -> Estimate:
    """The train step. Full fine-tuning: weight gradients of every matrix (accumulated in fp32 over
    micro-batches) and Adam on all of them. LoRA: the same forward and activation gradients through
    the frozen base, gradients and Adam of the adapters only, no weight-gradient matmuls for the
    base or the head."""
    from microcoder_jax.rl.step import trainable_part

    mc = program.model_config
    d, h, k, hd, f, v, l, layer = _dims(mc)
    t, n = _mesh(mesh)
    state, batch = program.args
    trained = local_bytes(trainable_part(state.params))  # every param, or the LoRA adapters
    mb = _split(sh.step_micro, mesh)
    tokens = sh.learner_tokens(mb, sh.step_micro)
    splash = mc.attention in ("splash", "cudnn")  # fused: no scores in HBM, causal blocks skipped
    saved = {
        "full": l * tokens * d * 2,
        "none": l * _layer_activations(mc, tokens, splash, t, sh.seq),
        "dots": l * tokens * ((h + 2 * k) * hd // t + h * hd // t + 2 * f // t + d) * 2,
        "dots_saveable": l * tokens * ((h + 2 * k) * hd // t + h * hd // t + 2 * f // t + d) * 2,
    }[mc.remat]
    chunk = min(rl_config.logprob_chunk, sh.head_tokens(1))  # the LM head's chunk of the scored columns
    lora = _lora(mc)
    # The LM head's gradient is summed once at the log-prob shard_map's boundary, straight into the
    # sharded gradient (rl/logprobs.head_logprobs): no full-size f32 copy of it is alive.
    comp = {
        "params + optimizer state (args)": local_bytes(state),
        "batch (args)": local_bytes(batch),
        f"gradients of the {'adapters' if lora else 'params'} (accumulated + one micro-batch)": 2 * trained,
        "optimizer update temporaries": trained,
        "gathered weights (one layer, double-buffered)": _gathered_for_training(mc, layer) // t,
        f"activations (remat={mc.remat})": saved + _layer_activations(mc, tokens, splash, t, sh.seq),
        "final hidden + its gradient": tokens * d * 4 * 2,
        "vocab-projection chunk (logits and their gradient)": mb * chunk * (v // t) * 4 * 2,
    }
    if sh.shared_width:
        comp["shared-prompt attention scores (XLA, one layer)"] = _shared_scores(mc, sh, mb, t)
    rows_tokens, attn = _learner_work(mc, sh, sh.step_micro, mb, splash)
    head = 2.0 * v * d * sh.head_tokens(sh.rows)  # the answers' columns only (Shapes.head_tokens)
    dense = 2.0 * l * layer * rows_tokens + head
    adapters = adapter_flops(mc, rows_tokens)
    recompute = {"full": 1.0, "none": 0.0, "dots": 0.5, "dots_saveable": 0.5}[mc.remat]
    # forward + backward (2x forward: activation and weight gradients) + remat's extra forward; the
    # vocab chunks are recomputed too. LoRA: the base's and the head's weight gradients (one
    # forward's worth of dense FLOPs) are never formed.
    frozen = dense if lora else 0.0
    flops = (3.0 + recompute) * (dense + attn + adapters) + head - frozen
    steps = sh.rows // sh.step_micro
    hbm = steps * 3 * weights_read(mc) / t + rl_config.num_minibatches * 16 * trained
    return Estimate(comp, flops=flops, model_flops=3.0 * (dense + attn + adapters) - frozen, hbm_bytes=hbm)


def merge_cost(mc, params) -> tuple[int, float, float]:
    """The LoRA merge at the start of a forward-only pass (models.lora.for_scoring): the merged
    layer weights' bytes per device (one compute-dtype copy, sharded as the stored ones), the
    FLOPs of every A B (2 r x in x out per adapted projection and layer) and its HBM bytes per
    device (the stored base and adapters read once, the copy written once)."""
    if not _lora(mc):
        return 0, 0.0, 0.0
    from microcoder_jax.models import lora

    elements = sum(local_bytes(x) // x.dtype.itemsize for x in lora.merged_layer_leaves(params))
    merged = elements * jnp.dtype(mc.dtype).itemsize  # one copy in the compute dtype
    dims = mc.projection_dims()
    flops = 2.0 * mc.num_layers * mc.lora_rank * sum(dims[name][0] * dims[name][1] for name in mc.lora_targets)
    read = local_bytes(lora.merged_layer_leaves(params)) + local_bytes(lora.split(params)[0])  # base + adapters
    return merged, flops, float(read + merged)


def logprobs(program: Program, mesh, sh: Shapes, rl_config) -> Estimate:
    """The old-log-prob pass: forward only over every row, micro-batch by micro-batch. LoRA: the
    adapters are merged into a compute-dtype copy first (merge_cost), so each projection is one
    matmul and the micro-batches read the merged copy."""
    mc = program.model_config
    d, h, k, hd, f, v, l, layer = _dims(mc)
    t, n = _mesh(mesh)
    params = local_bytes(program.args[0])
    merged, merge_flops, merge_hbm = merge_cost(mc, program.args[0])
    mb = _split(sh.micro, mesh)
    tokens = sh.learner_tokens(mb, sh.micro)
    splash = mc.attention in ("splash", "cudnn")  # fused: no scores in HBM, causal blocks skipped
    chunk = min(rl_config.logprob_chunk, sh.head_tokens(1))  # the LM head's chunk of the scored columns
    kw = program.kwargs
    comp = {
        "params (args)": params,
        "tokens, mask (args)": local_bytes([kw["tokens"], kw["attention_mask"], kw["temperature"]]),
        "log-probs out": _split(sh.rows, mesh) * sh.seq * 4,
        "gathered weights (one layer)": layer * (2 if merged else _layer_weight_bytes(mc)) // t,
        "activations (one layer, forward)": _layer_activations(mc, tokens, splash, t, sh.seq) // 2,
        "final hidden": tokens * d * 4,
        "vocab-projection chunk (logits)": mb * chunk * (v // t) * 4,
    }
    if merged:
        comp["merged weights (LoRA folded in, one compute-dtype copy)"] = merged
    if sh.shared_width:
        comp["shared-prompt attention scores (XLA, one layer)"] = _shared_scores(mc, sh, mb, t)
    rows_tokens, attn = _learner_work(mc, sh, sh.micro, mb, splash)
    flops = 2.0 * l * layer * rows_tokens + 2.0 * v * d * sh.head_tokens(sh.rows) + attn
    read = float((l * layer + v * d) * jnp.dtype(mc.dtype).itemsize) if merged else weights_read(mc)
    hbm = (sh.rows // sh.micro) * read / t + merge_hbm
    return Estimate(comp, flops=flops + merge_flops, model_flops=flops, hbm_bytes=hbm)


def _kv(mc, rows_local: int, slots: int, t: int) -> int:
    kv = mc.num_kv_heads // t if mc.num_kv_heads % t == 0 else mc.num_kv_heads
    return rows_local * mc.num_layers * 2 * kv * slots * mc.head_dim * 2


def prefill(program: Program, mesh, prompts: int, width: int, group: int) -> Estimate:
    mc = program.model_config
    d, h, k, hd, f, v, l, layer = _dims(mc)
    t, n = _mesh(mesh)
    p_local = _split(prompts, mesh)
    tokens = p_local * width
    splash = False  # prefill writes a cache: forward's cached branch, XLA attention whatever the kernel
    comp = {
        "params (args)": local_bytes(program.args[0]),
        "prompt KV cache out": _kv(mc, p_local, width, t),
        "activations (one layer, forward)": _layer_activations(mc, tokens, True, t, width) // 2,
        "attention scores (f32) and probabilities (bf16), one layer": p_local * (h // t) * width * width * 6,
        "next-token logits out": p_local * group * v * 4 // (t if v % t == 0 else 1),
    }
    if not _decoding(program.args[0]):
        comp["gathered weights (one layer x2)"] = 2 * layer * 2 // t
    flops = (
        2.0 * l * layer * prompts * width + 2.0 * v * d * prompts + _attention_flops(mc, prompts, width, width, splash)
    )
    return Estimate(comp, flops=flops, model_flops=flops, hbm_bytes=(l * layer + v * d) * 2 / t)


def decode(
    program: Program, mesh, prompts: int, group: int, width: int, max_new: int, phases: int, gathers_weights: bool
) -> Estimate:
    """`gathers_weights`: the compiled loop all-gathers FSDP-sharded weights every step (else
    the sampler holds a decode copy replicated over the data axes)."""
    from microcoder_jax.sampling.static_sampler import phase_ends

    mc = program.model_config
    d, h, k, hd, f, v, l, layer = _dims(mc)
    t, n = _mesh(mesh)
    rows = prompts * group
    r_local = _split(rows, mesh)
    ends = phase_ends(max_new, phases)
    weights = decode_weight_bytes(mc)  # the merged copy, or an unmerged LoRA's stored base + adapters
    comp = {
        "params (args)": local_bytes(program.args[0]),
        "prompt KV cache (args)": local_bytes(program.args[1]),
        "KV cache (last phase; XLA reuses the smaller one)": _kv(mc, r_local, ends[-1], t),
        "one layer's keys and values read as f32": _kv(mc, r_local, ends[-1], t) * 2 // mc.num_layers,
        "tokens + log-probs out": r_local * max_new * 8,
        "sampling temporaries (logits, probs x4)": r_local * v * 4 * 4,
    }
    if not _decoding(program.args[0]):  # a sampler without a decode layout converts inside the program
        comp["decode weights (a copy in the decode layout)"] = weights // n if gathers_weights else weights // t
    if gathers_weights:
        comp["gathered weights (one layer x2)"] = 2 * layer * 2 // t
    # steps of each phase read its cache size; every step reads all weights once per device
    flops, hbm, prev = 0.0, 0.0, 0
    p_local = _split(prompts, mesh)
    for end in ends:
        steps = end - prev
        flops += steps * (decode_flops_per_token(mc) * rows + _attention_flops(mc, rows, 1, end + width, False))
        hbm += steps * (weights / t + _kv(mc, r_local, end, t) + _kv(mc, p_local, width, t))
        prev = end
    return Estimate(comp, flops=flops, model_flops=flops, hbm_bytes=hbm, tokens=rows * max_new)


def decode_layout(program: Program, mesh) -> Estimate:
    """The reshard into the decode layout: the stored params in, their decode copy out (the compute
    dtype; under lora.decode=unmerged the stored base, an int8 one at 1 byte a weight), and about one
    more copy of temporaries, from fp32 master weights (the cast) as from a LoRA base
    (adapters merged in, an int8 base dequantised: XLA fuses the merge; Qwen3-4B on v5e-8 held 0.94
    of a copy either way, two 1.7B-wide layers on v5e:2x2 0.78 and 0.52)."""
    mc = program.model_config
    d, h, k, hd, f, v, l, layer = _dims(mc)
    t, _ = _mesh(program.out_mesh if program.out_mesh is not None else mesh)
    copy = decode_weight_bytes(mc) // t
    return Estimate(
        {
            "params (args)": local_bytes(program.args[0]),
            "decode copy out (split over tensor only)": copy,
            "cast / merge / transpose temporaries (about one more copy)": copy,
        },
        hbm_bytes=local_bytes(program.args[0]) + copy,
    )


def _decoding(params) -> bool:
    return not isinstance(params, dict)


def estimate(program: Program, mesh, sh: Shapes, rl_config, gathers_weights: bool = False) -> Estimate:
    """The analytic model of one of programs.rl_step_programs' programs, by its name."""
    tag, _, kind = program.name.partition(" ")
    if program.name == "decode layout":
        return decode_layout(program, mesh)
    if program.name == "train step":
        return train_step(program, mesh, sh, rl_config)
    if program.name == "old log-probs":
        return logprobs(program, mesh, sh, rl_config)
    prompts, width = program.args[1].shape[0] if kind == "prefill" else program.args[3].shape[0], sh.prompt_width
    group = sh.group if tag == "sample" else sh.eval_samples
    if kind == "prefill":
        return prefill(program, mesh, prompts, width, group)
    max_new = sh.max_new if tag == "sample" else sh.eval_max_new
    return decode(program, mesh, prompts, group, width, max_new, sh.phases, gathers_weights)


def per_step_collective_bytes(loops: list[dict]) -> float:
    """Per-device collective bytes of all loop iterations, trips multiplied through nesting."""
    by_name = {lp["name"]: lp for lp in loops}

    def trips(lp):
        own = lp["trip_count"] or 1
        parent = by_name.get(lp["parent"])
        return own * (trips(parent) if parent else 1)

    return float(sum(sum(b for _, b in lp["collectives"].values()) * trips(lp) for lp in loops))
