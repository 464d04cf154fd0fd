"""The base model plus its PEFT adapters, with "no adapter active" as the resting state.

Adapters are driven through ``peft.PeftModel`` only: it is the one path where an aLoRA is
really applied (transformers' own adapter API never computes aLoRA offsets, and refuses
peft < 0.22 on transformers 5.24). Once PEFT has injected LoRA layers the raw model object
carries them too, so the holder keeps adapter layers *disabled* except inside ``using(name)``;
every base call asserts that state, and ``using`` restores it however the call ends.

A one-forward call (a check) goes through ``forward``: with plain tuner layers it calls the
model itself with the adapter's layers switched on, and an aLoRA that acts on every token fed
(a warm check) computes as the plain LoRA it then is. ``PeftModel.forward`` would search the
invocation again, walk every module of the model to place its offsets, and mask, gather and
scatter the rows in every layer: together about a quarter of a warm check's forward on the
tiny model (1-1.5 ms at 1-2k tokens, 1 thread). The numbers are the same, bit for bit
(tests/backends/test_holder_forward.py).

Loading is all or nothing. PEFT injects its layers into the base model *before* it reads the
weights, so a load that fails half way (a tensor of the wrong shape, a truncated file, an
exception inside PEFT) would leave live, half-initialised layers on every later base call.
``load_adapter`` therefore snapshots the module tree first and puts it back exactly on any
failure: the same module objects, the same parameter flags, no adapter entry left behind.
"""

from __future__ import annotations

import contextlib
import threading
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from mellea_local.errors import AdapterError


@dataclass
class _TreeSnapshot:
    """The module tree of a model as it was: every module's children, and parameter flags.

    PEFT changes a model only by replacing children (``setattr(parent, name, lora_layer)``),
    adding entries to ``ModuleDict`` children, flipping ``requires_grad`` and setting a
    ``peft_config`` attribute; restoring these undoes a partial injection exactly.
    """

    children: list[tuple[Any, dict[str, Any]]]
    grads: list[tuple[Any, bool]]
    root_attrs: frozenset[str]

    @classmethod
    def take(cls, model: Any) -> _TreeSnapshot:
        return cls(
            children=[(m, dict(m._modules)) for m in model.modules()],
            grads=[(p, p.requires_grad) for p in model.parameters()],
            root_attrs=frozenset(vars(model)),
        )

    def restore(self, model: Any) -> None:
        for module, children in self.children:
            module._modules.clear()
            module._modules.update(children)
        for param, flag in self.grads:
            param.requires_grad_(flag)
        for attr in set(vars(model)) - self.root_attrs:
            delattr(model, attr)


