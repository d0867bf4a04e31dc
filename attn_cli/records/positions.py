"""Which token positions a flag names: one (``resolve_position``: --query in a table, --key) or
several (``resolve_queries``: --query's rows at any length). No torch.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from attn_cli.runtime.errors import UsageError

_POSITION = re.compile(r"[+-]?[0-9]+")
_LABELLED = re.compile(r"(.+)#([0-9]+)")
SHOWN_CANDIDATES = 12  # tokens listed in a "no such token" message


def resolve_position(spec: str, texts: Sequence[str], labels: Sequence[str], flag: str) -> int:
    """The position ``spec`` names among the tokens (``texts``, display ``labels``).

    ``spec`` is a position (0-based; negative counts from the end), ``last`` (the
    last token, as ``resolve_queries`` takes it: a token whose text is "last" is
    named by its label or ``last#POSITION``), a label (``saw#3``),
    ``TEXT#POSITION`` for any token, or a token's text: exactly, with whitespace
    made visible (``␣the``), without its surrounding spaces, or else ignoring
    case. A text that several tokens share is refused with the labels to choose
    from. Raises UsageError.
    """
    from attn_cli.records.tokens import visible

    n = len(texts)
    if _POSITION.fullmatch(spec):
        position = int(spec)
        if not -n <= position < n:
            raise UsageError(f"{flag} {spec} is out of range: the text has {n} tokens, positions 0 to {n - 1}")
        return position % n
    last = _LAST.fullmatch(spec)
    if last and last[1] is None and n:
        return n - 1
    if spec in labels:
        return labels.index(spec)

    def matches(i: int, wanted: str) -> bool:
        text = texts[i]
        return wanted in (text, visible(text)) or (wanted.strip() != "" and wanted.strip() == text.strip())

    labelled = _LABELLED.fullmatch(spec)
    if labelled and int(labelled[2]) < n and matches(int(labelled[2]), labelled[1]):
        return int(labelled[2])
    found = [i for i in range(n) if matches(i, spec)]
    if not found:
        wanted = spec.strip().casefold()
        found = [i for i in range(n) if wanted and texts[i].strip().casefold() == wanted]
    if len(found) == 1:
        return found[0]
    if found:
        choices = ", ".join(labels[i] for i in found)
        raise UsageError(f"{flag} {spec!r} matches {len(found)} tokens ({choices}): give one of those labels or a position")
    if labelled and int(labelled[2]) < n:
        at = int(labelled[2])
        raise UsageError(f"{flag} {spec!r}: the token at position {at} is {labels[at]!r}, not {labelled[1]!r}")
    listed = ", ".join(labels[:SHOWN_CANDIDATES]) + (", ..." if n > SHOWN_CANDIDATES else "")
    raise UsageError(f"{flag} {spec!r} is not a token of the text ({listed}): give a token or a position 0 to {n - 1}")


_RANGE = re.compile(r"\s*([+-]?[0-9]*)\s*:\s*([+-]?[0-9]*)\s*")
_LAST = re.compile(r"\s*last\s*(?::\s*([0-9]+)\s*)?", re.IGNORECASE)


def check_query(spec: str, flag: str = "--query") -> str:
    """``spec`` as given, once its shape is checked: ``last``, ``last:N``, a range ``A:B`` (B not
    included; either end may be left out; negative counts from the end), a position, or a token."""
    last = _LAST.fullmatch(spec)
    if last and last[1] is not None and int(last[1]) < 1:
        raise UsageError(f"{flag} {spec!r}: last:N takes the last N tokens, N at least 1")
    return spec


def is_span(spec: str) -> bool:
    """Whether ``spec`` names a run of positions (``last:N``, ``A:B``) rather than one token."""
    last, span = _LAST.fullmatch(spec), _RANGE.fullmatch(spec)
    return bool((last and last[1] is not None) or (span and (span[1] or span[2])))


def resolve_queries(specs: Sequence[str], texts: Sequence[str], labels: Sequence[str], flag: str = "--query") -> tuple[int, ...]:
    """The positions ``specs`` name among the tokens, sorted and each once: ``last`` (the last
    token), ``last:N`` (the last N), ``A:B`` (positions A to B - 1, Python's slice), a position,
    or a token (``resolve_position``). Raises UsageError naming the valid range."""
    n = len(texts)
    chosen: set[int] = set()
    for spec in specs:
        last, span = _LAST.fullmatch(spec), _RANGE.fullmatch(spec)
        if last:
            chosen.update(range(max(0, n - int(last[1] or 1)), n))
        elif span and (span[1] or span[2]):
            start, stop, _ = slice(int(span[1]) if span[1] else None, int(span[2]) if span[2] else None).indices(n)
            if start >= stop:
                raise UsageError(f"{flag} {spec!r} holds no position: the text has {n} tokens, positions 0 to {n - 1}")
            chosen.update(range(start, stop))
        else:
            chosen.add(resolve_position(spec, texts, labels, flag))
    return tuple(sorted(chosen))
