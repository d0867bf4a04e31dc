"""--help that a person can scan and that cannot go stale: every command's options in the
panels of ``attn_cli.cli.panels``, in one order; --model's help naming every model_type the
registry computes; every file a help text sends the reader to there and saying what the help
says; examples whose --model is a folder a reader can have."""

from __future__ import annotations

import re
from typing import Any, Callable

import pytest
import typer
from conftest import REPO
from invoking import commands

from attn_cli.analysis.headroles import THRESHOLDS
from attn_cli.cli import panels
from attn_cli.cli.panels import ARGUMENTS, OPTIONS, PANELS
from attn_cli.sources.checkpoint.registry import MODEL_TYPES, SEQ2SEQ_TYPES

TITLE = re.compile(r"^([A-Z][^:\n]*):$", re.MULTILINE)  # a section's title: a whole line at column 0
OPTION = re.compile(r"^ {2}(-[^\s,]+)(?:, (--\S+))?", re.MULTILINE)


def leaves() -> dict[tuple[str, ...], Any]:
    """The commands that run (not the groups), by their words on the command line."""
    return {path: command for path, command in commands().items() if path and not hasattr(command, "commands")}


def rendered(command: Any, name: str) -> str:
    """The command's --help as a 100-column terminal shows it (with the app's settings: -h, the width)."""
    settings = commands()[()].context_settings
    return command.get_help(typer.Context(command, info_name=name, terminal_width=100, **settings))


def sections(text: str) -> dict[str, str]:
    """Each section's title -> its body, in the order the help shows them."""
    found = list(TITLE.finditer(text))
    return {m.group(1): text[m.end() : found[i + 1].start() if i + 1 < len(found) else len(text)] for i, m in enumerate(found)}


def panel_problems(command: Any, text: str) -> list[str]:
    """What is wrong with a command's panels: an option outside ``PANELS``, a section out of
    their order, an "Options" section with more than --help in it."""
    problems = [
        f"{p.opts[0]} is in panel {getattr(p, 'rich_help_panel', None)!r}"
        for p in command.params
        if p.param_type_name == "option" and not p.hidden and getattr(p, "rich_help_panel", None) not in PANELS
    ]
    shown = sections(text)
    titles = [t for t in shown if t != ARGUMENTS]
    order = [*PANELS, OPTIONS]
    problems += [f"section {t!r} is no panel" for t in titles if t not in order]
    places = [order.index(t) for t in titles if t in order]
    if places != sorted(places):
        problems.append(f"the panels come as {titles}")
    left = {name for m in OPTION.finditer(shown.get(OPTIONS, "")) for name in m.groups() if name}
    if left != {"-h", "--help"}:
        problems.append(f"left under Options: {sorted(left)}")
    return problems


@pytest.mark.parametrize("path", list(leaves()), ids=" ".join)
def test_every_option_is_in_a_panel_and_the_panels_keep_one_order(path: tuple[str, ...]) -> None:
    command = leaves()[path]
    assert panel_problems(command, rendered(command, path[-1])) == []


def test_the_panel_check_catches_an_option_without_a_panel_and_panels_out_of_order(monkeypatch: pytest.MonkeyPatch) -> None:
    """The negative controls: an option left in no panel, then the panels drawn in another order."""
    run = commands()[("run",)]
    stray = next(p for p in run.params if p.name == "format")
    monkeypatch.setattr(stray, "rich_help_panel", None)
    problems = panel_problems(run, rendered(run, "run"))
    assert "--format is in panel None" in problems and "left under Options: ['--format', '--help', '-F', '-h']" in problems
    monkeypatch.setattr(stray, "rich_help_panel", panels.OUTPUT)
    monkeypatch.setattr(panels, "PANELS", tuple(reversed(PANELS)))
    assert [p for p in panel_problems(run, rendered(run, "run")) if p.startswith("the panels come as")]


def test_run_shows_its_panels_in_the_datas_order() -> None:
    run = commands()[("run",)]
    assert list(sections(rendered(run, "run"))) == [ARGUMENTS, *PANELS, OPTIONS]


def test_docs_cli_names_the_panels_in_their_order() -> None:
    said = " ".join((REPO / "docs" / "cli.md").read_text(encoding="utf-8").split())
    assert ", ".join(PANELS) in said
    assert ", ".join(reversed(PANELS)) not in said  # the control: the order is what is checked


# -- --model names what it computes --------------------------------------------------------------


def missing_model_types(help: str) -> list[str]:
    """The registry's model_types that ``help`` does not name, each as a whole word."""
    return [t for t in (*MODEL_TYPES, *SEQ2SEQ_TYPES) if not re.search(rf"(?<![\w-]){re.escape(t)}(?![\w-])", help)]


def test_model_help_names_every_model_type_and_where_the_list_is() -> None:
    helps = {path: p.help for path, command in leaves().items() for p in command.params if p.name == "model"}
    assert {path[0] for path in helps} == {"run", "heatmap", "explain", "html", "heads", "census", "compare", "faithfulness"}
    for help in helps.values():
        assert missing_model_types(help) == []
        assert "docs/models.md" in help and "`attn-cli models`" in help


def test_the_model_type_check_catches_the_old_help() -> None:
    """The negative control: the help before issue 34 named three families of 17 model_types."""
    old = (
        "A trained checkpoint instead of the seeded toy model: a folder with config.json, *.safetensors and tokenizer "
        "files, or ORG/NAME from the Hugging Face cache (never downloaded). GPT-2, BERT-style and Llama-style (Llama, "
        "Mistral, Qwen2) models; `attn-cli models` lists those on this machine."
    )
    assert {"qwen3", "gemma2", "phi3", "bart", "t5", "xlm-roberta"} <= set(missing_model_types(old))


