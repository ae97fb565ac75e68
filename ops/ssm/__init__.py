"""State-space-model kernels: Gated DeltaNet decode, speculative verify and commit over a slot pool."""
