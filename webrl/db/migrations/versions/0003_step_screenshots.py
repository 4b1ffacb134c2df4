"""steps.screenshot: where a step's screenshot lies under the artifacts directory (None: none was taken)

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23 18:20:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("steps", schema=None) as batch_op:
        batch_op.add_column(sa.Column("screenshot", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("steps", schema=None) as batch_op:
        batch_op.drop_column("screenshot")
