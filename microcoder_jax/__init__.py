"""MicroCoder-GRPO in JAX: RL for Qwen3 code models on TPUs, GPUs and CPUs."""

import logging as _logging

__version__ = "0.1.0"


class _NoTorchNotice(_logging.Filter):
    """transformers logs "PyTorch was not found ..." when it is imported without torch (the
    README's command 1 installs none). We use transformers for tokenizers and configs only, so on
    every command that line is noise; filtered here, before any module of ours imports it."""

    def filter(self, record: _logging.LogRecord) -> bool:
        return not str(record.msg).startswith("PyTorch was not found")


_logging.getLogger("transformers").addFilter(_NoTorchNotice())
