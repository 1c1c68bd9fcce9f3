"""Multi-turn episodes (`env.kind=feedback`, `env.max_turns` = T > 1): sample an answer per row,
let the environment judge it, append its feedback as a user turn and sample again, up to T answers.

The batch keeps the one Rollout layout (rl/batch.py): [left-padded prompt | answer 1 | feedback 1 |
answer 2 | ...], right-padded to S = P + T * max_new_tokens + (T - 1) * env.feedback_tokens. The
response mask is 1 on the model's tokens only (the feedback turns are holes in it, attended but not
trained), the sampler's log-probs sit on the model's tokens, the reward and flags are the last
answer's, `truncated` says whether that answer hit the length cap, and `response_lengths` spans
from the first answer token to the last model token.

Turn t >= 1 re-prefills each continuing row's whole context (prompt, answers and feedback so far)
with the turn sampler (the run's sampler with prompt buckets wide enough for the grown context),
at a static row count: finished rows are stood in for by a continuing one and their answers
dropped, so every turn reuses one compiled shape per bucket. Keeping the earlier turns' KV in a
paged session instead of re-prefilling is not built yet (Known limits).
"""

from __future__ import annotations

import math
import time

import jax
import numpy as np

from microcoder_jax.data.prompts import follow_up, prompt_bucket
from microcoder_jax.envs.feedback import cut
from microcoder_jax.rl.batch import Rollout
from microcoder_jax.trainer.rollout import decode, generate, sampler_for, verdict_arrays

TOO_LONG = "The feedback was too long to show. Check the program against the examples in the statement."


def turn_buckets(run, max_new_tokens: int | None = None) -> tuple[int, ...]:
    """Prompt widths of turns >= 1: a turn-t context is at most the widest prompt plus t answers
    (`max_new_tokens`, default the sampling cap) and t feedback turns (rounded up to the paged
    engine's page size)."""
    e, base = run.env_config, max(run.data.prompt_buckets)
    w = max_new_tokens or run.sampling.max_new_tokens
    page = run.sampling.page_size if run.sampling.engine == "paged" else 1
    grown = {math.ceil((base + t * (w + e.feedback_tokens)) / page) * page for t in range(1, e.max_turns)}
    return tuple(sorted(set(run.data.prompt_buckets) | grown))


def turn_sampler(run, max_new_tokens: int | None = None):
    """The run's sampler for turns >= 1 (its prompt buckets `turn_buckets`)."""
    return sampler_for(run, turn_buckets(run, max_new_tokens))


def feedback_ids(tok, text: str, answer_end: str, limit: int, enable_thinking: bool = False) -> list[int]:
    """Token ids of a feedback turn (`follow_up` in the model's template), at most `limit`
    (env.feedback_tokens): a longer one is cut shorter (the cut marked) until it fits."""

    def encode(content: str) -> list[int]:
        rendered = follow_up(tok, content, answer_end, enable_thinking=enable_thinking)
        return tok.encode(rendered, add_special_tokens=False)

    head, _, last = text.rpartition("\n\n")  # the closing instruction is kept whole
    head, last = (head, "\n\n" + last) if head else (last, "")
    ids, chars = encode(text), len(head)
    while len(ids) > limit and chars > 64:
        chars = chars * limit // (len(ids) + 1)
        ids = encode(cut(head, chars) + last)
    if len(ids) > limit:
        ids = encode(TOO_LONG)
    if len(ids) > limit:
        raise ValueError(
            f"env.feedback_tokens={limit} cannot hold even a short feedback turn in this chat template "
            f"({len(ids)} tokens); raise it"
        )
    return ids


