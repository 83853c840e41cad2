"""`sparkserve bench`: llama-benchy against any OpenAI-compatible endpoint, fully offline."""
