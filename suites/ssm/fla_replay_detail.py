"""How far fla-core's multi-token state parts from its one-token calls (what the stateful finding counts).

``python -m suites.ssm.fla_replay_detail RECIPE_JSON [--device cuda]`` takes a gdn_decode recipe (the
``minimal`` of a ``tools/certify-cells --impl suites.ssm.fla_adapter:gdn_decode`` finding), runs the
replay that the oracle runs (fla over 2 tokens vs 2 one-token fla calls) and prints, per token, how many
state values differ, how many of those are only the sign of a zero, and the largest distance in units in
the last place of the pool's dtype among the rest.
"""
from __future__ import annotations

import argparse
import json
import sys

import torch

from oracles.bitwise import bit_pattern
from references.ssm.gdn_decode import live_rows
from references.ssm.gdn_verify import REPLAY_TOKENS, verify_inputs_of_decode_inputs
from suites.ssm import fla_adapter
from references.ssm.gdn_decode_strategy import build


def ulp_distance(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """|a - b| in representable steps of their dtype (fp32 or bf16), sign-magnitude bits made monotone."""
    def ordered(x):
        raw = bit_pattern(x).long()
        return torch.where(raw < 0, -(raw & (2 ** (8 * x.element_size() - 1) - 1)), raw)
    return (ordered(a) - ordered(b)).abs()


def replay_detail(recipe: dict, device: str) -> list[str]:
    kwargs = build(recipe, device)
    lifted = verify_inputs_of_decode_inputs(kwargs)  # the oracle's own lifting
    _, checkpoints = fla_adapter.gdn_verify(**{**lifted, "state": kwargs["state"].clone()})
    replayed = kwargs["state"].clone()
    live = live_rows(kwargs["slots"], kwargs["state"].shape[0])
    lines = []
    for t in range(REPLAY_TOKENS):
        fla_adapter.gdn_decode(*(lifted[name][:, t] for name in ("q", "k", "v", "g", "beta")), replayed,
                               kwargs["slots"], kwargs["scale"], kwargs["qk_l2norm"])
        one_token = replayed[kwargs["slots"][live].long()].reshape(-1)
        multi_token = checkpoints[live, t].reshape(-1)
        differ = bit_pattern(one_token) != bit_pattern(multi_token)
        signed_zero = differ & (one_token == 0) & (multi_token == 0)
        rest = differ & ~signed_zero
        worst = int(ulp_distance(one_token[rest], multi_token[rest]).max()) if rest.any() else 0
        lines.append(f"token {t}: {int(differ.sum())} of {differ.numel()} state values differ; "
                     f"{int(signed_zero.sum())} only in the sign of zero; the other {int(rest.sum())} "
                     f"at most {worst} ulp apart ({one_token.dtype})")
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("recipe", help="a gdn_decode recipe, JSON")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args(argv)
    try:
        recipe = json.loads(args.recipe)
    except json.JSONDecodeError as error:
        print(f"fla_replay_detail: recipe is not JSON: {error}", file=sys.stderr)
        return 2
    print("\n".join(replay_detail(recipe, args.device)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
