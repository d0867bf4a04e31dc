"""What a source says about its model (``ModelInfo.about``) is what every view prints: a source
the views have never heard of describes itself, and the header, the heatmap title, the page,
the layer-input table and the reproducing command say it, slots filled from the trace."""

from __future__ import annotations

import dataclasses
import io

import pytest
import torch
from html_support import hand_trace, toy
from rich.console import Console

from attn_cli.records.about import About, filled
from attn_cli.records.trace import Trace
from attn_cli.render.commands import command_line
from attn_cli.render.page.chunks import Chunks
from attn_cli.render.page.manifest import trace_manifest
from attn_cli.render.picture.kinds import What
from attn_cli.render.picture.titles import heatmap_title
from attn_cli.render.terminal.header import config_header
from attn_cli.render.terminal.matrices import embeddings_table

NEW_SOURCE = About(
    header=(("model", None), ("made by", "hand"), ("tokens", None), ("revision", None)),
    note="Weights written out by hand.",
    title=(("model", None), ("made by", "hand"), ("exact", ""), ("heads", None)),
    page=(("made by", "hand"), ("layers", None)),
    flags=(("--model", None), ("--by-hand", ""), ("--seed", "3")),
    layer_input=("Hand vectors h", "from a notebook"),
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
