"""Fonts for tokens in any script: matplotlib's font fallback over the installed fonts.

matplotlib's default font (DejaVu Sans) has no CJK ideographs and few emoji, so
such tokens would be drawn as empty boxes. Since matplotlib 3.6 a ``font.family``
list is a fallback chain: each glyph comes from the first family that has it.
``font_families(text)`` returns that list for the characters a picture will draw:
the configured family first, then, only when it lacks some of them, the fewest
installed fonts (found by their character maps) that cover the rest. Characters
no installed font has still draw as boxes; ``missing_glyph_note`` says so once.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable

from matplotlib import font_manager, rcParams
from matplotlib import ft2font
from matplotlib.ft2font import FT2Font

# Coloured bitmap fonts (Noto Color Emoji) have no outlines matplotlib can scale, and a
# last-resort font (matplotlib ships one) "has" every character as a box: neither helps.
_UNUSABLE = re.compile(r"colou?r|last ?resort", re.IGNORECASE)
MISSING_GLYPHS = "note: no installed font has "  # how the note starts: a command says it once
_GLYPH_WARNING = re.compile(r"Glyph (\d+) .*missing from font")


def font_families(text: str) -> list[str]:
    """The ``font.family`` list that draws every character of ``text`` that an installed font has."""
    configured = list(rcParams["font.family"])
    missing = {ord(c) for c in set(text) if c.isprintable() and not c.isspace()} - _primary_charmap()
    if not missing:
        return configured
    return configured + [name for name in _covering(frozenset(missing)) if name not in configured]


def missing_glyph_note(codepoints: Iterable[int]) -> str:
    """One note naming characters no installed font has (a few of them, with their code points)."""
    chars = sorted(set(codepoints))
    shown = ", ".join(f"{chr(c)} (U+{c:04X})" for c in chars[:5]) + (f" and {len(chars) - 5} more" if len(chars) > 5 else "")
    return (
        f"{MISSING_GLYPHS}{shown}: drawn as empty boxes; install a font that has them "
        f"(e.g. Debian's fonts-noto-cjk or fonts-wqy-microhei for Chinese and Japanese, fonts-symbola for emoji), "
        f"then delete matplotlib's font cache (fontlist-*.json in ~/.cache/matplotlib) so it finds the font"
    )


def missing_glyphs(warning_messages: Iterable[str]) -> list[int]:
    """The code points of matplotlib's "Glyph N ... missing from font(s)" warnings."""
    return [int(m.group(1)) for message in warning_messages if (m := _GLYPH_WARNING.search(message))]


@functools.lru_cache(maxsize=64)
def _covering(missing: frozenset[int]) -> tuple[str, ...]:
    """Family names, fewest first, that between them have as many of ``missing`` as any installed fonts do."""
    left = set(missing)
    chosen: list[str] = []
    candidates = _candidates()
    while left:
        best, covered = None, set()
        for name, path in candidates:  # sans-serif faces first: the first best wins a tie
            here = left & _charmap(path)
            if len(here) > len(covered):
                best, covered = name, here
        if best is None:
            break
        chosen.append(best)
        left -= covered
    return tuple(chosen)


def _candidates() -> list[tuple[str, str]]:
    """(family name, file) of the installed upright regular fonts, one file per family, sans-serif first."""
    seen: dict[str, str] = {}
    for entry in font_manager.fontManager.ttflist:
        if entry.style != "normal" or entry.weight not in (400, "normal", "regular") or _UNUSABLE.search(entry.name):
            continue
        seen.setdefault(entry.name, entry.fname)
    return sorted(seen.items(), key=lambda item: (not re.search(r"sans|hei|gothic", item[0], re.IGNORECASE), item[0]))


@functools.lru_cache(maxsize=1)
def _primary_charmap() -> frozenset[int]:
    return _charmap(font_manager.findfont(font_manager.FontProperties()))


@functools.lru_cache(maxsize=None)
def _charmap(path: str) -> frozenset[int]:
    """The code points a font file has glyphs for; none for a font matplotlib cannot scale or open."""
    try:
        font = FT2Font(path)
    except (OSError, RuntimeError, ValueError):
        return frozenset()
    if not _scalable(font):
        return frozenset()
    return frozenset(font.get_charmap())


def _scalable(font: FT2Font) -> bool:
    flags = getattr(ft2font, "FaceFlags", None)  # matplotlib 3.10+: an enum; before: int bits
    return flags.SCALABLE in font.face_flags if flags is not None else bool(font.face_flags & ft2font.SCALABLE)
