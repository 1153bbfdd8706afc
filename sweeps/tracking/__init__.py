"""MLflow on the driver: the Tune callback that records every trial, the outbox that holds
writes while the store is away, and the UI view saved on a sweep's parent run."""
