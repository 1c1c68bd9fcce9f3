"""rl.advantages and rl.dynamic_sampling against NumPy references written from docs/method.md."""

import logging

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from microcoder_jax.rl import advantages as A
from microcoder_jax.rl.dynamic_sampling import GroupBuffer, add_rollouts, informative_groups
from microcoder_jax.rl.presets import make_rl_config

G = 4


def ref_group_adv(r, g, std, eps, ddof=1):
    r = r.reshape(-1, g).astype(np.float64)
    c = r - r.mean(1, keepdims=True)
    if std == "none":
        return c.ravel()
    s = r.std(1, ddof=ddof, keepdims=True) if std == "group" else r.std(ddof=ddof)
    return (c / (s + eps)).ravel()


def ref_repeat(response, m):
    o = list(response)
    return len(o) >= 2 * m and o[-m:] == o[-2 * m : -m]


def make_batch(rng, num_prompts=6, prompt_len=5, max_new=16, m=3, vocab=7):
    """Rollout batch per the contract, with planted repeats and the edge-case lengths."""
    n, s = num_prompts * G, prompt_len + max_new
    tokens = np.zeros((n, s), np.int32)
    attn = np.zeros((n, s), np.int32)
    resp_mask = np.zeros((n, s), np.int32)
    edge = [0, 1, 2 * m - 1, 2 * m, 2 * m, max_new, max_new, max_new]
    lengths = np.array([edge[i] if i < len(edge) else rng.integers(0, max_new + 1) for i in range(n)], np.int32)
    responses = []
    for i in range(n):
        plen = rng.integers(1, prompt_len + 1)
        tokens[i, prompt_len - plen : prompt_len] = rng.integers(1, vocab, plen)
        attn[i, prompt_len - plen : prompt_len + lengths[i]] = 1
        resp = rng.integers(1, vocab, lengths[i])
        if lengths[i] >= 2 * m and i % 2 == 0:  # plant a repeat of the last m tokens
            resp[-m:] = resp[-2 * m : -m]
        tokens[i, prompt_len : prompt_len + lengths[i]] = resp
        resp_mask[i, prompt_len : prompt_len + lengths[i]] = 1
        responses.append(resp)
    truncated = lengths == max_new
    return {
        "tokens": tokens,
        "attention_mask": attn,
        "response_mask": resp_mask,
        "rewards": rng.integers(0, 2, n).astype(np.float32),
        "passed": rng.random(n) < 0.5,
        "no_code": rng.random(n) < 0.5,
        "truncated": truncated,
        "response_lengths": lengths,
        "temperature": np.full(n, 1.2, np.float32),
    }, responses


@pytest.mark.parametrize("std", ["group", "batch", "none"])
def test_group_advantages(std):
    rng = np.random.default_rng(0)
    r = rng.random(8 * G).astype(np.float32)
    r[:G] = 1.0  # an all-equal group gives zeros, not NaN
    r[G : 2 * G] = 0.0
    got = np.asarray(A.group_advantages(jnp.asarray(r), G, std=std, eps=1e-6))
    np.testing.assert_allclose(got, ref_group_adv(r, G, std, 1e-6), rtol=1e-5, atol=1e-5)
    assert np.all(got[: 2 * G] == 0)


@pytest.mark.parametrize("std", ["group", "batch"])
def test_group_advantages_ddof_switch(std):
    r = np.array([1, 0, 0, 0, 1, 1, 0, 0], np.float32)
    got = {d: np.asarray(A.group_advantages(jnp.asarray(r), G, std=std, eps=0.0, ddof=d)) for d in (0, 1)}
    for d in (0, 1):
        np.testing.assert_allclose(got[d], ref_group_adv(r, G, std, 0.0, ddof=d), rtol=1e-5)
    n = G if std == "group" else len(r)  # sample std = population std * sqrt(n / (n - 1))
    np.testing.assert_allclose(got[0], got[1] * np.sqrt(n / (n - 1)), rtol=1e-5)


def test_group_advantages_binary_rewards():
    r = np.array([1, 0, 0, 0, 1, 1, 1, 1], np.float32)
    got = np.asarray(A.group_advantages(jnp.asarray(r), G))
    np.testing.assert_allclose(got, ref_group_adv(r, G, "group", 1e-6), rtol=1e-5)
    assert got[0] > 0 > got[1] and np.all(got[G:] == 0)


