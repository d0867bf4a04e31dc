"""Ctrl-C and SIGTERM: unwind cleanly, and promptly even when the work does not.

SIGINT raises KeyboardInterrupt and SIGTERM raises ``Terminated`` in the main
thread, so atomic writes remove their temporary files on the way out and the
CLI prints one line and exits 130 or 143. Python runs those handlers only
between bytecodes, though: a long torch operation (or a machine that is
swapping) can hold the main thread in C for a minute. A watcher thread, woken
by the signal itself (``signal.set_wakeup_fd``), waits ``GRACE`` seconds for
the normal unwinding; if the process is still there, it removes the temporary
files and exits at once. A second signal skips the wait.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import threading
from collections.abc import Iterator

from attn_cli.errors import ExitStatus, Terminated

GRACE = 1.5  # seconds the main thread has to unwind by itself
_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _raise_terminated(signum: int, frame: object) -> None:
    raise Terminated


@contextlib.contextmanager
def handled_signals() -> Iterator[None]:
    """SIGTERM raises Terminated, and a watcher makes both signals prompt.

    Does nothing outside the main thread, or when SIGTERM already has a handler
    (attn-cli called from a program that manages its own signals)."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGTERM) != signal.SIG_DFL:
        yield
        return
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    previous_fd = signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    signal.signal(signal.SIGTERM, _raise_terminated)
    watcher = threading.Thread(target=_watch, args=(read_end,), name="attn-cli-signals", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.set_wakeup_fd(previous_fd)
        os.close(write_end)  # the watcher reads end-of-file and returns
        watcher.join(timeout=1)
        os.close(read_end)


def _watch(read_end: int) -> None:
    while True:
        received = os.read(read_end, 1)
        if not received:
            return  # the command finished
        if received[0] not in _SIGNALS:
            continue
        ready, _, _ = select.select([read_end], [], [], GRACE)
        if ready:
            again = os.read(read_end, 1)
            if not again:
                return  # the main thread unwound in time
        _exit_now(received[0])


def _exit_now(signum: int) -> None:
    """The main thread is stuck: clean up what it would have, and go."""
    from attn_cli.files import remove_temporaries

    remove_temporaries()
    word, code = ("terminated", ExitStatus.TERMINATED) if signum == signal.SIGTERM else ("interrupted", ExitStatus.INTERRUPTED)
    with contextlib.suppress(OSError):
        os.write(2, f"attn-cli: error: {word}\n".encode())
    os._exit(int(code))