# -- the files a help text names -------------------------------------------------------------------


def models_table_misses(doc: str) -> list[str]:
    """The model_types docs/models.md's families table has no row for."""
    rows = [line.split("|")[1] for line in doc.splitlines() if line.startswith("| `")]
    return [t for t in MODEL_TYPES if not any(f"`{t}`" in first for first in rows)]


def encoder_decoders_misses(doc: str) -> list[str]:
    """The encoder-decoder model_types docs/encoder-decoder.md has no paragraph for."""
    return [t for t in SEQ2SEQ_TYPES if f"(`{t}`)" not in doc]


def thresholds_misses(doc: str) -> list[str]:
    """The roles whose threshold docs/heads.md does not give as headroles.THRESHOLDS has it."""
    return [role for role, value in THRESHOLDS.items() if not re.search(rf"`{role}_(mass|score) ≥ {value}`", doc)]


def census_measures_misses(doc: str) -> list[str]:
    """The census measures docs/census.md's table does not define."""
    from attn_cli.analysis.headcensus import ROW_MEASURES
    from attn_cli.analysis.tally import TEXT_MEASURES

    measures = [m for m in ROW_MEASURES + TEXT_MEASURES if not m.startswith("top_")] + ["positional", "distance_mass"]
    return [m for m in measures if f"| `{m}` |" not in doc]


def attribution_misses(doc: str) -> list[str]:
    """The maps --what computes beyond the weights that docs/attribution.md's table does not name."""
    from attn_cli.records.results import MAPS

    return [name for name in MAPS if name not in ("weights", "rollout", "norms") and f"| `--what {name}` |" not in doc]


# each file a help text may name -> what is missing from it of what the help promises there
PROMISES: dict[str, Callable[[str], list[str]]] = {
    "docs/models.md": models_table_misses,
    "docs/encoder-decoder.md": encoder_decoders_misses,
    "docs/heads.md": thresholds_misses,
    "docs/census.md": census_measures_misses,
    "docs/attribution.md": attribution_misses,
}
NAMED = re.compile(r"\bdocs/[\w.-]+\.md\b|\bREADME\b")


def help_texts() -> dict[str, str]:
    """Every help text of the app: each command's and each of its parameters'."""
    texts = {}
    for path, command in commands().items():
        texts[" ".join(path) or "attn-cli"] = command.help or ""
        texts.update({f"{' '.join(path)} {p.name}": getattr(p, "help", None) or "" for p in command.params})
    return texts


def unkept_promises(texts: dict[str, str]) -> list[str]:
    problems = []
    for where, text in texts.items():
        for name in NAMED.findall(text):
            if name not in PROMISES:
                problems.append(f"{where} names {name}, which PROMISES does not know")
            elif not (REPO / name).is_file():
                problems.append(f"{where} names {name}, which does not exist")
            else:
                problems += [f"{name} lacks {what}" for what in PROMISES[name]((REPO / name).read_text(encoding="utf-8"))]
    return problems


def test_every_file_a_help_names_exists_and_says_what_the_help_promises() -> None:
    texts = help_texts()
    assert {name for text in texts.values() for name in NAMED.findall(text)} >= {"docs/models.md", "docs/heads.md"}
    assert unkept_promises(texts) == []


def test_the_promise_check_catches_a_stale_pointer_and_a_doc_that_lost_its_row() -> None:
    """The negative controls: heads' help as it was ("in the README"), a file that is not
    there, and docs/models.md without its Gemma 2 row or heads.md with another threshold."""
    assert unkept_promises({"heads": "The roles' thresholds are in the README."}) == ["heads names README, which PROMISES does not know"]
    assert models_table_misses((REPO / "docs/models.md").read_text(encoding="utf-8").replace("| `gemma2` |", "| gemma2 |")) == ["gemma2"]
    assert thresholds_misses((REPO / "docs/heads.md").read_text(encoding="utf-8").replace("`first_mass ≥ 0.5`", "`first_mass ≥ 0.6`")) == ["first"]
    assert encoder_decoders_misses("- **BART** (`bart`)") == ["marian", "t5"]


# -- examples a reader can run ---------------------------------------------------------------------

MODEL_ARG = re.compile(r"--(?:other-)?model[ =](\S+)")


def unrunnable_models(text: str) -> list[str]:
    """The --model values of ``text``'s examples that are a bare name (``gpt2``): a folder no reader
    has, or a cache entry most lack; a variable ("$M") or a path (``~/models/gpt2``, ``base/``) is kept."""
    commands = [line.partition("attn-cli ")[2] for line in text.splitlines() if "attn-cli " in line]
    return [value for line in commands for value in MODEL_ARG.findall(line) if not (value.startswith(('"$', "$")) or "/" in value)]


def test_help_examples_name_a_folder_or_a_variable_for_model() -> None:
    examples = {name: text for name, text in help_texts().items() if "attn-cli " in text}
    assert len(examples) >= 6
    assert {name: unrunnable_models(text) for name, text in examples.items() if unrunnable_models(text)} == {}
    assert unrunnable_models('attn-cli run "The capital of France is" --model gpt2 --predict 5') == ["gpt2"]  # the control
