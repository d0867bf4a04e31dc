"""`attn-cli html` without a browser: what goes into the page, its size, and the command.

The page's script is tested in a real browser in test_html_browser.py; here the
data is read back from the file in Python and compared with the traces.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

import invoking
import numpy as np
import pytest
import torch
from html_support import chunk, hand_trace, manifest, toy

from attn_cli.formats.document import run_dict
from attn_cli.render import page as page_module
from attn_cli.render.page import build, notebook_html, page, reproduce_command
from attn_cli.render.page.chunks import MASKED
from attn_cli.render.terminal.fit import spans as ranges

invoke = functools.partial(invoking.invoke, code=None, command=("html",))

MB = 2**20


def test_weights_are_the_traces_to_four_decimals_with_masked_cells_marked() -> None:
    trace = toy("I saw a saw", heads=2, causal=True)
    html = page([trace], command="attn-cli html x")
    m = manifest(html)
    stored = chunk(html, m["traces"][0]["layers"][0]["weights"])  # (H, T, T)
    data = run_dict(trace)
    for h, head in enumerate(data["layers"][0]["heads"]):
        for q, row in enumerate(head["weights"]):
            for k, w in enumerate(row):
                if k > q:
                    assert stored[h, q, k] == MASKED
                else:
                    assert f"{stored[h, q, k] / 10**4:.4f}" == f"{w:.4f}"


def test_raw_scores_are_exact_and_the_scaled_ones_derivable() -> None:
    trace = toy("Life is short, eat dessert first", heads=2, causal=True)
    html = page([trace], command="c")
    layer = manifest(html)["traces"][0]["layers"][0]
    assert layer["scaled"] == "derived"
    raw = chunk(html, layer["scores"])
    assert np.array_equal(raw, trace.layers[0].scores.numpy())
    derived = raw / np.float32(layer["divisor"])  # what the page's fround(raw / fround(divisor)) gives
    visible = ~trace.layers[0].mask.numpy()
    assert np.array_equal(derived[:, visible], trace.layers[0].scaled_scores.numpy()[:, visible])


def test_ties_round_to_even_as_python_does() -> None:
    trace = hand_trace(33, layers=1, heads=1, causal=False)
    uniform = torch.full((1, 33, 33), 1 / 33)
    uniform[0, 0, :] = 0
    uniform[0, 0, :32] = 1 / 32  # 0.03125 exactly: a tie at the 5th decimal
    layer = trace.layers[0]
    fake = type(layer)(**{**{f: getattr(layer, f) for f in layer.__dataclass_fields__}, "weights": uniform})
    html = page([type(trace)(trace.text, trace.tokens, trace.model, (fake,))], command="c")
    stored = chunk(html, manifest(html)["traces"][0]["layers"][0]["weights"])
    assert stored[0, 0, 0] == 312 and f"{0.03125:.4f}" == "0.0312"


def test_everything_is_inline_and_nothing_can_be_fetched() -> None:
    html = page([toy(heads=2, causal=True)], command="c")
    assert "Content-Security-Policy" in html and "default-src 'none'" in html
    assert not re.search(r"""(src|href)=["'](?!data:)""", html)
    assert "http://" not in html and "https://" not in html


def test_token_text_cannot_close_the_script() -> None:
    html = page([toy("a </script><script>alert(1)</script> b <!-- c")], command="attn-cli html '</script>'")
    assert html.count("</script>") == html.count("<script")
    m = manifest(html)
    assert "</script><script>alert(1)</script>" in m["traces"][0]["text"]
    assert m["command"] == "attn-cli html '</script>'"


def test_a_6_by_12_model_on_20_tokens_is_well_under_3_mb_and_complete() -> None:
    result = build([hand_trace(20, layers=6, heads=12)], command="c")
    assert len(result.html.encode()) < 1 * MB
    assert result.left_out == ()
    layers = manifest(result.html)["traces"][0]["layers"]
    assert all(layer["weights"] and layer["scores"] for layer in layers)


