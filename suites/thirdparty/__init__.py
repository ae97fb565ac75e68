"""Third-party implementations of our contracts, each behind a thin adapter, for the battery to judge.

One module per package and kernel (``torch_scaled_mm``, ``liger_rmsnorm``, ``fla_rmsnorm``, ``torchao_nvfp4``,
``sglang_decode``, ``torch_native``; vLLM's ``vllm_rejection``, ``vllm_decode``, ``vllm_gdn``, carried as source
files by ``vendored``; FlashInfer's ``flashinfer_decode``, ``flashinfer_fp4``; fla-core's Gated DeltaNet is
``suites/ssm/fla_adapter.py``).  Each module maps the package's call to the contract's signature and declares:

- ``PACKAGE``: the distribution judged (``torch`` where the implementation is torch's own);
- ``JUDGED``: ``{op name: function name}`` — what ``tools/certify-cells --op OP --impl MODULE:FUNCTION``
  judges and ``tools/bench --impl`` times;
- ``ADAPTER_CODE``: ``{op name: what the adapter computes itself}`` — the parts of the contract the
  package lacks (an amax, an lse, empty rows), named so that a verdict never credits the package with
  arithmetic it did not do.

An adapter is written in three parts (``staging``: its glue before the call, the package's call alone, its
glue after), so that ``tools/bench`` times the package's own call and the adapter's glue apart.

Adapters add no refusals of the contract's: a package that asserts instead of raising the contract's errors
shows that in the interface verdict, and its numerics are judged apart (``--oracles numerics``).  The one
refusal an adapter makes is a package's own limit that would otherwise hide its numbers behind one crash
(``paged_pages.require_host_sm_scale``: decode kernels that take ``sm_scale`` as a host float), stated with
the contract's error class naming the argument and said so in ``ADAPTER_CODE``.
The packages are test-only dependencies: a module whose package (or carried source) is missing raises
ImportError when imported, and the tests (``test_adapters.py``, ``test_vllm_adapters.py``) skip it with the
reason.
"""
