"""The ORM prompt, pinned to the exact layout WebRL's ORM was trained and queried with."""

from __future__ import annotations

from webrl.agent.schemas import Observation, Step, Trajectory
from webrl.prompts.orm_prompt import (
    ORM_SYSTEM_PROMPT,
    build_orm_messages,
    build_orm_prompt,
    render_llama3_orm,
    render_orm_prompt,
)

INTENT = "  Add the blue kettle to the cart \n"
HISTORY = ['# Element: the search box\ndo(action="Search", argument="kettle", element="13")',
           'do(action="Click", element="7")\n', 'exit(message="done")']
HTML = "\n<html><div id=\"5\">Order placed</div></html>  "

PINNED = (
    "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
    "You are an expert in evaluating the performance of a website navigation agent. The agent is designed to help "
    "a human user navigate the website to complete a task. Given the user\u2019s intent, the agent's action history, "
    "and the final state of the screen, your goal is to decide whether the agent\u2019s execution is successful or "
    "not. You must respond with YES or NO.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n"
    "The User Intent:\nAdd the blue kettle to the cart\n\n"
    "Action History:\n"
    "# Element: the search box; do(action=\"Search\", argument=\"kettle\", element=\"13\")\n"
    "do(action=\"Click\", element=\"7\");\n"
    "exit(message=\"done\")\n"
    "\nThe Current Screenshot:\n<html><div id=\"5\">Order placed</div></html>"
    "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
)


def _trajectory(html: str = HTML) -> Trajectory:
    steps = [Step(index=i, observation=Observation(html=html if i == len(HISTORY) - 1 else "<p>earlier</p>",
                                                   url="http://x/"), response=r)
             for i, r in enumerate(HISTORY)]
    return Trajectory(task_id="t", intent=INTENT, steps=steps,
                      last_observation=Observation(html="<p>after the last action</p>", url="http://x/"))


def test_llama3_rendering_is_webrls_exact_string() -> None:
    assert render_llama3_orm(INTENT, HISTORY, HTML) == PINNED


def test_messages_carry_the_system_prompt_and_user_turn() -> None:
    system, user = build_orm_messages(INTENT, HISTORY, HTML)
    assert system == {"role": "system", "content": ORM_SYSTEM_PROMPT}
    assert user["role"] == "user" and user["content"].startswith("The User Intent:\nAdd the blue kettle")


def test_chat_template_rendering_equals_the_llama3_layout(tiny_llama3) -> None:
    _, _, tokenizer = tiny_llama3
    assert render_orm_prompt(tokenizer, INTENT, HISTORY, HTML, layout="chat_template") == PINNED
    assert render_orm_prompt(tokenizer, INTENT, HISTORY, HTML) == PINNED  # auto: a Llama-3 tokenizer


def test_auto_layout_uses_other_models_own_template(chatml_tokenizer) -> None:
    text = render_orm_prompt(chatml_tokenizer, INTENT, HISTORY, HTML)
    assert text.startswith("<|im_start|>system\nYou are an expert in evaluating")
    assert text.endswith("The Current Screenshot:\n<html><div id=\"5\">Order placed</div></html><|im_end|>\n"
                         "<|im_start|>assistant\n")


def test_trajectory_prompt_reads_raw_responses_and_the_last_steps_page(tiny_llama3) -> None:
    _, _, tokenizer = tiny_llama3
    assert build_orm_prompt(tokenizer, _trajectory()) == PINNED


def test_truncation_cuts_only_the_observation(tiny_llama3) -> None:
    _, _, tokenizer = tiny_llama3
    long_html = "<html>" + "<div id=\"9\">review of the product</div>" * 200 + "</html>"
    full = build_orm_prompt(tokenizer, _trajectory(long_html), max_tokens=None)
    n_full = len(tokenizer(full, add_special_tokens=False)["input_ids"])
    budget = n_full // 3
    cut = build_orm_prompt(tokenizer, _trajectory(long_html), max_tokens=budget)
    assert len(tokenizer(cut, add_special_tokens=False)["input_ids"]) <= budget
    assert "The User Intent:\nAdd the blue kettle to the cart\n\nAction History:\n" in cut
    assert 'exit(message="done")\n\nThe Current Screenshot:\n<html><div id="9">' in cut
    assert cut.endswith("<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n")
    assert len(cut) < len(full) and len(cut) > len(full) // 10  # a real cut that kept most of its budget


def test_the_tiny_default_model_renders_through_its_own_template(tmp_path) -> None:
    from webrl.models.tiny import build_tokenizer

    tokenizer = build_tokenizer(["Add the blue kettle to the cart", HTML], tmp_path / "tok", vocab_size=400)
    text = render_orm_prompt(tokenizer, INTENT, HISTORY, HTML)
    assert text == tokenizer.apply_chat_template(build_orm_messages(INTENT, HISTORY, HTML), tokenize=False,
                                                 add_generation_prompt=True)
    assert "The User Intent:\nAdd the blue kettle to the cart\n\nAction History:\n" in text


def test_the_layout_question_reads_the_vocabulary_once_per_tokenizer(chatml_tokenizer, tiny_llama3,
                                                                      monkeypatch) -> None:
    from webrl.prompts.orm_prompt import is_llama3_tokenizer

    llama3 = tiny_llama3[2]
    for tokenizer, expected in ((chatml_tokenizer, False), (llama3, True)):
        monkeypatch.delattr(tokenizer, "webrl_is_llama3", raising=False)  # asked by an earlier test: ask anew
        reads: list[int] = []

        def counted(original=tokenizer.get_vocab, reads=reads):
            reads.append(1)
            return original()

        monkeypatch.setattr(tokenizer, "get_vocab", counted)
        assert [is_llama3_tokenizer(tokenizer) for _ in range(3)] == [expected] * 3
        render_orm_prompt(tokenizer, INTENT, HISTORY, HTML)
        assert len(reads) == 1


def test_fitting_ends_when_the_cut_falls_inside_a_character_split_over_tokens(tmp_path) -> None:
    """A byte-level tokenizer splits a character it has no token for ("▾") into byte tokens with the same
    offsets; cutting between them kept the whole character, and the shrink loop spun forever (it hung
    `webrl train-orm` on a shopping page). Every budget must now give a prompt that fits, quickly."""
    import threading

    from webrl.models.tiny import build_tokenizer

    tokenizer = build_tokenizer(["Add the blue kettle to the cart", HTML], tmp_path / "tok", vocab_size=400)
    html = "<html>" + "<a> Shop by Category ▾ </a>" * 40 + "</html>"
    frame = len(tokenizer(build_orm_prompt(tokenizer, _trajectory(""), max_tokens=None),
                          add_special_tokens=False)["input_ids"])
    fitted: list[int] = []

    def fit_all() -> None:
        for budget in range(frame + 1, frame + 120):
            text = build_orm_prompt(tokenizer, _trajectory(html), max_tokens=budget)
            fitted.append(len(tokenizer(text, add_special_tokens=False)["input_ids"]) <= budget)

    worker = threading.Thread(target=fit_all, daemon=True)
    worker.start()
    worker.join(timeout=60)
    assert not worker.is_alive() and len(fitted) == 119 and all(fitted)
