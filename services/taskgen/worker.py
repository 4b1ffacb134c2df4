"""taskgen Celery tasks: ``taskgen.generate`` and ``taskgen.filter`` (payloads as in app.py)."""

from __future__ import annotations

from services.taskgen.curriculum import filter_by_value, generate_grounded, generate_llm
from webrl.config import get_settings
from webrl.hyperparams import DEFAULTS
from webrl.queue import MAX_RETRIES, celery_app


@celery_app.task(name="taskgen.generate", max_retries=MAX_RETRIES)
def generate(payload: dict) -> dict:
    """New tasks from failed ones; idempotent: the same intents map to the same task keys."""
    settings = get_settings()
    common = (settings, int(payload["phase"]), list(payload["parent_keys"]), int(payload["n"]),
              int(payload.get("seed", 0)))
    if payload.get("generator", "grounded") == "llm":
        result = generate_llm(*common, endpoint=payload.get("endpoint") or settings.llm_judge_endpoint or "",
                              model=payload.get("model") or settings.llm_judge_model or "",
                              mode=payload.get("mode", "chat"), feasibility=payload.get("feasibility", True))
    else:
        result = generate_grounded(*common)
    return {"task_keys": result.task_keys, "duplicates": result.duplicates,
            "rejected": [{"text": r.text, "reason": r.reason} for r in result.rejected]}


@celery_app.task(name="taskgen.filter", max_retries=MAX_RETRIES)
def filter_tasks(payload: dict) -> dict:
    """Keep the tasks whose value lies in [low, high]; stores every value (idempotent per critic version)."""
    band = DEFAULTS.curriculum
    kept = filter_by_value(get_settings(), list(payload["task_keys"]), dict(payload["values"]),
                           critic_version=payload["critic_version"], low=payload.get("low", band.value_low),
                           high=payload.get("high", band.value_high))
    return {"kept": kept}
