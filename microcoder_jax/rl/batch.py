"""`Rollout`: the one contract between the rollout worker, the learner, the train step, replay
and the planner — one judged batch of N rows, as typed fields.

Every consumer builds its batch from this type: the worker fills it (trainer/rollout.py), the
learner adds the old (and reference) log-probs (trainer/learner.py), the step reads its fields by
name (rl/step.py), the planner makes abstract ones from `FIELDS` (plan/programs.py).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

import jax
import numpy as np

# name -> (per token: [N, S], else per row: [N]; dtype): the layout of every field
FIELDS: dict[str, tuple[bool, Any]] = {
    "tokens": (True, np.int32),
    "attention_mask": (True, np.int32),
    "response_mask": (True, np.int32),
    "response_lengths": (False, np.int32),
    "truncated": (False, np.bool_),
    "temperature": (False, np.float32),
    "rewards": (False, np.float32),
    "passed": (False, np.bool_),
    "no_code": (False, np.bool_),
    "sample_entropy": (False, np.float32),
    "old_logprobs": (True, np.float32),
    "ref_logprobs": (True, np.float32),
    "sampler_logprobs": (True, np.float32),
}


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Rollout:
    """One judged batch, N rows prompt-major (row = prompt * G + sample), S = prompt bucket + max_new.

    tokens / attention_mask / response_mask [N, S] int32: [left-padded prompt | response]. The
    response mask marks the model's tokens, the ones the loss trains on; it may have holes: an
    environment's tokens between two model turns (envs/base.py) are attended, not trained. rewards
    [N] f32 (NaN: a judge error; the episode's, from its last turn); passed / no_code / truncated
    [N] bool; response_lengths [N] int32 (the first response column to the last model token: one
    turn's length in a single-turn batch); temperature and sample_entropy [N] f32 from the sampler;
    sampler_logprobs [N, S] f32 in old_logprobs' layout: the sampler's own log-probs of the response
    tokens (0 elsewhere), the behaviour policy of rl.corrections (None in batches saved before it).
    Set by the learner: old_logprobs [N, S] f32 (the training forward at the learner's params when
    it trains on the batch, column t = log p(tokens[t])), ref_logprobs [N, S] f32 only when the KL
    term is on.
    Fields read by name too (`rollout["tokens"]`), as advantages and dynamic sampling do.
    """

    tokens: Any
    attention_mask: Any
    response_mask: Any
    response_lengths: Any
    truncated: Any
    temperature: Any
    rewards: Any
    passed: Any
    no_code: Any
    sample_entropy: Optional[Any] = None
    old_logprobs: Optional[Any] = None
    ref_logprobs: Optional[Any] = None
    sampler_logprobs: Optional[Any] = None

    def __getitem__(self, name: str):
        return getattr(self, name)

    def __contains__(self, name: str) -> bool:
        return getattr(self, name, None) is not None

    def get(self, name: str, default=None):
        value = getattr(self, name, None)
        return default if value is None else value

    def as_dict(self) -> dict:
        """The set fields as a dict of arrays (what host-side row regrouping works on)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if getattr(self, f.name) is not None}

    def scoring_rows(self) -> dict:
        """The fields the old-log-prob pass reads (SCORING_FIELDS), known once the rows are sampled."""
        return {name: getattr(self, name) for name in SCORING_FIELDS}

    def replace(self, **changes) -> "Rollout":
        return dataclasses.replace(self, **changes)


NAMES = tuple(f.name for f in dataclasses.fields(Rollout))
# What the learner's old (and reference) log-probs are a function of, besides its params: the
# rows as sampled, before any verdict. The worker hands these over first (trainer/worker.Sampled).
SCORING_FIELDS = ("tokens", "attention_mask", "response_mask", "temperature")
assert set(NAMES) == set(FIELDS), "FIELDS must describe every Rollout field"


def as_rollout(batch) -> tuple[Rollout, Any]:
    """(Rollout, packing or None) from what the step is given: a Rollout, or a dict of its fields
    with an optional "packing" (an rl.packing.Packing); an unknown key is refused by name."""
    if isinstance(batch, Rollout):
        return batch, None
    fields = dict(batch)
    packing = fields.pop("packing", None)
    unknown = sorted(set(fields) - set(NAMES))
    if unknown:
        raise ValueError(f"batch keys {unknown} are not Rollout fields (rl/batch.py: {', '.join(NAMES)})")
    return Rollout(**fields), packing


def abstract(rows: int, seq: int, make, *, old: bool = True, ref: bool = False, sampler: bool = False) -> Rollout:
    """A Rollout of `make(shape, dtype)` leaves (e.g. ShapeDtypeStructs) for N=rows, S=seq, with
    the optional fields the run's batch carries (old / reference / sampler log-probs)."""
    wanted = {"old_logprobs": old, "ref_logprobs": ref, "sampler_logprobs": sampler, "sample_entropy": True}
    return Rollout(
        **{
            name: make((rows, seq) if per_token else (rows,), dtype)
            for name, (per_token, dtype) in FIELDS.items()
            if wanted.get(name, True)
        }
    )
