"""Writing results: stdout or an atomic file, rich or plain, and the batch progress bar.

Machine formats are written as UTF-8 bytes whatever the locale, so a rerun is
byte-identical everywhere; a file given with ``-o`` appears only once it is
complete (see ``attn_cli.runtime.files``).
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, Any, TypeVar

import typer

from attn_cli.runtime import interrupts
from attn_cli.runtime.errors import OutputError
from attn_cli.runtime.files import atomic_writer

T = TypeVar("T")
PROGRESS_MIN = 20  # batches shorter than this finish before a bar is worth drawing
FILE_WIDTH = 200  # columns of a table written with -o (COLUMNS overrides)


def color_allowed(no_color: bool, stream: Any = None) -> bool:
    """Colour only on a terminal, without --no-color, and with NO_COLOR unset or empty."""
    stream = stream or sys.stdout
    return not no_color and not os.environ.get("NO_COLOR") and _isatty(stream)


STDOUT_FAILURE = "cannot write standard output"
_stdout_closed = False  # the process started with fd 1 closed (``>&-``)


def mark_stdout_closed() -> None:
    global _stdout_closed
    _stdout_closed = True


def stdout_failure(err: BaseException) -> OutputError:
    """The one error for a standard output that cannot be written."""
    if _stdout_closed:
        return OutputError(f"{STDOUT_FAILURE}: it is closed; redirect it to a file or /dev/null instead")
    reason = getattr(err, "strerror", None) or str(err) or type(err).__name__
    return OutputError(f"{STDOUT_FAILURE}: {reason}")


@contextlib.contextmanager
def stdout_errors() -> Iterator[None]:
    """A standard output that cannot be written (a full disk, a vanished terminal)
    becomes one line and exit 1; a reader that went away (``| head``) passes on,
    to end the command quietly (``AttnGroup.invoke``)."""
    try:
        yield
    except BrokenPipeError:
        raise
    except OSError as err:
        raise stdout_failure(err) from None


@contextlib.contextmanager
def binary_output(path: Path | None, *, clobber: bool = True) -> Iterator[IO[bytes]]:
    """A binary stream to ``path`` (replaced atomically when the block ends cleanly,
    or refused when it exists and not ``clobber``) or stdout. A file written says so
    once, on stderr (`wrote runs.json  (12 kB)`): stdout, where the results go
    without -o, stays as it was."""
    if path is not None:
        with atomic_writer(path, clobber=clobber) as f:
            yield f
        typer.echo(wrote(path, byte_size(path.stat().st_size)), err=True)
        return
    with stdout_errors():
        sys.stdout.flush()
        stream = getattr(sys.stdout, "buffer", None)
        if stream is None:  # a text-only stdout (some test harnesses): encode ourselves
            yield _Utf8Writer(sys.stdout)
        else:
            yield stream
            stream.flush()


class _Utf8Writer:
    def __init__(self, text: IO[str]) -> None:
        self._text = text

    def write(self, data: bytes) -> int:
        self._text.write(data.decode("utf-8"))
        return len(data)


def wrote(path: Path, detail: str) -> str:
    """How every command says it wrote a file: `wrote PATH  (DETAIL)`."""
    return f"wrote {path}  ({detail})"


def byte_size(n: int) -> str:
    if n < 1024:
        return f"{n} bytes"
    return f"{n / 2**20:.1f} MB" if n >= 2**20 else f"{n / 1024:.0f} kB"


def report_written(path: Path, detail: Callable[[], str]) -> None:
    """A picture or page, whose path is the command's result: on stdout, alone when piped
    (for scripts), or as `wrote PATH  (DETAIL)` on a terminal."""
    with stdout_errors():
        typer.echo(wrote(path, detail()) if stdout_is_terminal() else str(path))


def picture_detail(fig: Any, fmt: str) -> str:
    """A written picture's size: pixels for a PNG, inches for the vector formats."""
    if fmt == "png":
        return "{}×{} px".format(*png_pixels(fig))
    width, height = fig.get_size_inches()
    return f"{width:.1f}×{height:.1f} in"


def png_pixels(fig: Any) -> tuple[int, int]:
    """The PNG's width and height as matplotlib's Agg canvas makes them: the figure's size
    in pixels, truncated (rounding said 758 for a 757.99-pixel, 757-pixel-high file)."""
    width, height = fig.bbox.size
    return int(width), int(height)


