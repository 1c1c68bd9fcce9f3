"""The planner on one GPU through its CLI (analytic, no compiles: the quick tier): the search tries
the int8 pool, micro-batches and slots before "use a larger topology"; the cut ranking offers only
changes that fit and save time; one time per program; the attention the GPU run would use."""

import os


from microcoder_jax.plan.__main__ import main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAPER = os.path.join(ROOT, "configs", "paper.py")


def _plan(capsys, *args):
    code = main(["--config", PAPER, *args])
    return code, capsys.readouterr().out


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
    assert lines[-1].startswith("suggestion: fits with every change") and lines[-1].endswith(
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
