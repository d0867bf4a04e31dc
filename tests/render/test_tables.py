"""The human view (rich tables) and the statistics behind it, fed hand-built runs."""

from __future__ import annotations

import dataclasses
import io
import json
import math
import re
from pathlib import Path

import pytest
import torch
from rich.console import Console
from rich.text import Text

from attn_cli.analysis.stats import attention_stats, effective_tokens, entropy_bits, head_masses
from attn_cli.records.tokens import Tokens
from attn_cli.records.trace import Trace
from attn_cli.render.terminal import cells, fit, matrices
from attn_cli.render.terminal import header as heading
from attn_cli.render.terminal.cells import FittedTable, View, bar, fmt
from attn_cli.render.terminal.tables import human_view, parse_show
from attn_cli.sources.attend import causal_mask
from attn_cli.sources.toy.config import Config
from attn_cli.sources.toy.model import self_attention
from attn_cli.sources.toy.source import toy_info

WIDTH = 120


def make_run(texts: tuple[str, ...], *, d_model: int = 8, weights: list[list[float]] | None = None, **options) -> Trace:
    """A run over ``texts`` with seeded random X; ``weights`` (one head) replaces the softmax."""
    labels_seen: dict[str, int] = {}
    ids = tuple(labels_seen.setdefault(t, len(labels_seen)) for t in texts)
    tokens = Tokens(ids, texts, len(labels_seen), "words")
    config = Config(tokenizer="words", **options).resolved(d_model)
    generator = torch.Generator().manual_seed(7)
    x = torch.randn(len(texts), d_model, generator=generator)  # (T, D)
    result = self_attention(x, config)
    if weights is not None:
        result = dataclasses.replace(result, weights=torch.tensor([weights]))  # (1, T, T)
    return Trace(" ".join(texts), tokens, toy_info(config, tokens.vocab_size), (result,))


def render(renderable, width: int = WIDTH, color: bool = False) -> str:
    console = Console(
        file=io.StringIO(), width=width, color_system="truecolor" if color else None, force_terminal=color,
        no_color=False if color else None, highlight=False, markup=False, emoji=False,
    )
    console.print(renderable)
    return console.file.getvalue()


