"""``mellea-local train``: requirement-check adapters for any local base model.

``train_adapter(TrainConfig(data=..., model=...))`` reads a labelled ``check``-format JSONL,
refuses bad lines before loading anything, trains PEFT's aLoRA (or a LoRA) on rows built by the
same prompt code inference uses, and writes ``<root>/requirement-check/<base>/<kind>/``.
"""

from mellea_local.training.data import Example, TrainingData, load_training_data
from mellea_local.training.loop import TrainConfig, TrainingResult, train_adapter

__all__ = ["Example", "TrainConfig", "TrainingData", "TrainingResult", "load_training_data",
           "train_adapter"]
