"""The CPU tasks' supervised warm start: next-token training on answers in the task's format (the
demo's programs, or the truncation task's scratchpad of votes then a program), so that RL starts
from a model whose programs the judge can run. The tasks (data/demo_task.py, data/truncation_task.py)
only lay out the batches; the training loop is here, where the model is."""

from __future__ import annotations

import functools
import types

import jax
import jax.numpy as jnp
import numpy as np
import optax

from microcoder_jax import models
from microcoder_jax.data import demo_task, truncation_task

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
    return optax.adam(learning_rate)


@functools.partial(jax.jit, static_argnames=("model_config", "optimizer"), donate_argnums=(0, 1))
def sft_step(params, opt_state, tokens, attention, loss_mask, *, model_config, optimizer):
    """One next-token cross-entropy update on the answer tokens."""

    def loss_fn(p):
        logits, _ = models.forward(p, model_config, tokens, attention_mask=attention)
        logp = jax.nn.log_softmax(logits[:, :-1].astype(jnp.float32))
        target = tokens[:, 1:]
        nll = -jnp.take_along_axis(logp, target[..., None], -1)[..., 0]
        w = loss_mask[:, 1:].astype(jnp.float32)
        return (nll * w).sum() / jnp.maximum(w.sum(), 1.0)

    loss, grads = jax.value_and_grad(loss_fn)(params)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss


def _fingerprint(params, tokenizer, problems, *args) -> tuple:
    """What a warm start depends on: its inputs, and the initial params (their shapes and sums)."""
    leaves = [(x.shape, float(np.asarray(x, np.float64).sum())) for x in jax.tree.leaves(params)]
    return (
        tuple(leaves),
        len(tokenizer),
        tokenizer.backend_tokenizer.to_str(),
        tuple(p.question_id for p in problems),
        args,
    )


def _second_op(ops, a: int, b: int, expected: str, reads: float, rng) -> str:
    """A warm-start second answer's operation: with chance `reads` (drawn only when > 0, so 0 keeps
    the rows of runs before the knob) the first that gives the expected output, else a random one."""
    if reads > 0 and rng.random() < reads:
        fits = [op for op in ops if str(demo_task.OPS[op][2](a, b)) == expected.strip()]
        if fits:
            return fits[0]
    return str(rng.choice(list(ops)))


def feedback_batch(tokenizer, problems, ops, data_config, max_new_tokens: int, rng, *, env_config, reads=0.0):
    """demo.warm_start_batch's rows, but where the random operation fails the problem's public
    test the row goes on as a two-turn episode does: the feedback that answer gets (the judge's
    comparison, envs.feedback's text, the template's follow-up) and a second answer: of another
    random operation (format only, as the one-turn warm start: which operation the feedback points
    to is left to RL), or with chance `reads` (demo.warm_start_reads) the one it points to.
    (tokens, attention, loss_mask) [B, EnvConfig.row_width]."""
    from microcoder_jax.data.problems import public_tests
    from microcoder_jax.data.prompts import encode_prompt, left_pad, prompt_bucket
    from microcoder_jax.data.tokenizer import pad_token_id
    from microcoder_jax.envs.feedback import feedback_text
    from microcoder_jax.judge.compare import compare_stdout
    from microcoder_jax.trainer.episodes import feedback_ids

    pad, end = pad_token_id(tokenizer), tokenizer.eos_token_id
    prompts = [encode_prompt(tokenizer, p, data_config) for p in problems]
    P = prompt_bucket(max(map(len, prompts)), data_config.prompt_buckets)
    S = env_config.row_width(P, max_new_tokens)
    tokens, _ = left_pad(prompts, P, pad)
    tokens = np.concatenate([tokens, np.full((len(problems), S - P), pad, np.int32)], 1)
    attention = (np.arange(S)[None, :] >= P - np.array([len(p) for p in prompts])[:, None]).astype(np.int32)
    loss_mask = np.zeros_like(tokens)

    def answer(op):
        ids = tokenizer.encode(demo_task.response_text(op), add_special_tokens=False) + [end]
        if len(ids) > max_new_tokens:
            raise ValueError(f"demo answer of {len(ids)} tokens exceeds max_new_tokens={max_new_tokens}")
        return ids

    for i, problem in enumerate(problems):
        op = str(rng.choice(list(ops)))
        body, mine = answer(op), [1] * len(answer(op))
        public = public_tests(problem)
        if public and env_config.turns > 1:
            a, b = (int(x) for x in public[0].input.split())
            printed = f"{demo_task.OPS[op][2](a, b)}\n"
            ok, reason = compare_stdout(public[0].output, printed)
            if not ok:  # the judge's result for this answer, as the feedback env reads it
                failed = types.SimpleNamespace(
                    passed=False, verdict="wrong_answer", reason=f"test 0: {reason}", output=printed,
                    output_size=len(printed.encode()),
                )  # fmt: skip
                text = feedback_text(public[:1], [failed], env_config.feedback_chars)
                fb = feedback_ids(
                    tokenizer, text, tokenizer.decode([end]), env_config.feedback_tokens, data_config.enable_thinking
                )
                second = answer(_second_op(ops, a, b, public[0].output, reads, rng))
                body, mine = body + fb + second, mine + [0] * len(fb) + [1] * len(second)
        tokens[i, P : P + len(body)] = body
        attention[i, P + len(body) :] = 0
        loss_mask[i, P : P + len(body)] = mine
    return tokens, attention, loss_mask


