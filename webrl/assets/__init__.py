"""Files shipped with the package: ``actor-sft/``, the tiny SFT actor that ``webrl bootstrap`` made (its command,
seed, sha256 and measured success are in ``PROVENANCE.md`` next to it), so ``make demo`` can start from it."""

from pathlib import Path

#: The shipped SFT actor (a Hugging Face folder with its ``webrl_checkpoint.json`` manifest).
ACTOR_SFT = Path(__file__).parent / "actor-sft"
