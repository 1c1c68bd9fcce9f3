"""rl.share_prompts: a group's prompt columns run once, its G rows attend to them; the answers'
log-probs, their gradients and a whole train step equal the unshared ones to float rounding (tiny
fp32 model). The prompt block (`shared = (w, f)`, f = 1 unshared) also skips the LM head on the
prompt's columns, which no loss reads: their log-probs are 0."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from microcoder_jax import models
from microcoder_jax.rl.logprobs import compute_logprobs, prompt_width, sequence_logprobs, shared_prompt_width
from microcoder_jax.rl.presets import make_rl_config
from microcoder_jax.rl.step import init_train_state, make_train_step
from random_params import numpy_params

G, PROMPTS, P, R = 4, 3, 8, 10
N, S = G * PROMPTS, P + R
MC = models.get_preset("tiny", dtype="float32")


@pytest.fixture(scope="module")
def params():
    return numpy_params(MC, 0.02)


def grouped_batch(seed=0):
    """Left-padded prompts repeated over each group's G rows (one temperature a group), answers of
    random lengths (an empty one and one at the cap), right-padded."""
    rng = np.random.default_rng(seed)
    tokens, attn, resp = (np.zeros((N, S), np.int32) for _ in range(3))
    temperature = np.zeros(N, np.float32)
    lengths = rng.integers(1, R + 1, N).astype(np.int32)
    lengths[1], lengths[6] = 0, R
    for g in range(PROMPTS):
        plen = int(rng.integers(2, P + 1))
        prompt = rng.integers(1, MC.vocab_size, plen)
        t = rng.choice([0.6, 1.0, 1.3])
        for i in range(g * G, (g + 1) * G):
            tokens[i, P - plen : P] = prompt
            tokens[i, P : P + lengths[i]] = rng.integers(1, MC.vocab_size, lengths[i])
            attn[i, P - plen : P + lengths[i]] = 1
            resp[i, P : P + lengths[i]] = 1
            temperature[i] = t
    return {
        "tokens": tokens,
        "attention_mask": attn,
        "response_mask": resp,
        "response_lengths": lengths,
        "truncated": lengths == R,
        "temperature": temperature,
        "rewards": rng.integers(0, 2, N).astype(np.float32),
        "passed": rng.random(N) < 0.5,
        "no_code": np.zeros(N, bool),
    }


def conditioned(attn, first=0):
    """Columns whose log-prob means something: a real token after a real token (the one a padding
    position predicts is garbage in either layout, and no loss reads it), from column `first`."""
    cols = jnp.arange(attn.shape[1])[None] >= first
    return (attn > 0) & jnp.pad(attn[:, :-1] > 0, ((0, 0), (1, 0))) & cols


@functools.partial(jax.jit, static_argnums=2)
def values_and_grads(params, b, shared):
    """(gradients of a weighted sum of the answers' log-probs, (log-probs, entropy)) of batch `b`."""
    weight = conditioned(b["attention_mask"], P) * jnp.linspace(-1, 1, S)[None]

    def loss(p):
        logp, ent = sequence_logprobs(p, MC, b["tokens"], b["attention_mask"], b["temperature"], 5, shared=shared)
        return jnp.sum(logp * weight), (logp, ent)

    return jax.grad(loss, has_aux=True)(params)


@pytest.mark.parametrize("rows", [G, G // 2, 1])
def test_logprobs_and_gradients_equal_unshared(params, rows):
    """Shared in groups of G or G/2 rows, or a prompt block alone (rows = 1): the answers' log-probs,
    entropies and gradients are the plain forward's; the prompt's columns are 0."""
    b = {k: v for k, v in grouped_batch().items() if k in ("tokens", "attention_mask", "temperature")}
    keep = conditioned(b["attention_mask"], P)
    g_want, want = values_and_grads(params, b, None)  # compiled once for every parametrisation
    g_got, got = values_and_grads(params, b, (P, rows))
    for w, g in zip(want, got):
        np.testing.assert_allclose(np.where(keep, g, 0), np.where(keep, w, 0), atol=5e-6)
        assert not np.asarray(g)[:, :P].any()  # the prompt's columns skip the LM head
        assert np.asarray(w)[:, 1:P][np.asarray(conditioned(b["attention_mask"]))[:, 1:P]].any()
    for path, w in jax.tree_util.tree_leaves_with_path(g_want):
        g = g_got
        for k in path:
            g = g[k.key]
        np.testing.assert_allclose(g, w, atol=1e-6 + 1e-4 * float(np.abs(w).max()), err_msg=str(path))


def test_old_logprob_pass_shares_within_each_micro_batch(params):
    """compute_logprobs with micro-batches of 2 rows (2 rows of a group share) and of the whole batch."""
    b = grouped_batch(1)
    keep = conditioned(b["attention_mask"], P)
    args = (params, MC, b["tokens"], b["attention_mask"], b["temperature"])
    want = np.asarray(compute_logprobs(*args, chunk=5))
    for micro in (2, None):
        got = np.asarray(compute_logprobs(*args, chunk=5, micro_batch=micro, shared=(P, G)))
        np.testing.assert_allclose(np.where(keep, got, 0), np.where(keep, want, 0), atol=5e-6)


@pytest.mark.slow  # two compiles of the step; the quick tier keeps the log-prob and gradient checks
def test_train_step_equals_unshared(params):
    """Two mini-batches, micro-batches of 2 rows: params, optimizer state and metrics as unshared."""
    cfg = make_rl_config(
        "microcoder", group_size=G, num_minibatches=2, micro_batch_size=2, learning_rate=1e-3, logprob_chunk=5
    )
    b = grouped_batch(2)
    b["old_logprobs"] = np.asarray(compute_logprobs(params, MC, b["tokens"], b["attention_mask"], b["temperature"]))
    step = make_train_step(MC, cfg)
    want_state, want = step(init_train_state(params, cfg), b)
    got_state, got = step(init_train_state(params, cfg), b, shared=(P, G))
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=2e-5, atol=1e-6, err_msg=k)
    # Adam divides by sqrt(v): an element whose gradient is ~0 turns rounding into a visible step,
    # so the updates are compared to within 1% of the learning rate (an update's size)
    for w, g in zip(jax.tree.leaves(want_state.params), jax.tree.leaves(got_state.params)):
        np.testing.assert_allclose(g, w, rtol=0, atol=1e-5)
    assert float(got["loss_tokens"]) == float(b["response_mask"].sum())
    assert step._cache_size() == 2  # the shared program is its own (static `shared`), not the plain one again


def test_shared_width_is_the_widest_bucket_every_group_repeats():
    b = grouped_batch(3)
    t, m, temp = b["tokens"], b["attention_mask"], b["temperature"]
    assert shared_prompt_width(t, m, temp, G, (4, P)) == P
    assert shared_prompt_width(t, m, temp, G, (4, P), cap=P - 1) == 4  # capped below the answers
    assert shared_prompt_width(t, m, temp, G, (4, P, 12)) in (P, 12)  # 12 only if every group's answers agree
    other = t.copy()
    other[G + 1, P - 1] += 1  # one row of the second group has another last prompt token
    assert shared_prompt_width(other, m, temp, G, (4, P)) == 4
    mixed = temp.copy()
    mixed[2] *= 2  # a group sampled at two temperatures shares no prompt log-probs
    assert shared_prompt_width(t, m, mixed, G, (4, P)) == 0
    assert shared_prompt_width(t, m, temp, 5, (P,)) == 0  # rows that are no whole groups


def test_share_prompts_and_packing_refused_together():
    with pytest.raises(ValueError, match=r"rl\.share_prompts=True: packed rows .*rl\.packing=False"):
        make_rl_config("microcoder", share_prompts=True, packing=True)


def test_shared_pass_runs_the_prompt_once_a_group(params):
    """The compiled pass does less work: XLA's cost analysis counts fewer flops with the prompt shared."""
    b = grouped_batch(4)
    args = (params, MC, b["tokens"], b["attention_mask"], b["temperature"])

    def flops(shared):
        lowered = compute_logprobs.jitted.lower(*args, chunk=5, shared=shared)
        return lowered.compile().cost_analysis()["flops"]

    plain, shared = flops(None), flops((P, G))
    # the prompt is 8 of 18 columns, run for 3 of 12 rows: the layers see 156 of 216 row-columns
    assert shared < 0.85 * plain, (shared, plain)


def test_prompt_width_is_the_widest_bucket_before_every_answer():
    resp = grouped_batch(6)["response_mask"]
    assert prompt_width(resp, (4, P, 12)) == P
    assert prompt_width(resp, (4, P - 1)) == P - 1 and prompt_width(resp, (P + 1,)) == 0
    late = resp.copy()
    late[:, P] = 0  # every answer starts a column later (as a turn after the first would): still P
    assert prompt_width(late, (P, P + 1)) == P + 1
    assert prompt_width(np.zeros_like(resp), (4, P)) == 0  # no answer: nothing known
    multi = np.zeros_like(resp)
    multi[:, P : P + 3], multi[:, P + 6 :] = 1, 1  # a multi-turn row's holes do not move the start
    assert prompt_width(multi, (P, 12)) == P


def test_learner_prompt_block_rule():
    """The learner's rule: the prompt block always (f = 1), shared under rl.share_prompts (f = G) at
    a bucket at most the columns before the answers; none under rl.packing."""
    from types import SimpleNamespace

    from microcoder_jax.trainer.learner import prompt_block

    b = grouped_batch(5)
    rows = {k: b[k] for k in ("tokens", "attention_mask", "response_mask", "temperature")}

    def run(share, buckets=(4, P, 12), packing=False):
        cfg = make_rl_config("microcoder", group_size=G, share_prompts=share, packing=packing)
        return SimpleNamespace(rl_config=cfg, data=SimpleNamespace(prompt_buckets=buckets))

    assert prompt_block(run(False), rows) == (P, 1)
    assert prompt_block(run(True), rows) == (P, G)  # 12 would reach into the answers
    assert prompt_block(run(True, buckets=(P + 2,)), rows) is None
    assert prompt_block(run(False, packing=True), rows) is None
    mixed = {**rows, "temperature": rows["temperature"] * np.linspace(1, 2, N, dtype=np.float32)}
    assert prompt_block(run(True), mixed) == (P, 1)  # not shared, still not scored


@pytest.mark.slow
def test_demo_trains_the_same_with_shared_prompts(tmp_path):
    """Two demo steps with and without rl.share_prompts: the first step's metrics (same batch, same
    params) agree to float rounding and the shared programs ran."""
    from microcoder_jax.trainer import learner as learner_lib
    from microcoder_jax.trainer import loop as train
    from microcoder_jax.trainer.metrics import read_metrics
    from short_demo import short_demo

    shared_calls = []
    real = learner_lib.prompt_block

    def spy(*args):
        out = real(*args)
        shared_calls.append(out)
        return out

    rows = {}
    for share in (False, True):
        c = short_demo(2, **{"train.warm_start_steps": 0, "rl.share_prompts": share})
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(learner_lib, "prompt_block", spy)
            train.train(c, str(tmp_path / str(share)), log_fn=lambda *a: None)
        rows[share] = read_metrics(str(tmp_path / str(share) / "metrics.jsonl"))
    assert [x for x in shared_calls if x[1] > 1] and all(x[1] > 1 for x in shared_calls[-4:])
    plain, shared = rows[False][0], rows[True][0]
    assert plain["reward_mean"] == shared["reward_mean"]  # the same sampled batch
    for key in ("loss", "grad_norm", "policy_entropy", "approx_kl", "ratio_mean"):
        assert shared[key] == pytest.approx(plain[key], rel=1e-4, abs=1e-6), key
    assert len(rows[True]) == 2 and np.isfinite(rows[True][1]["loss"])


def _learner_estimates(overrides, devices):
    from microcoder_jax import cli
    from microcoder_jax.plan import planner
    from microcoder_jax.plan.topologies import parse_topology

    config = cli.load_config("configs/demo.py", ["mesh.fsdp=-1", "rl.packing=False", *overrides])
    result = planner.plan(config, parse_topology("h100", devices=devices), search=False)
    return {r.program.name: r.estimate for r in result.rows if r.program.name in ("old log-probs", "train step")}


def test_planner_counts_the_prompt_once_per_group_a_device_holds():
    """One device holds whole groups: the learner's FLOPs drop by the prompt's share. Eight devices
    with micro-batches of 8 rows hold one row of a group each: every device runs the whole prompt,
    so the planner claims no saving in the layers there (and counts the unfused attention's scores)."""
    micro = ["rl.micro_batch_size=8", "sampling.group_size=8"]
    one = _learner_estimates(micro, 1), _learner_estimates([*micro, "rl.share_prompts=True"], 1)
    eight = _learner_estimates(micro, 8), _learner_estimates([*micro, "rl.share_prompts=True"], 8)
    for name in ("old log-probs", "train step"):
        on_one, on_eight = (x[1][name].flops / x[0][name].flops for x in (one, eight))
        # the demo's prompt is 64 of 104 columns: one device skips most of it in 7 of 8 rows;
        # on eight only the attention's masked prompt-to-answer block is left out
        assert on_one < 0.6 and on_eight > on_one + 0.2, (name, on_one, on_eight)
        assert "shared-prompt attention scores (XLA, one layer)" in eight[1][name].components


@pytest.mark.slow  # compiles the two learner programs for a TPU topology
def test_learner_programs_with_a_shared_prompt_compile_for_tpu():
    from microcoder_jax import cli
    from microcoder_jax.plan import planner
    from microcoder_jax.plan.topologies import parse_topology

    try:
        topology = parse_topology("v5e:2x2")
        topology.devices()
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"libtpu cannot make AOT devices here: {str(e).splitlines()[0][:100]}")
    config = cli.load_config("configs/demo.py", ["mesh.fsdp=-1", "rl.share_prompts=True"])
    result = planner.plan(config, topology, cache_dir=None, only=("old log-probs", "train step"), search=False)
    assert [r.program.name for r in result.rows] == ["old log-probs", "train step"]
    for row in result.rows:
        assert row.error == "" and row.program.kwargs["shared"] == (max(config.data.prompt_buckets), 8), row.error
