"""Step screenshots: the page a step saw, downscaled and encoded as WebP or JPEG (whichever is smaller), stored
in the artifacts directory beside its trajectory (``trajectories/<trajectory id>/step-<index>.<webp|jpg>``) and
recorded on the step (``steps.screenshot``, the path relative to the artifacts directory).

Taken when a rollout asks for them (:attr:`webrl.wire.contracts.RolloutRequest.screenshots`: ``webrl eval`` does by
default, training rollouts do not; ``bench/browser_pool.py`` measures the cost). The images stay in memory on the
:class:`webrl.agent.schemas.Step` until the trajectory is stored (they are never serialised).
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import TYPE_CHECKING

from webrl.whole_files import write_bytes_whole

if TYPE_CHECKING:
    from webrl.agent.schemas import Step
    from webrl.config import Settings
    from webrl.db import models as m

MAX_WIDTH = 640  # px: half of WebArena's 1280 px viewport; the layout stays readable at ~15-30 KB a step
CAPTURE_QUALITY = 90  # the browser's JPEG: decoding it at half size (JPEG draft mode) is ~9x cheaper than a PNG
QUALITY = 70  # the stored WebP and JPEG: text stays legible at MAX_WIDTH
WEBP_METHOD = 0  # libwebp's fastest: ~3x faster than its default 4 for ~20% more bytes
MEDIA_TYPES = {".webp": "image/webp", ".jpg": "image/jpeg"}
SCREENSHOT_DIR = "trajectories"


def encode(captured: bytes, max_width: int = MAX_WIDTH) -> bytes:
    """``captured`` (a browser screenshot, JPEG or PNG) scaled down to ``max_width`` and encoded as WebP and as
    JPEG; returns the smaller of the two."""
    from PIL import Image

    image = Image.open(io.BytesIO(captured))
    image.draft("RGB", (max_width, max_width))  # a JPEG decodes straight at 1/2, 1/4 ... of its size; no-op else
    image = image.convert("RGB")
    if image.width > max_width:
        image = image.resize((max_width, round(image.height * max_width / image.width)), Image.Resampling.BILINEAR)
    encoded = []
    for fmt, options in (("WEBP", {"quality": QUALITY, "method": WEBP_METHOD}), ("JPEG", {"quality": QUALITY})):
        out = io.BytesIO()
        image.save(out, fmt, **options)
        encoded.append(out.getvalue())
    return min(encoded, key=len)


def suffix_of(data: bytes) -> str:
    """The file suffix of an image :func:`encode` made (".webp" or ".jpg"), read from its magic bytes."""
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return ".webp"
    if data[:3] == b"\xff\xd8\xff":
        return ".jpg"
    raise ValueError("not a WebP or JPEG image")


def relative_path(trajectory_id: int, index: int, suffix: str) -> str:
    """Where step ``index`` of trajectory ``trajectory_id`` keeps its screenshot, under the artifacts directory."""
    return f"{SCREENSHOT_DIR}/{trajectory_id}/step-{index:03d}{suffix}"


def record(settings: Settings, row: m.TrajectoryRow, steps: list[Step]) -> int:
    """Write the screenshot of each of ``steps`` that has one beside the stored trajectory ``row`` and record its
    path on the step's row (a row that has one already keeps it). Returns how many were written."""
    assert settings.artifacts_dir is not None
    images = {step.index: step.screenshot for step in steps if step.screenshot}
    written = 0
    for step_row in row.steps:
        data = images.get(step_row.index)
        if data is None or step_row.screenshot is not None:
            continue
        rel = relative_path(row.id, step_row.index, suffix_of(data))
        write_bytes_whole(settings.artifacts_dir / rel, data)  # a row never points at a partial file
        step_row.screenshot = rel
        written += 1
    return written


def resolve(settings: Settings, rel: str) -> Path | None:
    """The file of a recorded screenshot path, or None when it is missing or would lie outside the screenshots
    folder (a tampered row cannot make the viewer serve another file)."""
    assert settings.artifacts_dir is not None
    root = (settings.artifacts_dir / SCREENSHOT_DIR).resolve()
    path = (settings.artifacts_dir / rel).resolve()
    if not path.is_relative_to(root) or path.suffix not in MEDIA_TYPES or not path.is_file():
        return None
    return path
