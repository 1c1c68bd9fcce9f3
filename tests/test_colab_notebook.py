"""launch/colab_tpu.ipynb runs top to bottom on a CPU with a shortened demo: its code cells are
executed in order in one namespace (the TPU-only cells must skip themselves), as Jupyter would."""

import contextlib
import io
import json
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOK = os.path.join(ROOT, "launch", "colab_tpu.ipynb")
SHORT_DEMO = (
    "--config.train.steps=3 --config.train.warm_start_steps=20 --config.data.num_prompts=4 "
    "--config.demo.problems_per_op=2 --config.train.checkpoint_every=0 --config.train.progress=false"
)


def _code_cells():
    with open(NOTEBOOK) as f:
        nb = json.load(f)
    assert nb["nbformat"] == 4
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]


def test_cells_are_plain_python_with_pinned_installs():
    cells = _code_cells()
    for src in cells:
        compile(src, "cell", "exec")  # no IPython magics: the same code runs in Colab and here
    assert "jax[tpu]==" in cells[0] and "transformers==" in cells[0] and "orbax-checkpoint==" in cells[0]
    evals = [line for src in cells for line in src.splitlines() if "microcoder_jax.eval" in line]
    assert evals and all("--checkpoint" in line for line in evals)


@pytest.mark.slow
def test_notebook_runs_top_to_bottom_on_cpu(tmp_path, monkeypatch):
    monkeypatch.setenv("MICROCODER_ROOT", ROOT)
    monkeypatch.setenv("MICROCODER_RUNS", str(tmp_path))
    monkeypatch.setenv("MICROCODER_DEMO_FLAGS", SHORT_DEMO)
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    monkeypatch.delenv("TPU_ACCELERATOR_TYPE", raising=False)
    monkeypatch.chdir(ROOT)
    namespace, out = {"__name__": "__main__"}, io.StringIO()
    for i, src in enumerate(_code_cells()):
        with contextlib.redirect_stdout(out):
            exec(compile(src, f"cell {i}", "exec"), namespace)
        if i == 0:
            namespace["ON_TPU"] = False  # the test machine's CPU stands in for a CPU runtime
    text = out.getvalue()
    demo = tmp_path / "demo"
    assert (demo / "checkpoints" / "3").is_dir() and (demo / "plots" / "overview.png").exists()
    report = json.load(open(demo / "eval.json"))
    assert report["step"] == 3 and 0 <= report["overall"]["pass@1"] <= 1
    assert text.count("skipped: needs a TPU runtime") == 2
