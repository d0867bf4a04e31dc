"""`attn-cli explain`: every step is there, in order, and every number on screen
matches an independent computation (the seed contract written out in plain torch)."""

from __future__ import annotations

from attn_cli.sources.attend import causal_mask

import dataclasses
import functools
import json
import math
import re
from pathlib import Path
from typing import Any

import invoking
import pytest
import torch

from attn_cli.sources.toy.config import Config, Init, Positional
from attn_cli.sources.toy.source import ToySource
from attn_cli.render.explain import CORNER, FULL_T, Explanation, Grid, Line, explain, to_rich, to_text

LIFE = "Life is short, eat dessert first"
TOL = 0.5e-4 + 1e-6  # four decimals on screen


def run_of(text: str = LIFE, **options: Any):
    return ToySource(Config(tokenizer="words", **options)).run(text)


cli = functools.partial(invoking.invoke, code=None, command=("explain",))


def step(expl: Explanation, number: int):
    return next(s for s in expl.steps if s.number == number)


def grid(expl: Explanation, number: int, title: str) -> Grid:
    found = [b for b in step(expl, number).blocks if isinstance(b, Grid) and b.title.startswith(title)]
    assert found, f"step {number} has no grid {title!r}"
    return found[0]


def grids(expl: Explanation, number: int, first_header: str) -> list[Grid]:
    return [b for b in step(expl, number).blocks if isinstance(b, Grid) and b.header[0] == first_header]


def text_of(expl: Explanation, number: int) -> str:
    return "\n".join(b.text for b in step(expl, number).blocks if isinstance(b, Line))


def number(cell: str) -> float:
    return float(cell.replace("−", "-"))


def values(g: Grid) -> list[list[float]]:
    """The numeric body of a full (not summarised) grid."""
    return [[number(c) for c in row[1:]] for row in g.rows]


def assert_grid(g: Grid, want: torch.Tensor, tol: float = TOL) -> None:
    got = torch.tensor(values(g), dtype=torch.float64)
    assert got.shape == want.shape, (g.title, got.shape, want.shape)
    finite = torch.isfinite(want)
    assert torch.equal(torch.isfinite(got), finite), g.title
    assert (got[finite] - want.double()[finite]).abs().max().item() <= tol, g.title


def reference(run) -> dict[str, Any]:
    """The seed contract in plain torch, independent of attn_cli.sources.attend (linear init)."""
    c, tokens = run.model.config, run.tokens
    torch.manual_seed(c.seed)
    x = torch.nn.Embedding(tokens.vocab_size, c.d_model)(torch.tensor(tokens.ids)).detach()  # (T, D)
    torch.manual_seed(c.seed)
    H, dk, dv, T = c.heads, c.d_k, c.d_v, len(tokens)
    if c.projections:
        assert c.init is Init.linear
        wq, wk, wv = (torch.nn.Linear(c.d_model, H * d, bias=c.qkv_bias) for d in (dk, dk, dv))
        q, k, v = wq(x).detach(), wk(x).detach(), wv(x).detach()
    else:
        q = k = v = x
    wo = torch.nn.Linear(H * dv, H * dv) if c.out_proj else None
    heads = []
    for h in range(H):
        qh, kh, vh = q[:, h * dk : (h + 1) * dk], k[:, h * dk : (h + 1) * dk], v[:, h * dv : (h + 1) * dv]
        s = qh @ kh.T  # (T, T)
        z = s / ((math.sqrt(dk) if c.scale else 1.0) * c.temperature)
        zm = z.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), -math.inf) if c.causal else z
        w = torch.softmax(zm, dim=-1)
        heads.append({"q": qh, "k": kh, "v": vh, "s": s, "z": z, "zm": zm, "w": w, "ctx": w @ vh})
    concat = torch.cat([hd["ctx"] for hd in heads], dim=1)  # (T, H*Dv)
    output = wo(concat).detach() if wo is not None else concat
    return {"x": x, "heads": heads, "concat": concat, "output": output}


# -- the steps ------------------------------------------------------------------


def test_all_nine_steps_in_order_with_skips_marked() -> None:
    plain = run_of()
    full = run_of(causal=True, heads=2, out_proj=True)
    titles = ["Tokenize", "Embed", "Project", "Raw scores", "Scale", "Causal mask", "Softmax", "Context vectors", "Heads and output"]
    for expl in (explain(plain), explain(full)):
        assert [(s.number, s.title) for s in expl.steps] == list(enumerate(titles, 1))
    assert [s.number for s in explain(plain).steps if s.skipped] == [6, 9]
    assert not any(s.skipped for s in explain(full).steps)
    out = cli(LIFE, "-t", "words").stdout
    positions = [out.index(f"{n}. {t}") for n, t in enumerate(titles, 1)]
    assert positions == sorted(positions)
    assert "6. Causal mask (not in this run)" in out and "9. Heads and output (not in this run)" in out


