"""The `sparkserve` command line: one module per verb group, `main.py` assembles them."""
