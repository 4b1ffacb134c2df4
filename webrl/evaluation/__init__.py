"""WebArena's evaluators (string_match, url_match, program_html) with WebArena's semantics.

    evaluator = build_evaluator(task_config, settings)      # EvaluatorBuildError on an unsupported block
    score = await evaluator.score(answer, page_url, context)  # product of the parts, in [0, 1]
"""

from webrl.evaluation.evaluator import EvaluationResult, Evaluator, build_evaluator
from webrl.evaluation.harness_errors import (
    EvaluationError,
    EvaluatorBuildError,
    LLMJudgeError,
    LLMJudgeNotConfiguredError,
    UnsupportedHelperError,
)
from webrl.evaluation.helpers import HelperContext, register_helper

__all__ = [
    "EvaluationError",
    "EvaluationResult",
    "Evaluator",
    "EvaluatorBuildError",
    "HelperContext",
    "LLMJudgeError",
    "LLMJudgeNotConfiguredError",
    "UnsupportedHelperError",
    "build_evaluator",
    "register_helper",
]
