"""The ORM's prompt budget: ``WEBRL_ORM__MAX_PROMPT_TOKENS``, the model's context, and the sequence length the
ORM folder's tokenizer declares (what a small ORM was trained on), whichever is smallest."""

from __future__ import annotations

import shutil
from pathlib import Path
from types import SimpleNamespace

from webrl.config import Settings
from webrl.prompts.orm_prompt import ORM_CONTEXT_RESERVE, orm_context_tokens, orm_prompt_budget


def test_context_is_the_smaller_of_model_and_tokenizer_limits() -> None:
    model = SimpleNamespace(max_position_embeddings=8192)
    assert orm_context_tokens(model, SimpleNamespace(model_max_length=1024)) == 1024
    assert orm_context_tokens(model, SimpleNamespace(model_max_length=int(1e30))) == 8192  # "no limit" placeholder
    assert orm_context_tokens(SimpleNamespace(), SimpleNamespace()) is None
    assert orm_prompt_budget(1024, 16384) == 1024 - ORM_CONTEXT_RESERVE


def test_local_orm_cuts_prompts_to_the_length_its_folder_declares(tiny_orm_dir: Path, settings: Settings,
                                                                  tmp_path: Path, make_trajectory) -> None:
    from transformers import AutoTokenizer

    from services.orm.scoring import LocalOrm
    from webrl.prompts.orm_prompt import n_tokens

    folder = tmp_path / "orm"
    shutil.copytree(tiny_orm_dir, folder)
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    tokenizer.model_max_length = 768  # as `webrl train-orm` writes it for an ORM trained on 768-token sequences
    tokenizer.save_pretrained(str(folder))

    assert LocalOrm(tiny_orm_dir, settings).max_tokens == 1024 - ORM_CONTEXT_RESERVE  # the model's context (test size)
    orm = LocalOrm(folder, settings)
    assert orm.max_tokens == 768 - ORM_CONTEXT_RESERVE
    long = make_trajectory(0)
    long.steps[-1].observation.html = "<html>" + "<div>Order placed</div>" * 200 + "</html>"
    page_tokens = n_tokens(orm.tokenizer, long.steps[-1].observation.html)
    assert n_tokens(orm.tokenizer, orm.prompts([long])[0]) <= orm.max_tokens < page_tokens  # the page was cut
    low = settings.replace(orm={"max_prompt_tokens": 48})  # the setting still caps it
    assert LocalOrm(folder, low).max_tokens == 48
