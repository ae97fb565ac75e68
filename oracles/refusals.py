"""Refused inputs: each row of a contract's refusal table raises the contract's error, whose
message names the argument, and mutates nothing.

A row may name several acceptable arguments (two arguments that disagree: naming either is right).
Beyond the table, an implementation may refuse an input the contract answers (its own limits): such a
refusal is *clear* when it raises ``ValueError`` or ``TypeError`` whose message names an argument of
the call (:func:`is_clear_refusal`); the battery counts it and does not call it a failure.
"""
from __future__ import annotations

import re
from typing import Callable, Iterable

import torch

from oracles.failures import OracleFailure
from oracles.judge_errors import JudgeError
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
            if not names_an_argument(error, refusal.arguments):
                raise OracleFailure("refusals", f"{refusal.what}: the {type(error).__name__} does not name "
                                                f"{_either(refusal.arguments)}: {error}") from None
        except JudgeError:  # the judge failed to carry the call (a hosted function's transfer): not a finding
            raise
        except Exception as error:  # noqa: BLE001 - any other exception is the finding
            raise OracleFailure("refusals", f"{refusal.what}: raised {type(error).__name__} ({error}), "
                                            f"expected {refusal.error.__name__}") from None
        else:
            raise OracleFailure("refusals", f"{refusal.what}: accepted, expected {refusal.error.__name__} "
                                            f"naming {_either(refusal.arguments)}")
        changed = changed_storages(kwargs, before)
        if changed:
            raise OracleFailure("refusals", f"{refusal.what}: refused, but mutated {', '.join(changed)}")
        checked += 1
    return checked


CLEAR_REFUSAL_ERRORS = (ValueError, TypeError)


def _either(names: Iterable[str]) -> str:
    return " or ".join(repr(name) for name in names)


def names_an_argument(error: BaseException, names: Iterable[str]) -> bool:
    """Whether ``error``'s message names one of ``names`` as a word (``q`` in ``"q: stride..."``, not in
    ``"sequence"``)."""
    message = str(error)
    return any(re.search(rf"(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9_])", message) for name in names)


def is_clear_refusal(error: BaseException, names: Iterable[str]) -> bool:
    """A clear refusal of an input: the contract's error classes, naming an argument of the call."""
    return isinstance(error, CLEAR_REFUSAL_ERRORS) and names_an_argument(error, names)
