"""The ``tgi`` backend: Text Generation Inference's native ``/generate`` through
``huggingface_hub.InferenceClient``, which returns each generated token's id and log-prob (``details``).

TGI batches on the server, so the prompts of one call are sent concurrently. Which checkpoint it holds comes from
``GET /info``: its ``model_id`` is the folder it loaded, whose declared version is the checkpoint's
(:meth:`TGIBackend.refresh_version`).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx
from huggingface_hub import InferenceClient

from webrl.models.backends.base import Generation, version_served

NO_TOKEN = "none"  # sent as the bearer token when the server needs none
MAX_PARALLEL = 16  # concurrent /generate calls per batch; TGI's default max_concurrent_requests is 128


def _generate_url(endpoint: str) -> str:
    base = endpoint.rstrip("/")
    return base if base.endswith("/generate") else f"{base}/generate"


class TGIBackend:
    """Completions from a TGI server (or anything serving TGI's ``/generate``, e.g. a webrl actor)."""

    name = "tgi"

    def __init__(self, endpoint: str, *, api_key: str | None = None, timeout: float = 120.0) -> None:
        # An explicit token, so the client never looks up (and sends) a Hugging Face token found on this machine.
        self.client = InferenceClient(model=_generate_url(endpoint), token=api_key or NO_TOKEN, timeout=timeout)
        self.endpoint = endpoint.rstrip("/").removesuffix("/generate")
        self.api_key = api_key
        self.version = endpoint
        self._pool = ThreadPoolExecutor(max_workers=MAX_PARALLEL, thread_name_prefix="tgi")

    def _one(self, prompt: str, max_new_tokens: int, temperature: float, seed: int | None) -> Generation:
        sample = temperature > 0
        output = self.client.text_generation(
            prompt, max_new_tokens=max_new_tokens, do_sample=sample, temperature=temperature if sample else None,
            seed=seed, details=True, return_full_text=False,
        )
        tokens = output.details.tokens if output.details else []
        finish = "length" if output.details and output.details.finish_reason == "length" else "stop"
        return Generation(text=output.generated_text, token_ids=[int(t.id) for t in tokens],
                          logprobs=[float(t.logprob) for t in tokens], finish_reason=finish)

    def generate(self, prompts: list[str], max_new_tokens: int, temperature: float, *,
                 seed: int | None = None) -> list[Generation]:
        futures = [self._pool.submit(self._one, p, max_new_tokens, temperature, seed) for p in prompts]
        return [f.result() for f in futures]

    def refresh_version(self) -> str:
        """Ask the server which folder it serves (``model_id`` in ``GET /info``) and take that folder's version.
        Raises ``httpx.HTTPError`` when the server cannot be asked."""
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        reply = httpx.get(f"{self.endpoint}/info", headers=headers, timeout=10.0)
        reply.raise_for_status()
        model_id = reply.json().get("model_id")
        self.version = version_served(str(model_id)) if model_id else self.version
        return self.version

    def close(self) -> None:
        self._pool.shutdown(wait=False)
