"""The streamed JSON and CSV writers (issue 18): the same bytes as the whole-text writer
they replaced (``export_reference``), over toy, hand-built and checkpoint traces, at the
module's block size and at blocks of a few numbers; and the memory they need."""

from __future__ import annotations

import dataclasses
import functools
import io
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import TESTS

import export_reference as reference
from attn_cli.sources.checkpoint import open_checkpoint
from attn_cli.sources.toy.config import Config
from attn_cli.records.hiding import HideSpec, hide
from attn_cli.sources.toy.source import ToySource
from attn_cli.formats import document, export, numbers, rows
from attn_cli.records.trace import Trace

from html_support import hand_trace

WORDS = "the cat sat on the mat because it was warm and the dog did not mind at all".split()


def words(n: int) -> str:
    return " ".join(WORDS[i % len(WORDS)] for i in range(n))


def toy(text: str, **options) -> Trace:
    return ToySource(Config(tokenizer="words", max_tokens=5000, **options)).run(text)


def checkpoint_trace(folder: Path, hidden: str | None = None) -> Trace:
    ckpt = open_checkpoint(str(folder))
    text = "The cat sat on the mat, and the dog sat on the log."
    tokens = ckpt.tokenizer.encode(text)
    layers = ckpt.trace(tokens, [0, 1, 2])
    return hide(Trace(text, tokens, ckpt.info, tuple(layers), chosen_heads=(1, 3)), HideSpec.parse(hidden))


TRACES: dict[str, Callable[..., Trace]] = {
    "toy, one head": lambda: toy("I saw a saw"),
    "toy, heads, causal, dropout, out-proj, bias, 90 tokens": lambda: toy(
        words(90), heads=3, d_k=3, d_v=5, causal=True, dropout=0.3, out_proj=True, qkv_bias=True
    ),
    "toy, 300 tokens (stats in blocks of 256 rows)": lambda: toy(words(300), heads=2, causal=True),
    "toy, unscaled, temperature, no projections": lambda: toy("café naïve 日本語 and more " * 5, heads=2, scale=False, temperature=0.5, projections=False),
    "hand-built, 3 layers x 4 heads, special tokens hidden": lambda: hide(hand_trace(40, layers=3, heads=4), HideSpec.parse("special")),
    "hand-built, not causal, a word hidden, 2 heads of 4": lambda: dataclasses.replace(
        hide(hand_trace(30, layers=2, heads=4, causal=False), HideSpec.parse("cat")), chosen_heads=(0, 2)
    ),
}


def written(write: Callable[..., None], run: Trace, **options) -> bytes:
    out = io.BytesIO()
    write(run, out, **options)
    return out.getvalue()


def reference_texts(run: Trace) -> dict[str, Any]:
    """What the writers before streaming (tests/export_reference.py) make of ``run``."""
    return {
        "json": reference.to_json(run), "csv": reference.to_csv(run), "csv, index 2": reference.to_csv(run, header=False, index=2),
        "rows": reference.csv_rows(run, 1), "dict": reference.run_dict(run),
    }  # fmt: skip


@functools.cache
def named_reference(name: str) -> dict[str, Any]:
    """reference_texts of TRACES[name], once for both block sizes (the reference writes no blocks)."""
    return reference_texts(TRACES[name]())


def assert_same_bytes(run: Trace, want: dict[str, Any]) -> None:
    made = export.to_json(run)
    assert made == want["json"]
    assert written(export.write_json, run) == want["json"].encode("utf-8")
    assert export.to_csv(run) == want["csv"]
    assert written(export.write_csv, run, header=False, index=2) == want["csv, index 2"].encode("utf-8")
    assert rows.csv_rows(run, 1) == want["rows"]
    assert document.run_dict(run) == want["dict"] == json.loads(made)


