"""Test lists: TensorRT-LLM test-db compatible YAML that picks the tests of each CI stage and arch.

A list ``test_lists/l0_h200.yml``::

    version: 0.0.1
    l0_h200:                      # the key is the file's name
    - condition:
        ranges: {}                # optional, e.g. system_gpu_count: {gte: 1, lte: 1}
        wildcards: {gpu: ['*h200*']}
        terms: {stage: pre_merge, arch: sm90}
      tests:
      - suites/sampling/test_greedy_argmax.py::test_cell[decode_small_batch]

An id is a pytest node id relative to the repo root, or a prefix of one (a file, or a test function
covering all its parameters).  Errors carry ``file:line``: duplicate keys, non-scalar keys, files that are not
UTF-8 (``ops/strict_yaml.py``) and ranges that are not ``{gte|gt: number, lte|lt: number}`` with the lower
bound at most the upper one.
"""
from __future__ import annotations

import dataclasses
import pathlib

import yaml

from ops.strict_yaml import YamlFileError, compose_file

ARCH_MARKERS = ("cpu", "sm90", "sm100", "sm103", "sm107")
LISTS_DIR = pathlib.Path(__file__).resolve().parents[2] / "test_lists"


class ListFormatError(ValueError):
    pass


@dataclasses.dataclass(frozen=True)
class ListedTest:
    test_id: str
    file: str
    line: int
    stage: str
    arch: str

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"


def matches(nodeid: str, test_id: str) -> bool:
    """Whether a collected node id is selected by a listed id (equal, or a prefix at a boundary)."""
    return nodeid == test_id or any(nodeid.startswith(test_id + sep) for sep in ("::", "[", "/"))


def _node_value(node):
    return yaml.constructor.SafeConstructor().construct_object(node, deep=True)


def _mapping(node, where: str) -> dict:
    if not isinstance(node, yaml.MappingNode):
        raise ListFormatError(f"{where}: expected a mapping")
    return {key.value: value for key, value in node.value}


def load_list(path: pathlib.Path) -> list[ListedTest]:
    """Parse and schema-check one list; every problem raises ListFormatError with file:line."""
    path = pathlib.Path(path)
    name = path.name
    try:
        root = compose_file(path, name)
    except YamlFileError as error:
        raise ListFormatError(str(error)) from None
    if root is None:
        raise ListFormatError(f"{name}:1: empty file")
    top = _mapping(root, f"{name}:1")
    keys = set(top)
    if keys != {"version", path.stem}:
        raise ListFormatError(f"{name}:{root.start_mark.line + 1}: top-level keys must be 'version' and "
                            f"'{path.stem}' (the file's name), got {sorted(keys)}")
    blocks = top[path.stem]
    if not isinstance(blocks, yaml.SequenceNode):
        raise ListFormatError(f"{name}:{blocks.start_mark.line + 1}: '{path.stem}' must be a list of blocks")
    listed = []
    for block in blocks.value:
        where = f"{name}:{block.start_mark.line + 1}"
        fields = _mapping(block, where)
        if set(fields) != {"condition", "tests"}:
            raise ListFormatError(f"{where}: a block has exactly 'condition' and 'tests', got {sorted(fields)}")
        condition = _mapping(fields["condition"], where)
        unknown = set(condition) - {"ranges", "wildcards", "terms"}
        if unknown:
            raise ListFormatError(f"{where}: unknown condition keys {sorted(unknown)}")
        terms = _node_value(condition["terms"]) if "terms" in condition else {}
        if not isinstance(terms, dict) or not isinstance(terms.get("stage"), str):
            raise ListFormatError(f"{where}: condition.terms needs a 'stage'")
        if terms.get("arch") not in ARCH_MARKERS:
            raise ListFormatError(f"{where}: condition.terms.arch must be one of {ARCH_MARKERS}, "
                                f"got {terms.get('arch')!r}")
        for key in ("ranges", "wildcards"):
            if key in condition and not isinstance(_node_value(condition[key]), dict):
                raise ListFormatError(f"{where}: condition.{key} must be a mapping")
        if "ranges" in condition:
            check_ranges(condition["ranges"], name)
        tests = fields["tests"]
        if not isinstance(tests, yaml.SequenceNode):
            raise ListFormatError(f"{where}: 'tests' must be a list of test ids")
        for test in tests.value:
            if not isinstance(test, yaml.ScalarNode) or not test.value.strip():
                raise ListFormatError(f"{name}:{test.start_mark.line + 1}: a test id must be a non-empty string")
            listed.append(ListedTest(test.value.strip(), name, test.start_mark.line + 1,
                                     terms["stage"], terms["arch"]))
    return listed


_LOWER, _UPPER = ("gte", "gt"), ("lte", "lt")


def check_ranges(node, name: str) -> None:
    """Each range of ``condition.ranges`` bounds a number: ``{gte|gt: lo, lte|lt: hi}``, lo <= hi."""
    for key, bounds in node.value:
        where = f"{name}:{key.start_mark.line + 1}"
        value = _node_value(bounds)
        if not isinstance(value, dict) or not value or set(value) - {*_LOWER, *_UPPER}:
            raise ListFormatError(f"{where}: range {key.value!r} must map some of gte, gt, lte, lt to numbers")
        for bound, number in value.items():
            if isinstance(number, bool) or not isinstance(number, (int, float)) or number != number:
                raise ListFormatError(f"{where}: range {key.value!r}: {bound} is {number!r}, not a number")
        lower = [value[b] for b in _LOWER if b in value]
        upper = [value[b] for b in _UPPER if b in value]
        if lower and upper and max(lower) > min(upper):
            raise ListFormatError(f"{where}: range {key.value!r}: lower bound {max(lower)} is above upper bound "
                                  f"{min(upper)}")


def load_lists(paths) -> list[ListedTest]:
    return [test for path in paths for test in load_list(path)]


def all_list_paths() -> list[pathlib.Path]:
    return sorted(LISTS_DIR.glob("*.yml"))
