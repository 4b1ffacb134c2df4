"""Sandbox tasks: :mod:`~webrl.sandbox.tasks.base` (templates, eval-block builders) and
:mod:`~webrl.sandbox.tasks.suite` (``build_suite(seed)``: the train and test splits)."""
