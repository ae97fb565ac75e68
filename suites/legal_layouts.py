"""Correct implementations of every op whose outputs come back in a legal layout the judge did not expect.

Outputs are judged by value (CONTRACTS.md): any tensor of the contract's dtype, shape and device is a legal
answer whatever its strides and storage offset.  Each function here (one per op, named like it) runs a
correct implementation — the contract's reference on the CPU, the catalog's kernel on a GPU (the reference
syncs, so it cannot be captured in a CUDA graph) — and returns every output copied into a layout drawn
afresh for each call, deterministically (call number n draws from ``random.Random(n)``):

- ``contiguous``; ``offset`` (a view into a larger fresh allocation, at a storage offset);
- ``column`` (one column of a fresh ``[*shape, k]``: the last stride is k; ``pair[:, 0]`` of an [R, 2]);
- ``transposed`` (a fresh allocation of the dims in another order, permuted back);
- ``padded`` (rows padded: ``buf[..., :n]``);
- ``shared`` (two or more outputs apart in one fresh allocation);
- and on top of any of them: size-1 dims given arbitrary strides, and a zero-size output any strides.

Every one must pass every cell: ``tools/certify-cells --op OP --impl suites.legal_layouts --device cpu``
(``suites/test_legal_layouts.py``; its docstring gives the command for every op and the GPU).  The
aliasing controls at the end return memory that is not their own and must fail, named as such.
"""
from __future__ import annotations

import functools
import importlib
import itertools
import pathlib
import random

import torch

REFERENCES = pathlib.Path(__file__).resolve().parents[1] / "references"
KINDS = ("contiguous", "offset", "column", "transposed", "padded", "shared")
_CALLS = itertools.count()


def _ops() -> dict[str, str]:
    """Op name -> its contract module: every ``references/<family>/<op>.py`` with a function of its name."""
    found = {}
    for path in sorted(REFERENCES.glob("*/*.py")):
        module = importlib.import_module(f"references.{path.parent.name}.{path.stem}")
        if callable(getattr(module, path.stem, None)) and hasattr(module, "validate"):
            found[path.stem] = module.__name__
    return found


OPS = _ops()


def _size_one_strides(tensor: torch.Tensor, draw: random.Random) -> torch.Tensor:
    """The same elements, with every size-1 dim given an arbitrary stride (it never addresses anything);
    a zero-size tensor gets arbitrary strides for every dim."""
    empty = tensor.numel() == 0
    strides = [draw.choice((0, 1, 3, 1000)) if (size == 1 or empty) else step
               for size, step in zip(tensor.shape, tensor.stride())]
    return tensor.as_strided(tensor.shape, strides, tensor.storage_offset())


def legal_layout(shape, dtype: torch.dtype, device, kind: str, draw: random.Random) -> torch.Tensor:
    """An uninitialised tensor of ``shape`` in the layout ``kind`` (``shared`` is laid out by the caller)."""
    shape = tuple(shape)
    numel = 1
    for size in shape:
        numel *= size
    if kind == "offset":
        before, after = draw.randint(1, 40), draw.randint(0, 40)
        return torch.empty(before + numel + after, dtype=dtype, device=device)[before:before + numel].view(shape)
    if kind == "column" and shape:
        columns = draw.randint(2, 3)
        return torch.empty(*shape, columns, dtype=dtype, device=device)[..., draw.randrange(columns)]
    if kind == "transposed" and len(shape) >= 2:
        order = list(range(len(shape)))
        while order == sorted(order):
            draw.shuffle(order)
        stored = torch.empty([shape[d] for d in order], dtype=dtype, device=device)
        return stored.permute([order.index(d) for d in range(len(shape))])
    if kind == "padded" and shape:
        pad = draw.randint(1, 9)
        return torch.empty(*shape[:-1], shape[-1] + pad, dtype=dtype, device=device)[..., :shape[-1]]
    return torch.empty(shape, dtype=dtype, device=device)


