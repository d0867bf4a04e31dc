"""Loading tiktoken encodings on machines that are offline.

tiktoken fetches its BPE rank files from the web on first use and caches them
in ``$TIKTOKEN_CACHE_DIR`` under the SHA-1 of their URL. attn-cli fills that
cache before it asks tiktoken for an encoding, so tiktoken finds every file
there and never downloads; this is also what lets an ``--emit-python`` script
run offline after one attn-cli run. The files come from, in this order:

1. tiktoken's cache itself, when its copy is intact;
2. every folder named in ``$ATTN_CLI_TIKTOKEN_DIR`` (``os.pathsep``-separated),
   holding the files under their canonical names (``r50k_base.tiktoken``,
   ``vocab.bpe``, ``encoder.json``, ...);
3. attn-cli's own data folder, where ``attn-cli tokenizers add FILE`` puts
   hash-checked copies (``$ATTN_CLI_DATA_DIR``, else ``$XDG_DATA_HOME/attn-cli``,
   else ``~/.local/share/attn-cli``);
4. a download, with a timeout of ``$ATTN_CLI_DOWNLOAD_TIMEOUT`` seconds
   (default 10); ``ATTN_CLI_OFFLINE=1`` skips it.

Every file, whatever its source, is checked against the SHA-256 tiktoken
expects. When tiktoken's cache cannot be written (a file where the folder
should be, a read-only folder, ``TIKTOKEN_CACHE_DIR=""``), a private cache for
this one load is used instead.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import http.client
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from attn_cli.runtime.errors import InputError, OutputError, TokenizerUnavailable, TooLargeError
from attn_cli.runtime.files import home_folder, write_atomic

DIR_ENV = "ATTN_CLI_TIKTOKEN_DIR"
DATA_DIR_ENV = "ATTN_CLI_DATA_DIR"
OFFLINE_ENV = "ATTN_CLI_OFFLINE"
TIMEOUT_ENV = "ATTN_CLI_DOWNLOAD_TIMEOUT"
DEFAULT_TIMEOUT = 10.0
CACHE_ENV = "TIKTOKEN_CACHE_DIR"
MAX_RANK_FILE_BYTES = 64 * 2**20  # the largest known (o200k_base) is 3.6 MB; nothing bigger is read
_BLOB = "https://openaipublic.blob.core.windows.net"


@dataclasses.dataclass(frozen=True)
class RankFile:
    """One file an encoding is built from."""

    url: str
    sha256: str

    @property
    def name(self) -> str:
        """The canonical file name: the last part of tiktoken's URL."""
        return self.url.rsplit("/", 1)[-1]

    @property
    def cache_name(self) -> str:
        """The name tiktoken gives its cached copy: the SHA-1 of the URL."""
        return hashlib.sha1(self.url.encode()).hexdigest()


# The files of tiktoken's OpenAI encodings, with the URL and SHA-256 that
# tiktoken_ext/openai_public.py gives them. tests/text/test_rankfiles.py builds every
# encoding from a cache filled from this table, with downloads refused, so a
# tiktoken that names other files fails that test.
_R50K = RankFile(f"{_BLOB}/encodings/r50k_base.tiktoken", "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930")
_P50K = RankFile(f"{_BLOB}/encodings/p50k_base.tiktoken", "94b5ca7dff4d00767bc256fdd1b27e5b17361d7b8a5f968547f9f23eb70d2069")
_CL100K = RankFile(f"{_BLOB}/encodings/cl100k_base.tiktoken", "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7")
_O200K = RankFile(f"{_BLOB}/encodings/o200k_base.tiktoken", "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d")
_VOCAB_BPE = RankFile(f"{_BLOB}/gpt-2/encodings/main/vocab.bpe", "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5")
_ENCODER_JSON = RankFile(f"{_BLOB}/gpt-2/encodings/main/encoder.json", "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783")
ENCODING_FILES: dict[str, tuple[RankFile, ...]] = {
    "gpt2": (_VOCAB_BPE, _ENCODER_JSON),
    "r50k_base": (_R50K,),
    "p50k_base": (_P50K,),
    "p50k_edit": (_P50K,),
    "cl100k_base": (_CL100K,),
    "o200k_base": (_O200K,),
    "o200k_harmony": (_O200K,),
}


