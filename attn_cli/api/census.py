"""``attn_cli.census(texts, model=...)``: `attn-cli census` in Python, its record with the same
JSON, CSV, pictures and page."""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Iterable
from typing import Any

from attn_cli.runtime.errors import UsageError


def census(
    texts: Iterable[str] | str | os.PathLike[str],
    *,
    model: str | os.PathLike[str] | None = None,
    epsilon: float = 0.3,
    window: int | None = None,
    stride: int | None = None,
    field: str = "text",
    **options: Any,
) -> CensusResult:
    """The census of ``texts`` (a list of texts, or a corpus's path as `census` reads it: a text
    file, JSON Lines with ``field``, a folder, Parquet) through the checkpoint ``model`` or the
    toy model (its options as keywords, as ``attn_cli.trace`` takes them). ``window``, ``stride``,
    ``epsilon``: as the command line's. Runs in this process. docs/census.md has the measures."""
    from attn_cli.api import _source_options
    from attn_cli.pipeline import open_source
    from attn_cli.sources.census import run_census, windows_for
    from attn_cli.sources.spec import SourceSpec
    from attn_cli.text.corpus import Corpus, CorpusError, Entry, read_corpus

    if isinstance(texts, (str, os.PathLike)):
        corpus = read_corpus(os.fspath(texts), field=field)
    else:
        given = list(texts)
        if not all(isinstance(t, str) for t in given):
            raise UsageError("texts: give a list of str, or a corpus's path")
        entries = tuple(Entry(t, f"text {i}") for i, t in enumerate(given) if t.strip())
        if not entries:
            raise CorpusError("texts holds no text to run; give some text")
        corpus = Corpus(entries, (), len(given) - len(entries), "texts")
    config, trained = _source_options(options, model)
    spec = SourceSpec(config=config, model=None if model is None else os.fspath(model), **trained)
    source = open_source(spec)
    return CensusResult(run_census(source, corpus, windows=windows_for(source, window, stride), epsilon=epsilon))


@dataclasses.dataclass
class CensusResult:
    """A census: ``heads`` (one dict per layer and head, as the JSON's), ``to_dict``/``to_json``,
    ``to_csv``, ``figure()`` (the pictures) and ``page()`` (the HTML page, shown in a notebook)."""

    census: Any  # sources.census.Census

    def to_dict(self) -> dict[str, Any]:
        import copy

        return copy.deepcopy(self._made)  # the caller's to change

    @functools.cached_property
    def _made(self) -> dict[str, Any]:
        from attn_cli.formats.census import census_dict

        return census_dict(self.census)

    def to_json(self) -> str:
        import json

        return json.dumps(self.to_dict(), ensure_ascii=False)

    def to_csv(self) -> str:
        from attn_cli.formats.census import census_csv

        return census_csv(self.census)

    @property
    def heads(self) -> list[dict[str, Any]]:
        return self.to_dict()["heads"]

    @property
    def sink_rate(self) -> float | None:
        return self._made["sink_rate"]

    def figure(self) -> Any:
        from attn_cli.render.picture.census import census_figure

        return census_figure(self._made, getattr(self.census.model, "name", "the model"))

    def page(self) -> str:
        from attn_cli.render.page.census import census_page

        return census_page(self._made, getattr(self.census.model, "name", "the model"), self.figure(), command="attn_cli.census(...)")

    def _repr_html_(self) -> str:
        return self.page()
