"""llama.cpp's ``llama-server`` as a backend (optional extra ``mellea-local[llamacpp]``).

- ``gguf_export``: ``mellea-local export-gguf`` (base model and adapter library as GGUF);
- ``manifest``: reading an exported folder (paths confined to it);
- ``launch``: starting and stopping local server processes (keyed, f32 K/V);
- ``arguments``: argument checks and caps on what a server may claim;
- ``client``: HTTP to one server, every reply checked, every request with a deadline;
- ``startup``: checking each server before use;
- ``routing``: a fleet, sticky slots (a state enum and one launch bracket), fail-over;
- ``adapter_requests``: each request's ``lora`` list and what its slot then holds;
- ``probabilities``: when a top-n reply decides what is read;
- ``decoder``: constrained generation, one token per request;
- ``streaming``: plain generation as one streamed request;
- ``sampling``: generate kwargs -> server sampling fields;
- ``call_counts``: prefilled / reused tokens per call;
- ``engine``: ``LlamaServerEngine``, the ``ServingEngine``: adapters' server ids, generation
  (``produce``), the one-token reads and their cache counts, on the fleet;
- ``backend``: ``LlamaServerBackend``, which builds the engine and hands it to the shared
  ``ServingBackend``.
"""

from mellea_local.backends.llama_server.backend import LlamaServerBackend
from mellea_local.backends.llama_server.manifest import ServedAdapter, read_gguf_folder

__all__ = ["LlamaServerBackend", "ServedAdapter", "read_gguf_folder"]
