"""``webrl bootstrap`` with a tiny configuration: suite -> oracle demos in Chromium -> tokenizer -> Llama ->
SFT through the trainer's task -> a published HF folder that loads and acts."""

from __future__ import annotations

from pathlib import Path

import pytest

from webrl.config import Settings
from webrl.orchestration.bootstrap import BootstrapConfig, demo_tasks, run_bootstrap
from webrl.sandbox.server import sandbox_ports

pytestmark = pytest.mark.browser


def test_demo_sample_is_deterministic_and_covers_templates() -> None:
    from webrl.sandbox.tasks.suite import build_suite

    train = build_suite(0)["train"]
    a, b = demo_tasks(train, 2, seed=1), demo_tasks(train, 2, seed=1)
    assert [t.task_id for t in a] == [t.task_id for t in b]
    assert {t.intent_template_id for t in a} == {t.intent_template_id for t in train}
    assert [t.task_id for t in a] != [t.task_id for t in demo_tasks(train, 2, seed=2)]


def test_demo_seed_draws_other_tasks_of_the_same_split() -> None:
    from webrl.orchestration.bootstrap import config_demo_tasks
    from webrl.sandbox.tasks.suite import build_suite

    train = build_suite(0)["train"]
    first = config_demo_tasks(BootstrapConfig(seed=0, demos_per_template=2), train)
    further = config_demo_tasks(BootstrapConfig(seed=0, demos_per_template=2, demo_seed=5), train)
    assert [t.task_id for t in further] == [t.task_id for t in demo_tasks(train, 2, seed=5)]
    assert {t.intent_template_id for t in further} == {t.intent_template_id for t in first}
    assert len({t.task_id for t in further} - {t.task_id for t in first}) > len(further) // 2


def test_site_demos_change_the_count_on_their_sites_only() -> None:
    from collections import Counter

    from webrl.sandbox.tasks.suite import build_suite

    train = build_suite(0)["train"]
    templates = Counter(t.sites[0] for t in {t.intent_template_id: t for t in train}.values())
    chosen = Counter(t.sites[0] for t in demo_tasks(train, 1, seed=0, per_site={"reddit": 3, "gitlab": 0}))
    assert chosen["reddit"] == 3 * templates["reddit"] and "gitlab" not in chosen
    assert chosen["shopping"] == templates["shopping"]


@pytest.mark.parametrize(("args", "words"), [
    (["--site-demos", "reddit"], "use SITE=N"),
    (["--site-demos", "nowhere=3"], "use SITE=N"),
    (["--site-demos", "reddit=-1"], "use SITE=N"),
    (["--start", "NOT_ADAPTER", "--base", "smollm2-135m"], "not a webrl LoRA adapter folder"),
    (["--start", "ADAPTER"], "an adapter on 'smollm2-135m', not on --base"),
    (["--output", "OUTSIDE", "--size", "test"], "is outside the artifacts store"),
])
def test_bad_bootstrap_options_are_named(settings: Settings, tmp_path: Path, args: list[str], words: str) -> None:
    import json

    from typer.testing import CliRunner

    from webrl.cli import app

    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text("{}")
    (adapter / "webrl_adapter.json").write_text(json.dumps({"base": {"name": "smollm2-135m"}, "lora": {}}))
    named = {"ADAPTER": str(adapter), "NOT_ADAPTER": str(tmp_path), "OUTSIDE": str(tmp_path / "actor")}
    args = [named.get(a, a) for a in args]
    result = CliRunner().invoke(app, ["bootstrap", *args])
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.replace("│", " ").split())  # rich wraps the error box
    option = next(a for a in ("--site-demos", "--output", "--start") if a in args)
    assert option in text and words in text, text


