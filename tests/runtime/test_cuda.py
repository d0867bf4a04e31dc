"""--device cuda, for every model_type the registry knows: each layer and head computed on the
GPU equal to transformers' eager attention on the GPU (float32 to 1e-5, as on the CPU) and to
attn-cli's own CPU numbers; bfloat16 and float16 on the GPU against transformers in that dtype
on the GPU; generation and head ablation on the GPU as on the CPU. Skipped where torch sees no
CUDA (CI has none): run on a lent GPU with ``pytest tests/runtime/test_cuda.py``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import checkpoints
import pytest
import torch
from invoking import invoke

gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here")

FAMILIES, PAIRS, TEXT, LONG = checkpoints.ONE_PER_MODEL_TYPE, checkpoints.ONE_PER_PAIR_TYPE, checkpoints.TEXT, checkpoints.LONG
SOURCE = "The cat sat on the mat."
TARGET = "the dog sat on the log"


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return checkpoints.one_per_type(tmp_path_factory)


def traced(folder: Path, text: str, dtype: str, device: str) -> tuple[Any, Any]:
    ckpt, tokens, layers = checkpoints.traced(folder, text, dtype=dtype, device=device)
    return tokens, layers


@gpu
@pytest.mark.parametrize("name", list(FAMILIES))
def test_float32_on_the_gpu_equals_transformers_there_and_the_cpu(name: str, folders: Any) -> None:
    folder, text = folders(name), FAMILIES[name][2]
    tokens, on_gpu = traced(folder, text, "float32", "cuda")
    checkpoints.assert_matches(on_gpu, checkpoints.reference(folder, tokens.ids, device="cuda"))
    _, on_cpu = traced(folder, text, "float32", "cpu")
    for gpu, cpu in zip(on_gpu, on_cpu, strict=True):
        assert gpu.weights.device.type == "cpu" and gpu.weights.dtype == torch.float32  # kept on the CPU for the renderers
        # two devices sum in their own orders: a few cells differ in the fifth decimal (1.5e-5 seen)
        torch.testing.assert_close(gpu.weights, cpu.weights, atol=5e-5, rtol=0)


@gpu
def test_tf32_matmuls_would_fail_the_float32_comparison(folders: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The negative control: the 1e-5 comparison sees the GPU's TensorFloat-32 products (10-bit
    mantissas), which is what a run that traded precision for speed would give."""
    folder, text = folders("llama"), FAMILIES["llama"][2]
    tokens, _ = traced(folder, text, "float32", "cpu")
    reference = checkpoints.reference(folder, tokens.ids, device="cuda")
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", True)
    _, rough = traced(folder, text, "float32", "cuda")
    with pytest.raises(AssertionError):
        checkpoints.assert_matches(rough, reference)


@gpu
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("name", list(FAMILIES))
def test_half_precision_on_the_gpu_equals_transformers_there(name: str, dtype: str, folders: Any) -> None:
    """The same operations in the same order on the same operands as transformers' on the GPU:
    the same bits, as on the CPU."""
    folder, text = folders(name), FAMILIES[name][2]
    tokens, on_gpu = traced(folder, text, dtype, "cuda")
    checkpoints.assert_matches(on_gpu, checkpoints.reference(folder, tokens.ids, dtype=getattr(torch, dtype), device="cuda"), tol=0)


def pair_json(folder: Path, *flags: str) -> dict[str, Any]:
    return json.loads(invoke("run", SOURCE, "--model", str(folder), "--target", TARGET, "-F", "json", *flags).stdout)


def pair_reference(folder: Path, data: dict[str, Any], dtype: torch.dtype) -> Any:
    import transformers

    model = transformers.AutoModelForSeq2SeqLM.from_pretrained(folder, attn_implementation="eager", dtype=dtype).to("cuda").eval()
    source = torch.tensor([[t["id"] for t in data["tokens"]]], device="cuda")
    decoder = torch.tensor([[t["id"] for t in data["target_tokens"]]], device="cuda")
    with torch.inference_mode():
        return model(input_ids=source, decoder_input_ids=decoder, output_attentions=True)


@gpu
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("name", list(PAIRS))
def test_an_encoder_decoders_three_stacks_on_the_gpu(name: str, dtype: str, folders: Any) -> None:
    """The JSON of `run --device cuda --dtype D` against transformers on the GPU in that dtype (the
    JSON's weights are float32 of the run's values, which JSON writes exactly)."""
    data = pair_json(folders(name), "--device", "cuda", "--dtype", dtype)
    assert data["model"]["dtype"] == dtype
    out = pair_reference(folders(name), data, getattr(torch, dtype))
    tol = 1e-5 if dtype == "float32" else 0.0
    for key, stack in (("layers", out.encoder_attentions), ("decoder_layers", out.decoder_attentions), ("cross_layers", out.cross_attentions)):
        assert len(data[key]) == len(stack)
        for layer, expected in zip(data[key], stack):
            for head in layer["heads"]:
                want = expected[0, head["head"]].float().cpu()
                torch.testing.assert_close(torch.tensor(head["weights"]), want, atol=tol, rtol=0, msg=lambda m: f"{key} {layer['layer']}: {m}")


