"""Analyses of attention beyond one layer's raw weights, as functions of what a source
computes (DESIGN.md): ``rollout`` (how much of each input token reaches each position
through the layers, Abnar & Zuidema 2020), ``norms`` (how much each head moves,
||a f(x)||, Kobayashi et al. 2020), ``compare`` (two traces, per-head total variation)
and ``effects`` (what the model makes of it: predictions, the next-token loss a head
ablation changes). Pure: no renderer, no CLI, no files."""