def test_512_tokens_keep_the_page_under_20_mb_by_leaving_out_layers_and_say_so() -> None:
    result = build([hand_trace(512, layers=12, heads=12, head_dim=32, causal=False)], command="c")  # an encoder: nothing masked
    assert len(result.html.encode()) <= 20 * MB
    layers = manifest(result.html)["traces"][0]["layers"]
    kept = [layer["index"] for layer in layers if layer["weights"]]
    assert kept[0] == 0 and kept == list(range(len(kept))) and len(kept) < 12
    assert any(f"layers {len(kept)}-11 are left out" in note and "--max-size" in note for note in result.left_out)
    assert manifest(result.html)["leftOut"] == list(result.left_out)


def test_no_limit_keeps_every_layer() -> None:
    result = build([hand_trace(128, layers=3, heads=4)], command="c", max_bytes=None)
    assert result.left_out == ()
    assert all(layer["scores"] for layer in manifest(result.html)["traces"][0]["layers"])


def test_a_tiny_budget_still_keeps_the_first_layer_and_says_the_page_is_over() -> None:
    result = build([hand_trace(64, layers=2, heads=2)], command="c", max_bytes=10_000)
    layers = manifest(result.html)["traces"][0]["layers"]
    assert layers[0]["weights"] and not layers[1]["weights"] and not layers[0]["scores"]
    assert any("over" in note for note in result.left_out)


def test_large_chunks_are_gzipped_small_ones_plain() -> None:
    html = page([hand_trace(256, layers=1, heads=2), toy()], command="c")
    encodings = {m["encoding"] for m in manifest(html)["chunks"].values()}
    assert encodings == {"gzip-shuffled", "raw"}


def test_same_traces_same_bytes() -> None:
    assert page([toy(heads=2)], command="c") == page([toy(heads=2)], command="c")


def test_several_texts_share_one_page() -> None:
    m = manifest(page([toy("I saw a saw"), toy("Life is short")], command="c"))
    assert [t["text"] for t in m["traces"]] == ["I saw a saw", "Life is short"]


def test_header_of_a_trained_trace_names_the_model_and_special_tokens_are_flagged() -> None:
    m = manifest(page([hand_trace(12, layers=3, heads=2)], command="c"))["traces"][0]
    header = dict(m["header"])
    assert header["model"] == "hand/mini-bert" and header["layers"] == "3"
    assert m["tokens"]["special"][0] and m["tokens"]["special"][-1] and not any(m["tokens"]["special"][1:-1])
    assert m["vectors"] is None  # the step-by-step view is the toy's


@pytest.mark.parametrize(("indexes", "text"), [([0], "0"), ([0, 1, 2, 5, 7, 8], "0-2, 5, 7-8"), ([3, 4], "3-4")])
def test_ranges(indexes: list[int], text: str) -> None:
    assert ranges(indexes) == text


def test_reproduce_command_from_the_python_api() -> None:
    assert reproduce_command(toy("I saw a saw", heads=2, causal=True)) == "attn-cli html 'I saw a saw' --tokenizer words --heads 2 --causal"
    assert reproduce_command(hand_trace(8, layers=2, heads=1)).endswith("--model hand/mini-bert")


def test_notebook_html_is_a_sandboxed_srcdoc_iframe() -> None:
    import attn_cli

    trace = attn_cli.trace("I saw a saw", tokenizer="words", heads=2)
    frame = trace._repr_html_()
    assert frame.startswith("<iframe") and 'sandbox="allow-scripts"' in frame and "srcdoc=" in frame
    assert "allow-same-origin" not in frame
    assert frame == notebook_html([trace])


# -- the command --

