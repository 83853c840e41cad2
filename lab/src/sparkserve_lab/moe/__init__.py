"""FlashInfer's CUTLASS fused MoE measured and checked on a GPU host: the PyTorch reference of the MXFP8 x
MXFP4 (and BF16 x MXFP4) block-scaled grouped MoE, random gpt-oss-shaped weights, the kernel call as vLLM
makes it, CUDA-graph timing with weights rotated past L2, `sparkserve validate moe` and `sparkserve moe
sweep`. torch and flashinfer are imported inside the functions that need them (or by modules that only
GPU-side code imports), so the CLI loads without them."""
