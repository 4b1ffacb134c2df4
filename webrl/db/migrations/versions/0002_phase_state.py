"""phases.state: what a phase's stages hand each other, apart from its metrics

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-23 15:05:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

#: Where the stage outputs lived before this revision: metrics key -> state field.
MOVED = {"generate.candidate_keys": "candidate_keys", "filter.kept_keys": "kept_keys",
         "train.actor_path": "actor_path", "train.actor_version": "actor_version",
         "train.critic_path": "critic_path", "train.critic_version": "critic_version"}

phases = sa.table("phases", sa.column("id", sa.Integer), sa.column("state", sa.JSON), sa.column("metrics", sa.JSON))


def upgrade() -> None:
    with op.batch_alter_table("phases", schema=None) as batch_op:
        batch_op.add_column(sa.Column("state", sa.JSON(), nullable=False, server_default="{}"))
    bind = op.get_bind()
    for row in bind.execute(sa.select(phases.c.id, phases.c.metrics)).all():
        metrics = dict(row.metrics or {})
        state = {field: metrics.pop(key) for key, field in MOVED.items() if key in metrics}
        if state:
            bind.execute(phases.update().where(phases.c.id == row.id).values(state=state, metrics=metrics))


def downgrade() -> None:
    bind = op.get_bind()
    for row in bind.execute(sa.select(phases.c.id, phases.c.state, phases.c.metrics)).all():
        state = dict(row.state or {})
        back = {key: state[field] for key, field in MOVED.items() if field in state}
        if back:
            bind.execute(phases.update().where(phases.c.id == row.id).values(metrics={**(row.metrics or {}), **back}))
    with op.batch_alter_table("phases", schema=None) as batch_op:
        batch_op.drop_column("state")
