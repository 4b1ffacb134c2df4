"""trajectories.run_id: the pipeline run that rolled a trajectory out (0: none), part of its unique key

Before this revision a trajectory was unique per (task, phase, attempt) and carried no run, so a second
`webrl train` run in the same database skipped the rollouts the first one had made and trained on them. Rows
stored before it keep run_id 0 (what stand-alone rollouts still store), except in a database holding exactly
one run (`make demo`'s): there the pipeline's rows (attempt 0, purpose train or eval; stand-alone evaluations
use attempts >= 1, bootstrap's demonstrations purpose sft) are that run's, so a run stopped before the upgrade
resumes after it with its own trajectories.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-24 10:00:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

OLD_KEY = ["task_id", "phase", "attempt"]
NEW_KEY = [*OLD_KEY, "run_id"]

trajectories = sa.table("trajectories", sa.column("id", sa.Integer), *(sa.column(c, sa.Integer) for c in OLD_KEY))
steps = sa.table("steps", sa.column("id", sa.Integer), sa.column("trajectory_id", sa.Integer))
children = [sa.table("orm_labels", sa.column("trajectory_id", sa.Integer)), steps]
step_values = sa.table("step_values", sa.column("step_id", sa.Integer))


def upgrade() -> None:
    with op.batch_alter_table("trajectories", schema=None) as batch_op:
        batch_op.add_column(sa.Column("run_id", sa.Integer(), nullable=False, server_default="0"))
        batch_op.drop_constraint("uq_trajectory_attempt", type_="unique")
        batch_op.create_unique_constraint("uq_trajectory_attempt", NEW_KEY)
        batch_op.create_index(batch_op.f("ix_trajectories_run_id"), ["run_id"], unique=False)
    _adopt_pipeline_rows()


def _adopt_pipeline_rows() -> None:
    """With exactly one run stored, its pipeline's rows (attempt 0, purpose train/eval) become its own."""
    bind = op.get_bind()
    runs = list(bind.scalars(sa.text("SELECT id FROM runs")))
    if len(runs) != 1:
        return
    bind.execute(sa.text("UPDATE trajectories SET run_id = :run WHERE attempt = 0 AND purpose IN ('train', 'eval')"),
                 {"run": runs[0]})


def _drop_run_duplicates() -> None:
    """Delete what the old key cannot hold: of the trajectories sharing a (task, phase, attempt), every one but
    the oldest (with its steps, their values and its labels). The child rows go explicitly, since SQLite
    enforces no ON DELETE CASCADE while a migration runs (``env.py`` turns its foreign keys off)."""
    oldest = sa.select(sa.func.min(trajectories.c.id)).group_by(*(trajectories.c[c] for c in OLD_KEY)).scalar_subquery()
    doomed = sa.select(trajectories.c.id).where(trajectories.c.id.not_in(oldest))
    bind = op.get_bind()
    ids = list(bind.scalars(doomed))
    if not ids:
        return
    bind.execute(step_values.delete().where(step_values.c.step_id.in_(
        sa.select(steps.c.id).where(steps.c.trajectory_id.in_(ids)))))
    for child in children:
        bind.execute(child.delete().where(child.c.trajectory_id.in_(ids)))
    bind.execute(trajectories.delete().where(trajectories.c.id.in_(ids)))


def downgrade() -> None:
    _drop_run_duplicates()
    with op.batch_alter_table("trajectories", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_trajectories_run_id"))
        batch_op.drop_constraint("uq_trajectory_attempt", type_="unique")
        batch_op.create_unique_constraint("uq_trajectory_attempt", OLD_KEY)
        batch_op.drop_column("run_id")
