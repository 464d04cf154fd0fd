"""Old home of two engine-independent helpers, kept so existing imports work.

``compact_json_grammar`` and ``token_logprobs`` live in ``backends/constrained.py``; the
HF engine's adapter forwards moved to ``backends/hf/adapter_calls.py``. Import from there
(``backends/llama_server/backend.py`` still imports this path; its owner switches it).
"""

from mellea_local.backends.constrained import compact_json_grammar, token_logprobs

__all__ = ["compact_json_grammar", "token_logprobs"]
