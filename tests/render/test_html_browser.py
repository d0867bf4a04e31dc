"""The `attn-cli html` page in a real browser: headless Chromium driven by playwright.

Pages are loaded from file://; any console message of type error, uncaught
exception or request other than the page itself fails the test. Screenshots go
to a temporary folder (``ATTN_CLI_SCREENSHOTS`` names a folder to keep them).

Without playwright or chromium these tests skip and say why; with ``CI`` set
they fail instead (conftest.skip_or_fail), so a CI machine cannot pass them by accident.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from attn_cli.formats.document import run_dict
from attn_cli.render.page import build, notebook_html, page
from attn_cli.pipeline import open_source
from browser_support import Page, browser  # noqa: F401  (the fixture: headless Chromium)
from html_support import fixed, hand_trace, toy


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    folder = os.environ.get("ATTN_CLI_SCREENSHOTS")
    target = Path(folder) if folder else tmp_path / "screenshots"
    target.mkdir(parents=True, exist_ok=True)
    return target


@pytest.fixture
def open_page(browser: Any, tmp_path: Path) -> Iterator[Any]:
    opened: list[Page] = []

    def load(html: str, name: str = "page.html", **kwargs: Any) -> Page:
        path = tmp_path / name
        path.write_text(html, encoding="utf-8")
        opened.append(Page(browser, path, **kwargs))
        return opened[-1]

    yield load
    for p in opened:
        p.close()


def test_head_view_hover_lists_the_json_weights_of_the_query(open_page: Any, shots: Path) -> None:
    trace = toy("I saw a saw", heads=2, causal=True)
    data = run_dict(trace)
    p = open_page(page([trace], command="attn-cli html 'I saw a saw' -t words --heads 2 --causal"))
    assert p.text("#text") == "I saw a saw"
    assert "attn-cli html 'I saw a saw'" in p.text("#command")
    p.page.hover(".left .tok[data-i='3']")
    assert p.text("#detail-title") == "saw#3 (query 3) attends to"
    for h in range(2):
        for k in range(4):
            shown = p.text(f"#detail-table td[data-head='{h}'][data-other='{k}']")
            assert shown == fixed(data["layers"][0]["heads"][h]["weights"][3][k])
    p.page.screenshot(path=shots / "toy-head-view.png", full_page=True)
    p.page.hover(".left .tok[data-i='1']")  # causal: saw#1 may not see the later tokens
    assert p.text("#detail-table td[data-head='0'][data-other='3']") == "masked"
    p.page.hover(".right .tok[data-i='1']")
    assert p.text("#detail-title") == "Who attends to saw#1 (key 1)"
    assert p.text("#detail-table td[data-head='1'][data-other='2']") == fixed(data["layers"][0]["heads"][1]["weights"][2][1])


def test_click_keeps_a_token_and_heads_toggle(open_page: Any) -> None:
    p = open_page(page([toy("Life is short, eat dessert first", heads=4)], command="c"))
    p.page.click(".left .tok[data-i='2']")
    p.page.mouse.move(5, 5)  # away from every token: the clicked one stays
    assert p.text("#detail-title") == "short (query 2) attends to"
    assert p.page.get_attribute(".left .tok[data-i='2']", "aria-pressed") == "true"
    assert p.page.locator("#detail-table thead th").count() == 1 + 4
    p.page.click(".chip[data-head='1']")
    p.ready()
    assert p.page.get_attribute(".chip[data-head='1']", "aria-pressed") == "false"
    assert p.page.locator("#detail-table td[data-head='1']").count() == 0
    assert p.page.locator("#detail-table td[data-head='2']").count() == 6
    p.page.keyboard.press("Escape")
    assert "Hover, focus or click" in p.text("#detail")


def test_keyboard_alone_reaches_tokens_views_and_cells(open_page: Any) -> None:
    trace = toy("I saw a saw", heads=2, causal=True)
    data = run_dict(trace)
    p = open_page(page([trace], command="c"))
    p.page.focus(".left .tok[data-i='0']")
    assert p.text("#detail-title") == "I (query 0) attends to"
    p.page.focus("#tab-heads")
    p.page.keyboard.press("ArrowRight")
    p.ready()
    assert p.page.get_attribute("#tab-matrix", "aria-selected") == "true"
    p.page.focus("#matrix")
    p.page.keyboard.press("ArrowDown")
    p.page.keyboard.press("ArrowDown")
    p.page.keyboard.press("ArrowRight")
    tip = p.tip()
    assert tip["query"] == "a (2)" and tip["key"] == "saw#1 (1)"
    assert tip["weight"] == fixed(data["layers"][0]["heads"][0]["weights"][2][1])


def test_matrix_tooltips_equal_the_json_in_every_cell(open_page: Any, shots: Path) -> None:
    trace = toy("Life is short, eat dessert first", heads=2, causal=True)
    data = run_dict(trace)
    p = open_page(page([trace], command="c"))
    p.view("matrix")
    for h in range(2):
        if h:
            p.page.click(".chip[data-head='1']")
            p.ready()
        head = data["layers"][0]["heads"][h]
        for q in range(6):
            for k in range(6):
                tip = p.hover_cell(q, k)
                assert tip["raw-score"] == fixed(head["scores"][q][k])
                if k > q:
                    assert tip["weight"] == "0 (masked)" and tip["scaled-score"].startswith("-inf")
                else:
                    assert tip["weight"] == fixed(head["weights"][q][k])
                    assert tip["scaled-score"] == f"{fixed(head['scaled_scores'][q][k])} (raw / sqrt(8))"
        if h == 1:
            p.hover_cell(4, 1)
            p.page.screenshot(path=shots / "toy-matrix.png", full_page=True)


def test_step_by_step_shows_the_json_numbers_for_the_clicked_query(open_page: Any, shots: Path) -> None:
    trace = toy("I saw a saw", heads=2, causal=True)
    data = run_dict(trace)
    p = open_page(page([trace], command="c"))
    p.view("steps")
    p.page.click(".querypick .tok[data-i='2']")
    p.ready()
    p.page.click("#controls .chip[data-head='1']")
    p.ready()
    head = data["layers"][0]["heads"][1]
    for k in range(4):
        row = f"#step-scores tr[data-key='{k}']"
        assert p.text(f"{row} td[data-field='raw']") == fixed(head["scores"][2][k])
        if k <= 2:
            assert p.text(f"{row} td[data-field='mask']") == fixed(head["scaled_scores"][2][k])
            assert p.text(f"{row} td[data-field='weight']") == fixed(head["weights"][2][k])
        else:
            assert p.text(f"{row} td[data-field='mask']") == "-inf"
    context = p.page.locator("#step-context td.num").all_inner_texts()
    assert context == [fixed(v) for v in head["context"][2][:8]]
    p.page.screenshot(path=shots / "toy-steps.png", full_page=True)


def test_many_layers_overview_opens_a_head_and_marks_special_tokens(open_page: Any, shots: Path) -> None:
    trace = hand_trace(20, layers=6, heads=12)
    p = open_page(page([trace], command="attn-cli html --model hand/mini-bert"))
    assert "Step by step" not in p.text(".tabs")
    assert p.page.locator(".left .tok.special").count() == 2
    p.view("overview")
    assert p.page.locator(".thumb").count() == 6 * 12
    p.page.screenshot(path=shots / "overview-6x12.png", full_page=True)
    p.page.click(".thumb[data-layer='3'][data-head='5']")
    p.ready()
    assert p.page.get_attribute("#tab-matrix", "aria-selected") == "true"
    assert p.page.get_attribute("#matrix", "data-layer") == "3" and p.page.get_attribute("#matrix", "data-head") == "5"
    layer = trace.layers[3]
    tip = p.hover_cell(7, 2)
    assert tip["weight"] == fixed(layer.weights[5, 7, 2].item()) and tip["raw-score"] == fixed(layer.scores[5, 7, 2].item())
    assert p.hover_cell(2, 7)["weight"] == "0 (masked)"


def test_512_tokens_thin_the_head_view_and_keep_the_matrix_exact(open_page: Any, shots: Path) -> None:
    trace = hand_trace(512, layers=12, heads=12, head_dim=32, causal=False)
    result = build([trace], command="attn-cli html --model hand/mini-bert --file long.txt")
    p = open_page(result.html)
    assert "layers 6-11 are left out" in p.text("#left-out")
    assert p.page.locator("#layer-picker option[disabled]").count() == 6
    assert "strongest of" in p.text("#thinned")
    p.page.screenshot(path=shots / "long-512-head-view.png")
    p.page.hover(".left .tok[data-i='300']")
    assert p.text("#thinned") == ""  # one token's lines are all drawn
    p.view("matrix")
    layer = trace.layers[0]
    tip = p.hover_cell(300, 17)
    assert tip["weight"] == fixed(layer.weights[0, 300, 17].item()) and tip["scores"] == "left out of this page"
    p.page.check("#log-scale")
    p.ready()
    p.page.screenshot(path=shots / "long-512-matrix.png")
    p.view("overview")
    assert p.page.locator(".thumb").count() == 6 * 12


def test_a_long_toy_text_has_every_view(open_page: Any, shots: Path) -> None:
    words = ("the quick brown fox jumps over the lazy dog and " * 52).split()[:512]
    trace = toy(" ".join(words), heads=4, causal=True)
    p = open_page(page([trace], command="c"))
    p.view("matrix")
    assert p.hover_cell(511, 3)["weight"] == fixed(trace.layers[0].weights[0, 511, 3].item())
    p.view("steps")
    assert p.text("#step-cut") == "1 of the 1 keys this query can see are listed. The other 511 keys are masked."
    p.page.click(".querypick .tok[data-i='300']")
    p.ready()
    assert p.text("#step-cut").startswith("48 of the 301 keys this query can see are listed: the query itself")
    assert p.page.locator("#step-scores tr[data-key]").count() == 48
    strongest = int(trace.layers[0].weights[0, 300].argmax())
    assert p.text(f"#step-scores tr[data-key='{strongest}'] td[data-field='weight']") == fixed(trace.layers[0].weights[0, 300, strongest].item())
    p.page.screenshot(path=shots / "long-512-toy-steps.png")


def test_a_picker_switches_between_texts(open_page: Any) -> None:
    traces = [toy("I saw a saw", heads=2), toy("Life is short, eat dessert first", heads=2)]
    p = open_page(page(traces, command="c"))
    p.page.select_option("#text-picker", "1")
    p.ready()
    assert p.text("#text") == "Life is short, eat dessert first"
    p.page.hover(".left .tok[data-i='5']")
    assert p.text("#detail-table td[data-head='0'][data-other='0']") == fixed(run_dict(traces[1])["layers"][0]["heads"][0]["weights"][5][0])


def test_dark_scheme(open_page: Any, shots: Path) -> None:
    p = open_page(page([toy("I saw a saw", heads=2, causal=True)], command="c"), scheme="dark")
    background = p.page.evaluate("getComputedStyle(document.body).backgroundColor")
    assert background == "rgb(22, 24, 28)"
    p.view("matrix")
    p.page.screenshot(path=shots / "toy-matrix-dark.png", full_page=True)


def test_notebook_frames_coexist(open_page: Any) -> None:
    one, two = toy("I saw a saw", heads=2), hand_trace(10, layers=2, heads=3)
    p = open_page("<!doctype html><meta charset='utf-8'><body>" + notebook_html([one]) + notebook_html([two]) + "</body>", wait=False)
    frames = [f for f in p.page.frames if f != p.page.main_frame]
    assert len(frames) == 2
    for frame, text in zip(frames, [one.text, two.text]):
        frame.wait_for_selector("body[data-ready]", state="attached")
        assert frame.inner_text("#text").strip() == text
    frames[1].hover(".left .tok[data-i='4']")
    assert frames[1].inner_text("#detail-title").startswith(two.tokens.labels[4])


def test_hidden_tokens_are_absent_from_the_head_view_and_matrix(open_page: Any, shots: Path) -> None:
    from attn_cli.records.hiding import HideSpec, hide

    folder = "/some/where/a/long/folder/of/checkpoints/hand-mini-bert"
    trace = hand_trace(10, layers=2, heads=3, source=folder)
    trace = hide(dataclasses.replace(trace, model=dataclasses.replace(trace.model, path=folder)), HideSpec.parse("special"))
    data = run_dict(trace)
    p = open_page(page([trace], command="attn-cli html --model hand/mini-bert --hide-tokens special"))
    assert p.page.title().endswith("· …/checkpoints/hand-mini-bert") and p.text("h1").endswith("…/checkpoints/hand-mini-bert")
    assert "[CLS], [SEP] (positions 0, 9): left out of every view" in p.text("#about")
    kept = [t["label"] for t in data["tokens"] if not t["hidden"]]
    for side in ("left", "right"):
        assert p.page.locator(f".{side} .tok").all_inner_texts() == kept
    assert p.page.locator(".tok.special").count() == 0
    p.page.hover(".left .tok[data-i='0']")
    assert p.text("#detail-title") == f"{kept[0]} (query 1) attends to"  # the position in the text, not among the shown
    p.view("matrix")
    head = data["layers"][0]["heads"][0]
    for q in range(8):
        for k in (0, q, 7):
            tip = p.hover_cell(q, k)
            assert tip["query"] == f"{kept[q]} ({q + 1})" and tip["key"] == f"{kept[k]} ({k + 1})"
            shown = head["weights_shown"][q + 1][k + 1]
            assert tip["weight"] == ("0 (masked)" if shown is None or k > q else fixed(shown))
    p.page.screenshot(path=shots / "hidden-matrix.png", full_page=True)
    p.view("overview")
    assert p.page.locator(".headname").all_inner_texts() == ["head 0", "head 1", "head 2"]
    assert p.page.locator(".thumb").count() == 2 * 3


def test_the_numbers_in_the_matrix_fit_their_cells(open_page: Any, shots: Path) -> None:
    """Issue 23: four-decimal numbers overflowed their cells and ran together. Two decimals
    at a size that fits: the widest drawn number is narrower than a cell."""
    trace = toy("Life is short, eat dessert first", heads=2, causal=True)
    p = open_page(page([trace], command="c"))
    p.view("matrix")
    cell = float(p.page.get_attribute("#matrix", "data-cell"))
    widest = p.page.get_attribute("#matrix", "data-number-width")
    assert widest is not None, "the numbers were drawn"
    assert float(widest) <= cell - 4 and int(p.page.get_attribute("#matrix", "data-number-font")) >= 7
    p.page.screenshot(path=shots / "toy-matrix-numbers.png", full_page=True)


def test_head_view_of_attention_from_elsewhere(open_page: Any, shots: Path) -> None:
    """attn_cli.head_view on transformers-shaped attention: the page draws the tokens,
    follows a hovered query, and asks the network for nothing (no CDN, unlike bertviz)."""
    import torch

    import attn_cli

    torch.manual_seed(0)
    tokens = ["[CLS]", "the", "cat", "sat", "[SEP]"]
    attention = tuple(torch.randn(1, 3, 5, 5).mul(3).softmax(-1) for _ in range(2))
    html = attn_cli.head_view(attention, tokens, html_action="return")
    p = open_page(html, "head-view.html")
    assert [t.strip() for t in p.page.locator(".left .tok").all_inner_texts()] == tokens
    p.page.hover(".left .tok[data-i='2']")
    assert "cat" in p.text("#detail")
    p.page.screenshot(path=shots / "head-view-outside.png", full_page=True)
    assert not p.problems, p.problems


def test_rollout_view_and_norms_colouring_show_the_json_numbers(open_page: Any, shots: Path) -> None:
    from attn_cli.sources.toy.config import Config
    from attn_cli.sources.toy.source import ToySource
    from attn_cli.records.selection import Selection

    trace = ToySource(Config(tokenizer="words", heads=2, causal=True, out_proj=True)).run(
        "Life is short, eat dessert first", Selection((0,), (0, 1), rollout=True, norms=True)
    )
    data = run_dict(trace)
    p = open_page(page([trace], command="c"))
    p.view("rollout")
    assert p.page.locator("#matrix").get_attribute("data-kind") == "rollout"
    assert_causal_cells(p, "rollout", data["rollout"]["weights"])
    p.page.screenshot(path=shots / "toy-rollout.png", full_page=True)
    p.view("matrix")
    p.page.click("#show-norms")
    p.ready()
    assert p.page.locator("#matrix").get_attribute("data-kind") == "norms"
    head = data["layers"][0]["heads"][0]
    for q, k in ((0, 0), (3, 1), (5, 5), (5, 2)):
        tip = p.hover_cell(q, k)
        assert tip["norm-||a·f(x)||"] == fixed(head["norms"][q][k]) and tip["weight"] == fixed(head["weights"][q][k])
    p.page.screenshot(path=shots / "toy-norms.png", full_page=True)
    # without --rollout and --norms, neither control is there
    plain = open_page(page([toy("Life is short, eat dessert first", heads=2, causal=True)], command="c"), name="plain.html")
    assert plain.page.locator("#tab-rollout").count() == 0
    plain.view("matrix")
    assert plain.page.locator("#show-norms").count() == 0


def test_predictions_show_on_hover(open_page: Any, gpt2_folder: Any) -> None:
    from attn_cli.sources.toy.config import Config
    from attn_cli.sources.spec import SourceSpec
    from attn_cli.records.selection import Selection

    source = open_source(SourceSpec(Config(), model=str(gpt2_folder)))
    trace = source.run("the quick brown fox", Selection((2,), (0, 1, 2, 3), predict=3))
    p = open_page(page([trace], command="c"))
    p.page.hover(".left .tok[data-i='2']")
    expected = ", ".join(f"{label} {prob:.4f}" for label, prob in zip(trace.predictions.labels[2], trace.predictions.probs[2].tolist()))
    assert p.text("#detail-predictions") == f"The model's next token here: {expected}"
    assert p.page.get_attribute(".left .tok[data-i='2']", "title").endswith(f"next: {expected}")


def test_flow_view_shows_the_json_numbers(open_page: Any, shots: Path) -> None:
    """--what flow: a Flow tab whose cells are the JSON's top-level flow (a causal toy: no path to the future)."""
    from attn_cli.sources.toy.config import Config
    from attn_cli.sources.toy.source import ToySource
    from attn_cli.records.selection import Selection

    trace = ToySource(Config(tokenizer="words", heads=2, causal=True, out_proj=True)).run(
        "Life is short, eat dessert first", Selection((0,), (0, 1), rollout=True, flow=True)
    )
    data = run_dict(trace)
    p = open_page(page([trace], command="c"), name="flow.html")
    p.view("flow")
    assert p.page.locator("#matrix").get_attribute("data-kind") == "flow"
    assert "Attention flow through layer 0" in p.text("body")
    assert_causal_cells(p, "flow", data["flow"]["weights"])
    p.page.screenshot(path=shots / "toy-flow.png", full_page=True)
    p.view("rollout")  # the rollout's own numbers still
    assert p.hover_cell(5, 0)["rollout"] == fixed(data["rollout"]["weights"][5][0])
    assert not p.problems, p.problems


