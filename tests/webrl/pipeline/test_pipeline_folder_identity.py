"""A run records what its ORM and start actor folders hold when it is created (the ORM's checkpoint version and
content sha256, the actor's content sha256); a resume whose folder was republished in place since (``webrl
train-orm``, ``webrl bootstrap`` to the same path) is refused naming the flag, and the run's labels stay under the
version it started with. A run stored before webrl recorded them resumes as before."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from sqlalchemy import select

from webrl.config import Settings
from webrl.db import models as m
from webrl.db.migrate import upgrade
from webrl.db.session import session_scope
from webrl.method.rewards import EVALUATOR_LABELS
from webrl.orchestration.pipeline import Pipeline, PipelineOptions
from webrl.orchestration.pipeline_state import PhaseState, StageOutput, options_of_run
from webrl.store.checkpoints import content_sha256, publish_folder
from webrl.wire.contracts import InvalidRequest

TINY_ACTOR = Path(__file__).resolve().parents[3] / "webrl" / "assets" / "actor-sft"


def publish_orm(dest: Path, version: str, weights: bytes) -> Path:
    """A folder published at ``dest`` as ``webrl train-orm`` does (atomically, replacing one there)."""
    def write(folder: Path) -> None:
        (folder / "config.json").write_text(json.dumps({"model_type": "llama"}))
        (folder / "model.safetensors").write_bytes(weights)

    publish_folder(write, dest, role="orm", version=version, replace=True)
    return dest


def stored_options(settings: Settings) -> dict:
    with session_scope(settings) as s:
        return dict(s.scalar(select(m.Run.options)))


def test_a_resume_refuses_an_orm_republished_at_its_path_naming_the_flag(settings: Settings, tmp_path: Path) -> None:
    """`webrl train --orm models/orm`, then `webrl train-orm` republishes models/orm: the resume would label under the
    new version and no longer see the earlier phases' labels; refused, nothing stored changed. The same version
    republished resumes."""
    upgrade(settings)
    orm = publish_orm(tmp_path / "models" / "orm", "orm-aaaa", b"first")
    created = Pipeline(settings, PipelineOptions(run="r", orm=str(orm)))
    assert created.options.orm_checkpoint_version == "orm-aaaa" == created.options.orm_version
    before = stored_options(settings)
    assert before["orm_checkpoint_version"] == "orm-aaaa"

    publish_orm(orm, "orm-aaaa", b"first")  # the same checkpoint published again: the run goes on
    assert Pipeline(settings, PipelineOptions(run="r")).options.orm_version == "orm-aaaa"

    publish_orm(orm, "orm-bbbb", b"second")
    with pytest.raises(InvalidRequest, match=r"--orm .*orm at checkpoint version orm-aaaa, but that folder now holds "
                                             r"checkpoint version orm-bbbb") as refused:
        Pipeline(settings, PipelineOptions(run="r"))
    assert refused.value.field == "orm"
    assert stored_options(settings) == before
    # what the run reads its labels under is still the ORM it started with, not what the folder declares now
    assert options_of_run(settings, "r").orm_version == "orm-aaaa"


def test_a_resume_refuses_an_orm_retrained_under_the_same_version(settings: Settings, tmp_path: Path) -> None:
    """The ORM's folder deleted and its job run again publishes other weights under the same version (a retrain
    that is not bit-identical): the run's earlier labels are not this ORM's, so the resume is refused naming --orm
    with both contents."""
    upgrade(settings)
    orm = publish_orm(tmp_path / "orm", "orm-aaaa", b"first")
    created = Pipeline(settings, PipelineOptions(run="r", orm=str(orm)))
    sha = content_sha256(orm)
    assert created.options.orm_sha256 == sha == stored_options(settings)["orm_sha256"]
    before = stored_options(settings)
    shutil.rmtree(orm)
    publish_orm(orm, "orm-aaaa", b"retrained")
    now = content_sha256(orm)
    with pytest.raises(InvalidRequest, match=rf"--orm {orm} at content sha256 {sha[:12]}, but that folder now holds "
                                             rf"content sha256 {now[:12]} under the same version") as refused:
        Pipeline(settings, PipelineOptions(run="r"))
    assert refused.value.field == "orm"
    assert stored_options(settings) == before


def test_a_resume_refuses_a_start_actor_rebuilt_at_its_path(settings: Settings, tmp_path: Path) -> None:
    """The start actor is known by its content sha256 (what evaluations key an actor by): another actor at the same
    path is refused naming --actor with both identities; the same weights written by another transformers version
    (only the writer stamp differs) resume."""
    upgrade(settings)
    actor = tmp_path / "actor-sft"
    shutil.copytree(TINY_ACTOR, actor)
    sha = content_sha256(actor)
    created = Pipeline(settings, PipelineOptions(run="r", actor=str(actor)))
    assert created.options.actor_sha256 == sha == stored_options(settings)["actor_sha256"]

    config = json.loads((actor / "config.json").read_text())
    (actor / "config.json").write_text(json.dumps({**config, "transformers_version": "0.0.1"}, indent=4))
    assert Pipeline(settings, PipelineOptions(run="r")).options.actor_sha256 == sha

    before = stored_options(settings)
    generation = json.loads((actor / "generation_config.json").read_text())
    (actor / "generation_config.json").write_text(json.dumps({**generation, "temperature": 0.123}))
    now = content_sha256(actor)
    with pytest.raises(InvalidRequest, match=rf"--actor {actor} at content sha256 {sha[:12]}, but that folder now "
                                             rf"holds content sha256 {now[:12]}") as refused:
        Pipeline(settings, PipelineOptions(run="r"))
    assert refused.value.field == "actor"
    assert stored_options(settings) == before


def test_a_run_stored_without_the_folders_identities_resumes_as_before(settings: Settings, tmp_path: Path) -> None:
    """Options stored before webrl recorded the folders load; the run resumes unchecked, its ORM version read from
    the folder, and nothing is recorded for it on the way."""
    upgrade(settings)
    orm = publish_orm(tmp_path / "orm", "orm-aaaa", b"first")
    old = PipelineOptions(run="old", orm=str(orm)).to_json()
    del old["actor_sha256"], old["orm_checkpoint_version"], old["orm_sha256"]
    with session_scope(settings) as s:
        s.add(m.Run(name="old", options=old))
    assert PipelineOptions.from_json(old).orm_checkpoint_version is None
    publish_orm(orm, "orm-bbbb", b"second")
    resumed = Pipeline(settings, PipelineOptions(run="old"))
    assert resumed.options.orm_version == "orm-bbbb"
    assert stored_options(settings)["orm_checkpoint_version"] is None and stored_options(settings)["orm_sha256"] is None


def test_a_run_without_folders_there_records_nothing_and_resumes(settings: Settings) -> None:
    upgrade(settings)
    created = Pipeline(settings, PipelineOptions(run="r", actor="/models/sft"))
    assert created.options.actor_sha256 is None and created.options.orm_checkpoint_version is None
    assert created.options.orm_sha256 is None
    assert created.options.orm_version == EVALUATOR_LABELS
    Pipeline(settings, PipelineOptions(run="r"))


def test_a_phase_stage_refuses_an_orm_republished_while_the_run_goes_on(settings: Settings, tmp_path: Path) -> None:
    """A run that is not restarted finds the ORM republished before its next stage: refused before the stage runs
    (its labels would be stored under a version it does not read)."""
    upgrade(settings)
    orm = publish_orm(tmp_path / "orm", "orm-aaaa", b"first")
    pipeline = Pipeline(settings, PipelineOptions(run="r", orm=str(orm)))
    ran: list[str] = []

    def stage(p: Pipeline, index: int, state: PhaseState) -> StageOutput:
        ran.append(index)
        return {}, state

    pipeline._run_phase(0, {"first": stage})
    publish_orm(orm, "orm-bbbb", b"second")
    with pytest.raises(InvalidRequest, match="checkpoint version orm-bbbb"):
        pipeline._run_phase(1, {"first": stage, "second": stage})
    assert ran == [0] and pipeline.stages_done(1) == []


def test_webrl_train_refuses_the_resume_naming_actor(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    """`webrl train --run r` after `webrl bootstrap` rebuilt the start actor at its path: typer's usage error naming
    --actor, with the stored and the current identity, before the sandbox starts."""
    from typer.testing import CliRunner

    import webrl.commands.train as train_command
    from webrl.cli import app

    def no_sandbox(settings: Settings) -> None:
        raise AssertionError("the resume went on to start the sandbox")

    monkeypatch.setattr(train_command, "sandbox_if_needed", no_sandbox)
    upgrade(settings)
    assert settings.artifacts_dir is not None
    actor = settings.artifacts_dir / "models" / "actor-sft"  # `webrl train`'s default actor
    shutil.copytree(TINY_ACTOR, actor)
    sha = content_sha256(actor)
    Pipeline(settings, PipelineOptions(run="r", actor=str(actor.resolve())))
    generation = json.loads((actor / "generation_config.json").read_text())
    (actor / "generation_config.json").write_text(json.dumps({**generation, "temperature": 0.123}))
    result = CliRunner().invoke(app, ["train", "--run", "r"], env={"COLUMNS": "300"})
    words = " ".join(result.output.replace("│", " ").replace("'", "").split())
    assert result.exit_code == 2, result.output + repr(result.exception)
    assert "Invalid value for --actor" in words and f"content sha256 {sha[:12]}" in words, words
    assert f"now holds content sha256 {content_sha256(actor)[:12]}" in words, words


def test_labels_another_orm_made_while_its_job_ran_are_refused(settings: Settings, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """The ORM folder republished while its scoring job ran (after the stage's check): the job answers with the new
    version, whose labels the run never reads; the stage fails naming --orm instead of going on without them."""
    from webrl.orchestration import pipeline as pipeline_module
    from webrl.wire.contracts import ScoreResult

    upgrade(settings)
    orm = publish_orm(tmp_path / "models" / "orm", "orm-aaaa", b"first")
    pipeline = Pipeline(settings, PipelineOptions(run="r", orm=str(orm)))
    answered = {"version": "orm-aaaa"}
    monkeypatch.setattr(pipeline_module.clients, "orm_score", lambda request: ScoreResult(
        orm_version=answered["version"], threshold=0.5, results=[], mean_reward=0.0))
    pipeline._label([1], "label")  # the run's own ORM answered: nothing to refuse
    answered["version"] = "orm-bbbb"
    with pytest.raises(InvalidRequest, match="labelled as 'orm-bbbb', not the run's 'orm-aaaa'") as refused:
        pipeline._label([1], "label")
    assert refused.value.field == "orm"
