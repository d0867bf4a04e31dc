"""Offline rank files: where they are looked for, hash checks, `tokenizers add`.

Most tests need no real data: a file with the wrong bytes is all a hash check
needs. The integration ones use the real files through the ``rank_dir`` fixture.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import tiktoken
import tiktoken.registry

from attn_cli.text import rankfiles
from attn_cli.runtime.errors import ExitStatus, InputError, OutputError, TokenizerUnavailable
from attn_cli.text.rankfiles import (
    Availability,
    RankFile,
    add_rank_file,
    availability,
    data_dir,
    load_encoding,
    rank_files,
    search_dirs,
    tiktoken_cache_dir,
)

HEADLINE = "Life is short, eat dessert first"
GPT2_IDS = [14662, 318, 1790, 11, 4483, 23084, 717]
# From the table in shared/tiktoken/README.md (tiktoken 0.14's expected hashes).
SHA256 = {
    "r50k_base.tiktoken": "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930",
    "p50k_base.tiktoken": "94b5ca7dff4d00767bc256fdd1b27e5b17361d7b8a5f968547f9f23eb70d2069",
    "cl100k_base.tiktoken": "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
    "o200k_base.tiktoken": "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
    "vocab.bpe": "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5",
    "encoder.json": "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783",
}
CACHE_NAME = {"r50k_base.tiktoken": "0ea1e91bbb3a60f729a8dc8f777fd2fc07cd8df4"}


@pytest.fixture(autouse=True)
def fresh_tiktoken_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """tiktoken keeps every encoding it built for the life of the process."""
    monkeypatch.setattr(tiktoken.registry, "ENCODINGS", {})


def folder_with(tmp_path: Path, name: str, files: dict[str, bytes]) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    for file_name, data in files.items():
        (folder / file_name).write_bytes(data)
    return folder


# --- what each encoding needs ---


@pytest.mark.parametrize(
    ("encoding", "files"),
    [
        ("gpt2", ("vocab.bpe", "encoder.json")),
        ("r50k_base", ("r50k_base.tiktoken",)),
        ("p50k_base", ("p50k_base.tiktoken",)),
        ("p50k_edit", ("p50k_base.tiktoken",)),
        ("cl100k_base", ("cl100k_base.tiktoken",)),
        ("o200k_base", ("o200k_base.tiktoken",)),
        ("o200k_harmony", ("o200k_base.tiktoken",)),
    ],
)
def test_rank_files_names_and_hashes(encoding: str, files: tuple[str, ...]) -> None:
    found = rank_files(encoding)
    assert tuple(f.name for f in found) == files
    assert all(f.sha256 == SHA256[f.name] for f in found)
    assert all(f.url.startswith("https://") for f in found)


def test_every_encoding_tiktoken_knows_is_covered() -> None:
    for encoding in tiktoken.list_encoding_names():
        assert rank_files(encoding), encoding


# --- where files are looked for ---


def test_search_dirs_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ATTN_CLI_TIKTOKEN_DIR", os.pathsep.join([str(tmp_path / "a"), "", str(tmp_path / "b")]))
    monkeypatch.setenv("ATTN_CLI_DATA_DIR", str(tmp_path / "data"))
    assert search_dirs() == [tmp_path / "a", tmp_path / "b", tmp_path / "data" / "tiktoken"]


def test_data_dir_precedence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ATTN_CLI_DATA_DIR", str(tmp_path / "own"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert data_dir() == tmp_path / "own"
    monkeypatch.delenv("ATTN_CLI_DATA_DIR")
    assert data_dir() == tmp_path / "xdg" / "attn-cli"
    monkeypatch.delenv("XDG_DATA_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert data_dir() == tmp_path / "home" / ".local" / "share" / "attn-cli"


def test_tiktoken_cache_dir_mirrors_tiktoken(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "t"))
    monkeypatch.setenv("DATA_GYM_CACHE_DIR", str(tmp_path / "d"))
    assert tiktoken_cache_dir() == str(tmp_path / "t")
    monkeypatch.delenv("TIKTOKEN_CACHE_DIR")
    assert tiktoken_cache_dir() == str(tmp_path / "d")
    monkeypatch.delenv("DATA_GYM_CACHE_DIR")
    assert tiktoken_cache_dir().endswith("data-gym-cache")


# --- availability (no real files needed for the negative cases) ---


def test_nothing_is_ready_on_an_empty_machine() -> None:
    for encoding in tiktoken.list_encoding_names():
        status = availability(encoding)
        assert not status.ready
        assert status.missing == tuple(f.name for f in status.files)
        assert status.corrupt == ()


def test_a_damaged_file_is_not_ready(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = folder_with(tmp_path, "ranks", {"r50k_base.tiktoken": b"not the ranks"})
    monkeypatch.setenv("ATTN_CLI_TIKTOKEN_DIR", str(folder))
    status = availability("r50k_base")
    assert status == Availability("r50k_base", rank_files("r50k_base"), ("r50k_base.tiktoken",), (folder / "r50k_base.tiktoken",))
    assert not status.ready


def test_a_damaged_file_is_an_error_not_a_crash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = folder_with(tmp_path, "ranks", {"vocab.bpe": b"#version: 0.2\nh e\n", "encoder.json": b"{}"})
    monkeypatch.setenv("ATTN_CLI_TIKTOKEN_DIR", str(folder))
    with pytest.raises(TokenizerUnavailable) as info:
        load_encoding("gpt2")
    message = str(info.value)
    assert "SHA-256" in message and str(folder / "vocab.bpe") in message and "intact copy" in message
    assert "\n" not in message
    assert info.value.exit_status == ExitStatus.TOKENIZER_UNAVAILABLE


def test_a_damaged_file_is_caught_even_with_tiktokens_cache_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # TIKTOKEN_CACHE_DIR="" makes tiktoken skip its own hash check.
    folder = folder_with(tmp_path, "ranks", {"r50k_base.tiktoken": b"aGk= 0\n"})  # a valid-looking, wrong rank file
    monkeypatch.setenv("ATTN_CLI_TIKTOKEN_DIR", str(folder))
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", "")
    with pytest.raises(TokenizerUnavailable, match="SHA-256"):
        load_encoding("r50k_base")


def test_missing_files_name_the_fix() -> None:
    with pytest.raises(TokenizerUnavailable) as info:
        load_encoding("cl100k_base")
    message = str(info.value)
    assert "cl100k_base.tiktoken" in message and "ATTN_CLI_TIKTOKEN_DIR" in message
    assert "attn-cli tokenizers add" in message and "ATTN_CLI_OFFLINE" in message
    assert info.value.reason == "cl100k_base.tiktoken is missing"


def test_a_failed_download_is_unavailable_not_a_hang(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []

    def refuse(url: str, timeout: float):
        calls.append((url, timeout))
        raise urllib.error.URLError("no route to host")

    monkeypatch.delenv("ATTN_CLI_OFFLINE")
    monkeypatch.setenv("ATTN_CLI_DOWNLOAD_TIMEOUT", "2.5")
    monkeypatch.setattr(urllib.request, "urlopen", refuse)
    with pytest.raises(TokenizerUnavailable, match="the download failed: no route to host"):
        load_encoding("r50k_base")
    assert calls == [(rank_files("r50k_base")[0].url, 2.5)]


def test_a_download_with_the_wrong_bytes_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    class Response:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def read(self, size: int = -1) -> bytes:
            return b"aGk= 0\n"

    monkeypatch.delenv("ATTN_CLI_OFFLINE")
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", "")
    monkeypatch.setattr(urllib.request, "urlopen", lambda url, timeout: Response())
    with pytest.raises(TokenizerUnavailable, match="SHA-256"):
        load_encoding("r50k_base")


def test_add_rejects_an_unknown_file(tmp_path: Path) -> None:
    path = tmp_path / "gpt2.tiktoken"
    path.write_bytes(b"something else")
    with pytest.raises(InputError, match="is not a rank file tiktoken knows") as info:
        add_rank_file(path)
    assert info.value.exit_status == ExitStatus.USAGE
    assert not (data_dir() / "tiktoken").exists()


def test_add_a_file_that_is_not_there(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="cannot read"):
        add_rank_file(tmp_path / "nope.tiktoken")
    with pytest.raises(InputError, match="cannot read"):
        add_rank_file(tmp_path)


# --- with the real files ---


@pytest.mark.integration
def test_everything_is_ready_with_the_real_files(rank_dir: Path) -> None:
    for encoding in tiktoken.list_encoding_names():
        status = availability(encoding)
        assert status.ready and status.missing == () and status.corrupt == (), encoding


@pytest.mark.integration
def test_ready_and_missing_per_file(rank_dir: Path) -> None:
    (rank_dir / "encoder.json").unlink()
    (rank_dir / "r50k_base.tiktoken").unlink()
    assert availability("gpt2").missing == ("encoder.json",)
    assert not availability("r50k_base").ready


@pytest.mark.integration
def test_gpt2_is_ready_when_r50k_base_is(rank_dir: Path) -> None:
    (rank_dir / "encoder.json").unlink()
    status = availability("gpt2")
    assert status.ready and [f.name for f in status.files] == ["r50k_base.tiktoken"]
    assert load_encoding("gpt2").encode(HEADLINE) == GPT2_IDS


@pytest.mark.integration
def test_an_intact_copy_in_a_later_folder_wins_over_a_damaged_one(rank_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    damaged = folder_with(tmp_path, "damaged", {"r50k_base.tiktoken": b"junk"})
    monkeypatch.setenv("ATTN_CLI_TIKTOKEN_DIR", os.pathsep.join([str(damaged), str(rank_dir)]))
    status = availability("r50k_base")
    assert status.ready and status.corrupt == (damaged / "r50k_base.tiktoken",)
    assert load_encoding("r50k_base").encode(HEADLINE) == GPT2_IDS


@pytest.mark.integration
def test_loads_from_tiktokens_own_cache(rank_dir: Path, monkeypatch: pytest.MonkeyPatch, offline_env: Path) -> None:
    cache = offline_env / "tiktoken-cache"
    cache.mkdir(exist_ok=True)
    shutil.copy(rank_dir / "r50k_base.tiktoken", cache / CACHE_NAME["r50k_base.tiktoken"])
    monkeypatch.delenv("ATTN_CLI_TIKTOKEN_DIR")
    assert availability("r50k_base").ready
    assert availability("gpt2").ready  # built from r50k_base's file
    assert load_encoding("r50k_base").encode(HEADLINE) == GPT2_IDS
    assert load_encoding("gpt2").encode(HEADLINE) == GPT2_IDS


@pytest.mark.integration
def test_a_damaged_cache_copy_is_replaced_from_the_folder(rank_dir: Path, offline_env: Path) -> None:
    cache = offline_env / "tiktoken-cache"
    cache.mkdir(exist_ok=True)
    cached = cache / CACHE_NAME["r50k_base.tiktoken"]
    cached.write_bytes(b"damaged")
    assert availability("r50k_base").ready  # the folder's copy is intact
    assert load_encoding("r50k_base").encode(HEADLINE) == GPT2_IDS
    assert hashlib.sha256(cached.read_bytes()).hexdigest() == SHA256["r50k_base.tiktoken"]


@pytest.mark.integration
def test_add_accepts_a_renamed_copy_by_its_hash(rank_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    renamed = tmp_path / "gpt2.tiktoken"  # whisper's name for the r50k ranks
    shutil.copy(rank_dir / "r50k_base.tiktoken", renamed)
    monkeypatch.delenv("ATTN_CLI_TIKTOKEN_DIR")
    assert not availability("r50k_base").ready
    assert add_rank_file(renamed) == ("r50k_base.tiktoken", ["r50k_base"])
    target = data_dir() / "tiktoken" / "r50k_base.tiktoken"
    assert target.read_bytes() == renamed.read_bytes()
    assert availability("r50k_base").ready
    assert load_encoding("r50k_base").encode(HEADLINE) == GPT2_IDS


@pytest.mark.integration
def test_add_p50k_serves_both_its_encodings(rank_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ATTN_CLI_TIKTOKEN_DIR")
    assert add_rank_file(rank_dir / "p50k_base.tiktoken") == ("p50k_base.tiktoken", ["p50k_base", "p50k_edit"])
    assert availability("p50k_edit").ready


def test_rank_file_name_is_the_last_part_of_the_url() -> None:
    assert RankFile("https://example.invalid/a/b/vocab.bpe", "").name == "vocab.bpe"


@pytest.mark.integration
def test_add_with_a_data_folder_that_cannot_be_made(rank_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder", encoding="utf-8")
    monkeypatch.setenv("ATTN_CLI_DATA_DIR", str(blocker / "data"))
    with pytest.raises(OutputError, match="ATTN_CLI_DATA_DIR") as info:
        add_rank_file(rank_dir / "r50k_base.tiktoken")
    assert info.value.exit_status == ExitStatus.ERROR


@pytest.mark.integration
@pytest.mark.parametrize("keep", [("r50k_base.tiktoken",), ("vocab.bpe", "encoder.json")], ids=["from-r50k", "from-vocab-bpe"])
def test_gpt2_loads_from_either_set_of_files(rank_dir: Path, keep: tuple[str, ...]) -> None:
    for path in rank_dir.iterdir():
        if path.name not in keep:
            path.unlink()
    gpt2 = rankfiles.load_encoding("gpt2")
    assert gpt2.name == "gpt2" and gpt2.n_vocab == 50257
    assert gpt2.encode("Life is short, eat dessert first") == [14662, 318, 1790, 11, 4483, 23084, 717]
    assert gpt2.encode("<|endoftext|>", allowed_special="all") == [50256]


@pytest.mark.integration
def test_gpt2_from_r50k_is_the_same_encoding_as_from_vocab_bpe(rank_dir: Path) -> None:
    fast = rankfiles.load_encoding("gpt2")  # r50k_base.tiktoken is there, so it is used
    tiktoken.registry.ENCODINGS.clear()
    (rank_dir / "r50k_base.tiktoken").unlink()
    slow = rankfiles.load_encoding("gpt2")
    assert fast is not slow
    assert fast._mergeable_ranks == slow._mergeable_ranks
    assert fast._special_tokens == slow._special_tokens and fast._pat_str == slow._pat_str
