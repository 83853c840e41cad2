"""Kernel-level tools for a GPU host with the pinned stack (torch and vLLM imported lazily): the
layers under test built without an engine, and timing that keeps weights out of L2."""
