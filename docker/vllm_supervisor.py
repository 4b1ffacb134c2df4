"""Serve the newest published actor checkpoint with vLLM, and roll over to each new one (the `vllm` service).

Runs as the entrypoint of the stock ``vllm/vllm-openai`` image (standard library only):

    python3 vllm_supervisor.py --port 8000 --initial-model PATH [--base-model BASE] -- [vllm args]

1. Ask the trainer for its checkpoints (``GET $WEBRL_TRAINER_URL/v1/checkpoints``, Bearer ``$WEBRL_SECURITY__API_KEY``
   when set) and take the newest with role ``actor``; while the trainer has published none, or cannot be
   reached, serve ``--initial-model`` (the SFT checkpoint).
2. Start ``vllm serve <checkpoint folder> --served-model-name <initial model path>``. The actor service's
   openai backend sends ``WEBRL_ACTOR__MODEL`` both as the model name and as the local folder whose chat
   template renders prompts (services/actor/engine.py), so the name stays the SFT folder's path for every
   checkpoint served: a roll-over never changes the actor's configuration (fine-tuning keeps the tokenizer).
   An adapter folder (peft's ``adapter_config.json``: the LoRA presets) is served on its base, ``--base-model``:
   ``vllm serve <base> --served-model-name <base> --enable-lora --lora-modules <initial model path>=<adapter>``,
   so the actor asks for the same name and gets the adapter.
3. Every ``--poll-s`` seconds look again. When a newer *full-weight* actor checkpoint has been published (its
   folder is on the shared artifacts volume, mounted at the same path as in the trainer), stop vLLM (SIGTERM,
   then SIGKILL after ``--stop-timeout-s``) and start it on the new folder: new weights everywhere are a reload.
   A newer *adapter* checkpoint restarts nothing: the actor service hot-loads it into the running server
   (``POST /v1/load_lora_adapter`` under the checkpoint's version, services/actor/engine.py) when it is announced,
   and unloads the adapters no request uses any more. vLLM's runtime LoRA routes need
   ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True``, set for the server here. vLLM's /health fails while it reloads, so
   the container's health check and Kubernetes' readiness probe take it out of rotation meanwhile; the pipeline
   publishes between phases, when no rollout is in flight.

If vLLM exits on its own, the supervisor exits with its status, and the container restarts.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("webrl.vllm_supervisor")

REQUEST_TIMEOUT_S = 10.0
ACTOR_ROLE = "actor"
PEFT_CONFIG_FILE = "adapter_config.json"  # webrl.model_folders.PEFT_CONFIG_FILE: an adapter folder


def is_adapter(path: str) -> bool:
    """A LoRA adapter folder (served on its base), not a full model folder."""
    return (Path(path) / PEFT_CONFIG_FILE).is_file()


@dataclass(frozen=True)
class Checkpoint:
    """A published checkpoint: its version and its Hugging Face folder."""

    version: str
    path: str


def _rows(body: object) -> list[dict]:
    """The checkpoint rows of a ``GET /v1/checkpoints`` answer (a list, or an object holding one)."""
    if isinstance(body, dict):
        for key in ("checkpoints", "items", "data"):
            if isinstance(body.get(key), list):
                return [row for row in body[key] if isinstance(row, dict)]
        return []
    return [row for row in body if isinstance(row, dict)] if isinstance(body, list) else []


def newest_actor(body: object) -> Checkpoint | None:
    """The newest actor checkpoint in a checkpoints answer. The trainer lists rows oldest first
    (``webrl.store.checkpoints.list_checkpoints``), so it is the last actor row with a path."""
    rows = [r for r in _rows(body) if r.get("role") == ACTOR_ROLE and r.get("path")]
    if not rows:
        return None
    return Checkpoint(version=str(rows[-1].get("version") or rows[-1]["path"]), path=str(rows[-1]["path"]))


def fetch_newest(trainer_url: str, api_key: str | None) -> Checkpoint | None:
    """Ask the trainer; None when it is unreachable or has published no actor yet."""
    url = trainer_url.rstrip("/") + f"/v1/checkpoints?role={ACTOR_ROLE}"
    request = urllib.request.Request(url, headers={"Accept": "application/json"})
    if api_key:
        request.add_header("Authorization", f"Bearer {api_key}")
    try:
        with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT_S) as response:
            return newest_actor(json.loads(response.read()))
    except (OSError, ValueError) as exc:
        log.warning("cannot list checkpoints at %s: %s", url, exc)
        return None


class Supervisor:
    """Keeps one vLLM server running on the newest actor checkpoint."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.child: subprocess.Popen | None = None
        self.serving: Checkpoint | None = None
        self.adapter_seen: Checkpoint | None = None
        self.stopping = False

    def command(self, checkpoint: Checkpoint) -> list[str]:
        """vLLM on a full-weight folder under the served name, or on the base with the adapter under that name."""
        a = self.args
        where = ["--host", a.host, "--port", str(a.port)]
        if not is_adapter(checkpoint.path):
            return [*a.serve_cmd.split(), checkpoint.path, *where, "--served-model-name", a.served_model_name,
                    *a.vllm_args]
        if not a.base_model:
            raise SystemExit(f"{checkpoint.path} is a LoRA adapter: give its base folder with --base-model")
        return [*a.serve_cmd.split(), a.base_model, *where, "--served-model-name", a.base_model, "--enable-lora",
                "--lora-modules", f"{a.served_model_name}={checkpoint.path}", *a.vllm_args]

    def start(self, checkpoint: Checkpoint) -> None:
        log.info("serving actor %s from %s", checkpoint.version, checkpoint.path)
        env = {**os.environ, "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True"}
        self.child = subprocess.Popen(self.command(checkpoint), env=env)
        self.serving = checkpoint

    def stop(self) -> None:
        if self.child is None or self.child.poll() is not None:
            return
        self.child.send_signal(signal.SIGTERM)
        try:
            self.child.wait(timeout=self.args.stop_timeout_s)
        except subprocess.TimeoutExpired:
            self.child.kill()
            self.child.wait()

    def wanted(self) -> Checkpoint:
        """The newest published actor whose folder is present here, else what is served, else the initial. An
        adapter is the actor service's to hot-load into the running server: what is served stays."""
        newest = fetch_newest(self.args.trainer_url, self.args.api_key)
        if newest is not None and Path(newest.path).is_dir():
            if not is_adapter(newest.path):
                return newest
            if newest != self.adapter_seen:
                log.info("actor %s is an adapter: hot-loaded by the actor service, no restart", newest.version)
                self.adapter_seen = newest
            newest = None
        if newest is not None:
            log.warning("actor %s is published at %s but that folder is not mounted here", newest.version,
                        newest.path)
        return self.serving or Checkpoint(version="initial", path=self.args.initial_model)

    def run(self) -> int:
        self.start(self.wanted())
        while not self.stopping:
            deadline = time.monotonic() + self.args.poll_s
            while time.monotonic() < deadline and not self.stopping:
                assert self.child is not None
                if self.child.poll() is not None:
                    log.error("vLLM exited with status %s", self.child.returncode)
                    return self.child.returncode or 1
                time.sleep(min(1.0, self.args.poll_s))
            if self.stopping:
                break
            target = self.wanted()
            if target != self.serving:
                log.info("new actor checkpoint %s: reloading vLLM", target.version)
                self.stop()
                self.start(target)
        self.stop()
        return 0


