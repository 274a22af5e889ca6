"""The staleness gate (at most (max_lag + 1) x groups_per_step groups drawn and not yet settled by the trainer), and
the meter of busy rollout slots."""

from __future__ import annotations

import anyio
import pytest

from rollwire.app.rl.gate import StalenessGate
from rollwire.errors import InvalidRequest


@pytest.mark.anyio
async def test_lockstep_draws_one_step_then_waits() -> None:
    gate = StalenessGate(max_lag=0, groups_per_step=2)
    gate.drawn("g0")
    gate.drawn("g1")
    assert gate.room() == 0
    with pytest.raises(RuntimeError):
        gate.drawn("g2")
    gate.settled(["g0"])  # a group left out (no reward spread): its place opens for a replacement at once
    assert gate.room() == 1


@pytest.mark.anyio
async def test_a_lag_of_k_draws_k_steps_ahead() -> None:
    gate = StalenessGate(max_lag=2, groups_per_step=3)
    assert gate.capacity == 9
    for n in range(9):
        gate.drawn(f"g{n}")
    assert gate.room() == 0
    gate.settled(["g0", "g1", "g2"])  # one update trained three groups
    assert gate.room() == 3


@pytest.mark.anyio
async def test_a_waiting_sampler_wakes_when_the_trainer_settles() -> None:
    gate = StalenessGate(max_lag=0, groups_per_step=1)
    gate.drawn("g0")
    woke = anyio.Event()

    async def sampler() -> None:
        await gate.wait_for_room()
        woke.set()

    async with anyio.create_task_group() as group:
        group.start_soon(sampler)
        await anyio.wait_all_tasks_blocked()
        assert not woke.is_set()  # no room: the sampler is parked on the gate
        gate.settled(["g0"])
        with anyio.fail_after(5):
            await woke.wait()


def test_bad_settings_are_refused() -> None:
    with pytest.raises(InvalidRequest, match="max-lag"):
        StalenessGate(max_lag=-1, groups_per_step=1)
    with pytest.raises(InvalidRequest, match="groups-per-step"):
        StalenessGate(max_lag=0, groups_per_step=0)


def test_the_slot_meter_integrates_running_rollouts_over_time() -> None:
    from rollwire.app.rl.runner import SlotMeter
    from rollwire.orchestrator.scheduler import Progress

    now = [100.0]
    meter = SlotMeter(clock=lambda: now[0])
    meter.restart()
    meter(Progress(occupied=2))  # 2 slots held from t = 100
    now[0] = 103.0
    meter(Progress(occupied=5))  # 2 x 3 s, then 5 held
    now[0] = 104.5
    meter(Progress(occupied=0))  # + 5 x 1.5 s
    now[0] = 110.0
    assert meter.stop() == pytest.approx(2 * 3 + 5 * 1.5)
