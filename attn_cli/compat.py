"""The first release's names, kept working for code written against it; new code uses the
names on the right. ``attn_cli.<name>`` finds each here (``attn_cli.__getattr__``), and none
is in ``attn_cli.__all__``.

| first release | now |
| --- | --- |
| ``Run`` | ``attn_cli.Trace`` (``attn_cli.api.Trace``: ``attn_cli.records.trace.Trace`` with its notebook methods) |
| ``AttentionResult`` | ``attn_cli.records.layers.LayerAttention`` |
| ``Pipeline`` | ``attn_cli.sources.toy.source.ToySource`` (the seeded toy model as a source) |
| ``self_attention`` | ``attn_cli.sources.toy.model.self_attention`` |
| ``get_tokenizer`` | ``attn_cli.text.tokenizers.get_tokenizer`` |
| ``trace.result``, ``trace.config``, ``trace.x`` | ``trace.layers[0]``, ``trace.model.config``, ``trace.layers[0].x`` |
| ``attn_cli.trace(layers=, num_heads=)`` | ``layer=``, ``heads=``, as --layer and --heads |
| ``attn_cli.trace(heads=)``, ``Trace.heatmap(heads=)``: the heads to keep | ``head=``, as --head (``attn_cli.api``: with a DeprecationWarning) |

The three properties are on ``attn_cli.api.Trace``, the trace the Python API gives. A
``Pipeline``'s traces are that trace too, so they draw themselves in a notebook as they did.
"""

from __future__ import annotations

from attn_cli.api import Trace, notebook_trace
from attn_cli.records.layers import LayerAttention
from attn_cli.records.selection import Selection
from attn_cli.sources.toy.model import self_attention
from attn_cli.sources.toy.source import ToySource
from attn_cli.text.tokenizers import get_tokenizer

Run = Trace
AttentionResult = LayerAttention


class Pipeline(ToySource):
    """The seeded toy model as the first release named it: its traces are the Python API's."""

    def run(self, text: str, selection: Selection | None = None) -> Trace:
        return notebook_trace(super().run(text, selection))


__all__ = ["AttentionResult", "Pipeline", "Run", "get_tokenizer", "self_attention"]
