"""--emit-python: the emitted scripts run on their own and give attn-cli's numbers.

The scripts are run in real subprocesses. torch takes seconds to import here, so
the configurations are batched: one process runs every script of the table
(each with fresh globals, through runpy, as ``python script.py --json`` would),
one runs a script exactly as a user does, and one (integration) a tiktoken one.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import MKL_AVX2, SPLIT_SUMS_ON_THREADS, TESTS
from invoking import invoke

from attn_cli.sources.toy.config import Config, Init, Positional
from attn_cli.sources.toy.emit import script_for, script_for_run
from attn_cli.sources.toy.script import float32_literal as _float32
from attn_cli.sources.toy.source import ToySource
from attn_cli.formats.document import run_dict
from attn_cli.formats.export import to_json

LIFE = "Life is short, eat dessert first"
LONG = " ".join(f"w{i % 97}" for i in range(400))  # long enough for a BLAS to split its sums across threads
ODD_TEXT = 'He said "stop" \\ and\nleft; it\'s fine — or not 😀 ' * 4  # quotes, backslash, newline, emoji, long

# (id, text, config): every option the script has to reproduce.
CASES: list[tuple[str, str, dict[str, Any]]] = [
    ("single", LIFE, {}),
    ("causal-multihead-outproj", "I saw a saw", {"causal": True, "heads": 2, "out_proj": True}),
    ("naive", "I saw a saw and a saw", {"projections": False, "heads": 2, "causal": True}),
    ("uniform-bias-book-sizes", LIFE, {"init": Init.uniform, "qkv_bias": True, "d_k": 24, "d_v": 28}),
    # issue 18's two reports: numbers that moved between 1 and 2 threads
    ("long-uniform-bias-book-sizes", LONG, {"init": Init.uniform, "qkv_bias": True, "d_k": 24, "d_v": 28, "max_tokens": 1000}),
    ("long-normal-wide", LONG, {"init": Init.normal, "d_model": 64, "max_tokens": 1000}),
    ("normal-outproj-temperature", "Hello shiny sun", {"init": Init.normal, "out_proj": True, "temperature": 0.7, "heads": 4}),
    ("noscale-temperature-seed", "The cat sat on the mat", {"scale": False, "temperature": 2.0, "seed": 7, "d_model": 12, "heads": 3}),
    ("dropout-bias-positional", ODD_TEXT, {"dropout": 0.25, "qkv_bias": True, "heads": 2, "positional": Positional.sinusoidal}),
    ("user-embeddings", "one two three", {"embeddings": "EMB", "out_proj": True, "causal": True}),
    # No weights to draw, yet attn-cli reseeds before the (empty) draw and dropout carries on from there.
    ("naive-dropout", LIFE, {"projections": False, "dropout": 0.3}),
    ("naive-causal-multihead-dropout", "I saw a saw and a saw", {"projections": False, "causal": True, "heads": 2, "dropout": 0.5}),
    ("user-embeddings-naive-dropout", "one two three", {"embeddings": "EMB", "projections": False, "dropout": 0.4}),
]
DROPOUT_CASES = [name for name, _, options in CASES if options.get("dropout")]

# Drives each script as `python script.py --json` would, in one interpreter.
# Each starts from a differently seeded global generator, as a fresh process
# would from its own: a script that forgets to seed cannot pass by inheriting
# the state the previous one left. Each starts on two threads too, torch's
# default on a 2-core machine, whatever the script before it set.
DRIVER = """
import contextlib, io, runpy, sys
import torch
for k, (script, out) in enumerate(zip(sys.argv[1::2], sys.argv[2::2])):
    torch.manual_seed(7919 * (k + 1))
    torch.set_num_threads(2)
    sys.argv = [script, "--json"]
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        runpy.run_path(script, run_name="__main__")
    with open(out, "w", encoding="utf-8") as f:
        f.write(buffer.getvalue())