def test_tokenize_lists_the_vocabulary_and_ids() -> None:
    expl = explain(run_of())
    assert "Life=0, dessert=1, eat=2, first=3, is=4, short=5" in text_of(expl, 1)
    g = grid(expl, 1, "Tokens")
    assert [row for row in g.rows] == [
        ("0", "Life", "0"), ("1", "is", "4"), ("2", "short", "5"), ("3", "eat", "2"), ("4", "dessert", "1"), ("5", "first", "3"),
    ]
    assert "T = 6 tokens" in text_of(expl, 1)


def test_repeated_tokens_are_told_apart_and_explained() -> None:
    expl = explain(run_of("I saw a saw"))
    assert [row[1] for row in grid(expl, 1, "Tokens").rows] == ["I", "saw#1", "a", "saw#3"]
    assert "'saw' appears at positions 1, 3" in text_of(expl, 1)
    assert "--positional sinusoidal" in text_of(expl, 1)


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"causal": True, "heads": 2, "out_proj": True, "qkv_bias": True},
        {"projections": False, "heads": 2},
        {"d_k": 5, "d_v": 3, "temperature": 0.5, "seed": 9},
    ],
    ids=["default", "causal-2heads-outproj-bias", "naive", "odd-sizes"],
)
def test_every_matrix_matches_an_independent_computation(options: dict[str, Any]) -> None:
    run = run_of(**options)
    ref = reference(run)
    heads = run.model.config.heads
    for h in range(heads):
        expl = explain(run, head=h)
        r = ref["heads"][h]
        assert_grid(grid(expl, 2, "X"), ref["x"])
        if run.model.config.projections:
            for name, key in (("Q", "q"), ("K", "k"), ("V", "v")):
                assert_grid(grid(expl, 3, name), r[key])
        elif heads > 1:
            assert_grid(grid(expl, 3, "Q = K = V"), r["q"])
        assert_grid(grid(expl, 4, "S, raw scores"), r["s"])
        assert_grid(grid(expl, 5, "Z, scaled scores"), r["z"])
        weights = grid(expl, 7, "weights")
        assert weights.header[-1] == "row sum"
        assert all(row[-1] == "1.0000" for row in weights.rows)
        assert_grid(dataclasses.replace(weights, rows=tuple(row[:-1] for row in weights.rows)), r["w"])
        assert_grid(grid(expl, 8, "context"), r["ctx"])
        if run.model.config.causal:
            assert_grid(grid(expl, 6, "Z masked"), r["zm"])
        if heads > 1:
            assert grid(expl, 4, "S, raw scores").title.startswith(f"S, raw scores (head {h})")
            assert_grid(grid(expl, 9, "concat"), ref["concat"])
        if run.model.config.out_proj:
            assert_grid(grid(expl, 9, "output"), ref["output"])


def test_scale_step_gives_the_factor_and_the_spread() -> None:
    run = run_of()
    expl = explain(run)
    text = text_of(expl, 5)
    assert "factor = 1/√d_k = 1/√16 = 0.25" in text
    s = reference(run)["heads"][0]["s"].double()
    std, span = s.std(correction=0).item(), (s.max() - s.min()).item()
    match = re.search(r"std (\S+) → (\S+), max − min (\S+) → (\S+)\.", text)
    assert match, text
    got = [number(v) for v in match.groups()]
    for g, want in zip(got, (std, std / 4, span, span / 4)):
        assert abs(g - want) <= TOL
    # the one-line preview of saturation: mean largest weight without vs with scaling
    unscaled = torch.softmax(s, dim=-1).max(dim=-1).values.mean().item()
    scaled = torch.softmax(s / 4, dim=-1).max(dim=-1).values.mean().item()
    assert f"average {unscaled:.4f} instead of {scaled:.4f}" in text
    assert unscaled > scaled


def test_causal_mask_puts_minus_infinity_above_the_diagonal() -> None:
    expl = explain(run_of("I saw a saw today", causal=True))
    masked = grid(expl, 6, "Z masked")
    weights = grid(expl, 7, "weights")
    for i, (zrow, wrow) in enumerate(zip(masked.rows, weights.rows)):
        for j in range(5):
            assert (zrow[1 + j] == "-inf") == (j > i)
            assert (wrow[1 + j] == "0") == (j > i)
    assert "exp(−inf) = 0" in text_of(expl, 6)


# -- following one query ----------------------------------------------------------


