"""The image's entrypoint: banner, profile, GPU check, then exec vLLM's OpenAI server.

Run as `python -m sparkserve.serving`.
"""
