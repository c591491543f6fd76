"""The cluster-autoscaler's settings as the agent takes them: its own flags (``run`` and ``explain``), the same
words in NRA_AUTOSCALER_ARGS, its release; the PDB watch's switch and maximum. A bad flag is one line, exit 2; a bad
variable is one line and, for ``run``, the verdict off while the agent runs (issue 39)."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import tarfile
from pathlib import Path

import msgspec
import pytest

from agent.config import ConfigError, from_sources
from agent.model.autoscaler_flags import BOOL, CLUSTER_AUTOSCALER, COMPONENT_BASE, KLOG
from agent.model.autoscaler_settings import (
    AUTOSCALER_FLAGS,
    BOOLEAN,
    COUNT,
    DEFAULT_AUTOSCALER,
    DURATION,
    FLAG_KINDS,
    RATIO,
    AutoscalerArgError,
    AutoscalerSettings,
    parse_autoscaler_args,
    parse_go_duration,
    parse_go_float,
)
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
         DURATION: lambda _: ("1m30s", 90.0), COUNT: lambda _: ("0x10", 16)}


@pytest.mark.parametrize("flag", AUTOSCALER_FLAGS, ids=lambda flag: flag.name)
def test_each_flag_of_the_one_table_is_taken_as_a_flag_and_as_a_word_alike(flag):
    """AUTOSCALER_FLAGS is the one list: each of its flags is a ``run`` flag, a word of NRA_AUTOSCALER_ARGS and a word
    of the args-list parser, and all three give the field it names the same typed value."""
    text, value = OTHER[flag.type](flag.default)
    assert value != flag.default
    as_flag = from_sources({**parsed(f"--{flag.name}={text}"), **BASE}, {}).autoscaler
    as_word = from_sources(BASE, {"NRA_AUTOSCALER_ARGS": f"--{flag.name}={text}"}).autoscaler
    expected = msgspec.structs.replace(DEFAULT_AUTOSCALER, **{flag.field: value})
    assert as_flag == as_word == parse_autoscaler_args([f"--{flag.name}", text] if flag.type.kind != BOOL
                                                       else [f"--{flag.name}={text}"]) == expected


def test_a_bad_release_turns_the_verdict_off_with_one_line_naming_where_it_came_from():
    """Issue 39: a release the agent does not know (the autoscaler upgraded first, a typo) is one line naming the flag
    or the variable, and the verdict off: not a refusal that would crash-loop every node."""
    config = from_sources(BASE, {"NRA_AUTOSCALER_RELEASE": "2.0"})
    assert re.fullmatch(r"NRA_AUTOSCALER_RELEASE: unknown cluster-autoscaler release '2\.0'; supported: [^\n]+",
                        config.verdict_off), config.verdict_off
    assert config.autoscaler == DEFAULT_AUTOSCALER and config.watch_pdbs is False  # nothing would read the PDBs
    assert from_sources(BASE, {"NRA_AUTOSCALER_RELEASE": "1.31"}).verdict_off == ""
    # A flag is typed by a person: told at once, as any bad flag.
    with pytest.raises(ConfigError, match="^--autoscaler-release: unknown cluster-autoscaler release '1.3'"):
        from_sources({**parsed("--autoscaler-release", "1.3"), **BASE}, {"NRA_AUTOSCALER_RELEASE": "1.31"})


def test_the_pdb_watch_switch_and_maximum():
    assert from_sources(BASE, {"NRA_WATCH_PDBS": "false"}).watch_pdbs is False
    assert from_sources({**parsed("--watch-pdbs=false"), **BASE}, {"NRA_WATCH_PDBS": "true"}).watch_pdbs is False
    assert from_sources(BASE, {"NRA_MAX_PDBS": "500"}).max_pdbs == 500
    assert from_sources(BASE, {"NRA_WATCH_PDBS": "maybe"}).verdict_off == \
        "NRA_WATCH_PDBS must be true or false, got 'maybe'"
    with pytest.raises(ConfigError, match="^--max-pdbs must be a positive whole number, got '0'$"):
        from_sources({**parsed("--max-pdbs", "0"), **BASE}, {})


#: A value of each variable only the verdict reads that the agent cannot use, and the words its one line holds.
UNUSABLE_VERDICT_SETTINGS = [
    ({"NRA_AUTOSCALER_ARGS": "--scale-down-utilization-threshold=1.5"},
     ["NRA_AUTOSCALER_ARGS", "--scale-down-utilization-threshold", "outside [0, 1]"]),
    ({"NRA_AUTOSCALER_RELEASE": "2.0"}, ["NRA_AUTOSCALER_RELEASE", "unknown cluster-autoscaler release '2.0'"]),
    ({"NRA_AUTOSCALER_ARGS": "--cloud-provider=aws --scan-interval=soon"},
     ["NRA_AUTOSCALER_ARGS: --scan-interval: 'soon'"]),
    ({"NRA_AUTOSCALER_ARGS": "--balance-similar-node-groups=yes"},
     ["NRA_AUTOSCALER_ARGS", "--balance-similar-node-groups: 'yes' is not a boolean"]),
    ({"NRA_AUTOSCALER_ARGS": "--skip-nodes-with-system-pods=maybe"},
     ["NRA_AUTOSCALER_ARGS", "--skip-nodes-with-system-pods", "not a boolean"]),
    ({"NRA_AUTOSCALER_ARGS": "--scale-down-utilization-threshold='0.6"}, ["NRA_AUTOSCALER_ARGS", "quotation"]),
    ({"NRA_AUTOSCALER_ARGS": "--blocking-system-pod-distruption-timeout=soon"},
     ["--blocking-system-pod-distruption-timeout", "not a Go duration"]),
    ({"NRA_WATCH_PDBS": "yes"}, ["NRA_WATCH_PDBS must be true or false"]),
    ({"NRA_MAX_PDBS": "-5"}, ["NRA_MAX_PDBS must be a positive whole number"]),
]


@pytest.mark.parametrize("env,words", UNUSABLE_VERDICT_SETTINGS)
def test_an_unusable_verdict_variable_is_one_error_line_and_the_agent_runs(env, words):
    """The replayed sample node is still exported (exit 0, its pods' series); the verdict is off (state unknown, no
    threshold) and the log says why in one ERROR line, never a traceback."""
    result = run("run", "--node-name", "sample-node", "--replay", "sample", "--exporter", "table", "--once",
                 env={**env, "HOST_PROC": "off"})
    assert result.returncode == 0, result.stderr
    (error,) = [line for line in result.stderr.splitlines() if " ERROR " in line]
    assert "Traceback" not in result.stderr and "verdict is off" in error, result.stderr
    for word in words:
        assert word in error, (word, error)
    assert "pod_or_vm_cpu_requests{" in result.stdout
    assert 'node_requests_node_autoscaler_state{state="unknown"} 1' in result.stdout
    assert "node_requests_node_autoscaler_threshold" not in result.stdout
    assert "AUTOSCALER  unknown: the verdict is off: " in result.stdout


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
    """``run`` alone (the DaemonSet) with NRA_AUTOSCALER_ARGS: still no argparse, and a bad word still exits 2 where
    the agent cannot run at all (no node name), before the bad word matters."""
    code = ("import sys; from agent.cli import main; rc = main(sys.argv[1:]); "
            "print('exit', rc, 'argparse' in sys.modules, file=sys.stderr)")
    env = {k: v for k, v in os.environ.items() if k != "NODE_NAME"}
    env.update(NRA_AUTOSCALER_ARGS="--scale-down-utilization-threshold=7")
    result = subprocess.run([sys.executable, "-c", code, "run"], capture_output=True, text=True, env=env, timeout=60)
    assert result.stderr.splitlines()[-1] == "exit 2 False", result.stderr
    assert result.stderr.splitlines()[0].startswith("node-requests-agent: the node name is required"), result.stderr


def test_run_help_lists_the_autoscalers_flags_under_their_own_names():
    result = run("run", "--help")
    options = " ".join(result.stdout.split("\nenvironment", 1)[0].split())
    for flag in ("--scale-down-utilization-threshold", "--ignore-daemonsets-utilization",
                 "--skip-nodes-with-custom-controller-pods", "--blocking-system-pod-distruption-timeout",
                 "--autoscaler-release", "--watch-pdbs", "--max-pdbs"):
        assert flag in options, flag
    assert "NRA_AUTOSCALER_ARGS" in result.stdout.split("\nenvironment", 1)[1]


# -- the autoscaler's flag grammar (issue 37) ------------------------------------------------------------------------

#: An autoscaler Deployment's args as an operator pastes them: the AWS auto-discovery example's flags, the kwok run's
#: (KNOWLEDGE.md §6), klog's with an underscore, bare booleans, and the verdict's flags in each form.
PASTED = ["--v=4", "--stderrthreshold=info", "--cloud-provider=aws", "--skip-nodes-with-local-storage=false",
          "--expander=least-waste", "--balance-similar-node-groups",
          "--node-group-auto-discovery=asg:tag=k8s.io/cluster-autoscaler/enabled,k8s.io/cluster-autoscaler/demo",
          "--nodes=1:10:ng-1", "--leader-elect=false", "--scan-interval", "5s", "--scale-down-unneeded-time=20s",
          "--scale-down-delay-after-add=0s", "--max-graceful-termination-sec=10", "--logtostderr",
          "--log_file_max_size=100", "-v", "5", "--feature-gates=DynamicResourceAllocation=false",
          "--ignore-daemonsets-utilization", "--scale-down-utilization-threshold", "0.6",
          "--blocking-system-pod-distruption-timeout=1h30m", "--skip_nodes_with_system_pods=F"]
PASTED_SETTINGS = msgspec.structs.replace(
    DEFAULT_AUTOSCALER, scale_down_utilization_threshold=0.6, ignore_daemonsets_utilization=True,
    skip_nodes_with_local_storage=False, skip_nodes_with_system_pods=False,
    blocking_system_pod_distruption_timeout=5400.0)


def test_a_pasted_args_list_is_read_whole_by_run_and_by_the_variable_alike():
    assert from_sources({**parsed(*PASTED), **BASE}, {}).autoscaler == PASTED_SETTINGS
    assert from_sources(BASE, {"NRA_AUTOSCALER_ARGS": shlex.join(PASTED)}).autoscaler == PASTED_SETTINGS
    assert parse_autoscaler_args(PASTED) == PASTED_SETTINGS


def test_a_pasted_args_list_is_read_whole_by_explain():
    result = run("explain", *PASTED, "sample", "-o", "json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["autoscaler"]["threshold"] == 0.6


def test_the_agents_own_flag_wins_over_the_autoscalers_of_the_same_name():
    """``--namespace`` is the autoscaler's (where it runs) and explain's (which pods to show): explain's wins, as
    docs/configuration.md says; ``run`` has none, so there it is the autoscaler's and ignored."""
    shown = json.loads(run("explain", "--namespace=neon", "sample", "-o", "json").stdout)
    assert shown["pods"] and {p["namespace"] for p in shown["pods"]} == {"neon"}
    assert from_sources({**parsed("--namespace=kube-system"), **BASE}, {}).autoscaler == DEFAULT_AUTOSCALER