def section(text: str, title: str) -> list[list[str]]:
    """The body rows (split on runs of spaces) of the table under the line starting with ``title``."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(title))
    body = []
    for line in lines[start + 4 :]:  # title, blank top edge, header, rule
        if not line.strip():
            break
        body.append(line.split())
    return body


SAW = ("I", "saw", "a", "saw")


# -- statistics -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("row", "bits"),
    [
        ([1.0, 0.0, 0.0, 0.0], 0.0),
        ([0.25, 0.25, 0.25, 0.25], 2.0),
        ([0.5, 0.25, 0.25, 0.0], 1.5),
        ([0.5, 0.5], 1.0),
        ([1.0], 0.0),
    ],
)
def test_entropy_by_hand(row: list[float], bits: float) -> None:
    got = entropy_bits(torch.tensor(row)).item()
    assert got == pytest.approx(bits, abs=1e-12)
    assert math.copysign(1.0, got) == 1.0  # never -0.0
    assert effective_tokens(torch.tensor(got)).item() == pytest.approx(2**bits)


def test_entropy_matches_torch_categorical() -> None:
    generator = torch.Generator().manual_seed(3)
    weights = torch.softmax(torch.randn(2, 5, 5, generator=generator), dim=-1)  # (H, T, T)
    reference = torch.distributions.Categorical(probs=weights.double()).entropy() / math.log(2)  # (H, T) bits
    torch.testing.assert_close(entropy_bits(weights), reference)
    stats = attention_stats(weights)
    assert stats[1].entropy_bits == pytest.approx(reference[1].tolist())
    assert stats[1].effective_tokens == pytest.approx([2**b for b in reference[1].tolist()])


def test_masses_argmax_and_visible_keys_by_hand() -> None:
    weights = torch.tensor(
        [
            [1.0, 0.0, 0.0],
            [0.6, 0.4, 0.0],
            [0.3, 0.3, 0.4],
        ]
    )
    self_mass, previous, first = head_masses(weights)
    assert self_mass == pytest.approx((1.0 + 0.4 + 0.4) / 3)
    assert previous == pytest.approx((0.6 + 0.3) / 2)  # w[1,0], w[2,1]
    assert first == pytest.approx((0.6 + 0.3) / 2)  # w[1,0], w[2,0]: row 0 is not counted
    (stats,) = attention_stats(weights[None], mask=causal_mask(weights[None].shape[-1]))
    assert stats.most_attended == [0, 0, 2]
    assert stats.top_weight == pytest.approx([1.0, 0.6, 0.4])
    assert stats.visible_keys == [1, 2, 3]
    (ties,) = attention_stats(torch.tensor([[[0.5, 0.5], [0.5, 0.5]]]))
    assert ties.most_attended == [0, 0]  # the first of equal maxima
    assert ties.visible_keys == [2, 2]


def test_one_token_has_no_previous_or_first_mass() -> None:
    assert head_masses(torch.tensor([[1.0]])) == (1.0, None, None)


# -- small pieces -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "precision", "text"),
    [(0.123456, 4, "0.1235"), (-0.00001, 4, "0.0000"), (-0.5, 2, "-0.50"), (3.0, 0, "3"), (-0.2, 0, "0")],
)
def test_fmt(value: float, precision: int, text: str) -> None:
    assert fmt(value, precision) == text


def test_bar_length_is_proportional() -> None:
    assert bar(1.0) == "█" * cells.BAR_WIDTH
    assert bar(0.0) == ""
    assert bar(0.5) == "█" * (cells.BAR_WIDTH // 2)
    assert bar(1 / 48) == "▌"  # half a character at width 24


def test_weight_colours_run_from_dark_to_bright() -> None:
    low, high = cells.weight_style(0.0), cells.weight_style(1.0)
    assert low.bgcolor.get_truecolor() == (68, 1, 84)
    assert high.bgcolor.get_truecolor() == (253, 231, 37)
    assert low.color.name == "white" and high.color.name == "black"
    sixteen = [cells.weight_style(w / 10, "standard").bgcolor for w in range(11)]
    assert all(c.is_system_defined for c in sixteen) and len(set(sixteen)) == 6  # each sixth its own colour


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        (None, None),
        (["weights"], {"weights"}),
        (["scores,scaled", "weights"], {"scores", "scaled", "weights"}),
        ([" Tokens , STATS "], {"tokens", "stats"}),
        (["all"], set(cells.SHOW_CHOICES) - {"flow"}),  # every table but the flow, which is asked for by name
    ],
)
def test_parse_show(values, expected) -> None:
    assert parse_show(values) == (None if expected is None else frozenset(expected))


@pytest.mark.parametrize(("values", "message"), [(["weight"], "unknown table 'weight'"), ([","], "name at least one")])
def test_parse_show_errors(values, message) -> None:
    with pytest.raises(ValueError, match=message):
        parse_show(values)


# -- fitting the width ----------------------------------------------------------------


def fitted(n_cols: int, cell: str = "-0.1234", label: str = "token") -> FittedTable:
    cols = [f"k{j}" for j in range(n_cols)]
    cells = [[Text(cell) for _ in cols] for _ in range(3)]
    return FittedTable(Text("T"), "query \\ key", [label] * 3, cols, cells, what="keys", hint="--query N")


@pytest.mark.parametrize("width", [40, 60, 80, 120])
@pytest.mark.parametrize("n_cols", [1, 3, 9, 40])
def test_tables_never_exceed_the_width(width: int, n_cols: int) -> None:
    table = fitted(n_cols)
    out = render(table, width=width)
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= width
    chosen = table.columns_that_fit(width)
    header = lines[2].split()  # title, top edge, header, rule, 3 rows
    if None in chosen:
        assert chosen[-2:] == [None, n_cols - 1] and chosen[:-2] == list(range(len(chosen) - 2))
        assert header[-2:] == ["…", f"k{n_cols - 1}"]
        note = " ".join(out.split())
        assert f"{len(chosen) - 1} of {n_cols} keys shown" in note
        assert "--query N" in note and "--format csv" in note
        # one more column would not have fitted: the table uses the room it has
        body_width = max(len(line) for line in lines[1:7])
        assert body_width + len("-0.1234") + 3 > width
    else:
        assert header[-n_cols:] == [f"k{j}" for j in range(n_cols)]
        assert "shown" not in out
    assert [line.split()[0] for line in lines[4:7]] == ["token"] * 3
    assert lines[7].strip() == ""  # no wrapped rows: the body is exactly the three rows


def test_long_labels_are_cut_with_an_ellipsis() -> None:
    out = render(fitted(2, label="x" * 50))
    assert "x" * (cells.LABEL_WIDTH - 1) + "…" in out and "x" * cells.LABEL_WIDTH not in out


# -- the header and the tokens ---------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "factor"),
    [
        ({}, "scale factor 0.353553 = 1/sqrt(8)"),
        ({"temperature": 2.0}, "scale factor 0.176777 = 1/(sqrt(8) * 2)"),
        ({"scale": False}, "scale factor 1 (--no-scale)"),
        ({"scale": False, "temperature": 0.5}, "scale factor 2 = 1/0.5"),
    ],
)
def test_header_shows_the_scale_factor(options: dict, factor: str) -> None:
    out = render(human_view(make_run(SAW, **options), View(show=frozenset())))
    assert factor in " ".join(out.split())
    for pair in ("tokenizer words", "tokens 4", "seed 123", "d_model 8", "heads 1", "d_k 8", "d_v 8", "causal no", "init linear"):
        assert pair in out
    assert "Random weights drawn from the seed, not a trained model's" in out


@pytest.mark.parametrize(
    ("options", "said", "untrue"),
    [
        ({}, "Random weights drawn from the seed, not a trained model's", ()),
        ({"embeddings": Path("vectors.npy")}, "X from your file vectors.npy; W_q, W_k, W_v drawn from the seed", ("Random weights",)),
        ({"projections": False}, "Seeded random embeddings (not a trained model's), no projections", ("Random weights", "W_q")),
        ({"projections": False, "out_proj": True}, "no projections (Q = K = V = X), W_o drawn from the seed too", ("W_q",)),
        ({"embeddings": Path("vectors.npy"), "projections": False}, "no random weights at all", ("seed,", "drawn", "Random")),
        ({"embeddings": Path("vectors.npy"), "projections": False, "out_proj": True}, "only W_o is drawn from the seed", ("W_q", "Random")),
    ],
)
def test_header_says_where_the_numbers_come_from(options: dict, said: str, untrue: tuple[str, ...]) -> None:
    pairs, reminder = heading.config_header(make_run(SAW, **options)).renderables
    assert said in reminder.plain
    for words in untrue:
        assert words not in reminder.plain, words


def test_header_wraps_between_pairs_not_inside_them() -> None:
    out = render(human_view(make_run(SAW, causal=True), View(show=frozenset())), width=40)
    header = out.splitlines()[1:8]
    assert all(len(line) <= 40 for line in header)
    for pair in ("scale factor 0.353553 = 1/sqrt(8)", "embeddings nn.Embedding(3, 8)", "causal yes", "tokenizer words"):
        assert any(pair in line for line in header), pair


def test_tokens_table_makes_spaces_visible_and_labels_repeats() -> None:
    out = render(heading.tokens_table(make_run(("I", " saw", " a", " saw", "\n"))))
    rows = section(out, "Tokens")
    assert rows == [["0", "0", "I", "I"], ["1", "1", "␣saw", "␣saw#1"], ["2", "2", "␣a", "␣a"], ["3", "1", "␣saw", "␣saw#3"], ["4", "3", "↵", "↵"]]
    assert "␣ is a space" in out and "use the label with --query/--key" in out
    plain = render(heading.tokens_table(make_run(("one", "two"))))
    assert "label" not in plain and "␣ is a space" not in plain


def test_pieces_of_a_character_get_their_bytes_and_one_note() -> None:
    run = make_run(("\\xe7", "\\x8c", "\\xab", " sat", "\\xe7"))
    partial = ("e7", "8c", "ab", "", "")  # the last reads \xe7 but is that text: a backslash, x, e, 7
    run = dataclasses.replace(run, tokens=dataclasses.replace(run.tokens, partial=partial))
    out = render(heading.tokens_table(run))
    rows = section(out, "Tokens")
    assert [row[-1] for row in rows] == ["e7", "8c", "ab", "␣sat", "\\xe7#4"]  # the text \xe7 has no bytes cell
    assert out.count("of a character the tokenizer split over several tokens") == 1
    assert "\\xe7: one byte of a character" in out
    whole = render(heading.tokens_table(make_run(("\\xe7", "sat"))))
    assert "bytes" not in whole and "of a character" not in whole


def test_token_text_is_never_markup() -> None:
    run = make_run(("[b]", "[/]", "[red]x"))
    out = render(human_view(run, View(show=frozenset(cells.SHOW_CHOICES))), color=True)
    assert "[b]" in out and "[/]" in out and "[red]x" in out


# -- the matrices ------------------------------------------------------------------------


def test_weights_table_shows_the_weights_rounded() -> None:
    run = make_run(SAW, causal=True)
    out = render(human_view(run, View(show=frozenset({"weights"}), precision=3)))
    rows = section(out, "Attention weights")
    weights = run.layers[0].weights[0].tolist()
    for i, row in enumerate(rows):
        assert row[0] == run.tokens.labels[i]
        assert row[1:] == [fmt(w, 3) if j <= i else "·" for j, w in enumerate(weights[i])]
    assert "softmax(Q K^T / sqrt(8)) over each row" in out and "· masked (weight exactly 0)" in out


def test_weights_cells_are_coloured_and_the_row_max_is_bold() -> None:
    run = make_run(SAW, weights=[[0.1, 0.7, 0.1, 0.1]] * 4)
    out = render(matrices.weights_table(run, 0), color=True)
    row = next(line for line in out.splitlines() if line.startswith("  saw#3"))
    cells = re.findall(r"\x1b\[([0-9;]*)m([0-9.]+)\x1b\[0m", row)
    assert [value for _, value in cells] == ["0.1000", "0.7000", "0.1000", "0.1000"]
    assert all("48;2;" in codes for codes, _ in cells)  # a background colour on every weight
    bold = [value for codes, value in cells if codes.split(";")[0] == "1"]
    assert bold == ["0.7000"]
    assert render(matrices.weights_table(run, 0)).count("\x1b") == 0


def weight_codes(run: Trace, color_system: str) -> list[str]:
    """The SGR codes of each weight cell in the table's first row, drawn for ``color_system``."""
    console = Console(file=io.StringIO(), width=WIDTH, color_system=color_system, force_terminal=True, no_color=False, highlight=False)
    console.print(matrices.weights_table(run, 0))
    row = next(line for line in console.file.getvalue().splitlines() if line.startswith("  I "))
    return [codes for codes, _ in re.findall(r"\x1b\[([0-9;]*)m([0-9.]+)\x1b\[0m", row)]


