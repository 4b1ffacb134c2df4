"""ORM training end to end on a small labelled set: the trainer's ``train.sft`` (kind "orm") from a tiny model,
then ``orm.score`` on held-out trajectories; the trained ORM must beat the untrained one by a clear margin.
Also the pieces of ``webrl train-orm``: policy specs, balancing, metrics, the calibration PNG."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from webrl.models.orm import (
    calibration_bins,
    classification_metrics,
    expected_calibration_error,
    plot_calibration,
    roc_auc,
)
from webrl.orchestration.train_orm import (
    balance,
    measure,
    parse_policy,
    paths_in_store,
    split_policy_cap,
    tasks_per_policy,
)
from webrl.wire.contracts import CheckpointSpec, EndpointSpec, OracleSpec


@pytest.fixture
def one_thread() -> Iterator[None]:
    """One intra-op thread: on a shared 2-core machine, two threads per tiny matmul spend their time waiting
    (measured: 0.25 s vs 2.2 s per step of this test under load)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_short_orm_training_beats_the_untrained_model(settings, tiny_base, tmp_path, one_thread,
                                                    store_trajectories, purchases) -> None:
    from webrl.db.migrate import upgrade
    from webrl.wire.queue import dispatch

    upgrade(settings)
    train, test = purchases(12)
    train_ids, test_ids = store_trajectories(train), store_trajectories(test)
    result = dispatch("train.sft", {"base": str(tiny_base), "output": str(Path(settings.artifacts_dir) / "orm"),
                                    "kind": "orm", "trajectory_ids": train_ids, "epochs": 20, "lr": 1e-2, "seed": 0,
                                    "batch_size": 8})  # 60 steps: ~30 are not enough to leave chance
    labels = {i: int(t.env_score >= 0.5) for i, t in zip(test_ids, test, strict=True)}
    report = measure({"untrained": str(tiny_base), "trained": result["path"]}, labels, 0.5, tmp_path / "report")
    untrained, trained = report["metrics"]["untrained"], report["metrics"]["trained"]
    assert trained["accuracy"] >= 0.9, report
    assert trained["accuracy"] >= untrained["accuracy"] + 0.3, report
    assert trained["f1"] >= 0.9
    assert Path(report["calibration_png"]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_policy_specs() -> None:
    assert parse_policy("oracle", "/sft", 3) == OracleSpec(corrupt=0.0, seed=3)
    assert parse_policy("oracle:0.4", "/sft", 3).corrupt == 0.4
    assert parse_policy("sft", "/sft", 0) == CheckpointSpec(path="/sft")
    assert parse_policy("endpoint:http://a/", "/sft", 0) == EndpointSpec(url="http://a/")
    for bad in ("oracle:2", "mystery", "checkpoint:"):
        with pytest.raises(ValueError):
            parse_policy(bad, "/sft", 0)


def test_a_policys_attempt_names_its_index_and_what_it_is(tmp_path: Path) -> None:
    """Reruns with the same policies reuse their rollouts; a reordered list, another actor or one retrained in the
    same folder gets attempts of its own (never another policy's trajectories); the index stays readable."""
    import os

    from webrl.orchestration.train_orm import ORM_ATTEMPT_BASE, ORM_POLICY_SLOTS, orm_attempt

    actor = tmp_path / "actor"
    actor.mkdir()
    (actor / "config.json").write_text("{}")
    oracle, corrupt, sft = OracleSpec(), OracleSpec(corrupt=0.5), CheckpointSpec(path=str(actor))
    attempts = [orm_attempt(i, p) for i, p in enumerate([oracle, corrupt, sft])]
    assert attempts == [orm_attempt(i, p) for i, p in enumerate([oracle, corrupt, sft])]  # a rerun
    assert [(a - ORM_ATTEMPT_BASE) % ORM_POLICY_SLOTS for a in attempts] == [0, 1, 2]
    assert orm_attempt(0, corrupt) not in attempts and orm_attempt(1, oracle) not in attempts  # reordered
    os.utime(actor / "config.json", ns=(1, (actor / "config.json").stat().st_mtime_ns + 10**9))  # retrained
    assert orm_attempt(2, sft) != attempts[2]
    assert max(orm_attempt(ORM_POLICY_SLOTS - 1, p) for p in (oracle, corrupt, sft)) < 2**31
    with pytest.raises(ValueError, match="at most 100 policies"):
        orm_attempt(ORM_POLICY_SLOTS, oracle)


def test_a_policy_can_be_capped_to_fewer_train_tasks() -> None:
    assert split_policy_cap("sft@120") == ("sft", 120)
    assert split_policy_cap("oracle:0.3@40") == ("oracle:0.3", 40)
    assert split_policy_cap("sft") == ("sft", None)
    assert split_policy_cap("endpoint:http://user@host:8000/v1") == ("endpoint:http://user@host:8000/v1", None)
    for bad in ("sft@0", "@5"):
        with pytest.raises(ValueError, match="at least 1"):
            split_policy_cap(bad)
    with pytest.raises(ValueError, match="@N"):
        parse_policy(split_policy_cap("sft@many")[0], "/sft", 0)


def test_a_capped_policy_gets_the_seeded_sample_of_its_size() -> None:
    keys = [f"t{i}" for i in range(10)]
    asked: list[int] = []

    def sample(n: int) -> list[str]:
        asked.append(n)
        return keys[:n]

    assert tasks_per_policy([None, 3, 10, 50], keys, sample) == [keys, keys[:3], keys, keys]
    assert asked == [3]  # a cap at or above the train tasks changes nothing


def test_balance_downsamples_the_larger_class() -> None:
    labels = {i: int(i < 3) for i in range(10)}  # 3 successes, 7 failures
    chosen = balance(labels, seed=0)
    assert sum(labels[i] for i in chosen) == 3 and len(chosen) == 6
    assert chosen == balance(labels, seed=0)
    with pytest.raises(ValueError, match="need both"):
        balance({1: 1, 2: 1}, seed=0)


def test_metrics_by_hand(tmp_path) -> None:
    p = [0.9, 0.8, 0.3, 0.6, 0.1, 0.45]
    y = [1, 1, 1, 0, 0, 0]
    metrics = classification_metrics(p, y)  # predictions 1 1 0 1 0 0: tp 2, fp 1, fn 1, tn 2
    assert (metrics["tp"], metrics["fp"], metrics["fn"], metrics["tn"]) == (2, 1, 1, 2)
    assert metrics["accuracy"] == pytest.approx(4 / 6)
    assert metrics["precision"] == pytest.approx(2 / 3) and metrics["recall"] == pytest.approx(2 / 3)
    assert metrics["f1"] == pytest.approx(2 / 3)
    bins = calibration_bins(p, y, n_bins=2)  # [0, .5): .3 .1 .45 (1 success); [.5, 1]: .9 .8 .6 (2 successes)
    assert [b["n"] for b in bins] == [3, 3]
    assert bins[0]["mean_p"] == pytest.approx(0.85 / 3) and bins[1]["success_rate"] == pytest.approx(2 / 3)
    ece = 0.5 * abs(0.85 / 3 - 1 / 3) + 0.5 * abs(2.3 / 3 - 2 / 3)
    assert expected_calibration_error(p, y, n_bins=2) == pytest.approx(ece)
    # successes .9 .8 .3 against failures .6 .1 .45: .9 and .8 beat all three, .3 beats .1 only -> 7 of 9 pairs
    assert roc_auc(p, y) == pytest.approx(7 / 9)
    assert roc_auc([0.5, 0.5], [1, 0]) == 0.5 and roc_auc([0.2], [1]) is None
    png = plot_calibration({"orm": (p, y)}, tmp_path / "c.png")
    assert Path(png).stat().st_size > 1000


def test_a_written_report_names_folders_in_the_store_relative_to_it(tmp_path) -> None:
    store = tmp_path / "artifacts"
    report = {"orm": {"path": str(store / "models" / "orm")}, "runs": [str(store / "reports" / "orm"), "/elsewhere/x"],
              "options": {"threshold": 0.5, "base": "smollm2-135m"}}
    assert paths_in_store(report, store) == {
        "orm": {"path": "models/orm"}, "runs": ["reports/orm", "/elsewhere/x"],
        "options": {"threshold": 0.5, "base": "smollm2-135m"}}
    assert paths_in_store(report, None) == report
