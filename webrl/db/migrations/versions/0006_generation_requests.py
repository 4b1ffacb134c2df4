"""generation_requests: the task keys each taskgen.generate request stored, by the digest of the request

Before this revision a retried request (a Celery redelivery, a pipeline resumed after a kill between taskgen's
commit and the end of its generate stage) found its first batch among the existing intents, de-duplicated it away and
stored a second, different batch: the resumed phase trained on another curriculum than the one it began.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-06 23:10:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "generation_requests",
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("task_keys", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("digest"),
    )


def downgrade() -> None:
    op.drop_table("generation_requests")
