"""Sub-commands of the ``webrl`` CLI, one module per area, each exposing ``register(app)``."""
