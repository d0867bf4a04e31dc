"""Documents: `attn-cli run` over a long text (statistics for every head and 16 rows, in blocks)
against transformers' forward of the same ids: SDPA (keeps no weights), and eager with
`output_attentions` (the tables) where it fits. Whole processes, side by side.

    python bench/long_context.py                       # T = 8192, 4 layers
    python bench/long_context.py --tokens 8192 32768   # more lengths (32k: about an hour here)
    python bench/long_context.py --layers 28 --tokens 8192
    python bench/long_context.py --device cuda         # every side on the GPU

The checkpoint is Qwen3-0.6B-shaped (1024 wide, 16 query and 8 key/value heads of 128,
3072-wide MLP, q/k norms, positions to 40,960), cut to --layers layers, random but sharpened as
the tests' checkpoints are, with a small byte-level tokenizer; built once in the temporary
folder. The text is words until the tokenizer gives exactly T tokens; every side reads the
same ids. Each side runs in a fresh interpreter (median of --rounds, the sides taking turns, so
that a machine whose speed drifts, a shared one, drifts for every side); its wall time and peak
RSS (ru_maxrss, from wait4), and on a GPU torch's peak allocation, are kept; the time ratio is
the median of each round's. Eager's memory for its tables is the (layers, heads, T, T) float32
it returns; where that does not fit the machine, its row says what it would need instead of
running. The outputs are deleted at the end. Not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORDS = "the cat sat on the mat because it was warm and the dog did not mind at all really".split()
QWEN3_06B = dict(
    hidden_size=1024, num_attention_heads=16, num_key_value_heads=8, head_dim=128, intermediate_size=3072,
    max_position_embeddings=40960, rope_theta=1_000_000.0, tie_word_embeddings=True,
)  # fmt: skip

# a transformers forward of the ids in argv[2] (a file of JSON ints) on argv[3], printing its GPU peak
FORWARD = """
import json, sys, torch, transformers
folder, ids, device, kind = sys.argv[1], json.load(open(sys.argv[2])), sys.argv[3], sys.argv[4]
model = transformers.AutoModelForCausalLM.from_pretrained(folder, attn_implementation=kind, dtype=torch.float32).to(device).eval()
with torch.no_grad():
    out = model.model(torch.tensor([ids], device=device), output_attentions=kind == "eager")
    if kind == "eager":
        kept = [a.to("cpu") for a in out.attentions]
print(json.dumps({"gpu_peak": torch.cuda.max_memory_allocated() if device == "cuda" else 0}))
"""


def env() -> dict[str, str]:
    e = dict(os.environ, PYTHONPATH=str(ROOT), TOKENIZERS_PARALLELISM="false", TRANSFORMERS_VERBOSITY="error")
    e.pop("PYTHONDONTWRITEBYTECODE", None)
    return e


def checkpoint(layers: int) -> Path:
    folder = Path(tempfile.gettempdir()) / f"attn-cli-bench-qwen3-06b-{layers}"
    if not (folder / "config.json").is_file():
        sys.path.insert(0, str(ROOT / "tests"))
        import checkpoints

        checkpoints.build_decoder(folder, model_type="qwen3", num_hidden_layers=layers, **QWEN3_06B)
    return folder


def ids_of(folder: Path, n_tokens: int) -> tuple[str, list[int]]:
    """A text of exactly ``n_tokens`` tokens and its ids."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    words = (WORDS * (n_tokens // len(WORDS) + 2))[: n_tokens]
    while len(tokenizer.encode(" ".join(words)).ids) > n_tokens:
        words = words[: len(words) - max(1, (len(tokenizer.encode(" ".join(words)).ids) - n_tokens) // 2)]
    text = " ".join(words)
    while len(tokenizer.encode(text + " a").ids) <= n_tokens:
        text += " a"
    ids = tokenizer.encode(text).ids
    if len(ids) != n_tokens:
        raise SystemExit(f"the text has {len(ids)} tokens, not {n_tokens}")
    return text, ids


def measure(cmd: list[str]) -> tuple[float, int, int]:
    """(wall seconds, peak RSS bytes, GPU peak bytes) of one fresh process."""
    start = time.perf_counter()
    child = subprocess.Popen(cmd, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(child.pid, 0)
    seconds = time.perf_counter() - start
    out, err = child.stdout.read().decode(), child.stderr.read().decode()
    if status != 0:
        raise SystemExit(f"{' '.join(cmd[:6])} ... failed: {err[-2000:]}")
    gpu = json.loads(out.strip().splitlines()[-1])["gpu_peak"] if out.strip().startswith("{") else 0
    return seconds, usage.ru_maxrss * 1024, gpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, nargs="+", default=[8192])
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    folder = checkpoint(args.layers)
    work = Path(tempfile.mkdtemp(prefix="attn-cli-bench-long-"))
    try:
        return _measured(args, folder, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _measured(args: argparse.Namespace, folder: Path, work: Path) -> int:
    print(f"Qwen3-0.6B shape, {args.layers} layers, {args.device}, {args.rounds} round(s), python {sys.version.split()[0]}, "
          f"load {os.getloadavg()[0]:.2f}")  # fmt: skip
    print("| T | side | wall s | peak RSS GiB | GPU peak GiB | time ratio | memory over SDPA |")
    print("|---|---|---|---|---|---|---|")
    for n in args.tokens:
        text, ids = ids_of(folder, n)
        (work / "doc.txt").write_text(text)
        (work / "ids.json").write_text(json.dumps(ids))
        sides = {
            "attn-cli run (stats, 16 rows)": [sys.executable, "-m", "attn_cli", "run", "--model", str(folder), "--file", str(work / "doc.txt"),
                                             "--query", "last:16", "--no-tables", "--device", args.device, "-F", "json", "-o", str(work / "out.json")],
            "transformers SDPA": [sys.executable, "-c", FORWARD, str(folder), str(work / "ids.json"), args.device, "sdpa"],
        }  # fmt: skip
        tables = args.layers * QWEN3_06B["num_attention_heads"] * n * n * 4
        from attn_cli.runtime import budget

        if (budget.available_bytes() or 0) * 0.8 > 2 * tables:
            sides["transformers eager, output_attentions"] = [*sides["transformers SDPA"][:-1], "eager"]
        runs: dict[str, list[tuple[float, int, int]]] = {name: [] for name in sides}
        for _ in range(args.rounds):  # the sides in turn, round after round: a machine that slows down slows every side
            for name, cmd in sides.items():
                runs[name].append(measure(cmd))
        base = {k: statistics.median(r[i] for r in runs["transformers SDPA"]) for i, k in enumerate(("t", "m", "g"))}
        for name, got in runs.items():
            t, m, g = (statistics.median(r[i] for r in got) for i in range(3))
            over = (g - base["g"]) if args.device == "cuda" else (m - base["m"])
            ratio = statistics.median(mine[0] / sdpa[0] for mine, sdpa in zip(got, runs["transformers SDPA"]))  # round by round
            print(f"| {n} | {name} | {t:.1f} | {m / 2**30:.2f} | {g / 2**30:.2f} | {ratio:.2f} | {over / 2**30:+.2f} GiB |", flush=True)
        if "transformers eager, output_attentions" not in sides:
            print(f"| {n} | transformers eager, output_attentions | not run: its tables alone take {tables / 2**30:.1f} GiB | | | | |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
