"""Attention flow (Abnar & Zuidema 2020, "Quantifying Attention Flow in Transformers"), as the
authors' code computes it (samiraabnar/attention_flow: ``get_adjmat``, ``compute_flows``).

The graph: L + 1 layers of T nodes; node (l, i), l >= 1, has an edge to node (l - 1, j) of
capacity Â_{l-1}[i, j], rollout's mixed weights (``analysis.rollout``: 0.5 mean_h A + 0.5 I, each
row renormalized); an edge only where the capacity is not 0 (a causal model's future keys have
none), as networkx's ``from_numpy_array`` adds them. flow[i, j] is the maximum flow from node
(L, i) to input node (0, j), each row then divided by its sum. A well-kept graph library, not a
max-flow of our own: networkx's shortest augmenting path, which finds the same maximum flow as the
authors' Edmonds-Karp (a flow's value is unique; the two round apart by about 1e-16) in a sixth of
the time on these dense graphs.

T^2 flow problems on a graph of L T^2 edges: ``check_size`` refuses (exit 4) before a run whose
problems would take too long, naming the length that fits.

Shapes: T tokens, H heads, L layers through.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from attn_cli.records.results import Rollout
from attn_cli.runtime.errors import TooLargeError

if TYPE_CHECKING:
    import torch

    from attn_cli.records.layers import LayerWeights

# T^4 L, (flow problems) x (edges): about 20 s per 1e7 on one core of this project's machines with
# networkx 3.4; 2e7 is under a minute: 42 tokens through 6 layers, 35 through 12
MAX_WORK = 2 * 10**7


def check_size(n_tokens: int, n_layers: int) -> None:
    """TooLargeError (exit 4) when the flow of ``n_tokens`` through ``n_layers`` layers would take too long."""
    if n_tokens**4 * n_layers > MAX_WORK:
        fits = int((MAX_WORK / n_layers) ** 0.25)
        raise TooLargeError(
            f"attention flow solves {n_tokens}^2 max-flow problems on a graph of {n_layers} x {n_tokens}^2 edges: too long; "
            f"through {n_layers} layers it takes texts of at most {fits} tokens (or keep fewer layers: --layer)"
        )


def flow_of(layers: Sequence[LayerWeights], through_layer: int | None = None) -> Rollout:
    """The flow through ``through_layer`` (default: the last of ``layers``, which must hold every layer
    from 0: ``rollout.accumulated``)."""
    from attn_cli.analysis.rollout import accumulated

    mixed = accumulated(layers, through_layer, keep=True).mixed
    assert mixed is not None
    return attention_flow(mixed)


def attention_flow(mixed: Sequence[torch.Tensor]) -> Rollout:
    """The flow from each position after the last layer to each input token, from each layer's
    (T, T) float64 mixed weights (``rollout.mixed_weights``, layer 0 first): (T, T) float32, rows
    summing to 1, in ``Rollout``'s shape (``through_layer`` the last layer's index)."""
    import networkx as nx
    import torch
    from networkx.algorithms.flow import build_residual_network, shortest_augmenting_path

    n, depth = mixed[0].shape[-1], len(mixed)
    check_size(n, depth)
    graph = nx.DiGraph()
    graph.add_nodes_from(range((depth + 1) * n))
    causal = True  # every layer hides each position's future: no path to it
    for l, layer in enumerate(mixed, start=1):
        causal = causal and bool((layer.triu(1) == 0).all())
        rows, cols = layer.nonzero(as_tuple=True)
        edges = zip(rows.tolist(), cols.tolist(), layer[rows, cols].tolist())
        graph.add_edges_from((l * n + i, (l - 1) * n + j, {"capacity": capacity}) for i, j, capacity in edges)
    residual = build_residual_network(graph, "capacity")  # built once: each problem resets its flows
    flows = torch.zeros(n, n, dtype=torch.float64)
    for i in range(n):
        for j in range(i + 1 if causal else n):  # a causal model's future has no path: its flow is 0
            flows[i, j] = shortest_augmenting_path(graph, depth * n + i, j, residual=residual, value_only=True).graph["flow_value"]
    flows /= flows.sum(dim=-1, keepdim=True)
    mask = torch.ones(n, n, dtype=torch.bool).triu(1) if causal else None
    return Rollout(depth - 1, flows.float(), mask)
