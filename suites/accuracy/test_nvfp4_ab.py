"""tools/nvfp4-ab: the end-to-end A/B writes lm-eval samples that the gate reads, and its NVFP4 arm
differs from the bf16 arm only by the quantization (lossless weights give identical samples).

Needs the NVFP4 reference (``references.formats.nvfp4``, the quant helper's file); skipped with that
reason on a branch that does not have it yet.
"""
import json

import pytest
import torch

pytest.importorskip("references.formats.nvfp4", reason="the NVFP4 reference has not landed on this branch")

from tools import accuracy_gate, nvfp4_ab  # noqa: E402  (after the skip: it imports the reference)

pytestmark = pytest.mark.cpu

LM_EVAL_FIELDS = {"doc_id", "doc", "target", "arguments", "resps", "filtered_resps", "filter", "metrics",
                  "doc_hash", "prompt_hash", "target_hash", "acc"}


def test_ab_writes_lm_eval_samples_and_returns_the_gate_verdict(tmp_path, capsys):
    code = nvfp4_ab.main(["--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert code in (0, 1)
    assert ("accuracy-gate: FAIL" in out) == (code == 1) and ("accuracy-gate: PASS" in out) == (code == 0)
    assert "filter none: 1000 pairs" in out
    for arm in ("bf16", "nvfp4"):
        (path,) = (tmp_path / f"digits-mlp-{arm}").glob("samples_digits_*.jsonl")
        lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
        assert len(lines) == 1000 and all(set(line) == LM_EVAL_FIELDS for line in lines)
        assert [line["doc_id"] for line in lines] == list(range(1000))
        accuracy = sum(line["acc"] for line in lines) / len(lines)
        assert accuracy > 0.9, f"{arm}: the MLP should learn digits (got {accuracy:.3f})"


def exactly_representable_linear(rows: int, columns: int) -> torch.nn.Linear:
    """Weights that NVFP4 holds exactly: E2M1 values times 7/64, a 6 in every 16-block, so that
    amax = 21/32, global_scale = 448 * 6 / amax = 4096 and every block scale is 448 (exact in e4m3)."""
    magnitudes = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])
    generator = torch.Generator().manual_seed(5)
    codes = magnitudes[torch.randint(0, 8, (rows, columns), generator=generator)]
    codes[:, ::16] = 6.0
    signs = torch.where(torch.rand(rows, columns, generator=generator) < 0.5, -1.0, 1.0)
    linear = torch.nn.Linear(columns, rows)
    with torch.no_grad():
        linear.weight.copy_(codes * signs * (7 / 64))
    return linear


def test_lossless_weights_give_identical_arms_and_a_passing_gate(tmp_path, capsys):
    """Positive control of the A/B's plumbing: with weights NVFP4 represents exactly, the two arms must
    be bitwise equal and the gate must see no discordant pair."""
    linears = [exactly_representable_linear(32, 64), exactly_representable_linear(10, 32)]
    with torch.no_grad():
        reference, quantized = nvfp4_ab.bf16_weights(linears), nvfp4_ab.nvfp4_weights(linears)
        assert all(torch.equal(q, r) for q, r in zip(quantized, reference))
        images = torch.rand(200, 64, generator=torch.Generator().manual_seed(6))
        labels = torch.randint(0, 10, (200,), generator=torch.Generator().manual_seed(7))
        paths = [nvfp4_ab.write_samples(tmp_path, arm, "2025-01-01T00-00-00", torch.arange(200), labels,
                                        nvfp4_ab.class_log_likelihoods(images, weights, linears))
                 for arm, weights in (("bf16", reference), ("nvfp4", quantized))]
    assert paths[0].read_bytes() == paths[1].read_bytes()
    assert accuracy_gate.main([str(path) for path in paths]) == 0
    assert "0 discordant pairs" in capsys.readouterr().out
