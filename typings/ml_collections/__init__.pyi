# ml_collections ships no type information; pyright infers ConfigDict.__getattr__/__getitem__ from
# its source as "ConfigDict | str | int | float | list | tuple | None" and reports every
# `config.model.path` or `node[name] = ...`. A config value is whatever the config holds: Any.
from typing import Any

from ml_collections.config_dict import ConfigDict as ConfigDict

def __getattr__(name: str) -> Any: ...
