"""`SamplingConfig`: the `sampling.*` block (group size, response cap, filters, the engine's knobs)."""

from __future__ import annotations

import dataclasses

from microcoder_jax.blocks import Block, knob

ENGINES = ("static", "paged")
KV_DTYPES = ("model", "bfloat16", "float32", "int8")


@dataclasses.dataclass(frozen=True)
class SamplingConfig(Block):
    PREFIX = "sampling"

    group_size: int = knob(8, "G: responses per prompt", at_least=2)
    max_new_tokens: int = knob(4096, "training response cap (paper: 4K); static shape", at_least=1)
    top_p: float = knob(1.0, "nucleus filter (1.0 = off)", probability=True)
    top_k: int = knob(0, "top-k filter (0 = off)", at_least=0)
    engine: str = knob(
        "static",
        "static: one batch of all rows over a dense cache (the default); paged: "
        "continuous batching of sampling.slots sequences over a paged KV cache, refilled as "
        "rows finish",
        choices=ENGINES,
    )
    slots: int = knob(0, "paged: sequences decoded at once (0 = every row, up to 256)", at_least=0)
    page_size: int = knob(16, "paged: KV-cache slots per page (prompt buckets must be multiples of it)", at_least=1)
    refill_every: int = knob(4, "paged: decode steps between refills of finished slots", at_least=1)
    decode_tensor: int = knob(
        0,
        "paged: chips the sampler splits KV heads and weights over (the rest split "
        "the slots); 0 = the training mesh, -1 = as many as the KV heads allow",
        at_least=-1,
    )
    episodes_in_flight: int = knob(
        0,
        "paged, multi-turn episodes: episodes holding KV at once (0 = every episode of the batch); "
        "the rest start as episodes end, and the page pool is sized for this many",
        at_least=0,
    )
    kv_dtype: str = knob(
        "model",
        "paged: the page pool's dtype. model: the model's (bfloat16 in the paper "
        "configs); int8: int8 keys and values with a float32 scale per (token, kv head), "
        "quantized as written, about half the bytes a decode step reads",
        choices=KV_DTYPES,
    )
    decode_phases: int = knob(
        4,
        "decode stages whose KV caches grow to max_new_tokens, so a step reads about "
        "the filled slots (1 = one loop; each stage compiles its own body)",
        at_least=1,
    )

    def slots_for(self, rows: int) -> int:
        """S for a call of `rows` rows (`paged_sampler.call_slots`: 0 = every row up to 256)."""
        from microcoder_jax.sampling.paged_sampler import call_slots

        return call_slots(self.slots, rows)
