"""A tiny "your model" folder (random Qwen3 weights written by our own exporter, a byte-level BPE
with a chat template; no torch) and a 3-problem JSONL, for the bring-your-own-data tests."""

import json
import os

PROBLEMS = [
    ("add", "Read a and b; print a + b.", [("1 2\n", "3\n"), ("5 5\n", "10\n")]),
    ("mul", "Read a and b; print a * b.", [("2 3\n", "6\n"), ("4 5\n", "20\n")]),
    ("max", "Read a and b; print the larger.", [("2 3\n", "3\n"), ("9 1\n", "9\n")]),
]


def write_problems(path) -> str:
    """Three stdin problems in our own row format; returns the path."""
    with open(path, "w") as f:
        for qid, text, tests in PROBLEMS:
            row = {
                "question_id": qid,
                "question_content": text,
                "tests": [{"input": i, "output": o, "kind": "stdin"} for i, o in tests],
            }
            f.write(json.dumps(row) + "\n")
    return str(path)


def write_tiny_model(path, seed: int = 0) -> str:
    """A tiny Qwen3 checkpoint folder with its tokenizer (vocab 320 >= the BPE's size); returns the path."""
    from microcoder_jax import models
    from microcoder_jax.data import tokenizer as tok_lib
    from random_params import numpy_params

    texts = [text for _, text, _ in PROBLEMS] * 20 + ["```python\na, b = map(int, input().split())\nprint(a)\n```"]
    tokenizer = tok_lib.train_bpe_tokenizer(texts, 300)
    config = models.get_preset("tiny", vocab_size=320, dtype="float32")
    models.save_hf_params(numpy_params(config, 0.05, seed), config, path)
    tokenizer.save_pretrained(path)
    assert os.path.exists(os.path.join(path, "config.json"))
    return str(path)
