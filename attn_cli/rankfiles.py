"""Loading tiktoken encodings on machines that are offline.

tiktoken fetches its BPE rank files from the web on first use and caches them
in ``$TIKTOKEN_CACHE_DIR``. attn-cli keeps that cache, and adds two offline
sources, searched in this order when the cache has no valid copy:

1. every folder named in ``$ATTN_CLI_TIKTOKEN_DIR`` (``os.pathsep``-separated),
   holding the files under their canonical names (``r50k_base.tiktoken``,
   ``vocab.bpe``, ``encoder.json``, ...);
2. attn-cli's own data folder, where ``attn-cli tokenizers add FILE`` puts
   hash-checked copies (``$ATTN_CLI_DATA_DIR``, else ``$XDG_DATA_HOME/attn-cli``,
   else ``~/.local/share/attn-cli``).

Only then is a download tried, with a timeout of ``$ATTN_CLI_DOWNLOAD_TIMEOUT``
seconds (default 10); ``ATTN_CLI_OFFLINE=1`` skips it. Every file, whatever
its source, is checked against the SHA-256 that tiktoken itself expects.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import http.client
import os
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

from attn_cli.errors import InputError, OutputError, TokenizerUnavailable
from attn_cli.files import write_atomic

DIR_ENV = "ATTN_CLI_TIKTOKEN_DIR"
DATA_DIR_ENV = "ATTN_CLI_DATA_DIR"
OFFLINE_ENV = "ATTN_CLI_OFFLINE"
TIMEOUT_ENV = "ATTN_CLI_DOWNLOAD_TIMEOUT"
DEFAULT_TIMEOUT = 10.0

_patch_lock = threading.Lock()
T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class RankFile:
    """One file an encoding is built from."""

    url: str
    sha256: str

    @property
    def name(self) -> str:
        """The canonical file name: the last part of tiktoken's URL."""
        return self.url.rsplit("/", 1)[-1]


@dataclasses.dataclass(frozen=True)
class Availability:
    encoding: str
    files: tuple[RankFile, ...]
    missing: tuple[str, ...]  # canonical names with no intact copy in any offline source
    corrupt: tuple[Path, ...] = ()  # offline copies whose SHA-256 is not the one tiktoken expects

    @property
    def ready(self) -> bool:
        return not self.missing


class _Corrupt(Exception):
    def __init__(self, name: str, path: Path) -> None:
        super().__init__(name)
        self.name = name
        self.path = path


class _Missing(Exception):
    def __init__(self, name: str, reason: str) -> None:
        super().__init__(name)
        self.name = name
        self.reason = reason


def data_dir() -> Path:
    if os.environ.get(DATA_DIR_ENV):
        return Path(os.environ[DATA_DIR_ENV])
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(Path.home(), ".local", "share")
    return Path(base) / "attn-cli"


def search_dirs() -> list[Path]:
    """The offline folders, in search order."""
    named = [Path(p) for p in os.environ.get(DIR_ENV, "").split(os.pathsep) if p]
    return [*named, data_dir() / "tiktoken"]


def tiktoken_cache_dir() -> str:
    """Where tiktoken itself caches (mirrors tiktoken.load.read_file_cached)."""
    for var in ("TIKTOKEN_CACHE_DIR", "DATA_GYM_CACHE_DIR"):
        if var in os.environ:
            return os.environ[var]
    return os.path.join(tempfile.gettempdir(), "data-gym-cache")


def rank_files(encoding: str) -> tuple[RankFile, ...]:
    """The files tiktoken would read to build ``encoding``, found by running its
    constructor with the reader swapped for one that only takes notes."""
    import tiktoken.load
    import tiktoken.registry

    tiktoken.registry.list_encoding_names()  # fills ENCODING_CONSTRUCTORS
    constructor = (tiktoken.registry.ENCODING_CONSTRUCTORS or {})[encoding]
    seen: list[RankFile] = []

    def note(blobpath: str, expected_hash: str | None = None) -> bytes:
        seen.append(RankFile(blobpath, expected_hash or ""))
        return b"{}"

    with _patched(tiktoken.load, "read_file_cached", note):
        with contextlib.suppress(Exception):  # the constructor chokes on the empty data
            constructor()
    return tuple(seen)


def availability(encoding: str) -> Availability:
    """Which of ``encoding``'s files are on this machine. gpt2 counts as ready when
    r50k_base is, since ``load_encoding`` builds it from that file then."""
    found = _availability(encoding)
    if encoding == "gpt2" and not found.ready:
        r50k = _availability("r50k_base")
        if r50k.ready:
            return Availability(encoding, r50k.files, ())
    return found


def _availability(encoding: str) -> Availability:
    files = rank_files(encoding)
    missing = tuple(f.name for f in files if _cached(f) is None and _local(f) is None)
    corrupt = tuple(path for f in files for path in _candidates(f) if not _intact(path, f))
    return Availability(encoding, files, missing, corrupt)


def load_encoding(encoding: str):  # -> tiktoken.Encoding
    """``tiktoken.get_encoding`` that reads the offline folders and never hangs."""
    import tiktoken
    import tiktoken.registry

    if encoding == "gpt2" and "gpt2" not in tiktoken.registry.ENCODINGS and _availability("r50k_base").ready:
        # gpt2's vocab.bpe + encoder.json hold exactly r50k_base's ranks, pattern and
        # special token (tests/test_rankfiles.py checks it), and r50k_base.tiktoken
        # loads about five times faster than those two files are parsed.
        params = _offline("r50k_base", tiktoken.registry.ENCODING_CONSTRUCTORS["r50k_base"])  # type: ignore[index]
        gpt2 = tiktoken.Encoding(**{**params, "name": "gpt2"})
        tiktoken.registry.ENCODINGS["gpt2"] = gpt2
        return gpt2
    return _offline(encoding, lambda: tiktoken.get_encoding(encoding))


