"""Named algorithm pieces: truncation rules, advantage scalers, loss aggregations, IS corrections.

Each registry is a plain dict from a name to a plain jittable function; `RLConfig` checks its
`truncation`, `adv_std` and `aggregation` names against them, and the train step looks the
functions up by name. A new variant is one decorated function, e.g.::

    from microcoder_jax.rl.registry import register_aggregation

    @register_aggregation("row_sum")
    def row_sum(mask, constant=None):
        return mask.astype(jnp.float32) / mask.shape[0]

    RLConfig(aggregation="row_sum")

Signatures (the built-ins live in rl.advantages and rl.losses):

* truncation rule ``(cfg, rows: TruncationInputs) -> (rewards, masked, removed)``: rewards after
  shaping, rows whose advantage is zeroed, rows dropped from the loss (all ``[N]``);
* advantage scaler ``(centred, rewards, *, ddof, eps, valid) -> advantages``, on ``[groups, G]``
  arrays: ``centred`` is ``rewards`` minus each group's mean over its ``valid`` rows (0 on the
  others: judge errors, which have no reward); statistics must leave those rows out;
* loss aggregation ``(mask, constant) -> weights``: per-token weights over one optimizer
  update's loss mask ``[rows, S]``; the loss is ``sum(per_token_loss * weights)``;
* is correction ``(ratio, cfg) -> (weight, keep)``: from pi_old / pi_sampler ``[N, S]`` at
  ``cfg.is_level`` (rl.corrections), each token's loss weight and whether it stays in the loss.
"""

from __future__ import annotations

from typing import Callable

TRUNCATION_RULES: dict[str, Callable] = {}
ADVANTAGE_SCALERS: dict[str, Callable] = {}
LOSS_AGGREGATIONS: dict[str, Callable] = {}
IS_CORRECTIONS: dict[str, Callable] = {}

_KINDS = {
    "truncation rule": TRUNCATION_RULES,
    "advantage scaler": ADVANTAGE_SCALERS,
    "loss aggregation": LOSS_AGGREGATIONS,
    "is correction": IS_CORRECTIONS,
}


def _registrar(kind: str):
    table = _KINDS[kind]

    def register(name: str):
        def decorator(fn: Callable) -> Callable:
            if name in table and table[name] is not fn:
                raise ValueError(
                    f"{kind} {name!r} is already registered ({table[name].__module__}."
                    f"{table[name].__name__}); pick another name"
                )
            table[name] = fn
            return fn

        return decorator

    register.__doc__ = f"Decorator: register a plain function as the {kind} called `name`."
    return register


register_truncation = _registrar("truncation rule")
register_advantage_scaler = _registrar("advantage scaler")
register_aggregation = _registrar("loss aggregation")
register_is_correction = _registrar("is correction")


def lookup(kind: str, name: str) -> Callable:
    """The function registered as `name`, or a ValueError that lists the registered names."""
    table = _KINDS[kind]
    if name not in table:
        raise ValueError(f"unknown {kind} {name!r}; registered: {', '.join(sorted(table))}")
    return table[name]
