"""What a source says about its model (``ModelInfo.about``) is what every view prints: a source
the views have never heard of describes itself, and the header, the heatmap title, the page,
the layer-input table and the reproducing command say it, slots filled from the trace."""

from __future__ import annotations

import dataclasses
import io

import pytest
import torch
from browser_support import Page, browser  # noqa: F401  (the fixture: headless Chromium)
from html_support import hand_trace, manifest, toy
from rich.console import Console

from attn_cli.formats.document import run_dict
from attn_cli.records.about import About, filled
from attn_cli.records.trace import Trace
from attn_cli.render.commands import command_line
from attn_cli.render.page import page, reproduce_command
from attn_cli.render.page.chunks import Chunks
from attn_cli.render.page.manifest import trace_manifest
from attn_cli.render.picture.kinds import What
from attn_cli.render.picture.titles import heatmap_title
from attn_cli.render.terminal.header import config_header
from attn_cli.render.terminal.matrices import embeddings_table, output_table, qkv_tables

NEW_SOURCE = About(
    header=(("model", None), ("made by", "hand"), ("tokens", None), ("revision", None)),
    note="Weights written out by hand.",
    title=(("model", None), ("made by", "hand"), ("exact", ""), ("heads", None)),
    page=(("made by", "hand"), ("layers", None)),
    flags=(("--model", None), ("--by-hand", ""), ("--seed", "3")),
    layer_input=("Hand vectors h", "from a notebook"),
    input_letter="h",
    output_width="hand_width",
    names_model=False,
    reproduce="written out by hand: no command makes it again",
)


def drawn(renderable: object) -> str:
    console = Console(width=100, file=io.StringIO(), color_system=None, record=True)
    console.print(renderable)
    return console.export_text()


def described(trace: Trace, about: About) -> Trace:
    return dataclasses.replace(trace, model=dataclasses.replace(trace.model, about=about))


def test_filled_gives_slots_the_traces_values_and_leaves_out_what_it_has_not() -> None:
    rows = (("model", None), ("seed", "3"), ("revision", None), ("exact", ""))
    assert filled(rows, {"model": "m", "revision": None}) == [("model", "m"), ("seed", "3"), ("exact", "")]
    with pytest.raises(KeyError):  # a slot no view knows is a bug, not a blank
        filled((("nonsense", None),), {})


def test_every_view_prints_what_a_new_source_says_about_itself() -> None:
    trace = described(hand_trace(6, layers=2, heads=2, causal=False), NEW_SOURCE)
    header = drawn(config_header(trace))
    assert "model hand/mini-bert  made by hand  tokens 6" in header and "revision" not in header
    assert "Weights written out by hand." in header and "trained" not in header
    assert heatmap_title(trace, What.weights, (0, 1))[1] == ["hand/mini-bert", "made by hand", "exact", "heads 2", "not causal"]
    rows = trace_manifest(trace, Chunks())["header"]
    assert rows[2:] == [["made by", "hand"], ["layers", "2"]]  # after the tokenizer and the token count
    assert command_line(trace, "run") == "attn-cli run 'the cat sat on' --model hand/mini-bert --by-hand --seed 3"
    trace = dataclasses.replace(trace, layers=(dataclasses.replace(trace.layers[0], x=torch.zeros(6, 16)),))  # (T, D)
    assert "Hand vectors h  (6 x d_model 16) from a notebook" in drawn(embeddings_table(trace, 2))


def test_a_trained_models_slots_follow_the_stack_drawn() -> None:
    trace = hand_trace(6, layers=3, heads=2)
    two = dataclasses.replace(trace, model=dataclasses.replace(trace.model, layers=2, heads=4, kv_heads=2))
    assert "layers 3  heads 2  head_dim 8" in drawn(config_header(trace))
    assert "layers 2  heads 4 (2 key/value)  head_dim 8" in drawn(config_header(two))


