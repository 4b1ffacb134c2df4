"""A stand-in for vLLM's OpenAI-compatible server with runtime LoRA routes, for the normal suite (vLLM itself needs
its own virtualenv: ``make test-vllm``). Its replies are vLLM 0.32's, status codes and messages included, as
test_actor_vllm.py checks against vLLM itself: ``/v1/models`` lists the served name (``root``: the folder) and each
adapter (``root``: its folder, ``parent``: the served name); loading a name twice is a 400 "has already been
loaded", a missing folder or unknown name a 404; a completion for an unknown model is a 404. Every completion's
text is the model name it was asked for, so a test sees where a request was routed."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response


def _error(status: int, message: str, kind: str) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": kind, "param": None, "code": status}},
                        status_code=status)


class VLLMStandIn:
    """The server's state: the served model and the adapters loaded; what completions asked for."""

    def __init__(self, served_name: str, root: str) -> None:
        self.served_name = served_name
        self.root = root
        self.adapters: dict[str, str] = {}
        self.asked: list[str] = []  # the model of each completion request
        self.loads: list[str] = []  # each successful load, by name
        self.unmounted: set[str] = set()  # folders this server cannot see (another machine's volume)

    def app(self) -> FastAPI:
        app = FastAPI()

        @app.get("/v1/models")
        def models() -> dict:
            data = [{"id": self.served_name, "object": "model", "root": self.root, "parent": None}]
            data += [{"id": name, "object": "model", "root": path, "parent": self.served_name}
                     for name, path in self.adapters.items()]
            return {"object": "list", "data": data}

        @app.post("/v1/completions")
        async def completions(request: Request) -> JSONResponse:
            body = await request.json()
            model = body["model"]
            if model != self.served_name and model not in self.adapters:
                return _error(404, f"The model `{model}` does not exist.", "NotFoundError")
            self.asked.append(model)
            prompts = [body["prompt"]] if isinstance(body["prompt"], str) else body["prompt"]
            choices = [{"index": i, "text": model, "finish_reason": "length",
                        "logprobs": {"tokens": ["token_id:7"], "token_logprobs": [-0.5], "text_offset": [0],
                                     "top_logprobs": [{"token_id:7": -0.5}]}} for i in range(len(prompts))]
            return JSONResponse({"id": "cmpl-0", "object": "text_completion", "created": 0, "model": model,
                                 "choices": choices,
                                 "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})

        @app.post("/v1/load_lora_adapter", response_model=None)
        async def load(request: Request) -> Response:
            body = await request.json()
            name, path = body["lora_name"], body["lora_path"]
            if name in self.adapters:
                return _error(400, f"The lora adapter '{name}' has already been loaded. If you want to load the "
                                   "adapter in place, set 'load_inplace' to True.", "InvalidUserInput")
            if path in self.unmounted or not (Path(path) / "adapter_config.json").is_file():
                return _error(404, f"Loading lora {name} failed: No adapter found for {path}", "NotFoundError")
            self.adapters[name] = path
            self.loads.append(name)
            return PlainTextResponse(f"Success: LoRA adapter '{name}' added successfully.")

        @app.post("/v1/unload_lora_adapter", response_model=None)
        async def unload(request: Request) -> Response:
            name = (await request.json())["lora_name"]
            if self.adapters.pop(name, None) is None:
                return _error(404, f"The lora adapter '{name}' cannot be found.", "NotFoundError")
            return PlainTextResponse(f"Success: LoRA adapter '{name}' removed successfully.")

        return app
