"""The architectures attn-cli computes, by config.json's model_type (registry.py)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from attn_cli.sources.checkpoint.families.base import Family
from attn_cli.sources.checkpoint.families.loop import forward
from attn_cli.sources.checkpoint.registry import MODEL_TYPES, SEQ2SEQ_TYPES, text_config
from attn_cli.runtime.errors import ModelUnavailable

if TYPE_CHECKING:
    from attn_cli.sources.checkpoint.families.seq2seq import EncoderDecoder, Seq2Seq

__all__ = ["MODEL_TYPES", "Family", "encoder_decoder", "family_class", "family_for", "forward", "seq2seq_class"]


def family_class(model_type: str) -> type[Family]:
    return _adapter(MODEL_TYPES[model_type][1])


def seq2seq_class(model_type: str) -> type[Seq2Seq]:
    """The encoder-decoder adapter for ``model_type`` (registry.SEQ2SEQ_TYPES), built once per stack."""
    return _adapter(SEQ2SEQ_TYPES[model_type][1])


def encoder_decoder(config: dict[str, Any]) -> EncoderDecoder:
    """Both stacks of the encoder-decoder config.json describes (its model_type in SEQ2SEQ_TYPES)."""
    from attn_cli.sources.checkpoint.families.seq2seq import EncoderDecoder

    return EncoderDecoder.of(seq2seq_class(str(config.get("model_type"))), config)


def _adapter(where: str) -> Any:
    """The class a registry entry names, "module:Class" under this package."""
    module, name = where.split(":")
    return getattr(importlib.import_module(f"attn_cli.sources.checkpoint.families.{module}"), name)


def family_for(config: dict[str, Any], where: str) -> Family:
    """The adapter for config.json's model_type (or its nested text model's), its hyperparameters checked."""
    config = text_config(config)
    model_type = config.get("model_type")
    if model_type not in MODEL_TYPES:
        architectures = config.get("architectures") or []
        named = f"model_type {model_type!r}" + (f" ({architectures[0]})" if architectures else "")
        raise ModelUnavailable(
            f"{where}: {named} is not an architecture attn-cli computes; supported model_type: "
            f"{', '.join(MODEL_TYPES)}; encoder-decoders (with --target): {', '.join(SEQ2SEQ_TYPES)}"
        )
    family = family_class(str(model_type))(config)
    why = family.inconsistency()
    if why is not None:
        raise ModelUnavailable(f"{where}: {why}: fetch a consistent config.json")
    return family
