"""Float32 numbers as JSON text, many at a time: the text ``"{:.9}".format`` gives each one
(``FLOAT32``: 9 significant digits, which read back as the same float32), written by tensor
operations instead of one Python format call a number, about 3 times as fast (a long text's rows
are tens of millions of numbers).

Each number becomes a 32-byte cell, four int64 words whose bytes are its characters and NULs;
the cells' bytes, NULs deleted, are the text. The digits are exact: a number x with decimal
exponent e is scaled to N = x 10^(8 - e) in [10^8, 10^9) in float64 and rounded, a tie to even
as Python rounds one. For e >= -4 the product is exact (x has 24 bits, 5^12 < 2^29); below, where
N lies within 10^-6 of a half (float64's error is at most about 1.7 x 10^-7), Python's correctly
rounded formatting writes that number instead. So it does numbers of 10^8 and more, which ``{:.9}``
writes with an exponent that JSON takes from ``repr``. NaN and infinities are ``null`` (where the
table allows them: a causal layer's softmax input is half -inf), in the tensor operations too.

Cell layout, bytes 0 .. 31 (D0 .. D8 the digits of N, a slot for "." after each of D0 .. D7):
    0 "[" where a row starts, 1 the sign, 2 .. 6 "0.000" before a number under 1 (as many zeros
    as it needs), 7 .. 23 D0 . D1 . ... . D8, 24 a "0" after the point ("1.0"), 25 .. 28 "e-XX",
    29 "]" where a row ends, 30 .. 31 ", ".
A digit after the last significant one is NUL (``{:.9}`` drops trailing zeros), but the integer
part's ("100.0").
"""

from __future__ import annotations

import functools
import itertools
import re

import torch

from attn_cli.runtime.threads import PARALLEL_FLOPS, threads_for, using_threads

FLOAT32 = "{:.9}"  # 9 significant digits give back every float32; floats stay floats ("1.0", not "1")
LOWEST, HIGHEST = -46, 8  # the decimal exponents e written here: 10^-46 <= |x| < 10^8 (float32's smallest is 1.4e-45)
CELL = 32  # bytes a number's cell holds
DIGIT_AT = (7, 9, 11, 13, 15, 17, 19, 21, 23)  # the byte of D0 .. D8 in a cell
POINT_AT = (8, 10, 12, 14, 16, 18, 20, 22)  # the byte of the point after D0 .. D7
ZERO_AT, EXPONENT_AT, OPEN_AT, CLOSE_AT = 24, 25, 0, 29
_LARGE = re.compile(r"-?[0-9.]+e\+[0-9]+")


