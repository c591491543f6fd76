"""One table of settings (agent.config.SETTINGS): the defaults, the environment, the help and the docs agree with it,
and nothing but config.py reads the environment."""

from __future__ import annotations

import ast
import re

import msgspec
import pytest

from agent.config import (SETTINGS, Address, ClusterAccess, Config, ConfigError, InCluster, cluster_access,
                          from_sources, parse_address)
from testkit.cli import run
from testkit.repo import REPO

PACKAGE = REPO / "agent"
ENVIRONMENT = [name for setting in SETTINGS.values() for name in setting.env]


def test_code_built_and_resolved_configurations_share_their_defaults():
    """Config's field defaults and from_sources' are the table's: one place to change a default."""
    resolved = from_sources({"node_name": "n", "exporter": "none"}, {})
    assert msgspec.structs.replace(resolved, cluster=None) == Config(node_name="n", exporter="none")
    assert resolved.read_timeout == SETTINGS["read_timeout"].default == 120.0
    assert resolved.watch_timeout == SETTINGS["watch_timeout"].default == (300, 600)
    assert (resolved.export_interval, resolved.export_timeout) == (15.0, 10.0)
    assert resolved.debug_address == Address(host="", port=9808)


def test_the_otlp_exporter_always_has_its_settings():
    with pytest.raises(ConfigError, match="OTLP settings"):
        Config(node_name="n", exporter="otlp")
    otlp = from_sources({"node_name": "n"}, {"OTEL_EXPORTER_OTLP_ENDPOINT": "https://c:4318"}).otlp
    assert otlp is not None and otlp.endpoint == "https://c:4318/v1/metrics"


def test_the_kubernetes_version_comes_from_the_flag_or_the_environment():
    base = {"node_name": "n", "exporter": "none"}
    assert str(from_sources(base, {"KUBERNETES_VERSION": "1.36"}).kubernetes_version) == "1.36"
    assert str(from_sources({**base, "kubernetes_version": "1.37"}, {"KUBERNETES_VERSION": "1.36"}).kubernetes_version) == "1.37"
    assert from_sources(base, {"KUBERNETES_VERSION": " "}).kubernetes_version is None
    with pytest.raises(ConfigError, match="^KUBERNETES_VERSION: not a Kubernetes version"):
        from_sources(base, {"KUBERNETES_VERSION": "latest"})


def test_otlp_settings_are_typed_by_their_rows():
    """Each OTLP variable is parsed by its row, as every other setting: the signal-specific one first."""
    base = {"node_name": "n"}
    otlp = from_sources(base, {"OTEL_EXPORTER_OTLP_PROTOCOL": "GRPC", "OTEL_EXPORTER_OTLP_COMPRESSION": "GZip",
                               "OTEL_EXPORTER_OTLP_HEADERS": "Authorization=Bearer%20x",
                               "OTEL_EXPORTER_OTLP_METRICS_INSECURE": "TRUE", "OTEL_EXPORTER_OTLP_INSECURE": "false"}).otlp
    assert otlp is not None
    assert (otlp.protocol, otlp.endpoint, otlp.compression) == ("grpc", "http://localhost:4317", "gzip")
    assert (otlp.headers, otlp.insecure) == ((("authorization", "Bearer x"),), True)


@pytest.mark.parametrize("text,insecure,warned", [("true", True, False), ("False", False, False), ("yes", False, True),
                                                  ("1", False, True)])
def test_an_otlp_boolean_is_true_only_for_true_as_opentelemetry_specifies(text, insecure, warned):
    """OpenTelemetry's rule for boolean variables: "true" in any case is true, anything else false, and a value
    neither true nor false is warned about (once logging is set up) rather than read as false in silence."""
    config = from_sources({"node_name": "n"}, {"OTEL_EXPORTER_OTLP_INSECURE": text})
    assert config.otlp is not None and config.otlp.insecure is insecure
    assert config.warnings == ((f"OTEL_EXPORTER_OTLP_INSECURE is {text!r}, neither true nor false: read as false, "
                                "as OpenTelemetry reads its boolean variables",) if warned else ())


def test_an_otlp_boolean_neither_true_nor_false_is_logged_at_start(http_receiver):
    result = run("run", "--node-name", "n", "--replay", "sample", "--once",
                 env={"OTEL_EXPORTER_OTLP_ENDPOINT": http_receiver.endpoint, "OTEL_EXPORTER_OTLP_INSECURE": "yes"})
    assert result.returncode == 0, result.stderr
    assert "OTEL_EXPORTER_OTLP_INSECURE is 'yes', neither true nor false: read as false" in result.stderr