def collect_episodes(
    run,
    sampler,
    later_sampler,
    pool,
    params,
    problems,
    prompts,
    *,
    temperature,
    rng,
    times,
    env=None,
    group_size=None,
    real_rows=None,
    max_new_tokens=None,
):
    """One generation batch of episodes: (Rollout, verdict counts of the last answers, episode
    stats). `sampler` samples turn 0 (the worker's), `later_sampler` the turns after (turn_sampler);
    `env` (default the run's), `group_size` (default sampling.group_size), `real_rows` (the
    stats' rows, the rest padding; default all) and `max_new_tokens` (an answer's cap, default
    sampling.max_new_tokens; `later_sampler` must be built for it) for evaluation."""
    if jax.process_count() > 1:
        raise ValueError("multi-turn episodes (env.max_turns > 1) run on one process for now")
    env = env or run.env
    G, T = group_size or run.sampling.group_size, env.max_turns
    n = len(problems) * G
    row_problem = [problems[r // G] for r in range(n)]
    context = [list(prompts[r // G]) for r in range(n)]  # what the model has seen, unpadded
    # per row: the tokens after the prompt, 1 where the model wrote them, the sampler's log-probs
    body, mine, logp = ([[] for _ in range(n)] for _ in range(3))
    last: list = [None] * n
    truncated, turns_used = np.zeros(n, bool), np.zeros(n, np.int32)
    passed_at, entropy, env_tokens = np.full(n, T, np.int32), np.zeros(n, np.float32), np.zeros(n, np.int32)
    repeats = np.zeros(n, np.int32)  # later answers whose program is the previous answer's, unchanged
    active, temps = list(range(n)), None
    for turn in range(T):
        t0 = time.perf_counter()
        rows = None if turn == 0 else [context[r] for r in active + [active[-1]] * (n - len(active))]
        key = jax.random.fold_in(rng, turn)
        out = _sample(run, params, (sampler, later_sampler), prompts, rows, G, temperature, key, max_new_tokens)
        temps = np.asarray(out.temperature, np.float32) if turn == 0 else temps
        times["sample"] += time.perf_counter() - t0
        t1 = time.perf_counter()
        tokens, lengths = np.asarray(out.tokens), np.asarray(out.lengths)
        lps, cut_off, ent = np.asarray(out.logprobs, np.float32), np.asarray(out.truncated), np.asarray(out.entropy)
        k = len(active)
        texts = decode(run, tokens[:k], lengths[:k])
        judged = env.step(pool, [row_problem[r] for r in active], texts, turn, truncated=cut_off[:k]).result()
        times["judge"] += time.perf_counter() - t1
        times["judge_wait"] += time.perf_counter() - t1
        still = []
        for i, r in enumerate(active):
            answer = tokens[i, : lengths[i]].tolist()
            body[r] += answer
            mine[r] += [1] * len(answer)
            logp[r] += lps[i, : lengths[i]].tolist()
            if turn and judged[i].program is not None and judged[i].program == last[r].program:
                repeats[r] += 1
            last[r], turns_used[r], truncated[r] = judged[i], turn + 1, bool(cut_off[i])
            entropy[r] = ent[i]
            if judged[i].passed:
                passed_at[r] = min(passed_at[r], turn)
            if not judged[i].done and turn < T - 1:
                end = run.tokenizer.decode(answer[-1:]) if answer else ""
                fb = feedback_ids(
                    run.tokenizer, judged[i].feedback, end, run.env_config.feedback_tokens, run.data.enable_thinking
                )
                body[r] += fb
                mine[r] += [0] * len(fb)
                logp[r] += [0.0] * len(fb)
                context[r] += answer + fb
                env_tokens[r] += len(fb)
                still.append(r)
        active = still
        if not active:
            break
    rollout = assemble(run, prompts, G, body, mine, logp, max_new_tokens)
    rewards, passed, no_code, counts = verdict_arrays(last)
    rollout = rollout.replace(
        truncated=truncated, temperature=temps, rewards=rewards, passed=passed, no_code=no_code, sample_entropy=entropy
    )
    stats = episode_stats(turns_used, passed_at, passed, env_tokens, T, real_rows or n, repeats)
    return rollout, counts, stats


def _sample(run, params, samplers, prompts, contexts, group_size: int, temperature, key, max_new_tokens=None):
    """Turn 0: G answers per prompt (the first sampler); a later turn (`contexts`: one per row, a
    static count): one answer per context (the second sampler, wider prompt buckets)."""
    if contexts is None:
        return generate(
            run, params, prompts, num_samples=group_size, temperature=temperature, rng=key, sampler=samplers[0],
            max_new_tokens=max_new_tokens,
        )  # fmt: skip
    return generate(
        run, params, contexts, num_samples=1, temperature=temperature, rng=key, sampler=samplers[1],
        max_new_tokens=max_new_tokens,
    )  # fmt: skip


def episode_stats(turns_used, passed_at, passed, env_tokens, turns: int, rows: int, repeats=None) -> dict:
    """Over the first `rows` episodes: turns used, the share passed by each turn (`passed_at`: the
    first turn an answer passed, `turns` if none), the repaired share of those whose first answer
    failed, feedback tokens, and the share of answers after feedback that repeat the previous
    program unchanged (`repeats`: per episode; a model that ignores the feedback repeats itself)."""
    at, ok = passed_at[:rows], passed[:rows]
    later = int((turns_used[:rows] - 1).sum())
    repeat = {} if repeats is None else {"repeat_frac": float(repeats[:rows].sum() / max(later, 1))}
    return {
        "turns_mean": float(turns_used[:rows].mean()),
        **{f"pass_turn{t + 1}": float((at <= t).mean()) for t in range(turns)},
        "repaired_frac": float((ok & (at > 0)).sum() / max((at > 0).sum(), 1)),
        "feedback_tokens_mean": float(env_tokens[:rows].mean()),
        **repeat,
    }


def assemble(run, prompts, group_size: int, body, mine, logp, max_new_tokens=None) -> Rollout:
    """The episodes as batch rows: [left-padded prompt | body], right-padded to
    EnvConfig.row_width; the response mask is `mine`, the sampler's log-probs `logp` on it, the
    span the first answer token to the last model token. Verdict fields are left for the caller."""
    n = len(body)
    P = prompt_bucket(max(len(p) for p in prompts), run.data.prompt_buckets)
    S = run.env_config.row_width(P, max_new_tokens or run.sampling.max_new_tokens)
    tokens = np.full((n, S), run.pad_id, np.int32)
    attention, response = np.zeros((n, S), np.int32), np.zeros((n, S), np.int32)
    sampler_lp, span = np.zeros((n, S), np.float32), np.zeros(n, np.int32)
    for r in range(n):
        prompt = prompts[r // group_size]
        tokens[r, P - len(prompt) : P], attention[r, P - len(prompt) : P] = prompt, 1
        b = len(body[r])
        tokens[r, P : P + b], attention[r, P : P + b] = body[r], 1
        response[r, P : P + b] = mine[r]
        sampler_lp[r, P : P + b] = np.asarray(logp[r], np.float32) * np.asarray(mine[r], np.float32)
        model_at = np.flatnonzero(mine[r])
        span[r] = model_at[-1] + 1 if model_at.size else 0
    zeros = np.zeros(n, bool)
    return Rollout(
        tokens=tokens,
        attention_mask=attention,
        response_mask=response,
        response_lengths=span,
        truncated=zeros,
        temperature=np.ones(n, np.float32),
        rewards=np.zeros(n, np.float32),
        passed=zeros,
        no_code=zeros,
        sampler_logprobs=sampler_lp,
    )
