"""Pictures, as matplotlib Figures: one layer's heads (heatmap), every layer's (model_view),
the ablation grid (heads) and a comparison (compare), with titles that fit (titles), fonts
for any script (fonts) and the choices of what to draw (kinds, no matplotlib)."""
