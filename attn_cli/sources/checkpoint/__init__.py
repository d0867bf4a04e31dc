"""Trained checkpoints as a source of attention: the public API.

    from attn_cli.sources.checkpoint import open_checkpoint
    ckpt = open_checkpoint("sentence-transformers/all-MiniLM-L6-v2")  # or a folder
    tokens = ckpt.tokenizer.encode("The cat sat.")
    layers = ckpt.trace(tokens, [0, 5])  # list[LayerAttention]
    weights = ckpt.trace(tokens, [0, 5], keep="weights")  # list[LayerWeights]: the (H, T, T) weights only

Layout: files.py finds the folder (or the Hugging Face cache snapshot) and reads
config.json and safetensors; tokenizer.py is the checkpoint's own tokenizer;
families/ holds one small adapter per architecture (gpt2, bert) and the shared
layer loop; model.py ties them into a ``Checkpoint`` (pair.py: an encoder-decoder's
``PairCheckpoint``), and opening.py opens either. The names load on first
use, so importing the package costs nothing; opening a checkpoint imports torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from attn_cli.sources.checkpoint.model import Checkpoint
    from attn_cli.sources.checkpoint.opening import open_checkpoint

__all__ = ["Checkpoint", "open_checkpoint"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from attn_cli.sources.checkpoint import model, opening

        return getattr(model if name == "Checkpoint" else opening, name)
    raise AttributeError(f"module 'attn_cli.sources.checkpoint' has no attribute {name!r}")
