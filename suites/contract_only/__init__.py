"""Implementations of the contracts written from ``../shared/CONTRACTS.md`` alone, in plain PyTorch, as
an outside user would write them: nothing here imports ``references/`` or ``ops/``.  One module per op
family; where the contract leaves room, an alternative (other refusal wording, a refusal of an input
beyond its own limits, another summation order).  ``suites/test_contract_only.py`` judges each through
the battery, with the negative controls of the contract's pinned points."""
