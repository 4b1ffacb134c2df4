"""The intent templates of a sandbox suite, with no run at hand (the offline benches compare adapters by template)."""

from __future__ import annotations

import os
import tempfile

from webrl.method.template_split import TemplateGroups
from webrl.store.template_groups import template_groups


def suite_template_groups(seed: int) -> TemplateGroups:
    """The templates of the sandbox suite of ``seed`` (deterministic for its seed), with no run at hand: the suite is
    loaded into a temporary embedded home (SQLite) and read back as a run's report reads it. The caller's
    ``WEBRL_HOME`` and database URL are restored after."""
    from webrl.config import get_settings
    from webrl.db.migrate import upgrade
    from webrl.sandbox.tasks.suite import load_suite

    with tempfile.TemporaryDirectory() as home:
        saved = {var: os.environ.pop(var, None) for var in ("WEBRL_HOME", "WEBRL_DATABASE__URL")}
        os.environ["WEBRL_HOME"] = home
        get_settings.cache_clear()
        try:
            settings = get_settings()
            settings.ensure_dirs()
            upgrade(settings)
            load_suite(settings, seed)
            return template_groups(settings)
        finally:
            os.environ.pop("WEBRL_HOME")
            os.environ.update({var: value for var, value in saved.items() if value is not None})
            get_settings.cache_clear()
