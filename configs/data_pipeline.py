"""Dataset pipeline config: raw problem dumps on local disk -> training shards.

    python -m microcoder_jax.dataset all --config configs/data_pipeline.py \
        --config.workdir=/data/mc --config.sources.samples.path=/dumps/lcb.jsonl

Out of the box it runs on the bundled sample problems. Add one `sources.<name>` block per dump
below. Every knob, its default and its meaning live in microcoder_jax/dataset/config.py
(`python -m microcoder_jax.dataset --help` lists them). Stage outputs land in
`<workdir>/<stage>/`, shards in `<workdir>/export/`.
"""

from microcoder_jax.dataset.config import SAMPLES, default_config, source  # noqa: F401 (source: for callers)


def get_config():
    c = default_config()
    # Input dumps: source(PATH, format, priority, limit, harness), e.g.
    # c.sources.lcb = source("/dumps/lcb/*.jsonl", "lcb", priority=0)
    # c.sources.taco = source("~/.cache/huggingface/datasets/BAAI___taco", "apps", priority=2)
    # Any other knob, e.g. c.filter.max_tests = 16
    return c
