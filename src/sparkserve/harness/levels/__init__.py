"""Test levels, one module each: 1 smoke, 1.5 kernels (sparkserve.harness.validate), 2 correctness, 3 stress,
4 benchmark (sparkserve.harness.bench), 5 regression, 6 matrix."""
