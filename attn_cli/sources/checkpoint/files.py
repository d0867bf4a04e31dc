"""Finding a checkpoint's folder and reading its files, without running anything in them.

A ``--model`` is a folder (config.json, ``*.safetensors``, tokenizer files) or a
Hugging Face repository id (``ORG/NAME``) looked up offline in the Hugging Face
cache, in the order its own tools use. Weights are read only from safetensors
files, memory-mapped, one tensor at a time: a pickle (``pytorch_model.bin``) can
run code when loaded, so it is refused, never opened.

Nothing here computes; the families (``attn_cli.sources.checkpoint.families``) get a
``WeightReader`` and ask it for tensors by name.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import struct
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attn_cli.runtime.errors import ModelUnavailable, UsageError

if TYPE_CHECKING:
    import torch

CONFIG = "config.json"
SAFETENSORS = "model.safetensors"
SAFETENSORS_INDEX = "model.safetensors.index.json"
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")

# Bytes per element of the safetensors dtypes a float checkpoint may use.
DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2}
_MAX_HEADER = 100_000_000  # safetensors' own limit on the JSON header
_REPO_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?")
_COMMIT = re.compile(r"[0-9a-f]{40}")


# -- where the files are ------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Located:
    folder: Path
    revision: str | None  # the snapshot's commit hash when found in the cache
    name: str  # a short name for the tokenizer label: the repo id, or the folder's name


def locate(spec: str, revision: str | None = None, environ: Mapping[str, str] | None = None) -> Located:
    """The folder ``spec`` names: an existing folder, else a snapshot in the Hugging
    Face cache. Raises ModelUnavailable naming every place tried."""
    env = os.environ if environ is None else environ
    given = Path(spec).expanduser()
    if given.is_dir():
        if revision is not None:
            raise UsageError(
                f"--revision {revision} picks a snapshot in the Hugging Face cache, but {spec} is a folder: "
                f"drop --revision, or give the repository id (ORG/NAME)"
            )
        return Located(given, None, given.resolve().name)
    if given.exists():
        raise ModelUnavailable(f"{spec} is a file; give the folder that holds config.json and the weights")
    if not _REPO_ID.fullmatch(spec) or spec.startswith("."):
        raise ModelUnavailable(f"no folder {spec}; give a folder with config.json and *.safetensors, or ORG/NAME")
    tried = [f"the folder {given} (none)"]
    repo_folder = "models--" + spec.replace("/", "--")
    for label, root in cache_roots(env):
        snapshot, why = find_snapshot(root / repo_folder, revision)
        if snapshot is not None:
            return Located(snapshot, snapshot.name, spec)
        tried.append(f"{label}/{repo_folder} ({why})")
    raise ModelUnavailable(
        f"model {spec}{'' if revision is None else f' at revision {revision}'} is not on this machine; tried "
        + "; ".join(tried)
        + f". attn-cli never downloads: on a machine with network run `huggingface-cli download {spec}` "
        f"and copy its cache folder {repo_folder} into one of those places, or pass the model's folder"
    )


def cache_roots(env: Mapping[str, str]) -> list[tuple[str, Path]]:
    """The Hugging Face hub caches to search, as (label for messages, folder), in the
    order huggingface_hub reads its variables; each folder once."""
    home = Path(env.get("HOME") or Path.home())
    candidates = [
        ("$HF_HUB_CACHE", env.get("HF_HUB_CACHE"), ""),
        ("$HUGGINGFACE_HUB_CACHE", env.get("HUGGINGFACE_HUB_CACHE"), ""),
        ("$HF_HOME/hub", env.get("HF_HOME"), "hub"),
        ("$XDG_CACHE_HOME/huggingface/hub", env.get("XDG_CACHE_HOME"), "huggingface/hub"),
        ("~/.cache/huggingface/hub", str(home / ".cache"), "huggingface/hub"),
    ]
    roots: list[tuple[str, Path]] = []
    seen: set[Path] = set()
    for name, value, tail in candidates:
        if not value:
            continue
        folder = Path(value).expanduser() / tail
        if folder not in seen:
            seen.add(folder)
            roots.append((f"{name} = {folder}", folder))
    return roots


def find_snapshot(repo: Path, revision: str | None) -> tuple[Path | None, str]:
    """(the snapshot folder, "") or (None, why not)."""
    if not repo.is_dir():
        return None, "none"
    ref = repo / "refs" / (revision or "main")
    if ref.is_file():
        commit = ref.read_text(encoding="utf-8").strip()
    elif revision is not None and _COMMIT.fullmatch(revision):
        commit = revision
    elif revision is None:
        return None, "no refs/main"
    else:
        return None, f"no refs/{revision}, and {revision} is not a full 40-character commit hash"
    snapshot = repo / "snapshots" / commit
    if not snapshot.is_dir():
        return None, f"no snapshots/{commit}"
    if not (snapshot / CONFIG).is_file():
        return None, f"snapshots/{commit} has no {CONFIG}"
    return snapshot, ""


def read_config(folder: Path) -> dict[str, Any]:
    path = folder / CONFIG
    if not path.is_file():
        raise ModelUnavailable(f"{folder} has no {CONFIG}: give a Hugging Face model folder (config.json, *.safetensors)")
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ModelUnavailable(f"{path} is not readable JSON ({err}); fetch the model's files again") from None
    if not isinstance(config, dict):
        raise ModelUnavailable(f"{path} is not a JSON object; fetch the model's files again")
    return config


@dataclasses.dataclass(frozen=True)
class Found:
    """A checkpoint located and its config.json read, once, for every step that needs them."""

    located: Located
    config: dict[str, Any]


def find(spec: str, revision: str | None = None) -> Found:
    located = locate(spec, revision)
    return Found(located, read_config(located.folder))


# -- safetensors ----------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class TensorEntry:
    """One tensor in a safetensors header."""

    file: Path
    dtype: str
    shape: tuple[int, ...]

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


def weight_files(folder: Path) -> tuple[dict[str, str] | None, list[Path]]:
    """(the index's tensor -> file map or None, the safetensors files). Refuses a folder
    with pickled weights only."""
    index = folder / SAFETENSORS_INDEX
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as err:
            raise ModelUnavailable(f"{index} is not a safetensors index ({err}); fetch it again") from None
        if not isinstance(weight_map, dict):
            raise ModelUnavailable(f"{index}: weight_map is not an object; fetch it again")
        return weight_map, sorted({folder / f for f in weight_map.values()})
    if (folder / SAFETENSORS).is_file():
        return None, [folder / SAFETENSORS]
    found = sorted(folder.glob("*.safetensors"))
    if len(found) == 1:
        return None, found
    pickles = sorted(p.name for p in folder.iterdir() if p.suffix in PICKLE_SUFFIXES)
    if pickles:
        raise ModelUnavailable(
            f"{folder} has weights only as {', '.join(pickles)}: a pickle, which can run code when it is loaded, "
            f"so attn-cli does not open it. On a machine where you trust the file, convert it once with "
            f"python -c \"from transformers import AutoModel; AutoModel.from_pretrained('{folder}')"
            f".save_pretrained('{folder}')\" (it writes model.safetensors)"
        )
    if found:
        raise ModelUnavailable(
            f"{folder} has {len(found)} *.safetensors files but no {SAFETENSORS_INDEX} saying which tensor is where; "
            f"fetch the index too"
        )
    raise ModelUnavailable(f"{folder} has no weights ({SAFETENSORS} or {SAFETENSORS_INDEX}); fetch them too")


def read_header(path: Path) -> dict[str, TensorEntry]:
    """The tensors a safetensors file holds, from its JSON header alone (no data read).
    Raises ModelUnavailable naming the file when the header is damaged or the data
    it describes is cut short."""

    def broken(why: str) -> ModelUnavailable:
        return ModelUnavailable(f"{path} is not a readable safetensors file ({why}); the download may be cut short: fetch it again")

    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise broken("shorter than its 8-byte header length")
            (length,) = struct.unpack("<Q", head)
            if length > min(_MAX_HEADER, size - 8):
                raise broken(f"its header claims {length} bytes")
            header = json.loads(f.read(length))
    except FileNotFoundError:
        raise ModelUnavailable(f"{path} is missing; fetch the model's files again") from None
    except OSError as err:
        raise ModelUnavailable(f"{path} cannot be read: {err.strerror or err}") from None
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise broken("its header is not JSON") from None
    if not isinstance(header, dict):
        raise broken("its header is not a JSON object")
    data_size = size - 8 - length
    entries = {}
    for name, spec in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype, shape, (start, end) = spec["dtype"], tuple(int(n) for n in spec["shape"]), spec["data_offsets"]
        except (KeyError, TypeError, ValueError):
            raise broken(f"tensor {name} is described wrongly") from None
        if not 0 <= start <= end <= data_size:
            raise broken(f"tensor {name} lies past the end of the file")
        entries[name] = TensorEntry(path, dtype, shape)
    return entries


ROOT = "/"  # a tensor name that starts here is the file's own, not under the model's prefix


class WeightReader:
    """Named float32 tensors from a checkpoint's safetensors files, read one at a time.

    ``prefix`` is what the save put before the model's own names ("transformer."
    for GPT2LMHeadModel, "bert." for BertFor*, "" for GPT2Model/BertModel); a name
    starting with ``ROOT`` ("/lm_head.weight") is the file's own, outside the prefix
    (the heads a *ForCausalLM or *ForMaskedLM keeps beside its model). A shard's
    header is parsed, and the shard opened, only when a tensor in it is wanted.
    """

    def __init__(self, folder: Path, *, dtype: torch.dtype | None = None, device: torch.device | str = "cpu") -> None:
        self.folder = folder
        self.dtype = dtype  # what every tensor is read as; None: float32
        self.device = device
        weight_map, files = weight_files(folder)
        self._weight_map = weight_map  # tensor -> file name, for sharded checkpoints
        self._single = files[0] if weight_map is None else None
        self._headers: dict[Path, dict[str, TensorEntry]] = {}
        self._handles: dict[Path, Any] = {}
        self._mapped: dict[str, torch.Tensor] = {}  # full name -> a tensor read without conversion: a view of the file
        self.prefix = ""

    def names(self) -> Iterable[str]:
        if self._weight_map is not None:
            return self._weight_map.keys()
        assert self._single is not None
        return self._header(self._single).keys()

    def find_prefix(self, anchor: str, family: str) -> str:
        """Set and return the prefix: what comes before ``anchor`` (a name every
        checkpoint of the family has), the shortest when several do."""
        found = sorted((n[: -len(anchor)] for n in self.names() if n.endswith(anchor)), key=len)
        if not found:
            raise ModelUnavailable(
                f"{self.folder}: no tensor named like {anchor!r}, so these weights are not a {family} model "
                f"as config.json says; fetch the model's files again"
            )
        self.prefix = found[0]
        return self.prefix

    def full_name(self, name: str) -> str:
        """The name in the file: the prefix and ``name``, or ``name`` itself after ``ROOT``."""
        return name[len(ROOT) :] if name.startswith(ROOT) else self.prefix + name

    def has(self, name: str) -> bool:
        """Whether the checkpoint names a tensor ``name`` (an optional one: a head, a tied copy)."""
        full = self.full_name(name)
        if self._weight_map is not None:
            return full in self._weight_map
        assert self._single is not None
        return full in self._header(self._single)

    def entry(self, name: str) -> TensorEntry:
        full = self.full_name(name)
        if self._weight_map is not None:
            if full not in self._weight_map:
                raise self._missing(name)
            file = self.folder / self._weight_map[full]
        else:
            assert self._single is not None
            file = self._single
        header = self._header(file)
        if full not in header:
            raise self._missing(name)
        entry = header[full]
        if entry.dtype not in DTYPE_BYTES:
            raise ModelUnavailable(
                f"{file}: tensor {full} is {entry.dtype}; attn-cli reads float weights only (F32, F16, BF16), "
                f"not quantized ones"
            )
        return entry

    def present(self, name: str) -> bool:
        """Whether the file that holds ``name`` is on disk (its header can be read)."""
        if self._weight_map is None:
            return True
        file = self._weight_map.get(self.full_name(name))
        return file is not None and (self.folder / file).is_file()

    def read(self, name: str, dtype: torch.dtype | None = None) -> torch.Tensor:
        """The whole tensor ``name`` (without the prefix), as the run's ``dtype`` (float32)
        on ``device``; as ``dtype`` when given (a tensor a family keeps wider than the run).

        A tensor stored in the run's dtype and read to the CPU is a view of the
        memory-mapped file (safetensors maps it): it is kept, so a second trace
        does not look it up again, at no cost in memory beyond the pages already
        read. A converted one is a copy, read again each time it is asked for.
        """
        import torch

        full = self.full_name(name)
        if dtype is None and full in self._mapped and not (torch.is_grad_enabled() and self._mapped[full].is_inference()):
            return self._mapped[full]  # (an autograd run cannot save one made under inference_mode: read again, kept)
        entry = self.entry(name)
        stored = self._call(entry.file, lambda f: f.get_tensor(full))  # the stored shape
        tensor = self._cast(stored, dtype)
        if tensor is stored and dtype is None:
            self._mapped[full] = tensor
        return tensor

    def read_rows(self, name: str, start: int, stop: int) -> torch.Tensor:
        """Rows ``start:stop`` of a 2-D tensor, as ``dtype`` on ``device``, reading only those rows."""
        entry = self.entry(name)
        return self._cast(self._call(entry.file, lambda f: f.get_slice(self.full_name(name))[start:stop]))  # (stop - start, D)

    def read_at(self, name: str, rows: torch.Tensor) -> torch.Tensor:
        """Rows ``rows`` (a (U,) long tensor) of a 2-D tensor, as ``dtype`` on ``device``.
        safetensors maps the file, so only those rows' pages are read, and only they
        are converted: one call, where a ``read_rows`` per row costs ~50 us each."""
        entry = self.entry(name)
        return self._cast(self._call(entry.file, lambda f: f.get_tensor(self.full_name(name))[rows]))  # (U, D)

    def _cast(self, tensor: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
        import torch

        return tensor.to(device=self.device, dtype=dtype or self.dtype or torch.float32)

    def _call(self, file: Path, read: Any) -> torch.Tensor:
        from safetensors import SafetensorError, safe_open

        try:
            if file not in self._handles:
                self._handles[file] = safe_open(str(file), framework="pt")
            return read(self._handles[file])
        except SafetensorError as err:
            raise ModelUnavailable(f"{file} is not a readable safetensors file ({err}); fetch it again") from None

    def _header(self, file: Path) -> dict[str, TensorEntry]:
        if file not in self._headers:
            self._headers[file] = read_header(file)
        return self._headers[file]

    def _missing(self, name: str) -> ModelUnavailable:
        return ModelUnavailable(
            f"{self.folder}: tensor {self.full_name(name)} is missing from the weights; the checkpoint is incomplete "
            f"or another architecture than config.json says: fetch its files again"
        )
