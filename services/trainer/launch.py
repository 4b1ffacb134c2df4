"""Entry point for ``accelerate launch -m services.trainer.launch <phase|sft> <job.json> <result.json>``.

Every process runs the job (DeepSpeed shards the models across them); the main process writes the result.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from services.trainer.jobs import JOB_TYPES, run_here
from services.trainer.training_loop import end_processes
from webrl.config import get_settings


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="services.trainer.launch", description=__doc__)
    parser.add_argument("kind", choices=sorted(JOB_TYPES))
    parser.add_argument("job", type=Path, help="JSON file with the job (a PhaseJob or an SftJob)")
    parser.add_argument("result", type=Path, help="where the main process writes the JSON result")
    args = parser.parse_args(argv)
    settings = get_settings()
    logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    result = run_here(settings, JOB_TYPES[args.kind].model_validate_json(args.job.read_text()))
    if result is not None:
        args.result.write_text(result.model_dump_json())
    end_processes()


if __name__ == "__main__":
    main()