def test_query_walkthrough_adds_up_term_by_term() -> None:
    run = run_of()
    r = reference(run)["heads"][0]
    expl = explain(run, query=1)
    q, k, v, s, z, w = r["q"], r["k"], r["v"], r["s"], r["z"], r["w"]
    # step 4: the products Q[1, d] K[j, d], and their sum S[1, j]
    products = grids(expl, 4, "key")[0]
    assert products.header[-1] == "Σ = S[1, j]"
    for j, row in enumerate(products.rows):
        terms = [number(c) for c in row[1:-1]]
        assert len(terms) == 16
        for d, term in enumerate(terms):
            assert abs(term - (q[1, d] * k[j, d]).item()) <= TOL
        assert abs(number(row[-1]) - s[1, j].item()) <= TOL
        assert abs(sum(terms) - number(row[-1])) <= 16 * TOL
    # step 5: S[1, j] × 0.25 = Z[1, j]
    scaled = grids(expl, 5, "key")[0]
    for j, row in enumerate(scaled.rows):
        assert row[2] == "× 0.25"
        assert abs(number(row[3]) - z[1, j].item()) <= TOL
    # step 7: exp(z - m) / Σ = weight
    soft = grids(expl, 7, "key")[0]
    m = z[1].max()
    e = torch.exp(z[1] - m)
    for j, row in enumerate(soft.rows):
        assert abs(number(row[3]) - e[j].item()) <= TOL
        assert abs(number(row[4]) - (e[j] / e.sum()).item()) <= TOL
    assert f"Σ_j exp(Z[1, j] − m) = {e.sum().item():.4f}" in text_of(expl, 7)
    # step 8: weight × V[j], summed = context[1]
    mix = grids(expl, 8, "key")[0]
    for j in range(6):
        row = mix.rows[j]
        assert abs(number(row[1]) - w[1, j].item()) <= TOL
        for d in range(16):
            assert abs(number(row[2 + d]) - (w[1, j] * v[j, d]).item()) <= TOL
    total = mix.rows[-1]
    assert total[0] == "Σ = context[1]" and total[1] == "1.0000"
    for d in range(16):
        assert abs(number(total[2 + d]) - r["ctx"][1, d].item()) <= TOL


@pytest.mark.parametrize("spec", ["is", "1", "  is "])
def test_query_by_text_or_position(spec: str) -> None:
    result = cli(LIFE, "-t", "words", "--query", spec)
    assert result.exit_code == 0, result.stderr
    assert "Following query 1 'is'" in result.stdout
    assert "Σ = S[1, j]" in result.stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (["I saw a saw", "--query", "saw"], "matches 2 tokens"),
        (["I saw a saw", "--query", "nope"], "is not a token"),
        (["I saw a saw", "--query", "9"], "out of range"),
        (["I saw a saw", "--heads", "2", "--head", "2"], "--head 2 is out of range"),
    ],
)
def test_bad_query_or_head_is_a_usage_error(args: list[str], message: str) -> None:
    result = cli(*args, "-t", "words")
    assert result.exit_code == 2
    assert message in result.stderr
    assert result.stderr.count("\n") == 1 and result.stdout == ""


def test_repeated_token_by_label() -> None:
    result = cli("I saw a saw", "-t", "words", "--query", "saw#3", "--causal")
    assert result.exit_code == 0, result.stderr
    assert "Query 3 'saw#3' is the last token" in result.stdout


def test_head_option_shows_that_head() -> None:
    run = run_of(heads=2)
    expl = explain(run, head=1)
    assert grid(expl, 4, "S, raw scores").title.startswith("S, raw scores (head 1)")
    assert_grid(grid(expl, 4, "S, raw scores"), reference(run)["heads"][1]["s"])
    assert "shown for head 1 of 2" in "\n".join(b.text for b in expl.intro if isinstance(b, Line))


# -- the scaling ablation -----------------------------------------------------------


def _ablation(expl: Explanation) -> Grid | None:
    found = grids(expl, 7, "query")
    return found[0] if found else None


def test_no_ablation_table_for_the_standard_scaling() -> None:
    assert _ablation(explain(run_of())) is None
    assert "--no-scale shows the whole comparison" in text_of(explain(run_of()), 5)


