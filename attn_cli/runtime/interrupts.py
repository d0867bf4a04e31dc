"""Ctrl-C, SIGTERM and a reader that goes away: the process ends at once, cleanly.

An exception thrown into whatever happens to run when a signal arrives (an import,
torch's C++ extension, a library's ``except:``) can become a traceback, an abort
(``terminate called after throwing ...``), "cannot load module more than once" or
an interrupt swallowed. So from the entry point's first statement (``install``,
called by ``attn_cli.entry``) SIGINT and SIGTERM never raise: the handler ends the
process itself. Python's handler for them does nothing; a watcher thread, woken by
the signal itself (``signal.set_wakeup_fd``, written from C the moment it arrives),
removes the temporary files of writes under way (``attn_cli.runtime.files``), writes what
must be undone on the terminal (a progress bar's hidden cursor), says one line on
stderr and exits 130 or 143 with ``os._exit``. Nothing else needs unwinding: every
file attn-cli writes appears only once complete. Exiting from one thread only means
one line however many signals come (``timeout`` and a terminal send a process
group's signal twice), and it works while the main thread is held in C by a long
torch operation, where Python would not run a handler until it returned.

The watcher also watches standard output once a command says its results go there
(``results_to_stdout``): when the reader of a pipe goes away (``| head``), the
process ends at once with exit 0 and says nothing, as ripgrep does, instead of
computing what nobody will read.

No torch, typer or rich here: this runs before any of them is imported.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import stat
import threading
from collections.abc import Iterator

from attn_cli.runtime.errors import ExitStatus  # an enum and a few exception classes: nothing heavy this early

_WAKE = 0  # a byte on the wakeup pipe that is no signal: look at standard output again
_EXIT = 255  # nor this: the main thread is done, exit with _exit_code
_GONE = select.POLLERR | select.POLLHUP  # a pipe or socket whose reader has closed it

_write_end: int | None = None
_watch_stdout = False
_last_words: list[bytes] = []  # written to stderr before the error line, newest last
_remove_temporaries = None  # attn_cli.runtime.files.remove_temporaries, once imported
_exit_code = 0
_handled: set[int] = set()  # the signals install() took (another's handler also wakes the watcher)


def install() -> None:
    """SIGINT and SIGTERM end the process at once (see the module docstring); a no-op
    outside the main thread, when it is done already, or for a signal someone else
    handles or ignores (a program that manages its own signals, a background job)."""
    global _write_end
    if _write_end is not None or threading.current_thread() is not threading.main_thread():
        return
    read_end, write_end = (_above_stdio(fd) for fd in os.pipe())
    os.set_blocking(write_end, False)
    try:
        signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    except ValueError:  # not the main interpreter
        os.close(read_end)
        os.close(write_end)
        return
    _write_end = write_end
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _handle)
        _handled.add(signal.SIGINT)
    if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _handle)
        _handled.add(signal.SIGTERM)
    threading.Thread(target=_watch, args=(read_end,), name="attn-cli-signals", daemon=True).start()
    # Imported here, after the handlers (no write can be under way before it is), and not at
    # exit: a watcher must not import while the main thread may hold the import lock.
    global _remove_temporaries
    from attn_cli.runtime.files import remove_temporaries

    _remove_temporaries = remove_temporaries


def _above_stdio(fd: int) -> int:
    """``fd`` moved to 3 or above (not inherited): a process started with stdout closed
    would otherwise get its pipe as fd 1, and print into it."""
    import fcntl

    moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
    os.close(fd)
    return moved


def results_to_stdout() -> None:
    """The command's results go to standard output: once its reader goes away, end quietly."""
    global _watch_stdout
    if _write_end is None or _watch_stdout:
        return
    _watch_stdout = True
    with contextlib.suppress(OSError):
        os.write(_write_end, bytes([_WAKE]))


@contextlib.contextmanager
def undo_on_exit(data: bytes) -> Iterator[None]:
    """Within the block, an exit by signal first writes ``data`` to stderr (e.g. the
    escape that shows the cursor again, under a progress bar)."""
    _last_words.append(data)
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):
            _last_words.remove(data)


def finish(code: int) -> None:
    """End the process with ``code``: flush, run the atexit functions, and exit without
    the interpreter's finalization, during which a signal would find Python's handlers
    gone and kill the process without a word. The watcher makes the exit, after any
    signal that came first: a signal while the process ends is still its line and code."""
    import atexit
    import sys

    global _exit_code
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            if stream is not None:
                stream.flush()
    atexit._run_exitfuncs()
    _exit_code = code
    if _write_end is not None:
        with contextlib.suppress(OSError):
            os.write(_write_end, bytes([_EXIT]))
            threading.Event().wait(5)  # the watcher exits the process; the timeout only guards against it being gone
    os._exit(code)


def _handle(signum: int, frame: object) -> None:
    """Nothing: the watcher, woken by the same signal, ends the process. (Not raising is
    the point: see the module docstring.)"""


def _watch(read_end: int) -> None:
    poller = select.poll()
    poller.register(read_end, select.POLLIN)
    watching = False
    while True:
        if _watch_stdout and not watching:
            watching = True
            if _is_pipe(1):
                poller.register(1, 0)  # no events asked: only errors and hang-ups are reported
        for fd, events in poller.poll():
            if fd == read_end:
                received = os.read(read_end, 64)
                for byte in received:  # in the order they came
                    if byte in _handled:
                        _exit_now(byte)
                    elif byte == _EXIT:
                        os._exit(_exit_code)
            elif events & select.POLLNVAL:
                poller.unregister(fd)
            elif events & _GONE:
                _exit_now(None)


def _is_pipe(fd: int) -> bool:
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


def _exit_now(signum: int | None) -> None:
    """Clean up what a write under way left, say why (unless the reader went away),
    and go. Only the watcher calls it."""
    if _remove_temporaries is not None:
        _remove_temporaries()
    if signum is None:  # the reader went away: success, and nothing to say
        os._exit(0)
    word, code = ("terminated", ExitStatus.TERMINATED) if signum == signal.SIGTERM else ("interrupted", ExitStatus.INTERRUPTED)
    with contextlib.suppress(OSError):
        os.write(2, b"".join(_last_words) + f"attn-cli: error: {word}\n".encode())
    os._exit(int(code))