def test_default_name_comes_from_the_text(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = invoke("I saw a saw", "-t", "words")
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == "i-saw-a-saw.html"
    assert (tmp_path / "i-saw-a-saw.html").read_text(encoding="utf-8").startswith("<!doctype html>")


def test_an_existing_folder_gets_the_default_name(tmp_path: Path) -> None:
    result = invoke("Life is short", "-t", "words", "-o", str(tmp_path))
    assert result.exit_code == 0 and (tmp_path / "life-is-short.html").is_file()


@pytest.mark.parametrize(
    ("name", "code", "message"),
    [("page.png", 2, "end the name in .html"), ("page", 2, "has no extension"), ("nowhere/page.html", 1, "does not exist")],
)
def test_bad_output_names_fail_before_running(tmp_path: Path, name: str, code: int, message: str) -> None:
    result = invoke("I saw a saw", "-t", "words", "-o", str(tmp_path / name))
    assert result.exit_code == code and message in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_the_page_shows_a_command_that_makes_it_again(tmp_path: Path) -> None:
    first = tmp_path / "a.html"
    assert invoke("I saw a saw", "-t", "words", "--heads", "2", "--causal", "--seed", "7", "-o", str(first)).exit_code == 0
    command = manifest(first.read_text(encoding="utf-8"))["command"]
    assert command == f"attn-cli html 'I saw a saw' --output {first} --tokenizer words --seed 7 --heads 2 --causal"
    import shlex

    again = tmp_path / "b.html"
    assert invoke(*shlex.split(command)[2:], "-o", str(again)).exit_code == 0  # a later -o wins
    made_again = manifest(again.read_text(encoding="utf-8"))
    assert made_again.pop("command") == command.replace(str(first), str(again))  # the same page but for its name
    original = manifest(first.read_text(encoding="utf-8"))
    original.pop("command")
    assert made_again == original


def test_stdin_text_goes_into_the_command(tmp_path: Path) -> None:
    out = tmp_path / "p.html"
    assert invoke("-", "-t", "words", "-o", str(out), input="I saw a saw\n").exit_code == 0
    assert manifest(out.read_text(encoding="utf-8"))["command"] == f"attn-cli html 'I saw a saw' --output {out} --tokenizer words"


def test_lines_make_one_page_with_every_text(tmp_path: Path) -> None:
    source = tmp_path / "texts.txt"
    source.write_text("I saw a saw\n\nLife is short\n", encoding="utf-8")
    out = tmp_path / "p.html"
    result = invoke("--file", str(source), "--lines", "-t", "words", "-o", str(out))
    assert result.exit_code == 0 and result.stdout.strip() == str(out)
    m = manifest(out.read_text(encoding="utf-8"))
    assert [t["text"] for t in m["traces"]] == ["I saw a saw", "Life is short"]
    assert m["command"] == f"attn-cli html --file {source} --lines --output {out} --tokenizer words"


def test_left_out_data_is_a_note_on_stderr(tmp_path: Path) -> None:
    text = " ".join(f"w{i % 97}" for i in range(300))
    result = invoke(text, "-t", "words", "--heads", "4", "--max-size", "0.05", "-o", str(tmp_path / "p.html"))
    assert result.exit_code == 0
    assert "note: the raw and scaled scores of layer 0 are left out" in result.stderr and "--max-size" in result.stderr


def test_open_without_a_display_says_where_the_file_is(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sys
    import webbrowser

    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setattr(webbrowser, "open", lambda url: pytest.fail("no browser should be started"))
    out = tmp_path / "p.html"
    result = invoke("I saw a saw", "-t", "words", "-o", str(out), "--open")
    assert result.exit_code == 0 and f"open {out.resolve()} in a browser" in result.stderr


def test_open_hands_the_file_url_to_the_browser(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import webbrowser

    opened: list[str] = []
    monkeypatch.setenv("DISPLAY", ":0")
    monkeypatch.setattr(webbrowser, "open", lambda url: opened.append(url) or True)
    out = tmp_path / "p.html"
    assert invoke("I saw a saw", "-t", "words", "-o", str(out), "--open").exit_code == 0
    assert opened == [out.resolve().as_uri()]


def test_a_failed_write_leaves_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(*args: object, **kwargs: object) -> str:
        raise KeyboardInterrupt

    monkeypatch.setattr(page_module, "_shell", fail)
    result = invoke("I saw a saw", "-t", "words", "-o", str(tmp_path / "p.html"))
    assert result.exit_code == 130 and list(tmp_path.iterdir()) == []
