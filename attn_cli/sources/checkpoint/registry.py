"""Which config.json model_type each family adapter (families/) computes: the one list that
``--model`` and ``attn-cli models`` read. No torch: ``models`` lists a cache
without loading it.
"""

from __future__ import annotations

from typing import Any

# model_type -> (family, "module:Class" under attn_cli.sources.checkpoint.families)
MODEL_TYPES: dict[str, tuple[str, str]] = {
    "gpt2": ("gpt2", "gpt2:Gpt2"),
    "bert": ("bert", "bert:Bert"),
    "roberta": ("roberta", "bert:Roberta"),
    "xlm-roberta": ("roberta", "bert:Roberta"),
    "mpnet": ("mpnet", "bert:MPNet"),
    "distilbert": ("distilbert", "bert:DistilBert"),
    "modernbert": ("modernbert", "modernbert:ModernBert"),
    "llama": ("llama", "llama:Llama"),
    "mistral": ("llama", "llama:Llama"),
    "qwen2": ("llama", "llama:Llama"),
    "qwen3": ("qwen3", "llama:Qwen3"),
    "gemma": ("gemma", "gemma:Gemma"),
    "gemma2": ("gemma2", "gemma:Gemma2"),
    "gemma3_text": ("gemma3_text", "gemma:Gemma3Text"),
    "phi3": ("phi3", "phi3:Phi3"),
    "gpt_neox": ("gpt_neox", "gpt_neox:GptNeoX"),
    "olmo2": ("olmo2", "olmo2:Olmo2"),
}


# Encoder-decoder model types (checkpoint.pair, families/seq2seq.py): the source through the
# encoder, a target (--target) through the decoder, three stacks of attention
SEQ2SEQ_TYPES: dict[str, tuple[str, str]] = {
    "bart": ("bart", "bart:Bart"),
    "marian": ("marian", "bart:Marian"),
    "t5": ("t5", "t5:T5"),
}


def is_seq2seq(config: dict[str, Any]) -> bool:
    return config.get("model_type") in SEQ2SEQ_TYPES


def text_config(config: dict[str, Any]) -> dict[str, Any]:
    """The config of the text model attn-cli computes: config.json itself, or the
    language model a multimodal config nests (``text_config``, as Gemma 3's
    Gemma3ForConditionalGeneration), when its own model_type is not one we compute."""
    nested = config.get("text_config")
    if config.get("model_type") not in MODEL_TYPES and isinstance(nested, dict):
        if nested.get("model_type") in MODEL_TYPES:
            return {"architectures": config.get("architectures"), **nested}
    return config


def family_name(config: dict[str, Any]) -> str | None:
    """The family that computes config.json (or its text model), or None."""
    found = MODEL_TYPES.get(str(text_config(config).get("model_type"))) or SEQ2SEQ_TYPES.get(str(config.get("model_type")))
    return found[0] if found else None