def warm_start(
    params,
    model_config,
    tokenizer,
    problems,
    demo_config,
    data_config,
    *,
    env_config=None,
    steps: int,
    max_new_tokens: int,
    seed: int,
    progress: bool = True,
    log=print,
    on_loss=None,
):
    """Supervised training on the task's answers (the truncation task's when `demo_config.votes`
    is set; with multi-turn episodes, `env_config`, and public tests, two-turn rows: feedback_batch;
    else the demo's); returns new params. `on_loss(step, loss)` receives every step's loss
    (the warm-start curve in the plots). Under `reuse_warm_starts`, a warm start already computed in
    this process is returned again (a copy: the trainer donates its params) and its curve replayed."""
    from tqdm import tqdm

    d = demo_config
    if d.votes:
        votes = dict(votes_range=tuple(d.votes), accuracy=d.vote_accuracy, chain=tuple(d.vote_chain))
        make_batch = functools.partial(truncation_task.warm_start_batch, **votes)
        rule = f", chain (enter, stay) {tuple(d.vote_chain)}" if d.vote_chain else ""
        label = f"warm start (scratchpad votes {tuple(d.votes)}, vote accuracy {d.vote_accuracy:g}{rule})"
    elif env_config is not None and env_config.turns > 1 and d.public_tests:
        make_batch = functools.partial(feedback_batch, env_config=env_config, reads=d.warm_start_reads)
        label = "warm start (two-turn rows where the answer fails the public test)"
        if d.warm_start_reads:
            label += f", second answers reading the feedback with chance {d.warm_start_reads:g}"
    else:
        make_batch, label = demo_task.warm_start_batch, "warm start"
    key = None
    if _reused is not None:
        key = _fingerprint(
            params,
            tokenizer,
            problems,
            repr(data_config),
            repr(model_config),
            tuple(d.ops),
            steps,
            d.warm_start_batch,
            d.warm_start_lr,
            max_new_tokens,
            seed,
            label,
            repr(env_config),
        )
        if key in _reused:
            done, losses = _reused[key]
            for i, value in enumerate(losses):
                if on_loss is not None:
                    on_loss(i + 1, value)
            log(f"{label} reused: {steps} steps, final next-token loss {losses[-1]:.4f}")
            return jax.tree.map(jnp.copy, done)
    optimizer = _adam(d.warm_start_lr)
    opt_state = optimizer.init(params)
    rng = np.random.default_rng(seed)
    losses = []
    bar = tqdm(range(steps), desc="warm start", disable=not progress, dynamic_ncols=True)
    for i in bar:
        chosen = [problems[j] for j in rng.integers(0, len(problems), size=d.warm_start_batch)]
        batch = make_batch(tokenizer, chosen, d.ops, data_config, max_new_tokens, rng)
        params, opt_state, loss = sft_step(params, opt_state, *batch, model_config=model_config, optimizer=optimizer)
        losses.append(float(loss))
        if on_loss is not None:
            on_loss(i + 1, losses[-1])
        if i % 20 == 0 or i == steps - 1:
            bar.set_postfix(loss=f"{losses[-1]:.3f}")
    if steps:
        log(f"{label}: {steps} steps, final next-token loss {losses[-1]:.4f}")
        if key is not None and _reused is not None:
            _reused[key] = (jax.tree.map(jnp.copy, params), losses)
    return params
