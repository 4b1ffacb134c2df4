"""Fixtures for the judges' tests: a tiny real Llama and a byte-level BPE tokenizer with Llama-3's special
tokens and chat layout, built here (nothing is downloaded)."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

import pytest

LLAMA3_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n"
    "{{ m['content'] }}<|eot_id|>{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)
CHATML_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
LLAMA3_SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
                   "<|eot_id|>", "<|pad|>", "<|reserved_special_token_0|>"]
CHATML_SPECIALS = ["<|im_start|>", "<|im_end|>", "<|pad|>", "<|endoftext|>"]
CORPUS = [
    "The User Intent: Add the blue kettle to the cart. Action History: do(action=\"Click\", element=\"7\")",
    "The Current Screenshot: <html><div id=\"5\">Order placed</div><div id=\"6\">Error</div></html>",
    "YES NO YES NO You are an expert in evaluating the performance of a website navigation agent.",
    "exit(message=\"done\") # Element: the search box do(action=\"Type\", argument=\"kettle\", element=\"13\")",
    "Task Instruction: Round 0 ** Simplified html ** products category price review order cart",
]


def build_tokenizer(out_dir: Path, specials: list[str], template: str, bos: str | None, eos: str) -> object:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS * 20, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=bos, eos_token=eos, pad_token="<|pad|>")
    fast.chat_template = template
    fast.save_pretrained(str(out_dir))
    return fast


def build_tiny_llama(tokenizer: object, out_dir: Path, seed: int = 0) -> object:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                         pad_token_id=tokenizer.pad_token_id, tie_word_embeddings=False)
    model = LlamaForCausalLM(config)
    model.save_pretrained(str(out_dir))
    tokenizer.save_pretrained(str(out_dir))
    return model


@pytest.fixture(scope="session")
def tiny_llama3(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, object, object]:
    """(folder, model, tokenizer) of a tiny Llama with a Llama-3-layout tokenizer."""
    out = tmp_path_factory.mktemp("tiny_llama3")
    tokenizer = build_tokenizer(out, LLAMA3_SPECIALS, LLAMA3_TEMPLATE, "<|begin_of_text|>", "<|eot_id|>")
    model = build_tiny_llama(tokenizer, out)
    return out, model, tokenizer


@pytest.fixture(scope="session")
def chatml_tokenizer(tmp_path_factory: pytest.TempPathFactory) -> object:
    out = tmp_path_factory.mktemp("tiny_chatml")
    return build_tokenizer(out, CHATML_SPECIALS, CHATML_TEMPLATE, None, "<|im_end|>")


@pytest.fixture
def store_trajectories(settings: object) -> Callable[..., list[int]]:
    """``store(trajectories, split="train")``: each trajectory under a task of its own ``task_id`` (upserted, in
    ``split``), as phase 0 attempt 1000 with purpose "orm", as ``webrl train-orm`` stores its rollouts; the ids."""
    from webrl.agent.schemas import TaskConfig
    from webrl.db.repository import save_trajectory, upsert_task
    from webrl.db.session import session_scope

    def store(trajectories: list, split: str = "train") -> list[int]:
        ids = []
        with session_scope(settings) as session:
            for traj in trajectories:
                config = TaskConfig(task_id=traj.task_id, sites=["shopping"], intent=traj.intent,
                                    start_url="__SHOPPING__/")
                task = upsert_task(session, traj.task_id, config, origin="seed", split=split)
                ids.append(save_trajectory(session, task.id, 0, 1000, traj, purpose="orm").id)
        return ids

    return store


#: Things a purchase trajectory buys (train on some, hold out the others).
ITEMS = ["kettle", "lamp", "chair", "table", "mug", "pillow", "clock", "vase", "rug", "fan", "desk", "shelf",
         "towel", "plate", "bowl", "spoon", "knife", "fork", "pan", "pot"]
#: The final pages differ in many tokens, as a confirmation page and an error page do.
SUCCESS_PAGE = ('<html><h1 id="3">Thank you for your purchase</h1><div id="5">Your order is placed and confirmed; '
                'we will email you when it ships</div></html>')
FAILURE_PAGE = ('<html><h1 id="3">Something went wrong</h1><div id="5">Error: this product is out of stock, '
                'nothing was charged, try again later</div></html>')


def purchase(item: str, success: bool, rng: random.Random) -> object:
    """Search for ``item``, 0-2 clicks, exit on the confirmation page (env score 1) or the error page (0)."""
    from webrl.agent.schemas import Observation, Step, Trajectory

    steps = [Step(index=0, observation=Observation(html='<input id="13"/>', url="http://s/"),
                  response=f'do(action="Search", argument="{item}", element="13")')]
    for k in range(rng.randint(0, 2)):
        steps.append(Step(index=len(steps), observation=Observation(html=f'<a id="{20 + k}">{item}</a>',
                                                                    url="http://s/"),
                          response=f'do(action="Click", element="{20 + k}")'))
    steps.append(Step(index=len(steps), observation=Observation(html=SUCCESS_PAGE if success else FAILURE_PAGE,
                                                                url="http://s/checkout"),
                      response='exit(message="done")'))
    return Trajectory(task_id=f"sandbox/orm/{item}-{int(success)}", intent=f"Buy the {item}", steps=steps,
                      env_score=1.0 if success else 0.0)


@pytest.fixture
def purchases() -> Callable[[list[str]], tuple[list, list]]:
    """``split(n_train)``: (train, test) purchase trajectories, a success and a failure per item, the first
    ``n_train`` items for training and the rest held out (seeded)."""

    def split(n_train: int) -> tuple[list, list]:
        rng = random.Random(0)
        train = [purchase(item, success, rng) for item in ITEMS[:n_train] for success in (True, False)]
        test = [purchase(item, success, rng) for item in ITEMS[n_train:] for success in (True, False)]
        return train, test

    return split


@pytest.fixture(scope="session")
def tiny_base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The project's tiny Llama (``webrl.models.tiny``) with a tokenizer trained on the purchase pages."""
    from webrl.models.tiny import build_tiny_llama, build_tokenizer, save_tiny

    out = tmp_path_factory.mktemp("orm_base")
    corpus = [SUCCESS_PAGE, FAILURE_PAGE, *[f"Buy the {i}" for i in ITEMS], *["YES NO"] * 10]
    tokenizer = build_tokenizer(corpus, out, vocab_size=800)
    return save_tiny(build_tiny_llama(tokenizer, "test", seed=0), tokenizer, out)