@pytest.mark.parametrize("command", ["run", "explain"])
@pytest.mark.parametrize("words,named", [
    (["--cloud-providr=aws"], "unknown flag --cloud-providr (did you mean --cloud-provider?)"),
    (["-ignore-daemonsets-utilization"], "-ignore-daemonsets-utilization: a long flag takes two dashes"),
    (["--ignore-daemonsets-utilization", "false"], "--ignore-daemonsets-utilization alone means true"),
    (["--ignore-daemonsets-utilization=yes"], "--ignore-daemonsets-utilization: 'yes' is not a boolean"),
    (["--balance-similar-node-groups=yes"], "--balance-similar-node-groups: 'yes' is not a boolean"),
    (["--scan-interval=5"], "--scan-interval: '5' is not a Go duration"),
    (["--blocking-system-pod-distruption-timeout", "90"], "--blocking-system-pod-distruption-timeout: '90' is not"),
    (["--max-graceful-termination-sec=ten"], "--max-graceful-termination-sec: 'ten' is not a whole number"),
    (["--scale-down-utilization-threshold=0.5x"], "--scale-down-utilization-threshold: '0.5x' is not a number"),
    (["--scale-down-candidates-pool-ratio=1e400"], "--scale-down-candidates-pool-ratio: '1e400' is out of"),
    (["--nodes"], "--nodes: needs a value"),
    (["-v"], "-v: needs a value"),
    (["---v=4"], "bad flag syntax: ---v=4"),
])
def test_each_bad_form_is_one_line_naming_the_flag(command, words, named):
    result = run(command, "--node-name", "n", *words) if command == "run" else run("explain", "sample", *words)
    assert result.returncode == 2, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr, result.stderr
    assert named in result.stderr, result.stderr


