"""tools/ab and tools/gate --bitwise-ab: a kernel at a revision against the working tree's, bit by bit.
Controls on a committed copy of this tree: a pure rename is bitwise identical; a reordered reduction
(gdn_decode's k.h summed as two halves, which a split-K kernel would do) is not, and says by how many ULP."""
from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
import torch

from suites.processes import finished, started
from suites.tools.git_copies import committed_copy
from tools import ab
from tools.cli import UsageError
from tools.engine.ab import output_differences, ulp_distance

pytestmark = pytest.mark.cpu
CELL = ["--op", "gdn_decode", "--cell", "fp32_state", "--max-examples", "0"]


def started_tool(root, name: str, *words: str) -> subprocess.Popen:
    return started([sys.executable, f"tools/{name}", *words], root)


def tool(root, name: str, *words: str) -> subprocess.CompletedProcess:
    return finished(started_tool(root, name, *words))


def rewrite(path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"the control no longer applies to {path}: {old!r}"
    path.write_text(text.replace(old, new))


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    return committed_copy(tmp_path_factory.mktemp("ab"))


def test_a_pure_rename_is_bitwise_identical(repo):
    for name in ("gdn_decode.py", "gdn_verify.py"):
        for old, new in (("_gdn_tokens", "_gated_delta_rule_tokens"), ("launch_tokens", "launch_token_steps")):
            rewrite(repo / "ops" / "ssm" / name, old, new)
    try:
        run = tool(repo, "ab", *CELL, "--baseline", "HEAD")
        assert run.returncode == 0, run.stdout + run.stderr
        assert "gdn_decode/fp32_state: bitwise identical on" in run.stdout and "ab: BITWISE IDENTICAL" in run.stdout
    finally:
        subprocess.run(["git", "checkout", "-q", "--", "ops"], cwd=repo, check=True)


def test_a_reordered_reduction_is_not_bitwise_and_the_gate_says_so(repo):
    rewrite(repo / "ops" / "ssm" / "gdn_decode.py", "        u = beta * (v - tl.sum(h * k[:, None], axis=0))\n",
            "        halves = tl.reshape(h * k[:, None], (2, BLOCK_K // 2, BLOCK_V))\n"
            "        u = beta * (v - tl.sum(tl.sum(halves, axis=1), axis=0))\n")
    try:
        # both read the same edited tree: the gate runs while ab waits on its hosts
        processes = [started_tool(repo, "ab", *CELL, "--baseline", "HEAD", "--json"),
                     started_tool(repo, "gate", "--dry-run", "--bitwise-ab", "--ab-max-examples", "0", "--json")]
        run, gate = (finished(process) for process in processes)
        assert run.returncode == 1, run.stdout + run.stderr
        found = json.loads(run.stdout)
        (cell,) = found["kernels"]["gdn_decode"]["cells"]
        assert found["verdict"] == "differs" and cell["differing_inputs"] >= 1 and cell["max_ulp"] >= 1
        assert any("ULP; first at (" in text for text in cell["first"]["differences"])

        verdict = json.loads(gate.stdout)
        assert gate.returncode == 1 and any(
            f.startswith("gdn_decode: not bitwise identical to the base, for a change declared performance-only: "
                         "fp32_state (") for f in verdict["findings"]), verdict["findings"]
    finally:
        subprocess.run(["git", "checkout", "-q", "--", "ops"], cwd=repo, check=True)


def test_ulp_distance_counts_representable_values_between_two_floats():
    a = torch.tensor([1.0, -0.0, -1.0, 1.0, float("nan")], dtype=torch.bfloat16)
    b = torch.tensor([1.0078125, 0.0, -1.0078125, -1.0, 1.0], dtype=torch.bfloat16)
    assert ulp_distance(a, b).tolist() == [1, 1, 1, 2 * 16256 + 1, float("inf")]
    same = torch.tensor([0.5, -2.0])
    assert output_differences((same,), (same.clone(),)) == []   # negative control: equal bits, no difference
    (found,) = output_differences((same,), (torch.tensor([0.5, -2.0000002]),))
    assert (found.elements, found.max_ulp, found.first) == (1, 1.0, (1,))


@pytest.mark.parametrize("words, says", [
    (("--op", "gdn_decode", "--baseline", "no_such_rev"), "--baseline: unknown revision 'no_such_rev'"),
    (("--op", "no_such_op", "--baseline", "HEAD"), "--op: no op named no_such_op"),
    (("--op", "gdn_decode", "--baseline", "HEAD", "--cell", "nope"), "--cell: gdn_decode has no cell nope"),
    (("--op", "gdn_decode", "--baseline", "HEAD", "--max-examples", "-1"), "--max-examples: -1 is negative"),
    (("--op", "gdn_decode"), "the following arguments are required: --baseline"),
])
def test_usage_errors_name_the_flag(words, says):
    with pytest.raises(UsageError, match=re.escape(says)):
        ab.main(list(words))
