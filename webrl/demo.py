"""``make demo``: the main job on the embedded default, from a fresh checkout.

1. migrate the SQLite database under ``.webrl/`` and load the sandbox task suite;
2. get the SFT actor: the shipped one (``webrl/assets/actor-sft``, made by ``webrl bootstrap``;
   ``webrl/assets/PROVENANCE.md`` has the command and seed) after checking its sha256, else run ``webrl bootstrap``;
3. ``webrl train --preset cpu-demo``: three WebRL phases with progress bars, then the report
   (``.webrl/artifacts/reports/cpu-demo/report.md`` with its PNG plots).

Rerunning resumes where the last run stopped.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from rich.console import Console

from webrl.config import Settings, get_settings

console = Console()
SHIPPED_ACTOR = Path(__file__).parent / "assets" / "actor-sft"
RUN = "cpu-demo"


def shipped_actor_is_intact(folder: Path = SHIPPED_ACTOR) -> bool:
    """True when the shipped actor exists and its files hash to the sha256 its manifest records."""
    from webrl.checkpoints import verify

    return (folder / "config.json").is_file() and verify(folder)


def sft_actor(settings: Settings) -> Path:
    """The SFT actor under the artifacts folder: copied from the shipped one, or bootstrapped."""
    from webrl.cli import app

    assert settings.artifacts_dir is not None
    target = settings.artifacts_dir / "models" / "actor-sft"
    if (target / "config.json").exists():
        console.print(f"SFT actor: {target} (already there)")
        return target
    if shipped_actor_is_intact():
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(SHIPPED_ACTOR, target)
        console.print(f"SFT actor: copied the shipped checkpoint to {target} (see webrl/assets/PROVENANCE.md)")
        return target
    console.print("SFT actor: none shipped, running `webrl bootstrap` (about 10 minutes)")
    app(["bootstrap"], standalone_mode=False)
    return target


def main() -> None:
    from webrl.cli import app

    # Embedded, the model shares the CPU with Chromium and the sites: one intra-op thread avoids OpenMP spinning
    # against them (measured faster on the 2-core machine); WEBRL_TORCH_THREADS overrides it.
    os.environ.setdefault("WEBRL_TORCH_THREADS", "1")
    settings = get_settings()
    console.rule("webrl demo: WebRL on the built-in sandbox sites, tiny CPU model")
    actor = sft_actor(settings)
    app(["train", "--preset", RUN, "--run", RUN, "--actor", str(actor)], standalone_mode=False)
    assert settings.artifacts_dir is not None
    console.print(f"done: report at {settings.artifacts_dir / 'reports' / RUN / 'report.md'}")


if __name__ == "__main__":
    main()
