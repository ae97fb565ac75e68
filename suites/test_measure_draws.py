"""``suites.measure_draws`` measures on a GPU the wrong implementations only a GPU makes wrong (the GPU suites'
``WRONG_ON_GPU``), and on the CPU only those the interpreter can tell wrong (the suites' ``WRONG``)."""
from __future__ import annotations

import pytest
import torch

from suites.attention.test_paged_decode_nvfp4kv import WRONG
from suites.measure_draws import seed_column, wrong_implementations

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