def _words(places: dict[int, int]) -> tuple[int, int, int, int]:
    """A cell's bytes (byte index -> character code) as its four little-endian int64 words."""
    words = [0, 0, 0, 0]
    for at, code in places.items():
        words[at // 8] |= code << (8 * (at % 8))
    return tuple(w - (1 << 64) if w >= 1 << 63 else w for w in words)  # type: ignore[return-value]


@functools.lru_cache(maxsize=1)
def _tables() -> dict[str, torch.Tensor]:
    """The lookup tables: each group of three digits' bytes in a cell (``hi`` D0 .. D2, ``mid`` D3 .. D5,
    ``lo`` D6 .. D8: (1000, 4) words), its significant digits, and each (e, significant digits)
    layout's bytes to set and digit bytes to keep ((layouts, 4) words)."""
    groups: dict[str, list[tuple[int, int, int, int]]] = {"hi": [], "mid": [], "lo": []}
    for g in range(1000):
        digits = [ord(c) for c in f"{g:03d}"]
        for name, first in (("hi", 0), ("mid", 3), ("lo", 6)):
            groups[name].append(_words({DIGIT_AT[first + i]: d for i, d in enumerate(digits)}))
    put, keep = [], []
    for e in range(LOWEST, HIGHEST):
        for significant in range(1, 10):
            layout = _layout(e, significant)
            put.append(_words(layout[0]))
            keep.append(_words(layout[1]))
    made = {name: torch.tensor(rows, dtype=torch.int64) for name, rows in groups.items()}
    made["significant"] = torch.tensor([len(f"{g:03d}".rstrip("0")) for g in range(1000)], dtype=torch.int64)  # (1000,)
    made["put"], made["keep"] = torch.tensor(put, dtype=torch.int64), torch.tensor(keep, dtype=torch.int64)  # (layouts, 4)
    made["powers"] = torch.tensor([float(f"1e{k}") for k in range(8 - LOWEST + 2)], dtype=torch.float64)  # 10^k, rounded once
    made["null"] = torch.tensor(_words({1: ord("n"), 2: ord("u"), 3: ord("l"), 4: ord("l"), 30: ord(","), 31: ord(" ")}), dtype=torch.int64)
    return made


def _layout(e: int, significant: int) -> tuple[dict[int, int], dict[int, int]]:
    """The bytes ``{:.9}`` sets around N's digits for a number with decimal exponent ``e`` and
    ``significant`` digits, and the digit bytes it keeps (0xFF)."""
    fixed, below_one = 0 <= e, -4 <= e < 0  # 123.45 and 0.00123; else 1.23e-05
    kept = max(significant, e + 1) if fixed else significant  # an integer part keeps its zeros
    put = {30: ord(","), 31: ord(" ")}
    if below_one:
        put.update({2: ord("0"), 3: ord(".")})
        put.update({at: ord("0") for k, at in enumerate((4, 5, 6)) if e <= -2 - k})
    point = e if fixed else 0 if not below_one and significant > 1 else None
    if point is not None:
        put[POINT_AT[point]] = ord(".")
    if fixed and significant <= e + 1:
        put[ZERO_AT] = ord("0")
    if not (fixed or below_one):
        put.update({EXPONENT_AT + i: ord(c) for i, c in enumerate(f"e-{-e:02d}")})
    return put, {DIGIT_AT[j]: 0xFF for j in range(kept)}


def _take(table: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """table[index] for (n,) indices: index_select, several times as fast as indexing on the CPU."""
    return torch.index_select(table, 0, index)


def _scaled(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(n,) float64 magnitudes -> (N rounded, e, whether Python must write it): N = x 10^(8 - e) in [10^8, 10^9)."""
    powers = _tables()["powers"]
    slow = x >= 1e8  # 10^8 and up (and infinity: ``cells`` writes it null)
    zero = x == 0
    safe = torch.where(zero | ~(x < 1e8), 1.0, x)  # (n,) 1.0 where x is no number to scale
    e = safe.log10().floor_().long()  # (n,) off by one at worst next to a power of ten
    scaled = safe * _take(powers, 8 - e)
    for off, wrong in ((-1, scaled < 1e8), (1, scaled >= 1e9)):
        if wrong.any():
            e += off * wrong
            scaled = torch.where(wrong, safe * _take(powers, (8 - e).clamp_min(0)), scaled)
    rounded = scaled.round()  # half to even, as Python rounds a tie
    # x 10^(8 - e) is exact for e >= -4 (24 bits times 5^12 < 2^29); below, its last bit may cross a half
    slow |= ((scaled - scaled.floor() - 0.5).abs_() < 1e-6) & (e < -4)
    carried = rounded >= 1e9  # 999999999.5 and up: 10^8 at the next exponent
    rounded = torch.where(carried, 1e8, rounded).masked_fill_(zero, 0.0)
    e = (e + carried).masked_fill_(zero, 0)  # 0.0 is written as N = 0 at e = 0
    return rounded, e, slow | (e >= HIGHEST)


def cells(values: torch.Tensor, nulls: bool) -> tuple[torch.Tensor, list[int]]:
    """(n,) float32 -> ((n, 4) int64 cells, the positions whose cells Python must write); NaN and
    infinities are ``null`` where ``nulls`` allows them, else refused (ValueError), as json refuses them."""
    not_numbers = ~values.isfinite()  # (n,)
    if not nulls and bool(not_numbers.any()):
        raise ValueError("Out of range float values are not JSON compliant")
    rounded, e, slow = _scaled(values.abs().double())
    t = _tables()
    hi = torch.div(rounded, 1e6, rounding_mode="floor")  # (n,) D0 .. D2
    rest = rounded - hi * 1e6
    mid = torch.div(rest, 1e3, rounding_mode="floor")  # (n,) D3 .. D5
    hi, mid, lo = hi.long(), mid.long(), (rest - mid * 1e3).long()
    digits = t["significant"]
    significant = torch.where(lo != 0, 6 + _take(digits, lo), torch.where(mid != 0, 3 + _take(digits, mid), _take(digits, hi).clamp_min(1)))
    layout = (e.clamp(LOWEST, HIGHEST - 1) - LOWEST) * 9 + significant - 1  # (n,)
    made = (_take(t["hi"], hi) | _take(t["mid"], mid) | _take(t["lo"], lo)) & _take(t["keep"], layout) | _take(t["put"], layout)  # (n, 4)
    made[:, 0] |= torch.signbit(values).long() * (ord("-") << 8)  # the sign at byte 1
    made[not_numbers] = t["null"]  # (4,) "null, " in every such cell
    return made, (slow & ~not_numbers).nonzero().view(-1).tolist()


def finished(text: str, nulls: bool) -> str:
    """Numbers formatted with ``FLOAT32`` as ``json.dumps`` writes them; ``nulls``: NaN and
    infinities as null (else refused, as json refuses them)."""
    if "e+" in text:  # 1e9 and up: the notation of repr ("1234567890.0"), as json.dumps writes the same value
        text = _LARGE.sub(lambda m: repr(float(m[0])), text)
    if "n" in text:  # "inf", "-inf" or "nan": no finite number's text has an n
        if not nulls:
            raise ValueError("Out of range float values are not JSON compliant")
        text = text.replace("-inf", "null").replace("inf", "null").replace("nan", "null")
    return text


def json_numbers(values: torch.Tensor, width: int, start: int, *, nulls: bool) -> str:
    """(n,) numbers start .. start + n - 1 of a table ``width`` numbers a row, as its JSON text: a
    row opened with "[" and closed with "]", ", " between numbers (none after the last)."""
    return _written(values, width, start, nulls).numpy().tobytes().translate(None, b"\x00")[:-2].decode("ascii")


def json_rows(values: torch.Tensor, *, nulls: bool) -> list[str]:
    """(R, W) -> each row's JSON text (as ``json_numbers`` writes a row alone), made in one pass over
    all of them: several short rows written at once, the tensor operations' overhead spread."""
    made = _written(values, values.shape[-1], 0, nulls)  # (R * W, 4)
    lengths = made.view(torch.uint8).view(values.shape[0], -1).ne(0).sum(dim=-1).tolist()  # each row's text and its ", "
    text = made.numpy().tobytes().translate(None, b"\x00")
    ends = list(itertools.accumulate(lengths))
    return [text[end - length : end - 2].decode("ascii") for end, length in zip(ends, lengths)]


def _written(values: torch.Tensor, width: int, start: int, nulls: bool) -> torch.Tensor:
    """``cells`` of numbers start .. start + n - 1 of a table ``width`` a row, with its rows' brackets and
    the numbers Python must write written in: (n, 4) int64, the text's bytes and NULs."""
    values = values.reshape(-1).to(torch.float32)
    with using_threads(threads_for(PARALLEL_FLOPS)):  # elementwise, the same bits on any count (the toy runs on one)
        made, slow = cells(values, nulls)
    raw = made.view(torch.uint8).view(-1, CELL)  # (n, 32)
    raw[(-start) % width :: width, OPEN_AT] = ord("[")
    raw[(width - 1 - start) % width :: width, CLOSE_AT] = ord("]")
    for i in slow:
        text = finished(FLOAT32.format(values[i].item()), nulls).encode("ascii")
        raw[i, 1:CLOSE_AT] = 0
        raw[i, 1 : 1 + len(text)] = torch.frombuffer(bytearray(text), dtype=torch.uint8)
    return made
