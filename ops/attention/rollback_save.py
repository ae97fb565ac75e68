"""attention/rollback_save — save the paged slots a speculative step is about to overwrite.

Contract (CONTRACTS.md, ``references/attention/paged_slots.py``): ``rollback_save(plane[P, S, *E],
page_table int32[B, M], positions int32[B, T]) -> saved[B, T, *E]``; position t of row b lives at
``plane[page_table[b, t // S], t % S]``; an entry is live when ``t >= 0``, ``t // S < M`` and its page is
``>= 0``; ``saved`` holds the live entries' slots and zero elsewhere; any dtype (bits are copied);
bitwise.  ``rollback_restore`` (its sibling) writes rejected entries back with the same kernel.

Bytes: read ``4 * B * T`` of positions and ``4 * L`` of page ids, and ``L * E * itemsize`` of the
plane, write ``B * T * E * itemsize`` of saved, for L live entries.

One kernel serves both directions (``RESTORE``): a program holds ENTRIES consecutive (row, step)
entries by BLOCK_E elements of their slots, finds each entry's slot once (position, then page id:
two dependent loads), then sweeps the E elements of the slots in BLOCK_E chunks.  Dead entries load
nothing: masked lanes move no memory.  Elements are copied as same-width integers, so NaN payloads,
-0.0 and every e4m3 bit pattern survive.  When the trailing dims of both tensors are dense (the
usual cache layout), an element's offset is its flat index and loads vectorize to 16 bytes;
otherwise it is computed from the two trailing strides.
"""
from __future__ import annotations

import dataclasses
import math

import torch
import triton
import triton.language as tl

from ops.catalog import ALL_ARCHS, BenchCase, Cell, Entry, OneOf, Parity, Span
from references.attention import paged_slots
from references.attention import rollback_save as contract
from references.validation import require_within_limits

SWEEP_BYTES = 4096     # one sweep covers up to 4 KB of a slot (a [8, 128] bf16 KV slot is 2 KB)
TILE_BYTES = 8192      # bytes a program moves per sweep: 16 B per lane of 4 warps, 4 vectors each
MAX_ENTRIES = 1024     # entries per program when slots are tiny (E = 1)
_SAME_WIDTH_INTS = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


# -- launch plan ----------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class LaunchPlan:
    entries: int      # (row, step) entries per program
    block_e: int      # elements of a slot per sweep
    programs: int
    num_warps: int


