"""The walk-through as plain text (pipes, files): headings, prose, and grids as
aligned columns, never cut."""

from __future__ import annotations

from attn_cli.render.explain.document import Block, Explanation, Line


def to_text(explanation: Explanation) -> str:
    """Plain text: headings, prose, and grids as aligned columns (never cut)."""
    out: list[str] = []
    for block in explanation.intro:
        out.extend(_text_block(block))
    for step in explanation.steps:
        title = f"{step.number}. {step.title}" + (" (not in this run)" if step.skipped else "")
        out += ["", title, "─" * len(title)]
        for block in step.blocks:
            out.extend(_text_block(block))
    out.append("")
    for block in explanation.outro:
        out.extend(_text_block(block))
    lines = [line for k, line in enumerate(out) if line or (k and out[k - 1])]  # one blank line at most
    return "\n".join(lines).strip("\n") + "\n"


def _text_block(block: Block) -> list[str]:
    if isinstance(block, Line):
        if block.kind == "formula":
            return ["    " + block.text]
        return [block.text]
    widths = [max(len(row[k]) if k < len(row) else 0 for row in (block.header, *block.rows)) for k in range(len(block.header))]
    lines = [] if not block.title else ["", "  " + block.title]
    else_lines = [block.header, *block.rows]
    for n, row in enumerate(else_lines):
        cells = [cell.ljust(w) if k < block.left else cell.rjust(w) for k, (cell, w) in enumerate(zip(row, widths))]
        lines.append(("  " + "  ".join(cells)).rstrip())
        if n == 0:
            lines.append("  " + "  ".join("─" * w for w in widths))
    return lines + [""]