def test_a_16_colour_terminal_tells_low_weights_from_high_ones() -> None:
    # rich's nearest 16-colour match for viridis is the same grey for every weight under 0.35
    run = make_run(SAW, weights=[[0.05, 0.25, 0.45, 0.25]] * 4)
    codes = weight_codes(run, "standard")
    assert len(codes) == 4 and not any("48;2;" in c or "48;5;" in c for c in codes)  # only the 16 colours
    low, mid, high, mid_again = codes
    assert len({low, mid, high}) == 3 and mid == mid_again
    assert codes == weight_codes(run, "windows")
    assert all(c.split(";")[0] != "1" for c in codes[:2])  # the row's largest (0.45) is bold, the others are not
    assert codes[2].startswith("1;4;")


def test_scores_scaled_and_masking() -> None:
    run = make_run(SAW, causal=True, temperature=2.0)
    out = render(human_view(run, View(show=frozenset({"scores", "scaled"}))))
    raw = section(out, "Raw scores")
    scaled = section(out, "Scaled scores")
    scores = run.layers[0].scores[0].tolist()
    divisor = math.sqrt(8) * 2.0
    for i in range(4):
        assert raw[i][1:] == [fmt(v, 4) for v in scores[i]]  # raw scores are shown for every pair
        assert scaled[i][1:] == [fmt(v / divisor, 4) if j <= i else "-inf" for j, v in enumerate(scores[i])]
    assert "Scaled scores  Q K^T / (sqrt(8) * 2), the softmax input" in out
    assert "raw scores x 0.176777 = 1/(sqrt(8) * 2)" in out


