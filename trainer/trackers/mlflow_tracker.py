"""MLflow with a local tracking store: ``<folder>/mlflow.db`` (SQLite, MLflow's recommended local backend; its file
store is frozen) and artifacts under ``<folder>/artifacts``. ``mlflow ui --backend-store-uri sqlite:///...`` shows it."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from rollwire.trainer.trackers.base import TrackerRun, plain_config, scalars


def tracking_uri(run: TrackerRun) -> str:
    return f"sqlite:///{run.folder / 'mlflow.db'}"


class MlflowTracker:
    name = "mlflow"

    def __init__(self, run: TrackerRun) -> None:
        from mlflow.tracking import MlflowClient

        run.folder.mkdir(parents=True, exist_ok=True)
        self.folder = run.folder
        self.tracking_uri = tracking_uri(run)
        self._client = MlflowClient(tracking_uri=self.tracking_uri)
        experiment = self._client.get_experiment_by_name(run.project)
        experiment_id = (
            experiment.experiment_id
            if experiment is not None
            else self._client.create_experiment(run.project, artifact_location=(run.folder / "artifacts").as_uri())
        )
        self.run_id = self._client.create_run(experiment_id, run_name=run.run_name).info.run_id
        for key, value in plain_config(run.config).items():
            self._client.log_param(self.run_id, key, value)

    def log(self, step: int, metrics: Mapping[str, Any]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        batch = [Metric(key, value, now, step) for key, value in scalars(metrics).items()]
        if batch:
            self._client.log_batch(self.run_id, metrics=batch)

    def close(self) -> None:
        self._client.set_terminated(self.run_id)


__all__ = ["MlflowTracker", "tracking_uri"]
