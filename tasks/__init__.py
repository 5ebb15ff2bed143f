"""etriage's workers: the Celery app, thin tasks, and the pipeline stages they call."""
