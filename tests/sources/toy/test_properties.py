"""Properties that hold for every valid configuration and every text (hypothesis).

The engine is driven through ``ToySource`` (text -> tokens -> X -> attention)
and checked against invariants and against torch's own
``scaled_dot_product_attention``; odd texts go through the ``words`` tokenizer
and through the command line, where the only acceptable answers are valid JSON
(exit 0) or one ``attn-cli: error:`` line with a documented exit code.
"""

from __future__ import annotations

import csv
import io
import json
import math
import unicodedata

import pytest
import torch
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from invoking import invoke

from attn_cli.sources.toy.model import self_attention
from attn_cli.sources.toy.config import Config, Init, Positional
from attn_cli.runtime.errors import AttnCliError, ExitStatus, InputError
from attn_cli.sources.toy.source import ToySource
from attn_cli.records.trace import Trace
from attn_cli.formats.document import run_dict
from attn_cli.formats.export import to_csv, to_json
from attn_cli.text.tokenizers import WordTokenizer, get_tokenizer

# No deadlines: the machine is shared and torch's first calls are slow; the
# example counts keep the whole file to a few seconds of work.
# derandomize: the same examples on every run, so CI cannot flicker.
ENGINE = settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
CLI = settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

DOCUMENTED = {int(status) for status in ExitStatus}
WORD = st.text(alphabet="abcdefghijklmnop", min_size=1, max_size=6)
SENTENCES = st.lists(WORD, min_size=1, max_size=10).map(" ".join)


@st.composite
def configs(draw: st.DrawFn, *, temperature: st.SearchStrategy[float] | None = None) -> Config:
    """Any valid configuration, with the words tokenizer."""
    heads = draw(st.integers(1, 4))
    projections = draw(st.booleans())
    d_k = d_v = None
    if projections and draw(st.booleans()):
        # Explicit per-head sizes: d_model need not be a multiple of heads.
        d_k, d_v = draw(st.integers(1, 8)), draw(st.integers(1, 8))
        d_model = draw(st.integers(1, 24))
    else:
        d_model = heads * draw(st.integers(1, 6))
    return Config(
        tokenizer="words",
        seed=draw(st.integers(0, 2**63 - 1)),
        d_model=d_model,
        d_k=d_k,
        d_v=d_v,
        heads=heads,
        causal=draw(st.booleans()),
        scale=draw(st.booleans()),
        temperature=draw(temperature if temperature is not None else st.floats(0.05, 20.0)),
        dropout=draw(st.sampled_from([0.0, 0.3])),
        qkv_bias=projections and draw(st.booleans()),
        out_proj=draw(st.booleans()),
        init=draw(st.sampled_from(list(Init))),
        projections=projections,
        positional=draw(st.sampled_from(list(Positional))),
    )


def assert_attention_invariants(run: Trace) -> None:
    result = run.layers[0]
    n_tokens = len(run.tokens)
    heads = run.model.config.heads
    weights = result.weights  # (H, T, T)
    assert weights.shape == (heads, n_tokens, n_tokens)
    assert result.context.shape == (heads, n_tokens, run.model.config.d_v)
    assert torch.isfinite(weights).all()
    assert torch.isfinite(result.context).all() and torch.isfinite(result.output).all()
    assert (weights >= 0).all()
    # The softmax rows sum to 1; the dropped weights' rows do not (that is dropout).
    assert (weights.sum(dim=-1) - 1).abs().max().item() <= 1e-5
    above = torch.ones(n_tokens, n_tokens, dtype=torch.bool).triu(1)  # (T, T)
    if run.model.config.causal:
        assert (weights[:, above] == 0).all(), "a masked cell is not exactly 0"
        assert weights[:, 0, 0].eq(1).all(), "the first query can only see itself"
    p = run.model.config.dropout
    if p == 0:
        assert result.dropped_weights is None
        return
    dropped = result.dropped_weights  # (H, T, T)
    assert dropped is not None and dropped.shape == weights.shape
    kept = dropped != 0  # (H, T, T)
    # each cell is zeroed, or keeps its weight scaled by 1/(1 - p)
    torch.testing.assert_close(dropped[kept], weights[kept] / (1 - p), rtol=1e-6, atol=0)
    if run.model.config.causal:
        assert (dropped[:, above] == 0).all(), "dropout brought back a masked cell"
    # the dropped weights, not the softmax's, mix the values
    torch.testing.assert_close(result.context, dropped @ result.values, rtol=1e-6, atol=1e-6)