def test_no_scale_ablation_shows_saturation() -> None:
    run = run_of(scale=False)
    expl = explain(run)
    table = _ablation(expl)
    assert table is not None
    assert "A: no scaling = this run, softmax(S / 1); B: 1/√16, softmax(S / 4)" in text_of(expl, 7)
    s = reference(run)["heads"][0]["s"]
    for column, divisor in ((1, 1.0), (3, 4.0)):
        wts = torch.softmax(s / divisor, dim=-1)
        mx = wts.max(dim=-1).values
        bits = [-math.fsum(w * math.log2(w) for w in row if w > 0) for row in wts.tolist()]
        for i in range(6):
            assert abs(number(table.rows[i][column]) - mx[i].item()) <= TOL
            assert abs(number(table.rows[i][column + 1]) - bits[i]) <= TOL
        assert abs(number(table.rows[-1][column]) - mx.mean().item()) <= TOL
        assert abs(number(table.rows[-1][column + 1]) - sum(bits) / len(bits)) <= TOL
    mean = table.rows[-1]
    assert mean[0] == "mean"
    assert number(mean[1]) > number(mean[3])  # unscaled: sharper rows
    assert number(mean[2]) < number(mean[4])  # and lower entropy


@pytest.mark.parametrize("query", [None, 4])
def test_entropy_is_the_one_run_prints(query: int | None) -> None:
    """explain takes its entropy from attn_cli.analysis.stats, as `run` does: the same
    float64 number (12 digits tell it from a float32 log2), printed the same way."""
    from attn_cli.analysis.stats import attention_stats

    run = run_of("I saw a saw and a saw", heads=2, causal=True)
    summary = grids(explain(run, query=query, precision=12), 9, "head")[0]
    for row, stats in zip(summary.rows, attention_stats(run.layers[0].weights, mask=causal_mask(run.layers[0].weights.shape[-1])), strict=True):
        if query is None:
            assert row[2] == f"{stats.mean_entropy_bits:.12f}"
        else:
            assert row[1] == run.tokens.labels[stats.most_attended[query]]
            assert row[3] == f"{stats.entropy_bits[query]:.12f}"
    if query is not None:  # and `attn-cli run --query` prints those very digits
        argv = ["I saw a saw and a saw", "-t", "words", "--heads", "2", "--causal", "--query", str(query), "--precision", "12"]
        result = invoking.invoke("run", *argv)
        assert re.findall(r"entropy (\d+\.\d+) bits", result.stdout) == [row[3] for row in summary.rows]
        explained = cli(*argv, "--format", "text")
        assert explained.exit_code == 0, explained.stderr
        assert all(f" {row[3]}" in explained.stdout for row in summary.rows)


def test_ablation_row_for_this_run_matches_run_stats() -> None:
    """The ablation's "this run" columns are the run's own weights' statistics."""
    from attn_cli.analysis.stats import attention_stats

    run = run_of(scale=False, causal=True)
    table = _ablation(explain(run, precision=12))
    assert table is not None
    (stats,) = attention_stats(run.layers[0].weights, mask=causal_mask(run.layers[0].weights.shape[-1]))
    for i in range(len(run.tokens)):
        assert table.rows[i][1:3] == (f"{stats.top_weight[i]:.12f}", f"{stats.entropy_bits[i]:.12f}")  # A = this run
    assert table.rows[-1][2] == f"{stats.mean_entropy_bits:.12f}"


def test_temperature_ablation_has_three_variants() -> None:
    expl = explain(run_of(temperature=0.5, causal=True))
    table = _ablation(expl)
    assert table is not None and len(table.header) == 7
    assert "C: this run (1/(√16·0.5)), softmax(S / 2)" in text_of(expl, 7)
    assert "factor = 1/(√16 × 0.5) = 0.5" in text_of(expl, 5)
    assert table.rows[0][1:] == ("1.0000", "0.0000") * 3  # the first causal query sees only itself


# -- long texts, multi-head, dropout, positions, embeddings -----------------------------------


def test_long_texts_are_summarised_and_say_so() -> None:
    words = "the cat sat on a mat and then it ran far away from the dog".split()
    text = " ".join(words[i % len(words)] for i in range(300))
    run = run_of(text, d_model=32, causal=True)
    expl = explain(run, query=200)
    out = to_text(expl)
    assert "Summarised (T = 300 > 12 tokens, 32 > 16 dimensions)" in out
    assert "Summarised (T = 300 > 12 tokens)" in out
    assert "the 6 this query weights most" in out
    for s in expl.steps:
        for b in s.blocks:
            if isinstance(b, Grid) and b.title != "Tokens":
                assert len(b.rows) <= CORNER + 3, b.title  # corner, a ⋮ row, the query row, a total
                assert len(b.header) <= 2 * FULL_T, b.title
    assert len(out.splitlines()) < 400
    weights = grid(expl, 7, "weights")
    assert weights.rows[-1][0] == run.tokens.labels[200] and weights.rows[-2][0] == "⋮"
    assert abs(number(weights.rows[-1][1]) - run.layers[0].weights[0, 200, 0].item()) <= TOL


