"""`attn-cli heatmap` (being written)."""
