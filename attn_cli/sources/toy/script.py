"""The sections of an ``--emit-python`` script, each a function of the run that returns its
lines: tokenizing, the embeddings, the weights' seeded draws, the projections, the attention,
the heads combined, the report (the matrices, or ``--json``'s keys), with the helpers that
write Python literals that read back exactly."""

from __future__ import annotations

import dataclasses
import struct

from attn_cli.records.tokens import Tokens
from attn_cli.sources.toy.config import Config, Init, Positional
from attn_cli.text.tokenizers import WORDS

# Longest line of a string literal in the script; longer texts are split into
# adjacent literals, which Python joins back into the same string.


# Longest line of a string literal in the script; longer texts are split into
# adjacent literals, which Python joins back into the same string.
LITERAL_WIDTH = 72


@dataclasses.dataclass(frozen=True)
class ScriptRun:
    """What a script reproduces: one text, its tokens, the resolved config, and the
    user's embedding rows (None for the seeded table)."""

    text: str
    tokens: Tokens
    c: Config
    embeddings: list[list[float]] | None


class Lines:
    """The lines one step writes."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def add(self, *lines: str) -> None:
        self.lines.extend(lines)


def tokenize_lines(r: ScriptRun) -> list[str]:
    out = Lines()
    tokens = r.tokens
    if tokens.tokenizer == WORDS:
        out.add(
            "# 1. Tokenize with the tutorials' word tokenizer: drop punctuation, split on",
            "#    whitespace; a word's id is its position in the sorted vocabulary of this text.",
            'words = "".join(ch for ch in text if not unicodedata.category(ch).startswith("P")).split()',
            "vocabulary = sorted(set(words))",
            "ids = [vocabulary.index(word) for word in words]",
            "token_texts = words",
            "vocab_size = len(vocabulary)  # rows of the embedding table",
        )
    else:
        out.add(
            f"# 1. Tokenize with tiktoken's {tokens.tokenizer} encoding. tiktoken downloads its rank",
            "#    files once and caches them in $TIKTOKEN_CACHE_DIR (default <tmp>/data-gym-cache);",
            "#    attn-cli leaves its copies there too, so after one attn-cli run this works offline.",
            *load_encoding_lines(tokens.tokenizer),
            'ids = encoding.encode(text, disallowed_special=())  # "<|endoftext|>" in the text is plain text',
            'token_texts = [encoding.decode_single_token_bytes(i).decode("utf-8", errors="backslashreplace") for i in ids]',
            f"vocab_size = encoding.n_vocab  # {tokens.vocab_size} rows of the embedding table",
        )
    out.add(
        f"assert ids == {list(tokens.ids)!r}, \"these are not the tokens attn-cli used\""
        if len(tokens) <= 64
        else "assert len(ids) == {}, \"these are not the tokens attn-cli used\"".format(len(tokens)),
        "T = len(ids)",
        "",
    )
    return out.lines


def embed_lines(r: ScriptRun) -> list[str]:
    out = Lines()
    c = r.c
    if r.embeddings is None:
        out.add(
            "# 2. Embed: right after seeding, an nn.Embedding(vocab_size, d_model) table of N(0, 1)",
            "#    draws; token i gets row ids[i], so repeated tokens get the same vector.",
            "torch.manual_seed(seed)",
            "embedding = torch.nn.Embedding(vocab_size, d_model)  # (V, D)",
            "X = embedding(torch.tensor(ids))  # (T, D)",
        )
    else:
        out.add(
            f"# 2. Embed: the rows of {safe_comment(str(c.embeddings))}, one per token, as attn-cli read them (float32).",
            "X = torch.tensor(",
            "    [",
            *(f"        [{', '.join(float32_literal(v) for v in row)}]," for row in r.embeddings),
            "    ],",
            "    dtype=torch.float32,",
            ")  # (T, D)",
        )
    if c.positional is Positional.sinusoidal:
        out.add(
            "",
            "# Positions: add the sinusoidal encodings of \"Attention Is All You Need\" (section 3.5),",
            "# PE[pos, 2i] = sin(pos / 10000^(2i/D)), PE[pos, 2i+1] = cos(pos / 10000^(2i/D)).",
            "position = torch.arange(T, dtype=torch.float32).unsqueeze(1)  # (T, 1)",
            "div = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model))  # (ceil(D/2),)",
            "pe = torch.zeros(T, d_model)  # (T, D)",
            "pe[:, 0::2] = torch.sin(position * div)",
            "pe[:, 1::2] = torch.cos(position * div)[:, : d_model // 2]",
            "X = X + pe  # (T, D)",
        )
    out.add("")
    return out.lines


def weights_lines(r: ScriptRun) -> list[str]:
    out = Lines()
    # attn-cli reseeds right before the weights even when there are none to
    # draw, and dropout draws from the generator as that leaves it: so the
    # script reseeds here always, or its dropout would differ (and, with
    # --embeddings, not be seeded at all).
    c = r.c
    seed = "torch.manual_seed(seed)" + ("  # dropout (after step 7) draws after these weights" if c.dropout else "")
    if not c.projections and not c.out_proj:
        out.add(
            "# Seed again where attn-cli draws its weights, though this run has none (no projections,",
            "# no output projection): " + ("the dropout after step 7 draws from here." if c.dropout else "the generator is left as attn-cli leaves it."),
            "torch.manual_seed(seed)",
            "",
        )
        return out.lines
    out.add(
        ("# 3. Weights" if c.projections else "# Weights") + ": seed again, then draw them in attn-cli's order"
        + (": W_q, W_k, W_v" if c.projections else "")
        + (", then W_o" if c.out_proj and c.projections else (": W_o only" if c.out_proj else ""))
        + ".",
    )
    out.add(f"#    {init_comment(c.init)}")
    out.add(seed)
    if c.projections:
        draw_lines(out, c.init, "query", "d_model", "heads * d_k", "(H*Dk, D)", "(H*Dk,)", c.qkv_bias)
        draw_lines(out, c.init, "key", "d_model", "heads * d_k", "(H*Dk, D)", "(H*Dk,)", c.qkv_bias)
        draw_lines(out, c.init, "value", "d_model", "heads * d_v", "(H*Dv, D)", "(H*Dv,)", c.qkv_bias)
    if c.out_proj:
        draw_lines(out, c.init, "out", "heads * d_v", "heads * d_v", "(H*Dv, H*Dv)", "(H*Dv,)", True)
    out.add("")
    return out.lines


def draw_lines(out: Lines, init: Init, name: str, d_in: str, d_out: str, w_shape: str, b_shape: str, bias: bool) -> None:
    """Lines that draw one weight (and its bias) as ``init`` says."""
    if init is Init.linear:
        out.add(
            f"{name}_layer = torch.nn.Linear({d_in}, {d_out}, bias={bias})",
            f"W_{name} = {name}_layer.weight  # {w_shape}",
        )
        if bias:
            out.add(f"b_{name} = {name}_layer.bias  # {b_shape}")
        return
    draw = "torch.rand" if init is Init.uniform else "torch.randn"
    out.add(f"W_{name} = {draw}({d_out}, {d_in})  # {w_shape}")
    if bias:
        out.add(f"b_{name} = {draw}({d_out})  # {b_shape}, drawn right after its weight")


def project_lines(r: ScriptRun) -> list[str]:
    out = Lines()
    c = r.c
    if c.projections:
        bias = " + b_{}".format
        out.add(
            "# Project: every token's vector times each weight matrix, as nn.Linear does (x W^T + b).",
            f"Q = X @ W_query.T{bias('query') if c.qkv_bias else ''}  # (T, D) @ (D, H*Dk) -> (T, H*Dk)",
            f"K = X @ W_key.T{bias('key') if c.qkv_bias else ''}  # (T, D) @ (D, H*Dk) -> (T, H*Dk)",
            f"V = X @ W_value.T{bias('value') if c.qkv_bias else ''}  # (T, D) @ (D, H*Dv) -> (T, H*Dv)",
        )
    else:
        out.add(
            "# 3. No projections (the tutorials' naive attention): queries, keys and values are X itself.",
            "Q = K = V = X  # (T, D), D = H*Dk = H*Dv",
        )
    out.add(
        "",
        "# Split into heads: head h takes columns h*Dk .. (h+1)*Dk - 1 (h*Dv .. for the values).",
        "queries = Q.reshape(T, heads, d_k).transpose(0, 1)  # (T, H*Dk) -> (T, H, Dk) -> (H, T, Dk)",
        "keys = K.reshape(T, heads, d_k).transpose(0, 1)  # (T, H*Dk) -> (T, H, Dk) -> (H, T, Dk)",
        "values = V.reshape(T, heads, d_v).transpose(0, 1)  # (T, H*Dv) -> (T, H, Dv) -> (H, T, Dv)",
        "",
    )
    return out.lines


def attend_lines(r: ScriptRun) -> list[str]:
    out = Lines()
    c = r.c
    out.add(
        "# 4. Raw scores: every query dotted with every key.",
        "attn_scores = queries @ keys.transpose(-2, -1)  # (H, T, Dk) @ (H, Dk, T) -> (H, T, T)",
        "",
    )
    out.add(*scaling_lines(c))
    if not c.causal:
        out.add("", "# 6. No causal mask: every query sees every key.")
    else:
        out.add(
            "",
            "# 6. Causal mask: query i may not look at keys after i; exp(-inf) = 0 in the softmax.",
            "mask = torch.ones(T, T, dtype=torch.bool).triu(diagonal=1)  # (T, T), True above the diagonal",
            'scaled_scores = scaled_scores.masked_fill(mask, float("-inf"))  # (H, T, T)',
        )
    out.add(
        "",
        "# 7. Softmax over the keys: each row becomes weights that sum to 1.",
        "attn_weights = torch.softmax(scaled_scores, dim=-1)  # (H, T, T)",
        "",
    )
    if c.dropout:
        out.add(
            "# Dropout on the weights (seeded: the generator carries on from the "
            + ("weight draws);" if c.projections or c.out_proj else "reseed before step 3);"),
            "# survivors are scaled by 1 / (1 - dropout).",
            "dropped_weights = torch.nn.functional.dropout(attn_weights, p=dropout, training=True)  # (H, T, T)",
            "",
            "# 8. Context vectors: each query's weighted sum of the value vectors.",
            "context_vecs = dropped_weights @ values  # (H, T, T) @ (H, T, Dv) -> (H, T, Dv)",
        )
    else:
        out.add(
            "# 8. Context vectors: each query's weighted sum of the value vectors.",
            "context_vecs = attn_weights @ values  # (H, T, T) @ (H, T, Dv) -> (H, T, Dv)",
        )
    out.add("")
    return out.lines


def scaling_lines(c: Config) -> tuple[str, ...]:
    """Step 5 of the script: how the scores are scaled before the softmax."""
    if c.scale and c.temperature != 1.0:
        return (
            "# 5. Scale by 1/sqrt(d_k), which keeps the softmax out of saturation, and by 1/temperature.",
            "scaled_scores = attn_scores / (math.sqrt(d_k) * temperature)  # (H, T, T)",
        )
    if c.scale:
        return (
            "# 5. Scale by 1/sqrt(d_k): a sum of d_k products spreads like sqrt(d_k), and large",
            "#    inputs would saturate the softmax.",
            "scaled_scores = attn_scores / math.sqrt(d_k)  # (H, T, T)",
        )
    if c.temperature != 1.0:
        return (
            "# 5. No 1/sqrt(d_k) scaling (--no-scale); only the temperature divides the scores.",
            "scaled_scores = attn_scores / temperature  # (H, T, T)",
        )
    return (
        "# 5. No scaling (--no-scale): the raw scores go straight into the softmax.",
        "scaled_scores = attn_scores  # (H, T, T)",
    )


def combine_lines(r: ScriptRun) -> list[str]:
    out = Lines()
    c = r.c
    out.add(
        "# 9. Concatenate the heads side by side" + (", then the output projection." if c.out_proj else "."),
        "concat = context_vecs.transpose(0, 1).reshape(T, -1)  # (H, T, Dv) -> (T, H, Dv) -> (T, H*Dv)",
        "output = concat @ W_out.T + b_out  # (T, H*Dv) @ (H*Dv, H*Dv) -> (T, H*Dv)"
        if c.out_proj
        else "output = concat  # (T, H*Dv), no output projection",
        "",
    )
    return out.lines


def report_lines(r: ScriptRun) -> list[str]:
    out = Lines()
    dropped = ',\n                        "dropped_weights": numbers(dropped_weights[h])' if r.c.dropout else ""
    tokenizer = r.tokens.tokenizer
    out.add(
        "",
        "def numbers(matrix):",
        '    """float32 values as attn-cli writes them: rounded to 9 significant digits, which read back as the same float32."""',
        "    return [[float(format(v, \".9\")) for v in row] for row in matrix.tolist()]",
        "",
        "",
        "def finite_or_none(matrix):",
        '    """Masked softmax inputs are -inf; JSON has no infinity, so they become null."""',
        "    return [[v if math.isfinite(v) else None for v in row] for row in numbers(matrix)]",
        "",
        "",
        'if "--json" in sys.argv[1:]:',
        "    result = {",
        '        "text": text,',
        f'        "tokenizer": "{tokenizer}",',
        '        "vocab_size": vocab_size,',
        '        "tokens": [{"position": i, "id": t, "text": s} for i, (t, s) in enumerate(zip(ids, token_texts))],',
        '        "layers": [',
        "            {",
        '                "layer": 0,',
        '                "input": numbers(X),',
        '                "heads": [',
        "                    {",
        '                        "head": h,',
        '                        "queries": numbers(queries[h]),',
        '                        "keys": numbers(keys[h]),',
        '                        "values": numbers(values[h]),',
        '                        "scores": numbers(attn_scores[h]),',
        '                        "scaled_scores": finite_or_none(scaled_scores[h]),',
        '                        "weights": numbers(attn_weights[h]),',
        f'                        "context": numbers(context_vecs[h]){dropped},',
        "                    }",
        "                    for h in range(heads)",
        "                ],",
        '                "concat": numbers(concat),',
        '                "output": numbers(output),',
        "            }",
        "        ],",
        "    }",
        "    print(json.dumps(result, ensure_ascii=False, allow_nan=False))",
        "else:",
        "    torch.set_printoptions(precision=4, sci_mode=False, linewidth=120)",
        '    print("tokens:", list(zip(ids, token_texts)))',
        '    print("X, the embeddings (T, D):", X, sep="\\n")',
        "    for h in range(heads):",
        '        print(f"\\nhead {h}: raw scores Q K^T (T, T):", attn_scores[h], sep="\\n")',
        '        print(f"head {h}: attention weights (T, T), rows sum to 1:", attn_weights[h], sep="\\n")',
        '        print(f"head {h}: context vectors (T, Dv):", context_vecs[h], sep="\\n")',
        '    print("\\noutput (T, H*Dv):", output, sep="\\n")',
    )
    return out.lines




def load_encoding_lines(name: str) -> list[str]:
    if name != "gpt2":
        return [f"encoding = tiktoken.get_encoding({name!r})"]
    # attn-cli builds gpt2 from r50k_base's file when it has it (the same encoding).
    return [
        "#    gpt2 is r50k_base under another name (the same ranks, pattern and special token);",
        "#    attn-cli reads whichever of their files it has, and so does this script.",
        "try:",
        '    encoding = tiktoken.get_encoding("r50k_base")',
        "except Exception:  # r50k_base.tiktoken is not in the cache: gpt2's own two files are",
        '    encoding = tiktoken.get_encoding("gpt2")',
    ]


def describe(c: Config, tokens: Tokens) -> str:
    return safe_comment(", ".join(c.describe(tokens.tokenizer)))


def init_comment(init: Init) -> str:
    if init is Init.linear:
        return "Each is an nn.Linear's weight (Kaiming uniform), and its bias when it has one."
    if init is Init.uniform:
        return "Each is torch.rand(out, in), uniform on [0, 1), as in the \"Life is short\" walk-through."
    return "Each is torch.randn(out, in), standard normal."


def string_assignment(name: str, value: str) -> list[str]:
    """``name = "..."``, split over lines for long texts (adjacent literals join up)."""
    if len(value) <= LITERAL_WIDTH and "\n" not in value:
        return [f"{name} = {value!r}"]
    pieces: list[str] = []
    for line in value.splitlines(keepends=True):
        pieces.extend(line[i : i + LITERAL_WIDTH] for i in range(0, len(line), LITERAL_WIDTH))
    return [f"{name} = (", *(f"    {piece!r}" for piece in pieces), ")"]


def float32_literal(value: float) -> str:
    """The shortest decimal that reads back as the same float32."""
    target = struct.pack("<f", value)
    for digits in range(1, 10):
        text = f"{value:.{digits}g}"
        if struct.pack("<f", float(text)) == target:
            return repr(float(text))
    return repr(value)


def safe_comment(name: str) -> str:
    """A file name fit for a comment or docstring: no line breaks, quotes or backslashes."""
    return "".join(ch if ch.isprintable() and ch not in "\\\"'" else "?" for ch in name)
