"""KV-cache pieces of the local backend: the prompt prefix a batch shares, whether a model's cache is the plain
kind the prefix cache can reuse, and a preallocated cache layer that decoding appends to without copying."""

from __future__ import annotations

import torch
from transformers import PreTrainedModel
from transformers.cache_utils import CacheLayerMixin, DynamicCache, DynamicLayer


def common_prefix_length(rows: list[list[int]]) -> int:
    """How many leading tokens all ``rows`` share."""
    shortest = min(len(r) for r in rows)
    for i in range(shortest):
        token = rows[0][i]
        if any(r[i] != token for r in rows):
            return i
    return shortest


def shared_length(a: torch.Tensor, b: torch.Tensor) -> int:
    """How many leading tokens the 1-D token tensors ``a`` and ``b`` share."""
    n = min(a.shape[0], b.shape[0])
    differ = (a[:n] != b[:n]).nonzero()
    return int(differ[0, 0]) if differ.numel() else n


def plain_cache_layers(model: PreTrainedModel) -> int:
    """How many cache layers ``model`` has when all are plain full-attention :class:`DynamicLayer`; else 0
    (sliding windows, linear attention, shared layers: left to the model's own cache)."""
    try:
        layers = DynamicCache(config=model.config).layers
    except Exception:  # a remote-code config transformers cannot read layer types from
        return 0
    return len(layers) if layers and all(type(layer) is DynamicLayer for layer in layers) else 0


class BufferLayer(DynamicLayer):
    """A cache layer whose keys and values live in one buffer of ``capacity`` positions, allocated at the first
    update: appending writes in place. :class:`DynamicLayer` concatenates, copying the whole cache at every decode
    step (on CPU about half of a batch-8 SmolLM2 step at ~1,000 positions). ``prefix``, a batch-1 layer, is
    broadcast into every row first: its first ``length`` positions (all of them when None)."""

    def __init__(self, batch: int, capacity: int, prefix: CacheLayerMixin | None = None,
                 length: int | None = None) -> None:
        super().__init__()
        self.batch, self.capacity, self.length = batch, capacity, 0
        if prefix is not None:
            self.update(prefix.keys[:, :, :length], prefix.values[:, :, :length])

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.dtype, self.device = key_states.dtype, key_states.device
        heads, key_dim, value_dim = key_states.shape[1], key_states.shape[-1], value_states.shape[-1]
        # zeros, not empty: masked positions must hold finite numbers (0 x NaN is NaN after the softmax)
        self._keys = key_states.new_zeros((self.batch, heads, self.capacity, key_dim))  # (B, H, capacity, D)
        self._values = value_states.new_zeros((self.batch, heads, self.capacity, value_dim))
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs
               ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        end = self.length + key_states.shape[-2]
        if end > self.capacity:
            raise RuntimeError(f"cache of {self.capacity} positions cannot take {end}")
        self._keys[:, :, self.length:end] = key_states  # (B or 1, H, new, D): a batch-1 prefix broadcasts
        self._values[:, :, self.length:end] = value_states
        return self._grow_to(end)

    def place(self, row: int, keys: torch.Tensor, values: torch.Tensor, end: int) -> None:
        """Row ``row`` holds the batch-1 ``keys``/``values`` ``(1, H, n, D)`` at positions ``end - n`` to ``end``."""
        if not self.is_initialized:
            self.lazy_initialization(keys, values)
        n = keys.shape[-2]
        self._keys[row, :, end - n:end] = keys[0]
        self._values[row, :, end - n:end] = values[0]
        self._grow_to(end)

    def _grow_to(self, end: int) -> tuple[torch.Tensor, torch.Tensor]:
        self.length = end
        self.keys, self.values = self._keys[:, :, :end], self._values[:, :, :end]  # (B, H, end, D) views
        return self.keys, self.values
