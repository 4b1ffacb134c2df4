"""Fixtures for the critic service: a critic on the tiny default model's backbone, saved as a folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from webrl.config import Settings


@pytest.fixture(scope="session")
def tiny_critic_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from webrl.models.critic import CriticModel
    from webrl.models.tiny import build_tiny_llama, build_tokenizer, save_tiny

    sft = tmp_path_factory.mktemp("tiny_sft")
    tokenizer = build_tokenizer(["Add the blue kettle to the cart", '<div id="5">kettle</div>'], sft, vocab_size=600)
    save_tiny(build_tiny_llama(tokenizer, "test", seed=0), tokenizer, sft)
    critic = CriticModel.from_backbone(sft, seed=0)
    return critic.save_pretrained(tmp_path_factory.mktemp("tiny_critic"), tokenizer=tokenizer)


@pytest.fixture
def db_settings(settings: Settings) -> Settings:
    from webrl.db.migrate import upgrade

    upgrade(settings)
    return settings
