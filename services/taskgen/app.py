"""taskgen REST: ``POST /v1/tasks/generate`` and ``POST /v1/tasks/filter``. Routes only; the operations are in
:mod:`services.taskgen.curriculum`."""

from __future__ import annotations

from services.taskgen.curriculum import filter_tasks, generate
from webrl.config import get_settings
from webrl.serving.factory import create_app
from webrl.wire.contracts import FilterRequest, FilterResult, GenerateRequest, GenerateResult

app = create_app("taskgen", description="Curriculum task generation and filtering (WebRL section 3.2).")


@app.post("/v1/tasks/generate", response_model=GenerateResult, tags=["tasks"])
def tasks_generate(body: GenerateRequest) -> GenerateResult:
    """New tasks in breadth from failed ones (grounded in the sandbox, or from an LLM)."""
    return generate(get_settings(), body)


@app.post("/v1/tasks/filter", response_model=FilterResult, tags=["tasks"])
def tasks_filter(body: FilterRequest) -> FilterResult:
    """Keep the tasks whose start-state value lies in [low, high]; every value is stored."""
    return filter_tasks(get_settings(), body)
