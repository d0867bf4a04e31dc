"""The seeded toy model of the tutorials: its options (config), the embeddings X (embed),
its one attention layer (model), and the standalone script that reproduces a run (emit)."""
