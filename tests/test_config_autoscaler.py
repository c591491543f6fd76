"""The cluster-autoscaler's settings as the agent takes them: its own flags (``run`` and ``explain``), the same
words in NRA_AUTOSCALER_ARGS, its release; the PDB watch's switch and maximum. A bad value is one line, exit 2."""

from __future__ import annotations

import os
import subprocess
import sys

import msgspec
import pytest

from agent.config import ConfigError, from_sources
from agent.model.autoscaler_settings import (AUTOSCALER_FLAGS, BOOLEAN, DEFAULT_AUTOSCALER, DURATION, RATIO,
                                             AutoscalerSettings, parse_autoscaler_args)
from testkit.cli import run
from testkit.factory import pod

BASE = {"node_name": "n", "exporter": "none"}


def parsed(*argv: str) -> dict[str, object]:
    from agent.cli import build_parser

    return {k: v for k, v in vars(build_parser().parse_args(["run", *argv])).items() if k != "command"}


def test_nothing_given_is_the_autoscalers_defaults_and_the_pdb_watch_on():
    config = from_sources(BASE, {})
    assert config.autoscaler == DEFAULT_AUTOSCALER and config.watch_pdbs is True and config.max_pdbs == 10000


def test_the_args_line_of_the_autoscalers_deployment_is_read_as_it_is_written():
    line = ("--cloud-provider=aws --nodes=1:10:workers --scale-down-utilization-threshold=0.6 "
            "--ignore-daemonsets-utilization=true --skip-nodes-with-local-storage=false "
            "--blocking-system-pod-distruption-timeout=30m --v=4")
    config = from_sources(BASE, {"NRA_AUTOSCALER_ARGS": line, "NRA_AUTOSCALER_RELEASE": "1.31"})
    assert config.autoscaler == AutoscalerSettings(
        release="1.31", scale_down_utilization_threshold=0.6, ignore_daemonsets_utilization=True,
        skip_nodes_with_local_storage=False, blocking_system_pod_distruption_timeout=1800.0)


def test_a_flag_wins_over_the_same_word_in_the_variable_and_a_bare_boolean_is_true():
    env = {"NRA_AUTOSCALER_ARGS": "--scale-down-utilization-threshold=0.6 --skip-nodes-with-system-pods=true"}
    flags = parsed("--scale-down-utilization-threshold=0.7", "--skip-nodes-with-system-pods=false",
                   "--ignore-mirror-pods-utilization", "--autoscaler-release", "neon")
    settings = from_sources({**flags, **BASE}, env).autoscaler
    assert settings.scale_down_utilization_threshold == 0.7 and settings.skip_nodes_with_system_pods is False
    assert settings.ignore_mirror_pods_utilization is True and settings.release == "neon"


# A value other than the default, as an operator writes it, and what it means, for each type of the table.
OTHER = {BOOLEAN: lambda default: ("false", False) if default else ("true", True), RATIO: lambda _: ("0.25", 0.25),
         DURATION: lambda _: ("1m30s", 90.0)}


@pytest.mark.parametrize("flag", AUTOSCALER_FLAGS, ids=lambda flag: flag.name)
def test_each_flag_of_the_one_table_is_taken_as_a_flag_and_as_a_word_alike(flag):
    """AUTOSCALER_FLAGS is the one list: each of its flags is a ``run`` flag, a word of NRA_AUTOSCALER_ARGS and a word
    of the args-list parser, and all three give the field it names the same typed value."""
    text, value = OTHER[flag.type](flag.default)
    assert value != flag.default
    as_flag = from_sources({**parsed(f"--{flag.name}={text}"), **BASE}, {}).autoscaler
    as_word = from_sources(BASE, {"NRA_AUTOSCALER_ARGS": f"--{flag.name}={text}"}).autoscaler
    expected = msgspec.structs.replace(DEFAULT_AUTOSCALER, **{flag.field: value})
    assert as_flag == as_word == parse_autoscaler_args([f"--{flag.name}", text] if flag.type.bare is None
                                                       else [f"--{flag.name}={text}"]) == expected


def test_a_bad_release_names_where_it_came_from():
    """The release's error named neither the flag nor the variable ("release: unknown ..."), unlike every other."""
    with pytest.raises(ConfigError, match="^NRA_AUTOSCALER_RELEASE: unknown cluster-autoscaler release '2.0'"):
        from_sources(BASE, {"NRA_AUTOSCALER_RELEASE": "2.0"})
    with pytest.raises(ConfigError, match="^--autoscaler-release: unknown cluster-autoscaler release '1.3'"):
        from_sources({**parsed("--autoscaler-release", "1.3"), **BASE}, {"NRA_AUTOSCALER_RELEASE": "1.31"})


