"""--generate N: greedy decoding equal, token for token, to transformers' generate(do_sample=False,
max_new_tokens=N) with a generation config of EOS and pad only; the attention then shown is the
whole sequence's, equal to transformers' on it; the refusals come before anything is generated."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import checkpoints
import pytest
import torch
from invoking import invoke

PROMPT = "the quick brown fox"
N = 8


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return checkpoints.builds_maker(tmp_path_factory, "generate", {
        "llama": (checkpoints.build_llama, dict(tie_word_embeddings=True)),
        "gemma2": (checkpoints.build_decoder, dict(model_type="gemma2")),
        "bert-mlm": (checkpoints.build_encoder, dict(model_type="bert")),
    })  # fmt: skip


def reference_generate(folder: Path, prompt: list[int], n: int) -> list[int]:
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager").eval()
    saved = model.generation_config
    config = transformers.GenerationConfig(eos_token_id=saved.eos_token_id, pad_token_id=saved.pad_token_id)
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt]), do_sample=False, max_new_tokens=n, generation_config=config)
    return out[0].tolist()


@pytest.mark.parametrize("name", ["gpt2", "llama", "gemma2"])
def test_greedy_tokens_and_the_whole_sequence_equal_transformers(name: str, folders: Any, gpt2_folder: Path) -> None:
    folder = gpt2_folder if name == "gpt2" else folders(name)
    data = json.loads(invoke("run", PROMPT, "--model", str(folder), "--generate", str(N), "-F", "json").stdout)
    ids = [t["id"] for t in data["tokens"]]
    prompt = [t["id"] for t in data["tokens"] if not t["generated"]]
    assert ids == reference_generate(folder, prompt, N) and len(ids) > len(prompt)
    assert [t["generated"] for t in data["tokens"]] == [i >= len(prompt) for i in range(len(ids))]
    assert isinstance(data["generated_text"], str) and data["text"] == PROMPT
    reference = checkpoints.reference(folder, tuple(ids))
    for layer in data["layers"]:
        for head in layer["heads"]:
            torch.testing.assert_close(torch.tensor(head["weights"]), reference.weights[layer["layer"]][head["head"]], atol=1e-5, rtol=0)


def test_generation_stops_at_the_end_of_sequence(gpt2_folder: Path, tmp_path: Path) -> None:
    import shutil

    folder = tmp_path / "gpt2-eos"
    shutil.copytree(gpt2_folder, folder)
    free = json.loads(invoke("run", PROMPT, "--model", str(folder), "--generate", "4", "-F", "json").stdout)
    first = next(t["id"] for t in free["tokens"] if t["generated"])
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": first}))  # the first new token ends it
    stopped = json.loads(invoke("run", PROMPT, "--model", str(folder), "--generate", "4", "-F", "json").stdout)
    assert sum(t["generated"] for t in stopped["tokens"]) == 1
    prompt = [t["id"] for t in stopped["tokens"] if not t["generated"]]
    assert [t["id"] for t in stopped["tokens"]] == reference_generate(folder, prompt, 4)
    # the negative control: without the stop, the model goes on
    assert sum(t["generated"] for t in free["tokens"]) == 4


def test_refusals_come_before_generating(gpt2_folder: Path, folders: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from attn_cli.sources.checkpoint.model import Checkpoint

    def never(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("generated before refusing")

    monkeypatch.setattr(Checkpoint, "generate", never)
    out = tmp_path / "out.json"
    result = invoke("run", PROMPT, "--model", str(gpt2_folder), "--generate", "60", "--max-tokens", "40", "-o", str(out), code=4)
    assert "over --max-tokens" in result.stderr and not out.exists()
    for n in ("100", "100000"):  # past 64 positions, and past any number an option's range would allow
        result = invoke("run", PROMPT, "--model", str(gpt2_folder), "--generate", n, code=4)
        assert f"and --generate {n} make" in result.stderr and "the model's 64 positions" in result.stderr
        assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    result = invoke("run", PROMPT, "--model", str(folders("bert-mlm")), "--generate", "3", code=2)
    assert "is an encoder" in result.stderr
    assert "--generate needs a trained model" in invoke("run", PROMPT, "-t", "words", "--generate", "3", code=2).stderr


def test_every_command_takes_it(gpt2_folder: Path, tmp_path: Path) -> None:
    from html_support import manifest

    picture = tmp_path / "g.png"
    invoke("heatmap", PROMPT, "--model", str(gpt2_folder), "--generate", "4", "-o", str(picture))
    assert picture.read_bytes()[:4] == b"\x89PNG"
    heads = json.loads(invoke("heads", PROMPT, "--model", str(gpt2_folder), "--generate", "4", "--no-probe", "-F", "json").stdout)
    assert sum(t["generated"] for t in heads["tokens"]) == 4 and heads["generated_text"]
    page = tmp_path / "g.html"
    invoke("html", PROMPT, "--model", str(gpt2_folder), "--generate", "4", "-o", str(page))
    header = dict(manifest(page.read_text(encoding="utf-8"))["traces"][0]["header"])
    assert header["generated"].startswith("4 tokens from position")
    table = invoke("run", PROMPT, "--model", str(gpt2_folder), "--generate", "2", "--show", "tokens").stdout
    assert "generated 2 tokens from position" in table and table.count("generated") >= 3


def test_a_saved_generation_is_drawn_again(gpt2_folder: Path, tmp_path: Path) -> None:
    saved = tmp_path / "g.json"
    invoke("run", PROMPT, "--model", str(gpt2_folder), "--generate", "4", "-o", str(saved))
    direct, again = tmp_path / "direct.png", tmp_path / "again.png"
    invoke("heatmap", PROMPT, "--model", str(gpt2_folder), "--generate", "4", "-o", str(direct))
    invoke("heatmap", "--from", str(saved), "-o", str(again))
    assert direct.read_bytes() == again.read_bytes()  # the dashed lines and the title line included
    from attn_cli.sources.saved import load_json

    trace = load_json(saved)
    assert trace.prompt_length == len(trace.tokens) - 4 and trace.generated_text == json.loads(saved.read_text())["generated_text"]
