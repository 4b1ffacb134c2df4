"""step_values: V(s), V(s'), the advantage and the actor loss's mask of each trained step, per critic

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-23 18:55:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "step_values",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("step_id", sa.Integer(), nullable=False),
        sa.Column("critic_version", sa.String(length=80), nullable=False),
        sa.Column("phase", sa.Integer(), nullable=False),
        sa.Column("v_s", sa.Float(), nullable=False),
        sa.Column("v_next", sa.Float(), nullable=False),
        sa.Column("advantage", sa.Float(), nullable=False),
        sa.Column("advantage_binarised", sa.Float(), nullable=False),
        sa.Column("used", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["step_id"], ["steps.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("step_id", "critic_version", name="uq_step_value_critic"),
    )
    op.create_index(op.f("ix_step_values_step_id"), "step_values", ["step_id"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_step_values_step_id"), table_name="step_values")
    op.drop_table("step_values")
