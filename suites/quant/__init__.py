"""Tests of the quantized formats (E2M1, E4M3, NVFP4, scale layouts) and, later, of the quant kernels."""
