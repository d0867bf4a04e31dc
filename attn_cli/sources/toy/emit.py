"""``--emit-python``: a standalone PyTorch script that reproduces one run.

The script needs only torch (and tiktoken for a tiktoken tokenizer). It replays
the seed contract of ``embed.py`` and ``model.py`` with the same tensor
operations in the same order, so its numbers are attn-cli's: run it to print
the matrices, or with ``--json`` to print them under the keys of
``attn-cli run --format json`` (``tokens``, and in ``layers[0]``: ``input``,
``heads[*]``, ``concat``, ``output``).

No rich or typer here: ``script_for_run`` and ``script_for`` return a string;
``script_for_texts`` also gives the notes the command line prints on stderr.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

from attn_cli import __version__
from attn_cli.records.tokens import Tokens
from attn_cli.sources.toy.config import Config
from attn_cli.sources.toy.script import (
    Lines,
    ScriptRun,
    attend_lines,
    combine_lines,
    describe,
    embed_lines,
    project_lines,
    report_lines,
    string_assignment,
    tokenize_lines,
    weights_lines,
)
from attn_cli.text.tokenizers import WORDS


def script_for_texts(config: Config, texts: Sequence[str]) -> tuple[str, list[str]]:
    """The script for the first of ``texts`` under ``config`` (unresolved), and notes for stderr.

    Tokenizes and reads the embeddings file as ``ToySource.run`` does, but runs no
    attention: the script is what computes it.
    """
    from attn_cli.sources.toy.embed import load_embeddings
    from attn_cli.sources.toy.source import ToySource

    pipeline = ToySource(config)
    notes = list(pipeline.notes)
    text = texts[0]
    tokens = pipeline.tokenize(text)
    rows = None
    if config.embeddings is not None:
        rows = load_embeddings(config.embeddings, len(tokens)).tolist()  # (T, D) float32 values
    resolved = config.resolved(len(rows[0]) if rows else None)
    if len(texts) > 1:
        notes.append(
            f"note: --emit-python wrote the script for the first of {len(texts)} texts; "
            f"give the others one at a time for theirs"
        )
    return script_for(text, tokens, resolved, rows), notes


def script_for_run(run) -> str:  # run: attn_cli.records.trace.Run
    """The script that reproduces ``run``."""
    rows = None
    if run.model.config.embeddings is not None:
        from attn_cli.sources.toy.embed import load_embeddings

        rows = load_embeddings(run.model.config.embeddings, len(run.tokens)).tolist()
    return script_for(run.text, run.tokens, run.model.config, rows)


def script_for(text: str, tokens: Tokens, config: Config, embeddings: list[list[float]] | None = None) -> str:
    """The script for ``text`` tokenized as ``tokens``, under ``config`` (resolved).

    ``embeddings``: the rows of the user's file (float32 values), written into
    the script as a literal; ``None`` for the seeded table.
    """
    if config.d_model is None or config.d_k is None or config.d_v is None:
        raise ValueError("script_for needs a resolved config (Config.resolved)")
    run = ScriptRun(text, tokens, config, embeddings)
    return "\n".join(line for step in _STEPS for line in step(run)) + "\n"


# -- the script's first sections (the rest are script.py's); each returns its lines --


def _header(r: ScriptRun) -> list[str]:
    out = Lines()
    c = r.c
    out.add(
        "#!/usr/bin/env python3",
        f'"""Self-attention for one text, step by step: written by attn-cli {__version__} (--emit-python).',
        "",
        "It reproduces that attn-cli run with plain PyTorch: same tokens, same seeded",
        "weights, same numbers. `python attention.py` prints the matrices;",
        "`python attention.py --json` prints them as JSON, with the keys of",
        "`attn-cli run --format json`.",
        "",
        *textwrap.wrap(f"Configuration: {describe(c, r.tokens)}.", width=88),
        "Shapes: T tokens, D d_model, H heads, Dk per-head query/key size, Dv per-head value size.",
        '"""',
        "",
        "import json",
        "import math",
        "import sys",
    )
    if r.tokens.tokenizer == WORDS:
        out.add("import unicodedata")
    out.add("", "import torch")
    if r.tokens.tokenizer != WORDS:
        out.add("import tiktoken")
    out.add(
        "",
        "torch.set_grad_enabled(False)  # nothing is trained here: no autograd graph needed",
        "torch.set_num_threads(1)  # as attn-cli: on more threads a BLAS may sum in another order (last bits)",
        "",
    )
    return out.lines


def _settings(r: ScriptRun) -> list[str]:
    out = Lines()
    c = r.c
    out.add(*string_assignment("text", r.text))
    out.add(f"seed = {c.seed}")
    out.add(f"d_model = {c.d_model}  # D")
    out.add(f"heads = {c.heads}  # H")
    out.add(f"d_k = {c.d_k}  # Dk, per head" + ("" if c.projections else ": d_model / heads, as there are no projections"))
    out.add(f"d_v = {c.d_v}  # Dv, per head")
    if c.temperature != 1.0:
        out.add(f"temperature = {c.temperature!r}  # the softmax input is divided by this as well")
    if c.dropout:
        out.add(f"dropout = {c.dropout!r}  # probability of zeroing each attention weight")
    out.add("")
    return out.lines


# The script, section by section, in the order it runs.
_STEPS = (_header, _settings, tokenize_lines, embed_lines, weights_lines, project_lines, attend_lines, combine_lines, report_lines)
