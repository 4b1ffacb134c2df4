"""De-duplication of generated tasks against every task already stored and against each other.

Two intents are duplicates when their normalised text is equal, or when they are near-duplicates: the
Jaccard similarity of their character trigram sets is at least :data:`NEAR_DUPLICATE_JACCARD`. Trigrams
catch re-wordings like "What's the price of X?" vs "what is the price of x" while two intents that differ
in their entity ("... of Blue Mug" vs "... of Desk Lamp") stay apart.
"""

from __future__ import annotations

from collections.abc import Iterable

from webrl.db.repository import normalise_intent

# "What's the price of the Blue Ceramic Mug?" vs "What is ...": 0.88 (a duplicate); "... Blue Ceramic Mug" vs
# "... Blue Ceramic Cup": 0.82 and "... Blue ..." vs "... Red Ceramic Mug": 0.75 (different tasks).
NEAR_DUPLICATE_JACCARD = 0.85


def trigrams(text: str) -> frozenset[str]:
    padded = f"  {normalise_intent(text)} "
    return frozenset(padded[i:i + 3] for i in range(len(padded) - 2))


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)


class Deduplicator:
    """Remembers intents; :meth:`admit` accepts an intent only if nothing remembered duplicates it."""

    def __init__(self, existing: Iterable[str] = ()) -> None:
        self._norms: set[str] = set()
        self._grams: list[frozenset[str]] = []
        self._by_gram: dict[str, list[int]] = {}
        for intent in existing:
            self._remember(intent)

    def _remember(self, intent: str) -> None:
        grams = trigrams(intent)
        self._norms.add(normalise_intent(intent))
        index = len(self._grams)
        self._grams.append(grams)
        for g in grams:
            self._by_gram.setdefault(g, []).append(index)

    def duplicate_of(self, intent: str) -> str | None:
        """Why ``intent`` is a duplicate ("exact" or "near"), or None when it is new."""
        if normalise_intent(intent) in self._norms:
            return "exact"
        grams = trigrams(intent)
        # only intents sharing a trigram can reach the threshold; count shared grams through the index
        shared: dict[int, int] = {}
        for g in grams:
            for index in self._by_gram.get(g, ()):
                shared[index] = shared.get(index, 0) + 1
        for index, common in shared.items():
            union = len(grams) + len(self._grams[index]) - common
            if union and common / union >= NEAR_DUPLICATE_JACCARD:
                return "near"
        return None

    def admit(self, intent: str) -> bool:
        if self.duplicate_of(intent) is not None:
            return False
        self._remember(intent)
        return True
