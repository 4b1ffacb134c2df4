"""``webrl ui``: a read-only, server-rendered viewer of runs, phases, generated tasks and trajectories."""
