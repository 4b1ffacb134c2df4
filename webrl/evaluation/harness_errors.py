"""Errors of the evaluation harness. Each names what is wrong, so a caller can show it as is."""

from __future__ import annotations


class EvaluationError(Exception):
    """Base class: an evaluator could not be built or could not score an episode."""


class EvaluatorBuildError(EvaluationError, ValueError):
    """A task's ``eval`` block names something the harness does not know (an eval type, a locator form,
    a ``required_contents`` key, a ``func:`` helper) or lacks a field the named type needs."""


class UnsupportedHelperError(EvaluationError):
    """A ``func:`` helper that needs WebArena's own site (its REST API or admin account) was called.

    Raised when the helper is *called*, never when the evaluator is built, so every WebArena config builds.
    """

    def __init__(self, name: str, needs: str) -> None:
        self.name = name
        self.needs = needs
        super().__init__(
            f"func: helper {name!r} needs {needs}; it is not available against these sites. "
            f"Run the task on a WebArena deployment with an implementation registered through "
            f"webrl.evaluation.helpers.register_helper({name!r})."
        )


class LLMJudgeNotConfiguredError(EvaluationError):
    """A ``fuzzy_match`` (or an unachievable-task check) needs the LLM judge and none is configured."""

    def __init__(self, what: str) -> None:
        super().__init__(
            f"{what} needs an LLM judge: set WEBRL_LLM_JUDGE__ENDPOINT (an OpenAI-compatible base URL such as "
            f"http://host:8000/v1) and WEBRL_LLM_JUDGE__MODEL (settings.llm_judge.endpoint / .model)."
        )


class LLMJudgeError(EvaluationError):
    """The judge endpoint failed or answered something that is neither verdict."""
