"""What every stage runs on and none of them is about: exit codes and typed errors
(errors), atomic writes (files), free memory and the one check before allocating
(budget), a large trace's heap (allocator), thread counts (threads), and signals
(interrupts). It imports nothing else of attn_cli's."""
