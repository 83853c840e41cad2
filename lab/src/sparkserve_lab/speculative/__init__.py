"""Speculative decoding, proved and costed: greedy identity with and without speculation (identity.py),
the engine's speculation counters (metrics.py), the cost model of tok/s against acceptance length
(cost.py), and the GPU runs that measure them (runs.py; docs/GPU.md)."""
