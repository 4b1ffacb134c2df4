"""The trainer writes (and replaces) checkpoints inside the artifacts store only: an output path anywhere else
is a 422 naming the field over REST and an InvalidRequest over Celery, and nothing outside is touched."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from services.trainer.app import create_trainer_app
from webrl.db.session import session_scope
from webrl.store.checkpoints import list_checkpoints
from webrl.wire.contracts import InvalidRequest


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """A folder outside the store with a file in it: what a request must not delete or replace."""
    folder = tmp_path / "victim"
    folder.mkdir()
    (folder / "keep.txt").write_text("precious")
    return folder


def _outside_values(db, victim: Path) -> list[str]:
    depth = len(Path(db.artifacts_dir).resolve().parts)
    return [str(victim), "../" * depth + str(victim).lstrip("/"), "../victim", "models/../../../victim"]


def test_rest_refuses_outputs_outside_the_store(db, tiny_dir: Path, victim: Path) -> None:
    client = TestClient(create_trainer_app(db))
    for value in _outside_values(db, victim):
        sft = client.post("/v1/train/sft", json={"base": str(tiny_dir), "output": value, "trajectory_ids": [1]})
        assert sft.status_code == 422, (value, sft.text)
        assert sft.json()["error"]["fields"][0]["field"] == "output"
        assert "outside the artifacts store" in sft.json()["error"]["message"]
        for field in ("actor_output", "critic_output"):
            phase = client.post("/v1/train", json={"phase": 1, "actor": str(tiny_dir), field: value})
            assert phase.status_code == 422, (field, value, phase.text)
            assert phase.json()["error"]["fields"][0]["field"] == field
    assert (victim / "keep.txt").read_text() == "precious" and sorted(p.name for p in victim.iterdir()) == ["keep.txt"]
    with session_scope(db) as session:
        assert list_checkpoints(session) == []


def test_celery_tasks_refuse_outputs_outside_the_store(db, tiny_dir: Path, store_trajectory, victim: Path) -> None:
    from webrl.wire.queue import configure, dispatch

    configure(db)
    ids = [store_trajectory("s1", 0, 0, ['exit(message="done")'], reward=None, env_score=1.0, purpose="sft")]
    for value in _outside_values(db, victim):
        with pytest.raises(InvalidRequest, match=r"^output: .*outside the artifacts store"):
            dispatch("train.sft", {"base": str(tiny_dir), "output": value, "trajectory_ids": ids, "lr": 1e-3,
                                   "max_length": 300})
        with pytest.raises(InvalidRequest, match=r"^actor_output: "):
            dispatch("train.phase", {"phase": 1, "actor": str(tiny_dir), "actor_output": value})
    assert sorted(p.name for p in victim.iterdir()) == ["keep.txt"]
    with session_scope(db) as session:
        assert list_checkpoints(session) == []


INPUT_FIELDS = {"/v1/train/sft": ["base"], "/v1/train/orm-head": ["base"],
                "/v1/train": ["actor", "critic", "critic_base", "reference"]}


def _job(route: str, db, tiny_dir: Path, **fields: str) -> dict[str, object]:
    """A valid body of ``route`` (inputs the tiny model, outputs in the store) with ``fields`` replaced."""
    store = Path(db.artifacts_dir)
    bodies: dict[str, dict[str, object]] = {
        "/v1/train/sft": {"base": str(tiny_dir), "output": str(store / "sft"), "trajectory_ids": [1]},
        "/v1/train/orm-head": {"base": str(tiny_dir), "output": str(store / "orm"), "trajectory_ids": [1, 2]},
        "/v1/train": {"phase": 1, "actor": str(tiny_dir)},
    }
    return {**bodies[route], **fields}


def test_rest_refuses_input_folders_outside_the_model_roots(db, tiny_dir: Path) -> None:
    """A job may load only folders in the store, the shipped models or WEBRL_SECURITY__MODEL_DIRS: /etc (which
    exists) and a folder that does not exist get the same 422 naming the field, so nothing is probed or loaded."""
    client = TestClient(create_trainer_app(db))
    depth = len(Path(db.artifacts_dir).resolve().parts)
    for route, fields in INPUT_FIELDS.items():
        for field in fields:
            for value in ("/etc", "/root", "/nonexistent-webrl", "../" * depth + "etc"):
                reply = client.post(route, json=_job(route, db, tiny_dir, **{field: value}))
                assert reply.status_code == 422, (route, field, value, reply.text)
                error = reply.json()["error"]
                assert error["fields"][0]["field"] == field, (route, value)
                assert "outside the artifacts store and WEBRL_SECURITY__MODEL_DIRS" in error["message"]
    with session_scope(db) as session:
        assert list_checkpoints(session) == []


def test_celery_tasks_refuse_input_folders_outside_the_model_roots(db, tiny_dir: Path) -> None:
    from webrl.wire.queue import configure, dispatch

    configure(db)
    with pytest.raises(InvalidRequest, match=r"^base: .*outside the artifacts store"):
        dispatch("train.sft", {"base": "/etc", "output": "sft", "trajectory_ids": [1]})
    with pytest.raises(InvalidRequest, match=r"^reference: .*outside the artifacts store"):
        dispatch("train.phase", {"phase": 1, "actor": str(tiny_dir), "reference": "/root"})


def test_names_too_long_for_the_file_system_are_a_422_naming_the_field(db, tiny_dir: Path) -> None:
    client = TestClient(create_trainer_app(db))
    too_long = {"a" * 5000: "a path holds at most 4096", "models/" + "a" * 300: "a file or folder name holds at most"}
    for value, message in too_long.items():
        sft = client.post("/v1/train/sft", json=_job("/v1/train/sft", db, tiny_dir, output=value))
        assert sft.status_code == 422 and sft.json()["error"]["fields"][0]["field"] == "output", sft.text
        assert message in sft.json()["error"]["message"]
        phase = client.post("/v1/train", json=_job("/v1/train", db, tiny_dir, critic=value))
        assert phase.status_code == 422 and phase.json()["error"]["fields"][0]["field"] == "critic", phase.text
        assert message in phase.json()["error"]["message"]


def test_the_store_the_shipped_models_and_the_configured_actor_may_be_loaded(db, tiny_dir: Path,
                                                                            tmp_path: Path) -> None:
    """What the demo and the tests start from stays allowed: the converted base and copied actors in the store, the
    shipped SFT actors (webrl/assets), the folders of WEBRL_SECURITY__MODEL_DIRS, and the configured actor."""
    from services.trainer.jobs import check_paths
    from webrl.serving.paths import SHIPPED_MODELS
    from webrl.wire.contracts import PhaseJob, SftJob

    in_store = Path(db.artifacts_dir) / "models" / "base" / "smollm2-135m"
    in_store.mkdir(parents=True)
    (in_store / "config.json").write_text("{}")  # a model folder (and a saved critic: the critic field names it)
    (in_store / "critic_heads.safetensors").write_bytes(b"")
    for base in (in_store, SHIPPED_MODELS / "actor-sft", tiny_dir):
        check_paths(db, SftJob(base=str(base), output="models/out", trajectory_ids=[1]))
    configured = db.replace(actor={"model": "/etc"}, security={"model_dirs": []})
    check_paths(configured, PhaseJob(phase=1, actor="/etc", critic=str(in_store)))
    with pytest.raises(InvalidRequest, match=r"^actor: "):
        check_paths(configured, PhaseJob(phase=1, actor=str(tiny_dir)))  # model_dirs emptied


@pytest.mark.parametrize("field", ["probe", "anchors"])
def test_a_phase_job_reads_a_probe_file_only_inside_the_model_roots(db, tiny_dir: Path, field: str) -> None:
    """The flips probe and the anchor steps are read by the trainer like a model folder: outside the roots (an
    existing file or not) is the same refusal naming the field; a file that is not there is refused too."""
    from webrl.wire.queue import configure, dispatch

    configure(db)
    for value in ("/etc/passwd", "/nonexistent-webrl.jsonl.gz"):
        with pytest.raises(InvalidRequest, match=rf"^{field}: .*outside the artifacts store"):
            dispatch("train.phase", {"phase": 1, "actor": str(tiny_dir), field: value})
    with pytest.raises(InvalidRequest, match=rf"^{field}: no file at"):
        dispatch("train.phase", {"phase": 1, "actor": str(tiny_dir), field: str(db.artifacts_dir)+"/x.jsonl.gz"})


def test_a_folder_that_holds_no_model_is_a_422_naming_the_field(db, tiny_dir: Path) -> None:
    """An existing folder in the store that holds no model (its reports, say) is refused before the job is queued,
    not when transformers fails to load it; a phase job's critic must be a saved critic (its heads file)."""
    from webrl.models.critic import HEADS_FILE

    reports = Path(db.artifacts_dir) / "reports"
    reports.mkdir(parents=True, exist_ok=True)
    client = TestClient(create_trainer_app(db))
    for route, fields in INPUT_FIELDS.items():
        for field in fields:
            reply = client.post(route, json=_job(route, db, tiny_dir, **{field: str(reports)}))
            assert reply.status_code == 422, (route, field, reply.text)
            assert reply.json()["error"]["fields"][0]["field"] == field
            assert "is not a model folder" in reply.json()["error"]["message"]
    not_a_critic = client.post("/v1/train", json=_job("/v1/train", db, tiny_dir, critic=str(tiny_dir)))
    assert not_a_critic.status_code == 422 and not_a_critic.json()["error"]["fields"][0]["field"] == "critic"
    assert f"is not a saved critic (no {HEADS_FILE})" in not_a_critic.json()["error"]["message"]
    with session_scope(db) as session:
        assert list_checkpoints(session) == []


