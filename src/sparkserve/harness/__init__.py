"""The test and benchmark harness: levels 1-6 against a running server, llama-benchy, kernel
validation from engine logs, the run store (`results/`), run metadata and the report."""
