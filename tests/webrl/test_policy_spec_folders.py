"""A rollout's checkpoint policy names a folder that holds a model: an existing folder the worker may load that holds
none (the artifacts store's reports, say) is refused naming ``policy.path`` before any rollout, as REST (422) and
Celery (the task fails with it) both check it (:func:`webrl.policies.specs.check_policy_spec`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from webrl.config import Settings
from webrl.policies.specs import check_policy_spec, policy_from_spec
from webrl.serving.paths import SHIPPED_MODELS
from webrl.wire.contracts import CheckpointSpec, InvalidRequest


def test_a_folder_that_holds_no_model_is_refused_naming_the_path(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path / "home", security={"model_dirs": []}, _env_file=None)
    reports = Path(settings.artifacts_dir) / "reports"
    reports.mkdir(parents=True)
    with pytest.raises(InvalidRequest, match=r"^policy\.path: .*is not a model folder") as refused:
        check_policy_spec(CheckpointSpec(path=str(reports)), settings)
    assert refused.value.field == "policy.path"
    with pytest.raises(InvalidRequest, match="is not a model folder"):  # the Celery path too
        policy_from_spec({"kind": "checkpoint", "path": str(reports)}, settings)


def test_model_and_adapter_folders_and_the_configured_actor_pass(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path / "home", security={"model_dirs": []}, _env_file=None)
    adapter = Path(settings.artifacts_dir) / "actor-lora"
    adapter.mkdir(parents=True)
    (adapter / "adapter_config.json").write_text("{}")
    for path in (SHIPPED_MODELS / "actor-sft", adapter):
        check_policy_spec(CheckpointSpec(path=str(path)), settings)
    check_policy_spec(CheckpointSpec(path=str(tmp_path)), settings.replace(actor={"model": str(tmp_path)}))
