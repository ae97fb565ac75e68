"""Inputs for the Gated DeltaNet ops: recipe fields, budgets, and the tensors a recipe builds.

A recipe holds the sizes (``B``, ``H``, ``group`` = HV / H, ``Dk``, ``Dv``, ``T``, ``free_slots``: pool
slots no row uses), the kinds (``state_dtype``, ``qk_l2norm``, ``scale``, ``layout``, ``values``,
``padding``, ``slots``, per-op ``tokens`` / ``accepted``) and a ``seed``.  Shapes never depend on the
seed; which rows are padding, which slot each row owns and every value do.

What the builder plants, and why:
- padding rows (slot -1) whose q, k, v, g, beta are NaN: a kernel that lets them reach o or the pool
  shows it; and drafted tokens past a row's count are NaN too;
- a pool larger than the batch whose other slots hold other sequences' states (or 1e30 garbage): a
  read of the wrong slot blows up, a write to one is seen bit for bit; ``slots = last_slot_free`` keeps
  the last slot unowned, where a padding row written "through -1" lands in torch;
- layouts a serving engine passes: q, k, v as views of one fused projection (row stride > H * Dk,
  garbage after v), and a pool whose slots are strided (vLLM's hybrid allocator pads pages), with ``slots``
  (and verify's and commit's counts) a column of a per-row metadata table (stride 2, offset 1, another
  row's value beside each: ``metadata_column``); and, in a
  corner, q, k, v every other element of a wider buffer: the contract answers any strides, the kernel
  refuses them (its own limit), and a judged implementation must answer right or refuse clearly;
- value kinds: ``typical``; ``edges`` (g in {0, -0.0, -1e-7, -80, -1e4, -inf}, beta 0 or 1, one-hot
  q/k and every third q/k vector zero, zero v on a row's first token (with beta <= 1/2 there:
  ``Builder.tokens``), fresh zero states); ``large`` (states ~1e3, v ~1e3, raw q/k up to 1e4 under
  in-kernel L2 norm).  Without ``qk_l2norm`` q and k arrive unit-norm, as the model sends them: the delta
  rule is only contractive for ``beta * |k|^2 <= 2``.
"""
from __future__ import annotations

import torch
from hypothesis import strategies as st

from references.strategies.shapes import product_cap, seeds, sizes

VALUES = ("typical", "edges", "large")
PADDING = ("none", "some", "ends", "all")
SLOTS = ("shuffled", "last_slot_free", "last_slot_live")
LAYOUTS = ("contiguous", "fused_projection", "strided_pool")
SERVING_LAYOUTS = ("fused_projection", "strided_pool")   # slots too are a strided column of a metadata table
COLUMN_STRIDED = "column_strided"   # a corner's layout: beyond the kernel's limits, inside the contract
SCALES = ("inv_sqrt_dk", "one")


def metadata_column(values: torch.Tensor, beside: torch.Tensor, in_metadata: bool) -> torch.Tensor:
    """``values`` (int32 ``[B]``) as a serving engine passes them where ``in_metadata``: a column of its per-row
    metadata (every other int32 from the second, ``beside`` in the other column, so that a read taking the
    column as dense gets those); else as they are."""
    if not in_metadata:
        return values
    return torch.stack([beside.to(torch.int32), values], dim=1)[:, 1]


# The interpreter costs 25-45 ms per program per token (measured here: one (row, v head) program of
# a 128x128 state), and a decode example runs about a dozen calls plus a 2-token replay: on the CPU keep
# B * HV * tokens under 8.  GPUs take the whole cell, under a state budget: the float64 truth of a
# verify holds B * T * HV * Dk * Dv values (2**27 of them is 1 GiB) beside the op's own copies.
CPU_PROGRAM_TOKENS = 8
GPU_STATE_ELEMENTS = 2**27
GARBAGE = 1e30
# CONTRACTS.md, "Production shapes are corners": head dims as Dk and Dv, GQA groups as v heads per q/k head,
# and (gdn_verify, gdn_commit) speculative depths as drafted tokens T
PRODUCTION_DIMS = {"Dk": ("head_dim",), "Dv": ("head_dim",), "group": ("gqa_group",)}
PRODUCTION_DEPTHS = {"T": ("speculative_depth",)}


