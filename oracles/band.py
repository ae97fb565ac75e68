"""Band parity: error against float64 truth, in ULPs of the output dtype at each row's scale.

For every output element, ``error_ulp = |out - truth| / ulp(max |finite truth| of its row)`` (a row is
the last dimension).  The implementation passes when its worst error is at most the band
``max(2 x E, 1 ULP)``, where E is the largest error, on the same inputs, of the contract's *legitimate
implementations*: the stock op and the reference evaluated in each of the reduction orders a real kernel
may use (the op's reference names them; this module only receives their outputs and names).  Every
report records E, the implementation that set it, the kernel's error and the relative RMS errors, so a
tolerance is never a bare constant.

- A band wider than the op's limit (8 ULP unless the reference declares a wider :class:`BandLimit` with
  its reason) judges nothing: the input fails closed as "band vacuous", whatever the output.
- Non-finite truth is matched exactly: NaN truth needs a NaN output (any NaN), +-inf the same infinity.
  A non-finite output where the truth is finite fails.
- A legitimate implementation that misses a non-finite truth or overflows where the truth is finite
  says nothing about the band: it is left out of E and named in the report (``legitimate_failures``);
  when none is left the band is the floor (fail closed).
- Before any value is compared, every output must be exactly a torch.Tensor of the contract's dtype,
  shape and device (those of the reference's output on the same input).
- A truth of None for an output says the band does not judge it: the contract holds it to an exact
  property instead (``rms_norm_gated``'s ``amax`` must equal the maximum of the very ``|y|`` returned,
  which no float64 truth pins down), and the entry's stateful properties judge it.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Mapping

import torch

from oracles.band_limit import DEFAULT_LIMIT, BandLimit
from oracles.failures import OracleFailure
from oracles.tensors import as_outputs, check_contract_outputs

LEGITIMATE_FACTOR = 2.0
FLOOR_ULP = 1.0
STOCK = "stock"   # the name the stock op's outputs carry among the legitimate implementations


def significand_bits(dtype: torch.dtype) -> int:
    """Explicit mantissa bits of a floating dtype (bf16 7, fp16 10, fp32 23, e4m3 3)."""
    return {torch.bfloat16: 7, torch.float16: 10, torch.float32: 23, torch.float64: 52,
            torch.float8_e4m3fn: 3, torch.float8_e5m2: 2}[dtype]


def row_ulp(truth: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """One ULP of ``dtype`` at each row's largest finite |truth| (smallest normal for a zero row)."""
    finite = torch.where(truth.isfinite(), truth.abs(), torch.zeros_like(truth))
    scale = finite.amax(dim=-1, keepdim=True) if truth.dim() else finite
    scale = scale.clamp_min(torch.finfo(dtype).tiny)
    return torch.exp2(torch.floor(torch.log2(scale)) - significand_bits(dtype))


@dataclasses.dataclass
class OutputError:
    error_ulp: float       # worst per-element error where the truth is finite, in row-scale ULPs
    relative_rms: float    # ||out - truth|| / ||truth|| over finite truth
    non_finite: int = 0    # elements that are NaN or infinite where the truth is finite
    missed_non_finite: int = 0  # elements where the truth is NaN or +-inf and the output is not that

    @property
    def usable(self) -> bool:
        return self.non_finite == 0 and self.missed_non_finite == 0 and math.isfinite(self.error_ulp)


def output_error(output: torch.Tensor, truth: torch.Tensor) -> OutputError:
    return output_errors([output], truth)[0]


STACKED_BYTES = 1 << 28   # a pass's temporaries are about four such copies (measured on the CPU): ~1 GiB


