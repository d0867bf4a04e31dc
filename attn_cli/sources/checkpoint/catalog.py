"""What checkpoints this machine has offline: the Hugging Face cache snapshots with
config.json and safetensors weights, their family and size, and whether attn-cli
computes them. Reads config.json, the shard index and safetensors headers only;
no torch.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from attn_cli.sources.checkpoint.files import CONFIG, DTYPE_BYTES, SAFETENSORS, SAFETENSORS_INDEX, cache_roots, find_snapshot, read_header
from attn_cli.sources.checkpoint.registry import family_name
from attn_cli.runtime.errors import ModelUnavailable


@dataclasses.dataclass(frozen=True)
class CachedModel:
    name: str  # ORG/NAME, what --model takes
    path: Path  # the snapshot folder
    cache: str  # which cache it is in (a label from cache_roots)
    model_type: str | None
    family: str | None  # the adapter that computes it (a multimodal model's: its language model's)
    architecture: str | None
    parameters: int | None  # from the safetensors headers; None when a shard is absent or unreadable
    bytes: int | None  # the weights' size on disk (the index's total_size, or the headers')
    supported: bool
    why: str  # "" when supported and complete; else what is missing or not computed

    def as_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["path"] = str(self.path)
        return data


def cached_models(environ: Mapping[str, str]) -> tuple[list[CachedModel], list[str]]:
    """(every cached repository with a config.json in its refs/main snapshot, the caches searched)."""
    found: list[CachedModel] = []
    searched: list[str] = []
    for label, root in cache_roots(environ):
        searched.append(label)
        if not root.is_dir():
            continue
        for repo in sorted(root.glob("models--*")):
            snapshot, _ = find_snapshot(repo, None)
            if snapshot is not None:
                found.append(describe(repo.name[len("models--") :].replace("--", "/"), snapshot, label))
    return found, searched


def describe(name: str, folder: Path, cache: str = "") -> CachedModel:
    """One snapshot or folder: its config, size and whether attn-cli computes it."""
    try:
        config = json.loads((folder / CONFIG).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        config = {}
    config = config if isinstance(config, dict) else {}
    model_type = config.get("model_type")
    architectures = config.get("architectures") or [None]
    parameters, size, why = _size(folder)
    family = family_name(config)
    if family is None:
        why = f"model_type {model_type!r} is not computed by attn-cli"
    return CachedModel(
        name=name,
        path=folder,
        cache=cache,
        model_type=model_type,
        family=family,
        architecture=architectures[0],
        parameters=parameters,
        bytes=size,
        supported=family is not None and not why,
        why=why,
    )


def _size(folder: Path) -> tuple[int | None, int | None, str]:
    """(parameters, bytes, what is missing) from the headers, or the index when shards are absent."""
    index = folder / SAFETENSORS_INDEX
    if index.is_file():
        try:
            data = json.loads(index.read_text(encoding="utf-8"))
            files = sorted(set(data["weight_map"].values()))
            total = (data.get("metadata") or {}).get("total_size")
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, AttributeError):
            return None, None, f"{SAFETENSORS_INDEX} is damaged"
        missing = [f for f in files if not (folder / f).is_file()]
        if missing:
            return None, int(total) if total else None, f"{len(missing)} of {len(files)} shards missing"
        paths = [folder / f for f in files]
    elif (folder / SAFETENSORS).is_file():
        paths, total = [folder / SAFETENSORS], None
    else:
        return None, None, "no safetensors weights (a pickle is never opened)"
    parameters = size = 0
    try:
        for path in paths:
            for entry in read_header(path).values():
                parameters += entry.numel
                size += entry.numel * DTYPE_BYTES.get(entry.dtype, 1)
    except ModelUnavailable:
        return None, int(total) if total else None, "a safetensors file is damaged"
    return parameters, int(total) if total else size, ""