def parse_args(argv: list[str]) -> argparse.Namespace:
    """Supervisor options, then ``--``, then arguments passed to vLLM unchanged."""
    own, vllm_args = _split(argv)
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--host", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--initial-model", required=True, help="Folder served until an actor is published.")
    parser.add_argument("--served-model-name", default=None, help="Name clients ask for (default: --initial-model).")
    parser.add_argument("--base-model", default=None, help="Base folder an adapter checkpoint is served on.")
    parser.add_argument("--poll-s", type=float, default=30.0, help="Seconds between checkpoint look-ups.")
    parser.add_argument("--stop-timeout-s", type=float, default=60.0)
    parser.add_argument("--serve-cmd", default="vllm serve", help="Command that takes the model folder first.")
    parser.add_argument("--trainer-url", default=os.environ.get("WEBRL_TRAINER_URL", "http://trainer:8106"))
    args = parser.parse_args(own)
    args.served_model_name = args.served_model_name or args.initial_model
    args.api_key = os.environ.get("WEBRL_SECURITY__API_KEY") or None
    args.vllm_args = vllm_args
    return args


def _split(argv: list[str]) -> tuple[list[str], list[str]]:
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1:]
    return argv, []


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    supervisor = Supervisor(parse_args(sys.argv[1:] if argv is None else argv))

    def _terminate(signum: int, _frame: object) -> None:
        supervisor.stopping = True

    signal.signal(signal.SIGTERM, _terminate)
    signal.signal(signal.SIGINT, _terminate)
    return supervisor.run()


if __name__ == "__main__":
    sys.exit(main())