def test_multihead_step_nine_splits_concatenates_and_projects() -> None:
    run = run_of("I saw a saw", heads=2, out_proj=True, causal=True)
    expl = explain(run)
    text = text_of(expl, 9)
    assert "head h taking columns h·8 … h·8+7" in text
    assert "concat = [context_0 | context_1]   2 × (4 × 8) → 4 × 16" in text
    assert "output = concat W_oᵀ + b_o   (4 × 16) · (16 × 16) → 4 × 16" in text
    summary = grids(expl, 9, "head")[0]
    assert [row[0] for row in summary.rows] == ["0", "1"]
    weights = run.layers[0].weights
    for h, row in enumerate(summary.rows):
        assert abs(number(row[1]) - weights[h].max(dim=-1).values.mean().item()) <= TOL
    out_proj = run.layers[0].projections.out
    assert_grid(grid(expl, 9, "output"), run.layers[0].concat @ out_proj.weight.T + out_proj.bias)


def test_dropout_shows_the_dropped_weights_that_mix_the_values() -> None:
    run = run_of(dropout=0.5)
    expl = explain(run)
    assert_grid(grid(expl, 8, "dropped weights"), run.layers[0].dropped_weights[0])
    text = text_of(expl, 8)
    assert "1/(1 − 0.5) = 2" in text and "Σ_j dropped[0, j] V[j, 0]" in text
    assert_grid(grid(expl, 8, "context"), run.layers[0].dropped_weights[0] @ run.layers[0].values[0])


def test_positional_encoding_is_shown_and_added() -> None:
    run = run_of("I saw a saw", positional=Positional.sinusoidal)
    expl = explain(run)
    T, D = 4, 16
    pe = torch.tensor(
        [[math.sin(p / 10000 ** (i / D)) if i % 2 == 0 else math.cos(p / 10000 ** ((i - 1) / D)) for i in range(D)] for p in range(T)]
    )
    assert_grid(grid(expl, 2, "PE"), pe)
    torch.manual_seed(123)
    table = torch.nn.Embedding(3, D)(torch.tensor([0, 2, 1, 2])).detach()
    assert_grid(grid(expl, 2, "E[ids]"), table)
    assert_grid(grid(expl, 2, "X"), table + pe)
    assert "the positional encoding is what tells them apart" in text_of(expl, 1)


def test_user_embeddings_are_named_as_the_source(tmp_path: Path) -> None:
    path = tmp_path / "vectors.json"
    path.write_text(json.dumps([[1, 0], [0, 1], [1, 1]]))
    result = cli("one two three", "-t", "words", "--embeddings", str(path))
    assert result.exit_code == 0, result.stderr
    assert f"X = the rows of {path}, one per token, as given; d_model = the file's width = 2." in result.stdout
    assert "nn.Embedding" not in result.stdout
    assert "X from your file vectors.json; W_q, W_k, W_v drawn from the seed" in result.stdout
    bare = cli("one two three", "-t", "words", "--embeddings", str(path), "--no-projections")
    assert bare.exit_code == 0, bare.stderr
    assert "no random weights at all" in bare.stdout and "random (drawn from the seed)" not in bare.stdout


# -- output --------------------------------------------------------------------------


def test_plain_text_off_a_terminal_and_rich_panels_on_request() -> None:
    plain = cli(LIFE, "-t", "words")
    assert plain.exit_code == 0 and "╭" not in plain.stdout and "1. Tokenize" in plain.stdout
    rich = cli(LIFE, "-t", "words", "--format", "rich")
    assert rich.exit_code == 0 and "╭" in rich.stdout and "1 · Tokenize" in rich.stdout


@pytest.mark.parametrize("columns", [60, 80, 100])
def test_rich_output_fits_the_terminal_and_cuts_no_number(columns: int) -> None:
    """A grid wider than the terminal goes into stacked blocks, each with the row
    labels: every dimension is still there (at 100 columns it once lost six of 16)."""
    result = cli(LIFE, "-t", "words", "--format", "rich", "--query", "is", env={"COLUMNS": str(columns)})
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert max(len(line) for line in lines) <= columns
    assert "cut to fit" not in result.stdout
    assert "X = E[ids]   6 × 16 (columns 0 to" in result.stdout and "columns" in result.stdout
    assert "Σ = S[1, j]" in result.stdout  # the total column is there too
    text = cli(LIFE, "-t", "words", "--format", "text", "--query", "is").stdout
    numbers = lambda out: sorted(re.findall(r"-?\d+\.\d{4}", out))  # noqa: E731
    assert numbers(result.stdout) == numbers(text)  # the same numbers as the plain text, none lost
    wide = cli(LIFE, "-t", "words", "--format", "rich", env={"COLUMNS": "220"})
    assert "(columns" not in wide.stdout