def test_a_flag_reaches_its_parser_as_given():
    """A switch is True as argparse left it; each item of a repeated flag is parsed on its own (an error quotes
    the item, not a text the command line never held), and the items' names are joined in order."""
    base = {"node_name": "n", "exporter": "none"}
    assert from_sources({**base, "debug_host": [" a ", "b,c"]}, {}).debug_hosts == ("a", "b", "c")
    assert from_sources({**base, "once": True, "replay": "sample"}, {}).once is True


def test_the_debug_address_is_parsed_once():
    base = {"node_name": "n", "exporter": "none"}
    assert from_sources(base, {"DEBUG_ADDRESS": "[::1]:9000"}).debug_address == Address(host="::1", port=9000)
    assert str(parse_address("[::1]:9000")) == "[::1]:9000" and str(parse_address(":0")) == ":0"
    assert from_sources({**base, "once": True, "replay": "sample"}, {}).debug_address is None
    assert from_sources(base, {"DEBUG_ADDRESS": "OFF"}).debug_address is None
    with pytest.raises(ConfigError, match="^DEBUG_ADDRESS must be HOST:PORT, :PORT or off, got '9808'$"):
        from_sources(base, {"DEBUG_ADDRESS": "9808"})
    with pytest.raises(ConfigError, match="^--debug-address must be HOST:PORT"):
        from_sources({**base, "debug_address": "host"}, {"DEBUG_ADDRESS": ":1"})


@pytest.mark.parametrize("flags,env,error", [
    ({"export_interval": "soon"}, {}, "--export-interval must be a number, got 'soon'"),
    ({}, {"OTEL_METRIC_EXPORT_INTERVAL": "0"}, "OTEL_METRIC_EXPORT_INTERVAL must be positive, got '0'"),
    ({}, {"OTEL_METRIC_EXPORT_TIMEOUT": "inf"}, "OTEL_METRIC_EXPORT_TIMEOUT must be positive, got 'inf'"),
    ({"exporter": None}, {"OTEL_METRICS_EXPORTER": "XML"},
     "OTEL_METRICS_EXPORTER must be otlp, console, table or none, got 'xml'"),
    ({"log_level": "loud"}, {"LOG_LEVEL": "debug"}, "--log-level must be DEBUG, INFO, WARNING or ERROR, got 'LOUD'"),
    ({}, {"LOG_FORMAT": "XML"}, "LOG_FORMAT must be text or json, got 'xml'"),
    ({}, {"DEBUG_VIEWS": "everyone"}, "DEBUG_VIEWS must be local or any, got 'everyone'"),
    ({"debug_host": ["a", "http://x/"]}, {}, "--debug-host takes host names, got 'http://x/'"),  # the item given
    ({"exporter": "otlp"}, {"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"},
     "OTEL_EXPORTER_OTLP_PROTOCOL must be http/protobuf or grpc, got 'http/json'"),
    ({"exporter": "otlp"}, {"OTEL_EXPORTER_OTLP_METRICS_COMPRESSION": "zstd", "OTEL_EXPORTER_OTLP_COMPRESSION": "gzip"},
     "OTEL_EXPORTER_OTLP_METRICS_COMPRESSION must be gzip or none, got 'zstd'"),
    ({"exporter": "otlp"}, {"OTEL_EXPORTER_OTLP_ENDPOINT": "ftp://c"},
     "OTEL_EXPORTER_OTLP_ENDPOINT must be an http:// or https:// URL, got 'ftp://c'"),
    ({"exporter": "otlp"}, {"OTEL_EXPORTER_OTLP_HEADERS": "a=b,broken"}, "OTEL_EXPORTER_OTLP_HEADERS entry 'broken'"),
    ({}, {"OTEL_RESOURCE_ATTRIBUTES": "a=b,broken"}, "OTEL_RESOURCE_ATTRIBUTES entry 'broken' is not key=value"),
    ({"kubernetes_version": "latest"}, {}, "--kubernetes-version: not a Kubernetes version"),
])
def test_a_bad_value_is_one_line_naming_the_flag_or_variable_it_came_from(flags, env, error):
    with pytest.raises(ConfigError) as caught:
        from_sources({"node_name": "n", "exporter": "none", **flags}, env)
    assert str(caught.value).startswith(error) and "\n" not in str(caught.value), str(caught.value)


