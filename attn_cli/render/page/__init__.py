"""The page of `attn-cli html`: one self-contained HTML file to explore attention.

``page(traces, command=...)`` returns the whole file as a string: styles, script
and data inline, no request of any kind (a Content-Security-Policy forbids them),
and it works from ``file://``. It reads only ``Trace``, ``ModelInfo`` (what its source
says about itself: ``ModelInfo.about``), ``LayerAttention`` and ``Tokens``, so a trained
model's many layers render unchanged.

Shapes: T tokens, D d_model, H heads, Dk/Dv per-head sizes.

The data travels as binary chunks, base64 in ``<script type="text/plain">``
tags (gzip'ed, for the browser's ``DecompressionStream``, when large), each
decoded on first use:

- weights, per layer: uint16 (H, T, T) holding ``round(w * 10**4)``, the weight
  to the page's 4 decimals rounded half to even, as Python's ``f"{w:.4f}"``
  rounds the JSON's float32; ``MASKED`` marks a cell the query may not see;
- raw scores, per layer: float32 (H, T, T), exact; the scaled scores are
  ``fround(raw / fround(divisor))``, which is how torch divides float32 by a
  Python float (checked per layer; a layer where it differs carries its own);
- the toy's vectors: float32 X (T, D), Q, K (H, T, Dk), V, context (H, T, Dv).

The script formats a float32 to 4 decimals exactly as Python does, so every
number shown equals the JSON export's to the shown precision.

A page is kept under ``max_bytes`` by leaving out whole chunks: later layers'
weights first go last, raw scores before weights; the page and ``Page.left_out``
say what is missing and the flag that adds it.
"""

from __future__ import annotations

import dataclasses
import html
import json
from collections.abc import Sequence
from importlib import resources
from typing import TYPE_CHECKING, Any

from attn_cli.records.hiding import shown
from attn_cli.records.trace import STACKS
from attn_cli.render.commands import command_line
from attn_cli.render.page.chunks import MASKED, PRECISION, SCALE, SIZE_FLAG, Budget, Chunks
from attn_cli.render.page.manifest import trace_manifest

if TYPE_CHECKING:
    from attn_cli.records.trace import Trace

DEFAULT_MAX_BYTES = 20 * 2**20  # a 512-token page of a 12-layer model keeps a few layers
NOTEBOOK_MAX_BYTES = 8 * 2**20  # a notebook stores every output it shows
_CSP = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:"


@dataclasses.dataclass(frozen=True)
class Page:
    html: str
    left_out: tuple[str, ...]  # what the size budget left out, in sentences (the page shows them too)


VIEWS = {"head": "heads", "heads": "heads", "matrix": "matrix", "model": "overview", "overview": "overview", "steps": "steps"}


def page(
    traces: Sequence[Trace], *, command: str, max_bytes: int | None = DEFAULT_MAX_BYTES, title: str | None = None,
    view: str | None = None,
) -> str:  # fmt: skip
    """The whole HTML file for ``traces`` (one, or several for --lines: the page has a picker).

    ``command`` is the command line that reproduces the page, shown in its header;
    ``max_bytes`` bounds the file's size (None: keep everything); ``view``: the tab it
    opens on (head, matrix, model, steps; default the head view).
    """
    return build(traces, command=command, max_bytes=max_bytes, title=title, view=view).html


