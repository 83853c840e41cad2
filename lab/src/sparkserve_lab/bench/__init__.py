"""`sparkserve level 4`: llama-benchy against any OpenAI-compatible endpoint, fully offline."""