def test_a_celery_job_naming_a_folder_that_holds_no_model_fails_naming_the_field(db, tiny_dir: Path) -> None:
    from webrl.wire.queue import configure, dispatch

    models = Path(db.artifacts_dir) / "models"
    models.mkdir(parents=True, exist_ok=True)
    configure(db)
    with pytest.raises(InvalidRequest, match=r"^base: .*is not a model folder"):
        dispatch("train.sft", {"base": str(models), "output": "sft", "trajectory_ids": [1]})
    with pytest.raises(InvalidRequest, match=r"^critic: .*is not a saved critic"):
        dispatch("train.phase", {"phase": 1, "actor": str(tiny_dir), "critic": str(tiny_dir)})


def test_a_phase_refuses_outputs_that_overlap_each_other_or_its_models(db, tiny_dir: Path) -> None:
    """The phase publishes its critic, then its actor, each replacing what is at its output: outputs that are, hold or
    lie in each other or a model the job loads are a 422 naming the output (the actor deleted the critic just
    published at the same folder, and a retry trained again and deleted it again)."""
    import shutil

    start = Path(db.artifacts_dir) / "models" / "start"
    shutil.copytree(tiny_dir, start)
    client = TestClient(create_trainer_app(db))
    for outputs, field, other in [
        ({"actor_output": "models/p1", "critic_output": "models/p1"}, "critic_output", "actor_output"),
        ({"actor_output": "models/p1", "critic_output": "models/p1/critic"}, "critic_output", "actor_output"),
        ({"actor_output": "models"}, "actor_output", "actor"),
        ({"critic_output": "models/start/critic"}, "critic_output", "actor"),
    ]:
        reply = client.post("/v1/train", json={"phase": 1, "actor": str(start), **outputs})
        assert reply.status_code == 422, (outputs, reply.text)
        error = reply.json()["error"]
        assert error["fields"][0]["field"] == field and f"overlaps {other}" in error["message"], error
    assert sorted(p.name for p in start.iterdir()) == sorted(p.name for p in tiny_dir.iterdir())
    with session_scope(db) as session:
        assert list_checkpoints(session) == []


def test_a_phase_with_an_anchor_loss_and_no_anchors_is_refused_before_it_trains(db, tiny_dir: Path) -> None:
    client = TestClient(create_trainer_app(db))
    reply = client.post("/v1/train", json={"phase": 1, "actor": str(tiny_dir),
                                           "hyperparams": {"actor": {"anchor_kl": 0.1}}})
    assert reply.status_code == 422, reply.text
    assert reply.json()["error"]["fields"][0]["field"] == "anchors"
    assert "webrl probe anchors" in reply.json()["error"]["message"]
