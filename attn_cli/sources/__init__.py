"""What computes attention: the one masked softmax (attend), the seeded toy model (toy/),
trained checkpoints (checkpoint/) and saved traces (saved). Each turns ``Tokens`` into a
``Trace`` (``attn_cli.records``)."""
