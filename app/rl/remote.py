"""A ``rollwire rl`` whose trainer runs elsewhere: a Kubernetes Job the command creates (``--trainer job``), or a
``rollwire train`` the user starts on a machine of their choosing (``--trainer external``). Either way the
command samples and follows the trainer through the version the proxy publishes (``FollowedTrainer``).
"""

from __future__ import annotations

import dataclasses
import logging
import shlex
from collections.abc import Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import anyio.to_thread
import httpx

from rollwire.app.rl.trainers import FollowedTrainer
from rollwire.errors import RollwireError
from rollwire.settings import Settings
from rollwire.trainer.weights import ProxyVersionPublisher

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from rollwire.app.rl.loop import RLConfig
    from rollwire.app.stack import StackInfo
    from rollwire.orchestrator.runtimes.kubernetes.trainer_job import TrainerRecipe

logger = logging.getLogger(__name__)


def train_command(recipe: TrainerRecipe) -> str:
    """The ``rollwire train`` command line of ``recipe`` (the stack's admin URL and key come from its settings)."""
    return shlex.join(["rollwire", *recipe.train_args()])


@asynccontextmanager
async def followed_trainer(
    info: StackInfo, settings: Settings, recipe: TrainerRecipe, config: RLConfig, *, job: bool,
    report: Callable[[str], None], announce: Callable[[str], None],
) -> AsyncIterator[FollowedTrainer]:
    """The trainer the command follows; with ``job``, its Kubernetes Job is created (or adopted) on start and
    watched: a Job that fails for good stops the run with one line. ``report`` takes the live phase (updates),
    ``announce`` the lines that stay (the trainer's command, what became of its Job)."""
    client = httpx.Client(timeout=httpx.Timeout(10.0))
    publisher = ProxyVersionPublisher(info.admin_url, info.operator_key, client)

    async def published() -> int | None:
        try:
            return await anyio.to_thread.run_sync(publisher.published)
        except RollwireError as exc:  # the proxy restarting: the next read tells
            logger.warning("could not read the published policy version: %s", exc)
            return None

    async def publish(version: int) -> None:
        await anyio.to_thread.run_sync(publisher.publish, version)

    failure_reward = settings.trainer.failure_reward
    if not job:

        async def tell(target: int) -> str:
            return f"train elsewhere with: {train_command(dataclasses.replace(recipe, until_version=target))}"

        try:
            yield FollowedTrainer(published, publish, groups_per_step=config.groups_per_step,
                                  failure_reward=failure_reward, launch=tell, report=report, announce=announce)  # fmt: skip
        finally:
            client.close()
        return
    from rollwire.orchestrator.manifests import trainer_template
    from rollwire.orchestrator.runtimes.kubernetes.api import KubeApi, api_client_from_settings
    from rollwire.orchestrator.runtimes.kubernetes.trainer_job import TrainerJob, build_trainer_job

    kube = settings.orchestrator.kubernetes
    api = KubeApi(api_client_from_settings(kube), kube)
    jobs: list[TrainerJob] = []

    async def launch(target: int) -> str:
        body = build_trainer_job(dataclasses.replace(recipe, until_version=target), kube, trainer_template(kube))
        jobs.append(TrainerJob(api, kube, body))
        return f"trainer Job {jobs[0].name}: {await jobs[0].ensure()}"

    async def failure() -> str | None:
        return await jobs[0].failure() if jobs else None

    try:
        yield FollowedTrainer(published, publish, groups_per_step=config.groups_per_step,
                              failure_reward=failure_reward, launch=launch, failure=failure, report=report,
                              announce=announce)  # fmt: skip
    finally:
        await api.aclose()
        client.close()


__all__ = ["followed_trainer", "train_command"]
