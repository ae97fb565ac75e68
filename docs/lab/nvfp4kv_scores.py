"""paged_decode_nvfp4kv's score dot on its own (issue #27): the batched per-block dot as the kernel
wrote it (K decoded by joining the two nibbles), against a 2-D dot, a plain product sum, fp32 FMA dots and
K decoded one byte read per element (the fix), for the group sizes and head dims of the cells.
Found on the H200 (Triton 3.6): every variant fed by the joined decode into 16-wide dots is wrong
(relative error ~1), every other one right (docs/ops/paged_decode_nvfp4kv.md).
Run on the GPU from the repository root: ``python3 docs/lab/nvfp4kv_scores.py``."""
import sys

import torch
import triton
import triton.language as tl

sys.path.insert(0, ".")
from ops.attention.paged_decode import _query_in_fp16  # noqa: E402
from references.formats.e2m1 import e2m1_decode  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
OPERAND = tl.float16 if DEVICE == "cuda" else tl.float32


@triton.jit
def _query_scale(q):
    largest = tl.max(tl.abs(q.to(tl.float32)), axis=1)
    exponent = (largest.to(tl.int32, bitcast=True) >> 23) & 0xFF
    scale_field = tl.minimum(tl.maximum(268 - exponent, 1), 253)
    return (scale_field << 23).to(tl.float32, bitcast=True)