@dataclasses.dataclass(frozen=True)
class Availability:
    encoding: str
    files: tuple[RankFile, ...]
    missing: tuple[str, ...]  # canonical names with no intact copy in any offline source
    corrupt: tuple[Path, ...] = ()  # offline copies whose SHA-256 is not the one tiktoken expects

    @property
    def ready(self) -> bool:
        return not self.missing


def data_dir() -> Path:
    if os.environ.get(DATA_DIR_ENV):
        return Path(os.environ[DATA_DIR_ENV])
    if os.environ.get("XDG_DATA_HOME"):
        return Path(os.environ["XDG_DATA_HOME"]) / "attn-cli"
    home = home_folder()
    if home is None:
        raise OutputError(f"attn-cli cannot tell where your home folder is (HOME is not set); set ${DATA_DIR_ENV} to a folder")
    return home / ".local" / "share" / "attn-cli"


def search_dirs() -> list[Path]:
    """The offline folders, in search order (without a home folder, no data folder)."""
    named = [Path(p) for p in os.environ.get(DIR_ENV, "").split(os.pathsep) if p]
    try:
        return [*named, data_dir() / "tiktoken"]
    except OutputError:
        return named


def tiktoken_cache_dir() -> str:
    """Where tiktoken itself caches (mirrors tiktoken.load.read_file_cached)."""
    for var in ("TIKTOKEN_CACHE_DIR", "DATA_GYM_CACHE_DIR"):
        if var in os.environ:
            return os.environ[var]
    return os.path.join(tempfile.gettempdir(), "data-gym-cache")


def rank_files(encoding: str) -> tuple[RankFile, ...]:
    """The files tiktoken reads to build ``encoding`` (none known: ``()``)."""
    return ENCODING_FILES.get(encoding, ())


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

    if encoding == "gpt2" and _availability("r50k_base").ready:
        # gpt2's vocab.bpe + encoder.json hold exactly r50k_base's ranks, pattern and
        # special token (tests/text/test_rankfiles.py checks it): build gpt2 from them, the
        # way tiktoken's README extends an encoding.
        r50k = load_encoding("r50k_base")
        return tiktoken.Encoding(
            name="gpt2",
            pat_str=r50k._pat_str,
            mergeable_ranks=r50k._mergeable_ranks,
            special_tokens=r50k._special_tokens,
            explicit_n_vocab=r50k.n_vocab,
        )
    files = rank_files(encoding)
    with _filled_cache(encoding, files):
        try:
            return tiktoken.get_encoding(encoding)
        except ValueError as err:  # a file tiktoken cannot parse, though its hash is right
            raise TokenizerUnavailable(
                f"a rank file for {encoding!r} is not what tiktoken expects; "
                f"replace it with an intact copy ({_first_line(err)})"
            ) from None


@contextlib.contextmanager
def _filled_cache(encoding: str, files: tuple[RankFile, ...]) -> Iterator[None]:
    """tiktoken's cache holding an intact copy of each of ``files``, for the block.

    The user's cache when it can be written (the copies stay, for tiktoken and
    --emit-python scripts); else a private one, named by TIKTOKEN_CACHE_DIR
    for the block only."""
    wanted = _gather(encoding, [f for f in files if _cached(f) is None])
    if not wanted:
        yield
        return
    cache = tiktoken_cache_dir()
    if cache and _write_cache(Path(cache), wanted):
        yield
        return
    with tempfile.TemporaryDirectory(prefix="attn-cli-tiktoken-") as private:
        for f in files:  # what the user's cache holds too: tiktoken reads only this one now
            if f not in wanted:
                wanted[f] = _read_bounded(_cached(f))  # type: ignore[arg-type]
        _write_cache(Path(private), wanted)
        before = os.environ.get(CACHE_ENV)
        os.environ[CACHE_ENV] = private
        try:
            yield
        finally:
            if before is None:
                del os.environ[CACHE_ENV]
            else:
                os.environ[CACHE_ENV] = before


