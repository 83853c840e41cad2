"""FlashInfer's CUTLASS fused MoE at serve time: which tactic indices mean which CUTLASS kernels
(`tactics`), the MoE shapes of the served model (`shape`), the tactic table a sweep writes and the
entrypoint checks (`table`), and where the tuned tactics persist (`state`). Pure Python: no torch."""
