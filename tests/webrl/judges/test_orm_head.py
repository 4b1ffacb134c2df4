"""The classification-head ORM (``webrl.models.orm_head``, ``train.orm_head``): the logistic head and how its L2
strength is chosen, the backbone's features, and the trainer job end to end on a tiny model: fitted, published
beside its backbone, found again by the same job, and judged with by the ORM service."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from webrl.models.feature_cache import FeatureCache
from webrl.models.orm_head import (
    L2_GRID,
    balanced_accuracy,
    choose_and_fit,
    fit_head,
    is_orm_classifier,
    prompt_features,
    success_probability,
)


def _features(n: int, hidden: int, seed: int, positives: float = 0.5) -> tuple[torch.Tensor, torch.Tensor]:
    """Gaussian features whose first coordinate carries the label (+-2 around 10, std 1: a 98% split), the rest
    noise off-centre and wide (std 3 around 10), so standardising matters."""
    generator = torch.Generator().manual_seed(seed)
    labels = (torch.rand(n, generator=generator) < positives).long()
    features = torch.randn(n, hidden, generator=generator) * 3 + 10
    features[:, 0] = torch.randn(n, generator=generator) + 10 + 4 * labels - 2
    return features, labels


def test_a_head_learns_a_separable_signal_and_weighs_the_classes_equally() -> None:
    features, labels = _features(400, 16, seed=0, positives=0.15)  # a majority answer would be 85% right
    head = fit_head(features, labels, l2=1e-3)
    test_features, test_labels = _features(400, 16, seed=1, positives=0.15)
    p = success_probability(head(test_features))
    assert balanced_accuracy(p, test_labels) > 0.9  # the minority class is found, not voted away
    assert float(p[test_labels == 1].mean()) > 0.5 > float(p[test_labels == 0].mean())
    assert balanced_accuracy(torch.zeros(4), torch.tensor([0, 0, 1, 1])) == 0.5  # a constant answer scores 0.5


def test_a_stronger_l2_shrinks_the_weights() -> None:
    features, labels = _features(200, 16, seed=0)
    weak, strong = fit_head(features, labels, l2=1e-4), fit_head(features, labels, l2=1.0)
    assert strong.linear.weight.norm() < 0.5 * weak.linear.weight.norm()


def test_l2_is_chosen_on_held_out_tasks_and_the_head_refitted_on_all() -> None:
    features, labels = _features(240, 16, seed=0)
    groups = [f"task{i // 4}" for i in range(240)]  # four trajectories a task, as four rollout policies give
    fit = choose_and_fit(features, labels, groups, seed=0)
    assert set(fit.validation) == set(L2_GRID) and fit.l2 in L2_GRID
    assert fit.validation[fit.l2] == max(fit.validation.values())
    assert fit.n_train + fit.n_validation == 240 and fit.n_validation == 60  # 15 of 60 tasks, whole
    assert fit.n_validation % 4 == 0
    assert fit.head.mu.shape == (16,)
    assert fit.head.mu[1:].mean().item() == pytest.approx(features[:, 1:].mean().item(), abs=1e-4)  # refitted on all


def test_features_are_read_at_each_prompt_s_last_token_whatever_the_batch(tiny_llama3) -> None:
    from transformers import AutoModel

    folder, _, tokenizer = tiny_llama3
    backbone = AutoModel.from_pretrained(str(folder), dtype=torch.float32).eval()
    prompts = ["YES NO", "The User Intent: Add the blue kettle to the cart. Action History: do(action=\"Click\")"]
    together = prompt_features(backbone, tokenizer, prompts, batch_size=2)
    alone = torch.cat([prompt_features(backbone, tokenizer, [p], batch_size=1) for p in prompts])
    assert together.shape == (2, 64)
    torch.testing.assert_close(together, alone, atol=1e-5, rtol=1e-4)
    heard: list[int] = []
    prompt_features(backbone, tokenizer, prompts * 2, batch_size=3, progress=heard.append)
    assert heard == [3, 1]


def test_cached_features_are_read_once_and_survive_a_crash(tiny_llama3, tmp_path: Path) -> None:
    from transformers import AutoModel

    folder, _, tokenizer = tiny_llama3
    backbone = AutoModel.from_pretrained(str(folder), dtype=torch.float32).eval()
    read: list[str] = []

    def compute(prompts) -> torch.Tensor:
        read.extend(prompts)
        if "crash" in prompts:
            raise RuntimeError("killed mid-pass")
        return prompt_features(backbone, tokenizer, prompts, batch_size=2)

    prompts = [f"The User Intent: buy item {i}" for i in range(5)]
    cache = FeatureCache.for_backbone(tmp_path, folder)
    assert cache.count_missing(prompts + prompts[:1]) == 5
    first = cache.features(prompts + prompts[:1], compute, save_every=2)
    assert cache.count_missing([*prompts, "new one"]) == 1
    torch.testing.assert_close(first, prompt_features(backbone, tokenizer, prompts + prompts[:1], batch_size=1),
                               atol=1e-5, rtol=1e-4)
    assert read == prompts  # each distinct prompt once
    read.clear()
    with pytest.raises(RuntimeError):
        FeatureCache.for_backbone(tmp_path, folder).features(["new one", "crash", *prompts], compute, save_every=1)
    again = FeatureCache.for_backbone(tmp_path, folder)  # from disk: the chunk before the crash was kept
    assert len(again) == 6
    read.clear()
    torch.testing.assert_close(again.features([*prompts[::-1], "new one"], compute)[:5], first[:5].flip(0))
    assert read == []


def test_the_trainer_fits_publishes_and_the_orm_service_judges_with_the_head(settings, tiny_llama3, tmp_path,
                                                                            store_trajectories, purchases) -> None:
    from services.orm.scoring import LocalOrm
    from webrl.db.migrate import upgrade
    from webrl.orchestration.train_orm import measure
    from webrl.store.checkpoints import read_manifest, verify
    from webrl.wire.queue import dispatch

    upgrade(settings)
    folder, _, _ = tiny_llama3
    train, test = purchases(10)
    train_ids, test_ids = store_trajectories(train), store_trajectories(test, "test")
    job = {"base": str(folder), "output": str(Path(settings.artifacts_dir) / "orm-head"),
           "trajectory_ids": train_ids, "seed": 0, "max_length": 1024}
    result = dispatch("train.orm_head", job)
    orm = Path(result["path"])
    assert is_orm_classifier(orm) and verify(orm) and read_manifest(orm)["role"] == "orm"
    assert (orm / "config.json").is_file()  # a full backbone is copied beside its head
    assert result["metrics"]["examples"] == 20 and result["metrics"]["l2"] in L2_GRID
    assert result["metrics"]["train_balanced_accuracy"] == 1.0
    assert dispatch("train.orm_head", job) == result  # the same job finds its checkpoint
    cached = list((Path(settings.artifacts_dir) / "cache" / "orm-features").glob("*.pt"))
    assert len(cached) == 1 and len(FeatureCache(cached[0])) == 20  # a job on grown data reads only the new ones

    judge = LocalOrm(orm, settings)
    assert judge.classifier is not None and judge.max_tokens == 1024 - 256  # the length it was fitted at
    labels = {i: int(t.env_score >= 0.5) for i, t in zip(test_ids, test, strict=True)}
    report = measure({"trained": str(orm)}, labels, 0.5, tmp_path / "report")
    assert report["metrics"]["trained"]["accuracy"] >= 0.9, report  # an untrained tiny model is at chance


def test_a_head_job_needs_both_labels_and_known_trajectories(settings, tiny_llama3, store_trajectories,
                                                            purchases) -> None:
    from webrl.db.migrate import upgrade
    from webrl.wire.queue import dispatch

    upgrade(settings)
    folder, _, _ = tiny_llama3
    ids = store_trajectories([t for t in purchases(3)[0] if t.env_score == 1.0])
    output = str(Path(settings.artifacts_dir) / "orm-head")
    with pytest.raises(ValueError, match="needs successes and failures"):
        dispatch("train.orm_head", {"base": str(folder), "output": output, "trajectory_ids": ids})
    with pytest.raises(ValueError, match="unknown trajectory ids: \\[999\\]"):
        dispatch("train.orm_head", {"base": str(folder), "output": output, "trajectory_ids": [*ids, 999]})
    assert not Path(output).exists()


def test_the_rest_route_takes_a_head_job_and_names_a_bad_field(settings) -> None:
    from fastapi.testclient import TestClient

    from services.trainer.app import create_trainer_app

    client = TestClient(create_trainer_app(settings))
    bad = client.post("/v1/train/orm-head", json={"base": "/b", "output": "/o", "trajectory_ids": [1]})
    assert bad.status_code == 422 and "trajectory_ids" in bad.text
    outside = client.post("/v1/train/orm-head", json={"base": "/b", "output": "/elsewhere", "trajectory_ids": [1, 2]})
    assert outside.status_code == 422 and "output" in outside.text


def test_the_backbone_trains_with_the_head_and_the_kept_epoch_is_what_the_orm_service_judges_with(
        settings, tiny_llama3, store_trajectories, purchases, tmp_path) -> None:
    import json

    from safetensors.torch import load_file

    from services.orm.scoring import LocalOrm
    from webrl.db.migrate import upgrade
    from webrl.model_folders import is_adapter
    from webrl.models.orm_head import HEAD_CONFIG_FILE
    from webrl.orchestration.train_orm import measure
    from webrl.wire.queue import dispatch

    upgrade(settings)
    folder, _, _ = tiny_llama3
    train, test = purchases(12)
    train_ids, test_ids = store_trajectories(train), store_trajectories(test, "test")
    job = {"base": str(folder), "output": str(Path(settings.artifacts_dir) / "orm-tuned"), "trajectory_ids": train_ids,
           "seed": 0, "max_length": 1024, "backbone_epochs": 2, "backbone_lr": 1e-3, "batch_size": 4}
    result = dispatch("train.orm_head", job)
    metrics = result["metrics"]
    history = metrics["backbone_history"]
    assert [r["epoch"] for r in history] == [0, 1, 2] and all(r["steps"] == 5 for r in history[1:])  # 18 of 24
    assert history[0]["validation_balanced_accuracy"] == 1.0  # the frozen head already separates purchases ...
    kept = metrics["backbone_epoch"]
    assert kept >= 1 and history[kept]["validation_log_loss"] < history[0]["validation_log_loss"]  # ... less surely
    orm = Path(result["path"])
    assert is_adapter(orm) and is_orm_classifier(orm)  # a new adapter on the full folder, beside the trained head
    lora_b = [v for k, v in load_file(str(orm / "adapter_model.safetensors")).items() if "lora_B" in k]
    assert lora_b and any(bool(v.abs().sum() > 0) for v in lora_b)  # the trained adapter, not the B = 0 start
    record = json.loads((orm / HEAD_CONFIG_FILE).read_text())["backbone_training"]
    assert record["kept_epoch"] == kept and record["epochs"] == 2
    assert dispatch("train.orm_head", job) == result  # the same job finds its checkpoint

    judge = LocalOrm(orm, settings)
    assert judge.classifier is not None
    labels = {i: int(t.env_score >= 0.5) for i, t in zip(test_ids, test, strict=True)}
    report = measure({"trained": str(orm)}, labels, 0.5, tmp_path / "report")
    assert report["metrics"]["trained"]["accuracy"] >= 0.9, report


def test_backbone_training_is_checked_where_it_is_asked_for(settings) -> None:
    from fastapi.testclient import TestClient

    from services.trainer.app import create_trainer_app
    from webrl.orchestration.train_orm import TrainOrmOptions

    client = TestClient(create_trainer_app(settings))
    body = {"base": "/b", "output": str(Path(settings.artifacts_dir) / "o"), "trajectory_ids": [1, 2]}
    bad = client.post("/v1/train/orm-head", json={**body, "backbone_epochs": -1})
    assert bad.status_code == 422 and "backbone_epochs" in bad.text
    with pytest.raises(ValueError, match="objective 'head'"):
        TrainOrmOptions(base="b", output="o", objective="answer", backbone_epochs=1)
