"""A checkpoint token's text is what it covers of the text, with the whitespace before it there,
for every kind of tokenizer (WordPiece, byte-level BPE, Metaspace BPE with byte fallback,
Unigram, Marian's SentencePiece): the tokens' texts put together give the text back. The
labels every view shows come from them (JSON, tables, the page, --from), and a token the
vocabulary lacks shows its name beside what it replaced. The control: the decoder's texts,
which ids chosen directly still get, invent spaces ("␣'", "␣s")."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import checkpoints
import pytest
from invoking import invoke

from attn_cli.sources.checkpoint import open_checkpoint

TEXTS = ["The cat's mat (yes).", "  two  spaces\nand a line", "我的猫 sat"]
KINDS = {
    "wordpiece": (checkpoints.build_bert, {}),
    "byte-level": (checkpoints.build_gpt2, {}),
    "metaspace": (checkpoints.build_llama, dict(style="metaspace")),
    "unigram": (checkpoints.build_t5, dict(feed_forward_proj="relu")),
    "marian": (checkpoints.build_marian, {}),
}


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return checkpoints.builds_maker(tmp_path_factory, "texts", KINDS)


def encoded(folder: Path, text: str) -> Any:
    return open_checkpoint(str(folder), pairs=True).tokenizer.encode(text)


@pytest.mark.parametrize("text", TEXTS)
@pytest.mark.parametrize("kind", list(KINDS))
def test_the_tokens_texts_give_the_text_back(kind: str, text: str, folders: Any) -> None:
    tokens = encoded(folders(kind), text)
    if tokens.partial:  # a character split over byte-level or byte-fallback tokens: its pieces are \xNN escapes
        assert kind in ("byte-level", "metaspace") and "我" in text
        return
    own = [t for i, t in enumerate(tokens.texts) if not tokens.is_special(i) or tokens.unknown_name(i)]  # Marian's <unk> is special
    assert "".join(own) == text.rstrip()


def test_minilm_labels_are_the_texts_own(minilm_path: Path) -> None:
    """The issue's own examples, on the real all-MiniLM-L6-v2."""
    labels = lambda text: [t["label"] for t in run_json(minilm_path, text)["tokens"]]  # noqa: E731
    assert labels("The cat's mat (yes)") == ["[CLS]", "The", "␣cat", "'", "s", "␣mat", "␣(", "yes", ")", "[SEP]"]
    data = run_json(minilm_path, "我的猫")
    assert [t["label"] for t in data["tokens"]] == ["[CLS]", "我", "的", "[UNK](猫)", "[SEP]"]
    assert [t.get("unknown") for t in data["tokens"]] == [None, None, None, "[UNK]", None]
    assert data["tokens"][3]["text"] == "猫"
    # the control: the decoder's texts of the same ids, as ids chosen directly get them, invent spaces
    tokenizer = open_checkpoint(str(minilm_path)).tokenizer
    tokens = tokenizer.encode("The cat's mat (yes)")
    assert tokenizer.tokens_from_ids(tokens.ids, tokens.special).labels[3:5] == ("␣'", "␣s")


def run_json(folder: Path, text: str, *flags: str) -> dict[str, Any]:
    return json.loads(invoke("run", text, "--model", str(folder), "-F", "json", *flags).stdout)


def test_every_view_shows_the_unknown_tokens_name_and_text(folders: Any, tmp_path: Path) -> None:
    """The tiny BERT's vocabulary lacks 猫: its table, its page and a --from of its JSON name it."""
    folder = folders("wordpiece")
    data = run_json(folder, "我的猫")
    unknown = [t["label"] for t in data["tokens"] if "unknown" in t]
    assert unknown and all(label.startswith("[UNK](") for label in unknown)
    table = invoke("run", "我的猫", "--model", str(folder), "--show", "weights").stdout
    assert unknown[0] in table
    saved = tmp_path / "trace.json"
    saved.write_text(json.dumps(data))
    for page, source in ((tmp_path / "page.html", ("我的猫", "--model", str(folder))), (tmp_path / "saved.html", ("--from", str(saved)))):
        invoke("html", *source, "-o", str(page))
        labels = page_labels(page)
        assert labels == [t["label"] for t in data["tokens"]] and unknown[0] in labels


def page_labels(page: Path) -> list[str]:
    """The token labels a page's data holds (its script reads them from the manifest)."""
    from html_support import manifest

    (trace,) = manifest(page.read_text(encoding="utf-8"))["traces"]
    return list(trace["tokens"]["labels"])
