"""webrl.serving.kept_models: the models a service loaded for requests, the most recently used few kept."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from webrl.serving.kept_models import KeptModels


def test_a_service_keeps_the_most_recently_used_models_and_lets_the_others_go() -> None:
    loads: list[str] = []
    kept: KeptModels[str, str] = KeptModels(size=2)

    def load(name: str) -> Callable[[], str]:
        return lambda: loads.append(name) or f"model {name}"

    for phase in ("critic-1", "critic-2", "critic-1", "critic-3", "critic-1", "critic-2"):
        assert kept.get(phase, load(phase)) == f"model {phase}"
    # critic-1 was used again before critic-3 came: critic-2 went; then critic-2 again pushed critic-3 out
    assert loads == ["critic-1", "critic-2", "critic-3", "critic-2"]
    assert list(kept) == ["critic-1", "critic-2"] and len(kept) == 2
    kept.drop(lambda key: key.endswith("-1"))
    assert list(kept) == ["critic-2"]
    with pytest.raises(ValueError, match="at least one"):
        KeptModels(size=0)


def test_the_critic_service_keeps_two_critics_however_many_phases_ask(tmp_path, monkeypatch) -> None:
    """A run values each phase's critic through the service: one more loaded model a phase, were all kept."""
    import services.critic.app as critic_app
    from webrl.config import Settings
    from webrl.wire.contracts import ValueRequest

    made: list[str] = []

    class Scorer:  # loading a real critic is the critic tests' business; here only what is kept counts
        def __init__(self, path: str, settings: Settings) -> None:
            made.append(path)

    monkeypatch.setattr(critic_app, "critic_path", lambda settings, request: request.critic)
    monkeypatch.setattr(critic_app, "CriticScorer", Scorer)
    loaded = critic_app.LoadedCritics(Settings(home=tmp_path, _env_file=None))
    folders = [str(tmp_path / "models" / "critic" / f"phase{phase}") for phase in range(1, 6)]
    for folder in folders:
        loaded.scorer(ValueRequest(critic=folder, task_keys=["train/1"]))
    assert made == folders and len(loaded.scorers) == 2
