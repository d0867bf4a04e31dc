"""Peak memory of `attn-cli run -F json` (and csv) against the size of what it writes (issue 18).

Each row is one text of T words (the words tokenizer, one head, the toy defaults),
written with `-o FILE` by a fresh `attn-cli` process; its peak RSS is the kernel's
(`wait4`'s ru_maxrss). In the same run, the same process with the export replaced:

- trace only: the writer does nothing: the process computes the trace and exits
  (the floor: start-up, torch, the embedding table, the trace's tensors);
- whole text: the writer before streaming (tests/export_reference.py), which built
  the text in memory and wrote it in one call.

"over trace" is the streamed process's peak above the trace-only one. The trace-only
peak comes while the attention is computed (its scratch T x T buffer), above what the
trace keeps afterwards, so "the export's own" is measured too, inside the streamed
process: its high-water mark during `write_json`/`write_csv` (reset through
`/proc/self/clear_refs` as it starts) above its RSS just before. That is what
`formats.numbers.export_bytes` ("budgeted") estimates, and what the refusal of exit 4 compares
with free memory. A child's ru_maxrss starts from its parent's RSS at the fork, so
this process never imports torch: the budget is asked of another process.

    python bench/json_memory.py                      # JSON at 1,000 to 5,000 tokens, CSV at 1,000 and 2,000
    python bench/json_memory.py --sizes 1000 --csv-sizes ""   # a smoke check
    python bench/json_memory.py --no-whole           # without the whole-text writer (it needs 2-3 bytes of RAM a byte of JSON)
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import random
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
WORDS = (REPO / "sample_texts" / "tutorials.txt").read_text(encoding="utf-8").split()

ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
CLI = "import sys; from attn_cli.cli import main; main()"
# The streamed writer, measured from inside: RSS just before it, and the kernel's
# high-water mark from there (reset through /proc/self/clear_refs) to its end.
MEASURED = """
import os
from attn_cli.formats import export

def status(key):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(key))

def measured(write):
    def measured_write(run, out, **options):
        before, peak_so_far = status("VmRSS:"), status("VmHWM:")
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        write(run, out, **options)
        with open(os.environ["JSON_MEMORY_REPORT"], "w") as f:
            f.write(f"{before} {peak_so_far} {status('VmHWM:')}")
    return measured_write

export.write_json, export.write_csv = measured(export.write_json), measured(export.write_csv)
"""
WRITERS = {
    "streamed": MEASURED + CLI,
    "trace only": "from attn_cli.formats import export; export.write_json = export.write_csv = lambda *a, **k: None; " + CLI,
    "whole text": (
        f"import sys; sys.path.insert(0, {str(REPO / 'tests')!r}); import export_reference as old; from attn_cli.formats import export; "
        "export.write_json = lambda run, out: out.write(old.to_json(run).encode('utf-8')); "
        "export.write_csv = lambda run, out, header, index: out.write(old.to_csv(run, header=header, index=index).encode('utf-8')); " + CLI
    ),
}


def text_of(n_words: int) -> str:
    rng = random.Random(n_words)
    return " ".join(rng.choice(WORDS) for _ in range(n_words))


def peak_rss(writer: str, fmt: str, text_file: Path, out: Path) -> tuple[int, int, int | None]:
    """(peak RSS in bytes, bytes written, the streamed writer's own peak above the RSS
    it started from, or None) of one attn-cli process."""
    args = ["run", "--file", str(text_file), "-t", "words", "--max-tokens", "5000", "-F", fmt, "-o", str(out)]
    report = out.with_suffix(".report")
    proc = subprocess.Popen([PYTHON, "-c", WRITERS[writer], *args], env={**ENV, "JSON_MEMORY_REPORT": str(report)})
    _, status, usage = os.wait4(proc.pid, 0)
    if status != 0:
        raise SystemExit(f"{writer} {fmt} {text_file.name}: exit status {status}")
    size = out.stat().st_size if out.exists() else 0
    out.unlink(missing_ok=True)
    peak, own = usage.ru_maxrss * 1024, None
    if report.exists():  # the high-water mark was reset before the export: the earlier peak is in the report
        before, peak_before, peak_during = map(int, report.read_text().split())
        peak, own = max(peak, peak_before, peak_during), peak_during - before
        report.unlink()
    return peak, size, own


BUDGETED = (
    "import sys; from attn_cli.sources.toy.config import Config; from attn_cli.sources.toy.source import ToySource; "
    "from attn_cli.formats.numbers import export_bytes; "
    "print(export_bytes(ToySource(Config(tokenizer='words', max_tokens=5000)).run(open(sys.argv[1], encoding='utf-8').read())))"
)


def budgeted(text_file: Path) -> int:
    """What formats.numbers.export_bytes budgets for streaming this text, asked in another process:
    this one stays small, because a child's ru_maxrss starts from its parent's peak at fork."""
    return int(subprocess.run([PYTHON, "-c", BUDGETED, str(text_file)], env=ENV, capture_output=True, text=True, check=True).stdout)


def mib(n: int) -> str:
    return f"{n / 2**20:,.0f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1000,2000,3000,4000,5000", help="JSON texts, in words (tokens)")
    parser.add_argument("--csv-sizes", default="1000,2000", help="CSV texts (a CSV is about 4x the JSON)")
    parser.add_argument("--no-whole", action="store_true", help="leave out the whole-text writer")
    args = parser.parse_args()
    cases = [("json", int(n)) for n in args.sizes.split(",") if n] + [("csv", int(n)) for n in args.csv_sizes.split(",") if n]
    writers = ["trace only", "streamed"] + ([] if args.no_whole else ["whole text"])

    print(f"json_memory, {datetime.date.today().isoformat()}, {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} cores, Python {platform.python_version()}; load average {os.getloadavg()[0]:.2f}")
    print("| format | T | written (MiB) | trace only (MiB) | streamed (MiB) | over trace (MiB) | over trace / written "
          "| the export's own (MiB) | budgeted (MiB) | whole text (MiB) |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    with tempfile.TemporaryDirectory(prefix="attn-json-memory-") as tmp:
        for fmt, n in cases:
            text = text_of(n)
            text_file = Path(tmp) / f"words-{n}.txt"
            text_file.write_text(text, encoding="utf-8")
            peaks, size, own = {}, 0, 0
            for writer in writers:
                peaks[writer], written, measured = peak_rss(writer, fmt, text_file, Path(tmp) / f"out.{fmt}")
                size, own = max(size, written), measured if measured is not None else own
            over = peaks["streamed"] - peaks["trace only"]
            whole = mib(peaks["whole text"]) if "whole text" in peaks else "-"
            print(f"| {fmt} | {n:,} | {mib(size)} | {mib(peaks['trace only'])} | {mib(peaks['streamed'])} | {mib(over)} "
                  f"| {over / size:.1%} | {mib(own)} | {mib(budgeted(text_file))} | {whole} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
