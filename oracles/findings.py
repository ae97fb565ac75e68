"""What a parity finding says beyond "differs": the first differing (bitwise) or worst (band) elements,
their values, and the input values that decide them, so that a kernel engineer reads the bug off it.

Op-agnostic.  Two sources of input values:

- generic: every tensor input that shares the output's leading dimension (a row of logits, a batch's
  ``num_drafts``) is shown at the element's leading index — its values when short, else its max, NaN
  and infinity counts;
- op-specific: the op's strategy module may define ``explain(inputs, position, index, got, expected)``
  returning one line (the logits at the returned and the expected index, a row's first draft mismatch);
  it is the judge's own code, called on the judge's copies of the inputs, and an exception in it is
  reported, never raised.
"""
from __future__ import annotations

from typing import Callable, Mapping

import torch

from oracles.band import row_ulp
from oracles.bitwise import bit_pattern
from oracles.tensors import as_outputs

SHOWN = 3          # differing elements shown per output
SHORT_ROW = 16     # an input row up to this many elements is shown whole

Explain = Callable[[Mapping, int, tuple, object, object], str]


def _value(tensor: torch.Tensor, index: tuple):
    return tensor[index].item()


def _row_summary(name: str, row: torch.Tensor, leading: int) -> str:
    where = f"{name}[{leading}]"
    if row.dim() == 0:
        return f"{where} = {row.item()!r}"
    if row.numel() <= SHORT_ROW:
        return f"{where} = {row.flatten().tolist()}"
    if not row.is_floating_point():
        return f"{where}: {tuple(row.shape)} {str(row.dtype).removeprefix('torch.')}, min {row.min().item()}, " \
               f"max {row.max().item()}"
    values = row.to(torch.float64)
    finite = values[values.isfinite()]
    top = f"max finite {finite.max().item()!r} at {int(torch.where(values == finite.max())[0][0])}" \
        if finite.numel() and values.dim() == 1 else (f"max finite {finite.max().item()!r}" if finite.numel() else
                                                     "no finite value")
    return (f"{where}: {tuple(row.shape)} {str(row.dtype).removeprefix('torch.')}, {top}, "
            f"{int(values.isnan().sum())} NaN, {int(values.isinf().sum())} inf")


def input_rows(inputs: Mapping, output: torch.Tensor, index: tuple) -> list[str]:
    """The inputs sharing ``output``'s leading dimension, at the element's leading index."""
    if output.dim() == 0 or not index:
        return []
    leading, rows = index[0], []
    for name, value in inputs.items():
        if isinstance(value, torch.Tensor) and value.dim() >= 1 and value.shape[0] == output.shape[0]:
            rows.append(_row_summary(name, value[leading], leading))
    return rows


def _explained(explain: Explain | None, inputs: Mapping, position: int, index: tuple, got, expected) -> list[str]:
    if explain is None:
        return []
    try:
        return [explain(inputs, position, index, got, expected)]
    except Exception as error:  # noqa: BLE001 - a broken explanation must not cost the finding
        return [f"(the op's explain() raised {type(error).__name__}: {error})"]


def bitwise_detail(actual, expected, inputs: Mapping, explain: Explain | None = None) -> str:
    """Lines for a bitwise finding: per differing output, its first differing elements with their values,
    and for the first of them the inputs that decide it.  Empty when the outputs are not comparable."""
    lines, shown_rows = [], set()  # an input row is shown once, however many outputs differ at its index
    for position, (a, e) in enumerate(zip(as_outputs(actual), as_outputs(expected))):
        if not isinstance(a, torch.Tensor) or a.dtype != e.dtype or a.shape != e.shape or a.numel() == 0:
            continue
        differs = bit_pattern(a) != bit_pattern(e)
        where = [tuple(int(i) for i in row) for row in differs.nonzero()[:SHOWN]]
        if not where:
            continue
        shown = "; ".join(f"at {w}: got {_value(a, w)!r}, expected {_value(e, w)!r}" for w in where)
        lines.append(f"output {position}: {int(differs.sum())} differ; {shown}")
        first = where[0]
        rows = [] if first[:1] in shown_rows else input_rows(inputs, a, first)
        shown_rows.add(first[:1])
        lines += [f"  {line}" for line in
                  _explained(explain, inputs, position, first, _value(a, first), _value(e, first)) + rows]
    return "\n".join(lines)


def band_detail(actual, stock, truth, inputs: Mapping, explain: Explain | None = None) -> str:
    """Lines for a band finding: per floating output, its worst element — where, the float64 truth, the
    kernel's and the stock op's values, the error in ULPs of the row scale — and the inputs at its row."""
    lines = []
    stocks = as_outputs(stock) if stock is not None else ()
    for position, (out, true) in enumerate(zip(as_outputs(actual), as_outputs(truth))):
        if true is None or not isinstance(out, torch.Tensor) or not out.is_floating_point() \
                or out.shape != true.shape or out.numel() == 0:
            continue
        true = true.to(torch.float64)
        value = out.to(torch.float64)
        # non-finite truth matched exactly, as the band does (output_error): NaN by any NaN, +-inf by itself
        matched = torch.where(true.isnan(), value.isnan(), value == true)
        miss = torch.where(true.isfinite(), (value - true).abs(),
                           torch.where(matched, torch.zeros_like(true), torch.full_like(true, torch.inf)))
        miss = torch.where(true.isfinite() & value.isnan(), torch.full_like(miss, torch.inf), miss)
        ulp = row_ulp(true, out.dtype).expand_as(true) if true.dim() else row_ulp(true, out.dtype)
        error = miss / ulp
        flat = int(torch.nan_to_num(error, nan=torch.inf).flatten().argmax())
        where = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), out.shape)) if out.dim() else ()
        s = stocks[position] if position < len(stocks) and isinstance(stocks[position], torch.Tensor) \
            and stocks[position].shape == out.shape else None
        stock_text = f", stock {_value(s, where)!r}" if s is not None else ""
        lines.append(f"output {position}: worst at {where}: truth {_value(true, where)!r}, kernel "
                     f"{_value(out, where)!r}{stock_text} ({_value(error, where):.3g} ULP; 1 ULP of the row "
                     f"scale = {_value(ulp, where):.3g})")
        lines += [f"  {line}" for line in _explained(explain, inputs, position, where, _value(out, where),
                                                     _value(true, where)) + input_rows(inputs, out, where)]
    return "\n".join(lines)