def broken_titles(shown: str) -> list[str]:
    """The lines of a stacked block's title, "NAME   T × D (columns A to B; K of N)", that do
    not hold it whole."""
    whole = re.compile(r"│ \S.*   \d+ × \d+ \(columns? \d+( to \d+)?; \d+ of \d+\) +│$")
    return [line for line in shown.splitlines() if "(column" in line and not whole.search(line)]


@pytest.mark.parametrize("columns", [80, 120])
def test_a_blocks_title_is_one_line_over_its_table(columns: int, monkeypatch: pytest.MonkeyPatch) -> None:
    from attn_cli.render.explain.rich import _FitGrid

    result = cli("I saw a saw", "-t", "words", "--format", "rich", env={"COLUMNS": str(columns)})
    assert result.stdout.count("(column") >= 6 and broken_titles(result.stdout) == []
    assert "X = E[ids]   4 × 16 (column" in result.stdout
    # the control: the title as the table's own, which rich wraps to the table's width
    def as_the_tables(title: str, table: Any) -> Any:
        table.title, table.title_justify, table.title_style = title, "left", "bold"
        return table

    monkeypatch.setattr(_FitGrid, "_titled", staticmethod(as_the_tables))
    old = cli("I saw a saw", "-t", "words", "--format", "rich", env={"COLUMNS": str(columns)}).stdout
    assert broken_titles(old) != [] and old.count("(column") == result.stdout.count("(column")


def test_token_text_is_never_read_as_markup() -> None:
    from rich.console import Console

    run = run_of("I saw a saw")
    tokens = dataclasses.replace(run.tokens, texts=("[bold]I[/bold]", "saw", "[red]", "saw"))
    run = dataclasses.replace(run, tokens=tokens)
    console = Console(width=200, record=True, color_system=None, file=open("/dev/null", "w"))
    console.print(to_rich(explain(run)))
    shown = console.export_text()
    assert "[bold]I[/bold]" in shown and "[red]" in shown


def test_output_file_and_lines_batch(tmp_path: Path) -> None:
    target = tmp_path / "explain.txt"
    result = cli("-", "--lines", "-t", "words", "-o", str(target), input="I saw a saw\nHello shiny sun\n")
    assert result.exit_code == 0, result.stderr
    assert result.stdout == ""
    written = target.read_text(encoding="utf-8")
    assert written.count("1. Tokenize") == 2
    assert "for 'I saw a saw'" in written and "for 'Hello shiny sun'" in written
    assert written == cli("-", "--lines", "-t", "words", input="I saw a saw\nHello shiny sun\n").stdout


@pytest.mark.parametrize("style", ["text", "rich"])
def test_control_characters_in_the_text_never_reach_the_terminal(style: str) -> None:
    import unicodedata

    text = "\x1b[31mred\x1b[0m [b]bold[/b] \x07bell \u202eevil red"
    result = cli(text, "-t", "words", "--format", style, "--query", "red")
    assert result.exit_code == 0, result.stderr
    assert not {c for c in result.stdout if unicodedata.category(c) in ("Cc", "Cf") and c != "\n"}
    assert "\\x1b" in result.stdout  # shown escaped, not sent


def test_precision_option() -> None:
    result = cli(LIFE, "-t", "words", "--precision", "2")
    assert "  Life     -1.22   1.00" in result.stdout  # S row 0 to two decimals


# -- traceability: every number on screen follows from the lines before it ---------------


def rounded(g: Grid, skip: int = 1) -> torch.Tensor:
    """A full grid's numbers as shown (rounded), body columns from ``skip``."""
    return torch.tensor([[number(c) for c in row[skip:]] for row in g.rows], dtype=torch.float64)


@pytest.mark.parametrize(
    "options, head",
    [({}, 0), ({"heads": 2}, 1), ({"heads": 2, "qkv_bias": True}, 0), ({"heads": 4, "qkv_bias": True, "d_model": 16}, 3)],
    ids=["one-head", "head-1-of-2", "bias", "head-3-of-4-bias"],
)
def test_step_three_prints_the_heads_weights_and_q_follows_from_them(options: dict[str, Any], head: int) -> None:
    run = run_of(**options)
    c, proj = run.model.config, run.layers[0].projections
    expl = explain(run, head=head)
    x = rounded(grid(expl, 2, "X"))
    for name, linear, d in (("q", proj.query, c.d_k), ("k", proj.key, c.d_k), ("v", proj.value, c.d_v)):
        lo = head * d
        g = grid(expl, 3, f"W_{name}")
        assert g.title.startswith(f"W_{name}" + (f" rows {lo}…{lo + d - 1} (head {head})" if c.heads > 1 else "   "))
        assert f"{d} × {c.d_model}" in g.title
        assert [row[0] for row in g.rows] == [str(lo + r) for r in range(d)]  # rows named as in the full matrix
        want = linear.weight[lo : lo + d]  # (d, D)
        if c.qkv_bias:
            assert g.header[-1] == f"b_{name}"
            want = torch.cat([want, linear.bias[lo : lo + d].unsqueeze(1)], dim=1)  # (d, D + 1)
        else:
            assert g.header[-1] == str(c.d_model - 1)
        assert_grid(g, want)
        # recompute the head's Q (K, V) from the rounded X and W on screen: it is the grid printed next
        w = rounded(g)
        product = x @ w[:, : c.d_model].T + (w[:, -1] if c.qkv_bias else 0)  # (T, D) @ (D, d) -> (T, d)
        shown = rounded(grid(expl, 3, name.upper()))
        assert (product - shown).abs().max().item() < 3e-3
    text = text_of(expl, 3)
    assert ("The biases b_q, b_k, b_v (--qkv-bias) are the last column" in text) == c.qkv_bias
    if c.heads > 1 and head:
        assert f"column d of its Q is made by row {head * c.d_k} + d of W_q" in text


