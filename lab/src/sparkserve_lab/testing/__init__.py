"""Test fixtures, not part of the runtime image: a tiny random Llama for CPU serving tests and a
config-only gpt-oss checkpoint for random-weight GPU runs (`python -m sparkserve_lab.testing --help`)."""
