"""The container image as the Dockerfile defines it, and the process a container of it runs.

One reading of the Dockerfile for every test that needs one: tests/deploy/test_deploy.py reproduces the build from its
stages, testkit/kubelet.py starts the agent's container from its ENTRYPOINT, CMD and ENV.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable, Mapping
from typing import NamedTuple

__all__ = ["Instruction", "container_argv", "dockerfile_stages", "exec_form", "expand", "image_entrypoint_and_cmd",
           "image_env"]


class Instruction(NamedTuple):
    op: str
    arg: str


def dockerfile_stages(text: str) -> list[list[Instruction]]:
    """Instructions per stage, each starting with its FROM: continuations joined, comment and blank lines dropped
    (as Docker does, also inside a continuation), global ARG defaults substituted into FROM."""
    lines, current = [], ""
    for raw in text.splitlines():
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            current += stripped[:-1] + " "
            continue
        lines.append(current + stripped)
        current = ""
    global_args: dict[str, str] = {}
    stages: list[list[Instruction]] = []
    for line in lines:
        op, _, arg = line.partition(" ")
        op, arg = op.upper(), arg.strip()
        if op == "ARG" and not stages:
            name, _, default = arg.partition("=")
            global_args[name] = default
            continue
        if op == "FROM":
            arg = re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: global_args[m.group(1) or m.group(2)], arg)
            stages.append([])
        stages[-1].append(Instruction(op, arg))
    return stages


def exec_form(arg: str) -> list[str]:
    """Exec form (a JSON array) as is; shell form runs under /bin/sh -c, as Docker documents."""
    return json.loads(arg) if arg.startswith("[") else ["/bin/sh", "-c", arg]


def image_entrypoint_and_cmd(stage: list[Instruction]) -> tuple[list[str], list[str]]:
    """The image's ENTRYPOINT and CMD: the last of each wins, and an ENTRYPOINT set in the stage resets the CMD
    inherited from the base image (Docker's documented rule), so CMD is only what the stage itself sets."""
    entrypoint = cmd = None
    for op, arg in stage:
        if op == "ENTRYPOINT":
            entrypoint = exec_form(arg)
        elif op == "CMD":
            cmd = exec_form(arg)
    if entrypoint is None:
        raise ValueError("the final stage sets no ENTRYPOINT, so the base image's would run (not known here)")
    return entrypoint, cmd or []


def image_env(stage: list[Instruction], base: Mapping[str, str],
              transform: Callable[[str], str] = lambda value: value) -> dict[str, str]:
    """``base`` (the base image's environment) updated by the stage's ENV instructions in order, ``$VAR`` and
    ``${VAR}`` substituted from what is set so far; ``transform`` maps each value first (a test moving paths)."""
    env = dict(base)
    for op, arg in stage:
        if op != "ENV":
            continue
        for item in shlex.split(arg):
            key, sep, value = item.partition("=")
            if not sep:
                raise ValueError(f"ENV in the legacy 'KEY value' form is not read here: {arg}")
            env[key] = re.sub(r"\$\{?(\w+)\}?", lambda m: env.get(m.group(1), ""), transform(value))
    return env


def expand(text: str, variables: Mapping[str, str]) -> str:
    """Kubernetes' ``$(VAR)`` expansion (third_party/forked/golang/expansion): ``$$`` is a literal ``$``, an
    undefined or unterminated reference stays as written."""
    out: list[str] = []
    i = 0
    while i < len(text):
        if text[i] != "$" or i + 1 == len(text):
            out.append(text[i])
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "$":
            out.append("$")
            i += 2
        elif nxt == "(" and (close := text.find(")", i + 2)) >= 0:
            name = text[i + 2:close]
            out.append(variables.get(name, f"$({name})"))
            i = close + 1
        else:
            out.append("$" + nxt)
            i += 2
    return "".join(out)


def container_argv(entrypoint: list[str], cmd: list[str], container: Mapping,
                   variables: Mapping[str, str] | None = None) -> list[str]:
    """The process a container runtime starts (containerd's CRI ``WithProcessArgs``, moby's rule).

    ``command`` replaces ENTRYPOINT and CMD (``args`` follow it); ``args`` alone replace CMD and keep ENTRYPOINT;
    neither keeps both. An empty list counts as absent. ``$(VAR)`` references are expanded from ``variables`` first
    (kubelet's ExpandContainerCommandAndArgs); without ``variables`` they stay as written.
    """
    variables = variables or {}
    command = [expand(c, variables) for c in container.get("command") or ()]
    args = [expand(a, variables) for a in container.get("args") or ()]
    if command:
        return [*command, *args]
    if not entrypoint and not (args or cmd):
        raise ValueError("no command specified")
    return [*entrypoint, *(args or cmd)]