@pytest.mark.parametrize("block", [numbers.BLOCK_NUMBERS, 7], ids=["blocks", "tiny blocks"])
@pytest.mark.parametrize("name", TRACES)
def test_streamed_bytes_are_the_whole_writers_bytes(name: str, block: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(numbers, "BLOCK_NUMBERS", block)
    assert_same_bytes(TRACES[name](), named_reference(name))


@pytest.mark.parametrize("hidden", [None, "0,5"])
def test_streamed_bytes_of_a_checkpoint(gpt2_folder: Path, hidden: str | None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(numbers, "BLOCK_NUMBERS", 50)
    run = checkpoint_trace(gpt2_folder, hidden)
    assert_same_bytes(run, reference_texts(run))


class Recorder(io.BytesIO):
    def __init__(self) -> None:
        super().__init__()
        self.sizes: list[int] = []

    def write(self, data: bytes) -> int:  # type: ignore[override]
        self.sizes.append(len(data))
        return super().write(data)


@pytest.mark.parametrize("write", [export.write_json, export.write_csv], ids=["json", "csv"])
def test_the_text_is_written_in_pieces_of_about_write_chars(write, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(export, "WRITE_CHARS", 10_000)
    run = toy(words(120), heads=2)
    out = Recorder()
    write(run, out)
    assert len(out.sizes) > 10
    widest = 2 * max(len(s) for s in numbers.StreamedTable(run.layers[0].weights[0]).json_pieces())  # one piece past the mark
    assert all(size < 10_000 + widest for size in out.sizes), out.sizes


def test_a_derived_table_is_not_kept_on_the_layer() -> None:
    """Raw scores a table has not asked for are derived for the export and let go, so a
    trace of many layers never holds every layer's at once."""
    run = hand_trace(20, layers=3, heads=2)
    export.write_json(run, io.BytesIO())
    assert all("scores" not in vars(layer) for layer in run.layers)
    kept = run.layers[0].scores  # a renderer asked: the export reads the layer's own
    assert document._raw_scores(run.layers[0]) is kept


def test_a_table_that_is_not_json_is_refused_like_json_dumps() -> None:
    run = toy("I saw a saw")
    run.layers[0].weights[0, 3, 0] = float("nan")
    with pytest.raises(ValueError, match="Out of range float values are not JSON compliant"):
        export.write_json(run, io.BytesIO())
    with pytest.raises(ValueError, match="Out of range float values are not JSON compliant"):
        reference.to_json(run)


def test_a_stack_of_tables_and_a_vector_are_written_as_json_dumps_writes_them() -> None:
    stack = torch.randn(3, 70, 70)  # over a block: row blocks inside each table
    assert numbers.StreamedTable(stack).json() == json.dumps([[[float(format(v, ".9")) for v in row] for row in m] for m in stack.tolist()])
    assert numbers.StreamedTable(torch.tensor([1.5, -2.0])).json() == "[1.5, -2.0]"


# -- the memory a streamed export holds ------------------------------------------------

PEAK_SCRIPT = """
import json, sys, tracemalloc
sys.path.insert(0, {tests!r})
from attn_cli.sources.toy.config import Config
from attn_cli.sources.toy.source import ToySource
from attn_cli.formats import export
import export_reference

how, fmt, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
run = ToySource(Config(tokenizer="words", max_tokens=n)).run(" ".join(f"w{{i}}" for i in range(n)))

class Sink:
    size = 0
    def write(self, data):
        self.size += len(data)
        return len(data)

sink = Sink()
tracemalloc.start()
if how == "streamed":
    (export.write_json if fmt == "json" else export.write_csv)(run, sink)
else:  # the writer before streaming: the whole text, then one write
    sink.write((export_reference.to_json(run) if fmt == "json" else export_reference.to_csv(run)).encode("utf-8"))
print(json.dumps({{"peak": tracemalloc.get_traced_memory()[1], "size": sink.size}}))
"""


def traced_peak(how: str, fmt: str, n_tokens: int) -> tuple[int, int]:
    """(tracemalloc's peak while the export is written into a sink that keeps nothing,
    the bytes written), in a fresh interpreter. tracemalloc sees Python's objects (the
    text, the floats, the rows), not torch's tensors, which the trace holds either way."""
    script = PEAK_SCRIPT.format(tests=str(TESTS))
    done = subprocess.run([sys.executable, "-c", script, how, fmt, str(n_tokens)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    return result["peak"], result["size"]


@pytest.mark.parametrize(("fmt", "n_tokens"), [("json", 460), ("csv", 250)])  # about 10 MB of text each
def test_a_streamed_export_holds_a_block_not_the_text(fmt: str, n_tokens: int) -> None:
    peak, size = traced_peak("streamed", fmt, n_tokens)
    old_peak, old_size = traced_peak("whole", fmt, n_tokens)
    assert size == old_size > 9 * 2**20
    assert peak < 6 * 2**20 < size  # a few WRITE_CHARS of text (3.5 MB for JSON, 5 for CSV at 20 MB of text too), not the text
    assert old_peak > size > peak  # the control: the whole text (and its pieces) at once


def test_a_large_streamed_export_gives_freed_blocks_back(monkeypatch: pytest.MonkeyPatch) -> None:
    from attn_cli.runtime import allocator

    calls: list[int] = []
    monkeypatch.setattr(allocator, "return_freed_memory", lambda: calls.append(1) or True)
    run = toy(words(50))
    export.write_json(run, io.BytesIO())
    assert calls == []  # a small export keeps glibc's faster default
    monkeypatch.setattr(export, "LARGE_EXPORT_BYTES", numbers.export_bytes(run) - numbers.STREAM_BYTES)
    export.write_csv(run, io.BytesIO())
    assert calls == [1]
