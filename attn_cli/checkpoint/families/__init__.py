"""The architectures attn-cli computes, by config.json's model_type."""

from __future__ import annotations

from typing import Any

from attn_cli.checkpoint.families.base import Family, run_layers
from attn_cli.checkpoint.families.bert import Bert
from attn_cli.checkpoint.families.gpt2 import Gpt2
from attn_cli.checkpoint.families.llama import Llama
from attn_cli.errors import ModelUnavailable

__all__ = ["FAMILIES", "Family", "family_for", "run_layers"]

FAMILIES: dict[str, type[Family]] = {"gpt2": Gpt2, "bert": Bert, "llama": Llama, "mistral": Llama, "qwen2": Llama}


def family_for(config: dict[str, Any], where: str) -> Family:
    """The adapter for config.json's model_type, its hyperparameters checked."""
    model_type = config.get("model_type")
    if model_type not in FAMILIES:
        architectures = config.get("architectures") or []
        named = f"model_type {model_type!r}" + (f" ({architectures[0]})" if architectures else "")
        raise ModelUnavailable(
            f"{where}: {named} is not an architecture attn-cli computes; supported model_type: "
            f"{', '.join(FAMILIES)}"
        )
    family = FAMILIES[model_type](config)
    why = family.inconsistency()
    if why is not None:
        raise ModelUnavailable(f"{where}: {why}: fetch a consistent config.json")
    return family
