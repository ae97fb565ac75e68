"""Each op's refusal table is its contract's Refuse line, both ways (issue #15.1).

``../shared/CONTRACTS.md`` (the repository's parent folder, where CI keeps it) states each op's refused
inputs on one "Refuse:" line; the convention adds non-tensors where a tensor is expected.  Every row of
an op's ``REFUSALS`` quotes the item it enforces (``clause``), so the table can be read against the
line: every item is enforced by at least one row, and every row cites an item of the line, ``non-tensor``,
or a wrong type the op's signature pins in so many words ("... is a wrong type").
"""
from __future__ import annotations

import pathlib
import re

import pytest
import torch

from oracles.failures import OracleFailure
from oracles.refusals import check_refusals
from ops.catalog import entries
from references.validation import Refusal

CONTRACTS = pathlib.Path(__file__).resolve().parents[2] / "shared" / "CONTRACTS.md"
# sections of new ops awaiting their merge into CONTRACTS.md (tools/new-op writes them); once merged, delete
PENDING = pathlib.Path(__file__).resolve().parents[1] / "docs" / "contracts"


def contracts_and_pending() -> str:
    """CONTRACTS.md followed by the pending sections of docs/contracts/ (a section in both is an error)."""
    text = CONTRACTS.read_text()
    for path in sorted(PENDING.glob("*.md")):
        pending = path.read_text()
        if set(_sections(pending)) & set(_sections(text)):
            pytest.fail(f"{path} is in CONTRACTS.md already: delete it")
        text += "\n" + pending
    return text
NON_TENSOR = "non-tensor"
DEVICE = torch.device("cpu")


def _sections(text: str) -> dict[str, str]:
    """op name -> its section's text (a heading ``## family/a, family/b`` gives each op the section)."""
    sections = {}
    for block in re.split(r"^## ", text, flags=re.MULTILINE)[1:]:
        heading, _, body = block.partition("\n")
        for qualified in re.findall(r"[a-z_]+/([a-z0-9_]+)", heading.split(" — ")[0]):
            sections[qualified] = " ".join(body.split())
    return sections


def _split_items(line: str) -> list[str]:
    """Items of a Refuse line: commas outside backticks and parentheses separate them."""
    items, depth, ticked, current = [], 0, False, ""
    for char in line:
        if char == "`":
            ticked = not ticked
        elif not ticked and char == "(":
            depth += 1
        elif not ticked and char == ")":
            depth -= 1
        if char == "," and depth == 0 and not ticked:
            items.append(current.strip())
            current = ""
        else:
            current += char
    return [item for item in (*items, current.strip()) if item]


def refuse_lines(text: str) -> dict[str, list[str]]:
    """op name -> the items of its Refuse line ("as above" takes the previous op's items)."""
    lines, previous = {}, []
    for name, body in _sections(text).items():
        found = re.search(r"Refuse: (.*?)\.(?: [A-Z-]|$)", body)
        if found is None:
            continue
        items = previous if found.group(1).strip() == "as above" else _split_items(found.group(1))
        lines[name], previous = items, items
    return lines


def pinned_wrong_types(text: str) -> dict[str, list[str]]:
    """op name -> the sentences of its section that pin a wrong type (rows may cite them as clauses)."""
    return {name: re.findall(r"\(([^()]*is a wrong type)\)", body) for name, body in _sections(text).items()}


def mismatches(tables: dict, text: str) -> list[str]:
    """Where the refusal tables (op name -> rows) of the ops of one contract section and its Refuse line
    disagree, in words (empty: they match both ways).  Ops sharing a section (gdn_decode, gdn_verify,
    gdn_commit) share its line: each item must be enforced by a row of one of them (gdn_commit has no
    heads to disagree)."""
    lines, found, cited = refuse_lines(text), [], set()
    for op_name, refusals in tables.items():
        items = lines.get(op_name)
        if items is None:
            found.append(f"{op_name}: no Refuse line in CONTRACTS.md")
            continue
        allowed = {*items, NON_TENSOR, *pinned_wrong_types(text).get(op_name, ())}
        found += [f"{op_name}: row {row.what!r} cites {row.clause!r}, which is no item of the Refuse line {items}"
                  for row in refusals if row.clause not in allowed]
        cited |= {row.clause for row in refusals}
    items = {item for op_name in tables for item in lines.get(op_name, ())}
    found += [f"{'/'.join(tables)}: the Refuse-line item {item!r} is enforced by no row"
              for item in sorted(items - cited)]
    return found


