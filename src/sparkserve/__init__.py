"""sparkserve: a pinned, patched vLLM distribution for gpt-oss-120b on DGX Spark."""

__version__ = "0.1.0"