def test_naive_attention_prints_no_weights() -> None:
    expl = explain(run_of(projections=False, heads=2))
    assert not [b for s in expl.steps for b in s.blocks if isinstance(b, Grid) and b.title.startswith("W_")]


def test_wide_weights_are_summarised_and_say_so() -> None:
    run = run_of(d_model=32, qkv_bias=True)
    expl = explain(run)
    g = grid(expl, 3, "W_q")
    assert g.title == "W_q   32 × 32"
    assert g.header == ("row", "0", "1", "2", "3", "4", "5", "…", "b_q")
    assert [row[0] for row in g.rows] == ["0", "1", "2", "3", "4", "5", "⋮"]
    w, b = run.layers[0].projections.query.weight, run.layers[0].projections.query.bias
    for r in range(CORNER):
        assert [number(v) for v in g.rows[r][1:7]] == pytest.approx(w[r, :6].tolist(), abs=TOL)
        assert g.rows[r][7] == "…" and abs(number(g.rows[r][8]) - b[r].item()) <= TOL
    text = text_of(expl, 3)
    assert "Summarised (32 > 16 dimensions): showing rows 0–5 and columns 0–5. W_q over all 1024 cells" in text
    assert f"max {w.max().item():.4f}" in text and "b_q over all 32 cells" in text


def test_step_nine_prints_w_o_and_the_output_follows_from_it() -> None:
    run = run_of(heads=2, out_proj=True)
    out = run.layers[0].projections.out
    expl = explain(run)
    g = grid(expl, 9, "W_o")
    assert g.title == "W_o   16 × 16" and g.header[-1] == "b_o"
    assert_grid(g, torch.cat([out.weight, out.bias.unsqueeze(1)], dim=1))
    w = rounded(g)
    recomputed = rounded(grid(expl, 9, "concat")) @ w[:, :16].T + w[:, 16]  # (T, 16) @ (16, 16) + (16,)
    assert (recomputed - rounded(grid(expl, 9, "output"))).abs().max().item() < 3e-3
    assert "row i of concat against row d of W_o, plus b_o[d]" in text_of(expl, 9)
    # one head with --out-proj: W_o too; without --out-proj: none
    single = run_of(out_proj=True)
    out = single.layers[0].projections.out
    assert_grid(grid(explain(single), 9, "W_o"), torch.cat([out.weight, out.bias.unsqueeze(1)], dim=1))
    assert not [b for b in step(explain(run_of(heads=2)), 9).blocks if isinstance(b, Grid) and b.title.startswith("W_o")]


@pytest.mark.parametrize("head", [0, 2])
def test_step_nine_names_the_concat_columns_of_every_head(head: int) -> None:
    run = run_of("I saw a saw", heads=4)
    expl = explain(run, head=head)
    table = grids(expl, 9, "head")[1]
    assert table.header == ("head", "Q, K columns", "V = concat columns", "its steps 4–8")
    assert table.rows == tuple(
        (str(h), f"{4 * h}…{4 * h + 3}", f"{4 * h}…{4 * h + 3}", "step 8 above" if h == head else f"--head {h}") for h in range(4)
    )
    # concat fits (16 columns): shown whole, no per-head blocks
    assert_grid(grid(expl, 9, "concat"), run.layers[0].concat)
    assert not [b for b in step(expl, 9).blocks if isinstance(b, Grid) and b.title.startswith("context_")]


