"""The toy model in the words every view prints (``ModelInfo.about``): its settings as the
header's rows, the title's phrases and the page's rows, the flags that make it again, where its
X comes from, its names (X, heads*d_v, "the toy model"), and what the page's step-by-step view
recomputes the softmax from."""

from __future__ import annotations

import dataclasses

from attn_cli.records.about import About, Row, Setting
from attn_cli.sources.toy.config import DEFAULT_D_MODEL, Config, Positional


# what the toy is called whatever its settings: its embeddings X, its heads' context vectors side
# by side as its output, a page headed "the toy model"; alone, a saved toy trace's words whose
# settings this version cannot rebuild
TOY_WORDS = About(input_letter="X", output_width="heads*d_v", names_model=False)


def toy_about(c: Config, vocab_size: int) -> About:
    """A resolved ``c``'s description; ``vocab_size``: the rows of its seeded embedding table."""
    embeddings = str(c.embeddings) if c.embeddings else f"nn.Embedding({vocab_size}, {c.d_model})"
    rows_from = f"from {c.embeddings}" if c.embeddings else f"rows of nn.Embedding after manual_seed({c.seed})"
    if c.positional is not Positional.none:
        embeddings += f" + {c.positional.value} positions"
        rows_from += f", plus {c.positional.value} positional encodings"
    header: tuple[Row, ...] = (
        ("tokenizer", None), ("tokens", None), ("seed", str(c.seed)), ("d_model", str(c.d_model)), ("heads", str(c.heads)),
        ("d_k", str(c.d_k)), ("d_v", str(c.d_v)), ("scale factor", None), ("causal", "yes" if c.causal else "no"),
        ("init", c.init.value if c.projections else "none (Q = K = V = X)"), ("qkv_bias", "yes" if c.qkv_bias else "no"),
        ("out_proj", "yes" if c.out_proj else "no"), ("dropout", f"{c.dropout:g}"), ("embeddings", embeddings),
    )  # fmt: skip
    title: tuple[Row, ...] = (("tokenizer", None), ("seed", str(c.seed)), ("heads", None), ("d_k", str(c.d_k)))
    if not c.scale:
        title += (("unscaled (--no-scale: scores not divided by √d_k)", ""),)
    # the page: one row a phrase of describe(), its first word the key (its first phrase, the tokenizer, the page has already)
    phrases = [phrase.split(" ", 1) if " " in phrase else [phrase, ""] for phrase in c.describe("")[1:]]
    page = (("model", f"toy, one layer. {c.weights_origin()}"), *((key, value) for key, value in phrases), ("scale factor", None), ("input", None))
    steps: tuple[Setting, ...] = (
        ("causal", c.causal), ("scale", c.scale), ("temperature", c.temperature), ("dropout", c.dropout),
        ("projections", c.projections), ("out_proj", c.out_proj), ("d_k", c.d_k), ("d_v", c.d_v),
    )  # fmt: skip
    return dataclasses.replace(
        TOY_WORDS, header=header, note=c.weights_origin(), title=title, page=page, flags=toy_flags(c),
        layer_input=("Embeddings X", rows_from), steps=steps,
    )  # fmt: skip


def toy_flags(c: Config) -> tuple[Row, ...]:
    """The toy options that differ from their defaults, as command-line flags (the tokenizer's:
    the trace's own)."""
    base = Config()
    pairs: list[tuple[bool, Row]] = [
        (c.seed != base.seed, ("--seed", str(c.seed))),
        (c.embeddings is None and c.d_model != DEFAULT_D_MODEL, ("--d-model", str(c.d_model))),
        (c.heads != base.heads, ("--heads", str(c.heads))),
        (c.projections and c.d_model is not None and c.d_k != c.d_model // c.heads, ("--d-k", str(c.d_k))),
        (c.projections and c.d_model is not None and c.d_v != c.d_model // c.heads, ("--d-v", str(c.d_v))),
        (c.causal, ("--causal", "")),
        (not c.scale, ("--no-scale", "")),
        (c.temperature != base.temperature, ("--temperature", f"{c.temperature:g}")),
        (c.dropout != base.dropout, ("--dropout", f"{c.dropout:g}")),
        (c.qkv_bias, ("--qkv-bias", "")),
        (c.out_proj, ("--out-proj", "")),
        (c.init is not base.init, ("--init", c.init.value)),
        (not c.projections, ("--no-projections", "")),
        (c.positional is not base.positional, ("--positional", c.positional.value)),
        (c.embeddings is not None, ("--embeddings", str(c.embeddings))),
    ]
    return (("--tokenizer", None), *(flag for on, flag in pairs if on))
