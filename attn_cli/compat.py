"""The first release's names, kept working for code written against it; new code uses the
names on the right. ``attn_cli.<name>`` finds each here (``attn_cli.__getattr__``), and none
is in ``attn_cli.__all__``.

| first release | now |
| --- | --- |
| ``Run`` | ``attn_cli.Trace`` (``attn_cli.records.trace``) |
| ``AttentionResult`` | ``attn_cli.records.layers.LayerAttention`` |
| ``Pipeline`` | ``attn_cli.sources.toy.source.ToySource`` (the seeded toy model as a source) |
| ``self_attention`` | ``attn_cli.sources.toy.model.self_attention`` |
| ``get_tokenizer`` | ``attn_cli.text.tokenizers.get_tokenizer`` |
| ``trace.result``, ``trace.config``, ``trace.x`` | ``trace.layers[0]``, ``trace.model.config``, ``trace.layers[0].x`` |

The three properties are ``FirstRelease``'s, which the Python API's ``Trace`` takes on.
"""

from __future__ import annotations

from typing import Any

from attn_cli.records.layers import LayerAttention
from attn_cli.records.trace import Trace
from attn_cli.sources.toy.config import Config
from attn_cli.sources.toy.model import self_attention
from attn_cli.sources.toy.source import ToySource
from attn_cli.text.tokenizers import get_tokenizer


class FirstRelease:
    """The toy source's trace before layers: one layer, its config and its input."""

    layers: tuple[Any, ...]
    model: Any

    @property
    def result(self) -> Any:
        return self.layers[0]

    @property
    def config(self) -> Config:
        if self.model.config is None:
            raise AttributeError("a checkpoint trace has no toy config; read trace.model")
        return self.model.config

    @property
    def x(self) -> Any:
        return self.layers[0].x  # the toy's trace, whose layer is a LayerAttention


Run = Trace
AttentionResult = LayerAttention
Pipeline = ToySource

__all__ = ["AttentionResult", "FirstRelease", "Pipeline", "Run", "get_tokenizer", "self_attention"]
