"""Test levels, one module each: 1 smoke, 1.5 kernels (sparkserve_lab.validate), 2 correctness, 3 stress,
4 benchmark (sparkserve_lab.bench), 5 regression, 6 matrix."""