def test_the_variable_reads_what_the_autoscaler_would_accept_as_it_reads_it_with_a_warning():
    """A newer autoscaler's flag, a boolean alone followed by "false" (true to pflag, the word a stray positional
    one) and a stray word: the autoscaler starts with them, so the agent must not stop on every node either."""
    line = ("--cloud-provider=aws --scan-intervl=5s --future-flag value --ignore-daemonsets-utilization false "
            "--scale-down-utilization-threshold=0.6 stray")
    config = from_sources(BASE, {"NRA_AUTOSCALER_ARGS": line})
    assert config.autoscaler.scale_down_utilization_threshold == 0.6
    assert config.autoscaler.ignore_daemonsets_utilization is True
    (warning,) = config.warnings
    assert warning.startswith("NRA_AUTOSCALER_ARGS --scan-intervl: no cluster-autoscaler the agent knows has this "
                              "flag; ignored; --future-flag: no cluster-autoscaler"), warning
    assert "--ignore-daemonsets-utilization alone means true and 'false' after it is not a flag" in warning
    assert "read as true, as the autoscaler reads it" in warning and "'stray' is not a flag; ignored" in warning
    explained = run("explain", "sample", "-o", "json", env={"NRA_AUTOSCALER_ARGS": line})
    assert explained.returncode == 0 and json.loads(explained.stdout), explained.stderr
    assert explained.stderr.strip() == f"node-requests-agent explain: {warning}"


