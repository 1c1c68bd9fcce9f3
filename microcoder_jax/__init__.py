"""MicroCoder-GRPO in JAX: RL for Qwen3 code models on TPUs, GPUs and CPUs."""

__version__ = "0.1.0"
