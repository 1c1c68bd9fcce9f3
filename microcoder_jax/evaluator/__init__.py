"""Judges programs on the CPU: problem schema, code extraction, comparison, sandboxed pool."""
from microcoder_jax.evaluator.extract import extract_code
from microcoder_jax.evaluator.judge import VERDICTS, JudgeResult, reward
from microcoder_jax.evaluator.pool import EvaluatorPool, JudgeHandle
from microcoder_jax.evaluator.problems import Problem, TestCase, load_problems

__all__ = ["EvaluatorPool", "JudgeHandle", "JudgeResult", "Problem", "TestCase", "VERDICTS",
           "extract_code", "load_problems", "reward"]