def test_qkv_context_embeddings_and_output_tables() -> None:
    run = make_run(SAW, d_model=8, heads=2, out_proj=True)
    out = render(human_view(run, View(show=frozenset(cells.SHOW_CHOICES))))
    for title in (
        "Embeddings X  (4 x d_model 8)",
        "Queries  Q = X W_q^T, head 0 (4 x d_k 4)",
        "Keys  K = X W_k^T, head 1 (4 x d_k 4)",
        "Values  V = X W_v^T, head 1 (4 x d_v 4)",
        "Context vectors  weights @ V, head 1 (4 x d_v 4)",
        "Output  the heads' context vectors side by side, through W_o (4 x heads*d_v 8)",
        "head 0 of 2",
        "head 1 of 2",
        "Heads compared",
    ):
        assert title in out
    assert section(out, "Values  V = X W_v^T, head 1")[2][1:] == [fmt(v, 4) for v in run.layers[0].values[1][2].tolist()]
    assert section(out, "Context vectors  weights @ V, head 1")[3][1:] == [fmt(v, 4) for v in run.layers[0].context[1][3].tolist()]
    assert section(out, "Output")[0][1:] == [fmt(v, 4) for v in run.layers[0].output[0].tolist()]
    assert section(out, "Embeddings X")[1][1:] == [fmt(v, 4) for v in run.layers[0].x[1].tolist()]


def test_output_is_shown_by_default_only_when_it_differs_from_context() -> None:
    assert "Output" not in render(human_view(make_run(SAW)))
    assert "Output" in render(human_view(make_run(SAW, heads=2)))
    assert "Output" in render(human_view(make_run(SAW, out_proj=True)))
    assert "Output" in render(human_view(make_run(SAW), View(show=frozenset({"output"}), explicit=True)))
    one_of_two = dataclasses.replace(make_run(SAW, heads=2), chosen_heads=(1,))  # --head 1: the output is its context
    assert "Output" not in render(human_view(one_of_two))


