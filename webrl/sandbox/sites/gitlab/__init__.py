"""The gitlab sandbox site: a GitLab-like code host (seed.py, app.py, templates/, templates_tasks.py)."""
