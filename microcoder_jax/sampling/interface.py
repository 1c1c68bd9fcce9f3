"""One interface over both engines: `make_sampler(...)` returns a `StaticSampler` or a `PagedSampler`.

Callers never branch on `sampling.engine`:
- `generate(params, prompts, ...)` samples G responses per prompt (the length cap, top-p and top-k
  are the sampling config's unless given: evaluation gives its own) and calls
  `on_group_done(first_prompt, output)` with whole groups as they finish (the paged engine: one
  group at a time, while the rest still decode; the static one: every group at once, at the end).
- `open_session(params, max_prompts=..., prompt_width=..., rng=...)` is a session that takes more
  prompts while it decodes (DAPO's refills); only engines with `sessions = True` have one.
- `programs` names the jitted functions the planner compiles for this engine.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Optional, Sequence

from microcoder_jax.models import DecoderConfig
from microcoder_jax.sampling import paged_sampler, static_sampler as sampler
from microcoder_jax.sampling.config import SamplingConfig
from microcoder_jax.sampling.static_sampler import SamplerOutput

REPORTS_PER_RESPONSE = 16  # paged: the host checks for finished groups ~16 times per response at the cap

GroupDone = Callable[[int, SamplerOutput], None]


@dataclasses.dataclass(frozen=True)
class _Common:
    """What every engine needs besides the params: the model, stop and pad ids, buckets, mesh."""

    config: SamplingConfig
    model_config: DecoderConfig
    stop_ids: tuple
    pad_id: int
    prompt_buckets: tuple
    mesh: object  # the mesh this engine samples on (None on one device)

    def _kwargs(self, num_samples, temperature, max_new_tokens, top_p, top_k, rng) -> dict:
        """The engine's keyword arguments; `max_new_tokens`, `top_p`, `top_k` default (None) to
        the sampling config's, so a training caller passes none of them and evaluation its own."""
        c = self.config
        return dict(
            num_samples=num_samples,
            temperature=temperature,
            top_p=c.top_p if top_p is None else top_p,
            top_k=c.top_k if top_k is None else top_k,
            max_new_tokens=c.max_new_tokens if max_new_tokens is None else max_new_tokens,
            stop_token_ids=self.stop_ids,
            pad_id=self.pad_id,
            rng=rng,
            prompt_buckets=self.prompt_buckets,
            mesh=self.mesh,
        )


class StaticSampler(_Common):
    """One batch of every row over a dense KV cache (`sampling/static_sampler.py`)."""

    sessions = False
    programs = {"decode layout": sampler.decode_layout_fn, "prefill": sampler.prefill, "decode": sampler.decode}

    def generate(
        self,
        params,
        prompts: Sequence[Sequence[int]],
        *,
        num_samples: int,
        temperature,
        max_new_tokens: Optional[int] = None,
        top_p: Optional[float] = None,
        top_k: Optional[int] = None,
        rng,
        on_group_done: Optional[GroupDone] = None,
        stats: Optional[dict] = None,
    ) -> SamplerOutput:
        """`stats`: the paged engine's decode counts; this engine has none (left untouched)."""
        out = sampler.generate(
            params,
            self.model_config,
            prompts,
            decode_phases=self.config.decode_phases,
            **self._kwargs(num_samples, temperature, max_new_tokens, top_p, top_k, rng),
        )
        if on_group_done is not None:
            on_group_done(0, out)  # every group finishes together
        return out

    def open_session(self, params, *, max_prompts: int, prompt_width: int, rng):
        raise ValueError("sampling.engine=static has no session for refills; use sampling.engine=paged")


class PagedSampler(_Common):
    """Continuous batching of `sampling.slots` sequences over a paged KV cache (`paged_sampler.py`)."""

    sessions = True
    programs = {
        "decode layout": sampler.decode_layout_fn,
        "admit": paged_sampler.engine.admit,
        "decode": paged_sampler.engine.run,
        "extend": paged_sampler.engine.extend,
    }

    def report_every(self, max_new_tokens: int) -> int:
        """Decode steps between the host's checks for finished groups, about 16 per response at the
        cap, never more often than the engine refills its slots."""
        return max(self.config.refill_every, max_new_tokens // REPORTS_PER_RESPONSE)

    def generate(
        self,
        params,
        prompts: Sequence[Sequence[int]],
        *,
        num_samples: int,
        temperature,
        max_new_tokens: Optional[int] = None,
        top_p: Optional[float] = None,
        top_k: Optional[int] = None,
        rng,
        on_group_done: Optional[GroupDone] = None,
        stats: Optional[dict] = None,
    ) -> SamplerOutput:
        c = self.config
        kwargs = self._kwargs(num_samples, temperature, max_new_tokens, top_p, top_k, rng)
        return paged_sampler.generate_paged(
            params,
            self.model_config,
            prompts,
            slots=c.slots_for(len(prompts) * num_samples),
            page_size=c.page_size,
            refill_every=c.refill_every,
            kv_dtype=c.kv_dtype,
            on_group_done=on_group_done,
            report_every=self.report_every(kwargs["max_new_tokens"]),
            stats=stats,
            **kwargs,
        )

    def open_session(
        self,
        params,
        *,
        max_prompts: int,
        prompt_width: int,
        rng,
        rows: int,
        version: int = 0,
        num_samples: int | None = None,
        max_new_tokens: int | None = None,
        num_pages: int | None = None,
        hold: bool = False,
    ) -> paged_sampler.PagedSession:
        """A session with room for `max_prompts` prompts at `prompt_width`, its slots sized for
        `rows` rows (one generation batch) so every session of a run has the same shape;
        `version`: the weights' (recorded with every token). Multi-turn episodes pass `hold`
        (finished rows keep their KV), their own `num_samples` / `max_new_tokens` (default the
        sampling config's) and `num_pages` sized for every turn."""
        c = self.config
        return paged_sampler.PagedSession(
            params,
            self.model_config,
            num_samples=num_samples or c.group_size,
            max_prompts=max_prompts,
            max_new_tokens=max_new_tokens or c.max_new_tokens,
            prompt_width=prompt_width,
            stop_token_ids=self.stop_ids,
            pad_id=self.pad_id,
            rng=rng,
            slots=c.slots_for(rows),
            page_size=c.page_size,
            refill_every=c.refill_every,
            kv_dtype=c.kv_dtype,
            num_pages=num_pages,
            mesh=self.mesh,
            version=version,
            hold=hold,
        )


ENGINES = {"static": StaticSampler, "paged": PagedSampler}


def make_sampler(
    config: SamplingConfig,
    model_config: DecoderConfig,
    *,
    stop_ids: Sequence[int],
    pad_id: int,
    prompt_buckets: Sequence[int],
    mesh=None,
    sample_mesh=None,
):
    """The engine `config.engine` names; the paged one samples on `sample_mesh` (its own mesh,
    `sampling.decode_tensor`), the static one on the training `mesh`."""
    cls = ENGINES[config.engine]
    on = sample_mesh if cls is PagedSampler else mesh
    return cls(config, model_config, tuple(stop_ids), pad_id, tuple(prompt_buckets), on)
