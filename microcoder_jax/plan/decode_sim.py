"""The paged engine's decode schedule without a model: how many steps one sampler call runs, and
at what width, for given response and prompt lengths.

It replays `sampling.engine.run`'s loop (refill when due, admission in queue order, one step per
iteration) and `PagedSession.run`'s tail resizing with the engine's own rule functions
(`engine.admissions`, `refill_due`, `pending`, `keeps_running`, `paged_sampler.tail_resize`) on
numpy arrays. A row "stops" at its given length, as if that were its cap. Page accounting counts
each occupied slot's own pages and keeps every prompt page; with the planner's pool (the
engine's default: every prompt plus S sequences at the cap) admission never waits on pages, and
the step count is exact (tests/test_plan_lengths.py runs the engine beside it). Runs of steps in
which nothing but the slots' positions changes (no slot reaches its cap, no refill or break is
due) are taken in one jump, so a schedule of 262k steps replays in tens of milliseconds.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from microcoder_jax.sampling import paged_engine as engine, paged_sampler


@dataclasses.dataclass
class Schedule:
    """What one call's decode ran: per step, the slot width S, the live slots and the longest
    live sequence's keys (what paged attention reads)."""

    widths: np.ndarray  # [steps] S of each step
    live: np.ndarray  # [steps] live slots of each step
    keys: np.ndarray  # [steps] max over live slots of prompt + generated keys (0 when none live)
    own_keys: np.ndarray  # [steps] sum over live slots of their own keys rounded up to `block`

    @property
    def steps(self) -> int:
        return len(self.widths)

    @property
    def slot_steps(self) -> int:
        return int(self.widths.sum())


def simulate(
    lengths,
    prompt_lens,
    *,
    group: int,
    slots: int,
    page_size: int = 16,
    refill_every: int = 4,
    tail_slots: int | None = None,
    num_pages: int | None = None,
    max_new: int | None = None,
    prompt_width: int | None = None,
    block: int = 64,
) -> Schedule:
    """The schedule of one `generate_paged` call: rows prompt-major (prompt i's G samples are rows
    i*G .. i*G+G-1, queued in that order), `lengths[r]` tokens each, `prompt_lens[i]` prompt tokens;
    `block`: keys per attention block (block_pages x page_size), the unit a paged kernel reads."""
    caps = np.asarray(lengths, np.int64)
    plen = np.asarray(prompt_lens, np.int64)
    rows, ps, g = len(caps), page_size, group
    if rows != len(plen) * g or rows == 0 or caps.min() < 1:
        raise ValueError(f"need {len(plen)} x {g} lengths >= 1, got {rows}")
    max_new = int(max_new or caps.max())
    width = int(prompt_width or -(-int(plen.max()) // ps) * ps)
    slots = paged_sampler.call_slots(slots, rows)
    tail_slots = paged_sampler.default_tail_slots(slots) if tail_slots is None else tail_slots
    sizes = paged_sampler.tail_sizes(slots, min(tail_slots, slots))
    num_pages = num_pages or engine.default_num_pages(len(plen), width, slots, max_new, ps)
    free0 = num_pages - int((-(-plen // ps)).sum())  # admit allocates each prompt's pages once
    queue = np.arange(rows)
    head, tail, steps = 0, rows, 0
    s = slots
    seq, t, done = np.full(s, -1), np.zeros(s, np.int64), np.ones(s, bool)
    widths, lives, keys, own_keys = [], [], [], []

    def own(slot_seq, slot_t):
        occupied = slot_seq >= 0
        p = plen[np.maximum(slot_seq, 0) // g]
        return int(np.where(occupied, engine.own_pages(p, np.maximum(slot_t, 1) - 1, ps), 0).sum())

    def record(mask):  # engine._record: a masked slot's token t is written; done at its cap
        nonlocal t, done
        r = np.maximum(seq, 0)
        done = np.where(mask, t + 1 >= caps[r], done)
        t = np.where(mask, t + 1, t)

    while True:  # PagedSession.run with no step limit
        shrink = paged_sampler.shrink_at(sizes, s)
        start = steps
        while True:  # engine.run's while loop
            live = (seq >= 0) & ~done
            if not engine.keeps_running(steps - start, np.iinfo(np.int32).max, live, head, tail, shrink, xp=np):
                break
            if engine.refill_due(steps, refill_every, live.any()) & engine.pending(head, tail, seq, done, xp=np):
                finished = (seq >= 0) & done  # engine.release_finished
                seq = np.where(finished, -1, seq)
                idle = seq < 0
                live = ~idle & ~done
                r = np.maximum(seq, 0)
                outstanding = engine.outstanding_pages(live, plen[r // g], caps[r], t, ps, xp=np)
                candidate = queue[np.minimum(head + np.arange(s), rows - 1)]
                need = engine.own_pages(plen[candidate // g], caps[candidate] - 1, ps)
                take, joins, new_seq = engine.admissions(
                    idle, candidate, need, head, tail, free0 - own(seq, t) - outstanding, xp=np
                )
                head += int(take.sum())
                seq, t = np.where(joins, new_seq, seq), np.where(joins, 0, t)
                record(joins)  # the first token, from the stored prompt logits
            live = (seq >= 0) & ~done  # engine._step: feed every live slot, sample its next token
            r = np.maximum(seq, 0)
            # k identical steps at once: until the first live slot reaches its cap, or (a refill
            # pending) until the next step a refill is due; nothing else changes in between
            k = 1
            if live.any() and engine.keeps_running(0, 1, live, head, tail, shrink, xp=np):  # no break due
                k = int((caps[r] - t)[live].min())
                if engine.pending(head, tail, seq, done, xp=np):
                    k = min(k, refill_every - steps % refill_every)
            j = np.arange(k)
            base = (plen[r // g] + t)[live]
            widths.append(np.full(k, s))
            lives.append(np.full(k, int(live.sum())))
            keys.append(base.max() + j if base.size else np.zeros(k, np.int64))
            own_keys.append((-(-(base[:, None] + j) // block) * block).sum(0) if base.size else np.zeros(k, np.int64))
            steps += k
            t = np.where(live, t + k, t)
            done = np.where(live, t >= caps[r], done)
        seq = np.where((seq >= 0) & done, -1, seq)  # release_finished after the loop
        target = paged_sampler.tail_resize(sizes, int((seq >= 0).sum()), s, head < tail)
        if target is None:
            break
        order = np.argsort(seq < 0, kind="stable")[:target]  # engine.resize: occupied slots first
        seq, t, done, s = seq[order], t[order], done[order], target
    cat = lambda parts: np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, np.int64)  # noqa: E731
    return Schedule(cat(widths), cat(lives), cat(keys), cat(own_keys))


def steady_steps(lengths, prompt_lens, *, group: int, slots: int, **engine) -> int:
    """Decode steps of several batches under partial rollouts (train.partial_rollouts), modelled as
    one call with the batches queued back to back: slots are refilled from the next batch instead
    of emptying at each batch's end, and only the last batch has a tail (an upper bound on the
    engine's count, which hands the last batch on while its stragglers still run)."""
    return simulate(lengths, prompt_lens, group=group, slots=slots, **engine).steps