def launch_plan(entries: int, elements: int, element_size: int, tile_bytes: int = TILE_BYTES,
                num_warps: int = 4) -> LaunchPlan:
    # A whole slot per sweep up to 4 KB, so most slots take one sweep and each entry's slot lookup
    # (two dependent loads) is paid once per sweep of BLOCK_E elements.
    block_e = max(1, min(triton.next_power_of_2(elements), SWEEP_BYTES // element_size))
    # Enough entries per program for 8 KB a sweep: with 4 warps that is 4 16-byte vectors per lane in
    # flight.  [512, 16, 8, 128] bf16 restore: 4 entries per program, 2048 programs, one wave on 132 SMs.
    per_program = max(1, min(MAX_ENTRIES, tile_bytes // (block_e * element_size),
                             triton.next_power_of_2(max(entries, 1))))
    return LaunchPlan(entries=per_program, block_e=block_e, programs=triton.cdiv(entries, per_program),
                      num_warps=num_warps)


# -- kernel ---------------------------------------------------------------------------------------
# Sizes and metadata strides change from call to call and gain nothing from specialization (each
# distinct specialization is a compile).  The plane's and saved's strides and the slot's element count
# stay specialized: their divisibility by 16 is what lets the slot copies (and their masks) vectorize.
# The metadata's alignment neither (per-entry loads at row, step offsets: no vector to widen).
@triton.jit(do_not_specialize=["pages", "slots_per_page", "page_table_row_stride", "pages_per_row",
                               "positions_row_stride", "steps", "entries", "rejected_row_stride", "e1_size"],
            do_not_specialize_on_alignment=["page_table_ptr", "positions_ptr", "rejected_ptr"])
def _copy_live_slots(
    # the plane [P, S, E0, E1] (any strides; a missing trailing dim has size 1)
    plane_ptr, plane_page_stride, plane_slot_stride, plane_e0_stride, plane_e1_stride, pages, slots_per_page,
    # where the step writes
    page_table_ptr, page_table_row_stride, page_table_column_stride, pages_per_row,
    positions_ptr, positions_row_stride, positions_column_stride, steps, entries,
    # restore only: which entries were rejected
    rejected_ptr, rejected_row_stride, rejected_column_stride,
    # saved [B, T, E0, E1] (written by save, read by restore)
    saved_ptr, saved_row_stride, saved_step_stride, saved_e0_stride, saved_e1_stride,
    e1_size, elements,
    # meta
    ENTRIES: tl.constexpr, BLOCK_E: tl.constexpr, DENSE_E: tl.constexpr, RESTORE: tl.constexpr,
):
    entry = tl.program_id(0) * ENTRIES + tl.arange(0, ENTRIES)
    in_step = entry < entries
    row = (entry // steps).to(tl.int64)
    step = (entry % steps).to(tl.int64)
    position = tl.load(positions_ptr + row * positions_row_stride + step * positions_column_stride,
                       mask=in_step, other=-1)
    logical_page = position // slots_per_page          # only used where position >= 0
    in_table = in_step & (position >= 0) & (logical_page < pages_per_row)
    page = tl.load(page_table_ptr + row * page_table_row_stride + logical_page.to(tl.int64) * page_table_column_stride,
                   mask=in_table, other=-1)
    # page < pages: a page id past the plane is outside the contract; never let it reach memory
    live = in_table & (page >= 0) & (page < pages)
    if RESTORE:
        rejected = tl.load(rejected_ptr + row * rejected_row_stride + step * rejected_column_stride,
                           mask=live, other=0)
        moved = live & (rejected != 0)
    else:
        moved = live
    slot = page.to(tl.int64) * plane_page_stride + (position % slots_per_page).to(tl.int64) * plane_slot_stride
    saved_entry = row * saved_row_stride + step * saved_step_stride
    for start in range(0, elements, BLOCK_E):
        element = start + tl.arange(0, BLOCK_E)
        in_slot = element < elements
        if DENSE_E:
            plane_element = element
            saved_element = element
        else:
            e0 = (element // e1_size).to(tl.int64)
            e1 = (element % e1_size).to(tl.int64)
            plane_element = e0 * plane_e0_stride + e1 * plane_e1_stride
            saved_element = e0 * saved_e0_stride + e1 * saved_e1_stride
        plane_at = plane_ptr + slot[:, None] + plane_element[None, :]
        saved_at = saved_ptr + saved_entry[:, None] + saved_element[None, :]
        copy = moved[:, None] & in_slot[None, :]
        if RESTORE:
            tl.store(plane_at, tl.load(saved_at, mask=copy), mask=copy)
        else:
            # dead entries store zeros: saved is fully written
            tl.store(saved_at, tl.load(plane_at, mask=copy, other=0), mask=in_step[:, None] & in_slot[None, :])


# -- host side: one launcher for both directions --------------------------------------------------
def _trailing(tensor: torch.Tensor, leading: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """The trailing dims after ``leading`` as exactly two (size, stride) pairs (missing dims: size 1)."""
    sizes, strides = tuple(tensor.shape[leading:]), tuple(tensor.stride()[leading:])
    padding = 2 - len(sizes)
    return (1,) * padding + sizes, (0,) * padding + strides


def _dense(sizes: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """Whether element (e0, e1) sits at flat offset e0 * E1 + e1 (dims of size 1 have no stride)."""
    expected = 1
    for size, stride in zip(reversed(sizes), reversed(strides)):
        if size != 1 and stride != expected:
            return False
        expected *= size
    return True


def copy_live_slots(plane: torch.Tensor, page_table: torch.Tensor, positions: torch.Tensor,
                    saved: torch.Tensor, rejected: torch.Tensor | None, plan: LaunchPlan | None = None) -> None:
    """Save (``rejected is None``: plane -> saved, zeros for dead entries) or restore (saved -> plane,
    rejected live entries only), on already-validated arguments; ``plan`` overrides the launch plan
    (``tools/bench --variants``)."""
    batch, steps = positions.shape
    elements = math.prod(plane.shape[2:])
    if batch * steps == 0 or elements == 0:
        return
    (_, e1_size), (plane_e0_stride, plane_e1_stride) = _trailing(plane, 2)
    e_sizes, (saved_e0_stride, saved_e1_stride) = _trailing(saved, 2)
    dense = _dense(e_sizes, (plane_e0_stride, plane_e1_stride)) and \
        _dense(e_sizes, (saved_e0_stride, saved_e1_stride))
    plan = plan or launch_plan(batch * steps, elements, plane.element_size())
    restore = rejected is not None
    flags = rejected.view(torch.uint8) if restore else positions   # save never reads it
    bits = _SAME_WIDTH_INTS[plane.element_size()]
    _copy_live_slots[(plan.programs,)](
        plane.view(bits), plane.stride(0), plane.stride(1), plane_e0_stride, plane_e1_stride,
        plane.shape[0], plane.shape[1],
        page_table, page_table.stride(0), page_table.stride(1), page_table.shape[1],
        positions, positions.stride(0), positions.stride(1), steps, batch * steps,
        flags, flags.stride(0), flags.stride(1),
        saved.view(bits), saved.stride(0), saved.stride(1), saved_e0_stride, saved_e1_stride,
        e1_size, elements,
        ENTRIES=plan.entries, BLOCK_E=plan.block_e, DENSE_E=dense, RESTORE=restore, num_warps=plan.num_warps,
    )


def kernel_limits(plane, page_table, positions, saved=None, rejected=None) -> str | None:
    """This kernel's own limits (either direction), narrower than the contract's ``[P, S, *E]`` of any dtype:
    it addresses at most two trailing dims, copies 1- to 8-byte integers and divides by S."""
    if plane.dim() > 4:
        return f"plane: {plane.dim() - 2} trailing dims (shape {tuple(plane.shape)}); this kernel takes at most 2"
    if plane.element_size() not in _SAME_WIDTH_INTS:
        return f"plane: {plane.element_size()}-byte {plane.dtype} elements; this kernel copies 1, 2, 4 or 8 bytes"
    if plane.shape[1] == 0:
        return "plane: pages of S = 0 slots; this kernel divides positions by S"
    return None


def rollback_save(plane: torch.Tensor, page_table: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    contract.validate(plane, page_table, positions)
    require_within_limits(kernel_limits(plane, page_table, positions))
    saved = torch.empty((*positions.shape, *plane.shape[2:]), dtype=plane.dtype, device=plane.device)
    copy_live_slots(plane, page_table, positions, saved, rejected=None)
    return saved


# -- catalog entry --------------------------------------------------------------------------------
def params_of(plane, page_table, positions, saved=None, rejected=None):
    """Cell parameters of either rollback op (restore also passes ``saved`` and ``rejected``)."""
    return {"B": positions.shape[0], "T": positions.shape[1], "M": page_table.shape[1], "S": plane.shape[1],
            "E_dims": plane.dim() - 2, "E": math.prod(plane.shape[2:]), "dtype": plane.dtype}


_PLANE_DTYPES = OneOf((torch.bfloat16, torch.float32, torch.uint8, torch.float8_e4m3fn))
_PLANE_STEP = {"T": Span(0, 16), "M": Span(0, 4096), "S": Span(1, 256), "dtype": _PLANE_DTYPES}
CELLS = (
    Cell("empty_batch", "a step with no running sequences (B = 0) must launch nothing",
         {"B": Span(0, 0), "E_dims": OneOf((1, 2)), "E": Span(0, 4096), **_PLANE_STEP}),
    Cell("row_slots", "one trailing dim: MLA latent caches [P, S, 576] bf16, DSA indexer keys [P, S, 132] uint8, "
                      "index-score planes fp32; B 1..512, T 0..16",
         {"B": Span(1, 512), "E_dims": OneOf((1,)), "E": Span(1, 1024), **_PLANE_STEP}),
    Cell("head_slots", "two trailing dims: GQA KV caches [P, S, Hkv, D] (Hkv 1..16, D up to 256) in bf16 or e4m3; "
                       "B 1..512, T 0..16",
         {"B": Span(1, 512), "E_dims": OneOf((2,)), "E": Span(1, 4096), **_PLANE_STEP}),
)

ENTRY = Entry.of_contract(
    contract,
    kernel=rollback_save,
    parity=Parity.BITWISE,
    params_of=params_of,
    cells=CELLS,
    archs=ALL_ARCHS,
    batch_invariant=True,
    batch_args=("page_table", "positions"),
    siblings=("rollback_restore",),
    properties=(paged_slots.rollback_restoration,),
    limits=kernel_limits,
)
