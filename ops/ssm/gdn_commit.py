"""ssm/gdn_commit — keep each row's state after its last accepted drafted token.

Contract (CONTRACTS.md): ``gdn_commit(state, slots, checkpoints, num_accepted) -> None``, in place:
``state[slots[b]] = checkpoints[b, num_accepted[b] - 1]`` where ``num_accepted[b] >= 1``; rows that
accepted nothing and padding rows leave their slot alone; nothing else in the pool changes.  Bitwise.

Bytes: read and write one ``HV * Dk * Dv`` slot per committing row (at B=64, HV=32, Dk=Dv=128 fp32:
128 MiB each way, 62 us at 4.3 TB/s copy bandwidth).

A copy of raw bits: the pool and checkpoints are viewed as same-width integers, so no float path
(the interpreter's bf16 conversion, a NaN payload, a -0.0) can change a bit on the way.
"""
from __future__ import annotations

import dataclasses

import torch
import triton
import triton.language as tl

from ops.catalog import ALL_ARCHS, Cell, Entry, OneOf, Parity, Span
from ops.triton_backend import interpreting
from ops.triton_masks import block_and
from references.ssm import gdn_commit as contract
from references.validation import require_within_limits

_BITS = {2: torch.int16, 4: torch.int32}


# -- launch plan ----------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class LaunchPlan:
    block: int   # elements per load/store sweep
    chunk: int   # elements of a slot per program (a multiple of block)


def launch_plan(slot_elements: int, interpreted: bool) -> LaunchPlan:
    if interpreted:
        # about 3 ms per program and per sweep under the interpreter, whatever its size: one program per
        # row sweeps its whole slot in blocks as large as Triton allows
        block = min(2**20, triton.next_power_of_2(slot_elements))
        return LaunchPlan(block=block, chunk=triton.cdiv(slot_elements, block) * block)
    # 4096 elements (16 KB fp32) per program: a 128x128x32-head slot is 128 programs per row, and a
    # commit of 64 rows is 8192 programs, enough to keep every SM's loads in flight.
    block = min(4096, triton.next_power_of_2(slot_elements))
    return LaunchPlan(block=block, chunk=block)


# -- kernel ---------------------------------------------------------------------------------------
@triton.jit(do_not_specialize=["num_slots", "slots_stride", "accepted_stride", "tokens"])
def _commit_rows(
    state_ptr, state_stride_slot, num_slots, slots_ptr, slots_stride,
    checkpoints_ptr, checkpoints_stride_b, checkpoints_stride_t, accepted_ptr, accepted_stride, tokens,
    chunk,
    SLOT_ELEMENTS: tl.constexpr, BLOCK: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    part = tl.program_id(1)
    slot = tl.load(slots_ptr + row * slots_stride).to(tl.int64)
    accepted = tl.minimum(tl.load(accepted_ptr + row * accepted_stride), tokens).to(tl.int64)
    commits = (slot >= 0) & (slot < num_slots) & (accepted >= 1)
    source = checkpoints_ptr + row * checkpoints_stride_b + (accepted - 1) * checkpoints_stride_t
    target = state_ptr + slot * state_stride_slot
    start = part * chunk
    for offset in range(start, start + chunk, BLOCK):
        elements = offset + tl.arange(0, BLOCK)
        inside = block_and(elements < SLOT_ELEMENTS, commits)
        tl.store(target + elements, tl.load(source + elements, mask=inside), mask=inside)


# -- host wrapper ---------------------------------------------------------------------------------
def kernel_limits(state, slots, checkpoints, num_accepted) -> str | None:
    """This kernel's own limits: it copies each slot, and each checkpoint, as one contiguous block."""
    if not state[:1].is_contiguous():
        return f"state: strides {state.stride()}; this kernel writes each slot as one contiguous [HV, Dk, Dv] block"
    if not checkpoints[:1, :1].is_contiguous():
        return (f"checkpoints: strides {checkpoints.stride()}; this kernel reads each checkpoint as one contiguous "
                "[HV, Dk, Dv] block")
    return None


def gdn_commit(state, slots, checkpoints, num_accepted) -> None:
    contract.validate(state, slots, checkpoints, num_accepted)
    require_within_limits(kernel_limits(state, slots, checkpoints, num_accepted))
    batch, tokens = checkpoints.shape[:2]
    if batch == 0:
        return
    slot_elements = state[0].numel()
    plan = launch_plan(slot_elements, interpreting())
    bits = _BITS[state.element_size()]
    grid = (batch, triton.cdiv(slot_elements, plan.chunk))
    _commit_rows[grid](
        state.view(bits), state.stride(0), state.shape[0], slots, slots.stride(0),
        checkpoints.view(bits), checkpoints.stride(0), checkpoints.stride(1), num_accepted, num_accepted.stride(0),
        tokens, plan.chunk,
        SLOT_ELEMENTS=slot_elements, BLOCK=plan.block, num_warps=4,
    )


# -- catalog entry --------------------------------------------------------------------------------
def params_of(state, slots, checkpoints, num_accepted):
    heads_v, dk, dv = state.shape[1:]
    return {"B": checkpoints.shape[0], "T": checkpoints.shape[1], "HV": heads_v, "Dk": dk, "Dv": dv,
            "state_dtype": state.dtype}


_COMMON = {"B": Span(0, 256), "T": Span(1, 8), "HV": Span(1, 128), "Dk": OneOf((64, 128)), "Dv": OneOf((64, 128))}
CELLS = (
    Cell("fp32_state", "commit after verifying up to 8 drafted tokens on an fp32 pool",
         {**_COMMON, "state_dtype": OneOf((torch.float32,))}),
    Cell("bf16_state", "commit on a bf16 pool: a copy of bits, never a float conversion",
         {**_COMMON, "state_dtype": OneOf((torch.bfloat16,))}),
)

ENTRY = Entry.of_contract(
    contract,
    kernel=gdn_commit,
    parity=Parity.BITWISE,
    params_of=params_of,
    cells=CELLS,
    archs=ALL_ARCHS,
    in_place=("state",),
    siblings=("gdn_decode", "gdn_verify"),
    limits=kernel_limits,
)
