"""Text -> ``Tokens``: the tutorials' word tokenizer and tiktoken's encodings
(tokenizers), with tiktoken's rank files found or fetched offline (rankfiles). A trained
checkpoint's own tokenizer lives with the checkpoint source."""
