"""`python -m microcoder_jax.plan`: size one RL step for a TPU topology (or a GPU) before a run."""
