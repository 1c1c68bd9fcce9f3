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
