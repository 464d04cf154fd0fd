"""The transformers/PEFT engine: ``LocalHFBackend`` over one ``Engine``.

- ``backend.py``: ``LocalHFBackend`` (loading, adapters, the ``AdapterRunner`` calls); the
  generation lifecycle it inherits from ``backends/serving.py``;
- ``engine.py``: ``Engine``, owner of the model holder, lock, prefix cache, stats and batcher,
  and of the cache rule (``Engine.reusing``);
- ``generation.py``, ``adapter_calls.py``, ``cross_batch.py``: the engine's calls (base
  generation, adapter forwards and generation, checks of several conversations batched);
- ``model_holder.py``: the model, its PEFT wrapper and the "no adapter left active" rule.
"""

from mellea_local.backends.hf.backend import LocalHFBackend
from mellea_local.backends.hf.engine import Checkout, Engine

__all__ = ["Checkout", "Engine", "LocalHFBackend"]
