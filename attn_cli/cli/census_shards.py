"""A census's shards on disk: the corpus cut into shards of SHARD_TEXTS texts, each shard's tally
written atomically to its own file as soon as it is done (``formats.census.shard_dict``), a
manifest that says what made them, ``--resume`` (only the shards missing), ``census merge DIR``
and ``--workers N`` (local processes, each opening the model once). The shards are the same on
every engine and the merge folds them in shard order, so the numbers do not depend on how many
workers ran them or whether a run was interrupted and resumed.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attn_cli.runtime.errors import InputError, UsageError
from attn_cli.sources.census import GROUP_TEXTS

if TYPE_CHECKING:
    from attn_cli.sources.census import Census, Windows
    from attn_cli.sources.spec import SourceSpec
    from attn_cli.text.corpus import Corpus

SHARD_TEXTS = GROUP_TEXTS  # texts a shard holds by default (--shard-size): one group of texts batched together (sources.census)
WHAT = {"options": "set of options", "texts": "corpus", "where": "corpus", "shard_texts": "shard size"}  # a manifest's keys, in words
MANIFEST = "manifest.json"
MANIFEST_SCHEMA = "attn-cli census shards 1"


@dataclasses.dataclass(frozen=True)
class ShardFolder:
    """Where a census's shards are, and which texts each holds."""

    folder: Path
    n_texts: int
    shard_texts: int = SHARD_TEXTS

    @property
    def shards(self) -> list[list[int]]:
        return [list(range(start, min(start + self.shard_texts, self.n_texts))) for start in range(0, self.n_texts, self.shard_texts)]

    def path(self, k: int) -> Path:
        return self.folder / f"shard-{k:05d}.json"

    def missing(self) -> list[int]:
        return [k for k in range(len(self.shards)) if not self.path(k).is_file()]


def shard_folder_for(output: Path | None, shards: Path | None) -> tuple[Path, bool]:
    """(the shards' folder, whether it is kept after a run that went well): --shards DIR, else
    beside the output (NAME.shards/), else a temporary folder kept only if the run is interrupted."""
    if shards is not None:
        return shards, True
    if output is not None:
        return output.with_name(output.stem + ".shards"), True
    return Path(tempfile.mkdtemp(prefix="attn-cli-census-")), False


def manifest_of(corpus: Corpus, options: dict[str, Any], windows: Windows | None, shard_texts: int = SHARD_TEXTS) -> dict[str, Any]:
    """What made the shards: the corpus as read and the options that shape the numbers (each
    shard names its model)."""
    return {
        "schema": MANIFEST_SCHEMA, "options": options, "texts": len(corpus.entries), "shard_texts": shard_texts,
        "corpus": corpus.source, "where": [e.where for e in corpus.entries], "skipped": [s.as_dict() for s in corpus.skipped],
        "empty": corpus.empty, "window": None if windows is None else {"size": windows.size, "stride": windows.stride},
    }  # fmt: skip


def prepare(folder: Path, manifest: dict[str, Any], *, resume: bool, fresh: bool = False) -> ShardFolder:
    """The folder ready for this run's shards: a new one, or one to resume, whose manifest must say
    the same options and corpus. A folder of shards there already is refused unless ``resume``, or
    emptied where ``fresh`` (the folder beside -o, which a new run of the command starts again)."""
    from attn_cli.runtime.files import write_atomic

    there = folder / MANIFEST
    if there.is_file() and fresh and not resume:
        shutil.rmtree(folder)
    elif there.is_file():
        found = _read_json(there)
        if not resume:
            raise UsageError(f"{folder} holds a census's shards already: add --resume {folder} to finish it, or give another --shards")
        differ = sorted({WHAT[k] for k in WHAT if found.get(k) != manifest.get(k)})
        if differ:
            raise UsageError(f"--resume {folder}: its shards were made with another {' and another '.join(differ)}; run the command that made them")
    elif resume:
        raise UsageError(f"--resume {folder}: no census shards there ({MANIFEST} is missing)")
    folder.mkdir(parents=True, exist_ok=True)
    for leftover in folder.glob(".shard-*.part"):  # a shard an interrupted worker was writing
        leftover.unlink(missing_ok=True)
    if not there.is_file():
        write_atomic(there, json.dumps(manifest).encode("utf-8"))
    return ShardFolder(folder, manifest["texts"], manifest["shard_texts"])


