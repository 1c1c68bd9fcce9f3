"""Small-scale reproductions of the paper's findings on the CPU truncation task (docs/experiments.md).

python -m microcoder_jax.experiments.truncation --out DIR [--seeds N] [--steps S] [--short]
python -m microcoder_jax.experiments.temperature --out DIR [--seeds N] [--steps S] [--short]
"""
