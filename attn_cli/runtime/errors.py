"""The errors a user can see, and the exit codes they map to.

Library code raises these with a message that names the fix; the CLI turns
them into one line on stderr and ``error.exit_status``. Anything else that
escapes is a bug and is allowed to show a traceback.
"""

from __future__ import annotations

import enum


class ExitStatus(enum.IntEnum):
    """Documented process exit codes (the README's table is generated from these)."""

    OK = 0
    ERROR = 1  # a runtime failure: output could not be written, a download failed
    USAGE = 2  # bad option, bad text, unreadable input or embeddings file
    TOKENIZER_UNAVAILABLE = 3  # the tokenizer's rank files, or the --model's files, are missing or unusable
    TOO_LARGE = 4  # the text or configuration is over --max-tokens or would not fit in memory
    INTERRUPTED = 130  # Ctrl-C (128 + SIGINT)
    TERMINATED = 143  # SIGTERM (128 + SIGTERM), e.g. `kill` or a CI timeout


class AttnCliError(Exception):
    """Base class: an error whose message is fit to show a user as it is.

    ``place`` says where in a batch it happened ("text 3 of 5"); it leads the message.
    """

    exit_status: ExitStatus = ExitStatus.ERROR
    place: str = ""

    def __str__(self) -> str:
        message = super().__str__()
        return f"{self.place}: {message}" if self.place else message


def in_batch(err: AttnCliError, index: int, total: int) -> AttnCliError:
    """``err`` placed at text ``index`` (0-based) of a batch of ``total``; alone, unchanged."""
    if total > 1 and not err.place:
        err.place = f"text {index + 1} of {total}"
    return err


class UsageError(AttnCliError):
    """The user asked for something that cannot be done as asked."""

    exit_status = ExitStatus.USAGE


class ConfigError(UsageError):
    """An attention configuration that does not add up (sizes, heads, ranges)."""


class InputError(UsageError):
    """Input text or an input file that cannot be used."""


class EmbeddingsError(UsageError):
    """A user-supplied embeddings file that is malformed or does not fit the tokens."""


class TokenizerError(UsageError):
    """A tokenizer name that neither tiktoken nor attn-cli knows."""


class TokenizerUnavailable(AttnCliError):
    """A known tokenizer whose rank files cannot be had (offline, no cache)."""

    exit_status = ExitStatus.TOKENIZER_UNAVAILABLE

    def __init__(self, message: str, reason: str = "") -> None:
        super().__init__(message)
        self.reason = reason or message


class ModelUnavailable(AttnCliError):
    """A --model whose files are missing, unsupported, pickled or corrupt."""

    exit_status = ExitStatus.TOKENIZER_UNAVAILABLE


class TooLargeError(AttnCliError):
    """The work would exceed --max-tokens or the machine's memory."""

    exit_status = ExitStatus.TOO_LARGE


class OutputError(AttnCliError):
    """Output could not be written."""

    exit_status = ExitStatus.ERROR
