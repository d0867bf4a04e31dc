"""The human view of a run: rich renderables, printed once by the command.

Token text always goes through ``rich.markup.escape`` or ``Text``: a token like
``[b]`` is text, not a style.
"""

from __future__ import annotations

from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from attn_cli.pipeline import Run


def config_header(run: Run) -> RenderableType:
    c = run.config
    scale = f"1/sqrt({c.d_k}) = {c.scale_factor * c.temperature:.4g}" if c.scale else "off"
    pairs = [
        ("tokenizer", run.tokens.tokenizer),
        ("seed", str(c.seed)),
        ("d_model", str(c.d_model)),
        ("heads", str(c.heads)),
        ("d_k", str(c.d_k)),
        ("d_v", str(c.d_v)),
        ("scale", scale),
        ("temperature", f"{c.temperature:g}"),
        ("causal", "yes" if c.causal else "no"),
        ("init", c.init.value if c.projections else "none (Q = K = V = X)"),
        ("embeddings", str(c.embeddings) if c.embeddings else f"nn.Embedding({run.tokens.vocab_size}, {c.d_model})"),
    ]
    line = Text()
    for i, (key, value) in enumerate(pairs):
        if i:
            line.append("  ")
        line.append(f"{key} ", style="dim")
        line.append(value, style="bold")
    note = Text("Random weights drawn from the seed, not a trained model's: the patterns show the mechanics, not meaning.", style="dim italic")
    return Group(line, note)


def tokens_table(run: Run) -> Table:
    table = Table(title="Tokens", box=box.SIMPLE_HEAD, title_justify="left")
    table.add_column("pos", justify="right")
    table.add_column("id", justify="right")
    table.add_column("token")
    for i, (tid, label) in enumerate(zip(run.tokens.ids, run.tokens.labels)):
        table.add_row(str(i), str(tid), Text(label))
    return table


def weights_table(run: Run, head: int, precision: int = 4) -> Table:
    weights = run.result.weights[head].tolist()
    labels = run.tokens.labels
    title = "Attention weights softmax(scaled scores)"
    if run.result.n_heads > 1:
        title += f", head {head}"
    table = Table(title=title, box=box.SIMPLE_HEAD, title_justify="left")
    table.add_column("query \\ key")
    for label in labels:
        table.add_column(Text(label), justify="right")
    mask = run.result.causal
    for i, row in enumerate(weights):
        best = max(range(len(row)), key=row.__getitem__)
        cells: list[Text] = []
        for j, w in enumerate(row):
            if mask and j > i:
                cells.append(Text("·", style="dim"))
            else:
                cells.append(Text(f"{w:.{precision}f}", style="bold" if j == best else ""))
        table.add_row(Text(labels[i]), *cells)
    return table


def human_view(run: Run, precision: int = 4) -> RenderableType:
    parts: list[RenderableType] = [config_header(run), tokens_table(run)]
    parts.extend(weights_table(run, h, precision) for h in range(run.result.n_heads))
    return Group(*parts)