def test_a_flags_bad_value_is_one_line_and_exit_2():
    """argparse only collects a flag's text; the setting's parser refuses it, in the same one line as a variable's."""
    result = run("run", "--node-name", "n", "--export-interval", "soon")
    assert (result.returncode, result.stderr) == (2, "node-requests-agent: --export-interval must be a number, "
                                                     "got 'soon'\n")


def test_cluster_access_is_resolved_from_flags_and_environment(tmp_path):
    pod = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443", "KUBECONFIG": "/k/a"}
    assert cluster_access(None, None, pod).in_cluster == InCluster(
        host="10.96.0.1", port="443", serviceaccount_dir=SETTINGS["serviceaccount_dir"].default)
    assert cluster_access(None, None, {**pod, "NRA_SERVICEACCOUNT_DIR": str(tmp_path)}).in_cluster.serviceaccount_dir \
        == str(tmp_path)
    # A flag decides against the service account; KUBECONFIG still names the files when --kubeconfig does not.
    assert cluster_access("/k/flag", None, pod) == ClusterAccess(kubeconfig="/k/flag")
    assert cluster_access(None, "ctx", pod) == ClusterAccess(kubeconfig="/k/a", context="ctx")
    outside = cluster_access(None, None, {"KUBECONFIG": "/k/a:/k/b"})
    assert outside.in_cluster is None
    assert outside.described() == "kubeconfig /k/a, /k/b (in-cluster skipped: KUBERNETES_SERVICE_HOST is not set)"
    assert from_sources({"node_name": "n", "exporter": "none", "replay": "sample"}, pod).cluster is None


def test_malloc_arena_max_set_leaves_the_arenas_to_glibc():
    base = {"node_name": "n", "exporter": "none"}
    assert from_sources(base, {}).malloc_arenas == 2
    assert from_sources(base, {"MALLOC_ARENA_MAX": "4"}).malloc_arenas is None


def test_only_config_and_cli_read_the_environment():
    """Everything else gets its settings handed down, resolved, from the Config."""
    readers = {}
    for path in PACKAGE.rglob("*.py"):
        if path.relative_to(PACKAGE).as_posix() in ("config.py", "cli.py"):
            continue
        found = re.findall(r"\bos\.environ\b|\bgetenv\b|\bos\.environb\b|\bfrom os import environ\b", path.read_text())
        if found:
            readers[path.relative_to(PACKAGE).as_posix()] = found
    assert not readers, readers


def test_config_reads_variables_only_through_the_table():
    """A variable named in code rather than in SETTINGS would be missing from the help and the docs."""
    tree = ast.parse((PACKAGE / "config.py").read_text())
    named = [node.args[0].value for node in ast.walk(tree)
             if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
             and isinstance(node.func.value, ast.Name) and node.func.value.id == "env"
             and node.args and isinstance(node.args[0], ast.Constant)]
    assert not named, f"config.py reads {named} outside SETTINGS"


def test_run_help_lists_every_environment_variable_with_its_flag():
    result = run("run", "--help")
    assert result.returncode == 0, result.stderr
    options, environment = result.stdout.split("\nenvironment", 1)
    listed = set(re.findall(r"\b[A-Z][A-Z0-9_]{2,}\b", environment))
    assert set(ENVIRONMENT) <= listed, set(ENVIRONMENT) - listed
    options = " ".join(options.split())  # argparse wraps the help where it likes
    for setting in SETTINGS.values():
        if setting.flag and setting.env:
            assert re.search(rf"^  {setting.env[0]}( \(ms\))? \({setting.flag}\)$", environment, re.MULTILINE)
            assert f"env {setting.env[0]}" in options


def _docs_rows() -> list[list[str]]:
    lines = (REPO / "docs" / "configuration.md").read_text().splitlines()
    start = lines.index("| flag | environment | default | meaning |")
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip().strip("|"))])
    return rows


def test_the_configuration_docs_list_every_setting_as_the_table_has_it():
    documented = {}
    for flag_cell, env_cell, default_cell, _ in _docs_rows():
        flag = next(iter(re.findall(r"`(--[a-z-]+)", flag_cell)), None)
        env = tuple(re.findall(r"`([A-Z][A-Z0-9_]+)`", env_cell))
        documented[(flag, env)] = default_cell.replace("`", "")
    expected = {(s.flag, s.env): "(required)" if s.required else s.shown
                for s in SETTINGS.values() if s.flag or s.env}
    assert documented == expected
