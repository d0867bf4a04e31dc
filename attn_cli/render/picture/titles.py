"""Titles that fit their figure: wrapped at the parts' joints, measured in points, never cut off.

A title is a list of lines, each a list of parts (``"heads 4"``, ``"d_k 8"``, ...)
joined by `` · ``. ``fit_title`` packs the parts of each line into as many lines
as the width needs, and shortens with ``…`` only a part that is wider than the
whole figure on its own: a quoted text loses its end (the closing quote stays),
a path its beginning (the name at its end stays), anything else its end.
Widths are measured with matplotlib's own text layout (``text_to_path``), in the
font the figure draws with, so the answer holds for PNG, SVG and PDF alike.

What a heatmap's title says is here too (``heatmap_title``): the model and what ran, the
stack, the tokens --hide-tokens left out, what --generate added.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Sequence

from matplotlib import rcParams
from matplotlib.font_manager import FontProperties
from matplotlib.textpath import text_to_path

from attn_cli.records.hiding import hidden_text
from attn_cli.records.results import Target
from attn_cli.records.trace import Trace as Run
from attn_cli.render.picture.kinds import What, combined_of

JOIN = " · "
FROM = "← "  # a part that begins so continues the part before it (a cross-attention's source): a space, not JOIN
MIN_TITLE_FONT = 7.0  # points; below this a title is not worth reading on paper


# How a matrix for every head is made, in a title (the rollout's: each layer's mixed weights)
HOW = {
    What.flow: "each layer: mean of all heads, half residual (I), max flow to each input token",
    What.value_zeroing: "cosine distance of each output with each key's values zeroed, rows normalized (Mohebbi et al. 2023)",
    What.value_zeroing_rollout: "each layer's value zeroing, multiplied (Mohebbi et al. 2023)",
    What.alti: "each layer's ALTI contributions, multiplied (Ferrando et al. 2022)",
    What.attention_gradient: "R = I, then R += mean over heads of (grad x weights)+ · R, each layer (Chefer et al. 2021)",
}


def explained_text(target: Target) -> str:
    """The output attention x gradient explains, in a title: 'label positive (logit 2.31)', 'the next token “ Paris” (...)'."""
    return f"{target.what} (logit {target.logit:.3g}{'' if target.predicted else ', as asked'})"


def text_width(text: str, size: float) -> float:
    """Width of ``text`` in points at ``size`` points, in the font family matplotlib draws with now."""
    return _width(text, size, tuple(rcParams["font.family"]))


@functools.lru_cache(maxsize=4096)
def _width(text: str, size: float, family: tuple[str, ...]) -> float:
    prop = FontProperties(family=list(family), size=size)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a missing glyph is reported once, when the figure is saved
        width, _height, _descent = text_to_path.get_text_width_height_descent(text, prop, ismath=False)
    return float(width)


def fit_title(lines: Sequence[Sequence[str]], width: float, size: float) -> str:
    """The title's lines wrapped to ``width`` points at ``size`` points; a newline between lines.

    Lines break between parts; a part wider than ``width`` on its own is shortened
    when it is a quoted text or a path, and broken between its words otherwise
    (a hint's words all matter)."""
    out: list[str] = []
    for parts in lines:
        pieces: list[tuple[str, str]] = []  # (what joins it to the piece before, the piece)
        for part in parts:
            joiner = "" if not pieces else " " if part.startswith(FROM) else JOIN
            if text_width(part, size) <= width:
                pieces.append((joiner, part))
            elif _shortened_whole(part):
                pieces.append((joiner, shorten_to_width(part, width, size)))
            else:
                for i, word in enumerate(part.split(" ")):
                    word = word if text_width(word, size) <= width else shorten_to_width(word, width, size)
                    pieces.append((joiner if i == 0 else " ", word))
        current = ""
        for joiner, piece in pieces:
            longer = current + joiner + piece
            if current and text_width(longer, size) > width:
                out.append(current)
                current = piece
            else:
                current = longer
        if current:
            out.append(current)
    return "\n".join(out)


def title_font(figure_width: float, preferred: float) -> float:
    """A title font for a figure ``figure_width`` inches wide: ``preferred`` on a wide figure,
    smaller on a narrow one (about 2.4 points per inch), never under MIN_TITLE_FONT."""
    return max(MIN_TITLE_FONT, min(preferred, round(figure_width * 2.4 * 2) / 2))


def shorten_to_width(part: str, width: float, size: float) -> str:
    """``part`` cut with ``…`` until it fits ``width`` points (at least its first character)."""
    quoted = _quoted(part)
    path = not quoted and "/" in part

    def cut(keep: int) -> str:
        if quoted:
            return part[: keep] + "…”"
        if path:
            return "…" + part[len(part) - keep :]
        return part[:keep] + "…"

    low, high = 1, len(part) - 1  # the longest cut that still fits, by bisection
    while low < high:
        middle = (low + high + 1) // 2
        if text_width(cut(middle), size) <= width:
            low = middle
        else:
            high = middle - 1
    return cut(low)


def _quoted(part: str) -> bool:
    return part.endswith("”") and "“" in part


def _shortened_whole(part: str) -> bool:
    """Parts that lose characters rather than wrap: a quoted text (the title repeats the
    start of the text) and a path or a model name (one unbreakable word)."""
    return _quoted(part) or " " not in part


def heatmap_title(run: Run, what: What, heads: Sequence[int]) -> list[list[str]]:
    """The title's lines, each a list of parts (``fit_title`` wraps them between parts)."""
    m = run.model
    result = run.layers[0]
    text = " ".join(run.text.split())
    if len(text) > 60:
        text = text[:59] + "…"
    divisor = f"/ {result.divisor:.4g}" if result.divisor != 1 else ""
    headline = {
        What.weights: "Attention weights",
        What.scores: "Attention scores Q·Kᵀ",
        What.scaled: f"Scaled scores Q·Kᵀ {divisor}".rstrip(),
        What.all: "Attention: scores, scaled scores, weights",
        What.norms: "Value-weighted norms ‖a·f(x)‖",
        What.rollout: f"Attention rollout through layer {run.rollout.through_layer}" if run.rollout is not None else "",
        What.flow: f"Attention flow through layer {run.flow.through_layer}" if run.flow is not None else "",
        What.value_zeroing: "Value zeroing",
        What.value_zeroing_rollout: "Value zeroing rollout",
        What.alti: "ALTI",
        What.attention_gradient: "Attention x gradient" + (f" of {explained_text(run.explained)}" if run.explained is not None else ""),
    }[what]
    shown = f"{m.heads}" if len(heads) == m.heads else f"{m.heads} (showing {', '.join(map(str, heads))})"
    masked = (
        ("causal (grey: masked)" if what is not What.scores else "causal (mask not yet applied to raw scores)")
        if result.causal
        else "not causal"
    )
    stack = run.view_stack
    own = {  # the title's slots: the trace's own phrases (None: it has none)
        "model": m.name,
        "layer": f"layer {result.layer} of {m.layers}" if m.layers > 1 else None,
        "stack": STACK_TITLES[stack.name] if stack is not None else None,  # one stack of an encoder-decoder
        "heads": f"heads {shown}",
        "head_dim": f"head_dim {m.head_dim}" if m.head_dim else None,  # 0: not known (a saved trace)
        "tokenizer": f"tokenizer {run.tokens.tokenizer}",
    }
    phrases = [own[key] if value is None else (f"{key} {value}" if value else key) for key, value in m.about.title]
    config = [phrase for phrase in phrases if phrase is not None] + [masked]
    if m.dropout and what in (What.weights, What.all):
        config.append(f"dropout {m.dropout:g} (weights shown before it)")
    if m.dropout and what is What.norms:
        config.append(f"dropout {m.dropout:g} (the dropped weights, which mixed the values)")
    combined = combined_of(run, what)
    if combined is not None:  # one matrix for every head: the rollout, the flow, an attribution map
        through = combined.through_layer
        layers = f"layer {through} of {m.layers}" if what is What.value_zeroing else f"layers 0 to {through} of {m.layers}" if through else f"layer 0 of {m.layers}"
        config = [config[0], layers, HOW.get(what, f"each layer: mean of all {m.heads} heads, half residual (I)"),  # config[0] names the source
                  "causal (grey: no path)" if combined.causal else "not causal"]  # fmt: skip
    if stack is not None and stack.cross:  # cross-attention: the target's rows read the source
        source = " ".join(stack.key_text.split())
        source = source if len(source) <= 60 else source[:59] + "…"
        return [[f"{headline}: “{text}”", f"{FROM}“{source}”"], config, *hint_lines(hidden_line(run) + generated_line(run))]
    return [[f"{headline}: “{text}”"], config, *hint_lines(hidden_line(run) + generated_line(run))]



STACK_TITLES = {
    "encoder": "encoder self-attention",
    "decoder": "decoder self-attention",
    "cross": "cross-attention: target rows, source columns",
}



def hint_lines(text: str) -> list[list[str]]:
    """A title addition written as "\\nline\\nline" (``hidden_line``, ``faint_hint``) as title lines."""
    return [[line] for line in text.split("\n") if line]



def generated_line(run: Run) -> str:
    """A title line saying where --generate's tokens start (the dashed lines); else ""."""
    if run.prompt_length is None:
        return ""
    added = len(run.tokens) - run.prompt_length
    return f"\n{added} generated token{'s' if added != 1 else ''} from position {run.prompt_length} (after the dashed lines)"



def hidden_line(run: Run) -> str:
    """A title line naming what --hide-tokens left out of a ``shown()`` trace; else ""."""
    hidden = hidden_text(run)
    if hidden is None:
        return ""
    line = f"\n{hidden} over the {len(run.own_stack.key_tokens)} tokens shown"
    if any(bool(layer.weights.isnan().any()) for layer in run.layers):
        line += " (grey rows: all their weight was on hidden tokens)"
    return line
