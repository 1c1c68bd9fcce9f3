"""The planner on one GPU through its CLI (analytic, no compiles: the quick tier): the search tries
the int8 pool, micro-batches and slots before "use a larger topology"; the cut ranking offers only
changes that fit and save time; one time per program; the attention the GPU run would use."""

import os

import pytest


from microcoder_jax.plan.__main__ import main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAPER = os.path.join(ROOT, "configs", "paper.py")


# the search and cut tests start from the paper config before its int8 pool and packing defaults
BF16_POOL = ("--config.sampling.kv_dtype=model", "--config.rl.packing=false")


def _plan(capsys, *args, shipped: bool = False):
    code = main(["--config", PAPER, *(() if shipped else BF16_POOL), *args])
    return code, capsys.readouterr().out


def test_the_paper_config_as_shipped_fits_one_a100(capsys):
    """With the int8 pool on by default the 1.7B paper config fits one A100-80GB as it is (the
    bf16 pool's admit needs the search, below), decoding with the Triton paged kernel."""
    code, out = _plan(capsys, "--topology", "a100-80gb", "--devices", "1", shipped=True)
    assert code == 0 and "verdict: every program fits" in out
    assert "the Pallas (Triton) paged kernel (decode)" in out, out[:600]


def test_gpu_plan_names_the_attention_the_gpu_would_run(capsys):
    """auto on a GPU in bf16 trains with cuDNN and decodes with the Triton paged kernel (not `xla`)."""
    _, out = _plan(capsys, "--topology", "h100", "--devices", "1", "--nosearch")
    assert "attention cudnn (training), the Pallas (Triton) paged kernel (decode)" in out, out[:600]
    # fp32 has no cuDNN flash path, an fp32 pool no Triton kernel: XLA for both
    _, out = _plan(capsys, "--topology", "h100", "--devices", "1", "--nosearch", "--config.model.dtype=float32")
    assert "attention xla (training), xla (decode)" in out, out[:600]
    # an unnamed device (--hbm-gib): planned on the XLA paths
    _, out = _plan(capsys, "--devices", "1", "--hbm-gib", "80", "--nosearch")
    assert "attention xla (training), xla (decode)" in out, out[:600]


def test_one_a100_search_tries_the_int8_pool_and_prints_the_flags(capsys):
    """The paper config on one A100-80GB: admit does not fit at a bf16 pool; the search finds the
    int8 pool and ends with every change together, flags to paste (was: "no candidate fits ( tried
    or ruled out); use a larger topology")."""
    code, out = _plan(capsys, "--topology", "a100-80gb", "--devices", "1")
    assert code == 1  # as configured, it does not fit
    lines = [line.strip() for line in out.splitlines() if line.strip().startswith("suggestion:")]
    assert any("sample admit: int8 KV pool, 64 slots fits" in line for line in lines), lines
    assert lines[-1].startswith("suggestion: fits with every change (the analytic model)") and lines[-1].endswith(
        "add --config.sampling.kv_dtype=int8"
    ), lines
    assert "larger topology" not in out and "( tried" not in out
    # the flags it printed make the plan fit
    code, out = _plan(capsys, "--topology", "a100-80gb", "--devices", "1", "--config.sampling.kv_dtype=int8")
    assert code == 0 and "verdict: every program fits" in out


def test_nothing_fits_lists_every_candidate_and_why(capsys):
    """On one 24 GB L4 nothing fits 1.7B: each program says what was tried and its size, never an
    empty list; a program no knob applies to says so."""
    code, out = _plan(capsys, "--topology", "l4", "--devices", "1")
    assert code == 1
    lines = [line.strip() for line in out.splitlines() if line.strip().startswith("suggestion:")]
    admit = next(line for line in lines if line.startswith("suggestion: sample admit:"))
    assert "nothing fits (tried, against 21.2 GiB (95% of 22.4 GiB): int8 KV pool, 64 slots: " in admit, admit
    assert "int8 KV pool, 1 slot: " in admit and admit.endswith("use a larger topology")
    layout = next(line for line in lines if line.startswith("suggestion: decode layout:"))
    assert "no knob the search tries" in layout
    assert "()" not in out and "( tried" not in out


def _section(out, title):
    lines = out.splitlines()
    start = lines.index(title)
    end = next((i for i in range(start + 1, len(lines)) if not lines[i].strip()), len(lines))
    return lines[start + 1 : end]


def test_one_time_per_program_and_savings_as_savings(capsys):
    """`sample decode` has one time in the report (the step table's; the == time section and the
    pool section's seconds, a second decode model, are gone); the pool section's HBM bytes are the
    ones the step table's HBM seconds come from; cuts print as savings and only when they fit."""
    _, out = _plan(capsys, "--topology", "a100-80gb", "--devices", "1", "--nosearch")
    assert "== time" not in out and "est. s" not in out
    pool = next(
        line.split()
        for line in _section(out, "== paged decode at each KV pool dtype (sampling.kv_dtype)")
        if line.startswith("sample decode")
    )
    hbm_gb = float(pool[4])  # model dtype, one call, every row at the cap
    step = next(line.split() for line in out.splitlines() if line.startswith("sample decode ") and "simulated" in line)
    assert float(step[4]) == pytest.approx(hbm_gb * 1e9 / 2.039e12, rel=1e-3)  # HBM s = bytes / A100's bandwidth
    assert "tokens/s" in " ".join(step)
    cuts = out[out.index("what would cut the step most") :].splitlines()
    assert cuts[1].strip().startswith("int8 KV pool: saves ") and "+" not in cuts[1], cuts[:3]
    # 128 slots would not fit one A100 (the pool doubles): listed as not offered, with why
    assert "not offered: a larger decode batch (128 slots) (" in out and "would not fit" in out


def test_cut_ranking_never_offers_a_split_that_does_not_fit_or_is_slower():
    """The v5e-8 case of issue 46: a 4+4 split whose rollout side does not fit and that is slower
    (-122.7 s) was offered with flags; now it is left out, with why."""
    from types import SimpleNamespace

    from microcoder_jax.plan import timing

    profile = SimpleNamespace(is_cap=True)
    summary = {"step_serial_s": 215.4}
    split = dict(
        layout="v5e-8 as 4+4",
        flags="--config.mesh.rollout_devices=4 --config.train.off_policy_steps=1",
        synchronous_s=215.4,
        pipelined_s=337.9,
        rollout={"fits": False},
        learner={"fits": True},
    )
    faster_but_too_big = dict(split, layout="v5e-16 as 8+8", pipelined_s=100.0)
    good = dict(split, layout="v5e-8x2 as one slice each", pipelined_s=150.0, rollout={"fits": True})
    plan = SimpleNamespace(rows=[])
    dropped = []
    offered = timing.cuts(plan, _demo_config(), profile, [], summary, [split, faster_but_too_big, good], dropped)
    assert [c["change"] for c in offered] == ["split v5e-8x2 as one slice each (one-step off-policy)"]
    assert offered[0]["saving_s"] == pytest.approx(65.4)
    why = {c["change"]: c["why"] for c in dropped}
    assert why["split v5e-8 as 4+4 (one-step off-policy)"] == "the rollout side does not fit; slower by 122.5 s"
    assert why["split v5e-16 as 8+8 (one-step off-policy)"] == "the rollout side does not fit"


def _demo_config():
    from microcoder_jax import cli

    return cli.load_config(os.path.join(ROOT, "configs", "demo.py"), [])
