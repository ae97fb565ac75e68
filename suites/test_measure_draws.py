"""``suites.measure_draws`` measures on a GPU the wrong implementations only a GPU makes wrong (the GPU suites'
``WRONG_ON_GPU``), and on the CPU only those the interpreter can tell wrong (the suites' ``WRONG``)."""
from __future__ import annotations

import pytest
import torch

from suites.attention.test_paged_decode_nvfp4kv import WRONG
from suites.measure_draws import rare_catch_depth, seed_column, wrong_implementations

pytestmark = pytest.mark.cpu


def test_gpu_only_wrong_implementations_are_measured_on_a_gpu_only():
    def measured(device):
        return [(name, named) for _, name, _, named in
                wrong_implementations(["paged_decode_nvfp4kv"], None, torch.device(device))]

    on_cpu, on_gpu = measured("cpu"), measured("cuda")
    assert on_cpu == [(row[0], row[1]) for row in WRONG]
    assert on_gpu == on_cpu + [("scores_on_tensor_cores", "dense_nvfp4_kv")]


def test_each_seed_depth_is_shown_missed_included():
    assert seed_column({0: 6, 1: 28, 2: None}) == "0: 6, 1: 28, 2: missed"
    assert seed_column({}) == ""


def test_a_rare_catch_is_read_at_the_depth_that_misses_it_once_in_a_hundred():
    # two catches at draw 10: a chance of 2 in 20 a draw, 0.9 ** 44 < 0.01 <= 0.9 ** 43
    assert rare_catch_depth({0: 10, 1: 10}, max_depth=50) == 44
    # a seed that missed all of its 30 draws counts them: 1 catch in 40 draws, 0.975 ** 182 < 0.01
    assert rare_catch_depth({0: 10, 1: None}, max_depth=30) == 182
    assert rare_catch_depth({0: 1, 1: 1}, max_depth=30) == 1
    assert rare_catch_depth({0: 0}, max_depth=30) == 0          # a corner or the refusal table: no chance in it
    assert rare_catch_depth({0: None, 1: None}, max_depth=30) is None


def test_a_seed_that_misses_leaves_the_worst_a_miss_and_the_later_seeds_measured(monkeypatch):
    from types import SimpleNamespace

    import suites.measure_draws as measure_draws

    caught_at = {0: 5, 1: None, 2: 7}   # seed 1 misses every draw; seed 2 after it catches
    monkeypatch.setattr(measure_draws, "catch_depth",
                        lambda entry, impl, cell, limit, deadline, device, seed, watch: (caught_at[seed], "parity", 9))
    entry = SimpleNamespace(cells=[SimpleNamespace(id="only")])
    worst, caught_by, _, finished, by_seed = measure_draws.measure(
        entry, None, "only", (2, 50), seeds=[0, 1, 2], deadline=float("inf"), device=torch.device("cpu"), watch=None)
    assert (worst, caught_by, finished) == (None, "", True)
    assert by_seed == caught_at   # stopping at seed 1's miss would leave seed 2 out of the rare-catch estimate
    assert measure_draws.rare_catch_depth(by_seed, 50) == measure_draws.rare_catch_depth(caught_at, 50)