@pytest.mark.parametrize("m", [1, 3])
def test_repeat_flags_matches_reference(m):
    rng = np.random.default_rng(m)
    batch, responses = make_batch(rng, m=m)
    start = A.response_start(jnp.asarray(batch["response_mask"]))
    got = np.asarray(A.repeat_flags(jnp.asarray(batch["tokens"]), jnp.asarray(batch["response_lengths"]), m, start))
    want = np.array([ref_repeat(o, m) for o in responses])
    np.testing.assert_array_equal(got, want)
    assert want.any() and not want.all()


def test_repeat_flags_edges_on_response_only_arrays():
    m = 2
    tok = np.array(
        [
            [5, 6, 5, 6, 0, 0],  # exactly 2m, repeating
            [5, 6, 5, 7, 0, 0],  # exactly 2m, not repeating
            [5, 6, 5, 0, 0, 0],  # 2m - 1: never a repeat
            [0, 0, 0, 0, 0, 0],  # empty (pad ids equal, but length 0)
            [1, 2, 3, 9, 3, 9],
        ]
    )  # full width, repeating tail
    lengths = np.array([4, 4, 3, 0, 6])
    got = np.asarray(A.repeat_flags(jnp.asarray(tok), jnp.asarray(lengths), m))
    np.testing.assert_array_equal(got, [True, False, False, False, True])


def test_soft_overlong_penalty():
    lengths = np.array([0, 10, 12, 13, 16, 20])
    got = np.asarray(A.soft_overlong_penalty(jnp.asarray(lengths), 20, 8))
    want = [0.0, 0.0, 0.0, -1 / 8, -4 / 8, -1.0]  # zero up to 12, -1 at the cap of 20
    np.testing.assert_allclose(got, want, rtol=1e-6)


def ref_compute(cfg, batch, responses, u):
    """compute_advantages from the formulas, row by row."""
    n, s = batch["tokens"].shape
    lengths, trunc = batch["response_lengths"], batch["truncated"]
    r = batch["rewards"].astype(np.float64).copy()
    if cfg.truncation == "soft_overlong":
        cap = s - 5
        for i in range(n):
            if lengths[i] > cap - cfg.soft_overlong_cache:
                r[i] += -min((lengths[i] - (cap - cfg.soft_overlong_cache)) / cfg.soft_overlong_cache, 1)
    adv = ref_group_adv(r, cfg.group_size, cfg.adv_std, cfg.adv_eps, cfg.adv_std_ddof)
    weight = np.ones(n)
    for i in range(n):
        ok = batch["passed"][i] or (cfg.non_incorrect == "not_judged_wrong" and batch["no_code"][i])
        if cfg.truncation == "conditional":
            if trunc[i] and ok and not ref_repeat(responses[i], cfg.repeat_m) and u[i] < cfg.rho:
                adv[i] = 0.0
        elif cfg.truncation == "mask_all" and trunc[i]:
            adv[i] = 0.0
        elif cfg.truncation == "overlong_filter" and trunc[i]:
            weight[i] = 0.0
    return adv, weight


CASES = [
    dict(truncation="conditional", non_incorrect="passed", rho=0.5),
    dict(truncation="conditional", non_incorrect="not_judged_wrong", rho=0.5),
    dict(truncation="conditional", non_incorrect="not_judged_wrong", rho=0.0),
    dict(truncation="conditional", non_incorrect="not_judged_wrong", rho=1.0),
    dict(truncation="none"),
    dict(truncation="mask_all"),
    dict(truncation="overlong_filter"),
    dict(truncation="soft_overlong", soft_overlong_cache=6),
    dict(truncation="conditional", adv_std="batch", rho=1.0),
    dict(truncation="conditional", adv_std="none", rho=1.0),
    dict(truncation="conditional", adv_std="group", adv_std_ddof=0, rho=0.5),
]


