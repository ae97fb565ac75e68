"""Contract ``ssm/gdn_decode`` (band), in executable form — and the one-token Gated DeltaNet step that
``gdn_verify`` and ``gdn_commit`` build on.

A pool holds one recurrent state per slot, ``state[S, HV, Dk, Dv]`` (fp32 or bf16).  For row b with
``slot = slots[b]`` and v head i (which reads q/k head ``i // (HV // H)``), one token does, starting
from ``h = state[slot, i]`` and all in fp32::

    h = h * exp(g);  u = beta * (v - h^T k);  h = h + outer(k, u);  o = scale * (h^T q)

and then rounds h to the state dtype; that rounded value is the state from then on.  ``qk_l2norm=True``
first replaces q and k by ``x / sqrt(sum(x^2) + 1e-6)``.  ``gdn_decode`` runs one token per row, in
place on ``state[slots[b]]``; a padding row gives o = 0 and reads and writes no state.

Refused: the contract's Refuse line (shape/dtype mismatch, HV not a multiple of H) and non-tensors.
Everything else the signature allows is answered: any strides of q, k, v, g, beta and of the pool and
its slots (column-strided q included), ``scale`` a number or a one-element tensor, an int
``qk_l2norm`` read as a bool.  The kernels' narrower limits (unit-stride head dims, contiguous
slots, a host ``scale``) are theirs: ``ops/ssm/gdn_decode.kernel_limits``.  Sizes outside the signature
(no heads, empty head dims, a verify step of T = 0 tokens) are refused here, demanded of no one.

Where the contract is silent (values only the device sees are never checked by a sync):
- any slot outside ``0..S-1``, not only -1, is a padding row;
- ``scale`` enters the arithmetic as an fp32 number (a Python float is rounded to fp32 first).

Truth (float64) follows the step order above and rounds h to the state dtype after every token, with a
single rounding (:func:`references.formats.bf16.round_float64_to_bf16`: torch's float64 -> bf16 cast
rounds twice).  The rounded value *is* the state the next token starts from, so truth and kernel walk
the same sequence of states and the band judges only the fp32 arithmetic inside a step; an unrounded
float64 truth would instead charge every bf16 pool with its own rounding and hide a sloppy step under
it.  Outputs o are returned unrounded (the band measures their rounding); the state after a step is the
rounded value.  The stock op is the same step in float32 torch, as a serving engine's fallback runs it; the
legitimate implementations (``LEGITIMATE_ORDERS``) are that step with its sums over Dk in each order of
``references/orders.py``.
"""
from __future__ import annotations

import numbers

import torch

from oracles.band_limit import BandLimit
from oracles.in_place import check_in_place_step
from oracles.tensors import clone_inputs
from references import orders
from references.formats.bf16 import round_float64_to_bf16
from references.validation import (Refusal, refuse, require_dtype, require_ndim, require_same_device,
                                   require_shape, require_tensor)

STATE_DTYPES = (torch.float32, torch.bfloat16)
L2NORM_EPS = 1e-6


