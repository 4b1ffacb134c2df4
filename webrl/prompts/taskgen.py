"""Task-generation prompts: WebRL's in-breadth evolution of failed tasks, and a feasibility judge.

The evolution prompt follows the published ``scripts/gen_task.py`` (paper, section 3.1 and appendix):
given up to ten failed tasks of one website, create new tasks of the same domain, more diverse, of a
similar difficulty, reusing the entities of the examples, each task in backticks.
"""

from __future__ import annotations

import re

EXAMPLES_PER_PROMPT = 10  # published code: seed_num = 10 failed tasks per prompt

SITE_DESCRIPTIONS = {
    "shopping": "an online store (products, categories, reviews, cart, orders)",
    "shopping_admin": "the admin panel of an online store (orders, products, customers, reports)",
    "reddit": "a forum site like Reddit (forums, posts, comments, votes, users)",
    "gitlab": "a GitLab code-hosting site (projects, issues, merge requests, members)",
    "map": "an OpenStreetMap map site (places, directions)",
    "wikipedia": "Wikipedia",
}

EVOLVE_TEMPLATE = """You create tasks for an assistant that operates the website {site_name}: {site_description}.
The tasks must be instructions or questions a real person could give while using this website.

Study the example tasks below. Write {n} new tasks that belong to the same domain as the examples but are
more varied. Keep the difficulty close to that of the examples; a new task may be a little easier or
harder, never far off. Each task must be realistic, self-contained and clear.

Rules:
- Put every task on its own line, inside backticks, like `Find the cheapest red mug`.
- Vary the wording; do not repeat the same sentence pattern.
- Reuse the kinds of names found in the examples (products, people, places, projects, forums); do not
  invent new kinds of variables.
- Do not mention the examples themselves or words such as "example task" or "new task".

Example tasks:
{examples}

New tasks:
"""

FEASIBILITY_TEMPLATE = """Website: {site_name} ({site_description}).
Task: {intent}

Can this task be completed on this website by browsing and filling in forms, with a clear outcome?
Answer with a single word: YES or NO."""

_BACKTICKED = re.compile(r"`([^`\n]{1,400})`")


def build_evolution_prompt(site: str, failed_intents: list[str], n: int) -> str:
    """The user message asking for ``n`` new tasks in breadth from ``failed_intents`` of ``site``."""
    if not failed_intents:
        raise ValueError("task evolution needs at least one failed task")
    examples = "\n".join(f"- `{intent.strip()}`" for intent in failed_intents[:EXAMPLES_PER_PROMPT])
    return EVOLVE_TEMPLATE.format(site_name=site, site_description=SITE_DESCRIPTIONS.get(site, site), n=n,
                                  examples=examples)


def build_feasibility_prompt(site: str, intent: str) -> str:
    return FEASIBILITY_TEMPLATE.format(site_name=site, site_description=SITE_DESCRIPTIONS.get(site, site),
                                       intent=intent.strip())


def extract_backticked(text: str) -> list[str]:
    """The backticked spans of a model's answer, in order (the published parser's rule)."""
    return [m.group(1).strip() for m in _BACKTICKED.finditer(text)]
