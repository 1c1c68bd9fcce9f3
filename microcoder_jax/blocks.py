"""Typed config blocks: a frozen dataclass per block, each field a `knob` with its meaning and limits.

A package owns its block (`SamplingConfig` in sampling/, `JudgeConfig` in judge/, ...).
`config.py` builds the `--config.*` keys, their defaults and `--help` from the fields, and a run
turns each ml_collections block into its typed block with `Block.from_node`, which checks every
value (type, choices, lower bound, probability, paths) and the block's own rules (`check`).
A bad value raises `ValueError("block.key=value: what is valid")`.
"""

from __future__ import annotations

import dataclasses
import glob
import math
import os
import types
import typing
from typing import Any, ClassVar, TypeVar

_B = TypeVar("_B", bound="Block")


class ConfigError(ValueError):
    """A bad config file, key or value (the message names the key and what is valid)."""


def knob(
    default: Any,
    meaning: str,
    *,
    choices: tuple | None = None,
    at_least: float | None = None,
    probability: bool = False,
    path: str | None = None,
    from_run: str | None = None,
):
    """A block field: its default, what it means (shown by --help) and its limits.

    `path`: "dir" (must be an existing directory when set) or "files" (every path or glob in the
    tuple must match a file). `from_run`: the key of another block the run copies into this field
    (it is then no key of its own)."""
    meta = dict(
        meaning=meaning, choices=choices, at_least=at_least, probability=probability, path=path, from_run=from_run
    )
    return dataclasses.field(default=default, metadata=meta)


def _base_type(hint) -> tuple[type, bool]:
    """(the type a field holds, whether None is allowed) from its annotation."""
    args = typing.get_args(hint)
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        kinds = [a for a in args if a is not type(None)]
        return _base_type(kinds[0])[0], type(None) in args
    return (origin or hint), False


@dataclasses.dataclass(frozen=True)
class Block:
    """Base of the typed blocks; subclasses set `PREFIX` (the block's key, e.g. "sampling")."""

    PREFIX: ClassVar[str] = ""

    def __post_init__(self):
        hints = typing.get_type_hints(type(self))
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            kind, optional = _base_type(hints[f.name])
            if value is None:
                if not optional:
                    self.fail(f.name, value, f"expected {kind.__name__}, got None")
                continue
            if kind is tuple:
                if not isinstance(value, (tuple, list)):
                    example = tuple(f.default) if isinstance(f.default, (tuple, list)) else ()
                    self.fail(f.name, value, f"expected a tuple, e.g. {example or ('a', 'b')}")
                object.__setattr__(self, f.name, tuple(value))
            elif kind is float and isinstance(value, int) and not isinstance(value, bool):
                object.__setattr__(self, f.name, float(value))
            elif isinstance(value, bool) and kind is not bool or not isinstance(value, kind):
                self.fail(f.name, value, f"expected {kind.__name__}, got {type(value).__name__}")
            self._check_limits(f, getattr(self, f.name))
        self.check()

    def _check_limits(self, f: dataclasses.Field, value) -> None:
        meta = f.metadata
        if meta.get("choices") and value not in meta["choices"]:
            self.fail(f.name, value, f"must be one of {', '.join(map(str, meta['choices']))}")
        low = meta.get("at_least")
        if low is not None and not (math.isfinite(value) and value >= low):
            self.fail(f.name, value, f"must be a number >= {low}")
        if meta.get("probability") and not 0 < value <= 1:
            self.fail(f.name, value, "must lie in (0, 1]")
        if meta.get("path") == "dir" and value and not os.path.isdir(value):
            self.fail(f.name, value, "no such directory")
        if meta.get("path") == "files":
            for pattern in value:
                if not isinstance(pattern, str) or not glob.glob(os.path.expanduser(pattern)):
                    self.fail(f.name, pattern, "no file matches this path or glob pattern")

    def check(self) -> None:
        """The block's own rules across its fields (override; raise with `fail`)."""

    def fail(self, name: str, value, what: str):
        raise ValueError(f"{self.PREFIX}.{name}={value!r}: {what}")

    @classmethod
    def from_node(cls: type[_B], node) -> _B:
        """The typed block from a ConfigDict node or a dict; an unknown key is an error."""
        values = node.to_dict() if hasattr(node, "to_dict") else dict(node or {})
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - names)
        if unknown:
            raise ValueError(f"{cls.PREFIX}: unknown keys {unknown}; known: {', '.join(sorted(names))}")
        return cls(**values)

    def replace(self: _B, **changes) -> _B:
        return dataclasses.replace(self, **changes)


def block_keys(cls: type[Block]) -> list[tuple[str, object, str]]:
    """(dotted key, default, meaning) per field; a None default becomes the field's type (a typed
    placeholder in the ConfigDict)."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        default = f.default
        if default is None:
            default = _base_type(hints[f.name])[0]
        out.append((f"{cls.PREFIX}.{f.name}", default, f.metadata.get("meaning", "")))
    return out
