"""What the Dockerfile runs besides installing wheels: the FlashInfer JIT prewarm of
`docker/jit-modules.toml`, the check of a built JIT cache, and the SASS rules of `docker/jit-sass.toml`."""
