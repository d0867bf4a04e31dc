"""What a family reads from config.json, as a frozen dataclass per family (``FamilyConfig``),
read once when the checkpoint opens: each field a key with the family's default.

A field's key is config.json's name for it (``key``: the value as config.json says, its
default when the key is absent, as ``dict.get``), or the names several releases of
transformers gave it (``first_of``: the first that config.json sets, else the default: Pythia's
``rotary_emb_base`` beside ``rope_theta``). A family that names a key otherwise, or defaults it
otherwise, redefines the field in its own dataclass (``GptNeoXConfig.eps`` is ``layer_norm_eps``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, TypeVar

AnyConfig = TypeVar("AnyConfig", bound="FamilyConfig")


def key(name: str, default: Any = None) -> Any:
    """A field read as ``config.get(name, default)``."""
    return dataclasses.field(default=default, metadata={"keys": (name,), "first_set": False})


def first_of(*names: str, default: Any = None) -> Any:
    """A field read from the first of ``names`` that config.json sets (not absent, not null), else ``default``."""
    return dataclasses.field(default=default, metadata={"keys": names, "first_set": True})


@dataclasses.dataclass(frozen=True)
class FamilyConfig:
    """The base of every family's dataclass: how its fields are read."""

    @classmethod
    def read(cls: type[AnyConfig], config: Mapping[str, Any]) -> AnyConfig:
        """Every field from ``config`` (config.json, or a multimodal one's text config)."""
        values = {}
        for field in dataclasses.fields(cls):
            names, first_set = field.metadata["keys"], field.metadata["first_set"]
            if first_set:
                values[field.name] = next((config[n] for n in names if config.get(n) is not None), field.default)
            else:
                values[field.name] = config.get(names[0], field.default)
        return cls(**values)

    @classmethod
    def key_of(cls, field: str) -> str:
        """config.json's name for a field (what an error about its value names)."""
        return next(f.metadata["keys"][0] for f in dataclasses.fields(cls) if f.name == field)
