"""The ``orm.score`` Celery task (eager), and the openai backend against an OpenAI-compatible server that serves
the same tiny model's real log-probs (as vLLM's ``/v1/completions`` with ``logprobs=k`` does)."""

from __future__ import annotations

import math
import socket
import threading
import time
from collections.abc import Iterator

import pytest
import torch
import uvicorn
from fastapi import FastAPI
from sqlalchemy import select

from services.orm.scoring import LocalOrm, OpenAIOrm, p_from_top_logprobs
from webrl.db import models as m
from webrl.db.session import session_scope
from webrl.models.loading import bounded_version, checkpoint_version
from webrl.models.orm import orm_probabilities, yes_no_token_ids
from webrl.prompts.orm_prompt import render_orm_prompt
from webrl.wire.queue import dispatch


def test_orm_score_task_labels_a_phase(tiny_orm_dir, db_settings, make_trajectory, store) -> None:
    ids = store(db_settings, [make_trajectory(i) for i in range(3)], phase=2)
    store(db_settings, [make_trajectory(9, intent="another phase")], phase=3)
    result = dispatch("orm.score", {"phase": 2, "orm": str(tiny_orm_dir), "threshold": 0.5})
    assert [r["trajectory_id"] for r in result["results"]] == ids
    assert [r["reward"] for r in result["results"]] == [1.0 if r["p"] >= 0.5 else 0.0 for r in result["results"]]
    again = dispatch("orm.score", {"trajectory_ids": ids, "orm": str(tiny_orm_dir)})
    assert [r["p"] for r in again["results"]] == pytest.approx([r["p"] for r in result["results"]])
    with session_scope(db_settings) as session:
        assert sorted(session.scalars(select(m.OrmLabel.trajectory_id))) == ids


def test_orm_score_task_rejects_an_empty_payload(tiny_orm_dir, db_settings) -> None:
    with pytest.raises(ValueError, match="trajectory_ids or phase"):  # pydantic's ValidationError is a ValueError
        dispatch("orm.score", {"orm": str(tiny_orm_dir)})


def test_p_from_top_logprobs() -> None:
    assert p_from_top_logprobs({"YES": math.log(0.3), "NO": math.log(0.1)}) == pytest.approx(0.75)
    assert p_from_top_logprobs({"YES": -1.0, "other": -5.0}) == pytest.approx(1 / (1 + math.exp(-4.0)))
    assert p_from_top_logprobs({"Y": math.log(0.2), "N": math.log(0.2)}, "Y", "N") == pytest.approx(0.5)
    with pytest.raises(ValueError, match="neither 'YES' nor 'NO'"):
        p_from_top_logprobs({"maybe": -0.1})


def _completions_app(orm: LocalOrm) -> FastAPI:
    """A minimal OpenAI-compatible completions route: top-k log-probs of the first generated position."""
    app = FastAPI()
    tok = orm.tokenizer

    @app.post("/v1/completions")
    def completions(body: dict) -> dict:
        prompts = body["prompt"] if isinstance(body["prompt"], list) else [body["prompt"]]
        choices = []
        for index, prompt in enumerate(prompts):
            ids = torch.tensor([tok(prompt, add_special_tokens=False)["input_ids"]])
            with torch.no_grad():
                logp = torch.log_softmax(orm.model(ids).logits[0, -1].float(), dim=-1)
            top = torch.topk(logp, k=int(body["logprobs"]))
            top_map = {tok.decode([int(i)]): float(v) for v, i in zip(top.values, top.indices, strict=True)}
            for answer_id in yes_no_token_ids(tok):  # both answers visible even to an untrained model
                top_map.setdefault(tok.decode([answer_id]), float(logp[answer_id]))
            best = int(top.indices[0])
            choices.append({"index": index, "text": tok.decode([best]), "finish_reason": "length",
                            "logprobs": {"tokens": [tok.decode([best])], "token_logprobs": [float(top.values[0])],
                                         "top_logprobs": [top_map], "text_offset": [0]}})
        return {"id": "cmpl-test", "object": "text_completion", "created": 0, "model": body["model"],
                "choices": choices}

    return app


