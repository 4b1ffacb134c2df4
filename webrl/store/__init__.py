"""What a run keeps beside the database: checkpoints, readiness of the stores, screenshots, the template prior from
stored labels."""
