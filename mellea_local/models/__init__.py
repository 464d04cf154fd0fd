"""Real models in: a GGUF file converted once to a plain safetensors folder, and a small
registry of models obtainable without the Hugging Face hub (``mellea-local models``)."""

from mellea_local.models.cache import models_root, sha256_file, verify_converted
from mellea_local.models.gguf import convert_gguf, find_gguf
from mellea_local.models.registry import (
    MODELS,
    ModelSpec,
    get_model,
    is_registered,
    model_path,
    model_status,
)

__all__ = [
    "MODELS",
    "ModelSpec",
    "convert_gguf",
    "find_gguf",
    "get_model",
    "is_registered",
    "model_path",
    "model_status",
    "models_root",
    "sha256_file",
    "verify_converted",
]