def _apart_in_one_allocation(outputs: list[torch.Tensor], draw: random.Random) -> list[torch.Tensor]:
    """Places for ``outputs`` in one fresh byte allocation, apart, each 16-byte aligned, gaps between."""
    offsets, end = [], 0
    for output in outputs:
        end += 16 * draw.randint(0, 2)
        offsets.append(end)
        end += -(-output.numel() * output.element_size() // 16) * 16
    buffer = torch.empty(end, dtype=torch.uint8, device=outputs[0].device)
    return [buffer[at:at + o.numel() * o.element_size()].view(o.dtype).view(o.shape)
            for at, o in zip(offsets, outputs)]


def relaid(returned, draw: random.Random):
    """``returned`` (a tensor, a tuple of them, or None) with every output copied into a drawn layout."""
    if returned is None:
        return None
    outputs = [returned] if isinstance(returned, torch.Tensor) else list(returned)
    kind = draw.choice(KINDS if len(outputs) > 1 else KINDS[:-1])
    if kind == "shared":
        places = _apart_in_one_allocation(outputs, draw)
    else:
        places = [legal_layout(o.shape, o.dtype, o.device, kind, draw) for o in outputs]
    if draw.random() < 0.5:
        places = [_size_one_strides(place, draw) for place in places]
    for place, output in zip(places, outputs):
        place.copy_(output)
    return places[0] if isinstance(returned, torch.Tensor) else tuple(places)


def _on_gpu(args, kwargs) -> bool:
    return any(isinstance(v, torch.Tensor) and v.is_cuda for v in (*args, *kwargs.values()))


@functools.cache
def _entry(name: str):
    from ops.catalog import kernels   # on a GPU only: the CPU judges the reference, without the interpreter

    return kernels(name)[0]


def _on_the_kernel(name: str, args, kwargs):
    """The catalog kernel's answer, its read-only inputs made contiguous where its own limits refuse them as
    given — what a caller of a kernel with narrower limits does.  The contract-legal layouts this module
    returns come back as inputs through the stateful properties (gdn_verify's checkpoints into gdn_commit,
    which reads each checkpoint as one contiguous block); the arguments the op writes stay as they are.
    The contract's refusals come first, as in certified dispatch (the limits assume valid arguments)."""
    entry = _entry(name)
    arguments = entry.bind(*args, **kwargs)
    entry.validate(**arguments)
    if entry.beyond_limits(arguments) is not None:
        arguments = {argument: value.contiguous() if isinstance(value, torch.Tensor) and argument not in entry.in_place
                     else value for argument, value in arguments.items()}
    return entry.kernel(**arguments)


def _through_legal_layouts(name: str):
    reference = getattr(importlib.import_module(OPS[name]), name)

    @functools.wraps(reference)
    def judged(*args, **kwargs):
        answer = _on_the_kernel(name, args, kwargs) if _on_gpu(args, kwargs) else reference(*args, **kwargs)
        return relaid(answer, random.Random(next(_CALLS)))

    return judged


globals().update({name: _through_legal_layouts(name) for name in OPS})


def greedy_argmax_in_pairs(logits):
    """Issue #24's case: a kernel packing (index, value) pairs answers the index column ``pair[:, 0]`` of a
    fresh [R, 2] int64 (for R = 1: shape [1], stride (2,)), which the judge once could not compare."""
    from references.sampling.greedy_argmax import greedy_argmax as reference

    answer = reference(logits)
    pair = torch.empty(answer.shape[0], 2, dtype=torch.int64, device=answer.device)
    pair[:, 0] = answer
    pair[:, 1] = 0
    return pair[:, 0]


# -- aliasing controls: memory that is not the output's own ------------------------------------------------
def rms_norm_gated_into_x(x, z, weight, eps, group_size, norm_before_gate=True, amax=None):
    """Right values, returned in ``x``'s own memory (an output aliasing an input)."""
    from references.norm.rms_norm_gated import rms_norm_gated as reference

    y = reference(x, z, weight, eps, group_size, norm_before_gate, amax)
    x.copy_(y)
    return x


def strict_accept_overlapping(draft_tokens, target_tokens, num_drafts):
    """``num_accepted`` laid over the first bytes of ``out_tokens`` (two outputs sharing elements)."""
    from references.speculative.strict_accept import strict_accept as reference

    out_tokens, num_accepted = reference(draft_tokens, target_tokens, num_drafts)
    shared = torch.empty(max(out_tokens.numel(), num_accepted.numel()), dtype=torch.int64,
                         device=out_tokens.device)
    tokens = shared[:out_tokens.numel()].view(out_tokens.shape)
    tokens.copy_(out_tokens)
    accepted = shared.view(torch.int32)[:num_accepted.numel()]
    accepted.copy_(num_accepted)
    return tokens, accepted


def greedy_argmax_broadcast(logits):
    """One element read through a zero stride for every row (elements aliasing each other)."""
    from references.sampling.greedy_argmax import greedy_argmax as reference

    answer = reference(logits)
    return answer[:1].expand(answer.shape) if answer.numel() else answer
