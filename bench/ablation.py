"""heads --ablate against transformers (issue 22): all 144 heads of a GPT-2-small-sized random
checkpoint (12 layers x 12 heads, 768 wide, GPT-2's 50,257-token head) at T = 64, zero-ablated
one at a time, the mean next-token loss each time.

    python bench/ablation.py              # 5 rounds, interleaved, after one warm-up each
    python bench/ablation.py --rounds 3

attn-cli: ``Checkpoint.ablate`` (each layer's input and concat kept from the clean run, so an
ablation recomputes the layers from its own on). transformers: 144 forwards of
GPT2LMHeadModel (eager) with a forward pre-hook on ``attn.c_proj`` zeroing the head's slice,
``labels=`` for the loss, under ``inference_mode``. Both in this process, on torch's default
threads; the goal is attn-cli <= 0.5x. Not a test: run it on a quiet machine.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
FOLDER = Path("/tmp/attn-cli-bench-gpt2-small-lm")
T = 64


def checkpoint() -> Path:
    if (FOLDER / "config.json").is_file():
        return FOLDER
    sys.path.insert(0, str(ROOT / "tests"))
    import checkpoints  # the tests' tokenizer: only to open the folder; the ids are drawn directly
    import transformers

    FOLDER.mkdir(parents=True)
    checkpoints.byte_level_bpe().save(str(FOLDER / "tokenizer.json"))
    config = transformers.GPT2Config(n_layer=12, n_head=12, n_embd=768, n_positions=1024, vocab_size=50257)
    transformers.GPT2LMHeadModel(config).save_pretrained(FOLDER)
    return FOLDER


def main() -> int:
    import argparse

    import transformers

    parser = argparse.ArgumentParser(description="heads --ablate against 144 hooked transformers forwards")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    rounds = parser.parse_args().rounds

    from attn_cli.sources.checkpoint import open_checkpoint
    from attn_cli.records.tokens import Tokens

    folder = checkpoint()
    ids = tuple(torch.randint(0, 50257, (T,), generator=torch.Generator().manual_seed(0)).tolist())
    ours = open_checkpoint(str(folder))
    tokens = Tokens(ids, tuple("?" for _ in ids), 50257, "bench")
    model = transformers.GPT2LMHeadModel.from_pretrained(folder, attn_implementation="eager").eval()
    batch = torch.tensor([ids])
    d_v = 64

    def theirs() -> list[float]:
        deltas = []
        with torch.inference_mode():
            clean = model(batch, labels=batch).loss.item()
            for block in model.transformer.h:
                for h in range(12):
                    def zero(module, args, h=h):  # noqa: ANN001, ANN202
                        x = args[0].clone()
                        x[..., h * d_v : (h + 1) * d_v] = 0.0
                        return (x,)

                    handle = block.attn.c_proj.register_forward_pre_hook(zero)
                    deltas.append(model(batch, labels=batch).loss.item() - clean)
                    handle.remove()
        return deltas

    # warm-up: each side's first-call costs (ours: the memory-mapped weights paged in)
    ours.ablate(Tokens(ids[:8], tokens.texts[:8], 50257, "bench"), "zero")
    with torch.inference_mode():
        model(batch, labels=batch)
    times: dict[str, list[float]] = {"attn-cli": [], "transformers": []}
    check = None
    for _ in range(rounds):
        start = time.perf_counter()
        ablation = ours.ablate(tokens, "zero")
        times["attn-cli"].append(time.perf_counter() - start)
        start = time.perf_counter()
        reference = theirs()
        times["transformers"].append(time.perf_counter() - start)
        check = max(abs(a - b) for a, b in zip((d for row in ablation.deltas for d in row), reference))
    ratio = statistics.median(times["attn-cli"]) / statistics.median(times["transformers"])
    print(f"GPT-2-small-sized, T = {T}, 144 heads zero-ablated, torch {torch.__version__}, {torch.get_num_threads()} threads")
    for name, values in times.items():
        print(f"  {name:<14} {statistics.median(values):7.2f} s  (min {min(values):.2f}, max {max(values):.2f})")
    print("  each round's ratio: " + ", ".join(f"{a / b:.2f}x" for a, b in zip(times["attn-cli"], times["transformers"])))
    print(f"  ratio {ratio:.2f}x  (goal <= 0.5x: {'met' if ratio <= 0.5 else 'NOT met'}); largest delta difference {check:.2e} nats")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
