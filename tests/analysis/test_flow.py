"""Attention flow (``analysis.flow``) against the authors' computation (samiraabnar/attention_flow,
whose module imports TensorFlow: its steps written out here as their ``get_adjmat``, graph and
``compute_flows`` do them, networkx's Edmonds-Karp on their adjacency matrix) over transformers'
``output_attentions``: the real MiniLM and a tiny sharpened GPT-2 (causal), to 1e-5. Controls: rows
left unnormalized, rollout in place of flow, one layer too few; the size refusal."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import networkx as nx
import numpy as np
import pytest
import torch

from attn_cli.analysis.flow import attention_flow, check_size, flow_of
from attn_cli.analysis.rollout import rollout_of
from attn_cli.runtime.errors import TooLargeError
from attn_cli.sources.checkpoint import open_checkpoint

TEXT = "The cat sat on the mat, and it purred."


_FLOWS: dict[bytes, np.ndarray] = {}  # the authors' flows of each attentions array, computed once a session (slow)


def authors_flow(attentions: np.ndarray, normalize: bool = True) -> np.ndarray:
    """(L, H, T, T) -> (T, T): their res_att_mat, adjacency, graph and compute_flows for the last layer's nodes
    (each row divided by its sum, as compute_flows does, unless ``normalize`` is False)."""
    key = attentions.tobytes() + bytes(str(attentions.shape), "ascii")
    if key not in _FLOWS:
        _FLOWS[key] = _their_flows(attentions)
    flows = _FLOWS[key].copy()
    return flows / flows.sum(axis=-1, keepdims=True) if normalize else flows


def _their_flows(attentions: np.ndarray) -> np.ndarray:
    layers, _, n, _ = attentions.shape
    res = attentions.sum(axis=1) / attentions.shape[1] + np.eye(n)[None]
    res = res / res.sum(axis=-1)[..., None]
    adj = np.zeros(((layers + 1) * n, (layers + 1) * n))
    for i in range(1, layers + 1):
        for k_f in range(n):
            for k_t in range(n):
                adj[i * n + k_f][(i - 1) * n + k_t] = res[i - 1][k_f][k_t]
    graph = nx.from_numpy_array(adj, create_using=nx.DiGraph())
    nx.set_edge_attributes(graph, {(u, v): d["weight"] for u, v, d in graph.edges(data=True)}, "capacity")
    flows = np.zeros((n, n))
    for i in range(n):
        for j in range(n):
            flows[i, j] = nx.maximum_flow_value(graph, layers * n + i, j, flow_func=nx.algorithms.flow.edmonds_karp)
    return flows


def ours_and_theirs(folder: Path) -> tuple[Any, list[Any], np.ndarray]:
    import transformers

    ckpt = open_checkpoint(str(folder))
    tokens = ckpt.tokenizer.encode(TEXT)
    layers = ckpt.trace(tokens, list(range(ckpt.info.layers)), "weights")
    model = transformers.AutoModel.from_pretrained(folder, attn_implementation="eager").eval()
    with torch.no_grad():
        attentions = torch.stack(model(input_ids=torch.tensor([tokens.ids]), output_attentions=True).attentions)[:, 0]
    return ckpt, layers, attentions.double().numpy()


@pytest.mark.parametrize("model", ["minilm", "gpt2", "bert"])
def test_flow_equals_the_authors(model: str, request: pytest.FixtureRequest) -> None:
    _, layers, attentions = ours_and_theirs(request.getfixturevalue({"minilm": "minilm_path", "gpt2": "gpt2_folder", "bert": "bert_folder"}[model]))
    got = flow_of(layers)
    want = authors_flow(attentions)
    assert got.through_layer == len(layers) - 1
    np.testing.assert_allclose(got.weights.double().numpy(), want, atol=1e-5, rtol=0)
    assert got.causal == (model == "gpt2")
    # controls: each is told apart from the authors' flow
    assert not np.allclose(authors_flow(attentions, normalize=False), got.weights.numpy(), atol=1e-3)
    assert not np.allclose(rollout_of(layers).weights.numpy(), want, atol=1e-3)
    assert not np.allclose(flow_of(layers[:-1]).weights.numpy(), want, atol=1e-3)


def test_a_flow_that_would_take_too_long_is_refused() -> None:
    check_size(40, 6)
    with pytest.raises(TooLargeError, match="at most 35 tokens"):
        check_size(64, 12)
    with pytest.raises(TooLargeError):
        attention_flow([torch.full((200, 200), 1 / 200, dtype=torch.float64)] * 12)


def test_run_what_flow_in_every_format(minilm_path: Path, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    """`run --what flow`: the JSON's top-level flow is the authors' (1e-5), the table, CSV, --hide-tokens,
    the heatmap, the toy; a long text refused (exit 4), an encoder-decoder (exit 2), an unknown name (exit 2)."""
    import json

    import checkpoints
    from invoking import invoke

    data = json.loads(invoke("run", TEXT, "--model", str(minilm_path), "--what", "flow", "-F", "json").stdout)
    _, _, attentions = ours_and_theirs(minilm_path)
    assert data["flow"]["through_layer"] == 5 and "rollout" not in data
    np.testing.assert_allclose(np.array(data["flow"]["weights"]), authors_flow(attentions), atol=1e-5, rtol=0)
    both = json.loads(invoke("run", TEXT, "--model", str(minilm_path), "--what", "rollout,flow", "--hide-tokens", "special", "-F", "json").stdout)
    assert set(both) >= {"rollout", "flow"} and "weights_shown" in both["flow"]
    table = invoke("run", TEXT, "--model", str(minilm_path), "--what", "flow", "--head", "0").stdout
    assert "Attention flow" in table and "max flow" in table
    csv = invoke("run", TEXT, "--model", str(minilm_path), "--what", "flow", "-F", "csv").stdout
    n = len(data["tokens"])
    assert sum(line.split(",")[2] == "flow" for line in csv.splitlines()) == n * n
    picture = tmp_path / "flow.png"
    invoke("heatmap", TEXT, "--model", str(minilm_path), "--what", "flow", "-o", str(picture))  # exit 0, else it fails here
    assert picture.stat().st_size > 0
    saved = tmp_path / "one-head.json"  # a file of one head keeps the flow it was written with: drawn again from it
    invoke("run", TEXT, "--model", str(minilm_path), "--what", "flow", "--head", "0", "-F", "json", "-o", str(saved))
    invoke("heatmap", "--from", str(saved), "--what", "flow", "-o", str(tmp_path / "again.png"))
    assert (tmp_path / "again.png").stat().st_size > 0
    toy = json.loads(invoke("run", "I saw a saw", "--what", "flow", "-F", "json").stdout)
    assert toy["flow"]["through_layer"] == 0 and all(abs(sum(row) - 1) < 1e-6 for row in toy["flow"]["weights"])
    long = invoke("run", " ".join(["word"] * 60), "--model", str(minilm_path), "--what", "flow", "-F", "json", code=4).stderr
    assert "at most 42 tokens" in long and len(long.strip().splitlines()) == 1
    bart = checkpoints.built(tmp_path_factory, "ablation-bart", checkpoints.build_bart)  # an encoder-decoder: its encoder's flow
    pair = json.loads(invoke("run", TEXT, "--model", str(bart), "--target", "a cat", "--what", "flow", "-F", "json").stdout)
    encoder = open_checkpoint(str(bart), pairs=True).encoder_checkpoint()
    source = encoder.tokenizer.encode(TEXT)
    want = flow_of(encoder.trace(source, list(range(encoder.info.layers)), "weights")).weights
    assert pair["flow"]["stack"] == "encoder" and np.allclose(np.array(pair["flow"]["weights"]), want.numpy(), atol=1e-6)
    refused = invoke("run", TEXT, "--model", str(bart), "--target", "a cat", "--what", "flow", "--stack", "cross", "--head", "0", code=2).stderr
    assert "give --stack encoder" in refused and len(refused.strip().splitlines()) == 1
    assert "choose from weights, rollout, norms, flow" in invoke("run", TEXT, "--what", "nonsense", code=2).stderr


def test_the_python_api_gives_flow(minilm_path: Path) -> None:
    """attn_cli.trace(..., flow=True) and from_attentions(..., flow=True): Trace.flow, the authors' flow."""
    import attn_cli

    _, layers, attentions = ours_and_theirs(minilm_path)
    want = authors_flow(attentions)
    traced = attn_cli.trace(TEXT, model=minilm_path, flow=True)
    np.testing.assert_allclose(traced.flow.weights.double().numpy(), want, atol=1e-5, rtol=0)
    tokens = [str(i) for i in range(attentions.shape[-1])]
    outside = attn_cli.from_attentions(torch.tensor(attentions).float()[:, None], tokens, flow=True)
    np.testing.assert_allclose(outside.flow.weights.double().numpy(), want, atol=1e-5, rtol=0)
    assert outside.rollout is None and attn_cli.trace(TEXT, model=minilm_path).flow is None
