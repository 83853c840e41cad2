"""Level 1.5: the kernels a run used (engine log, profiler trace) against lab/configs/engine-kernels.toml."""
