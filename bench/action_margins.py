"""How close a stored step's right action was to the wrong one, under each actor of a run: the log-prob of the step's
response with each candidate element id, the page and history as the stored episode had them.

    .venv/bin/python bench/action_margins.py --run cpu-demo --phase 2 \\
        --case sandbox/test/95:1:10,9 --case sandbox/test/147:2:13,14 [--actor NAME=FOLDER ...]

Run it in the home the run wrote (``WEBRL_HOME``, default ``.webrl``). A case is TASK:STEP:IDS: the evaluation
episode of TASK in ``--phase`` of ``--run``, its step STEP (0-based), and element ids, the right one first. Each
candidate is the step's own response (``# Element: <name>`` then the action) with its ``element="..."`` set to the
id, scored under the actor prompt the step was taken with (``webrl.prompts.actor``, ``actor.max_prompt_tokens``).
Actors: ``--actor`` (repeat), else the run home's SFT adapter (``models/actor-sft-smollm2``) and every phase's actor
(``models/actor/phase*``). Prints per actor and case each candidate's log-prob and the margin, the right id's log-prob
less the best other's: above 0 the actor prefers the right element.

Why: the seen-template tasks every seed-0 run loses name the right element and click a neighbour's id (the
phone-number task: ``# Element: Account Information`` then element 9, My Wish List, where 10 is right);
docs/measurements.md reads the margins.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import typer
from rich.console import Console
from rich.table import Table
from sqlalchemy import select

from webrl.agent.schemas import Trajectory
from webrl.config import Settings, get_settings
from webrl.db import models as m
from webrl.db.repository import load_trajectory
from webrl.db.session import session_scope
from webrl.models.loading import load_causal_lm
from webrl.prompts.actor import render_actor_prompt

_ELEMENT = re.compile(r'(element=")(\d+)(")')
app = typer.Typer(add_completion=False)


@dataclass(frozen=True)
class Case:
    """A stored step and the element ids to score at it, the right one first."""

    task: str
    step: int
    ids: list[str]


def parse_case(text: str) -> Case:
    """``TASK:STEP:ID,ID[,...]``; BadParameter naming what is wrong."""
    task, _, rest = text.rpartition(":")
    task, _, step = task.rpartition(":")
    ids = [i.strip() for i in rest.split(",") if i.strip()]
    if not task or not step.isdigit() or len(ids) < 2 or not all(i.isdigit() for i in ids):
        raise typer.BadParameter(f"{text!r}: expected TASK:STEP:ID,ID[,...] (a step number and two or more element "
                                 "ids, the right one first)")
    return Case(task, int(step), ids)


def with_element(response: str, element: str) -> str:
    """``response`` with its action's ``element="..."`` set to ``element``; ValueError when it names none."""
    if not _ELEMENT.search(response):
        raise ValueError(f"the response names no element: {response!r}")
    return _ELEMENT.sub(lambda found: found.group(1) + element + found.group(3), response, count=1)


def margin(logprobs: list[float]) -> float:
    """The first (right) candidate's log-prob less the best of the others'."""
    return logprobs[0] - max(logprobs[1:])


def evaluation_episode(settings: Settings, run: str, phase: int, task: str) -> Trajectory:
    """The evaluation episode (attempt 0) of ``task`` in ``phase`` of ``run``; BadParameter when there is none."""
    with session_scope(settings) as s:
        run_id = s.scalar(select(m.Run.id).where(m.Run.name == run))
        if run_id is None:
            raise typer.BadParameter(f"no run {run!r} in {settings.home}")
        row = s.scalar(select(m.TrajectoryRow).join(m.Task, m.Task.id == m.TrajectoryRow.task_id).where(
            m.Task.key == task, m.TrajectoryRow.purpose == "eval", m.TrajectoryRow.phase == phase,
            m.TrajectoryRow.attempt == 0, m.TrajectoryRow.run_id == run_id))
        if row is None:
            raise typer.BadParameter(f"run {run!r} has no evaluation episode of {task} in phase {phase}")
        return load_trajectory(row)


def candidate_logprobs(model: torch.nn.Module, tokenizer: Any, prompt: str, responses: list[str]) -> list[float]:
    """log pi(response | prompt) for each response: the sum over its tokens, the prompt tokenised once."""
    prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    out = []
    for response in responses:
        response_ids = tokenizer(response, add_special_tokens=False)["input_ids"]
        ids = torch.tensor([prompt_ids + response_ids])
        with torch.no_grad():
            logits = model(ids).logits[0, len(prompt_ids) - 1:-1].float()
        picked = torch.log_softmax(logits, -1).gather(1, torch.tensor(response_ids)[:, None])
        out.append(float(picked.sum()))
    return out


def default_actors(settings: Settings) -> dict[str, Path]:
    """The home's SFT adapter and every phase's published actor, by name."""
    models = settings.artifacts_dir / "models"
    actors = {"sft": models / "actor-sft-smollm2"}
    actors.update({p.name: p for p in sorted((models / "actor").glob("phase*"))})
    return {name: path for name, path in actors.items() if path.is_dir()}


@app.command()
def main(run: str = typer.Option(..., help="The run's name (`webrl train --run`)."),
         phase: int = typer.Option(..., help="The phase whose evaluation episodes give the pages and histories."),
         case: list[str] = typer.Option(..., help="TASK:STEP:ID,ID[,...], the right id first (repeat)."),
         actor: list[str] = typer.Option([], help="NAME=FOLDER: an actor to score under (repeat); default: the "
                                                  "home's SFT adapter and phase actors.")) -> None:
    settings = get_settings()
    cases = [parse_case(c) for c in case]
    actors = dict(a.split("=", 1) for a in actor) if actor else default_actors(settings)
    if not actors:
        raise typer.BadParameter(f"no actor given and none under {settings.artifacts_dir / 'models'}")
    episodes = {c.task: evaluation_episode(settings, run, phase, c.task) for c in cases}
    table = Table(title=f"log-prob of each element id at the stored step (run {run}, phase {phase}'s episodes)")
    for column in ("actor", "task", "step", "response", "log-probs (right first)", "margin"):
        table.add_column(column)
    for name, folder in actors.items():
        model, tokenizer = load_causal_lm(folder, settings)
        model.eval()
        for c in cases:
            episode = episodes[c.task]
            if c.step >= len(episode.steps):
                raise typer.BadParameter(f"{c.task}'s episode has {len(episode.steps)} steps, no step {c.step}")
            step = episode.steps[c.step]
            prompt = render_actor_prompt(tokenizer, episode.intent, list(episode.steps[:c.step]),
                                         step.observation.html, max_tokens=settings.actor.max_prompt_tokens)
            logprobs = candidate_logprobs(model, tokenizer, prompt, [with_element(step.response, i) for i in c.ids])
            table.add_row(name, c.task, str(c.step), step.response.replace("\n", " "),
                          ", ".join(f"{i}: {lp:.2f}" for i, lp in zip(c.ids, logprobs, strict=True)),
                          f"{margin(logprobs):+.2f}")
    Console(width=200).print(table)


if __name__ == "__main__":
    app()