def test_output_under_head_shows_the_chosen_heads_or_says_w_o_mixes_them() -> None:
    run = dataclasses.replace(make_run(SAW, heads=2), chosen_heads=(1,))  # d_v 4: head 1 owns dims 4..7 of the concat
    out = render(human_view(run, View(show=frozenset({"output"}), explicit=True)))
    assert "Output  head 1 of the heads side by side (4 x heads*d_v 4 of 8)" in out
    lines = out.splitlines()
    header = lines[next(i for i, line in enumerate(lines) if line.startswith("Output")) + 2]  # title, edge, header
    assert header.split()[-4:] == ["4", "5", "6", "7"]
    assert [row[1:] for row in section(out, "Output")] == [[fmt(v, 4) for v in row] for row in run.layers[0].context[1].tolist()]
    assert "--head chose head 1 of 2: the other heads' dims are left out" in " ".join(out.split())
    mixed = dataclasses.replace(make_run(SAW, heads=2, out_proj=True), chosen_heads=(1,))
    out = " ".join(render(human_view(mixed, View(show=frozenset({"output"}), explicit=True))).split())
    assert "through W_o (4 x heads*d_v 8)" in out and "the output of all 2 heads, not of head 1 alone" in out


def test_cut_columns_are_named_by_their_numbers() -> None:
    assert fit.spans([0, 1, 2, 3, 8, 11]) == "0-3, 8, 11"
    assert fit.spans([0, 1, 2, 39]) == "0-2, 39" and fit.spans([5]) == "5"


def test_stats_table_and_heads_compared() -> None:
    run = make_run(SAW, heads=2, causal=True)
    out = render(human_view(run, View(show=frozenset({"stats"}))))
    stats = attention_stats(run.layers[0].weights, mask=causal_mask(run.layers[0].weights.shape[-1]))
    rows = section(out, "Statistics  of the attention weights, head 1")
    for i, row in enumerate(rows):
        s = stats[1]
        assert row == [
            run.tokens.labels[i], run.tokens.labels[s.most_attended[i]], fmt(s.top_weight[i], 4),
            fmt(s.entropy_bits[i], 4), fmt(s.effective_tokens[i], 4), str(i + 1),
        ]
    compared = section(out, "Heads compared")
    assert compared[0] == ["0", fmt(stats[0].self_mass, 4), fmt(stats[0].previous_mass, 4), fmt(stats[0].first_mass, 4),
                           fmt(stats[0].mean_entropy_bits, 4), fmt(stats[0].mean_effective_tokens, 4)]
    assert f"previous-token mass {fmt(stats[1].previous_mass, 4)}" in out
    assert out.count("entropy 0: all weight on one key") == 1  # the definitions once, not per head
    one = render(human_view(run, View(show=frozenset({"stats"}), heads=(1,))))
    assert "Heads compared" not in one and "head 0" not in one


# -- one query, one key -----------------------------------------------------------------


def test_query_view_sorts_the_row_with_bars() -> None:
    run = make_run(("a", "b", "c", "d"), causal=True, weights=[[1, 0, 0, 0], [1, 0, 0, 0], [0.2, 0.5, 0.3, 0], [0.25] * 4])
    out = render(human_view(run, View(show=frozenset(), query=2)))
    rows = section(out, "Query c (position 2)")
    assert [r[:4] for r in rows] == [["1", "1", "b", "0.5000"], ["2", "2", "c", "0.3000"], ["3", "0", "a", "0.2000"]]
    assert [r[4] for r in rows] == [bar(0.5), bar(0.3), bar(0.2)]
    assert "key 3 is after the query: masked, weight 0" in out
    assert f"entropy {fmt(entropy_bits(torch.tensor([0.2, 0.5, 0.3])).item(), 4)} bits" in out


def test_key_view_lists_its_column_in_query_order() -> None:
    run = make_run(("a", "b", "c", "d"), causal=True, weights=[[1, 0, 0, 0], [0.5, 0.5, 0, 0], [0.2, 0.5, 0.3, 0], [0.1, 0.2, 0.3, 0.4]])
    out = render(human_view(run, View(show=frozenset(), key=1, query=3)))
    rows = section(out, "Key b (position 1)")
    assert [r[:3] for r in rows] == [["1", "b", "0.5000"], ["2", "c", "0.5000"], ["3", "d", "0.2000"]]
    assert "query 0 comes before the key: masked, weight 0" in out
    assert f"mean weight from the queries that can see it: {fmt(1.2 / 3, 4)}" in out
    assert "d -> b: weight 0.2000, raw score" in out


def test_long_rows_list_the_top_keys_only() -> None:
    n = cells.TOP_KEYS + 10
    run = make_run(tuple(f"t{i}" for i in range(n)), d_model=4)
    out = render(human_view(run, View(show=frozenset(), query=0)))
    assert len(section(out, "Query t0")) == cells.TOP_KEYS
    assert "… 10 more keys" in out


# -- wide tables --------------------------------------------------------------------------


def test_a_wide_run_fits_the_terminal() -> None:
    run = make_run(tuple(f"word{i}" for i in range(30)), d_model=64, heads=2)
    out = render(human_view(run, View(show=frozenset(cells.SHOW_CHOICES))))
    assert max(len(line) for line in out.splitlines()) <= WIDTH
    assert "of 30 keys shown" in out and "of 32 dims shown" in out and "of 64 dims shown" in out
    assert "--format csv (or -o FILE.csv) has every number" in out


