"""Where a decode step's time goes: a served engine's torch profiler trace, split into steps and kernel
classes (`sparkserve profile decode`)."""