def output_target(output: Path | None, extensions: tuple[str, ...], kind: str) -> tuple[Path, str | None, str]:
    """Where a command that names its own files (heatmap, html) writes, from ``-o``:
    (folder, the stem -o fixes or None for a name made from the text, the extension
    as written, without its dot). ``extensions`` (lower case, no dot) are the ones
    taken, the first the default; ``kind`` names them in the error ("a picture
    format"). Every problem is found here, before anything runs."""
    if output is None:
        return Path("."), None, extensions[0]
    if output.is_dir():
        return output, None, extensions[0]
    if output.suffix.lower().lstrip(".") not in extensions:
        from attn_cli.runtime.errors import UsageError

        found = f"'{output.suffix}' is not {kind}" if output.suffix else "has no extension"
        listed = ", ".join(f".{e}" for e in extensions[:-1]) + f" or .{extensions[-1]}" if len(extensions) > 1 else f".{extensions[0]}"
        raise UsageError(f"-o {output}: {found}; end the name in {listed}")
    folder = output.parent
    if not folder.is_dir():
        what = "is not a folder" if folder.exists() else "does not exist"
        raise OutputError(f"cannot write {output}: {folder} {what}; create the folder first")
    return folder, output.stem, output.suffix.lstrip(".")


def replaces_unnamed(path: Path, given: Path | None) -> bool:
    """Whether writing ``path`` will replace an existing file under a name the command made
    up (from the text, a batch number, a head) rather than one the user gave with -o."""
    return path != given and os.path.isfile(path)


def replaced_note(path: Path) -> str:
    return f"note: replaced {path}, which already existed (--no-clobber keeps existing files)"


def emit_rich(parts: Iterable[Any], path: Path | None, *, no_color: bool = False, clobber: bool = True) -> None:
    """Print rich renderables to stdout, or as plain text to ``path`` (atomically)."""
    from rich.console import Console

    common = {"highlight": False, "markup": False, "emoji": False, "soft_wrap": False}
    if path is None:
        _escape_what_stdout_cannot_encode()
        console = _stdout_console(Console)(no_color=not color_allowed(no_color), **common)
        with stdout_errors():
            for part in parts:
                console.print(part)
            sys.stdout.flush()
        return
    buffer = io.StringIO()
    console = Console(file=buffer, width=_file_width(), color_system=None, force_terminal=False, **common)
    for part in parts:
        console.print(part)
    text = "\n".join(line.rstrip(" ") for line in buffer.getvalue().split("\n"))  # rich pads every line to the width
    with binary_output(path, clobber=clobber) as out:
        out.write(text.encode("utf-8"))


def _stdout_console(console_class: type) -> type:
    """rich's Console, but a reader that goes away raises BrokenPipeError (which the
    command turns into a quiet success) instead of rich's own exit 1."""

    class StdoutConsole(console_class):  # type: ignore[misc, valid-type]
        def on_broken_pipe(self) -> None:
            self.quiet = True
            raise BrokenPipeError

    return StdoutConsole


def _escape_what_stdout_cannot_encode() -> None:
    """A stdout in ASCII or Latin-1 (LC_ALL=C, PYTHONIOENCODING=ascii) cannot hold
    every token: write those characters as escapes (``\\u2615``) instead of failing.
    rich sees the encoding too, and draws ASCII table rules for it."""
    encoding = (getattr(sys.stdout, "encoding", None) or "utf-8").lower().replace("_", "-")
    if encoding.startswith("utf-") or encoding in ("utf8", "cp65001"):
        return
    reconfigure = getattr(sys.stdout, "reconfigure", None)
    if reconfigure is not None:
        with contextlib.suppress(ValueError, OSError):
            reconfigure(errors="backslashreplace")


def progress(items: Iterable[T], total: int, *, stdout_is_live: bool = False) -> Iterator[T]:
    """Yield ``items``, with a transient progress bar on stderr for long batches
    when stderr is a terminal. ``stdout_is_live``: results stream to the same
    terminal meanwhile, so they are the progress and no bar is drawn."""
    if total < PROGRESS_MIN or not _isatty(sys.stderr) or stdout_is_live:
        yield from items
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    console = Console(stderr=True)
    columns = (TextColumn("texts"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    # redirect_stdout off: results must stay on stdout, never pass through the stderr console.
    # A signal ends the process without unwinding: the bar's line is cleared and the cursor shown.
    undo = interrupts.undo_on_exit(b"\r\x1b[2K\x1b[?25h")
    with undo, Progress(*columns, console=console, transient=True, redirect_stdout=False, redirect_stderr=False) as bar:
        task = bar.add_task("texts", total=total)
        for item in items:
            yield item
            bar.advance(task)


def stdout_is_terminal() -> bool:
    return _isatty(sys.stdout)


def _file_width() -> int:
    try:
        return max(40, int(os.environ.get("COLUMNS", "")))
    except ValueError:
        return FILE_WIDTH


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False