def program_tokens_cap(cell, tokens: str | int) -> str | None:
    """What the CPU budget leaves of ``cell`` judged, in words (None: all of it): rows x v heads x ``tokens``
    (a dimension's name, or a number of tokens every call steps) within :data:`CPU_PROGRAM_TOKENS`."""
    if isinstance(tokens, str):
        return product_cap(cell, ("B", "H", "group", tokens), CPU_PROGRAM_TOKENS)
    return product_cap(cell, ("B", "H", "group"), CPU_PROGRAM_TOKENS // tokens)


def head_cap(device, group: int, tokens: int) -> int | None:
    return max(1, CPU_PROGRAM_TOKENS // (group * tokens)) if device.type == "cpu" else None


def batch_cap(device, heads_v: int, dk: int, dv: int, tokens: int) -> int:
    if device.type == "cpu":
        return CPU_PROGRAM_TOKENS // (heads_v * tokens)
    return GPU_STATE_ELEMENTS // (heads_v * dk * dv * tokens)


def with_rows(corners: list[dict]) -> list[dict]:
    """The corners a production size may be set on: those of rows (an empty batch would judge nothing of it)."""
    return [recipe for recipe in corners if recipe["B"] > 0]


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


@st.composite
def draw_shape(draw, cell, device, budget_tokens: int) -> dict:
    """Sizes inside the cell, under the device's budget (``budget_tokens``: tokens a call steps)."""
    bounds = cell.bounds
    group = draw(st.sampled_from(bounds["group"].choices))
    heads = draw(sizes(bounds["H"], cap=head_cap(device, group, budget_tokens)))
    dk, dv = draw(st.sampled_from(bounds["Dk"].choices)), draw(st.sampled_from(bounds["Dv"].choices))
    batch = draw(sizes(bounds["B"], cap=batch_cap(device, heads * group, dk, dv, budget_tokens)))
    return {"B": batch, "H": heads, "group": group, "Dk": dk, "Dv": dv, "free_slots": draw(st.integers(1, 3)),
            "state_dtype": draw(st.sampled_from([dtype_name(d) for d in bounds["state_dtype"].choices]))}


@st.composite
def draw_kinds(draw, cell) -> dict:
    return {"qk_l2norm": draw(st.sampled_from(cell.bounds["qk_l2norm"].choices)),
            "scale": draw(st.sampled_from(SCALES)), "layout": draw(st.sampled_from(LAYOUTS)),
            "values": draw(st.sampled_from(VALUES)), "padding": draw(st.sampled_from(PADDING)),
            "slots": draw(st.sampled_from(SLOTS)), "seed": draw(seeds())}


def fits(recipe: dict, device, budget_tokens: int) -> bool:
    """Whether a fixed corner recipe is inside the device's budget (corners past it are left out)."""
    heads_v = recipe["H"] * recipe["group"]
    cap_h = head_cap(device, recipe["group"], budget_tokens)
    return (cap_h is None or recipe["H"] <= cap_h) and \
        recipe["B"] <= batch_cap(device, heads_v, recipe["Dk"], recipe["Dv"], budget_tokens)


# -- building tensors -------------------------------------------------------------------------------
class Builder:
    """Tensors of one recipe, drawn on ``device`` from a generator seeded by the recipe."""

    def __init__(self, recipe: dict, device):
        self.recipe = recipe
        self.device = torch.device(device)
        self.generator = torch.Generator(device=self.device).manual_seed(recipe["seed"])
        self.batch, self.heads, self.dk, self.dv = recipe["B"], recipe["H"], recipe["Dk"], recipe["Dv"]
        self.heads_v = recipe["H"] * recipe["group"]
        self.pool_slots = self.batch + recipe["free_slots"]
        self.state_dtype = getattr(torch, recipe["state_dtype"])

    def randn(self, *shape) -> torch.Tensor:
        return torch.randn(*shape, generator=self.generator, device=self.device)

    def rand(self, *shape) -> torch.Tensor:
        return torch.rand(*shape, generator=self.generator, device=self.device)

    def coin(self, *shape, p: float) -> torch.Tensor:
        return self.rand(*shape) < p

    @property
    def scale(self) -> float:
        return self.dk ** -0.5 if self.recipe["scale"] == "inv_sqrt_dk" else 1.0

    # -- which slot each row owns ------------------------------------------------------------------
    def slots(self, in_metadata: bool | None = None) -> torch.Tensor:
        """Which slot each row owns; a column of the engine's metadata (``metadata_column``) where
        ``in_metadata``, by default in the serving layouts."""
        mode, batch, pool = self.recipe["slots"], self.batch, self.pool_slots
        if mode == "last_slot_free":
            slots = torch.randperm(pool - 1, generator=self.generator, device=self.device)[:batch]
        else:
            slots = torch.randperm(pool, generator=self.generator, device=self.device)[:batch]
            if mode == "last_slot_live" and batch:
                slots = torch.where(slots == pool - 1, slots[0], slots)
                slots[0] = pool - 1
        slots = torch.where(self.padding_rows(), -1, slots).to(torch.int32)
        in_metadata = self.serving_layout if in_metadata is None else in_metadata
        return metadata_column(slots, (slots + 1) % self.pool_slots, in_metadata)

    @property
    def serving_layout(self) -> bool:
        return self.recipe["layout"] in SERVING_LAYOUTS

    def padding_rows(self) -> torch.Tensor:
        mode, batch = self.recipe["padding"], self.batch
        rows = torch.arange(batch, device=self.device)
        if mode == "none":
            return torch.zeros(batch, dtype=torch.bool, device=self.device)
        if mode == "all":
            return torch.ones(batch, dtype=torch.bool, device=self.device)
        if mode == "ends":
            return (rows == 0) | (rows == batch - 1)
        return self.coin(batch, p=0.25)

    # -- the pool -----------------------------------------------------------------------------------
    def pool(self) -> torch.Tensor:
        slot_shape = (self.heads_v, self.dk, self.dv)
        magnitude = {"typical": 0.5, "edges": 0.5, "large": 1e3}[self.recipe["values"]]
        values = self.randn(self.pool_slots, *slot_shape) * magnitude
        fresh = self.coin(self.pool_slots, 1, 1, 1, p=0.3 if self.recipe["values"] == "edges" else 0.0)
        garbage = self.coin(self.pool_slots, 1, 1, 1, p=0.2)  # freed slots (with_live_states refills owned ones)
        values = torch.where(fresh, 0.0, values)
        values = torch.where(garbage, GARBAGE, values)
        if self.recipe["layout"] == "strided_pool":
            padded = torch.full((self.pool_slots, self.heads_v + 1, self.dk, self.dv), torch.nan, device=self.device)
            state = padded.to(self.state_dtype)[:, :self.heads_v]
        else:
            state = torch.empty(self.pool_slots, *slot_shape, dtype=self.state_dtype, device=self.device)
        state.copy_(values)
        return state

    def with_live_states(self, state: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
        """The slots rows read get real states again: garbage stays where no row reads."""
        owned = slots[slots >= 0].long()
        magnitude = {"typical": 0.5, "edges": 0.5, "large": 1e3}[self.recipe["values"]]
        real = (self.randn(owned.numel(), *state.shape[1:]) * magnitude).to(state.dtype)
        if self.recipe["values"] == "edges":
            real = torch.where(self.coin(owned.numel(), 1, 1, 1, p=0.3), 0.0, real.float()).to(state.dtype)
        state[owned] = real
        return state

    # -- drafted tokens -------------------------------------------------------------------------------
    def tokens(self, lead: tuple, garbage: torch.Tensor) -> dict:
        """q, k, v, g, beta with leading dims ``lead``; positions where ``garbage`` (bool ``lead``) is
        set hold NaN (padding rows, tokens past a row's count)."""
        values, heads, heads_v, dk, dv = self.recipe["values"], self.heads, self.heads_v, self.dk, self.dv
        q, k = self.query_key(lead + (heads, dk)), self.query_key(lead + (heads, dk))
        v = self.randn(*lead, heads_v, dv) * (1e3 if values == "large" else 1.0)
        g = -torch.nn.functional.softplus(self.randn(*lead, heads_v)) * torch.exp(0.5 * self.randn(*lead, heads_v))
        beta = torch.sigmoid(self.randn(*lead, heads_v))
        if values == "edges":
            zero_v = self.coin(*lead, heads_v, p=0.2)
            # only on a row's first token: after one step on a wiped (g -80, -inf) or fresh zero state the
            # memory is rank one, k0 u0^T, and an erase (zero v) leaves row i (k0[i] - beta (k0 . k1) k1[i])
            # u0, a cancellation of each row's scalar to the 2^-24 |k0||k1| of any fp32 dot: every
            # legitimate order 10 to 27 ULP off on the CPU, 135 on the H200 (issue 24)
            if len(lead) > 1:   # a token axis: gdn_verify's drafted tokens
                zero_v[:, 1:] = False
            v = torch.where(zero_v[..., None], 0.0, v)
            choices = torch.tensor([0.0, -0.0, -1e-7, -80.0, -1e4, -torch.inf], device=self.device)
            picked = choices[torch.randint(0, len(choices), g.shape, generator=self.generator, device=self.device)]
            g = torch.where(self.coin(*g.shape, p=0.5), picked, g)
            beta = torch.where(self.coin(*beta.shape, p=0.5), self.coin(*beta.shape, p=0.5).float(), beta)
            # a zero v takes beta <= 1/2: along a one-hot key the step leaves the memory row h (1 - beta |k|^2),
            # a cancellation by 1 / (1 - beta) that no fp32 implementation resolves as beta -> 1 (a 1e-6
            # residue of h at beta = 1 under the L2 norm's eps: E 1.6e6 ULP on the H200, issue 24)
            beta = torch.where(zero_v, beta.clamp(max=0.5), beta)
        tensors = {"q": q, "k": k, "v": v, "g": g, "beta": beta}
        for name, tensor in tensors.items():
            mask = garbage.reshape(*garbage.shape, *([1] * (tensor.dim() - garbage.dim())))
            tensors[name] = torch.where(mask, torch.nan, tensor)
        return self.lay_out(lead, tensors)

    def query_key(self, shape: tuple) -> torch.Tensor:
        values = self.recipe["values"]
        x = self.randn(*shape)
        if values == "edges":
            one_hot = torch.nn.functional.one_hot(torch.randint(0, shape[-1], shape[:-1], generator=self.generator,
                                                                device=self.device), shape[-1]).float()
            x = torch.where(self.coin(*shape[:-1], 1, p=0.3), one_hot, x)
            # every third (row, token, head) vector is zero, so any edges draw has some: 0 / sqrt(0 + eps)
            zero = (torch.arange(x[..., 0].numel(), device=self.device) % 3 == 0).reshape(*shape[:-1], 1)
            x = torch.where(zero, 0.0, x)
        if self.recipe["qk_l2norm"]:
            if values == "large":
                x = x * torch.exp2(self.rand(*shape[:-1], 1) * 14)  # raw rows up to ~1e4
            return x
        return torch.nn.functional.normalize(x, dim=-1)

    def column_strided(self, tensor: torch.Tensor) -> torch.Tensor:
        """``tensor`` as every other element of a buffer twice as wide, NaN between (stride(-1) = 2)."""
        wide = torch.full((*tensor.shape[:-1], 2 * tensor.shape[-1]), torch.nan, device=self.device)
        view = wide.to(tensor.dtype)[..., ::2]
        view.copy_(tensor)
        return view

    def lay_out(self, lead: tuple, tensors: dict) -> dict:
        """bf16 q, k, v and fp32 g, beta, contiguous or as views of fused projections."""
        heads, heads_v, dk, dv = self.heads, self.heads_v, self.dk, self.dv
        if self.recipe["layout"] == COLUMN_STRIDED:
            return {name: self.column_strided(t.to(torch.bfloat16)) if name in ("q", "k", "v") else t.contiguous()
                    for name, t in tensors.items()}
        if self.recipe["layout"] != "fused_projection":
            return {name: t.to(torch.bfloat16) if name in ("q", "k", "v") else t.contiguous()
                    for name, t in tensors.items()}
        # one [*, H*Dk | H*Dk | HV*Dv | 8 garbage] bf16 projection and one [*, HV | HV | 3 garbage] fp32 gate
        width = 2 * heads * dk + heads_v * dv
        projection = torch.full((*lead, width + 8), torch.nan, device=self.device).to(torch.bfloat16)
        parts = (("q", heads, dk), ("k", heads, dk), ("v", heads_v, dv))
        laid, start = {}, 0
        for name, count, size in parts:
            view = projection[..., start:start + count * size].unflatten(-1, (count, size))
            view.copy_(tensors[name])
            laid[name], start = view, start + count * size
        gates = torch.full((*lead, 2 * heads_v + 3), torch.nan, device=self.device)
        laid["g"], laid["beta"] = gates[..., :heads_v], gates[..., heads_v:2 * heads_v]
        laid["g"].copy_(tensors["g"])
        laid["beta"].copy_(tensors["beta"])
        return laid
