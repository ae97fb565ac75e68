"""A host without a mount namespace (issue #25.1): where none can be made (simulated here: the launcher is
asked for no namespace) but the judge is root, the host runs as a separate unprivileged uid that can write
none of the judge's code (``tools/engine/impl_launch.py``: ``separate_uid``); where neither exists, an
``--impl`` is refused with the reason.

The uid must be able to read the interpreter and the tree: the judge here is a copy of the tree in a folder
anyone may read, run by this machine's system interpreter of this Python's version over this venv's
packages (this venv's own interpreter may lie where no other uid can read, as under /root).
"""
from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys
import sysconfig
import tempfile

import pytest

from suites.faults.judge_spotting import PLANTED_MARKER, copy_of_the_tree, judges_bytecode_cache
from tools.cli import UsageError
from tools.engine import impl_executor, worker

pytestmark = pytest.mark.cpu
CORRECT = "suites.sampling.greedy_argmax_impls:correct_via_max"
PLANTS = "suites.faults.hostile_impls:plants_bytecode"
# Runs certify-cells once per --impl given, in one judge process whose hosts may take a separate uid only
# (the uid walks the judge's code once), and prints the exit statuses: each run's end is raised, where the tool
# would end its process (tools.cli.end_process).
DRIVER = """
import json, runpy, sys
from tools import cli
from tools.engine import impl_executor
impl_executor.PROTECTIONS = {"cpu": ("uid",)}

def raised(code):
    raise SystemExit(code)

cli.end_process = raised
statuses = []
for impl in sys.argv[1:]:
    sys.argv = ["tools/certify-cells", "--op", "greedy_argmax", "--cell", "decode_small_batch", "--device", "cpu",
                "--max-examples", "0", "--no-shrink", "--impl", impl]
    try:
        runpy.run_path("tools/certify-cells", run_name="__main__")
    except SystemExit as end:
        statuses.append(end.code)
print(json.dumps(statuses))
"""


def _system_interpreter() -> str | None:
    """This Python's version, installed where any uid may run it (None: this machine has none)."""
    for folder in ("/usr/bin", "/usr/local/bin"):
        found = shutil.which(f"python{sys.version_info.major}.{sys.version_info.minor}", path=folder)
        if found and os.path.realpath(found).startswith(("/usr/bin/", "/usr/local/bin/")):
            return os.path.realpath(found)
    return None


def _any_uid_may_enter(path: pathlib.Path) -> bool:
    return all(os.stat(folder).st_mode & 0o005 == 0o005 for folder in (path, *path.parents))


def _packages_any_uid_may_read(venv: pathlib.Path) -> None:
    """``venv/lib``: this Python's, where any uid may enter it; else (CI's interpreter lies under /root,
    which no other uid may enter) its site-packages hard-linked into ``venv`` (no file is copied: a
    link shares the file's own modes; where links cannot be made, the test is skipped with the reason)."""
    lib = pathlib.Path(sys.prefix, "lib").resolve()
    if _any_uid_may_enter(lib):
        (venv / "lib").symlink_to(lib)
        return
    for packages in sorted({pathlib.Path(sysconfig.get_paths()[kind]).resolve() for kind in ("purelib", "platlib")}):
        try:
            shutil.copytree(packages, venv / packages.relative_to(lib.parent), symlinks=True,
                            copy_function=os.link)
        except (OSError, shutil.Error) as error:
            pytest.skip(f"{packages} lies where no other uid may enter, and cannot be hard-linked: {error}")


