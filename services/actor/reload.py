"""Hot reload: listen on Redis ``webrl:checkpoints`` and swap in each newly published actor.

Events are JSON ``{"role", "version", "path", "sha256"}`` (``webrl.store.checkpoints.CheckpointInfo.event``); only
``role == "actor"`` events with a new version are loaded, and a folder whose files do not hash to the event's
sha256 is refused (a half-copied or tampered checkpoint never serves).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable

import redis
from kombu.utils.url import maybe_sanitize_url

from webrl.store.checkpoints import CHANNEL, folder_sha256
from webrl.wire.contracts import InvalidRequest

log = logging.getLogger("webrl.actor.reload")

POLL_SECONDS = 0.2  # how often the listener checks for a stop request between messages
RETRY_SECONDS = (0.5, 10.0)  # the first wait before subscribing again after a lost connection, and the longest


def parse_event(data: bytes | str) -> dict[str, str] | None:
    """The event as a dict, or None when it is not a well-formed actor event."""
    try:
        event = json.loads(data)
    except (json.JSONDecodeError, TypeError):
        return None
    if not isinstance(event, dict) or event.get("role") != "actor":
        return None
    if not all(isinstance(event.get(k), str) and event.get(k) for k in ("version", "path", "sha256")):
        return None
    return event


class CheckpointSubscriber:
    """A daemon thread that calls ``on_actor(path, version)`` for each valid actor event. ``check_path`` (the
    service's: :func:`~webrl.serving.paths.requested_model_folder`) raises for a folder a request may not name: an
    event is a request like any other, from whoever can publish on the channel, and the sha256 it carries is its
    own word."""

    def __init__(self, redis_url: str, on_actor: Callable[[str, str], object],
                 current_version: Callable[[], str], *, channel: str = CHANNEL,
                 check_path: Callable[[str], object] | None = None) -> None:
        self.redis_url = redis_url
        self.on_actor = on_actor
        self.check_path = check_path
        self.current_version = current_version
        self.channel = channel
        self.loaded: list[str] = []
        self.last_error: str | None = None  # why the last reload failed; None once one loads
        self.listen_error: str | None = None  # why the listener is not subscribed now; None while it is
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="checkpoint-subscriber", daemon=True)

    def start(self, timeout: float = 10.0) -> None:
        """Start listening; returns once subscribed (so no event published afterwards is missed)."""
        self._thread.start()
        if not self._ready.wait(timeout):
            where = maybe_sanitize_url(self.redis_url)  # the URL carries Redis's password
            raise TimeoutError(f"could not subscribe to {self.channel} at {where}")

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        """Listen until stopped. A lost connection (Redis restarting) or an error handling one event never ends
        the listener: it says why in ``listen_error`` (:attr:`error`, ``GET /v1/model``'s ``reload_error``), waits
        (longer after each failed try, from the first wait again once it was subscribed) and subscribes again.
        Events published while it was away are gone (pub/sub keeps none); the pipeline announces the checkpoint it
        needs again when it resumes."""
        wait = RETRY_SECONDS[0]
        while not self._stop.is_set():
            try:
                self._listen()
            except Exception as exc:  # redis-py gives up after its own retries: the listener must not
                wait = RETRY_SECONDS[0] if self.listen_error is None else min(wait * 2, RETRY_SECONDS[1])
                self.listen_error = f"listening on {self.channel} failed: {exc}"
                log.warning("%s; subscribing again in %.1f s", self.listen_error, wait)
                self._stop.wait(wait)
            else:
                return

    def _listen(self) -> None:
        client = redis.Redis.from_url(self.redis_url)
        pubsub = client.pubsub(ignore_subscribe_messages=True)
        try:
            pubsub.subscribe(self.channel)
            pubsub.get_message(timeout=1.0)  # the subscribe confirmation
            self.listen_error = None  # listening again
            self._ready.set()
            while not self._stop.is_set():
                message = pubsub.get_message(timeout=POLL_SECONDS)
                if message and message.get("type") == "message":
                    self._handle_safely(message["data"])
        finally:
            pubsub.close()
            client.close()

    def _handle_safely(self, data: bytes | str) -> None:
        try:
            self.handle(data)
        except Exception as exc:  # a folder vanishing mid-hash, say: this event fails, not the listener
            self.last_error = f"refused an event: {exc}"
            log.exception("checkpoint event not handled")

    @property
    def error(self) -> str | None:
        """What ``GET /v1/model`` reports as ``reload_error``: that the listener is not subscribed, else why the
        last reload failed."""
        return self.listen_error or self.last_error

    def handle(self, data: bytes | str) -> bool:
        """Load the event's checkpoint if it is a new, intact actor; True when it was swapped in."""
        event = parse_event(data)
        if event is None or event["version"] == self.current_version():
            return False
        if self.check_path is not None:
            try:
                self.check_path(event["path"])
            except InvalidRequest as refused:
                self.last_error = f"refused {event['version']}: {refused}"
                log.error("%s", self.last_error)
                return False
        if folder_sha256(event["path"]) != event["sha256"]:
            self.last_error = f"refused {event['version']}: {event['path']} does not hash to the announced sha256"
            log.error("%s", self.last_error)
            return False
        try:
            self.on_actor(event["path"], event["version"])
        except Exception as exc:
            self.last_error = f"loading {event['version']} from {event['path']} failed: {exc}"
            log.exception("hot reload of actor %s from %s failed; still serving %s", event["version"],
                          event["path"], self.current_version())
            return False
        self.loaded.append(event["version"])
        self.last_error = None
        return True
