"""oracles.mcnemar against independent implementations: statsmodels' exact McNemar, scipy's binomial
test, exact rational arithmetic, a published example, and simulated coverage/size."""
from fractions import Fraction
from math import comb

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import binomtest
from statsmodels.stats.contingency_tables import mcnemar as statsmodels_mcnemar

from oracles import mcnemar
from oracles.mcnemar import PairedTable

pytestmark = pytest.mark.cpu

cell = st.integers(min_value=0, max_value=400)
tables = st.builds(PairedTable, cell, cell, cell, cell)

# Edge tables the issue names: no discordant pairs, all discordant pairs one way, n = 1.
EDGE_TABLES = [
    PairedTable(0, 0, 0, 0),
    PairedTable(50, 0, 0, 30),  # b + c = 0
    PairedTable(40, 12, 0, 9),  # every discordant pair against the candidate
    PairedTable(40, 0, 12, 9),  # every discordant pair for the candidate
    PairedTable(0, 4, 0, 0),
    PairedTable(0, 5, 0, 0),
    PairedTable(1, 0, 0, 0),  # n = 1, each cell
    PairedTable(0, 1, 0, 0),
    PairedTable(0, 0, 1, 0),
    PairedTable(0, 0, 0, 1),
]


def statsmodels_p(table: PairedTable) -> float:
    layout = [[table.both_right, table.baseline_only], [table.candidate_only, table.both_wrong]]
    return float(statsmodels_mcnemar(layout, exact=True).pvalue)


def rational_mid_p(table: PairedTable) -> Fraction:
    """Mid-p from exact integer arithmetic: 2 (sum_{i<k} C(D, i) + C(D, k) / 2) / 2**D, capped at 1."""
    smaller, discordant = min(table.baseline_only, table.candidate_only), table.discordant
    tail = sum(comb(discordant, i) for i in range(smaller)) + Fraction(comb(discordant, smaller), 2)
    return min(Fraction(1), 2 * tail / 2 ** discordant)


@settings(max_examples=300, deadline=None)
@given(tables)
def test_two_sided_p_matches_statsmodels_exact_mcnemar(table):
    assert mcnemar.exact_p_two_sided(table) == pytest.approx(statsmodels_p(table), rel=1e-10, abs=1e-300)


@pytest.mark.parametrize("table", EDGE_TABLES, ids=str)
def test_two_sided_p_matches_statsmodels_on_edge_tables(table):
    assert mcnemar.exact_p_two_sided(table) == pytest.approx(statsmodels_p(table), rel=1e-12)


@settings(max_examples=300, deadline=None)
@given(tables)
def test_p_values_match_scipy_binomtest(table):
    if table.discordant == 0:
        # binomtest needs n >= 1; with no discordant pair there is no evidence either way.
        assert mcnemar.exact_p_degradation(table) == mcnemar.exact_p_two_sided(table) == 1.0
        return
    worse = binomtest(table.baseline_only, table.discordant, 0.5, alternative="greater").pvalue
    both = binomtest(table.baseline_only, table.discordant, 0.5).pvalue
    assert mcnemar.exact_p_degradation(table) == pytest.approx(worse, rel=1e-10, abs=1e-300)
    assert mcnemar.exact_p_two_sided(table) == pytest.approx(both, rel=1e-10, abs=1e-300)


@pytest.mark.parametrize("table", EDGE_TABLES, ids=str)
def test_edge_tables_give_the_known_p_values(table):
    b, c = table.baseline_only, table.candidate_only
    expected_degradation = 1.0 if b == 0 else 0.5 ** b if c == 0 else None
    if expected_degradation is not None:
        assert mcnemar.exact_p_degradation(table) == pytest.approx(expected_degradation, rel=1e-12)
    if b + c == 0:
        assert mcnemar.exact_p_two_sided(table) == mcnemar.mid_p_two_sided(table) == 1.0


@settings(max_examples=200, deadline=None)
@given(tables)
def test_mid_p_matches_exact_rational_arithmetic(table):
    assert mcnemar.mid_p_two_sided(table) == pytest.approx(float(rational_mid_p(table)), rel=1e-9, abs=1e-300)
    assert mcnemar.mid_p_two_sided(table) <= mcnemar.exact_p_two_sided(table)


def test_published_example_exact_and_mid_p():
    # Fagerland, Lydersen & Laake (2013), BMC Med. Res. Methodol. 13:91, the airway
    # hyper-responsiveness example (Bentur et al.): b = 1, c = 7 discordant pairs of 21;
    # they report exact conditional P = 0.070 and mid-P = 0.039.
    table = PairedTable(both_right=1, baseline_only=1, candidate_only=7, both_wrong=12)
    assert mcnemar.exact_p_two_sided(table) == pytest.approx(18 / 256, rel=1e-12)
    assert round(mcnemar.exact_p_two_sided(table), 3) == 0.070
    assert round(mcnemar.mid_p_two_sided(table), 3) == 0.039


@pytest.mark.parametrize("alpha", [0.05, 0.01, 0.1, 0.5 ** 5])
def test_critical_counts_decide_exactly_as_the_p_value(alpha):
    critical = mcnemar.degradation_critical_counts(300, alpha)
    for discordant in range(301):
        # Either side of the boundary, and both ends, is where an off-by-one would show.
        near_boundary = set(range(critical[discordant] - 2, critical[discordant] + 2)) | {0, discordant}
        for baseline_only in sorted(b for b in near_boundary if 0 <= b <= discordant):
            table = PairedTable(0, baseline_only, discordant - baseline_only, 0)
            rejected = mcnemar.exact_p_degradation(table) <= alpha
            assert rejected == (baseline_only >= critical[discordant]), (discordant, baseline_only)


