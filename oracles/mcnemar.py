"""Paired statistics for the accuracy gate: is a candidate worse than its baseline on the same items?

Two implementations (a bf16 kernel and an nvfp4 one, say) are run on the same n items. Each item gives
a pair of outcomes (baseline right?, candidate right?), and the n pairs fill a 2x2 table::

                        candidate right   candidate wrong
    baseline right      both_right        baseline_only
    baseline wrong      candidate_only    both_wrong

Only the discordant pairs (``baseline_only + candidate_only``) carry information about a difference:
under the null hypothesis "the candidate is as good as the baseline", each discordant pair goes
either way with probability 1/2, so ``baseline_only ~ Binomial(discordant, 1/2)``. That is the exact
McNemar test. Pairing is why it is far more sensitive than comparing two accuracies: the noise it
has to beat is the discordance rate (often a few percent between two kernels), not the spread of
two independent binomials (2 p (1 - p) / n, up to 0.5 / n).

Everything here is op-agnostic and does no I/O. Accuracies and differences are fractions (0..1).
The convention for the difference is ``candidate - baseline`` (negative = the candidate is worse); a
*drop* is its negation.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

# scipy.stats is imported by the functions that use it: a tool's --help (tools/accuracy-gate) does without.

# The power at which the gate states the smallest drop it could detect (the usual 80%, beta = 0.2,
# the same as TensorRT-LLM's accuracy suite uses for its minimum detectable effect).
DETECTION_POWER = 0.8


def _require_count(argument: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise ValueError(f"{argument}: expected a count (an int >= 0), got {value!r} — pass the number of pairs")
    return int(value)


def _require_probability(argument: str, value: float, what: str) -> float:
    if not (isinstance(value, (int, float, np.floating)) and 0.0 < float(value) < 1.0):
        raise ValueError(f"{argument}: {what} must be strictly between 0 and 1, got {value!r} — pass e.g. 0.05")
    return float(value)


@dataclasses.dataclass(frozen=True)
class PairedTable:
    """The 2x2 table of paired outcomes; see the module docstring for the layout."""

    both_right: int
    baseline_only: int
    candidate_only: int
    both_wrong: int

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            _require_count(field.name, getattr(self, field.name))

    @classmethod
    def from_outcomes(cls, baseline_right, candidate_right) -> PairedTable:
        """Count the table from two equally long sequences of booleans, one pair per item."""
        baseline = np.asarray(baseline_right, dtype=bool)
        candidate = np.asarray(candidate_right, dtype=bool)
        if baseline.shape != candidate.shape or baseline.ndim != 1:
            raise ValueError(
                f"candidate_right: expected one outcome per baseline outcome, got shapes "
                f"{baseline.shape} and {candidate.shape} — pass two 1-D sequences of equal length")
        return cls(both_right=int(np.sum(baseline & candidate)),
                   baseline_only=int(np.sum(baseline & ~candidate)),
                   candidate_only=int(np.sum(~baseline & candidate)),
                   both_wrong=int(np.sum(~baseline & ~candidate)))

    @property
    def pairs(self) -> int:
        return self.both_right + self.baseline_only + self.candidate_only + self.both_wrong

    @property
    def discordant(self) -> int:
        return self.baseline_only + self.candidate_only

    @property
    def baseline_accuracy(self) -> float:
        return (self.both_right + self.baseline_only) / self.pairs

    @property
    def candidate_accuracy(self) -> float:
        return (self.both_right + self.candidate_only) / self.pairs

    @property
    def difference(self) -> float:
        """Candidate accuracy minus baseline accuracy: ``(candidate_only - baseline_only) / pairs``."""
        return (self.candidate_only - self.baseline_only) / self.pairs

    @property
    def discordance_rate(self) -> float:
        return self.discordant / self.pairs


def exact_p_two_sided(table: PairedTable) -> float:
    """Exact (conditional) McNemar p-value, two-sided: ``min(1, 2 P(X <= min(b, c)))``, X ~ Bin(b + c, 1/2).

    The same value as ``statsmodels.stats.contingency_tables.mcnemar(table, exact=True)``; 1 when there
    are no discordant pairs.
    """
    from scipy.stats import binom
    smaller = min(table.baseline_only, table.candidate_only)
    return min(1.0, 2.0 * float(binom.cdf(smaller, table.discordant, 0.5)))


def mid_p_two_sided(table: PairedTable) -> float:
    """McNemar mid-p: the exact two-sided p minus the probability of the observed table.

    ``2 (P(X <= k) - P(X = k) / 2)`` with ``k = min(b, c)``. The exact test is conservative (its real
    size is well under alpha when there are few discordant pairs); the mid-p is close to nominal size
    (Fagerland, Lydersen & Laake 2013, BMC Med. Res. Methodol. 13:91). Reported, not used to decide.
    """
    from scipy.stats import binom
    smaller = min(table.baseline_only, table.candidate_only)
    cumulative = float(binom.cdf(smaller, table.discordant, 0.5))
    at_observed = float(binom.pmf(smaller, table.discordant, 0.5))
    return min(1.0, 2.0 * (cumulative - 0.5 * at_observed))


def exact_p_degradation(table: PairedTable) -> float:
    """One-sided exact p for "the candidate is worse": ``P(X >= b)``, X ~ Bin(b + c, 1/2).

    This is the p-value the gate decides on (``scipy.stats.binomtest(b, b + c, 0.5,
    alternative="greater")``); 1 when there are no discordant pairs.
    """
    from scipy.stats import binom
    return float(binom.sf(table.baseline_only - 1, table.discordant, 0.5))


def difference_interval(table: PairedTable, confidence: float = 0.95) -> tuple[float, float]:
    """Confidence interval for ``candidate - baseline`` accuracy: Wald with the Bonett-Price adjustment.

    One pseudo-count is added to each discordant cell and two to n (Bonett & Price 2012, Stat. Med.
    31:3139), then the Wald interval of the paired difference is taken. Fagerland, Lydersen & Laake
    (2014, Stat. Med. 33:2850) recommend it for its coverage close to nominal at every n, unlike plain
    Wald, which collapses to a zero-width interval when b = c = 0. Clipped to [-1, 1].
    """
    from scipy.stats import norm
    _require_probability("confidence", confidence, "the confidence level")
    z = float(norm.ppf(0.5 + confidence / 2.0))
    adjusted_n = table.pairs + 2
    candidate_only = (table.candidate_only + 1) / adjusted_n
    baseline_only = (table.baseline_only + 1) / adjusted_n
    center = candidate_only - baseline_only
    half_width = z * math.sqrt((candidate_only + baseline_only - center ** 2) / adjusted_n)
    return max(-1.0, center - half_width), min(1.0, center + half_width)


def degradation_critical_counts(max_discordant: int, alpha: float) -> np.ndarray:
    """``critical[D]``: the fewest baseline-only pairs among D discordant ones that the gate rejects.

    The gate rejects when ``exact_p_degradation <= alpha``, i.e. when ``baseline_only >= critical[D]``;
    ``critical[D] == D + 1`` means that no outcome with D discordant pairs can be rejected (for
    alpha = 0.05 that is every D < 5, since 0.5**4 > 0.05). Used by the power calculation and by the
    simulation, so both judge exactly as the gate does.
    """
    from scipy.stats import binom
    _require_count("max_discordant", max_discordant)
    _require_probability("alpha", alpha, "the significance level")
    discordant = np.arange(max_discordant + 1)
    # isf gives the largest x with P(X > x) <= alpha; the smallest rejected count is one more.
    return binom.isf(alpha, discordant, 0.5).astype(np.int64) + 1


def detection_power(pairs: int, background_discordance: float, drop: float, alpha: float) -> float:
    """Probability that the gate rejects a candidate whose accuracy is ``drop`` below the baseline.

    The model: the two implementations disagree on a fraction ``background_discordance`` of items
    even when neither is worse (half each way: rounding noise), and the candidate additionally gets
    wrong a fraction ``drop`` of items that the baseline gets right. So per item
    ``P(baseline_only) = background/2 + drop`` and ``P(candidate_only) = background/2``; the count of
    discordant pairs D is Binomial(pairs, background + drop) and, given D, baseline_only is
    Binomial(D, P(baseline_only) / (background + drop)). Exact sum over D (restricted to where its
    probability is not negligible).
    """
    from scipy.stats import binom
    _require_count("pairs", pairs)
    if not 0.0 <= background_discordance <= 1.0:
        raise ValueError(f"background_discordance: must be in [0, 1], got {background_discordance!r}")
    if not 0.0 <= drop <= 1.0 - background_discordance:
        raise ValueError(f"drop: must be in [0, 1 - background_discordance], got {drop!r}")
    discordance = background_discordance + drop
    if pairs == 0 or discordance == 0.0:
        return 0.0
    # Outside mean +- 12 standard deviations the binomial mass of D is below 1e-30.
    mean = pairs * discordance
    spread = 12.0 * math.sqrt(pairs * discordance * (1.0 - discordance)) + 12.0
    low, high = max(0, int(mean - spread)), min(pairs, int(math.ceil(mean + spread)))
    counts = np.arange(low, high + 1)
    critical = degradation_critical_counts(high, alpha)[low:]
    share_baseline_only = (background_discordance / 2.0 + drop) / discordance
    rejected_given_count = binom.sf(critical - 1, counts, share_baseline_only)
    return float(np.sum(binom.pmf(counts, pairs, discordance) * rejected_given_count))


def minimum_detectable_drop(pairs: int, background_discordance: float, alpha: float,
                            power: float = DETECTION_POWER) -> float | None:
    """The smallest true drop (a fraction) that the gate rejects with probability >= ``power``.

    Found by bisection on ``detection_power`` (increasing in the drop) to 1e-6. ``None`` when no drop
    reaches that power at this sample size (e.g. n < 5 at alpha = 0.05: no table can be significant).
    """
    _require_probability("power", power, "the power")
    largest = 1.0 - background_discordance
    if detection_power(pairs, background_discordance, largest, alpha) < power:
        return None
    low, high = 0.0, largest
    while high - low > 1e-6:
        middle = (low + high) / 2.0
        if detection_power(pairs, background_discordance, middle, alpha) >= power:
            high = middle
        else:
            low = middle
    return high


@dataclasses.dataclass(frozen=True)
class PairedComparison:
    """Everything the gate reports for one table."""

    table: PairedTable
    alpha: float
    p_two_sided: float
    mid_p: float
    p_degradation: float
    difference_ci95: tuple[float, float]
    minimum_detectable_drop: float | None

    @property
    def significantly_worse(self) -> bool:
        return self.p_degradation <= self.alpha


def compare(table: PairedTable, alpha: float) -> PairedComparison:
    """All statistics of one table. The minimum detectable drop takes the observed discordance rate as
    the background rate: conservative when the candidate really is worse (its extra failures inflate
    the discordance, and more discordance means a larger detectable drop)."""
    _require_probability("alpha", alpha, "the significance level")
    if table.pairs == 0:
        raise ValueError("table: has no pairs — the gate needs at least one paired item")
    return PairedComparison(
        table=table,
        alpha=alpha,
        p_two_sided=exact_p_two_sided(table),
        mid_p=mid_p_two_sided(table),
        p_degradation=exact_p_degradation(table),
        difference_ci95=difference_interval(table, 0.95),
        minimum_detectable_drop=minimum_detectable_drop(table.pairs, table.discordance_rate, alpha),
    )