def test_the_toy_says_its_settings_and_the_views_ask_nothing_else() -> None:
    run = toy(heads=2, causal=True, dropout=0.5)
    assert ("seed", "123") in run.model.about.header and ("dropout", "0.5") in run.model.about.header
    blank = described(run, dataclasses.replace(run.model.about, header=(("tokens", None),), note="nothing more"))
    assert drawn(config_header(blank)).split() == ["tokens", "4", "nothing", "more"]
    assert command_line(run, "html") == "attn-cli html 'I saw a saw' --tokenizer words --heads 2 --causal --dropout 0.5"
    assert trace_manifest(run, Chunks())["toy"] == {
        "causal": True, "scale": True, "temperature": 1.0, "dropout": 0.5, "projections": True, "outProj": False, "dK": 8, "dV": 8,
    }  # fmt: skip
    assert "toy" not in trace_manifest(described(run, dataclasses.replace(run.model.about, steps=None)), Chunks())


def named(trace: Trace) -> dict[str, object]:
    """What the tables and the page call a one-layer trace's model: the layer input's letter in
    the projections' formulas, the output's width, the page's title, data and Reproduce line."""
    html = page([trace], command=reproduce_command(trace))
    return {
        "formulas": [drawn(table).splitlines()[0].split(None, 1)[1].rsplit(" (", 1)[0].strip() for table in qkv_tables(trace, 0, 2)],
        "output": drawn(output_table(trace, 2)).split("(", 1)[1].split(")")[0],
        "title": html.split("<title>", 1)[1].split("</title>")[0],
        "trained": manifest(html)["traces"][0]["model"]["trained"],
        "reproduce": reproduce_command(trace),
    }


def test_a_new_sources_names_are_what_the_tables_and_the_page_say() -> None:
    trace = hand_trace(6, layers=1, heads=2, causal=False)
    assert named(described(trace, NEW_SOURCE)) == {
        "formulas": ["Q = h W_q^T, head 0", "K = h W_k^T, head 0", "V = h W_v^T, head 0"],
        "output": "6 x hand_width 16",
        "title": "attention: the cat sat on",
        "trained": False,
        "reproduce": "written out by hand: no command makes it again",
    }
    unprojected = dataclasses.replace(trace.model, projections=False, about=NEW_SOURCE)
    assert named(dataclasses.replace(trace, model=unprojected))["formulas"][0] == "Q = h (no projections), head 0"
    # the control: the same trace in a trained model's words (About's defaults)
    assert named(trace) == {
        "formulas": ["Q = x W_q^T, head 0", "K = x W_k^T, head 0", "V = x W_v^T, head 0"],
        "output": "6 x d_model 16",
        "title": "attention: the cat sat on · hand/mini-bert",
        "trained": True,
        "reproduce": "attn-cli html 'the cat sat on' --model hand/mini-bert",
    }


def test_the_toy_and_a_saved_toy_keep_the_toys_names() -> None:
    run = toy()
    words = named(run)
    assert words["formulas"] == ["Q = X W_q^T", "K = X W_k^T", "V = X W_v^T"] and words["output"].startswith("4 x heads*d_v ")
    assert words["title"] == "attention: I saw a saw" and words["trained"] is False
    assert words["reproduce"] == "attn-cli html 'I saw a saw' --tokenizer words"
    from attn_cli.sources.saved import from_dict

    saved = run_dict(run)
    saved["model"]["config"]["seed"] = "not a number"  # a toy trace whose settings this version cannot rebuild
    again = from_dict(saved)
    html = page([again], command=reproduce_command(again))  # weights alone: no tables of vectors to name X in
    assert again.model.config is None and again.model.about.input_letter == "X" and again.model.about.output_width == "heads*d_v"
    assert "<title>attention: I saw a saw</title>" in html and manifest(html)["traces"][0]["model"]["trained"] is False


def test_the_page_names_the_model_and_offers_its_overview_as_its_source_says(browser: object, tmp_path: object) -> None:
    trace = hand_trace(6, layers=1, heads=2, causal=False)
    seen = {}
    for about in (NEW_SOURCE, About()):  # the new source's words, and the control: a trained model's
        path = tmp_path / f"{about.names_model}.html"  # type: ignore[operator]
        path.write_text(page([described(trace, about)], command="attn-cli html"), encoding="utf-8")
        p = Page(browser, path)
        seen[about.names_model] = (p.text("h1"), p.page.locator("#tab-overview").count())
        p.close()
    assert seen == {False: ("Attention, explored: the toy model", 0), True: ("Attention, explored: hand/mini-bert", 1)}
