"""A service as a process: the FastAPI factory, metrics, paths a request may name, the browser server."""
