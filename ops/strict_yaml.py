"""YAML the project's own files are read with (test lists, the quarantine ledger): strict where PyYAML is
lenient.  A duplicate key would silently drop a block, a non-scalar key ends in a TypeError, a file that
is not UTF-8 in a UnicodeDecodeError, a FIFO in the file's place blocks for ever: each is a
:class:`YamlFileError` naming ``file:line`` (or the file) instead."""
from __future__ import annotations

import pathlib

import yaml

from ops.files import read_regular_bytes


class YamlFileError(ValueError):
    """The file cannot be read as the strict YAML these files are written in; the message has file:line."""


class UniqueKeyLoader(yaml.SafeLoader):
    """A SafeLoader whose mappings have plain scalar keys, each once."""

    label = "<yaml>"

    def compose_mapping_node(self, anchor):
        node = super().compose_mapping_node(anchor)
        first_line = {}
        for key, _ in node.value:
            line = key.start_mark.line + 1
            if not isinstance(key, yaml.ScalarNode):
                raise YamlFileError(f"{self.label}:{line}: a mapping key must be a plain scalar, not a "
                                    f"{'list' if isinstance(key, yaml.SequenceNode) else 'mapping'}")
            if key.value in first_line:
                raise YamlFileError(f"{self.label}:{line}: duplicate key {key.value!r} "
                                    f"(first at line {first_line[key.value]})")
            first_line[key.value] = line
        return node


def compose_file(path: pathlib.Path, label: str) -> yaml.Node | None:
    """The file's YAML node tree (None for an empty document); ``label`` names it in errors."""
    try:
        data = read_regular_bytes(path)
    except OSError as error:
        raise YamlFileError(f"{label}: cannot read: {error.strerror}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data[:error.start].count(b"\n") + 1
        raise YamlFileError(f"{label}:{line}: not UTF-8 (byte 0x{data[error.start]:02x})") from None
    loader = UniqueKeyLoader(text)
    loader.label = label
    try:
        return loader.get_single_node()
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f"{label}:{mark.line + 1}" if mark else label
        raise YamlFileError(f"{where}: not readable YAML: {getattr(error, 'problem', None) or error}") from None
    finally:
        loader.dispose()