def run_shards(
    spec: SourceSpec, source: Any, corpus: Corpus, shards: ShardFolder, *, windows: Windows | None, epsilon: float, workers: int,
    progress: Callable[[int, int], None], against: tuple[SourceSpec, Any] | None = None, ray: tuple[bool, str | None] = (False, None),
) -> None:  # fmt: skip
    """Every missing shard, each written when done: in this process, in ``workers`` processes, or
    with ``ray`` (on, address) as Ray tasks. ``against``: the other model's (spec, source) for --against."""
    from attn_cli.cli.census_workers import in_workers, one_shard, write_shard

    missing = shards.missing()
    other_spec, other = (None, None) if against is None else against
    if ray[0] and missing:
        from attn_cli.cli.census_ray import in_ray

        in_ray(spec, corpus, shards, missing, windows=windows, epsilon=epsilon, workers=workers or None, progress=progress,
               against=other_spec, address=ray[1])  # fmt: skip
        return
    if workers <= 1 or len(missing) <= 1:
        for k in missing:
            write_shard(shards, k, one_shard(source, corpus, shards.shards[k], windows, epsilon, progress, other))
        return
    in_workers(spec, corpus, shards, missing, windows=windows, epsilon=epsilon, workers=workers, progress=progress, against=other_spec)


def merged(folder: Path) -> Census:
    """The census a folder of shards holds, every shard folded in in shard order (``census merge``)."""
    from attn_cli.formats.census import tally_of
    from attn_cli.sources.census import Census, Windows
    from attn_cli.text.corpus import Corpus, Entry, Skipped

    manifest = _read_json(folder / MANIFEST) if (folder / MANIFEST).is_file() else None
    if manifest is None or manifest.get("schema") != MANIFEST_SCHEMA:
        raise InputError(f"{folder} holds no census shards ({MANIFEST} is missing or not a census's)")
    shards = ShardFolder(folder, manifest["texts"], manifest["shard_texts"])
    missing = shards.missing()
    if missing:
        raise UsageError(f"{folder}: {len(missing)} of {len(shards.shards)} shards are missing (the first: {shards.path(missing[0]).name}); "
                         f"finish them with the command that made them and --resume {folder}")  # fmt: skip
    tally, model, cut = None, None, 0
    for k in range(len(shards.shards)):
        shard = _read_json(shards.path(k))
        cut += shard.get("cut", 0)
        try:
            part = tally_of(shard)
        except (ValueError, KeyError) as err:
            raise InputError(f"{shards.path(k)} is not a census shard ({err}); remove it and --resume") from None
        tally = part if tally is None else tally.merge(part)
        model = model or SavedModel(shard.get("model"), shard.get("model_name"))
    corpus = Corpus(tuple(Entry("", w) for w in manifest["where"]), tuple(Skipped(**s) for s in manifest["skipped"]),
                    manifest["empty"], manifest["corpus"])  # fmt: skip
    window = manifest["window"]
    return Census(tally, corpus, model, None if window is None else Windows(**window), cut=cut, against=manifest["options"].get("against"))


class SavedModel:
    """A manifest's model: what the JSON writes of it, and its name."""

    def __init__(self, made: dict[str, Any] | None, name: str | None) -> None:
        self.made, self.name = made, name or "the model"

    def as_dict(self) -> dict[str, Any] | None:
        return self.made


def finish(folder: Path, keep: bool) -> None:
    """A run that went well: its temporary shards' folder removed (one it was asked for stays)."""
    if not keep:
        shutil.rmtree(folder, ignore_errors=True)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise InputError(f"cannot read {path}: {err}") from None
