"""The truncation task: the demo's "read a b, print a OP b" with a scratchpad of votes before the program.

An answer is `<think> v1 v2 ... vK </think>` and then the demo's fenced program. Each vote is one
operation name (one BPE token). The supervised warm start draws K uniformly from `demo.votes`
(spread around the response cap) and the votes by one of two rules:

- `demo.vote_chain = (enter, stay)` (configs/truncation_task.py): the votes settle on the prompt's
  operation (the first is right with probability `demo.vote_accuracy`, the next with `stay` after
  a right one, `enter` after a wrong one) and the program is the last vote's, so the program is
  right more often the longer the scratchpad;
- `()`: each vote names the prompt's operation with probability `demo.vote_accuracy`, independently,
  and the program is the majority's (a tiny model does not learn to count them: its pass rate is
  flat in length, docs/experiments.md).

Either way the policy controls its length (K), and the cap binds: answers with many votes are cut
off; a cut inside the scratchpad or the program leaves no program, so the judge says `no_code`
(not judged wrong: what the conditional mask may protect); and reading the operation off the
prompt is learnable from the reward, as in the demo.

The problems and tokenizer corpus are the demo's (`demo_task`), the warm-start loop is
`trainer/warm_start.py`; the config is `configs/truncation_task.py`.
"""

from __future__ import annotations


import numpy as np

from microcoder_jax.data import demo_task
from microcoder_jax.data.tokenizer import END_THINK, THINK, train_bpe_tokenizer

make_problems = demo_task.make_problems  # the same problems and prompts as the demo


def majority(votes, rng) -> str:
    """The operation most votes name (ties broken at random)."""
    names, counts = np.unique(np.asarray(votes), return_counts=True)
    return str(rng.choice(names[counts == counts.max()]))


def draw_votes(op: str, ops, k: int, accuracy: float, rng) -> list[str]:
    """K votes: `op` with probability `accuracy`, else one of the other operations uniformly."""
    others = [o for o in ops if o != op]
    return [op if rng.random() < accuracy or not others else str(rng.choice(others)) for _ in range(k)]


def response_text(votes, op: str) -> str:
    """A scratchpad of votes, then the program of `op` in one fenced Python block."""
    return f"{THINK}{''.join(' ' + v for v in votes)}{END_THINK}\n" + demo_task.response_text(op)


def draw_chain(op: str, ops, k: int, accuracy: float, chain, rng) -> list[str]:
    """K votes that settle on `op`: the first names it with probability `accuracy`; each next one
    names it with probability `stay` after a vote for it, `enter` after another (chain = (enter,
    stay)); a vote not for `op` is one of the other operations uniformly. The share of right votes
    at position j tends to enter / (1 - stay + enter), so the last of many votes is right more often."""
    enter, stay = chain
    others = [o for o in ops if o != op]
    votes = [op if rng.random() < accuracy or not others else str(rng.choice(others))]
    while len(votes) < k:
        p = stay if votes[-1] == op else enter
        votes.append(op if rng.random() < p or not others else str(rng.choice(others)))
    return votes


def last_vote_right(k: int, accuracy: float, chain) -> float:
    """The chance that the K-th vote of `draw_chain` names the prompt's operation."""
    enter, stay = chain
    p = accuracy
    for _ in range(k - 1):
        p = p * stay + (1 - p) * enter
    return p


def answer_for(problem, ops, votes_range, accuracy: float, rng, chain=()) -> str:
    """A warm-start answer to `problem`: K ~ U[votes_range] noisy votes and the program of their
    majority, or with `chain` (enter, stay) votes that settle (draw_chain) and the last one's program."""
    lo, hi = votes_range
    op, k = problem.metadata["op"], int(rng.integers(lo, hi + 1))
    if chain:
        votes = draw_chain(op, ops, k, accuracy, chain, rng)
        return response_text(votes, votes[-1])
    votes = draw_votes(op, ops, k, accuracy, rng)
    return response_text(votes, majority(votes, rng))


def build_tokenizer(problems, ops, data_config, vocab_size: int):
    """The demo's BPE corpus plus scratchpads, so every operation name is one token after a space."""
    corpus = demo_task.tokenizer_corpus(problems, ops, data_config)
    corpus += [response_text(list(ops) * 3, op) for op in ops] * 8
    return train_bpe_tokenizer(corpus, vocab_size)


def warm_start_batch(
    tokenizer, problems, ops, data_config, max_new_tokens: int, rng, *, votes_range, accuracy: float, chain=()
):
    """Prompts with scratchpad answers, laid out as the RL batch (see demo_task.warm_start_batch).

    An answer longer than `max_new_tokens` is cut there without its end token, as the sampler
    cuts it: the warm start teaches lengths on both sides of the cap.
    """
    texts = [answer_for(p, ops, votes_range, accuracy, rng, chain) for p in problems]
    return demo_task.sft_layout(tokenizer, problems, texts, data_config, max_new_tokens, cut=True)


def answer_lengths(tokenizer, problems, ops, votes_range, accuracy: float, n: int, seed: int = 0, chain=()):
    """Token lengths (with the end token) of `n` warm-start answers: where the cap cuts them."""
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(problems), size=n)
    return np.array(
        [
            len(
                tokenizer.encode(
                    answer_for(problems[j], ops, votes_range, accuracy, rng, chain), add_special_tokens=False
                )
            )
            + 1
            for j in picks
        ]
    )
