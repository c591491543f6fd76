"""The source files of every module ``node-requests-agent run`` has imported once its agent is built.

The image build (image/runtime.py) compiles exactly these to bytecode and ships no other: what the agent imports at
start loads from bytecode, what it never imports costs no space. The set is computed, never listed by hand, so a
change of what the run path imports (the kubernetes package leaving it, say) changes the image by itself.

It takes the steps of ``node-requests-agent run`` (the installed script's ``agent.cli:main``) up to the point where
the threads would start and connect: the command's modules, the configuration from the environment it is handed
(the DaemonSet's kind, set by the caller: only config and cli read the process's own), logging, the wired agent.
Nothing here connects anywhere.

``main(env)`` prints them one a line (.py files only: extension modules have no bytecode); image/runtime.py runs it in
a fresh interpreter of the image's venv.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

__all__ = ["imported_sources", "main"]


def imported_sources(env: Mapping[str, str]) -> list[str]:
    """The agent built as ``run`` builds it (not started), then the .py file of every module loaded, sorted."""
    from importlib.metadata import entry_points  # (the OTel SDK's start imports it too)

    from agent.config import from_sources
    from agent.run.agent import Agent
    from agent.run.command import run  # noqa: F401 - imported for what it loads: the run command's own modules
    from agent.run.logs import configure_logging

    (script,) = entry_points(group="console_scripts", name="node-requests-agent")
    script.load()  # the command's module, imported as the installed script imports it (run/ may not import cli)
    config = from_sources({}, env)
    configure_logging(config.log_level, config.log_format, node_name=config.node_name)
    built = Agent(config)
    if built.debug is not None:
        built.debug.stop(timeout=1.0)  # built, so its socket is bound; never started
    files = set()
    for module in list(sys.modules.values()):
        origin = getattr(getattr(module, "__spec__", None), "origin", None)
        if isinstance(origin, str) and origin.endswith(".py") and os.path.isfile(origin):
            files.add(origin)
    return sorted(files)


def main(env: Mapping[str, str]) -> None:
    print("\n".join(imported_sources(env)))