# -- validation shared by the three ops -----------------------------------------------------------
def validate_tokens(q, k, v, g, beta, token_axis: bool) -> tuple[int, int, int, int, int, int]:
    """q, k ``[B, (T,) H, Dk]`` bf16; v ``[B, (T,) HV, Dv]`` bf16; g, beta ``[B, (T,) HV]`` fp32.

    Returns ``(B, T, H, HV, Dk, Dv)`` (T = 1 without a token axis)."""
    t = ", T" if token_axis else ""
    ndim = 4 if token_axis else 3
    for name, tensor, layout in (("q", q, f"[B{t}, H, Dk]"), ("k", k, f"[B{t}, H, Dk]"),
                                 ("v", v, f"[B{t}, HV, Dv]")):
        require_tensor(name, tensor)
        require_ndim(name, tensor, ndim, layout)
        require_dtype(name, tensor, (torch.bfloat16,))
    for name, tensor in (("g", g), ("beta", beta)):
        require_tensor(name, tensor)
        require_ndim(name, tensor, ndim - 1, f"[B{t}, HV]")
        require_dtype(name, tensor, (torch.float32,))
    require_shape("k", k, q.shape, f"[B{t}, H, Dk] like q")
    batch, tokens = q.shape[0], (q.shape[1] if token_axis else 1)
    heads, dk = q.shape[-2], q.shape[-1]
    heads_v, dv = v.shape[-2], v.shape[-1]
    require_shape("v", v, (batch, *((tokens,) if token_axis else ()), heads_v, dv), f"[B{t}, HV, Dv] with q's B{t}")
    if token_axis and tokens == 0:
        raise refuse("q", "T = 0 tokens", "pass at least one token per row")
    if heads == 0 or dk == 0 or dv == 0:
        raise refuse("q" if dv else "v", f"H = {heads}, Dk = {dk}, Dv = {dv}", "heads and head sizes must be >= 1")
    if heads_v % heads:
        raise refuse("v", f"HV = {heads_v} heads is not a multiple of q/k's H = {heads}",
                     "grouped value heads need HV % H == 0")
    for name, tensor in (("g", g), ("beta", beta)):
        require_shape(name, tensor, v.shape[:-1], f"[B{t}, HV] like v")
    return batch, tokens, heads, heads_v, dk, dv


def validate_pool(state, heads_v: int, dk: int, dv: int) -> None:
    """``state[S, HV, Dk, Dv]`` fp32 or bf16, any strides."""
    require_tensor("state", state)
    require_ndim("state", state, 4, "[S, HV, Dk, Dv]")
    require_dtype("state", state, STATE_DTYPES)
    if tuple(state.shape[1:]) != (heads_v, dk, dv):
        raise refuse("state", f"slot shape {tuple(state.shape[1:])} is not (HV, Dk, Dv) = {(heads_v, dk, dv)}",
                     "pass a pool [S, HV, Dk, Dv] matching v's heads and q/v's head sizes")


def validate_row_ints(name: str, tensor, batch: int) -> None:
    require_tensor(name, tensor)
    require_ndim(name, tensor, 1, "[B]")
    require_dtype(name, tensor, (torch.int32,))
    require_shape(name, tensor, (batch,), "[B], one entry per row")


def validate_scalars(scale, qk_l2norm) -> None:
    """``scale``: a Python number or a one-element floating tensor (the contract does not type it);
    ``qk_l2norm``: a bool, or an int read as one."""
    if isinstance(scale, torch.Tensor):
        require_dtype("scale", scale, (torch.float32, torch.float64, torch.bfloat16, torch.float16))
        if scale.numel() != 1:
            raise refuse("scale", f"a tensor of {scale.numel()} elements", "pass one number, e.g. Dk ** -0.5")
    elif isinstance(scale, bool) or not isinstance(scale, numbers.Real):
        raise TypeError(f"scale: expected a Python number, got {type(scale).__name__} — pass e.g. Dk ** -0.5")
    if not isinstance(qk_l2norm, numbers.Integral):
        raise TypeError(f"qk_l2norm: expected a bool, got {type(qk_l2norm).__name__} — pass True or False")


def validate(q, k, v, g, beta, state, slots, scale, qk_l2norm=False) -> None:
    batch, _, _, heads_v, dk, dv = validate_tokens(q, k, v, g, beta, token_axis=False)
    validate_pool(state, heads_v, dk, dv)
    validate_row_ints("slots", slots, batch)
    validate_scalars(scale, qk_l2norm)
    require_same_device({"q": q, "k": k, "v": v, "g": g, "beta": beta, "state": state, "slots": slots})


