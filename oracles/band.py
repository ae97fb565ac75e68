"""Band parity: error against float64 truth, in ULPs of the output dtype at each row's scale.

For every output element, ``error_ulp = |out - truth| / ulp(max |truth| of its row)`` (a row is the
last dimension).  The implementation passes when its worst error is at most
``max(2 x the stock op's worst error on the same inputs, 1 ULP)``; both numbers and both relative
RMS errors are reported, so a tolerance is never a bare constant.  Before any value is compared, every
output must be exactly a torch.Tensor of the contract's dtype, shape and device (those of the
reference's output on the same input).  A non-finite output where the truth is finite fails.  A stock
op whose error is not finite (it overflowed) says nothing about the band: the band falls back to the
floor (fail closed) and the stock's failure is recorded in the report.  Where truth is not finite
(``lse = -inf`` of an empty row) the output must equal it exactly.  A truth of None for an output says
the band does not judge it: the contract holds it to an exact property instead (``rms_norm_gated``'s
``amax`` must equal the maximum of the very ``|y|`` returned, which no float64 truth pins down), and the
entry's stateful properties judge it.
"""
from __future__ import annotations

import dataclasses
import math

import torch

from oracles.failures import OracleFailure
from oracles.tensors import as_outputs, check_contract_outputs

STOCK_FACTOR = 2.0
FLOOR_ULP = 1.0


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
    error_ulp: float       # worst per-element error, in row-scale ULPs
    relative_rms: float    # ||out - truth|| / ||truth|| over finite truth
    non_finite: int = 0    # elements that are NaN or infinite where the truth is finite


def output_error(output: torch.Tensor, truth: torch.Tensor) -> OutputError:
    truth = truth.to(torch.float64)
    if output.shape != truth.shape:
        raise OracleFailure("parity", f"shape {tuple(output.shape)} != {tuple(truth.shape)}")
    if output.numel() == 0:
        return OutputError(0.0, 0.0)
    value = output.to(torch.float64)
    finite = truth.isfinite()
    # non-finite truth must be matched exactly; NaN output against finite truth is an infinite error
    exact_miss = (~finite) & (value != truth) & ~(value.isnan() & truth.isnan())  # NaN truth: NaN matches
    diff = torch.where(finite, (value - truth).abs(), torch.zeros_like(truth))
    diff = torch.where(finite & value.isnan(), torch.full_like(diff, math.inf), diff)
    error_ulp = (diff / row_ulp(truth, output.dtype)).max().item()
    if exact_miss.any():
        error_ulp = math.inf
    norm = torch.where(finite, truth, torch.zeros_like(truth)).norm().item()
    relative_rms = diff.norm().item() / norm if norm > 0 else (0.0 if diff.norm().item() == 0 else math.inf)
    return OutputError(error_ulp, relative_rms, int((finite & ~value.isfinite()).sum()))


@dataclasses.dataclass
class BandReport:
    kernel_error_ulp: float
    stock_error_ulp: float
    allowed_error_ulp: float
    kernel_relative_rms: float
    stock_relative_rms: float
    kernel_non_finite: int = 0        # non-finite elements where the truth is finite: a failure whatever the band
    stock_failure: str | None = None  # why the stock op's error did not set the band (it fell back to the floor)

    @property
    def passed(self) -> bool:
        return self.kernel_non_finite == 0 and self.kernel_error_ulp <= self.allowed_error_ulp


def band_reports(output, stock_output, truth) -> list[BandReport]:
    """One report per floating output, each judged against the stock op's error on that same output:
    an fp32 lse's stock error in fp32 ULPs says nothing about the band of a bf16 attention output."""
    outputs, stocks, truths = as_outputs(output), as_outputs(stock_output), as_outputs(truth)
    if len(outputs) != len(truths):
        raise OracleFailure("parity", f"{len(outputs)} outputs, expected {len(truths)}")
    reports = []
    for position, (out, stock, true) in enumerate(zip(outputs, stocks, truths)):
        if true is None:  # judged exactly by the entry's stateful properties (module docstring)
            continue
        if not out.is_floating_point():  # integer outputs of a band op are exact
            if out.shape != true.shape or not torch.equal(out, true.to(out.dtype)):
                raise OracleFailure("parity", f"output {position} ({out.dtype}) is not exactly the truth")
            continue
        kernel, stock = output_error(out, true), output_error(stock, true)
        stock_failure = None
        if not math.isfinite(stock.error_ulp):
            stock_failure = (f"output {position}: stock op error is {stock.error_ulp} ULP "
                             f"({stock.non_finite} non-finite elements where the truth is finite)")
        reports.append(BandReport(
            kernel_error_ulp=kernel.error_ulp,
            stock_error_ulp=stock.error_ulp,
            allowed_error_ulp=FLOOR_ULP if stock_failure else max(STOCK_FACTOR * stock.error_ulp, FLOOR_ULP),
            kernel_relative_rms=kernel.relative_rms,
            stock_relative_rms=stock.relative_rms,
            kernel_non_finite=kernel.non_finite,
            stock_failure=stock_failure,
        ))
    return reports


def check_band(output, stock_output, truth, what: str, expected=None) -> BandReport:
    """Raise OracleFailure when an output breaks the contract's type, dtype, shape or device (those of
    ``expected``, the reference's output; default the stock op's) or any floating output leaves its band;
    return the worst output's report."""
    output, _ = check_contract_outputs(output, stock_output if expected is None else expected, what)
    reports = band_reports(output, stock_output, truth)
    for position, report in enumerate(reports):
        if report.kernel_non_finite:
            raise OracleFailure("parity", f"{what}: output {position}: {report.kernel_non_finite} non-finite "
                                          f"elements where the float64 truth is finite")
        if not report.passed:
            raise OracleFailure(
                "parity",
                f"{what}: output {position}: error {report.kernel_error_ulp:.3g} ULP exceeds the band "
                f"{report.allowed_error_ulp:.3g} ULP (stock op {report.stock_error_ulp:.3g} ULP; relative RMS "
                f"kernel {report.kernel_relative_rms:.3g}, stock {report.stock_relative_rms:.3g})"
                + (f"; {report.stock_failure}, so the band is the floor" if report.stock_failure else ""),
            )
    worst = max(reports, key=lambda r: r.kernel_error_ulp / r.allowed_error_ulp,
                default=BandReport(0.0, 0.0, FLOOR_ULP, 0.0, 0.0))
    stock_failures = "; ".join(r.stock_failure for r in reports if r.stock_failure)
    return dataclasses.replace(worst, stock_failure=stock_failures or None)
