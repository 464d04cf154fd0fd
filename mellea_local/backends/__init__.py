"""Local Hugging Face backend: model loading, generation, KV prefix cache, adapters."""
