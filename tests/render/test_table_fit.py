"""Fitting run's tables to a narrow terminal: without --precision a matrix rounds to fewer
digits (as few as 2) before it drops columns, and a long model path in the header keeps
its last folders whole."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from rich.console import Console
from rich.text import Text

from attn_cli.render.terminal import cells
from attn_cli.render.terminal.cells import FittedTable, PrecisionFit, fmt
from attn_cli.render.terminal.header import Pairs, path_end
from invoking import invoke

EIGHT = "one two three four five six seven eight"


def render(renderable, width: int) -> str:
    console = Console(file=io.StringIO(), width=width, color_system=None, highlight=False, markup=False, emoji=False)
    console.print(renderable)
    return console.file.getvalue()


def keys_and_digits(out: str, title: str = "Attention weights") -> tuple[list[str], set[int]]:
    """The column headers of the table under ``title``, and the digits after the point of its cells."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(title))
    header = lines[start + 2].split()[3:]  # after "query \ key"
    digits = set()
    for line in lines[start + 4 :]:
        if not line.strip():
            break
        digits |= {len(number) for number in re.findall(r"\d\.(\d+)", line)}
    return header, digits


def shows_every_key_at(out: str, keys: list[str], digits: int) -> bool:
    return keys_and_digits(out) == (keys, {digits})


# -- the rule: the most digits at which every column fits, else the digits asked for and a cut


def matrix(row_label: str, rows: int = 8):
    """make(digits): a rows x 8 table of numbers in [0, 1) whose column labels are narrower than its cells."""
    values = [[(i * 8 + j) / (8 * rows) + 0.001234 for j in range(8)] for i in range(rows)]

    def make(digits: int) -> FittedTable:
        return FittedTable(
            Text("Weights"), "query \\ key", [f"{row_label}{i}" for i in range(rows)], [f"k{j}" for j in range(8)],
            lambda i, j: Text(fmt(values[i][j], digits)), what="keys", rows_what="queries",
        )

    return make


# a column is 3 + the cell's width (digits + 2); the label column 4 + the widest label, at least the corner's 11
@pytest.mark.parametrize(
    ("row_label", "width", "digits"),
    [
        ("q", 80, 3),  # 80 - 15 = 65 cells: 8 x 8 at 3 digits, not 8 x 9 at 4
        ("q" * 13, 80, 2),  # 80 - 18 = 62: 8 x 7 at 2 digits, not 8 x 8 at 3
        ("q" * 19, 80, 2),  # 80 - 24 = 56: 8 x 7 exactly
        ("q", 87, 4),  # 87 - 15 = 72: fits as asked, no note
    ],
)
def test_a_table_rounds_to_the_most_digits_that_show_every_column(row_label: str, width: int, digits: int) -> None:
    make = matrix(row_label)
    out = render(PrecisionFit(make, 4), width)
    lines = out.splitlines()
    assert lines[2].split()[3:] == [f"k{j}" for j in range(8)]  # every key, in order
    assert {len(n) for line in lines[4:12] for n in re.findall(r"\d\.(\d+)", line)} == {digits}
    assert max(map(len, lines)) <= width
    said = f"numbers to {digits} digits after the point, not 4, to fit {width} columns (--precision 4 keeps 4 and drops keys)"
    assert (said in " ".join(out.split())) is (digits < 4)
    assert "keys shown" not in out
    # the control: one digit more (at 4, the old behaviour's) drops keys
    if digits < 4:
        assert None in make(digits + 1).columns_that_fit(width)


def test_a_table_too_wide_even_at_2_digits_keeps_the_digits_asked_for_and_drops_columns() -> None:
    make = matrix("q")
    out = " ".join(render(PrecisionFit(make, 4), 60).split())
    assert out == " ".join(render(make(4), 60).split())  # as before: 4 digits, the middle keys dropped
    assert "of 8 keys shown" in out and "digits after the point" not in out and "0.0012" in out
    assert None in make(2).columns_that_fit(60)  # why: fewer digits would drop keys too


def test_a_long_table_rounded_says_where_every_number_is_once() -> None:
    make = matrix("q", rows=50)
    out = " ".join(render(PrecisionFit(make, 4), 80).split())
    assert "numbers to 3 digits after the point" in out and "41 of 50 queries shown" in out
    assert out.count(cells.SEE_ALL) == 1
    # the control: the rows' note says it too when nothing else has
    alone = " ".join(render(make(3), 80).split())
    assert "41 of 50 queries shown" in alone and alone.count(cells.SEE_ALL) == 1 and "digits after the point" not in alone


@pytest.mark.parametrize("asked", [2, 1, 0])
def test_a_table_asked_for_2_digits_or_fewer_is_made_once(asked: int) -> None:
    made = []

    def make(digits: int) -> FittedTable:
        made.append(digits)
        return matrix("q" * 19)(digits)

    render(PrecisionFit(make, asked), 40)
    assert made == [asked]


# -- run: the README's command, the toy's 8 tokens, and --precision --------------------------


