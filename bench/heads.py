"""`attn-cli heads` against `attn-cli run --model` on the same text: whole processes.

    python bench/heads.py            # 3 rounds per command (several minutes on 2 cores)
    python bench/heads.py --quick    # 1 round: a smoke check, not a result

The checkpoint is GPT-2-small-sized (12 layers x 12 heads, 768 wide, 1024
positions), random but sharpened as the tests' checkpoints are (tests/checkpoints.py:
default init gives near-uniform attention), built once with transformers in the
temporary folder. The text is cut to exactly T tokens of its tokenizer.

Each command runs in a fresh interpreter; commands alternate round by round so
the machine's load hits them all, and the median wall time and the median peak
RSS (the child's ru_maxrss, from wait4) are kept. Not a test: nothing is timed in
the suite.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
N_TOKENS = 256
WORDS = "the cat sat on the mat because it was warm and the dog did not mind at all really".split()


def env() -> dict[str, str]:
    e = dict(os.environ, PYTHONPATH=str(ROOT), TOKENIZERS_PARALLELISM="false", TRANSFORMERS_VERBOSITY="error")
    e.pop("PYTHONDONTWRITEBYTECODE", None)
    return e


def checkpoint(folder: Path) -> Path:
    """GPT-2-small's shape with the tests' sharpened random weights (built once)."""
    if not (folder / "config.json").is_file():
        sys.path.insert(0, str(ROOT / "tests"))
        import checkpoints

        checkpoints.build_gpt2(folder, lm_head=False, n_layer=12, n_head=12, n_embd=768, n_positions=1024)
    return folder


def text_of(folder: Path, n_tokens: int) -> str:
    """Words until the checkpoint's tokenizer gives exactly ``n_tokens`` tokens."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    words: list[str] = []
    while True:
        candidate = " ".join([*words, WORDS[len(words) % len(WORDS)]])
        n = len(tokenizer.encode(candidate).ids)
        if n > n_tokens:
            break
        words = candidate.split()
        if n == n_tokens:
            return candidate
    raise SystemExit(f"no prefix of the text has exactly {n_tokens} tokens; change WORDS")


def measure(cmd: list[str]) -> tuple[float, int]:
    """(wall seconds, peak RSS bytes) of one fresh process."""
    start = time.perf_counter()
    child = subprocess.Popen(cmd, env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(child.pid, 0)
    seconds = time.perf_counter() - start
    if status != 0:
        raise SystemExit(f"{' '.join(cmd[:6])} ... failed: {child.stderr.read().decode()[-2000:]}")
    return seconds, usage.ru_maxrss * 1024


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    rounds = 1 if args.quick else 3
    folder = checkpoint(Path(tempfile.gettempdir()) / "attn-cli-bench-gpt2-small-sharp")
    text = text_of(folder, N_TOKENS)
    cli = [sys.executable, "-m", "attn_cli"]
    model = ["--model", str(folder)]
    commands = {
        "run --format table (every layer run, the last shown)": [*cli, "run", text, *model, "--format", "table"],
        "run --format json --layer -1": [*cli, "run", text, *model, "--format", "json", "--layer", "-1"],
        "heads --no-probe": [*cli, "heads", text, *model, "--format", "json", "--no-probe"],
        "heads (probe R = 50, 100 tokens)": [*cli, "heads", text, *model, "--format", "json"],
        f"heads --probe-length {N_TOKENS // 2} (probe of {N_TOKENS} tokens)": [*cli, "heads", text, *model, "--format", "json", "--probe-length", str(N_TOKENS // 2)],
    }
    for cmd in commands.values():
        measure(cmd)  # warm the page cache and bytecode
    results: dict[str, list[tuple[float, int]]] = {name: [] for name in commands}
    load = os.getloadavg()[0]
    for _ in range(rounds):
        for name, cmd in commands.items():
            results[name].append(measure(cmd))
    base_name = next(iter(commands))
    base_t = statistics.median(t for t, _ in results[base_name])
    base_m = statistics.median(m for _, m in results[base_name])
    print(f"T = {N_TOKENS}, GPT-2-small shape (12 x 12, 768), {rounds} round(s); load average {load:.2f} at the start, "
          f"{os.getloadavg()[0]:.2f} at the end; python {sys.version.split()[0]}")
    print(f"| command | wall s | ratio to {base_name.split(' (')[0]} | peak RSS MB | memory ratio |")
    print("|---|---|---|---|---|")
    for name, runs in results.items():
        t = statistics.median(r[0] for r in runs)
        m = statistics.median(r[1] for r in runs)
        print(f"| {name} | {t:.2f} | {t / base_t:.2f} | {m / 1e6:.0f} | {m / base_m:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