# -- the step -------------------------------------------------------------------------------------
def l2_normalize(x: torch.Tensor, order: orders.Order | None = None) -> torch.Tensor:
    squares = x * x
    total = squares.sum(-1, keepdim=True) if order is None else order.over_last(squares)[..., None]
    return x / torch.sqrt(total + L2NORM_EPS)


def _contract_dk(h: torch.Tensor, x: torch.Tensor, order: orders.Order | None) -> torch.Tensor:
    """``h^T x`` over Dk: h ``[N, HV, Dk, Dv]``, x ``[N, HV, Dk]`` -> ``[N, HV, Dv]``, in ``order``."""
    if order is None:
        return torch.einsum("nhkv,nhk->nhv", h, x)
    return order.over_last((h * x[..., :, None]).transpose(-1, -2))


def token_step(h, q, k, v, g, beta, scale: float, order: orders.Order | None = None):
    """One token for N (row, v head) pairs at once, in h's dtype, the sums over Dk in ``order`` (None:
    torch's own).

    h ``[N, HV, Dk, Dv]``; q, k ``[N, HV, Dk]`` (q/k heads already repeated to the v heads);
    v ``[N, HV, Dv]``; g, beta ``[N, HV]``.  Returns ``(o [N, HV, Dv], h)``, h not yet rounded.
    """
    h = h * torch.exp(g)[..., None, None]
    u = beta[..., None] * (v - _contract_dk(h, k, order))
    h = h + k[..., :, None] * u[..., None, :]
    return scale * _contract_dk(h, q, order), h


def round_to_state(h: torch.Tensor, state_dtype: torch.dtype) -> torch.Tensor:
    """h rounded once to the state dtype, kept in h's dtype."""
    if h.dtype == torch.float64 and state_dtype == torch.bfloat16:
        return round_float64_to_bf16(h)
    return h.to(state_dtype).to(h.dtype)


def live_rows(slots: torch.Tensor, num_slots: int) -> torch.Tensor:
    return (slots >= 0) & (slots < num_slots)


def recurrence(q, k, v, g, beta, state, slots, num_tokens, scale, qk_l2norm, compute_dtype, order=None):
    """Tokens ``0..num_tokens[b]-1`` of every live row, from ``state[slots[b]]``, in ``compute_dtype``
    (the sums over Dk in ``order``, a ``references.orders.Order``; None: torch's own).

    q, k ``[B, T, H, Dk]``; v ``[B, T, HV, Dv]``; g, beta ``[B, T, HV]``; ``num_tokens`` int ``[B]``,
    clamped to ``0..T``.  Returns ``o [B, T, HV, Dv]`` and ``states [B, T, HV, Dk, Dv]`` (the state
    after each token, rounded to ``state.dtype``), zero for padding rows and tokens past a row's count.
    Reads ``state``, never writes it.
    """
    batch, tokens, heads, dk = q.shape
    heads_v, dv = v.shape[2], v.shape[3]
    group = heads_v // heads
    o = torch.zeros(batch, tokens, heads_v, dv, dtype=compute_dtype, device=q.device)
    states = torch.zeros(batch, tokens, heads_v, dk, dv, dtype=compute_dtype, device=q.device)
    live = live_rows(slots, state.shape[0])
    counts = torch.where(live, num_tokens.clamp(0, tokens), 0)
    rows = live.nonzero()[:, 0]
    h = state[slots[rows].long()].to(compute_dtype)
    scale = float(torch.tensor(float(scale), dtype=torch.float32))   # a tensor scale is read (a sync)
    for t in range(tokens):
        q_t, k_t = q[rows, t].to(compute_dtype), k[rows, t].to(compute_dtype)
        if qk_l2norm:
            q_t, k_t = l2_normalize(q_t, order), l2_normalize(k_t, order)
        q_t, k_t = q_t.repeat_interleave(group, dim=1), k_t.repeat_interleave(group, dim=1)
        o_t, h_t = token_step(h, q_t, k_t, v[rows, t].to(compute_dtype), g[rows, t].to(compute_dtype),
                              beta[rows, t].to(compute_dtype), scale, order)
        h_t = round_to_state(h_t, state.dtype)
        # tokens past a row's count may hold garbage (NaN): where() keeps it out of everything
        active = (t < counts[rows])[:, None, None]
        o[rows, t] = torch.where(active, o_t, 0)
        states[rows, t] = torch.where(active[..., None], h_t, 0)
        h = torch.where(active[..., None], h_t, h)
    return o, states


