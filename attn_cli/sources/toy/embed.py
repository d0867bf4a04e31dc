"""Tokens -> X, the (T, D) input of attention.

The seed contract, which any user can replay in plain PyTorch::

    torch.manual_seed(seed)
    X = torch.nn.Embedding(vocab_size, d_model)(torch.tensor(ids)).detach()

or, with ``--embeddings FILE``, the file's rows as they are. Sinusoidal
positional encodings, when asked for, are added to X afterwards.
"""

from __future__ import annotations

import csv
import json
import math
import re
from pathlib import Path

import torch

from attn_cli.runtime.errors import EmbeddingsError, TooLargeError
from attn_cli.records.tokens import Tokens

# An (vocab, D) float32 table bigger than this is refused rather than allocated.
MAX_TABLE_BYTES = 8 * 2**30
# A number read from a file, as a Python float in a list (24 + 8 bytes) and then in the tensor (4).
_BYTES_PER_PARSED_NUMBER = 36


def embedding_table(vocab_size: int, d_model: int, seed: int) -> torch.Tensor:
    """The (V, D) weight of ``nn.Embedding(vocab_size, d_model)`` made right after
    ``torch.manual_seed(seed)``."""
    table_bytes = vocab_size * d_model * 4
    if table_bytes > MAX_TABLE_BYTES:
        raise TooLargeError(
            f"an embedding table of {vocab_size} x {d_model} floats needs "
            f"{table_bytes / 2**30:.1f} GiB; lower --d-model or use a smaller tokenizer"
        )
    torch.manual_seed(seed)
    return torch.nn.Embedding(vocab_size, d_model).weight.detach()  # (V, D)


def seeded_embeddings(tokens: Tokens, d_model: int, seed: int, table: torch.Tensor | None = None) -> torch.Tensor:
    """Rows ``tokens.ids`` of the seeded table (made here unless ``table`` is given)."""
    if table is None:
        table = embedding_table(tokens.vocab_size, d_model, seed)  # (V, D)
    return table[torch.tensor(tokens.ids, dtype=torch.long)]  # (V, D) -> (T, D)