@pytest.fixture(scope="module")
def readable_judge():
    """(interpreter, tree): a venv of the system interpreter over this venv's packages, and a copy of the
    tree, in a folder any uid may read."""
    interpreter = _system_interpreter()
    if os.geteuid() != 0 or interpreter is None:
        pytest.skip("a separate uid needs a root judge and an interpreter any uid may read")
    folder = pathlib.Path(tempfile.mkdtemp())
    folder.chmod(0o755)
    try:
        venv = folder / "venv"
        (venv / "bin").mkdir(parents=True)
        version = subprocess.run([interpreter, "-c", "import platform; print(platform.python_version())"],
                                 capture_output=True, text=True, check=True).stdout.strip()
        (venv / "pyvenv.cfg").write_text(f"home = {os.path.dirname(interpreter)}\n"
                                         f"include-system-site-packages = false\nversion = {version}\n")
        (venv / "bin" / "python").symlink_to(interpreter)
        _packages_any_uid_may_read(venv)
        yield str(venv / "bin" / "python"), copy_of_the_tree(folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _holding_the_marker(*folders) -> list[str]:
    return [str(path) for folder in folders if folder.exists() for path in folder.rglob("*.pyc")
            if PLANTED_MARKER.encode() in path.read_bytes()]


def test_a_host_of_a_separate_uid_judges_and_cannot_plant_bytecode(readable_judge):
    """The planting implementation fails its cell and writes nothing into the tree or the judge's bytecode
    cache (its host's uid can write neither; the control of the planting itself is
    ``test_bytecode.test_an_implementation_cannot_plant_bytecode_while_it_is_judged``); a correct one passes
    in the same judge: the host ran, protected, as that uid."""
    interpreter, tree = readable_judge
    environment = {name: value for name, value in os.environ.items()
                   if name not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX", "PYTHONPATH")}
    run = subprocess.run([interpreter, "-c", DRIVER, PLANTS, CORRECT], cwd=tree, env=environment,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0 and run.stdout.strip(), run.stdout + run.stderr
    assert json.loads(run.stdout.strip().splitlines()[-1]) == [1, 0], run.stdout + run.stderr
    cache = pathlib.Path(judges_bytecode_cache(), str(tree).lstrip("/"))
    assert _holding_the_marker(tree, cache) == []


def test_the_uid_finds_a_file_of_the_judges_code_it_could_write(readable_judge):
    """The walk's own control, run as that uid: one module any uid may write, deep in the tree, is found;
    with it made read-only again nothing is, and a link to a device (``/dev/null``) never counts."""
    interpreter, tree = readable_judge
    module = tree / "oracles" / "bitwise.py"
    (tree / "ops" / "null").symlink_to("/dev/null")
    walk = ("import sys; sys.path.insert(0, 'tools/engine'); from impl_launch import first_writable; "
            "print(first_writable(sys.argv[1:]))")
    user = impl_executor.host_ids()

    def found() -> str:
        run = subprocess.run([interpreter, "-c", walk, str(tree)], cwd=tree, capture_output=True, text=True,
                             user=user[0], group=user[1], extra_groups=[], timeout=120)
        assert run.returncode == 0, run.stderr
        return run.stdout.strip()

    try:
        module.chmod(0o666)
        assert found() == str(module)
        module.chmod(0o644)
        assert found() == "None"
    finally:
        module.chmod(0o644)
        (tree / "ops" / "null").unlink()


def test_with_neither_a_namespace_nor_a_separate_uid_an_impl_is_refused(monkeypatch):
    """No namespace (not asked) and no unprivileged user to run as: --impl is refused naming both; the
    catalog's own kernels still get a host, unprotected."""
    monkeypatch.setattr(impl_executor, "PROTECTIONS", {"cpu": ("uid",)})
    monkeypatch.setattr(impl_executor, "HOST_USER", "no-such-user-of-kparity")
    # the hosts an earlier test of this process left (live, or spare) were started with a user to run as
    monkeypatch.setattr(worker, "_HOSTS", {})
    monkeypatch.setattr(worker, "_SPARE", {})
    with pytest.raises(UsageError, match="refused.*no unprivileged user to run the host as"):
        worker.implementation_host(CORRECT, "cpu", call_limit_s=60)
    host = worker.implementation_host(None, "cpu", call_limit_s=60)
    try:
        assert host.unprotected == "no unprivileged user to run the host as" and host.separate_uid is None
    finally:
        worker.retire_host(None, "cpu")
