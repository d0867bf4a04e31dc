"""Atomic file writes: a temporary file in the target's folder, then a rename.

An interrupted or failed write (Ctrl-C, a full disk, an exception in the
writer) leaves no partial file behind, and an existing file untouched.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from attn_cli.errors import OutputError


@contextlib.contextmanager
def atomic_writer(path: Path) -> Iterator[BinaryIO]:
    """Yield a binary file; on a clean exit it replaces ``path`` in one step.

    A path that is not a regular file (a named pipe, /dev/stdout, a terminal) is
    written straight through: renaming over it would replace the pipe, not feed
    it. A symbolic link is followed, so the link stays and its target is replaced.
    """
    if _is_stream(path):
        with _direct_writer(path) as f:
            yield f
        return
    given, path = path, Path(os.path.realpath(path))
    folder = path.parent
    if not folder.is_dir():
        raise OutputError(f"cannot write {given}: the folder {given.parent} does not exist; create it first")
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{path.name}.", suffix=".part")
    except OSError as err:
        raise OutputError(f"cannot write {given}: {err.strerror or err} (in {given.parent})") from None
    try:
        os.chmod(tmp, _mode_for(path))  # mkstemp makes 0600; a new file should get the umask's mode
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as err:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(err, OSError):
            raise OutputError(f"cannot write {given}: {err.strerror or err}") from None
        raise


def _is_stream(path: Path) -> bool:
    try:
        return not stat.S_ISREG(os.stat(path).st_mode) and not stat.S_ISDIR(os.stat(path).st_mode)
    except OSError:
        return False


@contextlib.contextmanager
def _direct_writer(path: Path) -> Iterator[BinaryIO]:
    try:
        f = open(path, "wb")  # noqa: SIM115 (closed below, errors mapped)
    except OSError as err:
        raise OutputError(f"cannot write {path}: {err.strerror or err}") from None
    try:
        with f:
            yield f
    except OSError as err:
        raise OutputError(f"cannot write {path}: {err.strerror or err}") from None


def _mode_for(path: Path) -> int:
    """An existing file keeps its mode; a new one gets 0666 minus the umask."""
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def write_atomic(path: Path, data: bytes) -> None:
    with atomic_writer(path) as f:
        f.write(data)