def load_embeddings(path: Path, n_tokens: int) -> torch.Tensor:
    """Read a (T, D) matrix from JSON (list of lists), CSV (no header) or .npy."""
    suffix = path.suffix.lower()
    if not path.is_file():
        raise EmbeddingsError(f"embeddings file {path} does not exist or is not a file")
    try:
        if suffix == ".npy":
            rows = _read_npy(path, n_tokens)
        else:
            # A text number takes at least two bytes ("0,"), so the file's size bounds the count.
            _check_memory(path, path.stat().st_size // 2)
            rows = _read_csv(path) if suffix == ".csv" else _read_json(path)
    except OSError as err:
        raise EmbeddingsError(f"cannot read embeddings file {path}: {err.strerror or err}") from None
    if not rows or not isinstance(rows, list) or not all(isinstance(r, list) for r in rows):
        raise EmbeddingsError(f"{path}: expected a non-empty list of rows (one list of numbers per token)")
    width = len(rows[0])
    if width == 0:
        raise EmbeddingsError(f"{path}: rows are empty; each row needs at least one number")
    for i, row in enumerate(rows):
        if len(row) != width:
            raise EmbeddingsError(f"{path}: row {i} has {len(row)} numbers, row 0 has {width}; rows must be equally long")
        for value in row:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise EmbeddingsError(f"{path}: row {i} holds {_short(value)}, which is not a number")
            if not _finite(value):
                raise EmbeddingsError(f"{path}: row {i} holds {_short(value)}; every value must be a finite float32")
    if len(rows) != n_tokens:
        raise EmbeddingsError(
            f"{path} has {_count(len(rows), 'row')} but the text has {_count(n_tokens, 'token')}; give one row per token"
        )
    x = torch.tensor(rows, dtype=torch.float32)  # (T, D)
    if not torch.isfinite(x).all():
        raise EmbeddingsError(f"{path}: a value overflows float32; keep values within +-3.4e38")
    return x


def sinusoidal(n_tokens: int, d_model: int) -> torch.Tensor:
    """PE[pos, 2i] = sin(pos / 10000^(2i/D)), PE[pos, 2i+1] = cos(same)."""
    position = torch.arange(n_tokens, dtype=torch.float32).unsqueeze(1)  # (T, 1)
    div = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model))  # (ceil(D/2),)
    pe = torch.zeros(n_tokens, d_model)  # (T, D)
    pe[:, 0::2] = torch.sin(position * div)
    pe[:, 1::2] = torch.cos(position * div)[:, : d_model // 2]
    return pe


def _finite(value: int | float) -> bool:
    try:
        return math.isfinite(value)
    except OverflowError:  # an int too large for a float
        return False


def _short(value: object) -> str:
    if isinstance(value, int) and value.bit_length() > 128:
        return "a very large integer"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _read_json(path: Path) -> object:
    try:
        # utf-8-sig: files saved by some editors start with a byte-order mark.
        return json.loads(path.read_text(encoding="utf-8-sig"))
    except UnicodeDecodeError:
        raise EmbeddingsError(f"{path} is not UTF-8 text; give JSON, CSV or .npy") from None
    except json.JSONDecodeError as err:
        raise EmbeddingsError(f"{path} is not valid JSON ({err.msg} at line {err.lineno}); give a list of lists") from None
    except RecursionError:
        raise EmbeddingsError(f"{path} nests lists too deeply; give a list of rows, each a list of numbers") from None
    except ValueError as err:  # e.g. an integer literal over Python's 4300-digit limit
        raise EmbeddingsError(f"{path} is not usable JSON ({str(err).split(':')[0]}); give a list of lists of numbers") from None


def _read_csv(path: Path) -> list[list[float]]:
    try:
        with path.open(newline="", encoding="utf-8-sig") as f:
            reader = csv.reader(f)
            lines = [(reader.line_num, row) for row in reader if any(cell.strip() for cell in row)]
    except UnicodeDecodeError:
        raise EmbeddingsError(f"{path} is not UTF-8 text") from None
    except csv.Error as err:
        raise EmbeddingsError(f"{path} is not valid CSV ({err})") from None
    rows = []
    for line_num, row in lines:
        try:
            rows.append([float(cell) for cell in row])
        except ValueError:
            raise EmbeddingsError(f"{path}: line {line_num} has a cell that is not a number (no header row, please)") from None
    return rows


def _read_npy(path: Path, n_tokens: int) -> list[list[float]]:
    """A 2-d .npy, its header checked before any data is read: an absurd shape or a
    file shorter than its header promises is refused, never allocated."""
    import numpy as np

    with path.open("rb") as f:
        if f.read(6) != b"\x93NUMPY":
            raise EmbeddingsError(f"{path} is not a .npy file (no NUMPY header); save it with numpy.save, or give JSON or CSV")
        f.seek(0)
        try:
            version = np.lib.format.read_magic(f)
            read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
            shape, _fortran, dtype = read_header(f, max_header_size=10_000)
        except Exception as err:  # noqa: BLE001  whatever numpy's parser raises on a user's bytes (SyntaxError, RecursionError, MemoryError...)
            raise EmbeddingsError(f"{path} is not a readable .npy file: its header is not the Python dict numpy.save writes ({_first_line(err)})") from None
        data_start = f.tell()
    if dtype.hasobject:
        raise EmbeddingsError(f"{path} is not a readable .npy file (it holds Python objects, which are never unpickled)")
    if len(shape) != 2 or dtype.kind not in "fiu":
        raise EmbeddingsError(f"{path} holds a {len(shape)}-d {dtype} array; give a 2-d array of numbers")
    rows, width = shape
    if rows != n_tokens:
        raise EmbeddingsError(
            f"{path} has {_count(rows, 'row')} but the text has {_count(n_tokens, 'token')}; give one row per token"
        )
    need = rows * width * dtype.itemsize
    if need > path.stat().st_size - data_start:
        raise EmbeddingsError(
            f"{path} is not a readable .npy file (shorter than its header says: {rows} x {width} {dtype}); save it again"
        )
    _check_memory(path, rows * width)
    try:
        array = np.load(path, allow_pickle=False)
    except MemoryError:
        raise TooLargeError(f"reading {path.name}: its {rows:,} x {width:,} numbers do not fit in the memory this process may use; give a smaller embeddings file") from None
    except (ValueError, OSError, EOFError) as err:
        raise EmbeddingsError(f"{path} is not a readable .npy file ({_first_line(err)})") from None
    return array.astype(float).tolist()


def _check_memory(path: Path, numbers: int) -> None:
    """Refuse a file whose numbers would not fit, as Python lists and a tensor."""
    from attn_cli.runtime import budget

    budget.check(
        {"rows": numbers * _BYTES_PER_PARSED_NUMBER},
        {"rows": f"the {numbers:,} numbers of {path.name} as Python floats"},
        {"rows": "give a smaller embeddings file (one row per token, d_model numbers each)"},
        doing=f"reading {path.name}",
    )


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _first_line(err: BaseException, most: int = 120) -> str:
    """The error's first line, cut to ``most`` characters (a parser may quote a whole
    10 KB header), without object addresses (``<ast.Call object at 0x7f...>``)."""
    lines = str(err).strip().splitlines()
    line = re.sub(r"<([\w.]+) object at 0x[0-9a-f]+>", r"\1", lines[0]) if lines else type(err).__name__
    return line if len(line) <= most else line[: most - 1] + "…"