"""

# attn-cli's own numbers for every case, computed in a process with the same
# environment as the scripts' (the BLAS code path is chosen per process).
EXPECT = """
import json, os, sys
from pathlib import Path
sys.path[:0] = sys.argv[1].split(os.pathsep)  # this file's folder and tests/ (its conftest and helpers)
import test_emit
from attn_cli.sources.toy.source import ToySource
tmp = Path(sys.argv[2])
wants = {name: test_emit.expected(ToySource(test_emit._config(options, tmp)).run(text)) for name, text, options in test_emit.CASES}
Path(sys.argv[3]).write_text(json.dumps(wants), encoding="utf-8")
"""

# Both processes on two threads, with conftest's thread-sensitive BLAS settings (and
# SPLIT_SUMS_ON_THREADS run first: products on two threads sum in another order on any machine).
THREAD_SENSITIVE = {**MKL_AVX2, "OMP_NUM_THREADS": "2"}


def _config(options: dict[str, Any], tmp_path: Path) -> Config:
    options = dict(options, tokenizer="words")
    if options.get("embeddings") == "EMB":
        path = tmp_path / "emb.json"
        # values that are not exact in float32, one that underflows, and negatives
        path.write_text(json.dumps([[0.1, -2.5, 1e-3, 3.3333333], [1e-50, 0.7, -0.2, 12.0], [-1.1, 0.0, 5.5, -0.333]]))
        options["embeddings"] = path
    return Config(**options)


def _python(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, encoding="utf-8", timeout=300, env=env
    )


def assert_same(got: Any, want: Any, where: str = "") -> None:
    """Same structure; every number the same float32 (JSON carries 9 significant
    digits, which read back as exactly the float32 written); None (masked)
    exactly where attn-cli has None."""
    if isinstance(want, dict):
        for key, value in want.items():
            assert key in got, f"{where}: the script has no {key!r}"
            assert_same(got[key], value, f"{where}.{key}")
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), f"{where}: length {len(got)} != {len(want)}"
        for i, (g, w) in enumerate(zip(got, want)):
            assert_same(g, w, f"{where}[{i}]")
    elif isinstance(want, float) and not isinstance(want, bool):
        assert isinstance(got, (int, float)) and struct.pack("<f", got) == struct.pack("<f", want), f"{where}: {got!r} != {want!r}"
    else:
        assert got == want, f"{where}: {got!r} != {want!r}"


def expected(run) -> dict[str, Any]:
    data = run_dict(run)
    keep = ("text", "tokenizer", "vocab_size")
    out = {key: data[key] for key in keep}
    tables = ("head", "queries", "keys", "values", "scores", "scaled_scores", "weights", "dropped_weights", "context")
    (layer,) = data["layers"]
    heads = [{k: head[k] for k in tables if k in head} for head in layer["heads"]]
    out["layers"] = [{"layer": 0, "input": layer["input"], "heads": heads, "concat": layer["concat"], "output": layer["output"]}]
    out["tokens"] = [{k: t[k] for k in ("position", "id", "text")} for t in data["tokens"]]
    return out


def _scripts_and_wants(tmp_path: Path, strip: str | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """Every case's script run as a user runs it, and attn-cli's numbers, both in a
    THREAD_SENSITIVE environment: (what the scripts printed, what attn-cli computed).
    ``strip``: a line to leave out of every script (for the negative control)."""
    env = dict(os.environ, **THREAD_SENSITIVE)
    args = []
    for name, text, options in CASES:
        script = tmp_path / f"{name}.py"
        source = script_for_run(ToySource(_config(options, tmp_path)).run(text))
        if strip is not None:
            assert strip in source
            source = source.replace(strip, "")
        script.write_text(source, encoding="utf-8")
        args += [str(script), str(tmp_path / f"{name}.json")]
    proc = _python("-c", SPLIT_SUMS_ON_THREADS + DRIVER, *args, env=env)
    assert proc.returncode == 0, proc.stderr
    proc = _python(
        "-c", SPLIT_SUMS_ON_THREADS + EXPECT, os.pathsep.join([str(Path(__file__).parent), str(TESTS)]), str(tmp_path), str(tmp_path / "wants.json"), env=env
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    got = {name: json.loads((tmp_path / f"{name}.json").read_text(encoding="utf-8")) for name, _, _ in CASES}
    return got, json.loads((tmp_path / "wants.json").read_text(encoding="utf-8"))


def test_emitted_scripts_reproduce_every_configuration(tmp_path: Path) -> None:
    """Every number of every case, the same float32 as attn-cli's: the scripts start
    on two threads, in the environment where the thread count changes sums."""
    got, wants = _scripts_and_wants(tmp_path)
    for name, want in wants.items():
        assert_same(got[name], want, name)
    # the cases really exercise what they claim
    for name in DROPOUT_CASES:  # dropout zeroed some weights that the softmax made positive
        heads = wants[name]["layers"][0]["heads"]
        assert any(w > 0 and d == 0 for head in heads for wr, dr in zip(head["weights"], head["dropped_weights"]) for w, d in zip(wr, dr)), name
    assert any(v is None for row in wants["naive"]["layers"][0]["heads"][0]["scaled_scores"] for v in row)
    assert len(wants["normal-outproj-temperature"]["layers"][0]["heads"]) == 4
    assert len(wants["uniform-bias-book-sizes"]["layers"][0]["heads"][0]["values"][0]) == 28


def test_without_one_thread_the_scripts_would_disagree(tmp_path: Path) -> None:
    """The negative control: the same scripts without their set_num_threads(1) line run
    on two threads, and some number comes out other than attn-cli's. Without it the
    test above could pass only because this machine's BLAS never reorders a sum (the
    products here reorder theirs on two threads on any machine: SPLIT_SUMS_ON_THREADS)."""
    got, wants = _scripts_and_wants(tmp_path, strip="torch.set_num_threads(1)")
    differ = []
    for name, want in wants.items():
        try:
            assert_same(got[name], want, name)
        except AssertionError:
            differ.append(name)
    assert {"long-uniform-bias-book-sizes", "long-normal-wide"} <= set(differ), differ  # the cases issue 18 reported
    # and all the others but at most one: user-embeddings-naive-dropout's products are sums of three or
    # four numbers that may round alike in either order (or not, where the BLAS fuses multiply and add)
    assert len(differ) >= len(CASES) - 1, differ


def test_the_script_writes_the_numbers_as_attn_cli_does(tmp_path: Path) -> None:
    """The README's example: `python attention.py --json` and `run --format json` give the same text."""
    run = ToySource(Config(tokenizer="words", heads=2, causal=True)).run(LIFE)
    script = tmp_path / "attention.py"
    script.write_text(script_for_run(run), encoding="utf-8")
    proc = _python(str(script), "--json")
    assert proc.returncode == 0, proc.stderr
    got, want = json.loads(proc.stdout)["layers"][0], json.loads(to_json(run))["layers"][0]
    for table in ("queries", "scores", "scaled_scores", "weights", "context"):
        assert json.dumps(got["heads"][1][table]) == json.dumps(want["heads"][1][table]), table
    assert json.dumps(got["output"]) == json.dumps(want["output"])