def test_the_pdb_watch_switch_and_maximum():
    assert from_sources(BASE, {"NRA_WATCH_PDBS": "false"}).watch_pdbs is False
    assert from_sources({**parsed("--watch-pdbs=false"), **BASE}, {"NRA_WATCH_PDBS": "true"}).watch_pdbs is False
    assert from_sources(BASE, {"NRA_MAX_PDBS": "500"}).max_pdbs == 500
    with pytest.raises(ConfigError, match="^NRA_WATCH_PDBS must be true or false, got 'maybe'$"):
        from_sources(BASE, {"NRA_WATCH_PDBS": "maybe"})
    with pytest.raises(ConfigError, match="^--max-pdbs must be a positive whole number, got '0'$"):
        from_sources({**parsed("--max-pdbs", "0"), **BASE}, {})


@pytest.mark.parametrize("args,env,words", [
    ([], {"NRA_AUTOSCALER_ARGS": "--scale-down-utilization-threshold=1.5"},
     ["NRA_AUTOSCALER_ARGS", "--scale-down-utilization-threshold", "outside [0, 1]"]),
    (["--scale-down-utilization-threshold=-0.1"], {}, ["--scale-down-utilization-threshold", "outside [0, 1]"]),
    ([], {"NRA_AUTOSCALER_RELEASE": "2.0"}, ["unknown cluster-autoscaler release '2.0'"]),
    (["--autoscaler-release", "1.3"], {}, ["unknown cluster-autoscaler release '1.3'"]),
    ([], {"NRA_AUTOSCALER_ARGS": "--skip-nodes-with-system-pods=maybe"},
     ["NRA_AUTOSCALER_ARGS", "--skip-nodes-with-system-pods", "not a boolean"]),
    ([], {"NRA_AUTOSCALER_ARGS": "--scale-down-utilization-threshold='0.6"}, ["NRA_AUTOSCALER_ARGS", "quotation"]),
    ([], {"NRA_AUTOSCALER_ARGS": "--blocking-system-pod-distruption-timeout=soon"},
     ["--blocking-system-pod-distruption-timeout", "not a Go duration"]),
    ([], {"NRA_WATCH_PDBS": "yes"}, ["NRA_WATCH_PDBS must be true or false"]),
    ([], {"NRA_MAX_PDBS": "-5"}, ["NRA_MAX_PDBS must be a positive whole number"]),
])
def test_a_bad_value_is_one_line_and_exit_2(args, env, words):
    result = run("run", "--node-name", "n", *args, env=env)
    assert result.returncode == 2, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    for word in words:
        assert word in result.stderr, (word, result.stderr)


def test_explain_takes_the_same_settings_and_refuses_the_same_bad_values():
    dump = '{"kind": "List", "items": [' + __import__("json").dumps(pod("web")) + "]}"
    good = run("explain", "--scale-down-utilization-threshold=0.6", "--autoscaler-release=1.31", input=dump)
    assert good.returncode == 0, good.stderr
    bad = run("explain", "--scale-down-utilization-threshold=2", input=dump)
    assert bad.returncode == 2 and "outside [0, 1]" in bad.stderr and "Traceback" not in bad.stderr
    from_env = run("explain", input=dump, env={"NRA_AUTOSCALER_RELEASE": "9.9"})
    assert from_env.returncode == 2 and "unknown cluster-autoscaler release" in from_env.stderr
    assert len(from_env.stderr.strip().splitlines()) == 1, from_env.stderr


def test_the_daemonsets_way_reads_the_autoscaler_from_the_environment_without_a_parser():
    """``run`` alone (the DaemonSet) with NRA_AUTOSCALER_ARGS: still no argparse, and a bad word still exits 2."""
    code = ("import sys; from agent.cli import main; rc = main(sys.argv[1:]); "
            "print('exit', rc, 'argparse' in sys.modules, file=sys.stderr)")
    env = {k: v for k, v in os.environ.items() if k != "NODE_NAME"}
    env.update(NODE_NAME="n", NRA_AUTOSCALER_ARGS="--scale-down-utilization-threshold=7")
    result = subprocess.run([sys.executable, "-c", code, "run"], capture_output=True, text=True, env=env, timeout=60)
    assert result.stderr.splitlines()[-1] == "exit 2 False", result.stderr
    assert "NRA_AUTOSCALER_ARGS: --scale-down-utilization-threshold" in result.stderr


def test_run_help_lists_the_autoscalers_flags_under_their_own_names():
    result = run("run", "--help")
    options = " ".join(result.stdout.split("\nenvironment", 1)[0].split())
    for flag in ("--scale-down-utilization-threshold", "--ignore-daemonsets-utilization",
                 "--skip-nodes-with-custom-controller-pods", "--blocking-system-pod-distruption-timeout",
                 "--autoscaler-release", "--watch-pdbs", "--max-pdbs"):
        assert flag in options, flag
    assert "NRA_AUTOSCALER_ARGS" in result.stdout.split("\nenvironment", 1)[1]
