"""The reddit sandbox site: a Postmill-like forum (seed.py, app.py, templates/, templates_tasks.py)."""