@ENGINE
@given(config=configs(), text=SENTENCES)
def test_engine_invariants_and_torch_reference(config: Config, text: str) -> None:
    run = ToySource(config).run(text)
    assert_attention_invariants(run)
    result = run.layers[0]
    # Independent reference: torch's fused attention on the engine's own Q, K, V
    # (without dropout: its random draws are not the engine's).
    expected = torch.nn.functional.scaled_dot_product_attention(
        result.queries, result.keys, result.values, is_causal=run.model.config.causal, scale=1.0 / result.divisor
    )  # (H, T, Dv)
    undropped = result.context if result.dropped_weights is None else result.weights @ result.values  # (H, T, Dv)
    # Fused kernels round differently; near one-hot rows (large scores) amplify it.
    torch.testing.assert_close(undropped, expected, rtol=1e-3, atol=1e-3 * max(1.0, result.values.abs().max().item()))
    if not run.model.config.out_proj:
        assert torch.equal(result.output, result.concat)


@ENGINE
@given(config=configs(), text=SENTENCES, noise=st.integers(0, 2**31))
def test_same_seed_gives_identical_output(config: Config, text: str, noise: int) -> None:
    pipeline = ToySource(config)
    first = pipeline.run(text)
    runs = []
    for again in (ToySource(config), pipeline):  # drawn afresh, and from the pipeline's cached draws
        torch.manual_seed(noise)  # whatever the global generator did in between
        torch.rand(7)
        runs.append(again.run(text))
    for second in runs:
        for name in ("queries", "keys", "values", "scores", "weights", "context", "output"):
            assert torch.equal(getattr(first.layers[0], name), getattr(second.layers[0], name)), name
        assert torch.equal(first.layers[0].x, second.layers[0].x)
        if config.dropout:  # dropout draws from the seeded generator too
            assert torch.equal(first.layers[0].dropped_weights, second.layers[0].dropped_weights)
        else:
            assert first.layers[0].dropped_weights is None and second.layers[0].dropped_weights is None


@ENGINE
@given(
    config=configs(temperature=st.floats(min_value=5e-324, max_value=1e300, exclude_min=False)),
    text=SENTENCES,
)
@example(config=Config(tokenizer="words", temperature=1e-40, init=Init.normal), text="a b c")
@example(config=Config(tokenizer="words", temperature=1e300), text="a b c")
def test_any_positive_temperature_is_finite_or_refused(config: Config, text: str) -> None:
    """The whole valid range of --temperature: finite weights that sum to 1, or a typed error."""
    try:
        run = ToySource(config).run(text)
    except AttnCliError as err:
        assert "--temperature" in str(err)
        assert err.exit_status == ExitStatus.USAGE
        return
    assert_attention_invariants(run)