def test_the_text_in_the_rule_cannot_drive_the_terminal() -> None:
    run = make_run(("red", "bold"))
    run = dataclasses.replace(run, text="\x1b[31mred\x1b[0m [b]bold[/b]\x00 \u202eevil\nnext\tcol  two")
    out = render(heading.text_rule(run), width=200)
    assert "\\x1b[31mred\\x1b[0m [b]bold[/b]\\x00 \\u202eevil↵next⇥col  two" in out
    assert not any(ord(c) < 32 and c != "\n" for c in out)


# -- long texts: only what is shown is made -------------------------------------------------


def reference_columns(widths: list[int], label: int, width: int) -> list[int | None]:
    """The fitting rule written out over every column's width (the table measures lazily)."""
    n = len(widths)

    def total(chosen: list[int | None]) -> int:
        return (label + 2) + sum((widths[j] if j is not None else 1) + 2 for j in chosen) + len(chosen) + 2

    if total(list(range(n))) <= width:
        return list(range(n))
    for keep in range(n - 2, -1, -1):
        if total([*range(keep), None, n - 1]) <= width:
            return [*range(keep), None, n - 1]
    return [None]


@pytest.mark.parametrize("seed", range(40))
def test_lazy_column_fitting_matches_the_rule_over_every_column(seed: int) -> None:
    generator = torch.Generator().manual_seed(seed)
    n = int(torch.randint(1, 30, (1,), generator=generator))
    widths = torch.randint(1, 12, (n,), generator=generator).tolist()
    width = int(torch.randint(10, 160, (1,), generator=generator))
    table = FittedTable(Text("T"), "q", ["r"], ["k"] * n, lambda i, j: Text("x" * widths[j]), what="keys")
    assert table.columns_that_fit(width) == reference_columns(widths, 1, width)


def counting_table(n_rows: int, n_cols: int) -> tuple[FittedTable, list[tuple[int, int]]]:
    made: list[tuple[int, int]] = []

    def cell(i: int, j: int) -> Text:
        made.append((i, j))
        return Text(f"{i}.{j:04d}")

    labels = [f"t{i}" for i in range(max(n_rows, n_cols))]
    return FittedTable(Text("T"), "q \\ k", labels[:n_rows], labels[:n_cols], cell, what="keys"), made


def test_a_big_table_makes_only_the_cells_it_shows_once_each() -> None:
    table, made = counting_table(3000, 3000)
    out = render(table, width=80)
    chosen = table.columns_that_fit(80)
    shown_rows = [*range(cells.ROW_LIMIT), 2999]
    assert table.rows == [*range(cells.ROW_LIMIT), None, 2999]
    assert len(made) == len(set(made)), "a cell was made twice"
    assert {i for i, _ in made} == set(shown_rows)
    # measured: a run of first columns, up to one that does not fit (each takes >= 4 characters), and the last
    drawn = {j for j in chosen if j is not None}
    measured = {j for _, j in made}
    first = sorted(measured - {2999})
    assert drawn <= measured and 2999 in measured
    assert first == list(range(len(first))) and len(first) <= 80 // 4 + 1
    assert len(made) == len(shown_rows) * len(measured)
    assert f"{len(drawn)} of 3000 keys shown" in " ".join(out.split())


def test_long_tables_show_the_first_rows_a_marker_and_the_last() -> None:
    n = cells.ROW_LIMIT + 5
    run = make_run(tuple(f"w{i}" for i in range(n)), d_model=4, causal=True)
    out = render(human_view(run, View(show=frozenset({"weights"}))))
    rows = section(out, "Attention weights")
    weights = run.layers[0].weights[0]
    assert [r[0] for r in rows] == [*(f"w{i}" for i in range(cells.ROW_LIMIT)), "⋮", f"w{n - 1}"]
    assert set(rows[cells.ROW_LIMIT]) == {"⋮"}
    assert rows[-1][1:3] == [fmt(weights[n - 1, 0].item(), 4), fmt(weights[n - 1, 1].item(), 4)]
    assert rows[1][1:4] == [fmt(weights[1, 0].item(), 4), fmt(weights[1, 1].item(), 4), "·"]
    note = " ".join(out.split())
    assert (
        f"⋮ {cells.ROW_LIMIT + 1} of {n} queries shown (0-{cells.ROW_LIMIT - 1}, {n - 1}): "
        f"long tables show their first {cells.ROW_LIMIT} rows and the last" in note
    )
    assert max(len(line) for line in out.splitlines()) <= WIDTH


def test_rows_and_columns_cut_together_say_how_to_see_all_once() -> None:
    n = cells.ROW_LIMIT + 20
    out = render(human_view(make_run(tuple(f"w{i}" for i in range(n)), d_model=4), View(show=frozenset({"weights"}))))
    note = " ".join(out.split())
    assert f"of {n} keys shown" in note and f"of {n} queries shown" in note
    assert note.count("--format csv") == 1 and note.count("--query N shows one row in full") == 1


