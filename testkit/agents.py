"""The agent in process against the fake API server: the ``apiserver`` and ``make_agent`` fixtures, and
``agent_config``, the Config such an agent runs with, and ``pod_names`` to read what such an agent holds."""

from __future__ import annotations

import os

import pytest

from agent.config import SETTINGS, ClusterAccess, Config, from_sources, parse_address
from agent.run.agent import Agent
from testkit.fake_apiserver import FakeApiServer


def pod_names(agent: Agent) -> set[str]:
    """The names of the pods the agent's state holds."""
    return {p.name for p in agent.state.pods()}


def agent_config(*, kubeconfig: str | None = None, otlp_protocol: str | None = None, **fields) -> Config:
    """A Config built in code: ``fields`` as Config takes them, with nothing on that was not asked for (no debug
    endpoint, no "used" series), ``kubeconfig`` and ``debug_address`` in the forms the flags take, and for the otlp
    exporter the OTLP settings resolved from the test's environment by ``from_sources``, as the agent would."""
    fields = {"debug_address": None, "procfs": None, **fields}
    if kubeconfig is not None:
        fields["cluster"] = ClusterAccess(kubeconfig=kubeconfig)
    if isinstance(fields["debug_address"], str):
        fields["debug_address"] = parse_address(fields["debug_address"])
    if fields.get("exporter", SETTINGS["exporter"].default) == "otlp" and "otlp" not in fields:
        env = dict(os.environ)
        if otlp_protocol is not None:
            env[SETTINGS["otlp_protocol"].env[0]] = otlp_protocol
        fields["otlp"] = from_sources({"node_name": "-", "exporter": "otlp"}, env).otlp
    return Config(**fields)


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
        agent = Agent(agent_config(**settings))
        agents.append(agent)
        return agent.start()

    yield make
    for agent in agents:
        agent.shutdown(final_export=False)
