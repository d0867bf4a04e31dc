"""Which config.json model_type each family adapter (families/) computes: the lists that
``--model`` and ``attn-cli models`` read, built from the family modules' own declarations.
Each module says what it serves in a dict literal at its top level::

    MODEL_TYPES = {"llama": ("llama", "Llama"), ...}          # model_type -> (family, class)
    ENCODER_DECODER_TYPES = {"t5": ("t5", "T5")}             # the same, for encoder-decoders

read here with ``ast`` without importing the module: no torch, so that ``models`` lists a cache
without loading it. A new architecture is one module in families/ (and its tests and docs row).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

FAMILIES = Path(__file__).resolve().parent / "families"
# The order the supported model_types are listed in (what a refusal names): the first
# architectures, then the encoders, then the decoders; a module not named here comes after them.
LISTED = ("gpt2", "bert", "modernbert", "llama", "gemma", "phi3", "gpt_neox", "olmo2", "bart", "t5")


def declared(name: str, folder: Path = FAMILIES) -> dict[str, tuple[str, str]]:
    """model_type -> (family, "module:Class" under attn_cli.sources.checkpoint.families), from
    every module of ``folder`` that assigns a dict literal to ``name`` at its top level, the
    modules in ``LISTED``'s order, then by name. Only that literal is parsed (a whole module's
    parse cost ``models`` a tenth of a second)."""
    found: dict[str, tuple[str, str]] = {}
    assignment = re.compile(rf"^{name}\s*(?::[^=\n]*)?=\s*(?=\{{)", re.MULTILINE)
    for path in sorted(folder.glob("*.py"), key=lambda p: (LISTED.index(p.stem) if p.stem in LISTED else len(LISTED), p.stem)):
        text = path.read_text(encoding="utf-8")
        start = assignment.search(text)
        if start is None:
            continue
        for model_type, (family, cls) in _dict_at(text, start.end(), path).items():
            found[model_type] = (family, f"{path.stem}:{cls}")
    return found


def _dict_at(text: str, start: int, path: Path) -> dict[str, tuple[str, str]]:
    """The dict literal that opens at ``text[start]``: the shortest text from there to a "}" that is one."""
    for end in (i for i, char in enumerate(text[start:], start) if char == "}"):
        try:
            value = ast.literal_eval(text[start : end + 1])
        except (SyntaxError, ValueError):
            continue
        if isinstance(value, dict):
            return value
    raise SyntaxError(f"{path}: its model_types are not a dict literal")


MODEL_TYPES = declared("MODEL_TYPES")
# Encoder-decoders (checkpoint.pair, families/seq2seq.py): the source through the encoder, a
# target (--target) through the decoder, three stacks of attention
SEQ2SEQ_TYPES = declared("ENCODER_DECODER_TYPES")


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
