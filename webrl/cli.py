"""The ``webrl`` command line. Each area registers its sub-commands from ``webrl/commands/<area>.py``."""

from __future__ import annotations

import importlib
import logging

import typer
from rich.console import Console

from webrl.config import get_settings
from webrl.errors import one_line_errors


class Cli(typer.Typer):
    """The command line: a user's mistake (:class:`webrl.errors.UserError`, invalid settings) is one line on
    stderr and exit status 2, not a traceback."""

    def __call__(self, *args: object, **kwargs: object) -> object:
        with one_line_errors():
            return super().__call__(*args, **kwargs)


app = Cli(help="webrl: WebRL (self-evolving online-curriculum RL) for LLM web agents.",
                  no_args_is_help=True, pretty_exceptions_enable=False)
console = Console()

#: Command modules, each with ``register(app)``. Listed explicitly so `webrl --help` is predictable.
COMMAND_MODULES = [
    "webrl.commands.db",
    "webrl.commands.sites",
    "webrl.commands.tasks",
    "webrl.commands.bootstrap_models",
    "webrl.commands.serve",
    "webrl.commands.train",
    "webrl.commands.run_report",
    "webrl.commands.judges",
    "webrl.commands.ui",
    "webrl.commands.pages",
    "webrl.commands.browser",
    "webrl.commands.flips_probe",
    "webrl.commands.evaluation_store",
]


@app.callback()
def main(verbose: bool = typer.Option(False, "--verbose", "-v", help="Log at DEBUG.")) -> None:
    level = logging.DEBUG if verbose else getattr(logging, get_settings().log_level.upper(), logging.INFO)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def _register_all() -> None:
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(app)


_register_all()


if __name__ == "__main__":
    app()