class ModelHolder:
    """Owns the model, its tokenizer, the PEFT wrapper and the lock that serialises them."""

    def __init__(self, model: Any, tokenizer: Any) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.peft: Any | None = None
        self.lock = threading.Lock()
        self._tuner_layers: list[Any] = []
        self._active: str | None = None
        self._pristine: _TreeSnapshot | None = None
        # The adapter PEFT last made active (set_adapter), and whether flipping the layers'
        # switch is all a call needs (see ``_enable``).
        self._selected: str | None = None
        self._fast_toggle = False
        # Per adapter: its tuner layers and whether it is an aLoRA (``forward``); rebuilt
        # lazily after every load or unload.
        self._layers_of: dict[str, _AdapterLayers] = {}

    @property
    def active_adapter(self) -> str | None:
        """The adapter a call is running with right now (None between calls)."""
        return self._active

    @property
    def adapter_names(self) -> list[str]:
        return list(self.peft.peft_config) if self.peft is not None else []

    def load_adapter(
        self, path: str | Path, name: str, *, weight_keys: set[str] | None = None
    ) -> None:
        """Attach a PEFT adapter folder under ``name``, leaving every adapter disabled.

        ``weight_keys`` (the tensor names in the weights file) lets the load check that every
        layer PEFT injected found its matrices. On any failure (including one raised inside
        PEFT) the model is put back exactly as it was and the exception propagates.
        """
        from peft import PeftModel

        if name in self.adapter_names:
            raise AdapterError(
                f"An adapter named {name!r} is already loaded; pass a different name=."
            )
        before = _TreeSnapshot.take(self.model)
        created = self.peft is None
        try:
            if created:
                self._pristine = before
                self.peft = PeftModel.from_pretrained(
                    self.model, str(path), adapter_name=name, is_trainable=False
                )
            else:
                self.peft.load_adapter(str(path), adapter_name=name, is_trainable=False)
            self.peft.eval()
            if weight_keys is not None:
                self._verify_loaded(Path(path), name, weight_keys)
        except BaseException:
            self._roll_back(name, before, created)
            raise
        self._settle()

    def _verify_loaded(self, path: Path, name: str, keys: set[str]) -> None:
        """Every LoRA layer PEFT made for ``name`` must have read its matrices from ``keys``.

        PEFT only warns about adapter weights missing from the file and keeps their random or
        zero initialisation, which computes a different adapter than the one trained.
        """
        from peft.tuners.lora import LoraLayer

        expected: set[str] = set()
        for module_name, module in self.model.named_modules():
            if isinstance(module, LoraLayer) and name in module.lora_A:
                stem = "base_model.model." + module_name
                expected |= {f"{stem}.lora_A.weight", f"{stem}.lora_B.weight"}
        matrices = {k for k in keys if ".lora_A." in k or ".lora_B." in k}
        missing = sorted(expected - matrices)
        if missing:
            raise AdapterError(
                f"{path / 'adapter_model.safetensors'} lacks {len(missing)} LoRA matrices its "
                f"config targets (first: {missing[0]}); PEFT would run them with initial "
                "values. Save the adapter again with PeftModel.save_pretrained, or fix "
                "target_modules."
            )
        unused = sorted(k for k in matrices - expected if k.endswith(".weight"))
        if unused:
            raise AdapterError(
                f"{path / 'adapter_model.safetensors'} holds {len(unused)} LoRA matrices its "
                f"config does not target (first: {unused[0]}); PEFT would silently drop "
                "them. Fix target_modules / layers_to_transform in adapter_config.json to "
                "match the weights."
            )

    def unload_adapter(self, name: str) -> None:
        """Remove adapter ``name``; after the last one the model is the plain base again."""
        if name not in self.adapter_names:
            raise AdapterError(
                f"No adapter named {name!r} is loaded (loaded: {self.adapter_names})."
            )
        assert self.peft is not None
        if len(self.adapter_names) == 1 and self._pristine is not None:
            self._pristine.restore(self.model)
            self.peft, self._pristine = None, None
        else:
            with warnings.catch_warnings():  # "X was active which is now deleted": we know
                warnings.simplefilter("ignore", UserWarning)
                self.peft.delete_adapter(name)
        self._settle()

    def _roll_back(self, name: str, before: _TreeSnapshot, created: bool) -> None:
        if created:
            self.peft, self._pristine = None, None
        elif self.peft is not None and name in self.peft.peft_config:
            # delete_adapter clears PEFT's per-adapter dicts; the snapshot then restores the
            # structure even where deletion stopped half way.
            with contextlib.suppress(Exception):
                self.peft.delete_adapter(name)
            self.peft.peft_config.pop(name, None)
        before.restore(self.model)
        self._settle()

    def _settle(self) -> None:
        """Re-list the adapter layers and switch them all off (the resting state)."""
        from peft.tuners.tuners_utils import BaseTunerLayer

        self._tuner_layers = [m for m in self.model.modules() if isinstance(m, BaseTunerLayer)]
        # Only plain tuner layers can be switched by their flag alone; anything else PEFT
        # tracks (modules_to_save wrappers) goes through PEFT's own calls every time.
        self._fast_toggle = bool(self._tuner_layers) and all(
            isinstance(getattr(m, "_disable_adapters", None), bool) for m in self._tuner_layers
        ) and not any(
            type(m).__name__.endswith("Wrapper") for m in self.model.modules()
        )
        self._selected = None
        self._layers_of = {}
        if self.peft is not None:
            self.peft.base_model.disable_adapter_layers()
        self._active = None

    def _disable_all(self) -> None:
        if self.peft is not None:
            if self._fast_toggle:
                for m in self._tuner_layers:
                    m._disable_adapters = True
            else:
                self.peft.base_model.disable_adapter_layers()
        self._active = None

    def _enable(self, name: str) -> None:
        """Make ``name`` the one live adapter.

        PEFT's enable/set calls walk every module and reset ``requires_grad`` on every adapter
        weight: milliseconds per call, a visible share of a one-forward check. The selected
        adapter survives disabling, so after the first ``set_adapter`` a call only flips each
        tuner layer's switch (what ``enable_adapters`` does besides the gradient flags, which
        inference does not use).
        """
        assert self.peft is not None
        if not self._fast_toggle:
            self.peft.base_model.enable_adapter_layers()
            self.peft.set_adapter(name)
            return
        if self._selected != name:
            # inference_mode: adapter weights keep requires_grad=False, as PEFT's disable
            # leaves them, so a call changes no parameter flag.
            self.peft.set_adapter(name, inference_mode=True)
            self._selected = name
        for m in self._tuner_layers:
            m._disable_adapters = False

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
        if self.peft is None or name not in self.peft.peft_config:
            raise AdapterError(
                f"No adapter named {name!r} is loaded (loaded: {self.adapter_names}); "
                "add it with backend.add_adapter(...)."
            )
        self.assert_base()
        try:
            self._enable(name)
            self._active = name
            yield self.peft
        finally:
            self._disable_all()

    def forward(self, name: str, **kwargs: Any) -> Any:
        """One forward with adapter ``name`` on (``using``): ``kwargs`` as for
        ``PeftModel.forward``, an aLoRA's ``alora_offsets`` (one per row, counted from the
        row's end, as PEFT computes them) given by the caller.

        With plain tuner layers the model itself is called with the adapter's layers on:

        - an aLoRA that acts on every token fed (a warm check: the suffix starts at the
          invocation) runs its layers as the plain LoRA they then are. PEFT's aLoRA layer
          would build a mask per layer and gather and scatter the rows it selects, all of
          them here (and on a GPU, wait for the device at each layer); the sums are the same
          ones, bit for bit (tested);
        - otherwise the offsets reach the adapter's own layers by a pre-forward hook for
          this call only, as PEFT's forward places them after walking every module.

        Anything else (no offsets for an aLoRA, mixed adapters, embeddings instead of ids,
        wrapped modules) goes through PEFT's forward unchanged. The caller holds ``lock``, as
        for every model call: the hooks and the set-aside variants are this call's alone.
        """
        offsets = kwargs.get("alora_offsets")
        ids = kwargs.get("input_ids")
        with self.using(name) as peft:
            own = self._adapter_layers(name)
            if not self._fast_toggle or "adapter_names" in kwargs or ids is None or (
                    own.alora and offsets is None):
                return peft(**kwargs)
            kwargs.pop("alora_offsets", None)
            if not own.alora:
                return self.model(**kwargs)
            fed = ids.shape[-1]
            if own.plain_linear and all(o is not None and o >= fed for o in offsets):
                return self._as_plain_lora(name, own.layers, kwargs)
            hook = partial(_with_offsets, offsets=offsets)
            handles = [m.register_forward_pre_hook(hook, with_kwargs=True) for m in own.layers]
            try:
                return self.model(**kwargs)
            finally:
                for handle in handles:
                    handle.remove()

    def _as_plain_lora(self, name: str, layers: list[Any], kwargs: dict[str, Any]) -> Any:
        """The model's forward with ``name``'s aLoRA layers computing as plain LoRA layers
        (their variant set aside for this call and put back however it ends)."""
        variants = [m.lora_variant.pop(name) for m in layers]
        try:
            return self.model(**kwargs)
        finally:
            for m, variant in zip(layers, variants, strict=True):
                m.lora_variant[name] = variant

    def _adapter_layers(self, name: str) -> _AdapterLayers:
        """What ``forward`` needs to know of adapter ``name`` (found once per load)."""
        found = self._layers_of.get(name)
        if found is None:
            from peft.tuners.lora.layer import Linear
            from peft.tuners.lora.variants import ALoraLinearVariant

            assert self.peft is not None
            layers = [m for m in self._tuner_layers if name in getattr(m, "lora_A", ())]
            alora = bool(getattr(self.peft.peft_config[name], "alora_invocation_tokens", None))
            # PEFT's Linear adds lora_B(lora_A(dropout(x))) * scaling to every row unless a
            # variant is registered; the aLoRA variant adds the same to the rows it selects.
            plain_linear = alora and all(
                type(m) is Linear and type(m.lora_variant.get(name)) is ALoraLinearVariant
                for m in layers)
            found = self._layers_of[name] = _AdapterLayers(layers, alora, plain_linear)
        return found


@dataclass(frozen=True)
class _AdapterLayers:
    """One adapter's tuner layers, whether it is an aLoRA, and whether every one of its
    layers is PEFT's ``Linear`` with the aLoRA variant (what ``_as_plain_lora`` needs)."""

    layers: list[Any]
    alora: bool
    plain_linear: bool


def _with_offsets(module: Any, args: Any, kwargs: dict[str, Any],
                  offsets: list[int]) -> tuple[Any, dict[str, Any]]:
    """A LoRA layer's pre-forward hook: the aLoRA offsets of this call, as PEFT passes them."""
    kwargs["alora_offsets"] = offsets
    return args, kwargs