def test_run_at_80_columns_shows_every_key_of_8_at_3_digits() -> None:
    out = invoke("run", EIGHT, "-t", "words", "--show", "weights", env={"COLUMNS": "80"}).stdout
    assert shows_every_key_at(out, EIGHT.split(), 3)
    assert "numbers to 3 digits after the point, not 4, to fit 80 columns" in " ".join(out.split())


def test_run_without_the_fitting_drops_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    """The control for the test above: with no fewer digits allowed (the old behaviour) keys go."""
    monkeypatch.setattr(cells, "FEWEST_DIGITS", 4)
    out = invoke("run", EIGHT, "-t", "words", "--show", "weights", env={"COLUMNS": "80"}).stdout
    assert not shows_every_key_at(out, EIGHT.split(), 3)
    assert "6 of 8 keys shown (0-4, 7) to fit 80 columns" in " ".join(out.split())


@pytest.mark.parametrize(
    ("precision", "keys", "digits"),
    [
        ("4", ["one", "two", "three", "four", "five", "…", "eight"], 4),  # honoured: columns dropped as before
        ("3", EIGHT.split(), 3),
        ("2", EIGHT.split(), 2),  # honoured although 3 would fit
    ],
)
def test_run_honours_an_explicit_precision(precision: str, keys: list[str], digits: int) -> None:
    out = invoke("run", EIGHT, "-t", "words", "--show", "weights", "--precision", precision, env={"COLUMNS": "80"}).stdout
    assert keys_and_digits(out) == (keys, {digits})
    assert "digits after the point" not in out


def test_stats_keep_4_digits_when_the_weights_round() -> None:
    out = invoke("run", EIGHT, "-t", "words", "--show", "weights,stats", env={"COLUMNS": "80"}).stdout
    stats = out[out.index("Statistics") :]
    assert {len(n) for n in re.findall(r"\d\.(\d+)", stats.split("\n\n")[0])} == {4}


def test_the_readme_command_on_minilm_shows_all_8_keys_at_80_columns(minilm_path: Path) -> None:
    args = ("run", "The cat sat on the mat", "--model", str(minilm_path), "--layer", "2", "--head", "5", "--show", "tokens,weights")
    keys = ["[CLS]", "The", "␣cat", "␣sat", "␣on", "␣the", "␣mat", "[SEP]"]
    out = invoke(*args, env={"COLUMNS": "80"}).stdout
    assert shows_every_key_at(out, keys, 3) and "keys shown" not in out
    control = invoke(*args, "--precision", "4", env={"COLUMNS": "80"}).stdout
    assert not shows_every_key_at(control, keys, 3) and "6 of 8 keys shown" in control


# -- a long model path ----------------------------------------------------------------------

LONG = "/home/someone/models/checkpoints/fine-tuned/all-MiniLM-L6-v2-sentiment/snapshot-0042"


def whole_folders_end(shown: str, path: str) -> bool:
    """``shown`` is ``…`` and the path's last folders, each whole."""
    folders = path.split("/")
    return any(shown == "…/" + "/".join(folders[-k:]) for k in range(1, len(folders)))


@pytest.mark.parametrize("width", range(30, len("model " + LONG) + 1, 3))
def test_a_long_path_keeps_its_last_folders_whole(width: int) -> None:
    (line,) = render(Pairs([("model", LONG)]), width).splitlines()
    assert line.startswith("model ") and len(line) <= width
    shown = line[len("model ") :]
    if shown != LONG:
        assert whole_folders_end(shown, LONG), shown
        # as many as fit: one folder more would not
        more = LONG[: -len(shown) + 1].rsplit("/", 1)[1]
        assert len(f"model …/{more}{shown[1:]}") > width


def test_the_old_cut_split_a_folder() -> None:
    """The control: the header's old rule (the path's last characters) fails the check above."""
    room = 60 - len("model ")
    old = "…" + LONG[-(room - 1) :]
    assert not whole_folders_end(old, LONG) and whole_folders_end(path_end(LONG, room), LONG)


@pytest.mark.parametrize(
    ("value", "room", "shown"),
    [
        ("/a/" + "x" * 30, 12, "…" + "x" * 11),  # the last folder alone is too wide: its end
        ("no-slash-" + "y" * 20, 10, "…" + "y" * 9),
        ("org/model", 20, "org/model"),
    ],
)
def test_a_value_that_is_no_path_or_whose_last_folder_is_too_wide_keeps_its_end(value: str, room: int, shown: str) -> None:
    assert path_end(value, room) == shown


def test_run_on_a_long_path_keeps_its_last_folders(minilm_path: Path, tmp_path: Path) -> None:
    folder = tmp_path / "several" / "folders" / "of" / "a-long-enough-path" / "all-MiniLM-L6-v2"
    folder.parent.mkdir(parents=True)
    folder.symlink_to(minilm_path, target_is_directory=True)
    out = invoke("run", "The cat sat", "--model", str(folder), "--show", "tokens", env={"COLUMNS": "60"}).stdout
    (line,) = [line for line in out.splitlines() if line.startswith("model ")]
    assert whole_folders_end(line[len("model ") :], str(folder)) and line.endswith("/of/a-long-enough-path/all-MiniLM-L6-v2")