def test_a_script_runs_as_a_user_runs_it(tmp_path: Path) -> None:
    """`attn-cli run ... --emit-python > attention.py; python attention.py` prints readable tensors."""
    result = invoke("run", "I saw a saw", "-t", "words", "--heads", "2", "--causal", "--emit-python")
    script = tmp_path / "attention.py"
    script.write_text(result.stdout, encoding="utf-8")
    proc = _python(str(script))
    assert proc.returncode == 0, proc.stderr
    run = ToySource(Config(tokenizer="words", heads=2, causal=True)).run("I saw a saw")
    assert "tokens: [(0, 'I'), (2, 'saw'), (1, 'a'), (2, 'saw')]" in proc.stdout
    assert "head 1: attention weights (T, T), rows sum to 1:" in proc.stdout
    assert f"{run.layers[0].weights[1, 1, 0].item():.4f}" in proc.stdout  # torch's own printing, precision 4
    assert "output (T, H*Dv):" in proc.stdout


@pytest.mark.parametrize("command", ["run", "explain", "heatmap"])
def test_every_command_emits_the_same_script(command: str) -> None:
    argv = [command, LIFE, "-t", "words", "--heads", "2", "--out-proj", "--seed", "5", "--emit-python"]
    result = invoke(*argv)
    run = ToySource(Config(tokenizer="words", heads=2, out_proj=True, seed=5)).run(LIFE)
    assert result.stdout == script_for_run(run)
    compile(result.stdout, "attention.py", "exec")


def test_emit_python_with_lines_covers_the_first_text_and_says_so() -> None:
    result = invoke("run", "-", "--lines", "-t", "words", "--emit-python", input="I saw a saw\nHello shiny sun\n")
    assert "text = 'I saw a saw'" in result.stdout
    assert "Hello" not in result.stdout
    assert "first of 2 texts" in result.stderr


def test_emit_python_refuses_an_output_file(tmp_path: Path) -> None:
    result = invoke("run", LIFE, "-t", "words", "--emit-python", "-o", str(tmp_path / "x.json"), code=2)
    assert "redirect" in result.stderr
    assert not (tmp_path / "x.json").exists()


def test_emit_python_reports_the_tokenizer_fallback_on_stderr() -> None:
    result = invoke("run", LIFE, "--emit-python")  # default gpt2 is not available offline in tests
    assert "'words' tokenizer is used" in result.stderr
    assert "unicodedata.category" in result.stdout and "import tiktoken" not in result.stdout