def _one_token(q, k, v, g, beta):
    return q[:, None], k[:, None], v[:, None], g[:, None], beta[:, None]


def _decode_in(compute_dtype, q, k, v, g, beta, state, slots, scale, qk_l2norm, order=None):
    """(o [B, HV, Dv], the rows' new states, the live rows) of one token, in ``compute_dtype``."""
    ones = torch.ones_like(slots)
    o, states = recurrence(*_one_token(q, k, v, g, beta), state, slots, ones, scale, qk_l2norm, compute_dtype,
                           order)
    return o[:, 0], states[:, 0], live_rows(slots, state.shape[0]).nonzero()[:, 0]


# -- the contract -----------------------------------------------------------------------------------
def truth(q, k, v, g, beta, state, slots, scale, qk_l2norm=False):
    """float64 ``(o, state after the call)``: what the band compares the op's o and state with."""
    o, new_states, rows = _decode_in(torch.float64, q, k, v, g, beta, state, slots, scale, qk_l2norm)
    after = state.to(torch.float64)
    after[slots[rows].long()] = new_states[rows]
    return o, after


def gdn_decode(q, k, v, g, beta, state, slots, scale, qk_l2norm=False):
    validate(q, k, v, g, beta, state, slots, scale, qk_l2norm)
    o, new_states, rows = _decode_in(torch.float64, q, k, v, g, beta, state, slots, scale, qk_l2norm)
    state[slots[rows].long()] = new_states[rows].to(state.dtype)  # already representable: exact
    return round_float64_to_bf16(o).to(torch.bfloat16)


def stock(q, k, v, g, beta, state, slots, scale, qk_l2norm=False):
    """The same step in float32 torch: gather the rows' states, step, scatter back."""
    o, new_states, rows = _decode_in(torch.float32, q, k, v, g, beta, state, slots, scale, qk_l2norm)
    state[slots[rows].long()] = new_states[rows].to(state.dtype)
    return o.to(torch.bfloat16)


def gdn_decode_in_order(q, k, v, g, beta, state, slots, scale, qk_l2norm=False, *, order: orders.Order):
    """The step in float32 with its sums over Dk (``h^T k``, ``h^T q``, the l2 norms) in ``order``."""
    validate(q, k, v, g, beta, state, slots, scale, qk_l2norm)
    o, new_states, rows = _decode_in(torch.float32, q, k, v, g, beta, state, slots, scale, qk_l2norm, order)
    state[slots[rows].long()] = new_states[rows].to(state.dtype)
    return o.to(torch.bfloat16)


LEGITIMATE_ORDERS = orders.legitimate_orders(gdn_decode_in_order)
# under qk_l2norm the new state is k / |k| times u: |k| an fp32 sum of Dk <= 128 squares, which the sequential
# order rounds by up to 5 ULP of the state's row on the H200 (a zero state, Dk = 128): a band of 10
BAND_LIMIT = BandLimit(16.0, "the state carries k's l2 norm, an fp32 sum of Dk <= 128 squares "
                             "(5 ULP measured for the sequential order on the H200)")