def build(
    traces: Sequence[Trace], *, command: str, max_bytes: int | None = DEFAULT_MAX_BYTES, title: str | None = None,
    view: str | None = None, stack: str | None = None,
) -> Page:  # fmt: skip
    """``page``'s page and what it left out. An encoder-decoder's trace (one, with --target)
    becomes its three stacks, the page's picker choosing between them; ``stack`` the one
    it opens on (default cross-attention)."""
    if not traces:
        raise ValueError("a page needs at least one trace")
    start = 0
    if len(traces[0].stacks) > 1:  # an encoder-decoder's whole trace
        if len(traces) > 1:
            raise ValueError("a page holds one encoder-decoder trace")
        traces = [traces[0].stack(name) for name in STACKS]
        start = STACKS.index(stack or "cross")
    traces = [shown(trace) for trace in traces]  # --hide-tokens: the page never sees the hidden tokens
    chunks = Chunks()
    manifests = [trace_manifest(trace, chunks) for trace in traces]
    shell = _shell(title or _title(traces))
    budget = Budget(max_bytes, len(shell) + len(_json(manifests)) + 4096)
    left_out = budget.fill(traces, manifests, chunks)
    manifest = {
        "version": 1,
        "precision": PRECISION,
        "scale": SCALE,
        "masked": MASKED,
        "command": command,
        "maxBytes": max_bytes,
        "sizeFlag": SIZE_FLAG,
        "leftOut": left_out,
        "traces": manifests,
        "chunks": {cid: chunk.meta() for cid, chunk in chunks.kept.items()},
        "view": VIEWS.get(view or "head", "heads"),
        "start": start,  # the trace the page opens on
    }
    data = [f'<script type="application/json" id="attn-manifest">{_json(manifest)}</script>']
    data += [f'<script type="text/plain" id="{cid}">{chunk.text}</script>' for cid, chunk in chunks.kept.items()]
    return Page(shell.replace("<!--DATA-->", "\n".join(data), 1), tuple(left_out))


def notebook_html(
    traces: Sequence[Trace], *, height: int = 640, max_bytes: int | None = NOTEBOOK_MAX_BYTES, view: str | None = None
) -> str:
    """The page in a sandboxed ``<iframe srcdoc>``: scripts run, but in their own
    opaque origin, so several pages in one notebook never meet, and nothing loads
    from a CDN."""
    doc = page(traces, command=reproduce_command(traces[0]), max_bytes=max_bytes, view=view)
    return (
        f'<iframe class="attn-cli-page" sandbox="allow-scripts" style="width: 100%; height: {height}px; border: 0" '
        f'title="attention: {html.escape(_title(traces), quote=True)}" srcdoc="{html.escape(doc, quote=True)}"></iframe>'
    )


# -- the command line that reproduces a trace (for pages made from the Python API) --

def reproduce_command(trace: Trace) -> str:
    """``attn-cli html TEXT ...`` with the options that made ``trace``; where no command makes
    its source again (attention computed outside attn-cli), what the source says instead."""
    if trace.model.about.reproduce is not None:
        return trace.model.about.reproduce
    extra: list[str] = []
    kept = [layer.layer for layer in trace.layers]
    if kept != list(range(trace.model.layers)):
        extra += ["--layer", ",".join(str(i) for i in kept)]
    if trace.hiding is not None and trace.hiding.active:
        extra += ["--hide-tokens", ",".join(str(i) for i in trace.hiding.hidden)]
    return command_line(trace, "html", *extra)


# -- the file ------------------------------------------------------------------

def _json(value: Any) -> str:
    """JSON safe inside a <script> element: no '<' at all, so never '</script>'."""
    return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":")).replace("<", "\\u003c")


def _asset(name: str) -> str:
    return resources.files(__package__).joinpath(name).read_text(encoding="utf-8")


def _title(traces: Sequence[Trace]) -> str:
    text = " ".join(traces[0].text.split())
    short = text if len(text) <= 60 else text[:59] + "…"
    more = f" (+{len(traces) - 1} more)" if len(traces) > 1 else ""
    model = traces[0].model
    return f"{short}{more}" + (f" · {model.name}" if model.about.names_model else "")


def _shell(title: str) -> str:
    return (
        "<!doctype html>\n"
        '<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">\n'
        '<meta name="color-scheme" content="light dark">\n'
        '<meta name="generator" content="attn-cli html">\n'
        '<link rel="icon" href="data:,">\n'
        f"<title>attention: {html.escape(title)}</title>\n"
        f"<style>\n{_asset('page.css')}</style>\n</head>\n<body>\n"
        '<noscript><p>This page draws attention with JavaScript; turn it on to explore it.</p></noscript>\n'
        '<div id="app" aria-busy="true"><p class="loading">Loading…</p></div>\n'
        "<!--DATA-->\n"
        f"<script>\n{_asset('page.js')}</script>\n</body>\n</html>\n"
    )
