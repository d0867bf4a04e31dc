"""`attn-cli census -o NAME.html`: a census as one self-contained page: the corpus in a sentence,
the pictures (a PNG inside the file), and every head's measures, standard errors and flags in a
table. No script, no request; the Content-Security-Policy forbids both.
"""

from __future__ import annotations

import html
from typing import Any

from attn_cli.render.page.document import STYLE, _CSP, _png

COLUMNS = ("cls", "sep", "punct", "self", "previous", "next", "entropy_nats", "first_mass", "sink_score", "sink_rate", "confidence", "positional")


def census_page(made: dict[str, Any], name: str, figure: Any, *, command: str) -> str:
    """The whole file of a ``formats.census.census_dict`` of model ``name``, with its ``figure``."""
    rate = made["sink_rate"]
    summary = (
        f"{made['texts']:,} texts ({made['tokens']:,} tokens) of <code>{html.escape(str(made['corpus']))}</code>; "
        f"{made['empty']} empty and {len(made['skipped'])} unreadable skipped; the model's sink rate "
        f"{'–' if rate is None else f'{rate:.3f}'} at epsilon {made['epsilon']}. Every measure is averaged over every row of "
        "every text (token-weighted); ± is its standard error over texts (docs/census.md)."
    )
    header = "".join(f"<th>{html.escape(c)}</th>" for c in ("layer", "head", *COLUMNS, "flags"))
    rows = []
    for head in made["heads"]:
        cells = "".join(f"<td>{_value(head['measures'][c], head['se'][c])}</td>" for c in COLUMNS)
        rows.append(f"<tr><td>{head['layer']}</td><td>{head['head']}</td>{cells}<td class=text>{html.escape(', '.join(head['flags']))}</td></tr>")
    parts = [
        f"<h1>{html.escape(name)}: a census of {made['texts']:,} texts</h1>",
        f"<p>Made by <code>{html.escape(command)}</code></p>",
        f"<p>{summary}</p>",
        _png(figure, "census"),
        "<h2>Every head</h2>",
        f"<table><tr>{header}</tr>{''.join(rows)}</table>",
    ]
    head = f"<meta charset=utf-8><meta http-equiv=Content-Security-Policy content=\"{_CSP}\"><title>{html.escape(name)} census</title>"
    return f"<!doctype html><html><head>{head}<style>{STYLE}</style></head><body>{''.join(parts)}</body></html>\n"


def _value(value: float | None, se: float | None) -> str:
    if value is None:
        return "–"
    return f"{value:.3f}" + ("" if se is None else f" <small>±{se:.3f}</small>")
