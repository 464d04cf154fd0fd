"""The base model plus its PEFT adapters, with "no adapter active" as the resting state.

Adapters are driven through ``peft.PeftModel`` only: it is the one path where an aLoRA is
really applied (transformers' own adapter API never computes aLoRA offsets, and refuses
peft < 0.22 on transformers 5.24). Once PEFT has injected LoRA layers the raw model object
carries them too, so the holder keeps adapter layers *disabled* except inside ``using(name)``;
every base call asserts that state, and ``using`` restores it however the call ends.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from mellea_local.errors import AdapterError


class ModelHolder:
    """Owns the model, its tokenizer, the PEFT wrapper and the lock that serialises them."""

    def __init__(self, model: Any, tokenizer: Any) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.peft: Any | None = None
        self.lock = threading.Lock()
        self._tuner_layers: list[Any] = []
        self._active: str | None = None

    @property
    def active_adapter(self) -> str | None:
        """The adapter a call is running with right now (None between calls)."""
        return self._active

    @property
    def adapter_names(self) -> list[str]:
        return list(self.peft.peft_config) if self.peft is not None else []

    def load_adapter(self, path: str | Path, name: str) -> None:
        """Attach a PEFT adapter folder under ``name``, leaving every adapter disabled."""
        from peft import PeftModel
        from peft.tuners.tuners_utils import BaseTunerLayer

        if name in self.adapter_names:
            raise AdapterError(
                f"An adapter named {name!r} is already loaded; pass a different name=."
            )
        if self.peft is None:
            self.peft = PeftModel.from_pretrained(
                self.model, str(path), adapter_name=name, is_trainable=False
            )
        else:
            self.peft.load_adapter(str(path), adapter_name=name, is_trainable=False)
        self.peft.eval()
        self._tuner_layers = [m for m in self.model.modules() if isinstance(m, BaseTunerLayer)]
        self._disable_all()

    def _disable_all(self) -> None:
        if self.peft is not None:
            self.peft.base_model.disable_adapter_layers()
        self._active = None

    def assert_base(self) -> None:
        """Fail loudly if any adapter layer is live: a base call must see base weights only."""
        live = [m for m in self._tuner_layers if not m.disable_adapters]
        if self._active is not None or live:
            raise AdapterError(
                f"Adapter {self._active!r} is still active on a base-model call "
                f"({len(live)} live adapter layers); this is a bug in the adapter hygiene."
            )

    @contextlib.contextmanager
    def using(self, name: str) -> Iterator[Any]:
        """Run with exactly one adapter active; yields the PeftModel to call.

        The adapter is switched off again on success, exception or cancellation.
        """
        if self.peft is None or name not in self.adapter_names:
            raise AdapterError(
                f"No adapter named {name!r} is loaded (loaded: {self.adapter_names}); "
                "add it with backend.add_adapter(...)."
            )
        self.assert_base()
        try:
            self.peft.base_model.enable_adapter_layers()
            self.peft.set_adapter(name)
            self._active = name
            yield self.peft
        finally:
            self._disable_all()