def _write_cache(folder: Path, files: dict[RankFile, bytes]) -> bool:
    try:
        folder.mkdir(parents=True, exist_ok=True)
        for f, data in files.items():
            write_atomic(folder / f.cache_name, data)
    except (OSError, OutputError):
        return False
    return True


def _gather(encoding: str, files: list[RankFile]) -> dict[RankFile, bytes]:
    """An intact copy of each of ``files``, from the offline folders or downloaded.
    Every file that cannot be had is named in one error."""
    found: dict[RankFile, bytes] = {}
    missing: list[tuple[RankFile, str]] = []
    for rank_file in files:
        local = _local(rank_file)
        if local is not None:
            found[rank_file] = _read_bounded(local)
            continue
        corrupt = [path for path in _candidates(rank_file) if not _intact(path, rank_file)]
        unreadable = [path for path in corrupt if not os.access(path, os.R_OK)]
        if unreadable:
            raise TokenizerUnavailable(
                f"tokenizer {encoding!r}: {unreadable[0]} cannot be read (permission denied); "
                f"make it readable, or put an intact copy in another folder named by ${DIR_ENV}",
                reason=f"{unreadable[0]} cannot be read",
            )
        if corrupt:
            raise TokenizerUnavailable(
                f"tokenizer {encoding!r}: {corrupt[0]} does not have the SHA-256 tiktoken expects for "
                f"{rank_file.name} (a damaged or different file); replace it with an intact copy",
                reason=f"{corrupt[0]} is damaged",
            )
        try:
            found[rank_file] = _download(rank_file)
        except _Missing as err:
            missing.append((rank_file, err.reason))
    if missing:
        names = " and ".join(f.name for f, _ in missing)
        also = " (or r50k_base.tiktoken alone, which holds the same ranks)" if encoding == "gpt2" else ""
        files_word = "files" if len(missing) > 1 else "file"
        raise TokenizerUnavailable(
            f"tokenizer {encoding!r} needs {names}{also}, not on this machine ({missing[0][1]}); "
            f"put the {files_word} in a folder named by ${DIR_ENV}, or run "
            f"`attn-cli tokenizers add {' '.join('PATH/' + f.name for f, _ in missing)}`",
            reason=f"{names} {'are' if len(missing) > 1 else 'is'} missing",
        )
    return found


def add_rank_file(path: Path) -> tuple[str, list[str]]:
    """Copy a known rank file into the data folder under its canonical name.

    Returns the canonical name and the encodings it serves. The file is known by
    its SHA-256, so a renamed copy (whisper's ``gpt2.tiktoken``) is accepted.
    """
    try:
        data = _read_bounded(path)
    except TooLargeError:
        raise InputError(
            f"{path} is not a rank file tiktoken knows (it is over {MAX_RANK_FILE_BYTES // 2**20} MiB, "
            f"and none is); expected one of the files listed by `attn-cli tokenizers`"
        ) from None
    except OSError as err:
        raise InputError(f"cannot read {path}: {err.strerror or err}") from None
    digest = hashlib.sha256(data).hexdigest()
    serves = [encoding for encoding, files in ENCODING_FILES.items() for f in files if f.sha256 == digest]
    if not serves:
        raise InputError(
            f"{path} is not a rank file tiktoken knows (SHA-256 {digest[:12]}...); "
            f"expected one of the files listed by `attn-cli tokenizers`"
        )
    name = next(f.name for f in ENCODING_FILES[serves[0]] if f.sha256 == digest)
    folder = data_dir() / "tiktoken"
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise OutputError(
            f"cannot create the data folder {folder}: {err.strerror or err}; set ${DATA_DIR_ENV} to a folder you can write"
        ) from None
    try:
        write_atomic(folder / name, data)
    except OutputError as err:
        raise OutputError(f"{err}; the data folder {folder} must be writable (or set ${DATA_DIR_ENV} to one that is)") from None
    return name, serves


