"""`attn-cli explain`: one head's computation, step by step, with its own numbers.

``explain(trace, head=, query=, precision=)`` builds an ``Explanation`` (document.py):
numbered steps of prose, formulas and grids of numbers already formatted.
``to_text`` (text.py) lays it out as plain text, ``to_rich`` (rich.py) as panels
for a terminal; both show the same numbers, each checkable against the step
before it. The steps come from the trace alone (steps.py); the seeded toy model
(toy.py) and a trained checkpoint (trained.py) differ only in the steps where
the tokens, the layer's input and the weights come from.
"""

from __future__ import annotations

from attn_cli.records.trace import Trace
from attn_cli.render.explain.document import CORNER, FULL_D, FULL_T, Block, Explanation, Grid, Line, Step
from attn_cli.render.explain.layout import resolve_head
from attn_cli.render.explain.rich import to_rich
from attn_cli.render.explain.text import to_text
from attn_cli.runtime.errors import UsageError

__all__ = [
    "CORNER", "FULL_D", "FULL_T", "Block", "Explanation", "Grid", "Line", "Step",
    "explain", "resolve_head", "to_rich", "to_text",
]  # fmt: skip


# The walk-through derives about this many (T, T) float32 tensors of one head at
# once (scores, scaled, masked, float64 copies for spreads, the ablation's softmaxes
# and statistics): measured 19 at T = 3000 (0.7 GB over the trace), with a margin.
SQUARES_AT_PEAK = 24


def explain_bytes(n_tokens: int) -> int:
    """What building the walk-through of a text of ``n_tokens`` allocates, about."""
    return SQUARES_AT_PEAK * 4 * n_tokens * n_tokens


def explain(run: Trace, *, head: int | None = None, query: int | None = None, precision: int = 4) -> Explanation:
    """The walk-through of ``run``'s first kept layer: steps 4-8 for one head
    (``head``, default 0), following the query at position ``query`` in detail
    when it is given. Refuses (TooLargeError) a text whose walk-through would not
    fit in memory, before building any of it."""
    from attn_cli.runtime import budget

    n = len(run.tokens)
    budget.check(
        {"explain": explain_bytes(n)},
        {"explain": f"the walk-through's T x T tables of {n} tokens"},
        {"explain": "use a shorter text (the walk-through summarises long ones anyway), or `attn-cli run --query N` for one row"},
        doing="explain",
    )
    h = resolve_head(run, head)
    if query is not None and not 0 <= query < len(run.tokens):
        raise UsageError(f"--query {query} is out of range: the text has {len(run.tokens)} tokens, positions 0 to {len(run.tokens) - 1}")
    if run.model.trained:
        from attn_cli.render.explain.trained import TrainedWalkthrough

        return TrainedWalkthrough(run, h, query, precision).build()
    from attn_cli.render.explain.toy import ToyWalkthrough

    return ToyWalkthrough(run, h, query, precision).build()