def section_ops(text: str) -> list[tuple[str, ...]]:
    """The catalog's ops grouped by the contract section they share."""
    by_body: dict[str, list[str]] = {}
    for name, body in _sections(text).items():
        if name in entries():
            by_body.setdefault(body, []).append(name)
    return [tuple(names) for names in by_body.values()]


@pytest.fixture(scope="module")
def contracts_text() -> str:
    if not CONTRACTS.is_file():
        pytest.fail(f"{CONTRACTS} is missing: the contracts live in the repository's parent folder (shared/)")
    return contracts_and_pending()


@pytest.mark.cpu
def test_every_op_of_the_catalog_has_a_contract_section(contracts_text):
    assert set(entries()) <= set(_sections(contracts_text))


@pytest.mark.cpu
@pytest.mark.parametrize("ops", section_ops(contracts_and_pending()) if CONTRACTS.is_file() else [()],
                         ids="/".join)
def test_refusal_rows_are_the_contracts_refuse_line(ops, contracts_text):
    assert not mismatches({name: entries()[name].refusals for name in ops}, contracts_text)


@pytest.mark.cpu
@pytest.mark.parametrize("op_name", sorted(entries()))
def test_the_reference_refuses_its_rows(op_name):
    entry = entries()[op_name]
    assert check_refusals(entry.reference, entry.refusals, DEVICE) == len(entry.refusals)


@pytest.mark.cpu
def test_parsed_lines_hold_every_contract_op(contracts_text):
    lines = refuse_lines(contracts_text)
    assert lines["rollback_save"] == lines["rollback_restore"]
    assert lines["fp8_gemv"] == lines["nvfp4_gemv"] == ["M outside 1..16", "K mismatch", "wrong dtypes"]
    assert lines["greedy_argmax"] == ["not 2-D", "other dtypes", "`stride(1) != 1`", "`V == 0`"]
    assert pinned_wrong_types(contracts_text)["rms_norm_gated"]


# -- negative controls: the check must find a row the contract does not state, and a missing item ----
def _any_call(device):
    return {}


@pytest.mark.cpu
def test_a_row_citing_no_item_of_the_line_is_found(contracts_text):
    rows = (*entries()["greedy_argmax"].refusals,
            Refusal("V above 2**20", _any_call, "logits", clause="V > 2**20"))
    found = mismatches({"greedy_argmax": rows}, contracts_text)
    assert len(found) == 1 and "'V > 2**20'" in found[0]


@pytest.mark.cpu
def test_a_row_without_a_clause_is_found(contracts_text):
    rows = (*entries()["strict_accept"].refusals, Refusal("uncited", _any_call, "num_drafts"))
    assert mismatches({"strict_accept": rows}, contracts_text)


@pytest.mark.cpu
def test_an_item_no_row_enforces_is_found(contracts_text):
    rows = tuple(row for row in entries()["greedy_argmax"].refusals if row.clause != "`V == 0`")
    found = mismatches({"greedy_argmax": rows}, contracts_text)
    assert found == ["greedy_argmax: the Refuse-line item '`V == 0`' is enforced by no row"]


@pytest.mark.cpu
def test_a_shared_line_needs_each_item_from_one_of_its_ops(contracts_text):
    commit_alone = {"gdn_commit": entries()["gdn_commit"].refusals}
    assert mismatches(commit_alone, contracts_text) == [
        "gdn_commit: the Refuse-line item 'HV not a multiple of H' is enforced by no row"]


# -- a row may name several acceptable arguments (two that disagree: either is right) ------------------
PAIR = (Refusal("K of x 3, of w 4", lambda device: {"x": torch.ones(2, 3), "w": torch.ones(5, 4)}, ("x", "w"),
                clause="K mismatch"),)


def _k_mismatch_naming(name):
    def fn(x, w):
        if x.shape[1] != w.shape[1]:
            raise ValueError(f"{name}: K disagrees")
        return x @ w.T
    return fn


@pytest.mark.cpu
@pytest.mark.parametrize("named", ["x", "w"])
def test_naming_either_argument_of_a_disagreeing_pair_passes(named):
    assert check_refusals(_k_mismatch_naming(named), PAIR, DEVICE) == 1


@pytest.mark.cpu
def test_naming_neither_fails():
    with pytest.raises(OracleFailure, match="does not name 'x' or 'w'"):
        check_refusals(_k_mismatch_naming("weights"), PAIR, DEVICE)