@gpu
@pytest.mark.parametrize("name", ["gpt2", "llama", "gemma2"])
def test_generation_on_the_gpu_is_the_cpus(name: str, folders: Any) -> None:
    args = ("run", "Once upon a time", "--model", str(folders(name)), "--generate", "6", "-F", "json")
    on_gpu = json.loads(invoke(*args, "--device", "cuda").stdout)
    on_cpu = json.loads(invoke(*args).stdout)
    assert [t["id"] for t in on_gpu["tokens"]] == [t["id"] for t in on_cpu["tokens"]]
    assert sum(t["generated"] for t in on_gpu["tokens"]) == 6


@gpu
@pytest.mark.parametrize(("name", "flags"), [("gpt2", ()), ("llama", ()), ("bart", ("--target", TARGET, "--stack", "cross"))])
def test_ablation_on_the_gpu_is_the_cpus(name: str, flags: tuple[str, ...], folders: Any) -> None:
    args = ("heads", SOURCE, "--model", str(folders(name)), *flags, "--ablate", "mean", "--no-probe", "-F", "json")
    on_gpu = json.loads(invoke(*args, "--device", "cuda").stdout)
    on_cpu = json.loads(invoke(*args).stdout)
    assert on_gpu["ablation"]["clean_loss"] == pytest.approx(on_cpu["ablation"]["clean_loss"], abs=1e-4)
    deltas = [(h["layer"], h["head"], h["ablation_loss_delta"]) for h in on_cpu["heads"]]
    assert max(abs(d) for *_, d in deltas) > 0.01  # heads that matter
    for entry, (layer, head, delta) in zip(on_gpu["heads"], deltas, strict=True):
        assert (entry["layer"], entry["head"]) == (layer, head)
        assert entry["ablation_loss_delta"] == pytest.approx(delta, abs=1e-4)


def assert_close_json(gpu: Any, cpu: Any, path: str = "") -> None:
    """Two JSON documents alike, their numbers to 1e-4 (two devices' float32 sums)."""
    if isinstance(cpu, dict):
        assert isinstance(gpu, dict) and gpu.keys() == cpu.keys(), path
        for key in cpu:
            assert_close_json(gpu[key], cpu[key], f"{path}.{key}")
    elif isinstance(cpu, list):
        assert isinstance(gpu, list) and len(gpu) == len(cpu), path
        for i, (a, b) in enumerate(zip(gpu, cpu)):
            assert_close_json(a, b, f"{path}[{i}]")
    elif isinstance(cpu, float) and not isinstance(gpu, str):
        assert gpu == pytest.approx(cpu, abs=1e-4), path
    else:
        assert gpu == cpu, path


@gpu
@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("llama", ("run", TEXT, "--rollout", "--norms", "--predict", "3")),
        ("olmo2", ("run", TEXT, "--rollout", "--norms", "--predict", "3")),
        ("modernbert", ("run", TEXT, "--rollout", "--norms", "--predict", "3")),
        ("bert", ("run", TEXT, "--pair", "is it?", "--rollout", "--norms")),
        ("gemma2", ("heads", LONG)),
        ("bart", ("run", SOURCE, "--target", TARGET, "--stack", "decoder", "--rollout", "--norms", "--predict", "3")),
    ],
)
def test_a_commands_json_on_the_gpu_is_the_cpus(name: str, args: tuple[str, ...], folders: Any) -> None:
    """Analyses (rollout, value-weighted norms, predictions, the heads' statistics) read the
    layers the GPU computed as they read the CPU's: the same document."""
    command = (*args, "--model", str(folders(name)), "-F", "json")
    on_gpu = json.loads(invoke(*command, "--device", "cuda").stdout)
    on_cpu = json.loads(invoke(*command).stdout)
    assert_close_json(on_gpu, on_cpu)


@gpu
def test_a_run_that_cannot_fit_the_gpu_is_refused_before_it_allocates(folders: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The GPU's free memory is the budget of what the layers compute there: a run over it is
    refused (exit 4, one line) before a byte is read onto the GPU. The control: the same run
    with the GPU's real free memory."""
    from attn_cli.runtime import budget

    args = ("run", TEXT, "--model", str(folders("llama")), "--device", "cuda", "-F", "json")
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    monkeypatch.setattr(budget, "device_available_bytes", lambda device: 1000 if device == "cuda" else None)
    result = invoke(*args, code=4)
    assert result.stderr.startswith("attn-cli: error: this run on the GPU needs about ") and result.stderr.count("\n") == 1
    assert "or use --device cpu" in result.stderr and torch.cuda.memory_allocated() == before
    monkeypatch.undo()
    invoke(*args)  # the control


@gpu
def test_an_allocation_the_gpu_refuses_is_one_line(folders: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """An allocation the GPU cannot make (a tensor past its memory, asked for inside the trace, as
    one another process's use of the GPU would make the run's own fail): torch's CUDA
    out-of-memory error, a real one, is one line, exit 4, no traceback."""
    from attn_cli.sources.checkpoint.model import Checkpoint

    real = Checkpoint.trace

    def too_much(self: Any, *args: Any, **kwargs: Any) -> Any:
        torch.empty(2**45, dtype=torch.uint8, device="cuda")  # 32 TiB
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Checkpoint, "trace", too_much)
    result = invoke("run", TEXT, "--model", str(folders("llama")), "--device", "cuda", "-F", "json", code=4)
    assert result.stderr == (
        "attn-cli: error: the GPU ran out of memory (torch: CUDA out of memory); use a shorter text, fewer layers (--layer) "
        "or a smaller --dtype, or --device cpu\n"
    )
