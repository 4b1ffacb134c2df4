"""``webrl bootstrap --base smollm2-135m`` end to end at a smoke budget: oracle demonstrations through Chromium, a
LoRA adapter trained on the pretrained base and published (MBs), that adapter trained on (``--start``), a policy
call through it, then one WebRL phase on the adapter that publishes actor and critic adapters."""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path

import pytest

from webrl.config import Settings
from webrl.model_folders import is_adapter
from webrl.models.adapters import ADAPTER_FILE
from webrl.orchestration.bootstrap import BootstrapConfig, run_bootstrap
from webrl.store.checkpoints import verify

pytestmark = [pytest.mark.slow, pytest.mark.browser]


def test_pretrained_bootstrap_then_a_phase_on_its_adapter(free_sites: Settings, smollm2_base: Path) -> None:
    from services.trainer.phase import run_phase
    from webrl.agent.policy import PolicyRequest
    from webrl.agent.schemas import Observation, TaskConfig
    from webrl.db import models as m
    from webrl.db.session import session_scope
    from webrl.method.hyperparams import DEFAULTS, with_overrides
    from webrl.models.model_policies import LocalModelPolicy
    from webrl.models.pretrained_base import base_dir
    from webrl.wire.contracts import PhaseJob

    link = base_dir(free_sites, "smollm2-135m")
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(smollm2_base, target_is_directory=True)
    stages: list[str] = []
    config = BootstrapConfig.pretrained("smollm2-135m", lora_rank=4, max_demos=2, sft_minutes=0.15, concurrency=2)
    result = run_bootstrap(free_sites, config, stages.append)
    assert stages == ["tasks", "demos", "tokenizer", "model", "sft", "eval"]
    path = Path(result.path)
    assert is_adapter(path) and verify(path) and not (path / "model.safetensors").exists()
    assert json.loads((path / ADAPTER_FILE).read_text())["base"]["name"] == "smollm2-135m"
    assert json.loads((path / "webrl_prompt.json").read_text()) == {"system_prompt": "compact"}
    assert sum(f.stat().st_size for f in path.iterdir()) < 12e6 and result.sft_metrics["steps"] >= 1

    more = BootstrapConfig.pretrained("smollm2-135m", start=str(path), max_demos=2, sft_minutes=0.15, concurrency=2,
                                      output=Path(free_sites.artifacts_dir) / "models" / "actor-sft-more")
    continued = run_bootstrap(free_sites, more)  # the adapter keeps training: same rank, new weights
    assert is_adapter(continued.path) and continued.sha256 != result.sha256
    assert json.loads((Path(continued.path) / "adapter_config.json").read_text())["r"] == 4

    policy = LocalModelPolicy(path, free_sites, max_new_tokens=8)
    task = TaskConfig(task_id=0, sites=["shopping"], intent="Show me Electronics", start_url="http://x/")
    request = PolicyRequest(task=task, intent=task.intent, observation=Observation(html='<a id="3">x</a>', url="u"))
    [response] = asyncio.run(policy.act([request]))
    assert response.token_ids and len(response.logprobs) == len(response.token_ids)

    with session_scope(free_sites) as s:  # the demonstrations stand in for a phase's labelled rollouts
        for i, row in enumerate(s.query(m.TrajectoryRow).all()):
            row.phase, row.purpose = 1, "train"
            s.add(m.OrmLabel(trajectory_id=row.id, orm_version="smoke", p_yes=float(i % 2), reward=float(i % 2),
                             threshold=0.5))
    hp = with_overrides(DEFAULTS, {"batching.batch_size": 2, "actor.lr": 1e-3, "critic.lr": 1e-3})
    phase = run_phase(free_sites, PhaseJob(phase=1, actor=str(path), max_length=448, hyperparams=hp))
    assert is_adapter(phase.actor.path) and is_adapter(phase.critic.path)
    assert phase.metrics["current_steps"] == result.demo_steps and math.isfinite(phase.metrics["kl_exact"])