def test_a_table_of_one_more_row_than_the_limit_is_whole() -> None:
    n = cells.ROW_LIMIT + 1
    run = make_run(tuple(f"w{i}" for i in range(n)), d_model=4)
    out = render(human_view(run, View(show=frozenset({"tokens", "weights", "stats", "embeddings"}))))
    assert "⋮" not in out and "queries shown" not in out and "tokens shown" not in out
    assert [r[0] for r in section(out, "Attention weights")] == [f"w{i}" for i in range(n)]
    assert len(section(out, "Tokens")) == n and len(section(out, "Statistics")) == n


def test_tokens_stats_and_vector_tables_cut_their_rows_too() -> None:
    n = cells.ROW_LIMIT + 3
    run = make_run(tuple(f"w{i}" for i in range(n)), d_model=4, causal=True)
    out = render(human_view(run, View(show=frozenset({"tokens", "stats", "context"}))))
    note = " ".join(out.split())
    stats = attention_stats(run.layers[0].weights, mask=causal_mask(run.layers[0].weights.shape[-1]))[0]
    tokens = section(out, "Tokens")
    assert [r[0] for r in tokens] == [*(str(i) for i in range(cells.ROW_LIMIT)), "⋮", str(n - 1)]
    assert f"{cells.ROW_LIMIT + 1} of {n} tokens shown" in note and "--format json lists every token" in note
    rows = section(out, "Statistics")
    assert rows[-1] == [f"w{n - 1}", f"w{stats.most_attended[-1]}", fmt(stats.top_weight[-1], 4),
                        fmt(stats.entropy_bits[-1], 4), fmt(stats.effective_tokens[-1], 4), str(n)]
    assert f"of {n} queries shown" in note and "--query N shows one query's entropy" in note
    context = section(out, "Context vectors")
    assert context[-1][1:] == [fmt(v, 4) for v in run.layers[0].context[0][n - 1].tolist()]
    assert context[cells.ROW_LIMIT][0] == "⋮"


def test_key_view_cuts_its_queries_and_names_a_hidden_largest() -> None:
    n = cells.ROW_LIMIT + 10
    column = [0.01] * n
    column[cells.ROW_LIMIT + 5] = 0.9  # a query in the hidden rows (5 + 40 = row 45)
    weights = [[1.0 if j == 0 else 0.0 for j in range(n)] for _ in range(n)]
    for i in range(2, n):
        weights[i] = [(1 - column[i]) if j == 0 else (column[i] if j == 2 else 0.0) for j in range(n)]
    run = make_run(tuple(f"w{i}" for i in range(n)), d_model=4, causal=True, weights=weights)
    out = render(human_view(run, View(show=frozenset(), key=2)))
    rows = section(out, "Key w2 (position 2)")
    assert [r[0] for r in rows] == [*(str(i) for i in range(2, 2 + cells.ROW_LIMIT)), "⋮", str(n - 1)]
    note = " ".join(out.split())
    assert f"⋮ {cells.ROW_LIMIT + 1} of {n - 2} queries shown (2-{cells.ROW_LIMIT + 1}, {n - 1})" in note
    assert f"the largest, 0.9000, is from query {cells.ROW_LIMIT + 5} (w{cells.ROW_LIMIT + 5}), not shown" in note


def test_scaled_scores_cell_by_cell_match_the_tensor() -> None:
    run = make_run(SAW, heads=2, causal=True, temperature=0.7, d_model=8)
    scaled = run.layers[0].scaled_scores  # (H, T, T) the reference
    for h in range(2):
        for i in range(4):
            for j in range(4):
                assert matrices.scaled_score(run, h, i, j) == scaled[h, i, j].item()


def test_stats_in_row_blocks_equal_the_whole_tensor(monkeypatch: pytest.MonkeyPatch) -> None:
    from attn_cli.analysis import stats as stats_module

    generator = torch.Generator().manual_seed(5)
    scores = torch.randn(2, 11, 11, generator=generator).masked_fill(torch.ones(11, 11, dtype=torch.bool).triu(1), -math.inf)
    weights = torch.softmax(scores, dim=-1)  # (H, T, T)
    monkeypatch.setattr(stats_module, "CHUNK_ROWS", 3)
    blocked = attention_stats(weights, mask=causal_mask(weights.shape[-1]))
    whole = entropy_bits(weights)  # (H, T)
    for h in range(2):
        torch.testing.assert_close(torch.tensor(blocked[h].entropy_bits, dtype=torch.float64), whole[h], rtol=1e-12, atol=1e-12)
        w = weights[h].double()
        assert blocked[h].self_mass == pytest.approx(w.diagonal().mean().item(), abs=1e-15)
        assert blocked[h].previous_mass == pytest.approx(w.diagonal(-1).mean().item(), abs=1e-15)
        assert blocked[h].first_mass == pytest.approx(w[1:, 0].mean().item(), abs=1e-15)