def test_alti_and_value_zeroing_views_show_the_json_numbers(open_page: Any, gpt2_folder: Any, shots: Path) -> None:
    """--what alti,value-zeroing-rollout on a causal GPT-2: an ALTI tab and a Value zeroing rollout tab, each
    cell the JSON's number, the future no path."""
    import attn_cli

    trace = attn_cli.trace("the cat sat on the mat", model=gpt2_folder, what="alti,value-zeroing-rollout")
    data = run_dict(trace)
    p = open_page(page([trace], command="c"), name="alti.html")
    for name, label in (("alti", "ALTI through layer"), ("value_zeroing_rollout", "Value zeroing through layer")):
        p.view(name)
        assert p.page.locator("#matrix").get_attribute("data-kind") == name
        assert label in p.text("body")
        weights = data[name]["weights"]
        for q, k in ((0, 0), (3, 1), (5, 5), (5, 0)):  # some cells (the flow test reads every one): the JSON's numbers
            assert p.hover_cell(q, k)[name] == fixed(weights[q][k]), (name, q, k)
        assert p.hover_cell(1, 3)[name] == "0 (no path)"
    p.page.screenshot(path=shots / "gpt2-alti.png", full_page=True)
    assert not p.problems, p.problems


def test_each_layers_maps_and_attention_x_gradient_on_the_page(open_page: Any, gpt2_folder: Any, shots: Path) -> None:
    """--what value-zeroing,alti,attention-gradient: a view of each layer's own map (the layer picker, no head chips)
    and the relevance through the layers, each cell the JSON's number (relevance: to its scale's 4 decimals)."""
    import attn_cli

    trace = attn_cli.trace("the cat sat on the mat", model=gpt2_folder, what="value-zeroing,alti,attention-gradient")
    data = run_dict(trace)
    p = open_page(page([trace], command="c"), name="maps.html")
    for view, field, table in (("layer-alti", "alti", data["layers"][0]["alti"]), ("layer-value_zeroing", "value_zeroing", data["layers"][0]["value_zeroing"])):
        p.view(view)
        assert p.page.locator("#layer-picker").count() == 1 and p.page.locator("button.chip").count() == 0
        assert p.hover_cell(3, 1)[field] == fixed(table[3][1]) and p.hover_cell(1, 3)[field] == "0 (no path)"
    p.view("attention_gradient")
    relevance = data["attention_gradient"]["weights"]
    scale = max(max(row) for row in relevance)
    for q, k in ((5, 0), (5, 5), (2, 1)):
        assert abs(float(p.hover_cell(q, k)["attention_gradient"]) - relevance[q][k]) <= scale * 1e-4
    assert "the target: the next token" in p.text("body")
    p.view("layer-attention_gradient")
    p.page.select_option("#layer-picker", "2")
    layer2 = data["layers"][2]["attention_gradient"]
    assert abs(float(p.hover_cell(5, 2)["attention_gradient"]) - layer2[5][2]) <= max(max(r) for r in layer2) * 1e-4
    p.page.screenshot(path=shots / "gpt2-gradient-layer.png", full_page=True)
    assert not p.problems, p.problems


def assert_causal_cells(p: Any, name: str, weights: list[list[float]]) -> None:
    """Each cell's tooltip is the JSON's number (a causal run's future: no path)."""
    for q in range(len(weights)):
        for k in range(len(weights)):
            expected = "0 (no path)" if k > q else fixed(weights[q][k])
            assert p.hover_cell(q, k)[name] == expected, (q, k)
