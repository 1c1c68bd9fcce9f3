"""Sampling: the jitted sampler, the diversity signal, and the temperature scheduler."""

from microcoder_jax.sampling.diversity import diversity_metrics
from microcoder_jax.sampling.static_sampler import SamplerOutput, default_stop_token_ids, generate, prompt_bucket
from microcoder_jax.sampling.temperature import Decision, TemperatureScheduler

__all__ = [
    "Decision",
    "SamplerOutput",
    "TemperatureScheduler",
    "default_stop_token_ids",
    "diversity_metrics",
    "generate",
    "prompt_bucket",
]
