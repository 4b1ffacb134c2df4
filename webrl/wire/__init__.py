"""Between the services: the typed contracts, the Celery queue, a client per job."""
