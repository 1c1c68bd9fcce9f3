"""The truncation task: the demo's "read a b, print a OP b" with a scratchpad of votes before the program.

An answer is `<think> v1 v2 ... vK </think>` and then the demo's fenced program. Each vote is one
operation name (one BPE token); the program computes the operation most votes name. The supervised
warm start draws K uniformly from `demo.votes` (spread around the response cap) and each vote names
the prompt's operation with probability `demo.vote_accuracy`, another one otherwise. So:

- the policy controls its length (K), and the cap binds: answers with many votes are cut off;
- a cut inside the scratchpad or the program leaves no program, so the judge says `no_code`
  (not judged wrong: what the conditional mask may protect);
- more votes make the majority right more often, so length helps correctness below the cap, and
  better votes (reading the operation off the prompt) are learnable from the reward, as in the demo.

The problems, tokenizer corpus and SFT step are the demo's (`demo_task`); the config is
`configs/truncation_task.py`.
"""
from __future__ import annotations

import functools

import numpy as np

from microcoder_jax.data import demo_task
from microcoder_jax.data.tokenizer import END_THINK, THINK, train_bpe_tokenizer

make_problems = demo_task.make_problems  # the same problems and prompts as the demo
_reused: dict | None = None  # warm starts kept in this process (reuse_warm_starts)


def reuse_warm_starts(enabled: bool = True) -> None:
    """Compute each distinct warm start once in this process (off by default).

    The experiments train several arms from the same seed one after another; their warm starts
    are identical (same inputs, same initial params), so the second arm reuses the first's result.
    """
    global _reused
    _reused = {} if enabled else None


@functools.cache
def _adam(learning_rate: float):
    """One optimizer object per learning rate, so the jitted SFT step compiles once per process."""
    import optax

    return optax.adam(learning_rate)


def _fingerprint(params, tokenizer, problems, data_config, model_config, *args) -> tuple:
    """What a warm start depends on: its inputs, and the initial params (their shapes and sums)."""
    import jax

    leaves = [(x.shape, float(np.asarray(x, np.float64).sum())) for x in jax.tree.leaves(params)]
    return (tuple(leaves), len(tokenizer), tokenizer.backend_tokenizer.to_str(),
            tuple(p.question_id for p in problems), repr(data_config), repr(model_config), args)


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


def answer_for(problem, ops, votes_range, accuracy: float, rng) -> str:
    """A warm-start answer to `problem`: K ~ U[votes_range], noisy votes, the majority's program."""
    lo, hi = votes_range
    votes = draw_votes(problem.metadata["op"], ops, int(rng.integers(lo, hi + 1)), accuracy, rng)
    return response_text(votes, majority(votes, rng))


def build_tokenizer(problems, ops, data_config, vocab_size: int):
    """The demo's BPE corpus plus scratchpads, so every operation name is one token after a space."""
    corpus = demo_task.tokenizer_corpus(problems, ops, data_config)
    corpus += [response_text(list(ops) * 3, op) for op in ops] * 8
    return train_bpe_tokenizer(corpus, vocab_size)


def warm_start_batch(tokenizer, problems, ops, data_config, max_new_tokens: int, rng, *,
                     votes_range, accuracy: float):
    """Prompts with scratchpad answers, laid out as the RL batch (see demo_task.warm_start_batch).

    An answer longer than `max_new_tokens` is cut there without its end token, as the sampler
    cuts it: the warm start teaches lengths on both sides of the cap.
    """
    texts = [answer_for(p, ops, votes_range, accuracy, rng) for p in problems]
    return demo_task.sft_layout(tokenizer, problems, texts, data_config, max_new_tokens, cut=True)


def answer_lengths(tokenizer, problems, ops, votes_range, accuracy: float, n: int, seed: int = 0):
    """Token lengths (with the end token) of `n` warm-start answers: where the cap cuts them."""
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(problems), size=n)
    return np.array([len(tokenizer.encode(answer_for(problems[j], ops, votes_range, accuracy, rng),
                                          add_special_tokens=False)) + 1 for j in picks])


def warm_start(params, model_config, tokenizer, problems, ops, data_config, *, steps: int,
               batch_size: int, learning_rate: float, max_new_tokens: int, seed: int,
               votes_range, accuracy: float, progress: bool = True, log=print, on_loss=None):
    """Supervised next-token training on scratchpad answers; returns new params.

    Under `reuse_warm_starts`, a warm start already computed in this process is returned again
    (a copy: the trainer donates its params) and its loss curve replayed to `on_loss`."""
    import jax
    import jax.numpy as jnp
    from tqdm import tqdm

    key = None
    if _reused is not None:
        key = _fingerprint(params, tokenizer, problems, data_config, model_config, tuple(ops), steps,
                           batch_size, learning_rate, max_new_tokens, seed, tuple(votes_range), accuracy)
        if key in _reused:
            done, losses = _reused[key]
            for i, value in enumerate(losses):
                if on_loss is not None:
                    on_loss(i + 1, value)
            log(f"warm start reused ({steps} steps, final next-token loss {losses[-1]:.4f})")
            return jax.tree.map(jnp.copy, done)
    optimizer = _adam(learning_rate)
    opt_state = optimizer.init(params)
    rng = np.random.default_rng(seed)
    loss, losses = float("nan"), []
    bar = tqdm(range(steps), desc="warm start", disable=not progress, dynamic_ncols=True)
    for i in bar:
        chosen = [problems[j] for j in rng.integers(0, len(problems), size=batch_size)]
        batch = warm_start_batch(tokenizer, chosen, ops, data_config, max_new_tokens, rng,
                                 votes_range=votes_range, accuracy=accuracy)
        params, opt_state, loss = demo_task._sft_step(params, opt_state, *batch,
                                                      model_config=model_config, optimizer=optimizer)
        losses.append(float(loss))
        if on_loss is not None:
            on_loss(i + 1, losses[-1])
        if i % 20 == 0 or i == steps - 1:
            bar.set_postfix(loss=f"{losses[-1]:.3f}")
    if steps:
        log(f"warm start (scratchpad votes {tuple(votes_range)}, vote accuracy {accuracy:g}): "
            f"{steps} steps, final next-token loss {float(loss):.4f}")
        if key is not None and _reused is not None:
            _reused[key] = (jax.tree.map(jnp.copy, params), losses)
    return params
