"""Schema 2, the JSON and CSV a trace is written as (export): streamed, so a large trace is
never held twice. docs/json.md is the schema."""
