"""Provider clients: the LLM (any OpenAI-compatible endpoint), embedders and token counting."""