@ENGINE
@given(
    heads=st.integers(1, 4),
    per_head=st.integers(1, 8),
    n_tokens=st.integers(1, 12),
    causal=st.booleans(),
    seed=st.integers(0, 2**32),
)
def test_self_attention_on_raw_input_matches_torch(heads: int, per_head: int, n_tokens: int, causal: bool, seed: int) -> None:
    """``self_attention`` alone, on a random X, against nn.MultiheadAttention's own math:
    the same W_q, W_k, W_v packed into in_proj_weight give the same weights."""
    d_model = heads * per_head
    config = Config(heads=heads, causal=causal, seed=seed, d_model=d_model).resolved(d_model)
    x = torch.randn(n_tokens, d_model, generator=torch.Generator().manual_seed(seed))  # (T, D)
    result = self_attention(x, config)
    mha = torch.nn.MultiheadAttention(d_model, heads, bias=False, batch_first=True)
    p = result.projections
    with torch.no_grad():
        mha.in_proj_weight.copy_(torch.cat([p.query.weight, p.key.weight, p.value.weight]))  # (3D, D)
        mha.out_proj.weight.copy_(torch.eye(d_model))
        mask = torch.ones(n_tokens, n_tokens, dtype=torch.bool).triu(1) if causal else None  # (T, T)
        out, weights = mha(x[None], x[None], x[None], attn_mask=mask, need_weights=True, average_attn_weights=False)
    torch.testing.assert_close(result.weights, weights[0], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(result.output, out[0], rtol=1e-4, atol=1e-5)


NUMERIC_TABLES = (
    "input", "queries", "keys", "values", "context", "scores", "scaled_scores", "weights", "dropped_weights", "output",
)


def json_numbers(data: dict) -> dict[tuple[str, str, int, int], float]:
    """(table, head, row, col) -> value, from the JSON object."""
    cells: dict[tuple[str, str, int, int], float] = {}

    def add(table: str, head: str, matrix: list[list[float | None]]) -> None:
        for i, row in enumerate(matrix):
            for j, value in enumerate(row):
                cells[(table, head, i, j)] = -math.inf if value is None else value

    add("input", "", data["layers"][0]["input"])
    add("output", "", data["layers"][0]["output"])
    for head in data["layers"][0]["heads"]:
        for table in NUMERIC_TABLES:
            if table in head:
                add(table, str(head["head"]), head[table])
    return cells


def csv_numbers(text: str) -> dict[tuple[str, str, int, int], float]:
    cells = {}
    for row in csv.DictReader(io.StringIO(text)):
        if row["table"] in NUMERIC_TABLES:
            cells[(row["table"], row["head"], int(row["row"]), int(row["col"]))] = float(row["value"])
    return cells


@ENGINE
@given(config=configs(), text=SENTENCES)
def test_output_numbers_do_not_depend_on_the_format(config: Config, text: str) -> None:
    run = ToySource(config).run(text)
    from_json = json_numbers(json.loads(to_json(run)))
    from_csv = csv_numbers(to_csv(run))
    assert from_json == from_csv  # the same cells, bit for bit
    assert json.loads(to_json(run)) == run_dict(run)  # the Python API's dict is what the JSON says
    # ... and both give back the engine's float32 values, not rounded copies.
    h = run.model.config.heads - 1
    n = len(run.tokens)

    def table(name: str) -> torch.Tensor:
        return torch.tensor([from_json[(name, str(h), i, j)] for i in range(n) for j in range(n)], dtype=torch.float32)

    assert torch.equal(table("weights"), run.layers[0].weights[h].flatten())
    has_dropped = any(key[0] == "dropped_weights" for key in from_json)
    assert has_dropped == (run.model.config.dropout > 0)
    if has_dropped:
        assert torch.equal(table("dropped_weights"), run.layers[0].dropped_weights[h].flatten())


# --------------------------------------------------------------------------- odd texts

ODD_PIECES = [
    "😀", "👩‍👩‍👧", "🇫🇷", "e\u0301", "\u0301", "a\u0308\u0308\u0308", "שלום", "مرحبا", "\u200f", "\u202e",
    "\x00", "\x01", "\x07", "\x1b[31m", "\x7f", "\u200b", "\ufeff", "<|endoftext|>", "<|fim_prefix|>",
    "<|im_start|>", "[b]", "[/]", "\t", "\r", "\n", " ", "\u00a0", "\u3000", "\u2028", "—", "...", "\ud7ff",
    "word", "Life", "is", "short",
]
ODD_TEXTS = st.lists(st.sampled_from(ODD_PIECES) | st.text(max_size=5), min_size=0, max_size=12).map("".join)


@settings(max_examples=150, deadline=None, derandomize=True)
@given(text=ODD_TEXTS)
@example(text="")
@example(text=" \t\r\n\u00a0\u3000")
@example(text="\x00\x00")
@example(text="<|endoftext|>")
def test_words_tokenizer_takes_any_text(text: str) -> None:
    try:
        tokens = WordTokenizer().encode(text)
    except InputError as err:
        assert str(err)
        return
    assert len(tokens) >= 1
    assert all(0 <= i < tokens.vocab_size for i in tokens.ids)
    assert all(t and not t.isspace() for t in tokens.texts)
    assert len(set(tokens.labels)) == len(tokens.labels), "labels must tell repeats apart"
    for label in tokens.labels:  # nothing that moves a terminal's cursor or colour
        assert not any(unicodedata.category(c) == "Cc" for c in label), repr(label)


@CLI
@given(text=ODD_TEXTS)
@example(text="<|endoftext|>")
@example(text="Life is <|endoftext|> short\x00")
def test_gpt2_tokenizer_takes_any_text(rank_dir, text: str) -> None:
    tokenizer = get_tokenizer("gpt2")
    try:
        tokens = tokenizer.encode(text)
    except InputError:
        assert text == ""
        return
    assert all(0 <= i < 50257 for i in tokens.ids)
    if "<|endoftext|>" in text:
        assert 50256 not in tokens.ids, "user text must not become the special token"
    for label in tokens.labels:
        assert not any(unicodedata.category(c) == "Cc" for c in label), repr(label)


def check_cli_answer(result, *, expect_json: bool = True) -> dict | None:
    """Exit 0 with valid JSON, or one documented error line; never a traceback."""
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.stderr
    if result.exit_code == 0:
        if not expect_json:
            return None
        data = json.loads(result.stdout)
        n = len(data["tokens"])
        assert n >= 1
        for head in data["layers"][0]["heads"]:
            assert len(head["weights"]) == n and all(len(r) == n for r in head["weights"])
            assert all(abs(sum(r) - 1) <= 1e-5 for r in head["weights"])
        return data
    assert result.exit_code in DOCUMENTED, result.exit_code
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("attn-cli: error: "), result.stderr
    assert result.stdout == ""
    return None


@CLI
@given(text=ODD_TEXTS, via=st.sampled_from(["stdin", "argument"]))
@example(text="", via="argument")
@example(text="   \t  ", via="stdin")
@example(text="\x00", via="argument")
@example(text="<|endoftext|>", via="stdin")
@example(text="-", via="argument")
@example(text="--help", via="argument")
@example(text="\ufeffbom first\r\n", via="stdin")
def test_cli_answers_any_text_with_json_or_one_line(text: str, via: str) -> None:
    opts = ["run", "--tokenizer", "words", "--format", "json"]
    if via == "stdin":
        result = invoke(*opts, "-", input=text.encode("utf-8", errors="surrogatepass"), code=None)
    else:
        result = invoke(*opts, "--", text, input=b"", code=None)
    data = check_cli_answer(result)
    if data is not None:
        assert data["tokenizer"] == "words"
        # A trailing newline and a leading byte-order mark are not part of the text.
        unwrapped = text.removeprefix("\ufeff")
        assert data["text"] in {text, text.rstrip("\r\n"), unwrapped, unwrapped.rstrip("\r\n")}
    elif text.strip() and any(unicodedata.category(c)[0] in "LNS" for c in text):
        pytest.fail(f"a text with words was refused: {result.stderr!r}")


@CLI
@given(text=ODD_TEXTS)
@example(text="\x1b[31mred\x1b[0m [b]bold[/b] \x00 \u202eevil")
def test_table_output_never_passes_control_characters_to_the_terminal(text: str) -> None:
    result = invoke("run", "--tokenizer", "words", "--format", "table", "-", input=text.encode("utf-8", errors="surrogatepass"), code=None)
    check_cli_answer(result, expect_json=False)
    if result.exit_code == 0:
        bad = {c for c in result.stdout if unicodedata.category(c) == "Cc" and c != "\n"}
        assert not bad, f"raw control characters in the table: {sorted(map(repr, bad))}"


@settings(max_examples=15, deadline=None, derandomize=True)
@given(text=SENTENCES, heads=st.sampled_from([1, 2, 4]), causal=st.booleans())
def test_cli_json_and_csv_carry_the_same_numbers(text: str, heads: int, causal: bool) -> None:
    opts = ["run", "--tokenizer", "words", "--heads", str(heads), *(["--causal"] if causal else []), "--", text]
    as_json = invoke(*opts[:-2], "--format", "json", *opts[-2:], code=None)
    as_csv = invoke(*opts[:-2], "--format", "csv", *opts[-2:], code=None)
    assert as_json.exit_code == 0 and as_csv.exit_code == 0, as_json.stderr + as_csv.stderr
    assert json_numbers(json.loads(as_json.stdout)) == csv_numbers(as_csv.stdout)
