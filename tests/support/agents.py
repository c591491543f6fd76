"""The agent in process against the fake API server: the ``apiserver`` and ``make_agent`` fixtures."""

from __future__ import annotations

import pytest

from agent.config import Config
from agent.run.agent import Agent
from tests.support.fake_apiserver import FakeApiServer


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