@pytest.mark.parametrize("where", ["flag", "variable"])
def test_feature_gates_are_named_as_not_applied(where):
    """--feature-gates changes which requests the autoscaler counts (PodLevelResources): never silently ignored."""
    gates = "--feature-gates=PodLevelResources=false"
    if where == "flag":
        result = run("explain", "sample", "-o", "json", gates)
    else:
        result = run("explain", "sample", "-o", "json", env={"NRA_AUTOSCALER_ARGS": gates})
    assert result.returncode == 0, result.stderr
    assert "--feature-gates=PodLevelResources=false is not applied: the verdict assumes the release's default " \
           "feature gates" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_run_logs_the_flags_it_does_not_apply():
    config_line = run("run", "--node-name", "n", "--replay", "sample", "--once", "--exporter", "table",
                      "--feature-gates=PodLevelResources=false")
    assert config_line.returncode == 0, config_line.stderr
    assert "--feature-gates=PodLevelResources=false is not applied" in config_line.stderr


# Each case as Go 1.26 answered it (strconv.ParseFloat(s, 64), time.ParseDuration, strconv.ParseBool), run here.
@pytest.mark.parametrize("text,value", [
    ("0.5", 0.5), (".5", 0.5), ("5.", 5.0), ("1E+2", 100.0), ("1_0", 10.0), ("1_000.5", 1000.5), ("0x1p-1", 0.5),
    ("0x_1p0", 1.0), ("-Inf", float("-inf")), ("infinity", float("inf")),
    (" 1", None), ("+nan", None), ("1e400", None), ("0x1", None), ("1e", None), ("0.5_", None), ("١", None)])
