"""Multi-turn episodes (`env.kind=feedback`, `env.max_turns` = T > 1): sample an answer per row,
let the environment judge it, append its feedback as a user turn and sample again, up to T answers.

The batch keeps the one Rollout layout (rl/batch.py): [left-padded prompt | answer 1 | feedback 1 |
answer 2 | ...], right-padded to S = P + T * max_new_tokens + (T - 1) * env.feedback_tokens. The
response mask is 1 on the model's tokens only (the feedback turns are holes in it, attended but not
trained), the sampler's log-probs sit on the model's tokens, the reward and flags are the last
answer's, `truncated` says whether that answer hit the length cap, and `response_lengths` spans
from the first answer token to the last model token.

How turn t >= 1 is sampled depends on the engine. The paged engine keeps every row's KV in one
session across the turns (`PagedSession(hold=True)`): a continuing row is extended with its
feedback tokens, and only those (and the answer's last token) are prefilled over the kept keys;
a row whose episode ends gives its pages back at once. The static engine has no session: it
re-prefills each continuing row's whole context with the turn sampler (prompt buckets wide enough
for the grown context) at a static row count (finished rows stood in for by a continuing one,
their answers dropped), one compiled shape per bucket.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import time

import jax
import numpy as np

from microcoder_jax import sharding
from microcoder_jax.data.prompts import follow_up, prompt_bucket
from microcoder_jax.envs.base import Turn
from microcoder_jax.judge.program import VERDICTS
from microcoder_jax.envs.feedback import cut
from microcoder_jax.rl.batch import Rollout
from microcoder_jax.sampling.paged_sampler import MAX_ADMIT, extend_block, held_session_pages
from microcoder_jax.trainer.rollout import decode, generate, sampler_for, verdict_arrays

TOO_LONG = "The feedback was too long to show. Check the program against the examples in the statement."


def turn_buckets(run, max_new_tokens: int | None = None) -> tuple[int, ...]:
    """Prompt widths of turns >= 1: a turn-t context is at most the widest prompt plus t answers
    (`max_new_tokens`, default the sampling cap) and t feedback turns (rounded up to the paged
    engine's page size)."""
    return turn_widths(run.data, run.sampling, run.env_config, max_new_tokens)


def turn_widths(data, sampling, env, max_new_tokens: int | None = None) -> tuple[int, ...]:
    """`turn_buckets` from the blocks (DataConfig, SamplingConfig, EnvConfig): what the planner reads."""
    base, w = max(data.prompt_buckets), max_new_tokens or sampling.max_new_tokens
    page = sampling.page_size if sampling.engine == "paged" else 1
    grown = {math.ceil((base + t * (w + env.feedback_tokens)) / page) * page for t in range(1, env.max_turns)}
    return tuple(sorted(set(data.prompt_buckets) | grown))


@dataclasses.dataclass(frozen=True)
class HeldLayout:
    """The one engine shape of a run's multi-turn sessions (HeldTurns), and what the planner plans."""

    prompt_width: int  # the widest turn's context: every prompt a session holds is this wide
    max_prompts: int  # the first prompts, then one of its own per row and later turn
    rows: int  # prompts x G
    in_flight: int  # episodes holding pages at once (sampling.episodes_in_flight; sizes slots and pool)
    num_pages: int  # held_session_pages: never runs out, whatever the turns do
    chunk: int  # tokens an extend prefills per row: the answer's last and a feedback turn
    block: int  # rows of every extend and drop program, whatever the number going on
    push_block: int  # prompts of every admit program (first turns pushed as episodes end)


def in_flight_episodes(setting: int, rows: int, group: int) -> int:
    """Episodes a session holds at once under `sampling.episodes_in_flight` = `setting`: every row
    at 0; otherwise whole groups of G (a prompt's samples are pushed together), at least one."""
    return rows if not setting else min(rows, max(group, setting // group * group))


def held_layout(
    data, sampling, env, prompts: int, group: int, max_new: int, max_admit: int, turns: int | None = None
) -> HeldLayout:
    """The HeldLayout of `prompts` x `group` episodes of `turns` answers (default the env block's)
    of up to `max_new` tokens (the blocks as in `turn_widths`; `max_admit`: the session's admit block)."""
    turns = env.turns if turns is None else turns
    n, ps = prompts * group, sampling.page_size
    widest = max(turn_widths(data, sampling, env, max_new))
    m = in_flight_episodes(sampling.episodes_in_flight, n, group)
    pow2 = lambda k: 1 << (max(k, 1) - 1).bit_length()  # noqa: E731
    return HeldLayout(
        prompt_width=widest,
        max_prompts=prompts + n * (turns - 1),
        rows=n,
        in_flight=m,
        # sized for the widest first-prompt bucket, whatever this batch's: one engine shape a run
        num_pages=held_session_pages(prompts, max(data.prompt_buckets), m, widest, max_new, ps),
        chunk=min(widest, -(-(1 + env.feedback_tokens) // ps) * ps),
        # rows continue a few at a time as they finish: small blocks (a sixteenth of those in flight)
        block=extend_block(widest, max_admit, pow2(-(-m // 16))),
        # every first prompt at once when all fit, else about a quarter of the room at a time
        push_block=min(max_admit, pow2(prompts if m == n else -(-m // group // 4))),
    )


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
    keep_kv=None,
    answers=None,
    report_every=None,
):
    """One generation batch of episodes: (Rollout, verdict counts of the last answers, episode
    stats). `sampler` samples turn 0 (the worker's); a paged one samples the turns after in the
    same session (KV kept), a static one leaves them to `later_sampler` (turn_sampler);
    `env` (default the run's), `group_size` (default sampling.group_size), `real_rows` (the
    stats' rows, the rest padding; default all) and `max_new_tokens` (an answer's cap, default
    sampling.max_new_tokens; `later_sampler` must be built for it) for evaluation; `keep_kv=False`
    re-prefills later turns even on the paged engine (the reference the kept KV is checked against);
    `answers`: a list that gets (turn, row, why) for every answer, why its verdict or `truncated`;
    `report_every`: HeldTurns' decode steps between judging rounds (0: a whole turn at a time).

    Answers come in rounds (`turns.answers()`): a round's answers of one turn are judged together,
    and the rows that go on are handed back (`turns.go_on`) before the next round is sampled."""
    env = env or run.env
    G, T = group_size or run.sampling.group_size, env.max_turns
    n = len(problems) * G
    rows, temps = EpisodeRows(prompts, G, T), np.zeros(n, np.float32)
    turns = (
        HeldTurns(run, sampler, params, prompts, G, T, temperature, rng, max_new_tokens, report_every)
        if (sampler.sessions if keep_kv is None else keep_kv)
        else PrefilledTurns(run, (sampler, later_sampler), params, prompts, G, temperature, rng, max_new_tokens)
    )
    rounds = turns.answers()
    while True:
        t0 = time.perf_counter()
        got = next(rounds, None)
        times["sample"] += time.perf_counter() - t0
        if got is None:
            break
        turn, active, out = got
        t1 = time.perf_counter()
        tokens, lengths = sharding.to_host(out.tokens), sharding.to_host(out.lengths)
        lps, cut_off = sharding.to_host(out.logprobs).astype(np.float32), sharding.to_host(out.truncated)
        ent, k = sharding.to_host(out.entropy), len(active)
        if turn == 0:
            temps[active] = sharding.to_host(out.temperature)[:k]
        on = [problems[r // G] for r in active]
        judged, feedback = judge_turn(run, env, pool, on, tokens[:k], lengths[:k], cut_off[:k], turn, turn == T - 1)
        times["judge"] += time.perf_counter() - t1
        times["judge_wait"] += time.perf_counter() - t1
        still = rows.take(turn, active, (tokens, lengths, lps, cut_off, ent), judged, feedback, answers)
        turns.end([r for r in active if r not in set(still)])
        if still:
            turns.go_on(turn + 1, still, [rows.context[r] for r in still])
    turns.close()
    rollout = assemble(run, prompts, G, rows.body, rows.mine, rows.logp, max_new_tokens)
    rewards, passed, no_code, counts = verdict_arrays(rows.last)
    rollout = rollout.replace(
        truncated=rows.truncated, temperature=temps, rewards=rewards, passed=passed, no_code=no_code,
        sample_entropy=rows.entropy,
    )  # fmt: skip
    stats = episode_stats(rows.turns_used, rows.passed_at, passed, rows.env_tokens, T, real_rows or n, rows.repeats)
    stats["later_prefill_tokens"] = turns.prefilled / n  # per episode: the cost kept KV saves
    return rollout, counts, stats


def judge_turn(run, env, pool, problems, tokens, lengths, truncated, turn: int, last: bool):
    """One turn's answers judged, each host its share (sharding.host_rows), the results shared:
    (the environment's Turns in row order, per row the feedback turn's token ids, None where the
    episode ends). They cross hosts as arrays: the feedback as token ids, the program as a
    31-bit digest (all `EpisodeRows` compares it for)."""
    k, mine = len(problems), sharding.host_rows(len(problems))
    texts = decode(run, tokens[mine], lengths[mine])
    judged = env.step(pool, problems[mine], texts, turn, truncated=truncated[mine]).result()
    e, n = run.env_config, len(judged)
    reward, flags = np.zeros(n, np.float32), np.zeros((n, 5), np.int32)
    ids, count = np.zeros((n, e.feedback_tokens), np.int32), np.zeros(n, np.int32)
    for i, t in enumerate(judged):
        on = not t.done and not last
        program = -1 if t.program is None else _digest(t.program)
        reward[i], flags[i] = t.reward, (VERDICTS.index(t.verdict), t.passed, t.no_code, on, program)
        if on:
            answer = tokens[mine.start + i, : lengths[mine.start + i]]
            end = run.tokenizer.decode(answer[-1:].tolist()) if len(answer) else ""
            got = feedback_ids(run.tokenizer, t.feedback, end, e.feedback_tokens, run.data.enable_thinking)
            ids[i, : len(got)], count[i] = got, len(got)
    reward, flags, ids, count = sharding.allgather_rows((reward, flags, ids, count), k)
    turns = [
        Turn(float(r), bool(f[1]), bool(f[2]), VERDICTS[f[0]], None if f[4] == -1 else str(f[4]), not f[3])
        for r, f in zip(reward, flags)
    ]
    return turns, [ids[i, : count[i]].tolist() if flags[i, 3] else None for i in range(k)]


def _digest(program: str) -> int:
    """A program's 31-bit digest (never -1, the no-program mark)."""
    return int.from_bytes(hashlib.blake2b(program.encode(), digest_size=4).digest(), "little") >> 1


class EpisodeRows:
    """Per row of a generation batch, filled turn by turn: what the model has seen (`context`,
    unpadded), the tokens after the prompt (`body`), 1 where the model wrote them (`mine`), the
    sampler's log-probs (`logp`), and what the episode came to so far."""

    def __init__(self, prompts, group_size: int, turns: int):
        n = len(prompts) * group_size
        self.context = [list(prompts[r // group_size]) for r in range(n)]
        self.body, self.mine, self.logp = ([[] for _ in range(n)] for _ in range(3))
        self.last: list = [None] * n  # the latest Turn
        self.truncated, self.turns_used = np.zeros(n, bool), np.zeros(n, np.int32)
        self.passed_at = np.full(n, turns, np.int32)  # the first turn an answer passed (`turns`: none)
        self.entropy, self.env_tokens = np.zeros(n, np.float32), np.zeros(n, np.int32)
        self.repeats = np.zeros(n, np.int32)  # later answers whose program is the previous one, unchanged

    def answer(self, r: int, turn: int, tokens: list, logprobs: list, judged, cut: bool, entropy) -> None:
        """Row r's answer of this turn, and the environment's Turn for it."""
        self.body[r] += tokens
        self.mine[r] += [1] * len(tokens)
        self.logp[r] += logprobs
        if turn and judged.program is not None and judged.program == self.last[r].program:
            self.repeats[r] += 1
        self.last[r], self.turns_used[r], self.truncated[r], self.entropy[r] = judged, turn + 1, cut, entropy
        if judged.passed:
            self.passed_at[r] = min(self.passed_at[r], turn)

    def take(self, turn: int, active: list[int], sampled, judged, feedback, answers=None) -> list[int]:
        """A round's answers of the `active` rows (`sampled`: tokens, lengths, log-probs, truncated,
        entropy, row-aligned), their Turns and feedback token ids (None: the episode ends); returns
        the rows that go on. `answers` (a list) gets (turn, row, verdict or `truncated`) for each."""
        tokens, lengths, lps, cut_off, ent = sampled
        still = []
        for i, r in enumerate(active):
            answer = tokens[i, : lengths[i]].tolist()
            self.answer(r, turn, answer, lps[i, : lengths[i]].tolist(), judged[i], bool(cut_off[i]), ent[i])
            if answers is not None:
                answers.append((turn, r, "truncated" if cut_off[i] and not judged[i].passed else judged[i].verdict))
            if feedback[i] is not None:
                self.feedback(r, answer, feedback[i])
                still.append(r)
        return still

    def feedback(self, r: int, answer: list, ids: list) -> None:
        """The environment's turn after row r's `answer`: context for the next, a hole in the mask."""
        self.body[r] += ids
        self.mine[r] += [0] * len(ids)
        self.logp[r] += [0.0] * len(ids)
        self.context[r] += answer + ids
        self.env_tokens[r] += len(ids)


class PrefilledTurns:
    """Turns sampled by fresh calls (the static engine): turn 0 G answers per prompt (the first
    sampler), a later turn one answer per continuing row's whole context (the second sampler, its
    wider prompt buckets), at a static row count (the last row stands in for finished ones). A
    round is a whole turn."""

    def __init__(self, run, samplers, params, prompts, group_size, temperature, rng, max_new_tokens):
        self.run, self.samplers, self.params, self.prompts = run, samplers, params, prompts
        self.group_size, self.temperature, self.rng, self.max_new = group_size, temperature, rng, max_new_tokens
        self.prefilled = 0  # token columns prefilled for turns >= 1 (rows x bucket width)
        self.next: list[int] = []  # the rows going on, and their contexts
        self.contexts: list[list[int]] = []

    def answers(self):
        """Yields (turn, rows, their SamplerOutput), one round a turn, while rows go on."""
        n = len(self.prompts) * self.group_size
        active, turn = list(range(n)), 0
        while active:
            out = self._sample(turn, active, n)
            self.next, self.contexts = [], []
            yield turn, active, out
            active, turn = self.next, turn + 1

    def _sample(self, turn: int, active: list[int], n: int):
        """The answers of the `active` rows (in that order, then padding rows)."""
        first = turn == 0
        rows = self.prompts if first else self.contexts + [self.contexts[-1]] * (n - len(active))
        if not first:
            self.prefilled += len(rows) * prompt_bucket(max(map(len, rows)), self.samplers[1].prompt_buckets)
        return generate(
            self.run, self.params, rows, num_samples=self.group_size if first else 1, temperature=self.temperature,
            rng=jax.random.fold_in(self.rng, turn), sampler=self.samplers[0 if first else 1],
            max_new_tokens=self.max_new,
        )  # fmt: skip

    def go_on(self, turn: int, rows: list[int], contexts: list[list[int]]) -> None:
        """These rows answer again (turn `turn`) after these contexts: in the next round."""
        self.next += rows
        self.contexts += contexts

    def end(self, rows: list[int]) -> None:
        """These rows' episodes ended (nothing is kept for them)."""

    def close(self) -> None:
        """Nothing held."""


class HeldTurns:
    """Turns sampled in one paged session that keeps each row's KV (`PagedSession(hold=True)`).

    Turn 0 pushes the prompts (G samples each); a row that goes on is extended with the tokens its
    context gained (its answer's last and the feedback turn), prefilling only those, and joins the
    queue's front; `end` gives a finished episode's pages back at once. Turns overlap: every
    `report_every` decode steps the host takes the rows that finished since (whatever their
    turn), they are judged, and those that go on decode beside the rows still on an earlier turn.
    At most `sampling.episodes_in_flight` episodes hold pages at once (a prompt's G are pushed when
    there is room for them), which sizes the pool. Turn t of episode row r draws with sampling id
    t * rows + r, so the tokens do not depend on when the row continued."""

    def __init__(
        self, run, sampler, params, prompts, group_size, turns, temperature, rng, max_new_tokens, report_every=None
    ):
        c = run.sampling
        w = max_new_tokens or c.max_new_tokens
        self.width = prompt_bucket(max(len(p) for p in prompts), run.data.prompt_buckets)
        lay = held_layout(run.data, c, run.env_config, len(prompts), group_size, w, MAX_ADMIT, turns)
        self.session = sampler.open_session(
            params, num_samples=group_size, max_prompts=lay.max_prompts, prompt_width=lay.prompt_width,
            rows=lay.in_flight, max_new_tokens=w, num_pages=lay.num_pages, rng=jax.random.fold_in(rng, 0), hold=True,
        )  # fmt: skip
        self.prompts, self.group_size, self.temperature = prompts, group_size, temperature
        self.sampling = dict(top_p=c.top_p, top_k=c.top_k)
        self.chunk, self.block, self.push_block = lay.chunk, lay.block, lay.push_block  # one program each a run
        self.in_flight, self.rows = lay.in_flight, lay.rows
        self.report_every = sampler.report_every(w) if report_every is None else report_every or None
        self.waiting = list(range(len(prompts)))  # prompts not pushed yet, in order
        self.live = 0  # episodes pushed and not ended
        self.handle: dict[int, tuple[int, int]] = {}  # episode row -> its (prompt index, sample) now
        self.episode_of: dict[tuple[int, int], tuple[int, int]] = {}  # (prompt index, sample) -> (row, turn)

    def _push(self) -> None:
        """Push the next prompts while their G episodes fit in flight."""
        s, g = self.session, self.group_size
        k = min(len(self.waiting), (self.in_flight - self.live) // g)
        if not k:
            return
        picks, self.waiting = self.waiting[:k], self.waiting[k:]
        pushed = s.push(
            [self.prompts[i] for i in picks], temperature=self.temperature, width=self.width, block=self.push_block,
            **self.sampling,
        )  # fmt: skip
        for i, p in zip(picks, pushed):
            for j in range(g):
                self.handle[i * g + j] = (p, j)
                self.episode_of[(p, j)] = (i * g + j, 0)
        self.live += k * g

    def answers(self):
        """Yields (turn, rows, their SamplerOutput): every round, the rows that finished since the
        last, one yield per turn among them (earliest first)."""
        s = self.session
        while self.waiting or self.live:
            self._push()
            s.run(self.report_every)
            finished: dict[int, list] = {}
            for key in s.finished_rows:
                row, turn = self.episode_of.pop(key)
                finished.setdefault(turn, []).append((row, key))
            if not finished and not s.queued() and s.done:
                raise RuntimeError(f"{self.live} episodes in flight and nothing to decode (an episode was left open)")
            for turn in sorted(finished):
                got = finished[turn]
                yield turn, [r for r, _ in got], s.output_rows([key for _, key in got])

    def go_on(self, turn: int, rows: list[int], contexts: list[list[int]]) -> None:
        """These rows answer again (turn `turn`) after these contexts: queued ahead of new episodes."""
        new = self.session.extend(
            [self.handle[r] for r in rows], contexts, temperature=self.temperature, chunk=self.chunk,
            block_rows=self.block, row_ids=[turn * self.rows + r for r in rows], **self.sampling,
        )  # fmt: skip
        for r, p in zip(rows, new):
            self.handle[r] = (p, 0)
            self.episode_of[(p, 0)] = (r, turn)

    @property
    def prefilled(self) -> int:
        """Token columns prefilled for turns >= 1 (extend's chunks, padding included)."""
        return self.session.extend_columns

    def end(self, rows: list[int]) -> None:
        """These rows' episodes ended: their pages go back, and room for new episodes."""
        if rows:
            self.session.drop([self.handle[r] for r in rows], block_rows=self.block)
            self.live -= len(rows)

    def close(self) -> None:
        self.session.close()


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


def merge_stats(parts: list) -> dict:
    """`episode_stats` of several batches, given as (stats, episodes) pairs, as one batch's: a mean
    weighed by its episodes, a ratio by its own denominator (repaired: the first answers that
    failed; repeated: the answers after feedback)."""
    totals: dict = {}
    norms: dict = {}
    for stats, rows in parts:
        own = {"repaired_frac": rows * (1 - stats["pass_turn1"]), "repeat_frac": rows * (stats["turns_mean"] - 1)}
        for k, v in stats.items():
            totals[k] = totals.get(k, 0.0) + v * own.get(k, rows)
            norms[k] = norms.get(k, 0.0) + own.get(k, rows)
    return {k: v / norms[k] if norms[k] else 0.0 for k, v in totals.items()}


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
