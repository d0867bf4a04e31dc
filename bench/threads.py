"""Threads and typer versions (issue 13): measured figures, not tests.

    python bench/threads.py                    # both sections
    python bench/threads.py --only threads     # JSON batch at 1 vs 2 intra-op threads, quiet and loaded
    python bench/threads.py --only typer --typer-lo DIR --typer-hi DIR
                                               # --help and run start-up with typer installed in DIR
                                               # (pip install --target DIR "typer==0.16.0" ...)

threads: the sample_texts lines, repeated to 600 texts, through the pipeline and
to_json in one process, with torch at 1 and at 2 intra-op threads, first on a
quiet machine, then with a busy loop on another core; and the same batch as
a real ``run --file F --lines --format json`` process at OMP_NUM_THREADS=1 and 2.
Also: the largest work (in flops) where one thread still wins, per T.
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

REPO = Path(__file__).resolve().parent.parent
PYTHON = sys.executable

BATCH = """
import json, sys, time
from pathlib import Path
import torch
from attn_cli.sources.toy.config import Config
from attn_cli.sources.toy.source import ToySource
from attn_cli.formats.export import to_json
texts = Path(sys.argv[1]).read_text().splitlines()
torch.set_num_threads(int(sys.argv[2]))
pipeline = ToySource(Config(tokenizer="words"))
to_json(pipeline.run(texts[0]))
start = time.perf_counter()
for text in texts:
    to_json(pipeline.run(text))
print(json.dumps({"rate": len(texts) / (time.perf_counter() - start)}))
"""

BREAK_EVEN = """
import json, sys, time
import torch
from attn_cli.sources.toy.model import self_attention
from attn_cli.sources.toy.config import Config
from attn_cli.runtime.threads import attention_flops
rows = []
for n_tokens in (8, 32, 64, 128, 256, 512):
    config = Config(d_model=64, heads=4).resolved(64)
    x = torch.randn(n_tokens, 64)
    times = {}
    for threads in (1, 2):
        torch.set_num_threads(threads)
        self_attention(x, config)
        reps = max(5, 2000 // n_tokens)
        start = time.perf_counter()
        for _ in range(reps):
            self_attention(x, config)
        times[threads] = (time.perf_counter() - start) / reps
    rows.append({"T": n_tokens, "flops": attention_flops(n_tokens, 64, 4, 16, 16), "t1_ms": times[1] * 1e3, "t2_ms": times[2] * 1e3})
print(json.dumps(rows))
"""


def env_with(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in [str(REPO), env.get("PYTHONPATH", "")] if p)
    env.pop("OMP_NUM_THREADS", None)
    env.update(ATTN_CLI_OFFLINE="1", NO_COLOR="1")
    env.update(extra)
    return env


def child(code: str, *args: str, env: dict[str, str] | None = None) -> object:
    out = subprocess.run([PYTHON, "-c", code, *args], capture_output=True, text=True, env=env or env_with(), check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def sample_texts(n: int) -> str:
    lines = [line for f in sorted((REPO / "sample_texts").glob("*.txt")) for line in f.read_text().splitlines() if line.strip()]
    return "\n".join((lines * (n // len(lines) + 1))[:n]) + "\n"


class Busy:
    """A busy loop on one core for the block: 'the other core busy'."""

    def __enter__(self) -> Busy:
        self.proc = subprocess.Popen([PYTHON, "-c", "while True: pass"])
        time.sleep(0.5)
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.kill()
        self.proc.wait()


def wall(cmd: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, check=True)
    return time.perf_counter() - start


def section_threads(reps: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        texts = Path(tmp) / "texts.txt"
        texts.write_text(sample_texts(600))
        one = Path(tmp) / "one.txt"
        one.write_text(sample_texts(1))
        print("threads: 600 sample_texts lines, pipeline.run + to_json in one process (lines/s, median)")
        for load, context in (("quiet", None), ("other core busy", Busy)):
            rates = {}
            for threads in (1, 2):
                runs = []
                for _ in range(reps):
                    if context is None:
                        runs.append(child(BATCH, str(texts), str(threads))["rate"])
                    else:
                        with context():
                            runs.append(child(BATCH, str(texts), str(threads))["rate"])
                rates[threads] = statistics.median(runs)
            print(f"  {load:<16} 1 thread {rates[1]:7.0f}   2 threads {rates[2]:7.0f}   ({rates[1] / rates[2]:.2f}x)")
        print("threads: the same 600 lines as `attn-cli run --file F --lines -F json -o OUT` processes (lines/s after start-up)")
        for load, context in (("quiet", None), ("other core busy", Busy)):
            for label, extra in (("OMP_NUM_THREADS=1", {"OMP_NUM_THREADS": "1"}), ("OMP_NUM_THREADS=2", {"OMP_NUM_THREADS": "2"})):
                env = env_with(**extra)
                cmd = [PYTHON, "-m", "attn_cli", "run", "-t", "words", "--lines", "-F", "json", "-o", str(Path(tmp) / "o.jsonl"), "--file"]
                many, single = [], []
                for _ in range(reps):
                    if context is None:
                        many.append(wall([*cmd, str(texts)], env)); single.append(wall([*cmd, str(one)], env))
                    else:
                        with context():
                            many.append(wall([*cmd, str(texts)], env)); single.append(wall([*cmd, str(one)], env))
                rate = 599 / (statistics.median(many) - statistics.median(single))
                print(f"  {load:<16} {label:<26} {rate:7.0f} lines/s")
    print("threads: break-even, self_attention at d_model 64, 4 heads (ms per call)")
    for row in child(BREAK_EVEN):  # type: ignore[union-attr]
        print(f"  T {row['T']:>4}  {row['flops']:>12,} flops   1 thread {row['t1_ms']:7.3f}   2 threads {row['t2_ms']:7.3f}")


def section_typer(lo: str | None, hi: str | None, reps: int) -> None:
    print("typer: start-up with each typer (ms, median)")
    for label, folder in (("lowest", lo), ("highest", hi)):
        if not folder:
            print(f"  {label}: skipped (give --typer-{'lo' if label == 'lowest' else 'hi'} DIR)")
            continue
        env = env_with(PYTHONPATH=os.pathsep.join([folder, str(REPO)]))
        version = subprocess.run([PYTHON, "-c", "import typer; print(typer.__version__)"], capture_output=True, text=True, env=env).stdout.strip()
        cmds = {
            "--help": [PYTHON, "-m", "attn_cli", "--help"],
            "run --help": [PYTHON, "-m", "attn_cli", "run", "--help"],
            "run SENTENCE -t words -F json": [PYTHON, "-m", "attn_cli", "run", "Life is short, eat dessert first", "-t", "words", "-F", "json"],
            'python -c "import typer, rich"': [PYTHON, "-c", "import typer, rich"],
        }
        for cmd in cmds.values():
            wall(cmd, env)
        times = {name: statistics.median(wall(cmd, env) for _ in range(reps)) for name, cmd in cmds.items()}
        print(f"  typer {version}: " + ", ".join(f"{name} {t * 1000:.0f}" for name, t in times.items()))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="threads,typer")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--typer-lo")
    parser.add_argument("--typer-hi")
    args = parser.parse_args()
    chosen = args.only.split(",")
    if "threads" in chosen:
        section_threads(args.reps)
    if "typer" in chosen:
        section_typer(args.typer_lo, args.typer_hi, max(5, args.reps))
    return 0


if __name__ == "__main__":
    sys.exit(main())