def test_wide_concat_shows_each_heads_block() -> None:
    run = run_of(d_model=32, heads=2)
    expl = explain(run, head=1)
    concat = grid(expl, 9, "concat")
    assert concat.header[-1] == "…"  # the corner alone would hide head 1
    assert "concat is 32 columns wide, too wide to show whole, so here is each head's block; head 1's is the context of step 8." in text_of(expl, 9)
    for h in range(2):
        g = grid(expl, 9, f"context_{h} = concat columns {16 * h}…{16 * h + 15}")
        assert g.header[1:] == tuple(str(16 * h + d) for d in range(16))
        assert_grid(g, run.layers[0].context[h])
        assert_grid(g, run.layers[0].concat[:, 16 * h : 16 * (h + 1)])
    assert_grid(grid(expl, 8, "context (head 1)"), run.layers[0].context[1])


def test_many_heads_cap_the_blocks_and_say_so() -> None:
    run = run_of("I saw a saw", d_model=40, heads=10)
    expl = explain(run)
    blocks = [b for b in step(expl, 9).blocks if isinstance(b, Grid) and b.title.startswith("context_")]
    assert len(blocks) == 8
    assert "(the first 8 of 10 heads)" in text_of(expl, 9)
    assert len(grids(expl, 9, "head")[1].rows) == 10  # the column table still names every head


def test_long_text_shows_the_key_rows_its_query_tables_use() -> None:
    words = ["the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "while", "seven", "small", "birds", "sing"]
    text = " ".join(f"{words[i % len(words)]}{i}" for i in range(60))
    run = run_of(text)
    one = run.layers[0].head(0)
    expl = explain(run, query=40)
    keys = sorted(torch.topk(one.weights[40], CORNER).indices.tolist())
    assert not set(keys) <= set(range(CORNER)) | {40}  # the corner alone would not hold them
    for name, m in (("K", one.keys), ("V", one.values)):
        g = grid(expl, 3, f"{name}, the rows query 40 uses")
        assert g.title.endswith(f"{CORNER} of 60 × 16")
        assert [row[:2] for row in g.rows] == [(run.tokens.labels[j], str(j)) for j in keys]
        assert_grid(dataclasses.replace(g, rows=tuple((r[0], *r[2:]) for r in g.rows)), m[keys])
    assert f"(positions {', '.join(map(str, keys))})" in text_of(expl, 3)
    # every key the step 4 and step 8 tables list is one of those rows
    listed = {row[0] for row in grids(expl, 4, "key")[0].rows} | {row[0] for row in grids(expl, 8, "key")[0].rows[:-1]}
    assert listed == {run.tokens.labels[j] for j in keys}
    # and step 4's products are Q[40] (shown in step 3) times those K rows
    q_row = next(r for r in grid(expl, 3, "Q").rows if r[0] == run.tokens.labels[40])
    k_rows = grid(expl, 3, "K, the rows query 40 uses").rows
    for prod, k in zip(grids(expl, 4, "key")[0].rows, k_rows, strict=True):
        for d in range(16):
            assert abs(number(prod[1 + d]) - number(q_row[1 + d]) * number(k[2 + d])) <= 3 * TOL
    # short texts and runs without --query need no extra rows
    assert not [b for b in step(explain(run), 3).blocks if isinstance(b, Grid) and "rows query" in b.title]
    assert not [b for b in step(explain(run_of(), query=4), 3).blocks if isinstance(b, Grid) and "rows query" in b.title]


@pytest.mark.parametrize("query, second_word", [(1, True), (0, False), (4, False)])
def test_the_second_word_phrase_only_for_position_one(query: int, second_word: bool) -> None:
    intro = "\n".join(b.text for b in explain(run_of(), query=query).intro if isinstance(b, Line))
    assert ("as the \"Life is short\" walk-through does with its second word" in intro) == second_word
    assert f"Following query {query} " in intro
    if not second_word:
        assert "through every step: its row of each matrix, and its sums term by term." in intro
    out = cli(LIFE, "-t", "words", "--query", str(query)).stdout
    assert ("with its second word" in out) == second_word


def test_a_walkthrough_that_cannot_fit_is_refused_before_it_is_built(monkeypatch: pytest.MonkeyPatch) -> None:
    """explain of 10,000 tokens once took 7.8 GB; now the estimate is checked first."""
    from attn_cli.runtime import budget
    from attn_cli.runtime.errors import TooLargeError
    from attn_cli.render import explain as explain_module

    run = run_of("I saw a saw")
    assert explain_module.explain_bytes(10_000) > 7 * 2**30  # what was measured
    monkeypatch.setattr(budget, "available_bytes", lambda: explain_module.explain_bytes(len(run.tokens)))  # 80% usable
    with pytest.raises(TooLargeError, match="explain needs about .* shorter text"):
        explain(run)
    monkeypatch.setattr(budget, "available_bytes", lambda: 2 * explain_module.explain_bytes(len(run.tokens)))
    assert explain(run).steps