@triton.jit
def _nvfp4_tile(packed_rows, scale_rows, valid, BLOCK_N: tl.constexpr, D: tl.constexpr):
    """The kernel's tile decode before the fix: both nibbles joined (``tl.join(...).reshape``)."""
    packed = tl.load(packed_rows, mask=valid[:, None], other=0).to(tl.int16)
    codes = tl.join(packed & 0xF, packed >> 4).reshape(BLOCK_N, D)
    e2m1 = (((codes & 0x8) << 12) | ((codes & 0x7) << 9)).to(tl.float16, bitcast=True)
    scales = tl.load(scale_rows, mask=valid[:, None], other=0.0).to(tl.float16)
    per_element = tl.broadcast_to(scales[:, :, None], (BLOCK_N, D // 16, 16)).reshape(BLOCK_N, D)
    return e2m1 * per_element


@triton.jit
def _nvfp4_gather(packed_rows, scale_rows, valid, first, BLOCK_N: tl.constexpr, WIDTH: tl.constexpr):
    """``WIDTH`` decoded elements from element ``first`` of each row, each code read from its own byte
    (no tl.join): ``packed_rows``/``scale_rows`` are [BLOCK_N, 1] row addresses."""
    offs = first + tl.arange(0, WIDTH)
    byte = tl.load(packed_rows + (offs // 2)[None, :], mask=valid[:, None], other=0).to(tl.int16)
    codes = tl.where((offs % 2 == 0)[None, :], byte & 0xF, byte >> 4)
    e2m1 = (((codes & 0x8) << 12) | ((codes & 0x7) << 9)).to(tl.float16, bitcast=True)
    scales = tl.load(scale_rows + (offs // 16)[None, :], mask=valid[:, None], other=0.0).to(tl.float16)
    return e2m1 * scales


@triton.jit
def _scores(q_ptr, kc_ptr, ks_ptr, out_ptr, group, MODE: tl.constexpr, GROUP_PAD: tl.constexpr,
            BLOCK_N: tl.constexpr, D: tl.constexpr, OPERAND: tl.constexpr):
    offs_g = tl.arange(0, GROUP_PAD)
    offs_d = tl.arange(0, D)
    offs_n = tl.arange(0, BLOCK_N)
    q = tl.load(q_ptr + offs_g[:, None] * D + offs_d[None, :], mask=(offs_g < group)[:, None], other=0.0)
    q, q_unscale = _query_in_fp16(q)
    k = _nvfp4_tile(kc_ptr + offs_n[:, None] * (D // 2) + tl.arange(0, D // 2)[None, :],
                    ks_ptr + offs_n[:, None] * (D // 16) + tl.arange(0, D // 16)[None, :],
                    offs_n < BLOCK_N, BLOCK_N, D)
    if MODE == 0:    # the kernel's: one 16-wide dot per block, batched, blocks summed in float64
        q3 = tl.permute(tl.reshape(q.to(OPERAND), (GROUP_PAD, D // 16, 16)), (1, 0, 2))
        k3 = tl.permute(tl.reshape(k.to(OPERAND), (BLOCK_N, D // 16, 16)), (1, 2, 0))
        s = tl.sum(tl.dot(q3, k3).to(tl.float64), axis=0)
    elif MODE == 1:  # one 2-D dot over D
        s = tl.dot(q.to(OPERAND), tl.trans(k.to(OPERAND))).to(tl.float64)
    elif MODE == 2:  # the batched dot's operands, multiplied and summed without tl.dot
        q3 = tl.permute(tl.reshape(q.to(tl.float32), (GROUP_PAD, D // 16, 16)), (1, 0, 2))
        k3 = tl.permute(tl.reshape(k.to(tl.float32), (BLOCK_N, D // 16, 16)), (1, 2, 0))
        s = tl.sum(tl.sum(q3[:, :, :, None] * k3[:, None, :, :], axis=2).to(tl.float64), axis=0)
    elif MODE == 3:  # the batched dot on fp32 operands, IEEE products (no tf32)
        q3 = tl.permute(tl.reshape(q.to(tl.float32), (GROUP_PAD, D // 16, 16)), (1, 0, 2))
        k3 = tl.permute(tl.reshape(k.to(tl.float32), (BLOCK_N, D // 16, 16)), (1, 2, 0))
        s = tl.sum(tl.dot(q3, k3, input_precision="ieee").to(tl.float64), axis=0)
    elif MODE == 5 or MODE == 6 or MODE == 7:   # per-block 2-D dots; K decoded without tl.join
        qf = tl.load(q_ptr + offs_g[:, None] * D + offs_d[None, :], mask=(offs_g < group)[:, None], other=0.0)
        scale = _query_scale(qf)
        offs16 = tl.arange(0, 16)
        s = tl.zeros([GROUP_PAD, BLOCK_N], tl.float64)
        if MODE == 6:   # the batched dot, K decoded without join
            kg = _nvfp4_gather(kc_ptr + offs_n[:, None] * (D // 2), ks_ptr + offs_n[:, None] * (D // 16),
                               offs_n < BLOCK_N, 0, BLOCK_N, D)
            q3 = tl.permute(tl.reshape(q.to(OPERAND), (GROUP_PAD, D // 16, 16)), (1, 0, 2))
            k3 = tl.permute(tl.reshape(kg.to(OPERAND), (BLOCK_N, D // 16, 16)), (1, 2, 0))
            s = tl.sum(tl.dot(q3, k3).to(tl.float64), axis=0)
        else:
            for b in tl.static_range(D // 16):
                q_b = tl.load(q_ptr + offs_g[:, None] * D + (16 * b + offs16)[None, :],
                              mask=(offs_g < group)[:, None], other=0.0)
                q_b = (q_b.to(tl.float32) * scale[:, None]).to(tl.float16)
                if MODE == 5:
                    k_b = _nvfp4_gather(kc_ptr + offs_n[:, None] * (D // 2), ks_ptr + offs_n[:, None] * (D // 16),
                                        offs_n < BLOCK_N, 16 * b, BLOCK_N, 16)
                    s += tl.dot(q_b.to(OPERAND), tl.trans(k_b.to(OPERAND))).to(tl.float64)
                else:       # K^T [16, N] decoded directly in its transposed shape
                    offs_k = 16 * b + offs16
                    byte = tl.load(kc_ptr + offs_n[None, :] * (D // 2) + (offs_k // 2)[:, None]).to(tl.int16)
                    codes = tl.where((offs_k % 2 == 0)[:, None], byte & 0xF, byte >> 4)
                    e2m1 = (((codes & 0x8) << 12) | ((codes & 0x7) << 9)).to(tl.float16, bitcast=True)
                    sc = tl.load(ks_ptr + offs_n[None, :] * (D // 16) + (offs_k // 16)[:, None]).to(tl.float16)
                    s += tl.dot(q_b.to(OPERAND), (e2m1 * sc).to(OPERAND)).to(tl.float64)
    else:            # one 2-D dot per 16-element block, each block loaded and decoded on its own
        largest = tl.max(tl.abs(q.to(tl.float32)), axis=1)
        s = tl.zeros([GROUP_PAD, BLOCK_N], tl.float64)
        qf = tl.load(q_ptr + offs_g[:, None] * D + offs_d[None, :], mask=(offs_g < group)[:, None], other=0.0)
        scale = _query_scale(qf)
        offs16 = tl.arange(0, 16)
        for b in tl.static_range(D // 16):
            q_b = tl.load(q_ptr + offs_g[:, None] * D + (16 * b + offs16)[None, :], mask=(offs_g < group)[:, None],
                          other=0.0)
            q_b = (q_b.to(tl.float32) * scale[:, None]).to(tl.float16)
            k_b = _nvfp4_tile(kc_ptr + offs_n[:, None] * (D // 2) + (8 * b + tl.arange(0, 8))[None, :],
                              ks_ptr + offs_n[:, None] * (D // 16) + b + tl.arange(0, 1)[None, :],
                              offs_n < BLOCK_N, BLOCK_N, 16)
            s += tl.dot(q_b.to(OPERAND), tl.trans(k_b.to(OPERAND))).to(tl.float64)
    s = s * q_unscale.to(tl.float64)[:, None]
    tl.store(out_ptr + offs_g[:, None] * BLOCK_N + offs_n[None, :], s)


def main():
    print(torch.__version__, triton.__version__, DEVICE)
    gen = torch.Generator(device=DEVICE).manual_seed(1)
    for D in (64, 128):
        for group, pad in ((1, 1), (1, 16), (4, 4), (4, 16), (16, 16)):
            for block_n in (16, 32):
                q = torch.randn(pad, D, generator=gen, device=DEVICE).to(torch.bfloat16)
                kc = torch.randint(0, 256, (block_n, D // 2), generator=gen, device=DEVICE, dtype=torch.uint8)
                ks = (torch.rand(block_n, D // 16, generator=gen, device=DEVICE) * 4 + 0.1).to(torch.float8_e4m3fn)
                codes = torch.stack([kc & 0xF, kc >> 4], dim=-1).reshape(block_n, D)
                k = e2m1_decode(codes).double() * ks.double().repeat_interleave(16, dim=1) * 2.0 ** -14
                want = q[:group].double() @ k.T
                line = []
                for mode, name in ((0, "batched dot"), (1, "2-D dot"), (2, "product sum"), (3, "batched fp32 ieee"),
                                   (4, "per-block join"), (5, "per-block gather"),
                                   (6, "batched gather"), (7, "per-block K^T gather")):
                    out = torch.zeros(pad, block_n, dtype=torch.float64, device=DEVICE)
                    try:
                        _scores[(1,)](q, kc, ks, out, group, MODE=mode, GROUP_PAD=pad, BLOCK_N=block_n, D=D,
                                      OPERAND=OPERAND)
                        rel = ((out[:group] - want).norm() / want.norm()).item()
                        line.append(f"{name} {rel:.2e}")
                    except Exception as error:  # noqa: BLE001
                        line.append(f"{name} {type(error).__name__}: {str(error)[:80]}")
                print(f"D={D} group={group} pad={pad} N={block_n}: " + "; ".join(line), flush=True)


if __name__ == "__main__":
    main()
