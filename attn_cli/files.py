"""Atomic file writes: a temporary file in the target's folder, then a rename.

An interrupted or failed write (Ctrl-C, a full disk, an exception in the
writer) leaves no partial file behind, and an existing file untouched.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from attn_cli.errors import OutputError


@contextlib.contextmanager
def atomic_writer(path: Path) -> Iterator[BinaryIO]:
    """Yield a binary file; on a clean exit it replaces ``path`` in one step."""
    folder = path.parent if str(path.parent) else Path(".")
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{path.name}.", suffix=".part")
    except OSError as err:
        raise OutputError(f"cannot write to {folder}: {err.strerror or err}") from None
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as err:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(err, OSError):
            raise OutputError(f"cannot write {path}: {err.strerror or err}") from None
        raise


def write_atomic(path: Path, data: bytes) -> None:
    with atomic_writer(path) as f:
        f.write(data)
