"""Batching policy calls across the episodes that run at once: each episode asks for one action, the policy
gets them as one batch (an actor then runs one forward pass for all of them)."""

from __future__ import annotations

import asyncio

from webrl.agent.policy import Policy, PolicyRequest, PolicyResponse

BATCH_WAIT_S = 0.05  # how long a ready episode waits for the others before its batch goes alone

_Pending = tuple[PolicyRequest, asyncio.Future[PolicyResponse]]


class Batcher:
    """Collects the episodes' policy requests into batches: a batch goes when every live episode waits,
    or ``wait_s`` after its first request (so a slow page does not hold the others back for long).

    An episode calls :meth:`join` when it starts, :meth:`act` (its decide function) at each step and
    :meth:`leave` when it ends, so that the batcher knows how many requests to wait for."""

    def __init__(self, policy: Policy, wait_s: float = BATCH_WAIT_S) -> None:
        self.policy, self.wait_s = policy, wait_s
        self.live = 0
        self.pending: list[_Pending] = []
        self._timer: asyncio.TimerHandle | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    def join(self) -> None:
        self.live += 1

    async def act(self, request: PolicyRequest) -> PolicyResponse:
        """The policy's response to ``request``, answered with the batch it went in; raises what the policy raised."""
        future: asyncio.Future[PolicyResponse] = asyncio.get_running_loop().create_future()
        self.pending.append((request, future))
        self._maybe_flush()
        return await future

    def leave(self) -> None:
        self.live -= 1
        self._maybe_flush()

    def _maybe_flush(self) -> None:
        if not self.pending:
            return
        if len(self.pending) >= self.live:
            self._flush()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self.wait_s, self._flush)

    def _flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        batch, self.pending = self.pending, []
        if batch:
            task = asyncio.ensure_future(self._answer(batch))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _answer(self, batch: list[_Pending]) -> None:
        try:
            responses = await self.policy.act([request for request, _ in batch])
            if len(responses) != len(batch):
                raise RuntimeError(f"policy answered {len(responses)} responses for {len(batch)} requests")
        except Exception as exc:
            for _, future in batch:
                if not future.done():
                    future.set_exception(exc)
            return
        for (_, future), response in zip(batch, responses, strict=True):
            if not future.done():
                future.set_result(response)
