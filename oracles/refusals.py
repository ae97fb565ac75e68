"""Refused inputs: each row of a contract's refusal table raises the contract's error, whose
message names the argument, and mutates nothing."""
from __future__ import annotations

from typing import Callable, Iterable

import torch

from oracles.failures import OracleFailure
from oracles.tensors import changed_storages, snapshot_storages


def check_refusals(fn: Callable, refusals: Iterable, device: torch.device) -> int:
    """Return how many refusals were checked."""
    checked = 0
    for refusal in refusals:
        kwargs = refusal.make(device)
        before = snapshot_storages(kwargs)
        try:
            fn(**kwargs)
        except refusal.error as error:
            if refusal.argument not in str(error):
                raise OracleFailure("refusals", f"{refusal.what}: the {type(error).__name__} does not name "
                                                f"{refusal.argument!r}: {error}") from None
        except Exception as error:  # noqa: BLE001 - any other exception is the finding
            raise OracleFailure("refusals", f"{refusal.what}: raised {type(error).__name__} ({error}), "
                                            f"expected {refusal.error.__name__}") from None
        else:
            raise OracleFailure("refusals", f"{refusal.what}: accepted, expected {refusal.error.__name__} "
                                            f"naming {refusal.argument!r}")
        changed = changed_storages(kwargs, before)
        if changed:
            raise OracleFailure("refusals", f"{refusal.what}: refused, but mutated {', '.join(changed)}")
        checked += 1
    return checked