@pytest.fixture
def openai_server(tiny_orm_dir, db_settings) -> Iterator[tuple[str, LocalOrm]]:
    orm = LocalOrm(tiny_orm_dir, db_settings)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(_completions_app(orm), log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.02)
    yield f"http://127.0.0.1:{sock.getsockname()[1]}/v1", orm
    server.should_exit = True
    thread.join(timeout=10)


def test_openai_backend_matches_the_local_backend(openai_server, db_settings, make_trajectory) -> None:
    url, local = openai_server
    tokenizer = local.tokenizer
    remote = OpenAIOrm(url, "tiny-orm", db_settings, tokenizer=tokenizer)
    trajs = [make_trajectory(i) for i in range(5)]
    assert remote.probabilities(trajs) == pytest.approx(local.probabilities(trajs), abs=1e-5)


def test_orm_start_value_judges_start_states(tiny_orm_dir, db_settings) -> None:
    items = [{"key": "a", "intent": "Buy item 1", "observation": '<input id="13"/>'},
             {"key": "b", "intent": "Buy item 2", "observation": '<div id="5">Order placed</div>'}]
    result = dispatch("orm.start_value", {"orm": str(tiny_orm_dir), "states": items})
    orm = LocalOrm(tiny_orm_dir, db_settings)
    prompts = [render_orm_prompt(orm.tokenizer, i["intent"], [], i["observation"]) for i in items]
    assert result["values"] == pytest.approx(orm_probabilities(orm.model, orm.tokenizer, prompts), abs=1e-5)


def test_the_openai_backend_refuses_an_orm_it_does_not_serve_naming_it(openai_server, db_settings, tiny_orm_dir,
                                                                      make_trajectory, monkeypatch) -> None:
    """With WEBRL_ORM__BACKEND=openai a request's ``orm`` is the served model's name: only the configured one, or a
    model folder a request may name (served by its path), is sent to the server. Any other name is a 422 naming
    ``orm`` before anything reaches the network (the server's 404 would be a 500), and no backend is kept for it."""
    from fastapi.testclient import TestClient

    from services.orm.app import create_orm_app

    url, _ = openai_server
    settings = db_settings.replace(orm={"backend": "openai", "endpoint": url, "model": "tiny-orm"})
    sent: list[str] = []
    real = OpenAIOrm.probabilities
    monkeypatch.setattr(OpenAIOrm, "probabilities", lambda self, trajs: sent.append(self.model) or real(self, trajs))
    reports = settings.artifacts_dir / "reports"
    reports.mkdir(parents=True, exist_ok=True)
    app = create_orm_app(settings)
    client = TestClient(app)
    body = {"trajectories": [make_trajectory(0).model_dump(mode="json")]}
    for name in ("gpt-4o", "/etc", "/nonexistent-webrl", str(reports)):
        refused = client.post("/v1/orm/score", json={**body, "orm": name})
        assert refused.status_code == 422, (name, refused.text)
        error = refused.json()["error"]
        assert error["fields"][0]["field"] == "orm" and "neither the served ORM" in error["message"], name
    assert sent == [] and len(app.state.orm.backends) == 0
    # a folder served by its path is labelled with the version it declares, as the local backend labels it and a
    # run's pipeline reads its rewards back (checkpoint_version), not with the path
    for name, version in ((None, "tiny-orm"), ("tiny-orm", "tiny-orm"),
                          (str(tiny_orm_dir), checkpoint_version(tiny_orm_dir))):
        served = client.post("/v1/orm/score", json={**body, "orm": name})
        assert served.status_code == 200 and served.json()["orm_version"] == version, served.text
    assert sent == ["tiny-orm", "tiny-orm", str(tiny_orm_dir)]
    assert OpenAIOrm(url, "m" * 300, settings).version == bounded_version("m" * 300)  # the columns hold 80
