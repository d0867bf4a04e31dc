"""The records every stage hands on, from the tokenizer to the renderers: ``Tokens``
(tokens), a layer's tensors (layers), the ``Trace`` of one text (trace), which layers and
heads a run keeps (selection), and what ``--hide-tokens`` takes out (hiding). Data, no
drawing: the notebook conveniences live in ``attn_cli.api``. (Not ``trace/``: a subpackage of
that name would shadow the function ``attn_cli.trace``.)"""
