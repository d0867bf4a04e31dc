"""A census's corpus in each form it comes in, and the bad ones: what is kept, what is skipped
(with where and why) and counted, and the corpora with nothing to run (exit 2, one line)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from invoking import invoke

from attn_cli.text.corpus import CorpusError, read_corpus


def test_a_text_file_splits_on_newlines_only(tmp_path: Path) -> None:
    path = tmp_path / "c.txt"
    path.write_bytes(b"first line\r\n\nsecond\rstill second\n\xff\xfe not utf-8\n   \nlast")
    corpus = read_corpus(str(path))
    assert [(e.text, e.where) for e in corpus.entries] == [("first line", "line 1"), ("second\rstill second", "line 3"), ("last", "line 6")]
    assert [(s.where, s.reason) for s in corpus.skipped] == [("line 4", "not UTF-8 (byte 0xff at column 1)")]
    assert corpus.empty == 2


def test_json_lines_skip_what_cannot_be_read(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    lines = ['{"text": "one"}', "{not json", '{"body": "no text field"}', '{"text": 7}', "", '[1, 2]', '{"text": "two", "id": 3}']
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    corpus = read_corpus(str(path))
    assert [e.text for e in corpus.entries] == ["one", "two"] and corpus.empty == 1
    reasons = {s.where: s.reason for s in corpus.skipped}
    assert reasons["line 2"].startswith("not JSON") and reasons["line 3"] == "no field 'text'"
    assert reasons["line 4"] == "the field 'text' is a int, not a string" and reasons["line 6"] == "not a JSON object but a list"
    assert [e.text for e in read_corpus(str(path), field="body").entries] == ["no text field"]


def test_json_lines_without_the_field_name_the_keys_seen(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    path.write_text('{"body": "a", "id": 1}\n{"title": "b"}\n', encoding="utf-8")
    with pytest.raises(CorpusError, match=r"no record has the field 'text' \(the records' keys: body, id, title\); choose one with --field"):
        read_corpus(str(path))


def test_a_folder_in_path_order(tmp_path: Path) -> None:
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "z.md").write_text("# deep\n\n", encoding="utf-8")
    (tmp_path / "a.txt").write_text("alpha\n", encoding="utf-8")
    (tmp_path / "c.txt").write_bytes(b"\xffbad")
    (tmp_path / "notes.rst").write_text("ignored", encoding="utf-8")
    corpus = read_corpus(str(tmp_path))
    assert [(e.where, e.text) for e in corpus.entries] == [("a.txt", "alpha"), ("b/z.md", "# deep\n")]  # one final terminator dropped
    assert [s.where for s in corpus.skipped] == ["c.txt"]


def test_parquet_column(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    path = tmp_path / "c.parquet"
    pq.write_table(pa.table({"text": ["one", None, "two", ""], "n": [1, 2, 3, 4]}), path)
    corpus = read_corpus(str(path))
    assert [e.text for e in corpus.entries] == ["one", "two"] and corpus.empty == 2
    with pytest.raises(CorpusError, match=r"has no column 'body' \(its columns: text, n\)"):
        read_corpus(str(path), field="body")


def test_limit_and_a_reproducible_sample(tmp_path: Path) -> None:
    path = tmp_path / "c.txt"
    path.write_text("\n".join(f"text {i}" for i in range(50)) + "\n", encoding="utf-8")
    assert [e.text for e in read_corpus(str(path), limit=3).entries] == ["text 0", "text 1", "text 2"]
    one, two = read_corpus(str(path), sample=10, seed=4), read_corpus(str(path), sample=10, seed=4)
    assert one.entries == two.entries and len(one.entries) == 10
    assert [int(e.text.split()[1]) for e in one.entries] == sorted(int(e.text.split()[1]) for e in one.entries)  # corpus order
    assert read_corpus(str(path), sample=10, seed=5).entries != one.entries


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("empty.txt", b"", "holds no text to run (0 empty)"),
        ("blank.txt", b"\n \n\n", "holds no text to run (3 empty)"),
        ("bad.txt", b"\xff\n", "holds no text to run (0 empty, 1 skipped (line 1: not UTF-8"),
        ("no-field.jsonl", b'{"a": 1}\n', "no record has the field 'text'"),
    ],
)
def test_nothing_to_run_is_exit_2_in_one_line(tmp_path: Path, name: str, content: bytes, message: str) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    result = invoke("census", str(path), code=2)
    assert message in result.stderr and result.stderr.count("\n") == 1 and "Traceback" not in result.stderr and result.stdout == ""


def test_a_folder_without_texts_and_a_missing_corpus(tmp_path: Path) -> None:
    (tmp_path / "x.rst").write_text("no", encoding="utf-8")
    assert "holds no .txt or .md file" in invoke("census", str(tmp_path), code=2).stderr
    assert "does not exist" in invoke("census", str(tmp_path / "nope.txt"), code=2).stderr


def test_standard_input_and_the_skipped_note(tmp_path: Path) -> None:
    result = invoke("census", "-", "-F", "json", input=b"the cat sat\n\n\xff\nthe dog ran\n")
    data = json.loads(result.stdout)
    assert data["texts"] == 2 and data["empty"] == 1 and data["skipped"] == [{"where": "line 3", "reason": "not UTF-8 (byte 0xff at column 1)"}]
    assert "note: 2 texts kept; skipped 1 empty and 1 unreadable" in result.stderr