def test_script_text_reads_like_the_tutorials() -> None:
    run = ToySource(Config(tokenizer="words", heads=2, causal=True, out_proj=True, init=Init.uniform)).run(LIFE)
    script = script_for_run(run)
    for line in (
        "torch.manual_seed(seed)",
        "embedding = torch.nn.Embedding(vocab_size, d_model)  # (V, D)",
        "W_query = torch.rand(heads * d_k, d_model)  # (H*Dk, D)",
        "W_out = torch.rand(heads * d_v, heads * d_v)  # (H*Dv, H*Dv)",
        "attn_scores = queries @ keys.transpose(-2, -1)  # (H, T, Dk) @ (H, Dk, T) -> (H, T, T)",
        "scaled_scores = attn_scores / math.sqrt(d_k)  # (H, T, T)",
        "mask = torch.ones(T, T, dtype=torch.bool).triu(diagonal=1)  # (T, T), True above the diagonal",
        "output = concat @ W_out.T + b_out  # (T, H*Dv) @ (H*Dv, H*Dv) -> (T, H*Dv)",
    ):
        assert line in script, line
    assert script.count("torch.manual_seed(seed)") == 2  # the seed contract: embeddings, then weights
    steps = [line.split(".")[0] for line in script.splitlines() if line[:4] in {f"# {n}." for n in range(1, 10)}]
    assert steps == [f"# {n}" for n in range(1, 10)]
    # every line that makes a tensor carries a shape comment
    for line in script.splitlines():
        if line.startswith(("Q = ", "K = ", "V = ", "queries", "keys =", "values =", "attn_", "context_vecs", "concat =", "X = ")):
            assert "# (" in line or line.endswith("("), line


@pytest.mark.parametrize(
    "options",
    [{}, {"projections": False}, {"projections": False, "dropout": 0.3}, {"projections": False, "out_proj": True},
     {"embeddings": "EMB", "projections": False, "dropout": 0.3}],
)
def test_the_script_reseeds_before_the_weights_even_when_there_are_none(options: dict[str, Any], tmp_path: Path) -> None:
    """attn-cli's make_projections always reseeds; dropout then draws from that state."""
    run = ToySource(_config(options, tmp_path)).run("one two three")
    lines = script_for_run(run).splitlines()
    seeds = [k for k, line in enumerate(lines) if line.startswith("torch.manual_seed(seed)")]
    assert len(seeds) == (1 if "embeddings" in options else 2)  # the embedding table's, then the weights'
    x_made = max(k for k, line in enumerate(lines) if line.startswith("X = "))
    projected = next(k for k, line in enumerate(lines) if line.startswith(("Q = ", "Q = K = V = X")))
    assert x_made < seeds[-1] < projected


def test_no_torch_no_tiktoken_in_the_script_for_words() -> None:
    run = ToySource(Config(tokenizer="words")).run(LIFE)
    imports = [line for line in script_for_run(run).splitlines() if line.startswith(("import", "from"))]
    assert imports == ["import json", "import math", "import sys", "import unicodedata", "import torch"]


def test_script_for_needs_a_resolved_config() -> None:
    run = ToySource(Config(tokenizer="words")).run(LIFE)
    with pytest.raises(ValueError, match="resolved"):
        script_for(LIFE, run.tokens, Config(tokenizer="words"))


@pytest.mark.parametrize("value", [0.1, -2.5, 1e-3, 3.3333333, 1e-50, 12.0, -0.0, 3.4e38, 1.17549435e-38, 1e-45, 2 / 3])
def test_float_literals_read_back_as_the_same_float32(value: float) -> None:
    as_f32 = struct.unpack("<f", struct.pack("<f", value))[0]
    literal = _float32(as_f32)
    assert struct.pack("<f", float(literal)) == struct.pack("<f", as_f32)
    assert len(literal) <= 16


@pytest.mark.integration
def test_tiktoken_script_reproduces_gpt2_tokens(rank_dir: Path, tmp_path: Path) -> None:
    """The script loads gpt2 with plain tiktoken.get_encoding, from a cache laid out as tiktoken wants it."""
    from attn_cli.text.rankfiles import rank_files

    cache = tmp_path / "tiktoken-cache"
    cache.mkdir()
    for rank_file in rank_files("gpt2"):
        shutil.copy(rank_dir / rank_file.name, cache / hashlib.sha1(rank_file.url.encode()).hexdigest())
    text = "Life is short,<|endoftext|> eat dessert first"  # the special-token string stays plain text
    run = ToySource(Config(tokenizer="gpt2", heads=2, causal=True)).run(text)
    assert run.tokens.tokenizer == "gpt2"
    script = tmp_path / "attention.py"
    script.write_text(script_for_run(run), encoding="utf-8")
    env = dict(os.environ, TIKTOKEN_CACHE_DIR=str(cache))
    proc = _python(str(script), "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    assert_same(got, expected(run), "gpt2")
    assert got["vocab_size"] == 50257
