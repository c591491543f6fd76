from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from agent.run.agent import Agent
from agent.config import Config
from tests.fake_apiserver import FakeApiServer


def wait_until(predicate: Callable[[], object], timeout: float = 10.0, interval: float = 0.02, message: str = "") -> object:
    """The first truthy value of ``predicate()``; it is asked once more at the deadline before giving up.

    The one polling helper of the suite: in-process checks poll every 20 ms, tests against the real control
    plane pass a coarser ``interval`` (their reactions take seconds).
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout:g} s: {message or predicate}")
        time.sleep(interval)


@pytest.fixture
def apiserver():
    server = FakeApiServer(bookmark_interval=0.5).start()
    yield server
    server.stop()


@pytest.fixture
def make_agent(apiserver, tmp_path):
    agents: list[Agent] = []

    def make(**overrides) -> Agent:
        settings = dict(node_name="node-a", kubeconfig=apiserver.kubeconfig(tmp_path / "kubeconfig"),
                        exporter="none", read_timeout=5.0, watch_timeout=(30, 40), export_interval=0.2)
        settings.update(overrides)
        agent = Agent(Config(**settings))
        agents.append(agent)
        return agent.start()

    yield make
    for agent in agents:
        agent.shutdown(final_export=False)


@pytest.fixture(scope="session")
def victoriametrics(tmp_path_factory):
    from tests.victoriametrics import VictoriaMetrics

    vm = VictoriaMetrics(tmp_path_factory.mktemp("vmdata"))
    yield vm
    vm.stop()
