"""Extract the Python program from a model response.

The thinking block is dropped (`<think>...</think>`; an unclosed `<think>` means the answer was cut
off inside the thinking, so nothing after it counts). Then the last closed fenced block tagged as
Python (or untagged) is the program; a response without fences counts only if the whole answer is
Python source that compiles and does something. Anything else is `None` (verdict `no_code`).
"""

from __future__ import annotations

import re
import textwrap
import warnings

_FENCE = re.compile(
    r"^[ \t]*(?P<fence>`{3,}|~{3,})[ \t]*(?P<lang>[\w+#.-]*)[^\n]*\n(?P<body>.*?)^[ \t]*(?P=fence)[ \t]*$",
    re.MULTILINE | re.DOTALL,
)
_PYTHON_TAGS = {"python", "python3", "py", "py3", "pypy", "pypy3", ""}
_CODE_HINTS = ("print(", "input(", "sys.stdin", "def ", "import ", "class Solution")


def strip_thinking(response: str) -> str:
    """The answer part of a response: after the last `</think>`; empty if `<think>` never closed."""
    if "</think>" in response:
        return response.rsplit("</think>", 1)[1]
    if "<think>" in response:
        return response.split("<think>", 1)[0]
    return response


def extract_code(response: str | None) -> str | None:
    """The program in `response`, or None when there is none."""
    if not response:
        return None
    answer = strip_thinking(response)
    blocks = [m for m in _FENCE.finditer(answer) if m.group("lang").lower() in _PYTHON_TAGS]
    if blocks:
        code = textwrap.dedent(blocks[-1].group("body")).strip("\n")
        return code if code.strip() else None
    if "```" in answer or "~~~" in answer:
        return None  # fenced blocks in another language, or a block cut off before its end
    code = answer.strip()
    if code and any(h in code for h in _CODE_HINTS) and _compiles(code):
        return code
    return None


def _compiles(code: str) -> bool:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # e.g. SyntaxWarning for invalid escapes in prose
            compile(code, "<response>", "exec", dont_inherit=True)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return False
    return True