# -- stateful property ------------------------------------------------------------------------------
def writes_only_live_slots(impl, kwargs) -> None:
    """A decode call changes no byte of the pool's storage outside the live rows' slots (band parity
    would let a small write through, and a padding row written "through -1" lands on the pool's last
    slot in torch).  What the live slots hold is the band's to judge: their expected value is the pool
    itself, read after the call."""
    call = clone_inputs(kwargs)
    state, slots = call["state"], call["slots"]
    owned = torch.zeros(state.shape[0], dtype=torch.bool, device=state.device)
    owned[slots[live_rows(slots, state.shape[0])].long()] = True
    check_in_place_step(state, lambda: impl["gdn_decode"](**call), owned, state,
                        "gdn_decode: the pool outside the live rows' slots")


# -- refused inputs ---------------------------------------------------------------------------------
def make_inputs(device, batch=2, heads=2, heads_v=4, dk=64, dv=64, slots_in_pool=3, state_dtype=torch.float32,
                tokens=None):
    """Small valid inputs (a token axis when ``tokens`` is given): the base every refusal breaks once."""
    lead = (batch,) if tokens is None else (batch, tokens)
    generator = torch.Generator(device=device).manual_seed(0)

    def rand(*shape, dtype=torch.float32):
        return torch.randn(*shape, generator=generator, device=device).to(dtype)

    return {
        "q": rand(*lead, heads, dk, dtype=torch.bfloat16), "k": rand(*lead, heads, dk, dtype=torch.bfloat16),
        "v": rand(*lead, heads_v, dv, dtype=torch.bfloat16),
        "g": -rand(*lead, heads_v).abs(), "beta": rand(*lead, heads_v).sigmoid(),
        "state": rand(slots_in_pool, heads_v, dk, dv, dtype=state_dtype),
        "slots": torch.arange(batch, dtype=torch.int32, device=device),
        "scale": dk ** -0.5,
    }


def _with(**changes):
    def make(device):
        kwargs = make_inputs(device)
        for name, change in changes.items():
            kwargs[name] = change(kwargs[name], device)
        return kwargs
    return make


# the Refuse-line items of CONTRACTS.md the rows of all three ops enforce
MISMATCH, GROUPED_HEADS = "shape/dtype mismatch", "HV not a multiple of H"

REFUSALS = (
    Refusal("q without its head axis", _with(q=lambda q, d: q[:, 0]), "q", clause=MISMATCH),
    Refusal("fp16 q", _with(q=lambda q, d: q.half()), "q", TypeError, clause=MISMATCH),
    Refusal("fp32 k", _with(k=lambda k, d: k.float()), "k", TypeError, clause=MISMATCH),
    Refusal("k with another head count", _with(k=lambda k, d: k[:, :1]), ("k", "q"), clause=MISMATCH),
    Refusal("HV not a multiple of H", _with(v=lambda v, d: v[:, :3], g=lambda g, d: g[:, :3],
                                            beta=lambda b, d: b[:, :3],
                                            state=lambda s, d: s[:, :3].contiguous()), ("v", "q", "k"),
            clause=GROUPED_HEADS),
    Refusal("v of another batch", _with(v=lambda v, d: v[:1]), ("v", "q"), clause=MISMATCH),
    Refusal("bf16 g", _with(g=lambda g, d: g.bfloat16()), "g", TypeError, clause=MISMATCH),
    Refusal("beta per q head instead of per v head", _with(beta=lambda b, d: b[:, :2]), ("beta", "v"),
            clause=MISMATCH),
    Refusal("fp16 state", _with(state=lambda s, d: s.half()), "state", TypeError, clause=MISMATCH),
    Refusal("state of another Dk", _with(state=lambda s, d: s[:, :, :32].contiguous()), ("state", "q", "k"),
            clause=MISMATCH),
    Refusal("int64 slots", _with(slots=lambda s, d: s.long()), "slots", TypeError, clause=MISMATCH),
    Refusal("slots of another batch", _with(slots=lambda s, d: s[:1]), ("slots", "q"), clause=MISMATCH),
    Refusal("not a tensor", _with(q=lambda q, d: q.tolist()), "q", TypeError, clause="non-tensor"),
)
