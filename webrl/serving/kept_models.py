"""The models a service loads for the requests that name them, kept for the next request and bounded.

A REST service that loads the model a request names (the critic of a phase, an ORM folder) keeps it for the next
request, since loading is the expensive part; but a run names a new critic every phase, so keeping every one would
grow the service by one model a phase for as long as it runs. :class:`KeptModels` keeps the most recently used few
(the Celery workers' ``lru_cache(maxsize=2)`` does the same for theirs).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

#: Models a service keeps loaded: the phase's and the one before it (a run's critic values both in a phase).
MODELS_KEPT = 2


class KeptModels(Generic[K, V]):
    """At most ``size`` loaded models by key, the least recently used let go first."""

    def __init__(self, size: int = MODELS_KEPT) -> None:
        if size < 1:
            raise ValueError(f"keep at least one model, not {size}")
        self.size = size
        self._models: OrderedDict[K, V] = OrderedDict()

    def get(self, key: K, load: Callable[[], V]) -> V:
        """The model under ``key``: kept, or ``load()``-ed now (then the least recently used beyond ``size`` go)."""
        if key in self._models:
            self._models.move_to_end(key)
            return self._models[key]
        model = load()
        self._models[key] = model
        while len(self._models) > self.size:
            self._models.popitem(last=False)
        return model

    def drop(self, which: Callable[[K], bool]) -> None:
        """Let go of the models whose key ``which`` accepts (an earlier publication of a republished folder)."""
        for key in [k for k in self._models if which(k)]:
            del self._models[key]

    def __len__(self) -> int:
        return len(self._models)

    def __iter__(self) -> Iterator[K]:
        return iter(self._models)