def test_tiny_bootstrap_publishes_a_loadable_actor(free_sites: Settings) -> None:
    import asyncio

    from webrl.agent.policy import PolicyRequest
    from webrl.agent.schemas import Observation, TaskConfig
    from webrl.models.model_policies import LocalModelPolicy

    assert sandbox_ports(free_sites)["shopping"] == int(free_sites.sites.shopping_url.rsplit(":", 1)[1])
    stages: list[str] = []
    config = BootstrapConfig(size="test", vocab_size=1024, demos_per_template=1, max_demos=3, epochs=1,
                             sft_minutes=0.5, concurrency=2, prompt_loss_weight=0.5, words="trailing-space",
                             task_reminder=True, relabelled_copies=1)
    result = run_bootstrap(free_sites, config, stages.append)
    assert stages == ["tasks", "demos", "tokenizer", "model", "sft", "eval"]
    assert result.demos == 3 and result.demo_steps >= 3 and result.parameters > 0
    path = Path(result.path)
    assert path == free_sites.artifacts_dir / "models" / "actor-sft"
    assert (path / "model.safetensors").is_file() and (path / "tokenizer.json").is_file()
    assert result.sft_metrics["examples"] == 2 * result.demo_steps  # each demonstration and one relabelled copy
    base = free_sites.artifacts_dir / "models" / "actor-base-test-seed0-trailing-space-reminder-vocab1024"
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(path))
    pieces = [piece for piece, _ in tokenizer.backend_tokenizer.pre_tokenizer.pre_tokenize_str("Body Mist")]
    assert pieces == ["BodyĠ", "Mist"] and "ns.task" in tokenizer.chat_template
    assert (base / "tokenizer.json").read_text() == (path / "tokenizer.json").read_text()
    assert result.sft_metrics["prompt_loss"] > 0  # the auxiliary loss on the pages reached the trainer
    report = free_sites.artifacts_dir / "reports" / "bootstrap-actor-sft.json"  # named after the default output
    assert report.is_file()

    policy = LocalModelPolicy(path, free_sites, max_new_tokens=8)
    task = TaskConfig(task_id=0, sites=["shopping"], intent="Show me Electronics", start_url="http://x/")
    request = PolicyRequest(task=task, intent=task.intent, observation=Observation(html='<a id="3">x</a>', url="u"))
    [response] = asyncio.run(policy.act([request]))
    assert response.version == result.version and len(response.token_ids) == len(response.logprobs) > 0


def test_the_tiny_base_folder_names_everything_its_tokenizer_depends_on(settings: Settings,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The SFT job's version names the base by its folder: a base built with another vocabulary in the same folder
    would leave the job's version as it was, and the retry would return the old actor instead of training."""
    import webrl.models.tiny as tiny
    from webrl.orchestration import bootstrap

    built: list[Path] = []
    monkeypatch.setattr(tiny, "build_tiny_folder", lambda corpus, out, **kwargs: built.append(out))
    for config in (BootstrapConfig(), BootstrapConfig(vocab_size=8192), BootstrapConfig(words="trailing-space")):
        bootstrap._tiny_base(settings, config, ["a b"], lambda stage: None)
    assert [p.name for p in built] == ["actor-base-small-seed0", "actor-base-small-seed0-vocab8192",
                                       "actor-base-small-seed0-trailing-space"]


def test_a_checkpoint_retrained_under_its_version_is_evaluated_afresh(settings: Settings, tmp_path: Path,
                                                                       monkeypatch) -> None:
    """Bootstrap's evaluation episodes belong to no run and are found again by their attempt number: two folders
    under one manifest version (retrained after a time budget stopped the first elsewhere) get attempts of their
    own (by content), the same folder the same one."""
    import json

    from webrl.models.loading import VERSION_FILE, checkpoint_version
    from webrl.orchestration import bootstrap

    folders = []
    for weights in ("a", "b"):
        folder = tmp_path / weights
        folder.mkdir()
        (folder / "config.json").write_text("{}")
        (folder / "model.safetensors").write_text(weights)
        (folder / VERSION_FILE).write_text(json.dumps({"version": "actor-v1"}))
        folders.append(folder)
    assert checkpoint_version(folders[0]) == checkpoint_version(folders[1]) == "actor-v1"
    attempts: list[int] = []

    def rollout_run(request):
        attempts.append(request.attempt)
        raise StopIteration  # the attempt is all this test reads

    monkeypatch.setattr("webrl.wire.clients.rollout_run", rollout_run)
    for folder in (*folders, folders[0]):
        with pytest.raises(StopIteration):
            bootstrap.evaluate_checkpoint(settings, folder, limit=1)
    assert attempts[0] != attempts[1] and attempts[0] == attempts[2]