@pytest.mark.parametrize("pairs, background", [(1319, 0.0), (1319, 0.02), (1319, 0.3), (60, 0.1), (5, 0.0)])
def test_power_at_zero_drop_is_at_most_alpha_and_rises_with_the_drop(pairs, background):
    alpha = 0.05
    assert mcnemar.detection_power(pairs, background, 0.0, alpha) <= alpha
    drops = np.linspace(0.0, 0.5, 26)
    powers = [mcnemar.detection_power(pairs, background, drop, alpha) for drop in drops]
    assert all(later >= earlier - 1e-12 for earlier, later in zip(powers, powers[1:]))


@pytest.mark.parametrize("pairs, background", [(1319, 0.0), (1319, 0.05), (1319, 0.375), (200, 0.1)])
def test_minimum_detectable_drop_is_the_80_percent_power_point(pairs, background):
    drop = mcnemar.minimum_detectable_drop(pairs, background, 0.05)
    assert mcnemar.detection_power(pairs, background, drop, 0.05) >= 0.8
    assert mcnemar.detection_power(pairs, background, drop - 1e-4, 0.05) < 0.8


def test_minimum_detectable_drop_matches_monte_carlo():
    """Simulate the gate at the computed drop: about 80% of candidates must be rejected."""
    pairs, background, alpha = 1319, 0.05, 0.05
    drop = mcnemar.minimum_detectable_drop(pairs, background, alpha)
    rng = np.random.default_rng(20240817)
    counts = rng.multinomial(pairs, [0.6, background / 2 + drop, background / 2, 0.4 - background - drop],
                             size=20000)
    critical = mcnemar.degradation_critical_counts(pairs, alpha)
    rejected = counts[:, 1] >= critical[counts[:, 1] + counts[:, 2]]
    assert abs(rejected.mean() - 0.8) < 4 * np.sqrt(0.8 * 0.2 / 20000)


def test_no_drop_is_detectable_below_five_pairs_at_alpha_005():
    # 0.5**4 = 0.0625 > 0.05: four discordant pairs, all one way, are not significant.
    assert mcnemar.minimum_detectable_drop(4, 0.0, 0.05) is None
    assert mcnemar.minimum_detectable_drop(1, 0.0, 0.05) is None
    assert mcnemar.minimum_detectable_drop(5, 0.0, 0.05) is not None


@pytest.mark.parametrize("pairs, baseline_only, candidate_only",
                         [(1319, 0.02, 0.02), (1319, 0.04, 0.01), (40, 0.05, 0.05), (25, 0.1, 0.0)])
def test_difference_interval_covers_the_true_difference(pairs, baseline_only, candidate_only):
    """Simulated coverage of the 95% interval is near nominal (Bonett-Price keeps >= ~93% even at small n)."""
    rng = np.random.default_rng(pairs * 1000 + int(1000 * baseline_only))
    both_right = 0.7 - baseline_only
    draws = rng.multinomial(pairs, [both_right, baseline_only, candidate_only,
                                    1 - both_right - baseline_only - candidate_only], size=3000)
    truth = candidate_only - baseline_only
    covered = 0
    for a, b, c, d in draws:
        low, high = mcnemar.difference_interval(PairedTable(int(a), int(b), int(c), int(d)))
        covered += low <= truth <= high
    assert covered / len(draws) >= 0.93


def test_difference_interval_edges():
    low, high = mcnemar.difference_interval(PairedTable(50, 0, 0, 30))
    assert low < 0 < high and low == pytest.approx(-high)  # no discordance is not certainty
    low, high = mcnemar.difference_interval(PairedTable(0, 1, 0, 0))
    assert -1.0 <= low < high <= 1.0
    low, high = mcnemar.difference_interval(PairedTable(0, 400, 0, 0))
    assert low >= -1.0 and high < -0.95


def test_compare_reports_a_truly_worse_candidate_and_passes_an_equal_one():
    worse = mcnemar.compare(PairedTable(950, 40, 10, 319), alpha=0.05)
    assert worse.significantly_worse and worse.table.difference == pytest.approx(-30 / 1319)
    equal = mcnemar.compare(PairedTable(950, 12, 12, 345), alpha=0.05)
    assert not equal.significantly_worse
    better = mcnemar.compare(PairedTable(950, 10, 40, 319), alpha=0.05)
    assert not better.significantly_worse


def test_from_outcomes_counts_each_cell():
    table = PairedTable.from_outcomes([1, 1, 1, 0, 0, 1], [1, 0, 0, 1, 0, 1])
    assert table == PairedTable(both_right=2, baseline_only=2, candidate_only=1, both_wrong=1)


@pytest.mark.parametrize("make, argument", [
    (lambda: PairedTable(-1, 0, 0, 0), "both_right"),
    (lambda: PairedTable(0, 1.5, 0, 0), "baseline_only"),
    (lambda: PairedTable.from_outcomes([1, 0], [1]), "candidate_right"),
    (lambda: mcnemar.compare(PairedTable(1, 0, 0, 0), alpha=0.0), "alpha"),
    (lambda: mcnemar.compare(PairedTable(1, 0, 0, 0), alpha=1.5), "alpha"),
    (lambda: mcnemar.compare(PairedTable(0, 0, 0, 0), alpha=0.05), "table"),
    (lambda: mcnemar.difference_interval(PairedTable(1, 0, 0, 0), confidence=95), "confidence"),
    (lambda: mcnemar.detection_power(100, 0.5, 0.6, 0.05), "drop"),
    (lambda: mcnemar.minimum_detectable_drop(100, 0.1, 0.05, power=1.0), "power"),
])
def test_refused_arguments_name_the_argument(make, argument):
    with pytest.raises(ValueError, match=f"^{argument}:"):
        make()
