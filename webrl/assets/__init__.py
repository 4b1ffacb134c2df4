"""Files shipped with the package: ``actor-sft/``, the tiny SFT actor that ``webrl bootstrap`` made (its command,
seed, sha256 and measured success are in ``PROVENANCE.md`` next to it), so ``make demo`` can start from it."""