def test_numbers_are_read_as_gos_parsefloat_reads_them(text, value):
    if value is None:
        with pytest.raises(ValueError):
            parse_go_float(text)
    else:
        assert parse_go_float(text) == value


@pytest.mark.parametrize("text,nanoseconds", [
    ("1.h", 3600 * 10**9), (".5h", 1800 * 10**9), ("+0", 0), ("-0", 0), ("0", 0), ("0s", 0), ("1h30m", 5400 * 10**9),
    ("300ms", 300 * 10**6), ("1.0000000001s", 10**9), ("0.0000000001s", 0), ("1µs", 1000), ("1μs", 1000),
    ("1us", 1000), ("+1h", 3600 * 10**9), ("-1h", -3600 * 10**9), ("2562047h47m16.854775807s", 2**63 - 1),
    ("1h-2m", None), ("00", None), ("90", None), ("1H", None), ("", None), ("2562048h", None),
    ("2562047h47m16.854775808s", None), ("١h", None)])
def test_durations_are_read_as_gos_parseduration_reads_them(text, nanoseconds):
    if nanoseconds is None:
        with pytest.raises(ValueError, match="not a Go duration"):
            parse_go_duration(text)
    else:
        assert parse_go_duration(text) == nanoseconds / 1e9


@pytest.mark.parametrize("text", ["010", "0x1F", "0o17", "0b101", "1_000", "+5", "-0x10", "0_7"])
def test_whole_numbers_take_gos_base_prefixes(text):
    assert parse_autoscaler_args([f"--max-graceful-termination-sec={text}"]) == DEFAULT_AUTOSCALER


@pytest.mark.parametrize("text", ["08", "_1", "1__0", "9223372036854775808", "1.5"])
def test_whole_numbers_go_refuses_are_refused(text):
    with pytest.raises(AutoscalerArgError, match="^--max-graceful-termination-sec: "):
        parse_autoscaler_args([f"--max-graceful-termination-sec={text}"])


@pytest.mark.parametrize("flag", AUTOSCALER_FLAGS, ids=lambda flag: flag.name)
def test_the_verdicts_flags_have_the_kind_the_autoscaler_gives_them(flag):
    assert FLAG_KINDS[flag.name] == flag.type.kind


# -- the table of the autoscaler's flags, against its source -------------------------------------------------------

_KINDS = {"Bool": "bool", "BoolVar": "bool", "Duration": "duration", "DurationVar": "duration", "Float64": "float",
          "Float64Var": "float", "Int": "int", "IntVar": "int", "Int64": "int", "Int64Var": "int", "Uint": "uint",
          "Uint64": "uint", "Uint64Var": "uint"}
_PLAIN = re.compile(r'\b(?:flag|pflag)\.(Bool|Duration|Float64|Int|Int64|Uint|Uint64|String|StringSlice)\(\s*'
                    r'("[^"]*"|[\w.]+)|\bmultiStringFlag\(\s*("[^"]*")')
_VAR = re.compile(r'\b(?:flag|pflag|fs|commandLine)\.(BoolVar|DurationVar|Float64Var|IntVar|Int64Var|StringVar|'
                  r'Uint64Var|Var|VarP)\(\s*[^,]+,\s*("[^"]*"|[\w.]+)')
