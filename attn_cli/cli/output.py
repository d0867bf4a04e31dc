"""Writing results: stdout or an atomic file, rich or plain, and the batch progress bar."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from attn_cli.files import write_atomic

T = TypeVar("T")
PROGRESS_MIN = 20  # batches shorter than this finish before a bar is worth drawing


def color_allowed(no_color: bool, stream: Any = None) -> bool:
    stream = stream or sys.stdout
    return not no_color and "NO_COLOR" not in os.environ and _isatty(stream)


def emit(parts: list[Any], path: Path | None, *, rich: bool = False, no_color: bool = False) -> None:
    """Write ``parts`` (strings, or rich renderables with ``rich``) once, to ``path`` or stdout."""
    if rich:
        from rich.console import Console

        if path is None:
            console = Console(no_color=not color_allowed(no_color), highlight=False, soft_wrap=False)
            for part in parts:
                console.print(part)
            return
        console = Console(record=True, no_color=True, highlight=False, width=200, file=open(os.devnull, "w"))
        for part in parts:
            console.print(part)
        text = console.export_text()
    else:
        text = "".join(parts)
    if path is None:
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        write_atomic(path, text.encode("utf-8"))


def progress(items: Iterable[T], total: int) -> Iterator[T]:
    """Yield ``items``, with a rich progress bar on stderr for long batches on a terminal."""
    if total < PROGRESS_MIN or not _isatty(sys.stderr):
        yield from items
        return
    from rich.progress import Progress

    with Progress(transient=True, console=_stderr_console()) as bar:
        task = bar.add_task("texts", total=total)
        for item in items:
            yield item
            bar.advance(task)


def _stderr_console() -> Any:
    from rich.console import Console

    return Console(stderr=True)


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False