@pytest.mark.parametrize("chunk", [3, 256])
def test_stats_of_some_rows_are_those_rows_of_every_rows_stats(monkeypatch: pytest.MonkeyPatch, chunk: int) -> None:
    from attn_cli.analysis import stats as stats_module

    generator = torch.Generator().manual_seed(9)
    n = 300
    mask = causal_mask(n)
    weights = torch.softmax(torch.randn(2, n, n, generator=generator).masked_fill(mask, -math.inf), dim=-1)  # (H, T, T)
    monkeypatch.setattr(stats_module, "CHUNK_ROWS", chunk)
    every = attention_stats(weights, mask=mask)
    rows = [0, 1, 7, 150, 298, 299]
    some = attention_stats(weights, mask=mask, rows=rows)
    for full, part in zip(every, some):
        assert part.rows == tuple(rows) and [part.row(i) for i in rows] == list(range(len(rows)))
        for field in ("most_attended", "top_weight", "entropy_bits", "effective_tokens", "visible_keys"):
            assert getattr(part, field) == [getattr(full, field)[i] for i in rows], field  # exactly, not approximately
        assert (part.self_mass, part.previous_mass, part.first_mass) == (full.self_mass, full.previous_mass, full.first_mass)
        with pytest.raises(ValueError, match="needs every row"):
            part.mean_entropy_bits  # noqa: B018


def test_the_default_view_of_a_long_text_computes_only_the_rows_it_shows(monkeypatch: pytest.MonkeyPatch) -> None:
    from invoking import invoke

    from attn_cli.analysis import stats as stats_module

    rows_done = 0
    original = stats_module.entropy_bits

    def counting(weights: torch.Tensor) -> torch.Tensor:
        nonlocal rows_done
        rows_done += weights.numel() // weights.shape[-1]  # query rows, over every head
        return original(weights)

    monkeypatch.setattr(stats_module, "entropy_bits", counting)
    n = 600
    text = " ".join(f"w{i % 50}" for i in range(n))
    args = ["run", "-t", "words", "--causal", "--", text]
    table = invoke(*args[:-2], "-F", "table", "--query", "100", "--show", "stats", *args[-2:], env={"COLUMNS": "200"})
    assert rows_done == cells.ROW_LIMIT + 2  # the rows shown and the followed query, not 600
    data = json.loads(invoke(*args[:-2], "-F", "json", *args[-2:]).stdout)
    stats, labels = data["layers"][0]["heads"][0]["stats"], [t["label"] for t in data["tokens"]]
    shown = [*range(cells.ROW_LIMIT), n - 1]
    body = [row for row in section(table.stdout, "Statistics") if row[0] != "⋮"]
    assert body == [
        [labels[i], labels[stats["most_attended"][i]], *(fmt(stats[k][i], 4) for k in ("top_weight", "entropy_bits", "effective_tokens")), str(i + 1)]
        for i in shown
    ]
    out = " ".join(table.stdout.split())
    assert f"entropy {fmt(stats['entropy_bits'][100], 4)} bits, {fmt(stats['effective_tokens'][100], 4)} effective tokens of 101" in out
    assert f"self (diagonal) mass {fmt(stats['self_mass'], 4)} previous-token mass {fmt(stats['previous_mass'], 4)}" in out


def test_one_heads_stats_are_that_heads() -> None:
    run = make_run(SAW, heads=2)
    out = render(human_view(run, View(show=frozenset({"stats"}), heads=(1,))))
    expected = attention_stats(run.layers[0].weights)[1]
    rows = section(out, "Statistics  of the attention weights, head 1")
    assert [r[3] for r in rows] == [fmt(v, 4) for v in expected.entropy_bits]


def test_a_2000_token_text_prints_a_bounded_default_view(monkeypatch: pytest.MonkeyPatch) -> None:
    from invoking import invoke

    styled = 0
    original = cells.weight_style

    def counting(weight: float, color_system: str | None = "truecolor"):
        nonlocal styled
        styled += 1
        return original(weight, color_system)

    monkeypatch.setattr(cells, "weight_style", counting)
    n = 2000
    text = " ".join(f"w{i}" for i in range(n))
    result = invoke("run", "-t", "words", "--format", "table", "--", text, env={"COLUMNS": "100"})
    out = result.stdout
    rows = cells.ROW_LIMIT + 1
    assert styled <= rows * 12, f"{styled} weight cells styled for {rows} rows shown"
    assert out.count(f"{rows} of {n} queries shown") == 2  # the weights and the statistics
    assert f"{rows} of {n} tokens shown" in out
    assert len(out.splitlines()) < 4 * rows + 60
    assert f"w{n - 1}" in out  # the last row is shown
