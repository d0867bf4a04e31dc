"""Atomic file writes: a temporary file in the target's folder, then a rename.

An interrupted or failed write (Ctrl-C, a full disk, an exception in the
writer) leaves no partial file behind, and an existing file untouched.

``clobber=False`` (the commands' --no-clobber) publishes the finished file with
``os.link`` instead of a rename: the kernel creates the name only if it does not
exist, so of two writers racing for one name exactly one wins and the other is
refused. Where the file system has no hard links (FAT, some network mounts) it
falls back to checking and then renaming, which leaves a window of microseconds
in which a file created by someone else could still be replaced.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from attn_cli.runtime.errors import OutputError

# Temporary files being written now, and temporary folders of this process, for a
# signal watcher that must exit without unwinding (attn_cli.runtime.interrupts): it removes them itself.
_temporaries: set[str] = set()
_temporary_folders: set[str] = set()


@contextlib.contextmanager
def atomic_writer(path: Path, *, clobber: bool = True) -> Iterator[BinaryIO]:
    """Yield a binary file; on a clean exit it replaces ``path`` in one step.

    A path that is not a regular file (a named pipe, /dev/stdout, a terminal) is
    written straight through: renaming over it would replace the pipe, not feed
    it. A symbolic link is followed, so the link stays and its target is replaced.
    With ``clobber=False`` an existing file (or link) is never replaced: OutputError.
    """
    if _is_stream(path):
        with _direct_writer(path) as f:
            yield f
        return
    target, fd, tmp = open_temporary(path, clobber=clobber)
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        publish_temporary(tmp, target, path, clobber=clobber)
    except BaseException as err:
        discard_temporary(tmp)
        if isinstance(err, OSError):
            raise OutputError(f"cannot write {path}: {err.strerror or err}") from None
        raise
    finally:
        _temporaries.discard(tmp)


def open_temporary(path: Path, *, clobber: bool = True) -> tuple[Path, int, str]:
    """A new empty file beside ``path`` (``.{name}.XXXX.part``) for a write that will replace it:
    (the file it will replace, a symbolic link followed; an open descriptor; its name). It has the
    mode the finished file will have and is registered for ``remove_temporaries``; OutputError
    where it cannot be made, or where ``clobber=False`` and ``path`` exists."""
    if not clobber and os.path.lexists(path):
        raise _exists(path)  # early, before the work of writing; the publish decides races
    target = Path(os.path.realpath(path))
    if not target.parent.is_dir():
        raise OutputError(f"cannot write {path}: the folder {path.parent} does not exist; create it first")
    try:
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".part")
    except OSError as err:
        raise OutputError(f"cannot write {path}: {err.strerror or err} (in {path.parent})") from None
    _temporaries.add(tmp)
    try:
        os.chmod(tmp, _mode_for(target))  # mkstemp makes 0600; a new file should get the umask's mode
    except OSError as err:
        os.close(fd)
        discard_temporary(tmp)
        raise OutputError(f"cannot write {path}: {err.strerror or err}") from None
    return target, fd, tmp


def publish_temporary(tmp: str, target: Path, given: Path, *, clobber: bool = True) -> None:
    """Give the finished ``tmp`` (``open_temporary``'s) the name ``target`` in one step; ``given``
    is the name the user wrote, for messages. ``clobber=False``: OutputError if the name is taken."""
    if clobber:
        os.replace(tmp, target)
    else:
        _publish_new(tmp, target, given)
    _temporaries.discard(tmp)


def discard_temporary(tmp: str) -> None:
    """Remove an unfinished ``open_temporary`` file (gone already is fine)."""
    with contextlib.suppress(OSError):
        os.unlink(tmp)
    _temporaries.discard(tmp)


def _publish_new(tmp: str, path: Path, given: Path) -> None:
    """Give ``tmp`` the name ``path`` only if nothing has it: refused atomically by link(2)."""
    try:
        os.link(tmp, path)
    except FileExistsError:
        raise _exists(given) from None
    except OSError:  # no hard links here: check, then rename (the caveat in the module docstring)
        if os.path.lexists(path):
            raise _exists(given) from None
        os.replace(tmp, path)
        return
    os.unlink(tmp)


def _exists(path: Path) -> OutputError:
    return OutputError(f"{path} already exists and --no-clobber keeps it: remove it, give another -o, or drop --no-clobber")


def remove_temporaries() -> None:
    """Delete the temporary files of writes still under way, and this process's temporary
    folders (for an exit that skips unwinding)."""
    for tmp in list(_temporaries):
        with contextlib.suppress(OSError):
            os.unlink(tmp)
    for folder in list(_temporary_folders):
        _remove_folder(folder)


def _remove_folder(folder: str) -> None:
    import shutil

    shutil.rmtree(folder, ignore_errors=True)
    _temporary_folders.discard(folder)


def output_path(value: str) -> Path:
    """An ``-o`` value as a Path, refusing a name that ends in '/' but is not a folder.

    ``Path("results/")`` forgets the slash, so without this ``-o results/`` would
    write a file called ``results``. Used as the option's parser, by every command."""
    if value.endswith(("/", os.sep)) and value != "-" and not os.path.isdir(value):
        what = "is a file, not a folder" if os.path.exists(value.rstrip("/" + os.sep)) else "does not exist"
        raise OutputError(f"cannot write to {value}: the folder {what}; create it first, or give a file name")
    return Path(value)


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


def home_folder() -> Path | None:
    """The user's home folder, or None when it cannot be told (no HOME, no passwd entry)."""
    try:
        return Path.home()
    except (RuntimeError, KeyError):
        return None


def settle_matplotlib_dirs() -> None:
    """Give matplotlib a config and cache folder it can write, before it is imported.

    matplotlib wants ``$XDG_CONFIG_HOME/matplotlib`` and ``$XDG_CACHE_HOME/matplotlib``
    (``~/.config``, ``~/.cache``); when HOME is unset, a file, or read-only it warns
    on stderr and makes a folder in the temp folder that it leaves there. Then
    ``MPLCONFIGDIR`` names a folder of this process's own instead, removed when the
    process ends (an exit by signal too): nothing is left in the temp folder, at the
    price of matplotlib's font list being rebuilt in each such run.
    """
    if os.environ.get("MPLCONFIGDIR"):
        return
    home = home_folder()
    bases = [os.environ.get("XDG_CONFIG_HOME") or (home and home / ".config"), os.environ.get("XDG_CACHE_HOME") or (home and home / ".cache")]
    if all(base and _writable_folder(Path(base) / "matplotlib") for base in bases):
        return
    try:
        private = tempfile.mkdtemp(prefix="attn-cli-matplotlib-")
    except OSError:
        return  # no writable temp folder either: matplotlib says so itself
    import atexit

    _temporary_folders.add(private)
    atexit.register(_remove_folder, private)
    os.environ["MPLCONFIGDIR"] = private


def _writable_folder(folder: Path) -> bool:
    """Whether ``folder`` is, or can be made, a folder this process can write."""
    try:
        if not folder.is_dir():
            missing = folder
            while not missing.parent.exists() and missing.parent != missing:
                missing = missing.parent
            return missing.parent.is_dir() and os.access(missing.parent, os.W_OK | os.X_OK)
        return os.access(folder, os.W_OK | os.X_OK)
    except OSError:
        return False


def write_atomic(path: Path, data: bytes, *, clobber: bool = True) -> None:
    with atomic_writer(path, clobber=clobber) as f:
        f.write(data)
