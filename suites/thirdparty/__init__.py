"""Third-party implementations of our contracts, each behind a thin adapter, for the battery to judge.

One module per package (``torch_scaled_mm``, ``liger_rmsnorm``, ``fla_rmsnorm``, ``torchao_nvfp4``,
``sglang_decode``, ``torch_native``; fla-core's Gated DeltaNet is ``suites/ssm/fla_adapter.py``).  Each
module maps the package's call to the contract's signature and declares:

- ``PACKAGE``: the distribution judged (``torch`` where the implementation is torch's own);
- ``JUDGED``: ``{op name: function name}`` — what ``tools/certify-cells --op OP --impl MODULE:FUNCTION``
  judges and ``tools/bench --impl`` times;
- ``ADAPTER_CODE``: ``{op name: what the adapter computes itself}`` — the parts of the contract the
  package lacks (an amax, an lse, empty rows), named so that a verdict never credits the package with
  arithmetic it did not do.

Adapters add no refusals of their own: a package that asserts instead of raising the contract's errors
shows that in the interface verdict, and its numerics are judged apart (``--oracles numerics``).
The packages are test-only dependencies: a module whose package is missing raises ImportError when
imported, and ``suites/thirdparty/test_adapters.py`` skips it with the reason.
"""
