"""`sparkserve report`: docs/BENCHMARK_RESULTS.md and its PNG plots, regenerated from the run store."""
