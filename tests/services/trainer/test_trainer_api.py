"""The trainer's REST routes and Celery tasks."""

from __future__ import annotations

import time
from pathlib import Path

from fastapi.testclient import TestClient

from services.trainer.app import create_trainer_app
from webrl.store.checkpoints import publish

CLICK, EXIT = 'do(action="Click", element="3")', 'exit(message="done")'


def test_bad_train_payload_is_a_422_naming_the_field(db) -> None:
    client = TestClient(create_trainer_app(db))
    response = client.post("/v1/train", json={"phase": 0, "actor": "x"})
    assert response.status_code == 422
    assert response.json()["error"]["fields"][0]["field"] == "phase"
    response = client.post("/v1/train", json={"phase": 1})
    assert response.status_code == 422 and "actor" in response.json()["error"]["message"]
    assert client.get("/v1/train/nope").status_code == 404


def test_checkpoints_route_lists_published_rows(db, tmp_path: Path) -> None:
    publish(db, lambda f: (f / "config.json").write_text("{}"), tmp_path / "a", role="actor", version="v1")
    publish(db, lambda f: (f / "config.json").write_text("{}"), tmp_path / "c", role="critic", version="v1")
    client = TestClient(create_trainer_app(db))
    assert [c["role"] for c in client.get("/v1/checkpoints").json()] == ["actor", "critic"]
    only = client.get("/v1/checkpoints", params={"role": "critic"}).json()
    assert len(only) == 1 and only[0]["version"] == "v1" and len(only[0]["sha256"]) == 64
    assert client.get("/v1/checkpoints", params={"role": "nope"}).status_code == 422


def test_sft_job_through_rest_runs_and_reports(tiny_dir: Path, store_trajectory, db) -> None:
    ids = [store_trajectory("s1", 0, 0, [CLICK, EXIT], reward=None, env_score=1.0, purpose="sft")]
    client = TestClient(create_trainer_app(db))
    body = {"base": str(tiny_dir), "output": str(Path(db.artifacts_dir) / "sft"), "trajectory_ids": ids, "lr": 1e-3,
            "max_length": 300}
    accepted = client.post("/v1/train/sft", json=body)
    assert accepted.status_code == 202 and accepted.json()["task"] == "train.sft"
    job_id = accepted.json()["job_id"]
    deadline = time.time() + 120
    status = client.get(f"/v1/train/{job_id}").json()
    while status["status"] == "running" and time.time() < deadline:
        time.sleep(0.5)
        status = client.get(f"/v1/train/{job_id}").json()
    assert status["status"] == "succeeded", status
    assert status["result"]["path"] == str((Path(db.artifacts_dir) / "sft").resolve())


def test_a_failed_embedded_job_is_kept_as_its_status_and_lets_its_models_go(db, monkeypatch) -> None:
    """The failed job's exception carries its traceback, whose frames hold what the job loaded: only its status
    stays (a service that kept the future kept an actor, its optimizer and a critic alive after every failure)."""
    import gc
    import weakref

    from services.trainer import app as trainer_app
    from webrl.wire.contracts import SftJob

    class Model:  # stands for what a job loads before it fails
        pass

    models: list[weakref.ref] = []

    def failing(settings, job):
        model = Model()
        models.append(weakref.ref(model))
        raise RuntimeError("out of memory")

    monkeypatch.setattr(trainer_app, "run_job", failing)
    jobs = trainer_app.LocalJobs()
    job_id = jobs.submit(db, SftJob(base="base", output="sft", trajectory_ids=[1]))
    deadline = time.time() + 30
    while jobs.status(job_id).status == "running" and time.time() < deadline:
        time.sleep(0.05)
    assert jobs.status(job_id).model_dump() == {"job_id": job_id, "status": "failed", "result": None,
                                                "error": "out of memory"}
    gc.collect()
    assert models and models[0]() is None and jobs.running == {}
    assert jobs.status("nope") is None


def test_celery_task_runs_eagerly_through_dispatch(tiny_dir: Path, store_trajectory, db) -> None:
    from webrl.wire.queue import configure, dispatch

    configure(db)
    ids = [store_trajectory("s1", 0, 0, [CLICK], reward=None, env_score=1.0, purpose="sft")]
    result = dispatch("train.sft", {"base": str(tiny_dir), "output": str(Path(db.artifacts_dir) / "sft2"),
                                    "kind": "actor", "trajectory_ids": ids, "phase": None, "purpose": None,
                                    "epochs": 1, "lr": 1e-3, "seed": 0, "max_minutes": None, "max_length": 300})
    assert set(result) == {"path", "version", "sha256", "metrics"}
    assert result["metrics"]["examples"] == 1


def test_a_misspelt_job_field_is_a_422_naming_it(db) -> None:
    client = TestClient(create_trainer_app(db))
    response = client.post("/v1/train", json={"phase": 1, "actor": "x", "actor_lrr": 1e-3})
    assert response.status_code == 422
    assert response.json()["error"]["fields"][0]["field"] == "actor_lrr"


def test_rest_job_and_typed_client_publish_the_same_checkpoint(tiny_dir: Path, store_trajectory, db) -> None:
    from webrl.wire.clients import train_sft
    from webrl.wire.contracts import SftJob, SftResult
    from webrl.wire.queue import configure

    configure(db)
    ids = [store_trajectory("s1", 0, 0, [CLICK, EXIT], reward=None, env_score=1.0, purpose="sft")]
    job = SftJob(base=str(tiny_dir), output=str(Path(db.artifacts_dir) / "sft3"), trajectory_ids=ids, lr=1e-3,
                 max_length=300)
    client = TestClient(create_trainer_app(db))
    job_id = client.post("/v1/train/sft", json=job.model_dump(mode="json")).json()["job_id"]
    deadline = time.time() + 120
    status = client.get(f"/v1/train/{job_id}").json()
    while status["status"] == "running" and time.time() < deadline:
        time.sleep(0.5)
        status = client.get(f"/v1/train/{job_id}").json()
    by_route = SftResult.model_validate(status["result"])
    by_task = train_sft(job)  # the eager Celery task finds the published checkpoint: same job, same version
    assert (by_task.path, by_task.version, by_task.sha256) == (by_route.path, by_route.version, by_route.sha256)
