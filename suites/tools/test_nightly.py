"""tools/nightly: fresh seeds, runs repeated, failing examples replayed; a deliberately flaky
implementation must come out FLAKY, a consistently wrong one FAILING, a correct one clean."""
from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from ops.catalog import kernels
from tools import nightly
from tools.cli import UsageError
from tools.engine import commands

pytestmark = pytest.mark.cpu

CELL = ["--op", "greedy_argmax", "--cell", "decode_small_batch", "--max-examples", "0", "--no-shrink"]


def run(capsys, *words) -> tuple[int, dict]:
    code = nightly.main([*CELL, *words, "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_a_flaky_implementation_is_reported_flaky_with_its_reproduction(capsys, tmp_path):
    # suites/tools/flaky_impls.py fails every tenth call it gets: an example (about seven calls) fails
    # on some replays and passes on others, deterministically in one process
    junit = tmp_path / "nightly.xml"
    code, found = run(capsys, "--impl", "suites.tools.flaky_impls", "--repeat", "4", "--replays", "16",
                      "--junit", str(junit))
    assert code == 1 and found["verdict"] == "fail"
    assert len({r["seed"] for r in found["runs"]}) == 4  # a fresh seed per run
    flaky = [f for f in found["findings"] if f["verdict"] == "flaky"]
    assert flaky, found["findings"]
    assert all(f["failed"] >= 1 and f["passed"] >= 1 for f in flaky)
    # the environment first (the interpreter on the CPU, the --impl module's root), then the command
    tool = commands.shell_line(*commands.tool_command("certify-cells", "tools.certify_cells"))
    assert all(f["reproduce"].startswith(f"TRITON_INTERPRET=1 {tool} --op greedy_argmax --cell decode_small_batch "
                                         f"--device cpu --impl suites.tools.flaky_impls --replay '{{")
               for f in flaky)
    failure = ET.parse(junit).getroot().find("testsuite/testcase/failure")
    assert failure is not None and "--replay" in failure.text


def test_a_consistently_wrong_implementation_is_failing_not_flaky(capsys):
    code, found = run(capsys, "--impl", "suites.sampling.greedy_argmax_impls:last_index_on_ties", "--repeat", "2",
                      "--replays", "2", "--seed", "7")
    assert code == 1 and [r["seed"] for r in found["runs"]] == [7, 8]
    assert [(f["verdict"], f["failed"], f["passed"], f["oracle"]) for f in found["findings"]] == \
        [("failing", 4, 0, "parity")]  # the same corner fails in both runs and both replays


def test_a_correct_implementation_is_clean(capsys):
    code, found = run(capsys, "--impl", "suites.sampling.greedy_argmax_impls:correct_via_max", "--repeat", "2")
    assert code == 0 and found["verdict"] == "pass" and found["findings"] == []
    assert [r["results"][0]["status"] for r in found["runs"]] == ["certified", "certified"]


def test_each_kernel_of_an_op_runs_named_by_its_backend_and_reproduces_with_it(capsys, monkeypatch):
    from suites.norm.rms_norm_gated_impls import eps_outside_sqrt

    cute, triton = kernels("rms_norm_gated")
    monkeypatch.setattr(triton, "kernel", eps_outside_sqrt)   # a wrong triton kernel; the cute one untouched
    code = nightly.main(["--op", "rms_norm_gated", "--cell", "per_head_decode", "--max-examples", "0", "--no-shrink",
                         "--repeat", "1", "--replays", "1", "--seed", "3", "--json"])
    out, err = capsys.readouterr()
    found = json.loads(out)
    assert "rms_norm_gated [cute]: does not claim cpu-interp; skipped" in err   # shown, not dropped
    assert code == 1 and [r["op"] for r in found["runs"][0]["results"]] == ["rms_norm_gated [triton]"]
    assert {f["op"] for f in found["findings"]} == {"rms_norm_gated [triton]"}
    tool = commands.shell_line(*commands.tool_command("certify-cells", "tools.certify_cells"))
    assert all(f["reproduce"].startswith(f"TRITON_INTERPRET=1 {tool} --op rms_norm_gated --cell "
                                         "per_head_decode --device cpu --backend triton") for f in found["findings"])


@pytest.mark.parametrize("words, reason", [
    (("--repeat", "0"), "--repeat: 0 is below 1"),
    (("--cell", "no_such_cell"), "--cell: greedy_argmax has no cell no_such_cell"),
])
def test_usage_errors(words, reason):
    with pytest.raises(UsageError, match=reason):
        nightly.main(["--op", "greedy_argmax", *words])
