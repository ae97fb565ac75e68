"""Console scripts (``[project.scripts]`` in pyproject.toml): an installed ``certify-cells`` runs what
``tools/certify-cells`` runs from a clone, under the shared conventions (``tools/cli.run_tool``: exit 0, 1,
or 2 with a one-line reason).  Each script imports only its own tool."""
from __future__ import annotations

import importlib

from tools.cli import run_tool


def _run(module: str, function: str = "main") -> None:
    run_tool(getattr(importlib.import_module(f"tools.{module}"), function))


def ab() -> None:
    _run("ab")


def accuracy_gate() -> None:
    _run("accuracy_gate")


def accuracy_simulation() -> None:
    _run("accuracy_simulation")


def bench() -> None:
    _run("bench")


def certify_cells() -> None:
    _run("certify_cells")


def check_test_lists() -> None:
    _run("check_test_lists")


def gate() -> None:
    _run("gate")


def new_op() -> None:
    _run("new_op")


def nightly() -> None:
    _run("nightly")


def nvfp4_ab() -> None:
    _run("nvfp4_ab")


def scale_measure() -> None:
    _run("scale_measure")


def compile_receipts() -> None:
    _run("compile_receipts")


def install_wheels() -> None:
    _run("pack_wheels", "install_main")


def pack_wheels() -> None:
    _run("pack_wheels", "pack_main")


def verdict_table() -> None:
    _run("verdict_table")
