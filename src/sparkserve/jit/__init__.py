"""FlashInfer JIT prewarm: the module list (docker/jit-modules.toml), building it, checking a built cache."""