@pytest.mark.parametrize("overrides", CASES, ids=lambda d: "-".join(map(str, d.values())))
def test_compute_advantages_matches_reference(overrides):
    cfg = make_rl_config("microcoder", group_size=G, repeat_m=3, **overrides)
    rng = np.random.default_rng(7)
    batch, responses = make_batch(rng, m=3)
    u = rng.random(len(responses)).astype(np.float32)
    adv, weight, stats = jax.jit(A.compute_advantages, static_argnums=0)(
        cfg, jax.tree.map(jnp.asarray, batch), jnp.asarray(u)
    )
    want_adv, want_w = ref_compute(cfg, batch, responses, u)
    np.testing.assert_allclose(np.asarray(adv), want_adv, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(np.asarray(weight), want_w)
    assert np.isclose(float(stats["frac_truncated"]), batch["truncated"].mean())
    if overrides.get("rho") == 0.0:
        assert float(stats["frac_masked"]) == 0.0


def test_all_truncated_rho_one_masks_every_eligible_row():
    cfg = make_rl_config("microcoder", group_size=G, repeat_m=3, rho=1.0, non_incorrect="not_judged_wrong")
    rng = np.random.default_rng(3)
    batch, responses = make_batch(rng, m=3)
    batch["truncated"][:] = True
    batch["passed"][:] = True  # every row non-incorrect: only repeating rows keep advantages
    u = rng.random(len(responses)).astype(np.float32)
    adv, _, stats = A.compute_advantages(cfg, jax.tree.map(jnp.asarray, batch), jnp.asarray(u))
    rep = np.array([ref_repeat(o, 3) for o in responses])
    assert np.all(np.asarray(adv)[~rep] == 0)
    np.testing.assert_allclose(float(stats["frac_masked"]), (~rep).mean())
    np.testing.assert_allclose(float(stats["frac_trunc_repeating"]), rep.mean())


def _rollouts(rewards):
    r = np.asarray(rewards, np.float32)
    return {"rewards": r, "tokens": np.arange(len(r))[:, None] * np.ones((1, 3), np.int32)}


def test_informative_groups():
    got = informative_groups(np.array([1, 1, 1, 1, 0, 1, 0, 0, 0, 0, 0, 0.0]), G)
    np.testing.assert_array_equal(got, [False, True, False])


def test_dynamic_sampling_refills_until_full():
    buf = GroupBuffer()
    kw = dict(group_size=G, num_prompts=2, max_refills=3)
    buf, out, _ = add_rollouts(buf, _rollouts([1, 1, 1, 1, 0, 1, 0, 0]), **kw)
    assert out is None and buf.generations == 1
    buf, out, _ = add_rollouts(buf, _rollouts([0, 0, 0, 0, 1, 0, 1, 1, 0, 0, 0, 1]), **kw)
    assert buf.kept is None
    np.testing.assert_array_equal(out["rewards"], [0, 1, 0, 0, 1, 0, 1, 1])
    np.testing.assert_array_equal(out["tokens"][:, 0], [4, 5, 6, 7, 4, 5, 6, 7])


def test_dynamic_sampling_cap_fills_with_dropped_groups_and_warns(caplog):
    buf, kw = GroupBuffer(), dict(group_size=G, num_prompts=3, max_refills=1)
    buf, out, _ = add_rollouts(buf, _rollouts([1, 1, 1, 1, 0, 1, 0, 0]), **kw)
    with caplog.at_level(logging.WARNING):
        buf, out, stats = add_rollouts(buf, _rollouts([0] * 8), **kw)
    assert "max_refills=1" in caplog.text
    assert out["rewards"].shape == (3 * G,) and stats["ds_filled_groups"] == 2
    np.testing.assert_array_equal(informative_groups(out["rewards"], G), [True, False, False])


def _bucket_rollouts(rewards, prompt, max_new=3, seed=0):
    """Judged rows in the step's layout with a prompt bucket of `prompt` columns."""
    rng = np.random.default_rng(seed)
    r = np.asarray(rewards, np.float32)
    n, s = len(r), prompt + max_new
    plen = rng.integers(1, prompt + 1, n)
    cols = np.arange(s)[None, :]
    prompt_part = (cols >= prompt - plen[:, None]) & (cols < prompt)
    resp = np.broadcast_to((cols >= prompt).astype(np.int32), (n, s))
    attn = (prompt_part | (resp > 0)).astype(np.int32)
    tokens = (rng.integers(1, 50, (n, s)) * attn).astype(np.int32)
    return {
        "rewards": r,
        "tokens": tokens,
        "attention_mask": attn,
        "response_mask": resp,
        "old_logprobs": (-rng.random((n, s)) * attn).astype(np.float32),
        "response_lengths": np.full(n, max_new, np.int32),
        "temperature": np.ones(n, np.float32),
    }


def test_dynamic_sampling_refill_from_another_prompt_bucket_is_left_padded():
    """A refill with a wider (then a narrower) prompt bucket: [rows, S] arrays are left-padded to
    the widest bucket, so each response stays in the last max_new columns; 1-D arrays untouched."""
    kw = dict(group_size=G, num_prompts=3, max_refills=3)
    first = _bucket_rollouts([1, 1, 1, 1, 0, 1, 0, 0], prompt=4, seed=1)
    wide = _bucket_rollouts([0, 1, 1, 1, 0, 0, 0, 0], prompt=8, seed=2)
    narrow = _bucket_rollouts([1, 0, 0, 0], prompt=2, seed=3)
    buf, out, _ = add_rollouts(GroupBuffer(), first, **kw)
    buf, out, _ = add_rollouts(buf, wide, **kw)
    assert out is None
    buf, out, _ = add_rollouts(buf, narrow, **kw)
    want_rows = [(first, slice(4, 8)), (wide, slice(0, 4)), (narrow, slice(0, 4))]
    assert out["tokens"].shape == (3 * G, 8 + 3)
    for k in ("tokens", "attention_mask", "response_mask", "old_logprobs"):
        for j, (src, rows) in enumerate(want_rows):
            got, width = out[k][j * G : (j + 1) * G], src[k].shape[1]
            np.testing.assert_array_equal(got[:, -width:], src[k][rows], err_msg=k)
            assert not got[:, :-width].any(), k  # the new columns: padding, masked out
    np.testing.assert_array_equal(out["response_mask"][:, -3:], 1)
    np.testing.assert_array_equal(
        out["rewards"], np.concatenate([first["rewards"][4:], wide["rewards"][:4], narrow["rewards"]])
    )
    # positions (cumsum of the mask) are unchanged by left padding: the model sees the same rows
    for j, (src, rows) in enumerate(want_rows):
        pos = np.cumsum(out["attention_mask"][j * G : (j + 1) * G], 1)[:, -3:]
        np.testing.assert_array_equal(pos, np.cumsum(src["attention_mask"][rows], 1)[:, -3:])


def test_a_judge_error_row_leaves_the_reward_out():
    """A NaN reward (judge_error) gets advantage 0 and row weight 0, and its group's mean and std
    are those of the other rows: the same advantages as the group without it."""
    cfg = make_rl_config("microcoder", group_size=4, truncation="none")
    n, s = 8, 6
    base = {
        "tokens": np.ones((n, s), np.int32),
        "response_mask": np.ones((n, s), np.int32),
        "response_lengths": np.full(n, s, np.int32),
        "truncated": np.zeros(n, bool),
        "passed": np.zeros(n, bool),
        "no_code": np.zeros(n, bool),
    }
    rewards = np.array([1, 0, np.nan, 1, 0, 0, 1, 0], np.float32)
    adv, weight, stats = A.compute_advantages(
        cfg, jax.tree.map(jnp.asarray, {**base, "rewards": rewards}), jnp.zeros(n)
    )
    adv, weight = np.asarray(adv), np.asarray(weight)
    assert adv[2] == 0 and weight[2] == 0 and np.isfinite(adv).all()
    assert (np.delete(weight, 2) == 1).all()
    alone = np.asarray(A.group_advantages(jnp.asarray([1.0, 0.0, 1.0]), 3))
    np.testing.assert_allclose(adv[[0, 1, 3]], alone, rtol=1e-6)
    np.testing.assert_allclose(adv[4:], np.asarray(A.group_advantages(jnp.asarray(rewards[4:]), 4)), rtol=1e-6)
    assert float(stats["judge_error_frac"]) == 1 / 8
    np.testing.assert_allclose(float(stats["reward_mean"]), 3 / 7, rtol=1e-6)


def test_dynamic_sampling_ignores_judge_errors():
    r = np.array([1, np.nan, 1, 1, 0, np.nan, 1, 0], np.float32)
    assert informative_groups(r, 4).tolist() == [False, True]


def test_token_turns_count_the_model_turns_between_holes():
    mask = jnp.asarray([[0, 0, 1, 1, 0, 0, 1, 1, 1, 0], [0, 1, 1, 1, 1, 1, 0, 0, 0, 0], [0] * 10])
    np.testing.assert_array_equal(
        np.asarray(A.token_turns(mask)),
        [[0, 0, 1, 1, 0, 0, 2, 2, 2, 0], [0, 1, 1, 1, 1, 1, 0, 0, 0, 0], [0] * 10],
    )


def _two_turn_batch():
    """Two groups of 4. Group 0: a first answer passes (one turn); three fail it and answer again,
    one of them repaired. Group 1: one turn each (no feedback turn), rewards 1, 0, 0, 1."""
    S, P = 12, 2
    turn1, turn2 = [0, 0, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0], [0, 0, 1, 1, 1, 0, 0, 1, 1, 1, 0, 0]
    mask = np.array([turn1, turn2, turn2, turn2, turn1, turn1, turn1, turn1], np.int32)
    return {
        "tokens": np.arange(8 * S, dtype=np.int32).reshape(8, S) % 50 + 3,
        "attention_mask": (np.arange(S) >= P).astype(np.int32)[None].repeat(8, 0),
        "response_mask": mask,
        "response_lengths": np.array([3, 8, 8, 8, 3, 3, 3, 3], np.int32),
        "truncated": np.zeros(8, bool),
        "rewards": np.array([1, 1, 0, 0, 1, 0, 0, 1], np.float32),
        "passed": np.array([1, 1, 0, 0, 1, 0, 0, 1], bool),
        "no_code": np.zeros(8, bool),
    }


@pytest.mark.parametrize("std", ["group", "none"])
def test_turn_baseline_centres_a_later_turn_on_the_episodes_that_reached_it(std):
    batch = _two_turn_batch()
    u = jnp.ones(8)
    plain = make_rl_config("microcoder", group_size=4, repeat_m=3, adv_std=std, turn_baseline=False, max_turns=2)
    per_turn = make_rl_config("microcoder", group_size=4, repeat_m=3, adv_std=std, turn_baseline=True, max_turns=2)
    rows, _, _ = A.compute_advantages(plain, jax.tree.map(jnp.asarray, batch), u)
    tokens, _, stats = A.compute_advantages(per_turn, jax.tree.map(jnp.asarray, batch), u)
    rows, tokens = np.asarray(rows), np.asarray(tokens)
    assert tokens.shape == batch["tokens"].shape
    r = batch["rewards"]
    # turn 1 and every one-turn row: the whole group's advantage, as without the knob
    np.testing.assert_allclose(tokens[:, 2:5], np.repeat(rows[:, None], 3, 1), atol=1e-6)
    # turn 2 (columns 7-9) of rows 1-3: centred on those three (mean 1/3), not on the group (1/2)
    centred = r[1:4] - r[1:4].mean()
    want = centred / (centred.std(ddof=1) + 1e-6) if std == "group" else centred
    np.testing.assert_allclose(tokens[1:4, 7:10], np.repeat(want[:, None], 3, 1), atol=1e-5)
    if std == "none":  # the repair beat two of the three episodes that reached turn 2, not half the group
        assert tokens[1, 7] == pytest.approx(2 / 3) and rows[1] == pytest.approx(0.5)
    assert float(stats["adv_mean"]) == pytest.approx(float(rows.mean()))


def test_turn_baseline_leaves_a_one_turn_batch_as_it_was():
    batch = _two_turn_batch()
    batch["response_mask"][1:4] = batch["response_mask"][0]
    u = jnp.ones(8)
    rows, _, _ = A.compute_advantages(make_rl_config("microcoder", group_size=4), jax.tree.map(jnp.asarray, batch), u)
    on = make_rl_config("microcoder", group_size=4, turn_baseline=True, max_turns=2)
    tokens, _, _ = A.compute_advantages(on, jax.tree.map(jnp.asarray, batch), u)
    np.testing.assert_array_equal(np.asarray(tokens), np.broadcast_to(np.asarray(rows)[:, None], tokens.shape))