def _offline(encoding: str, load: Callable[[], T]) -> T:
    """Run ``load`` with tiktoken's reader swapped for one that searches the offline
    folders first, checks every file's hash, and downloads only with a timeout."""
    import tiktoken.load

    # tiktoken checks hashes only when its cache is on (TIKTOKEN_CACHE_DIR="" turns
    # both off), so every file is checked here too, against the same hashes.
    expected = {f.url: f for f in rank_files(encoding)}

    def read_file(blobpath: str) -> bytes:
        if "://" not in blobpath:
            return original(blobpath)
        rank_file = expected.get(blobpath) or RankFile(blobpath, "")
        local = _local(rank_file)
        if local is not None:
            return local.read_bytes()
        corrupt = [path for path in _candidates(rank_file) if not _intact(path, rank_file)]
        if corrupt:
            raise _Corrupt(rank_file.name, corrupt[0])
        data = _download(blobpath, rank_file.name)
        if rank_file.sha256 and hashlib.sha256(data).hexdigest() != rank_file.sha256:
            raise _Missing(rank_file.name, "the downloaded copy does not have the expected SHA-256")
        return data

    original = tiktoken.load.read_file
    try:
        with _patched(tiktoken.load, "read_file", read_file):
            return load()
    except _Corrupt as corrupt:
        raise TokenizerUnavailable(
            f"tokenizer {encoding!r}: {corrupt.path} does not have the SHA-256 tiktoken expects for "
            f"{corrupt.name} (a damaged or different file); replace it with an intact copy",
            reason=f"{corrupt.path} is damaged",
        ) from None
    except _Missing as missing:
        raise TokenizerUnavailable(
            f"tokenizer {encoding!r} needs {missing.name}, which is not on this machine "
            f"({missing.reason}); put the file in a folder named by ${DIR_ENV}, "
            f"or run `attn-cli tokenizers add PATH/{missing.name}`",
            reason=f"{missing.name} is missing",
        ) from None
    except ValueError as err:  # tiktoken's hash mismatch, or a file it cannot parse
        raise TokenizerUnavailable(
            f"a rank file for {encoding!r} is not what tiktoken expects; "
            f"replace it with an intact copy ({_first_line(err)})"
        ) from None


def add_rank_file(path: Path) -> tuple[str, list[str]]:
    """Copy a known rank file into the data folder under its canonical name.

    Returns the canonical name and the encodings it serves. The file is known by
    its SHA-256, so a renamed copy (whisper's ``gpt2.tiktoken``) is accepted.
    """
    import tiktoken

    try:
        data = path.read_bytes()
    except OSError as err:
        raise InputError(f"cannot read {path}: {err.strerror or err}") from None
    digest = hashlib.sha256(data).hexdigest()
    name, serves = None, []
    for encoding in tiktoken.list_encoding_names():
        for rank_file in rank_files(encoding):
            if rank_file.sha256 == digest:
                name = rank_file.name
                serves.append(encoding)
    if name is None:
        raise InputError(
            f"{path} is not a rank file tiktoken knows (SHA-256 {digest[:12]}...); "
            f"expected one of the files listed by `attn-cli tokenizers`"
        )
    target = data_dir() / "tiktoken" / name
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise OutputError(
            f"cannot create {target.parent}: {err.strerror or err}; set ${DATA_DIR_ENV} to a folder you can write"
        ) from None
    write_atomic(target, data)
    return name, serves


def _candidates(rank_file: RankFile) -> list[Path]:
    """Files under the canonical name in the offline folders, in search order."""
    return [folder / rank_file.name for folder in search_dirs() if (folder / rank_file.name).is_file()]


def _intact(path: Path, rank_file: RankFile) -> bool:
    if not rank_file.sha256:
        return True
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest() == rank_file.sha256
    except OSError:
        return False


def _local(rank_file: RankFile) -> Path | None:
    """The first intact copy in the offline folders."""
    return next((path for path in _candidates(rank_file) if _intact(path, rank_file)), None)


def _cached(rank_file: RankFile) -> Path | None:
    """tiktoken's cached copy, if intact (tiktoken deletes one that is not)."""
    cache = tiktoken_cache_dir()
    if not cache:
        return None
    candidate = Path(cache) / hashlib.sha1(rank_file.url.encode()).hexdigest()
    return candidate if candidate.is_file() and _intact(candidate, rank_file) else None


def _download(url: str, name: str) -> bytes:
    if os.environ.get(OFFLINE_ENV, "") not in ("", "0"):
        raise _Missing(name, f"{OFFLINE_ENV} is set, so no download was tried")
    import urllib.request

    try:
        timeout = float(os.environ.get(TIMEOUT_ENV, DEFAULT_TIMEOUT))
    except ValueError:
        timeout = DEFAULT_TIMEOUT
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 (tiktoken's https URL)
            return response.read()
    except (OSError, ValueError, http.client.HTTPException) as err:
        reason = getattr(err, "reason", None) or err
        raise _Missing(name, f"the download failed: {_first_line(reason)}") from None


@contextlib.contextmanager
def _patched(module: object, attribute: str, replacement: object) -> Iterator[None]:
    with _patch_lock:
        original = getattr(module, attribute)
        setattr(module, attribute, replacement)
        try:
            yield
        finally:
            setattr(module, attribute, original)


def _first_line(err: object) -> str:
    text = str(err).strip().splitlines()
    return text[0] if text else type(err).__name__
