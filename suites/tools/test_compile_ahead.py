"""tools/compile-ahead (issue 26): the keys it records are the keys Triton's own launch path compiles, so a
cache it fills is a cache the run finds warm; bad files and flags exit 2 in one line."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from suites.claims import REPO
from tools import compile_ahead
from tools.cli import UsageError

pytestmark = pytest.mark.cpu
OP, DRAWS = "strict_accept", 2


def _tool(*words: str, cache=None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    if cache is not None:
        env["TRITON_CACHE_DIR"] = str(cache)
    return subprocess.run([sys.executable, "tools/compile-ahead", *words], cwd=REPO, capture_output=True, text=True,
                          timeout=300, env=env)


def launch_path(cache: str) -> None:
    """In a process of its own: the cells' battery calls through Triton's real ``JITFunction.run`` (compiling
    what its cache lacks, for sm_90a through the stand-in driver), as a run on a GPU would make them."""
    os.environ["TRITON_CACHE_DIR"], os.environ["TRITON_INTERPRET"] = cache, "0"
    import torch
    import triton.runtime.jit as jit
    from triton.runtime import driver

    from ops import catalog
    from oracles.battery import Implementation
    from oracles.draws import cell_draws
    from tools.compile_ahead import battery_calls
    from tools.compile_receipts import TargetDriver, planning_for_h200, triton_entries

    driver.set_active(TargetDriver(90))
    real_run = jit.JITFunction.run
    jit.JITFunction.run = lambda self, *args, grid, warmup, **kwargs: real_run(self, *args, grid=grid, warmup=True,
                                                                               **kwargs)
    (entry,) = triton_entries([OP])
    impl, gpu = Implementation.of_kernels(entry, catalog.kernels), torch.device("cuda")
    with planning_for_h200():   # as the record planned them
        for cell in entry.cells:
            for recipe in entry.strategy_module.corners(cell, gpu) + cell_draws(entry.strategy_module, cell, gpu,
                                                                                DRAWS, 0):
                battery_calls(entry, impl, entry.strategy_module.build(recipe, torch.device("cpu")))


def _launch_path_in_a_process(cache) -> None:
    subprocess.run([sys.executable, "-c", f"from suites.tools.test_compile_ahead import launch_path; "
                                          f"launch_path({str(cache)!r})"],
                   cwd=REPO, check=True, timeout=300, env={**os.environ, "PYTHONPATH": str(REPO)})


def _recorded_elsewhere(records) -> None:
    """The records as another machine makes them: its Triton's libdevice at a path this one lacks (the H100 of
    2026-12-05d compiled none of the records made here until the path was left to its own Triton)."""
    lines = records.read_text().splitlines()
    moved = []
    for line in lines[1:]:
        record = json.loads(line)
        data = json.loads(record["data"])
        data["options"]["extern_libs"] = [[name, "/elsewhere/lib/" + os.path.basename(path)]
                                          for name, path in data["options"]["extern_libs"]]
        moved.append(json.dumps({**record, "data": json.dumps(data)}))
    records.write_text("\n".join(lines[:1] + moved) + "\n")


def test_a_filled_cache_is_the_one_the_launch_path_finds(tmp_path):
    """Record (the records then moved to another machine's libdevice path), compile into a cache, then make
    the run's launches for real: nothing new is compiled.  Negative control: the same launches on an empty
    cache compile as many keys as were recorded."""
    records, warm, cold = tmp_path / "keys.jsonl", tmp_path / "warm", tmp_path / "cold"
    recorded = _tool("record", "--op", OP, "--max-examples", str(DRAWS), "--out", str(records))
    assert recorded.returncode == 0, recorded.stderr
    keys = json.loads(records.read_text().splitlines()[0])["keys"]
    assert keys > 3, recorded.stdout
    _recorded_elsewhere(records)
    compiled = _tool("compile", str(records), "-j", "2", cache=warm)
    assert compiled.returncode == 0 and f"{keys} of {keys} keys" in compiled.stdout, compiled.stderr
    filled = sorted(os.listdir(warm))
    assert len(filled) == keys
    _launch_path_in_a_process(warm)
    assert sorted(os.listdir(warm)) == filled   # every launch found its kernel: no key was missing
    _launch_path_in_a_process(cold)
    assert sorted(os.listdir(cold)) == filled   # the same keys, compiled by the launch path itself


def test_a_record_of_a_kernel_that_is_gone_is_named(tmp_path):
    import triton

    records = tmp_path / "keys.jsonl"
    records.write_text(json.dumps({"format": 1, "target": "sm_90a", "triton": triton.__version__, "keys": 1}) + "\n"
                       + json.dumps({"kernel": "ops.speculative.strict_accept:_no_such_kernel", "data": "{}"}) + "\n")
    ran = _tool("compile", str(records), "-j", "1", cache=tmp_path / "cache")
    assert ran.returncode == 1 and "did not compile: ops.speculative.strict_accept:_no_such_kernel" in ran.stderr


@pytest.mark.parametrize("content, says", [
    ("", "not a compile-ahead header"),
    ("not json\n", "not a records file"),
    ('{"format": 1, "target": "sm_90a", "triton": "3.6.0", "keys": 2}\n{"kernel": "a:b", "data": "{}"}\n',
     "the header counts 2 keys, the file holds 1"),
    ('{"format": 1, "target": "sm_90a", "triton": "0.0.1", "keys": 0}\n', "recorded under Triton 0.0.1"),
    ('{"format": 1, "target": "sm_42", "triton": "3.6.0", "keys": 0}\n', "not a compile-ahead header"),
])
def test_a_bad_records_file_is_a_usage_error(tmp_path, content, says):
    path = tmp_path / "keys.jsonl"
    path.write_text(content)
    with pytest.raises(UsageError, match=re.escape(says)):
        compile_ahead.main(["compile", str(path)])


@pytest.mark.parametrize("words, says", [
    (("record", "--op", "no_such_op", "--out", "x.jsonl"), "--op: no Triton kernel for no_such_op"),
    (("record", "--op", OP, "--examples", "gdn_decode=3", "--out", "x.jsonl"), "--examples gdn_decode=3"),
    (("record", "--out", "/no/such/folder/x.jsonl"), "--out: folder /no/such/folder does not exist"),
    (("record", "--max-examples", "-1", "--out", "x.jsonl"), "--max-examples: -1 is negative"),
    (("compile", "/no/such/file.jsonl"), "cannot read it"),
    (("compile", "x.jsonl", "-j", "0"), "--jobs: 0 is not a positive number"),
])
def test_bad_flags_are_usage_errors(words, says):
    """Refused before any work (in this process: the tool's front end turns each into exit 2 and one line,
    as the end-to-end test above shows for the tool itself)."""
    with pytest.raises(UsageError, match=re.escape(says)):
        compile_ahead.main(list(words))


def test_the_tool_exits_2_in_one_line_on_a_usage_error(tmp_path):
    ran = _tool("compile", str(tmp_path / "missing.jsonl"))
    assert ran.returncode == 2 and "cannot read it" in ran.stderr and len(ran.stderr.strip().splitlines()) == 1