def _passes(outputs: int, rows: int, row_elements: int) -> list[tuple[slice, slice]]:
    """(outputs, rows) of each pass of :func:`output_errors`: as many outputs and rows a pass as keep its float64
    copies within STACKED_BYTES. Every output of a small truth goes in one pass; an output of hundreds of millions
    of elements goes alone, a block of rows at a time (ten orders of a large gdn_verify checkpoint took 11 GiB a
    copy; fused_sigmoid_mul's 2^28-element prefill corner 2 GiB a copy and about four copies of temporaries)."""
    copy_bytes = rows * row_elements * 8
    if copy_bytes <= STACKED_BYTES:
        per_pass = max(1, STACKED_BYTES // max(copy_bytes, 1))
        return [(slice(start, start + per_pass), slice(0, rows)) for start in range(0, outputs, per_pass)]
    block = max(1, STACKED_BYTES // (row_elements * 8))
    return [(slice(position, position + 1), slice(start, start + block))
            for position in range(outputs) for start in range(0, rows, block)]


def output_errors(outputs, truth: torch.Tensor) -> list[OutputError]:
    """The error of each of ``outputs`` (implementations' answers for one output) against ``truth``, in few
    passes: the same arithmetic element by element, one read of each pass's results back to the host, where one
    output at a time took several device syncs each. A row's ULP depends on its row alone, so a pass may take a
    block of rows; the norms of the blocks combine exactly as one norm (``math.hypot``)."""
    truth = truth.to(torch.float64)
    for output in outputs:
        if output.shape != truth.shape:
            raise OracleFailure("parity", f"shape {tuple(output.shape)} != {tuple(truth.shape)}")
    if truth.numel() == 0:
        return [OutputError(0.0, 0.0) for _ in outputs]
    row_elements = truth.shape[-1] if truth.dim() else 1
    truth_rows = truth.reshape(-1, row_elements)
    by_dtype: dict[torch.dtype, list[int]] = {}
    for position, output in enumerate(outputs):   # each output's ULP is its own dtype's
        by_dtype.setdefault(output.dtype, []).append(position)
    # per output: worst ULPs, the norms of its blocks' differences, non-finite answers, missed non-finite truth
    worst, diff_norms = [0.0] * len(outputs), [[] for _ in outputs]
    non_finite, missed = [0] * len(outputs), [0] * len(outputs)
    # what a block of the truth gives every output that meets it, made once: its norm, its rows' ULP a dtype
    truth_norms, block_norms, ulps, flat = {}, {}, {}, {}
    for dtype, positions in by_dtype.items():
        for chunk, rows in _passes(len(positions), truth_rows.shape[0], row_elements):
            chunk = positions[chunk]
            # each output's rows flattened once (a copy where its strides allow no view), kept for its passes only
            flat = {position: flat[position] if position in flat else outputs[position].reshape(-1, row_elements)
                    for position in chunk}
            block = truth_rows[rows]
            finite = block.isfinite()
            if rows.start not in block_norms:
                block_norms[rows.start] = torch.where(finite, block, torch.zeros_like(block)).norm()
            if (rows.start, dtype) not in ulps:
                ulps[rows.start, dtype] = row_ulp(block, dtype)
            ulp = ulps[rows.start, dtype]
            value = torch.stack([flat[position][rows].to(torch.float64) for position in chunk])
            # NaN truth: any NaN; +-inf truth: the same infinity (NaN != NaN, so not value != truth)
            matched = torch.where(block.isnan(), value.isnan(), value == block)
            diff = torch.where(finite, (value - block).abs(), torch.zeros_like(value))
            diff = torch.where(finite & value.isnan(), torch.full_like(diff, math.inf), diff)
            stacked = (len(chunk), -1)
            numbers = torch.stack([(diff / ulp).reshape(stacked).amax(dim=1),
                                   diff.reshape(stacked).norm(dim=1),
                                   (finite & ~value.isfinite()).reshape(stacked).sum(dim=1).to(torch.float64),
                                   ((~finite) & ~matched).reshape(stacked).sum(dim=1).to(torch.float64),
                                   block_norms[rows.start].expand(len(chunk))],
                                  dim=1)
            for position, (error_ulp, diff_norm, infinite, unmatched, truth_norm) in zip(chunk, numbers.tolist()):
                worst[position] = max(worst[position], error_ulp)
                diff_norms[position].append(diff_norm)
                non_finite[position] += int(infinite)
                missed[position] += int(unmatched)
                truth_norms[rows.start] = truth_norm
    truth_norm = math.hypot(*truth_norms.values())
    figures = []
    for position in range(len(outputs)):
        diff_norm = math.hypot(*diff_norms[position])
        relative_rms = diff_norm / truth_norm if truth_norm > 0 else (0.0 if diff_norm == 0 else math.inf)
        figures.append(OutputError(worst[position], relative_rms, non_finite[position], missed[position]))
    return figures


@dataclasses.dataclass
class BandReport:
    kernel_error_ulp: float
    stock_error_ulp: float            # the stock op's error (inf when it is left out of E)
    allowed_error_ulp: float          # the band: max(2 x legitimate_error_ulp, floor)
    kernel_relative_rms: float
    stock_relative_rms: float
    kernel_non_finite: int = 0        # non-finite elements where the truth is finite: a failure whatever the band
    legitimate_failures: str | None = None  # legitimate implementations left out of E, and why
    legitimate_error_ulp: float = 0.0  # E: the largest error of the legitimate implementations left in
    band_set_by: str | None = None     # which legitimate implementation set E (None: the floor)
    limit_ulp: float = DEFAULT_LIMIT.ulp
    kernel_missed_non_finite: int = 0  # NaN/inf truth the output did not match exactly

    @property
    def vacuous(self) -> bool:
        return self.allowed_error_ulp > self.limit_ulp

    @property
    def passed(self) -> bool:
        return (self.kernel_non_finite == 0 and self.kernel_missed_non_finite == 0 and not self.vacuous
                and self.kernel_error_ulp <= self.allowed_error_ulp)


def _legitimate_outputs(stock_output, orders: Mapping[str, object] | None) -> dict[str, tuple]:
    named = {} if stock_output is None else {STOCK: as_outputs(stock_output)}
    for name, outputs in (orders or {}).items():
        if name in named:
            raise ValueError(f"orders: {name!r} names two legitimate implementations")
        named[name] = as_outputs(outputs)
    return named


def band_reports(output, stock_output, truth, orders: Mapping[str, object] | None = None,
                 limit: BandLimit = DEFAULT_LIMIT) -> list[BandReport]:
    """One report per floating output, each judged against the legitimate implementations' errors on that
    same output: an fp32 lse's error in fp32 ULPs says nothing about the band of a bf16 attention output.
    ``stock_output`` is the stock op's outputs; ``orders`` maps the names of the reference's other
    reduction orders to their outputs on the same input."""
    outputs, truths = as_outputs(output), as_outputs(truth)
    legitimate = _legitimate_outputs(stock_output, orders)
    if len(outputs) != len(truths):
        raise OracleFailure("parity", f"{len(outputs)} outputs, expected {len(truths)}")
    reports = []
    for position, (out, true) in enumerate(zip(outputs, truths)):
        if true is None:  # judged exactly by the entry's stateful properties (module docstring)
            continue
        if not out.is_floating_point():  # integer outputs of a band op are exact
            if out.shape != true.shape or not torch.equal(out, true.to(out.dtype)):
                raise OracleFailure("parity", f"output {position} ({out.dtype}) is not exactly the truth")
            continue
        kernel, *others = output_errors([out, *(outputs_of[position] for outputs_of in legitimate.values())], true)
        errors = dict(zip(legitimate, others))
        failed = [f"{name} {error.error_ulp:.3g} ULP ({error.non_finite} non-finite where the truth is finite, "
                  f"{error.missed_non_finite} non-finite truth missed)"
                  for name, error in errors.items() if not error.usable]
        usable = {name: error for name, error in errors.items() if error.usable}
        set_by = max(usable, key=lambda name: usable[name].error_ulp, default=None)
        worst = usable[set_by].error_ulp if set_by else 0.0
        stock = errors.get(STOCK, OutputError(0.0, 0.0))
        reports.append(BandReport(
            kernel_error_ulp=kernel.error_ulp,
            stock_error_ulp=stock.error_ulp if stock.usable else math.inf,
            allowed_error_ulp=max(LEGITIMATE_FACTOR * worst, FLOOR_ULP),
            kernel_relative_rms=kernel.relative_rms,
            stock_relative_rms=stock.relative_rms,
            kernel_non_finite=kernel.non_finite,
            legitimate_failures=(f"output {position}: left out of E: " + "; ".join(failed)) if failed else None,
            legitimate_error_ulp=worst,
            band_set_by=set_by,
            limit_ulp=limit.ulp,
            kernel_missed_non_finite=kernel.missed_non_finite,
        ))
    return reports


def _numbers(report: BandReport) -> str:
    return (f"E {report.legitimate_error_ulp:.3g} ULP set by {report.band_set_by or 'none (the floor)'}; "
            f"stock op {report.stock_error_ulp:.3g} ULP; relative RMS kernel {report.kernel_relative_rms:.3g}, "
            f"stock {report.stock_relative_rms:.3g}")


def check_band(output, stock_output, truth, what: str, expected=None, orders: Mapping[str, object] | None = None,
               limit: BandLimit = DEFAULT_LIMIT) -> BandReport:
    """Raise OracleFailure when an output breaks the contract's type, dtype, shape or device (those of
    ``expected``, the reference's output; default the stock op's), when its band is vacuous, or when any
    floating output leaves its band; return the worst output's report."""
    output, _ = check_contract_outputs(output, stock_output if expected is None else expected, what)
    reports = band_reports(output, stock_output, truth, orders, limit)
    for position, report in enumerate(reports):
        if report.vacuous:
            raise OracleFailure(
                "parity", f"{what}: output {position}: band vacuous: E = {report.legitimate_error_ulp:.3g} ULP "
                          f"(set by {report.band_set_by}) makes a band of {report.allowed_error_ulp:.3g} ULP, beyond "
                          f"the op's limit {report.limit_ulp:.3g} ULP: no output can be judged on this input")
        if report.kernel_missed_non_finite:
            raise OracleFailure("parity", f"{what}: output {position}: {report.kernel_missed_non_finite} elements "
                                          f"where the float64 truth is NaN or +-inf and the output is not the same")
        if report.kernel_non_finite:
            raise OracleFailure("parity", f"{what}: output {position}: {report.kernel_non_finite} non-finite "
                                          f"elements where the float64 truth is finite")
        if not report.passed:
            raise OracleFailure(
                "parity",
                f"{what}: output {position}: error {report.kernel_error_ulp:.3g} ULP exceeds the band "
                f"{report.allowed_error_ulp:.3g} ULP ({_numbers(report)})"
                + (f"; {report.legitimate_failures}" if report.legitimate_failures else ""),
            )
    worst = max(reports, key=lambda r: r.kernel_error_ulp / r.allowed_error_ulp,
                default=BandReport(0.0, 0.0, FLOOR_ULP, 0.0, 0.0, limit_ulp=limit.ulp))
    failures = "; ".join(r.legitimate_failures for r in reports if r.legitimate_failures)
    return dataclasses.replace(worst, legitimate_failures=failures or None)
