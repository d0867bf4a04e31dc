"""The panels every command's --help groups its options in: their names, once, and their order,
the data's (the text, what computes its attention, what is computed from it, what is shown,
where it goes). Every option names its panel (``rich_help_panel=``); a command lists only the
panels it has, always in this order, and only --help is left under "Options".

attn-cli's help is plain text (``rich_markup_mode=None``: rich stays unloaded), where click
would ignore the panels: ``format_panels`` writes them as click's sections."""

from __future__ import annotations

from typing import Any

INPUT = "Input"
TOY = "Toy model (seeded weights)"
TRAINED = "Trained model (--model)"
ANALYSIS = "Analyses"
DISPLAY = "Display"
OUTPUT = "Output"
PANELS = (INPUT, TOY, TRAINED, ANALYSIS, DISPLAY, OUTPUT)
ARGUMENTS = "Arguments"
OPTIONS = "Options"  # what has no panel: --help alone
COL_MAX = 30  # click's default: a longer option's help starts on the next line


def format_panels(command: Any, ctx: Any, formatter: Any) -> None:
    """The arguments, then each panel's options (in ``PANELS``' order), then those in none,
    as click's sections; the help column starts at the same place in every section."""
    sections: dict[str, list[tuple[str, str]]] = {ARGUMENTS: []}
    for param in command.get_params(ctx):
        record = param.get_help_record(ctx)
        if record is None:  # a hidden option
            continue
        panel = ARGUMENTS if param.param_type_name == "argument" else getattr(param, "rich_help_panel", None) or OPTIONS
        sections.setdefault(panel, []).append(record)
    order = sorted(sections, key=_place)
    rows = [row for name in order for row in sections[name]]
    if not rows:
        return
    width = min(max(len(term) for term, _ in rows), COL_MAX)
    for name in order:
        if sections[name]:
            with formatter.section(name):
                # padded to one width: click measures each section's first column alone
                formatter.write_dl([(term.ljust(width) if text else term, text) for term, text in sections[name]], col_max=COL_MAX)


def _place(panel: str) -> int:
    """Arguments first, then ``PANELS`` in order, then a panel not listed, then "Options"."""
    if panel == ARGUMENTS:
        return -1
    if panel in PANELS:
        return PANELS.index(panel)
    return len(PANELS) + (panel == OPTIONS)