def known_files_in(folder: Path) -> list[Path]:
    """The files in ``folder`` named like a rank file (``tokenizers add FOLDER``)."""
    names = {f.name for files in ENCODING_FILES.values() for f in files}
    try:
        return sorted(path for path in folder.iterdir() if path.name in names and path.is_file())
    except OSError as err:
        raise InputError(f"cannot read the folder {folder}: {err.strerror or err}") from None


def _candidates(rank_file: RankFile) -> list[Path]:
    """Files under the canonical name in the offline folders, in search order."""
    return [folder / rank_file.name for folder in search_dirs() if _is_file(folder / rank_file.name)]


def _is_file(path: Path) -> bool:
    """Whether ``path`` is a file this process can see: a folder it may not enter (chmod 000,
    or root without CAP_DAC_READ_SEARCH) hides its files, as if they were not there."""
    try:
        return path.is_file()
    except OSError:  # pathlib passes EACCES on
        return False


def _intact(path: Path, rank_file: RankFile) -> bool:
    try:
        return hashlib.sha256(_read_bounded(path)).hexdigest() == rank_file.sha256
    except (OSError, TooLargeError):
        return False


def _read_bounded(path: Path) -> bytes:
    """The bytes of ``path``, refusing (TooLargeError) more than MAX_RANK_FILE_BYTES:
    ``/dev/zero`` or a multi-GB file is not read to the end."""
    with open(path, "rb") as f:
        data = f.read(MAX_RANK_FILE_BYTES + 1)
    if len(data) > MAX_RANK_FILE_BYTES:
        raise TooLargeError(f"{path} is over {MAX_RANK_FILE_BYTES // 2**20} MiB, larger than any rank file")
    return data


def _local(rank_file: RankFile) -> Path | None:
    """The first intact copy in the offline folders."""
    return next((path for path in _candidates(rank_file) if _intact(path, rank_file)), None)


def _cached(rank_file: RankFile) -> Path | None:
    """tiktoken's cached copy, if intact (tiktoken deletes one that is not)."""
    cache = tiktoken_cache_dir()
    if not cache:
        return None
    candidate = Path(cache) / rank_file.cache_name
    return candidate if _is_file(candidate) and _intact(candidate, rank_file) else None


class _Missing(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _download(rank_file: RankFile) -> bytes:
    if os.environ.get(OFFLINE_ENV, "") not in ("", "0"):
        raise _Missing(f"{OFFLINE_ENV} is set, so no download was tried")
    import urllib.request

    try:
        timeout = float(os.environ.get(TIMEOUT_ENV, DEFAULT_TIMEOUT))
    except ValueError:
        timeout = DEFAULT_TIMEOUT
    try:
        with urllib.request.urlopen(rank_file.url, timeout=timeout) as response:  # noqa: S310 (tiktoken's https URL)
            data = response.read(MAX_RANK_FILE_BYTES + 1)
    except (OSError, ValueError, http.client.HTTPException) as err:
        reason = getattr(err, "reason", None) or err
        raise _Missing(f"the download failed: {_first_line(reason)}") from None
    if hashlib.sha256(data).hexdigest() != rank_file.sha256:
        raise _Missing("the downloaded copy does not have the expected SHA-256")
    return data


def _first_line(err: object) -> str:
    text = str(err).strip().splitlines()
    return text[0] if text else type(err).__name__