_CONST = re.compile(r'^\s*(\w+)\s*=\s*"([^"]*)"', re.M)


def go_flags(*sources: str) -> dict[str, str]:
    """The flags the Go ``sources`` register (flag.X("name", ...), fs.XVar(&v, "name", ...), a name by constant),
    with their kind; a name held in a variable (a helper's parameter) is not one."""
    constants = {k: v for text in sources for k, v in _CONST.findall(text)}
    found = {}
    for text in sources:
        calls = [(m[1] or "String", m[2] or m[3]) for m in _PLAIN.finditer(text)]
        for func, name in [*calls, *((m[1], m[2]) for m in _VAR.finditer(text))]:
            name = name[1:-1] if name.startswith('"') else constants.get(name.rsplit(".", 1)[-1])
            if name is not None:
                found[name] = _KINDS.get(func, "text")
    return found


def _archive(release: str, *paths: str) -> list[str]:
    from components.autoscaler import source_folder

    try:
        archive = source_folder() / f"cluster-autoscaler-{release}.tar.gz"
    except RuntimeError as exc:
        pytest.skip(str(exc))
    with tarfile.open(archive) as tar:
        return [tar.extractfile(f"cluster-autoscaler/{path}").read().decode() for path in paths]  # type: ignore[union-attr]


def _module(module: str, *paths: str) -> list[str]:
    """Files of a Go module at the version the table names, from Go's module cache (filled by the autoscaler's
    build)."""
    cache = Path(os.environ.get("GOMODCACHE") or Path.home() / "go" / "pkg" / "mod") / module
    if not cache.is_dir():
        pytest.skip(f"{module} is not in Go's module cache (components/autoscaler.py's build fills it)")
    return [(cache / path).read_text() for path in paths]


@pytest.mark.autoscaler
def test_the_autoscalers_flags_are_those_its_source_registers():
    """CLUSTER_AUTOSCALER is 1.36.1's flags.go and what 1.31.1's main.go had besides: re-extracted, it must match."""
    newest = go_flags(*_archive("1.36.1", "config/flags/flags.go", "config/const.go"))
    older = go_flags(*_archive("1.31.1", "main.go", "config/const.go"))
    assert len(newest) > 100 and {**older, **newest} == CLUSTER_AUTOSCALER


@pytest.mark.autoscaler
@pytest.mark.parametrize("module,paths,table", [
    ("k8s.io/klog/v2@v2.140.0", ["klog.go"], KLOG),
    ("k8s.io/component-base@v0.36.2", ["config/options/leaderelectionconfig.go", "logs/api/v1/options.go",
                                        "featuregate/feature_gate.go"], COMPONENT_BASE),
], ids=["klog", "component-base"])
def test_the_flags_its_libraries_register_are_those_of_their_source(module, paths, table):
    assert go_flags(*_module(module, *paths)) == table


@pytest.mark.autoscaler
@pytest.mark.parametrize("name", ["1.36.1", "neon"])
def test_every_flag_the_built_autoscaler_lists_is_in_the_table_with_its_kind(name):
    """The binary itself (``--help``: a boolean is listed without a value type) against FLAG_KINDS: every flag it
    takes is known, and a boolean alone there. Its ``ginkgo.*`` flags come from a test library it links; no
    Deployment sets them."""
    from components.autoscaler import autoscaler_bin

    shown = subprocess.run([str(autoscaler_bin(name) / "cluster-autoscaler"), "--help"], capture_output=True,
                           text=True, timeout=60)
    listed = {m[1].replace("_", "-"): m[2] is None
              for m in re.finditer(r"^\s+(?:-\w, )?--([\w.-]+)(?: (\S+))?\s", shown.stdout + shown.stderr, re.M)
              if not m[1].startswith("ginkgo.")}
    assert len(listed) > 100
    assert {flag: FLAG_KINDS[flag] == BOOL for flag in listed if flag in FLAG_KINDS} == listed
