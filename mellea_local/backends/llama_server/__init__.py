"""llama.cpp's ``llama-server`` as a backend (optional extra ``mellea-local[llamacpp]``).

- ``gguf_export``: ``mellea-local export-gguf`` (base model and adapter library as GGUF);
- ``manifest``: reading an exported folder;
- ``launch``: starting and stopping local server processes;
- ``client``: HTTP to one server;
- ``routing``: a fleet, sticky slots, exact reuse rules, fail-over;
- ``sampling``: generate kwargs -> server sampling fields;
- ``backend``: ``LlamaServerBackend``.
"""

from mellea_local.backends.llama_server.backend import LlamaServerBackend
from mellea_local.backends.llama_server.manifest import ServedAdapter, read_gguf_folder

__all__ = ["LlamaServerBackend", "ServedAdapter", "read_gguf_folder"]
