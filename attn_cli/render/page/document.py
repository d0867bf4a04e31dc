"""The page of a long text (`attn-cli html` past POOL_ABOVE tokens, or where the tables do not
fit): one self-contained file, as the page of a sentence is, but built from what a run in
blocks keeps: each kept layer's pooled map per head (a picture), its heads' statistics, the
--query rows as strips with each row's strongest keys and the text around them, and the
--window at full resolution. Every picture is a PNG inside the file (data: URIs): no script,
no request; the Content-Security-Policy forbids both.

Shapes: T query rows, S keys, H heads.
"""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Sequence
from typing import TYPE_CHECKING

from attn_cli.analysis.stats import distance_bins
from attn_cli.render.picture.panels import HeatmapOptions
from attn_cli.analysis.rowstats import row_of, stats_of
from attn_cli.render.picture.pooled import LongView, long_figure

if TYPE_CHECKING:
    from attn_cli.records.trace import Trace

_CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
TOP_KEYS = 8
AROUND = 6  # tokens of text on each side of a key
STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 1.5em auto; max-width: 1400px; padding: 0 1em; color: #222 }
h1 { font-size: 1.3em } h2 { font-size: 1.1em; margin-top: 2em } code { background: #f3f3f3; padding: 0 .25em }
table { border-collapse: collapse; margin: .6em 0 } td, th { padding: .15em .6em; text-align: right; border-bottom: 1px solid #eee }
th { background: #fafafa } td.text, th.text { text-align: left; font-family: ui-monospace, monospace; white-space: pre-wrap }
img { max-width: 100%; border: 1px solid #ddd } .note { color: #666; font-style: italic } b.key { background: #ffe38a }
figure.zoom { margin: .6em 0 } figure.zoom img { cursor: zoom-in } figure.zoom a.out { display: none }
figure.zoom:target { position: fixed; inset: 0; margin: 0; overflow: auto; background: #fff; z-index: 9; padding: 2.2em .5em .5em }
figure.zoom:target img { max-width: none; cursor: zoom-out }
figure.zoom:target a.out { display: block; position: fixed; top: .5em; left: .5em; background: #fff; padding: .1em .5em; border: 1px solid #ccc }
"""
ZOOM_DPI = 160  # the pictures' resolution: shown at the page's width, and at this when one is clicked


def document_page(trace: Trace, *, command: str, view: LongView, dpi: float = ZOOM_DPI) -> str:
    """The whole file: a long text's pooled maps, statistics, chosen rows and window. Each picture
    zooms to its full resolution when clicked (a CSS :target, no script), and back."""
    heads = list(trace.shown_heads)
    parts = [
        f"<h1>{html.escape(trace.model.name)}: {len(trace.tokens):,} tokens</h1>",
        f"<p>Made by <code>{html.escape(command)}</code></p>",
    ]
    if trace.tables_omitted is not None:
        parts.append(f"<p class=note>Not kept: {html.escape(trace.tables_omitted)}.</p>")
    if trace.model.decoder_layers:
        parts.append("<p class=note>An encoder-decoder: this page is its encoder's self-attention over the source; the decoder's and "
                     "cross-attention's tables are in <code>attn-cli run -F json</code>.</p>")  # fmt: skip
    parts.append(_section("Pooled maps", _png(long_figure(_only(trace, queries=()), HeatmapOptions(dpi=dpi), LongView(how=view.how)), "pooled")))
    for layer in trace.layers:
        parts.append(f"<h2>Layer {layer.layer}: the heads' statistics</h2>" + _stats_table(trace, layer, heads))
    if trace.queries:
        parts.append(_section("The chosen rows", _png(long_figure(trace, HeatmapOptions(dpi=dpi), LongView(how=view.how)), "rows")))
        parts += [_query_keys(trace, layer, query, heads) for layer in trace.layers for query in trace.queries]
    if view.window is not None:
        parts.append(_section(f"Window: queries {view.window[0]} to {view.window[1] - 1}", _png(long_figure(trace, HeatmapOptions(dpi=dpi), view), "window")))
    head = f"<meta charset=utf-8><meta http-equiv=Content-Security-Policy content=\"{_CSP}\"><title>{html.escape(trace.model.name)}</title>"
    return f"<!doctype html><html><head>{head}<style>{STYLE}</style></head><body>{''.join(parts)}</body></html>\n"


def _only(trace: Trace, *, queries: tuple[int, ...]) -> Trace:
    import dataclasses

    return dataclasses.replace(trace, queries=queries)


def _section(title: str, body: str) -> str:
    return f"<h2>{html.escape(title)}</h2>{body}"


def _png(fig: object, name: str) -> str:
    """The figure as an <img> with its PNG inside, in a figure that zooms to the PNG's own size when
    clicked (its anchor targets the figure) and back (the figure's second link, or the image again)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")  # type: ignore[attr-defined]
    data = base64.b64encode(buffer.getvalue()).decode("ascii")
    return (f"<figure class=zoom id={name}><a class=in href='#{name}'><img alt='attention picture' src='data:image/png;base64,{data}'></a>"
            f"<a class=out href='#_'>back to the page</a></figure>")  # fmt: skip



def _stats_table(trace: Trace, layer: object, heads: Sequence[int]) -> str:
    """A row a head: mean entropy, effective keys, the masses, the sink score, the distance bin with most weight."""
    bins = distance_bins(len(trace.own_stack.key_tokens))
    rows = []
    for h, s in zip(heads, stats_of(layer, heads)):
        peak = "–"
        if s.distance_mass is not None:
            b = max(range(len(s.distance_mass)), key=s.distance_mass.__getitem__)
            peak = f"{bins[b][0]}–{bins[b][1]} ({s.distance_mass[b]:.3f})"
        cells = [s.mean_entropy_bits, s.mean_effective_tokens, s.self_mass, s.previous_mass, s.first_mass, s.sink_score]
        rows.append(f"<tr><td>{h}</td>" + "".join(f"<td>{'–' if v is None else f'{v:.3f}'}</td>" for v in cells) + f"<td>{peak}</td></tr>")
    header = "".join(f"<th>{name}</th>" for name in ("head", "entropy bits", "eff. keys", "self", "previous", "first", "sink", "peak distance"))
    return f"<table><tr>{header}</tr>{''.join(rows)}</table>"


def _query_keys(trace: Trace, layer: object, query: int, heads: Sequence[int]) -> str:
    """Query ``query``'s strongest keys per head, each with the text around it."""
    keys = trace.own_stack.key_tokens
    rows = []
    for h in heads:
        weights = row_of(layer, query, h)  # (S,)
        top = weights.topk(min(TOP_KEYS, weights.shape[-1]))
        for rank, (w, key) in enumerate(zip(top.values.tolist(), top.indices.tolist())):
            around = keys.around(key, AROUND)
            before, own, after = html.escape(around.before), html.escape(around.own), html.escape(around.after)
            snippet = f"{'…' * (around.low > 0)}{before}<b class=key>{own}</b>{after}{'…' * (around.high < len(keys.texts))}"
            rows.append(f"<tr><td>{h if rank == 0 else ''}</td><td>{key}</td><td>{w:.4f}</td><td class=text>{snippet}</td></tr>")
    title = f"Layer {layer.layer}, query {query} {html.escape(repr(trace.tokens.texts[query]))}: its strongest keys"  # type: ignore[attr-defined]
    return f"<h2>{title}</h2><table><tr><th>head</th><th>key</th><th>weight</th><th class=text>around the key</th></tr>{''.join(rows)}</table>"
