"""The agent's configuration: one table of settings, resolved once from flags, then environment, then defaults.

SETTINGS is the one place where a setting's flag, environment variables, type (its parser), default and meaning
are written: Config's field defaults, the look-ups of ``from_sources``, the ``run`` flags and their help, ``run
--help``'s list of environment variables, and docs/configuration.md's table (a test compares) all come from it; the
cluster-autoscaler's own flags come into it from their one table, model.autoscaler_settings.AUTOSCALER_FLAGS.
A flag reaches ``from_sources`` as argparse left it (its text; True for a switch; a repeated flag's list of texts), a
variable as the environment holds it; the row's parser makes each text the typed value once, and that value is set on
Config (or AutoscalerSettings, OtlpSettings) as it is.
``from_sources`` is the agent's only reader of the environment (cli.py hands it ``os.environ``), so nothing below
it reads a variable or parses a setting again.

Invalid configuration raises ConfigError; the CLI turns it into one line on stderr and exit code 2, before anything
starts. The exception: a setting only the autoscaler's verdict reads (VERDICT_SETTINGS) turns the verdict off with
that line (Config.verdict_off), and the agent runs.
"""

from __future__ import annotations

import math
import os
import urllib.parse
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar

import msgspec

from agent.model.autoscaler_flags import BOOL
from agent.model.autoscaler_settings import (
    AUTOSCALER_FLAGS,
    DEFAULT_AUTOSCALER,
    AutoscalerFlag,
    AutoscalerSettings,
    parse_autoscaler_args,
    parse_release,
)
from agent.model.rules import NEWEST, KubernetesVersion, parse_version

__all__ = ["Address", "ClusterAccess", "Config", "ConfigError", "DEBUG_VIEWS", "EXPORTERS", "InCluster", "LOG_FORMATS",
           "OTLP_PROTOCOLS", "OtlpSettings", "SETTINGS", "Setting", "VIEWS_LOCAL", "VIEWS_ANY", "AUTOSCALER_FIELDS",
           "VERDICT_SETTINGS",
           "autoscaler_settings", "cluster_access", "from_sources", "kubernetes_version", "otlp_settings",
           "parse_address"]

T = TypeVar("T")

EXPORTERS = ("otlp", "console", "table", "none")
# Who may read the debug views (pods, node, runtime, /metrics, the page): "local", loopback peers only (kubectl
# port-forward arrives there), or "any". The probes answer every peer either way.
VIEWS_LOCAL, VIEWS_ANY = "local", "any"
DEBUG_VIEWS = (VIEWS_LOCAL, VIEWS_ANY)
OTLP_PROTOCOLS = ("http/protobuf", "grpc")
OTLP_COMPRESSIONS = ("gzip", "none")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
LOG_FORMATS = ("text", "json")


class ConfigError(ValueError):
    """Configuration the agent cannot start with."""


class Address(msgspec.Struct, frozen=True, kw_only=True):
    """A parsed ``HOST:PORT``; host "" is every interface, IPv6 and IPv4."""

    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


class _Refused(ValueError):
    """A value's fault worded to follow the setting's name: ``must be positive, got '0'``."""


class _FellBack(_Refused):
    """A value read as its setting's documented fallback rather than refused: ``value``, with a warning (the message,
    worded as ``_Refused``'s) that ``run`` logs once logging is set up."""

    def __init__(self, message: str, value: object) -> None:
        super().__init__(message)
        self.value = value


def _either(values: tuple[str, ...]) -> str:
    return f"{', '.join(values[:-1])} or {values[-1]}"


def _one_of(values: tuple[str, ...], case: Callable[[str], str] = str.lower) -> Callable[[str], str]:
    """The parser of a setting that is one of ``values``, in any case (``case`` folds it)."""
    def parse(text: str) -> str:
        if (folded := case(text)) not in values:
            raise _Refused(f"must be {_either(values)}, got {folded!r}")
        return folded
    return parse


def _seconds(text: str, per_second: float = 1.0) -> float:
    try:
        seconds = float(text) / per_second
    except ValueError:
        raise _Refused(f"must be a number, got {text!r}") from None
    if not math.isfinite(seconds) or seconds <= 0:
        raise _Refused(f"must be positive, got {text!r}")
    return seconds


def _milliseconds(text: str) -> float:
    """Seconds from milliseconds, OpenTelemetry's unit for its interval and timeout variables."""
    return _seconds(text, per_second=1000)


def _true_or_false(text: str) -> bool:
    if (folded := text.lower()) not in ("true", "false"):
        raise _Refused(f"must be true or false, got {text!r}")
    return folded == "true"


def _otel_boolean(text: str) -> bool:
    """OpenTelemetry's boolean variable: "true" in any case is true and anything else false, as its specification says
    (and the SDK reads OTEL_EXPORTER_OTLP_INSECURE); a value neither true nor false is warned about, as it asks."""
    if (folded := text.lower()) not in ("true", "false"):
        raise _FellBack(f"is {text!r}, neither true nor false: read as false, as OpenTelemetry reads its boolean "
                        "variables", False)
    return folded == "true"


def _http_url(text: str) -> str:
    """An OTLP endpoint: an http:// or https:// URL (a bare ``host:port`` is http://)."""
    parsed = urllib.parse.urlsplit(text if "://" in text else f"http://{text}")
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise _Refused(f"must be an http:// or https:// URL, got {text!r}")
    return urllib.parse.urlunsplit(parsed)


def _headers(text: str) -> tuple[tuple[str, str], ...]:
    """OTLP headers: ``key=value`` pairs as OTEL_RESOURCE_ATTRIBUTES', keys in lower case (HTTP's are case-blind)."""
    try:
        return _pairs(text, "entry", lower_keys=True)
    except ValueError as exc:
        raise _Refused(str(exc)) from None


def _positive_count(text: str) -> int:
    try:
        number = int(text)
    except ValueError:
        number = -1
    if number < 1:
        raise _Refused(f"must be a positive whole number, got {text!r}")
    return number


def _off_or(parse: Callable[[str], T], *off: str) -> Callable[[str], T | None]:
    """A setting one of whose words ``off`` (in any case) turns its feature off: None."""
    return lambda text: None if text.lower() in off else parse(text)


def _address(text: str) -> Address:
    try:
        return parse_address(text)
    except ValueError:
        raise _Refused(f"must be HOST:PORT, :PORT or off, got {text!r}") from None


def _host_names(text: str) -> tuple[str, ...]:
    names = tuple(h.strip() for h in text.split(",") if h.strip())
    if any(c in h for h in names for c in "/ @"):
        raise _Refused(f"takes host names, got {text!r}")
    return names


def _attributes(text: str) -> tuple[tuple[str, str], ...]:
    try:
        return _pairs(text, "entry")
    except ValueError as exc:
        raise _Refused(str(exc)) from None


def _autoscaler_args(text: str) -> AutoscalerSettings:
    """The autoscaler's args line, shell-quoted as in its Deployment, read leniently: what the autoscaler itself
    would accept (a flag of a newer autoscaler, a boolean alone followed by ``false``, a stray word) is read as it
    reads it, with a warning, not refused: the args are pasted from a Deployment the agent does not control, and
    refusing would stop the agent on every node."""
    import shlex

    notes: list[str] = []
    settings = parse_autoscaler_args(shlex.split(text), notes=notes)  # unbalanced quote: shlex's ValueError
    if notes:
        raise _FellBack("; ".join(notes[:5]) + (f"; and {len(notes) - 5} more" if len(notes) > 5 else ""), settings)
    return settings


class Setting(msgspec.Struct, Generic[T], frozen=True, kw_only=True):
    """One setting: its flag, the environment variables it is read from, its type, default and what it means.

    A flag wins over its variable, the signal-specific OTLP variable (listed first) over the generic one; an
    empty value counts as not given (as OpenTelemetry specifies for its variables). Flag and variable alike arrive as
    text and ``parse`` makes it the typed value, once; its ValueError is the setting's one-line error.
    """

    default: T
    help: str
    parse: Callable[[str], T] = str  # type: ignore[assignment]  # the text as it is: a str setting's parser
    flag: str | None = None
    env: tuple[str, ...] = ()
    shown: str = ""  # the default as a person reads it ("15 s"); "" when there is nothing to show
    required: bool = False
    millis: bool = False  # the variable is in milliseconds, the flag in seconds (OpenTelemetry's convention)
    # The flag's form: "value", "switch" (no value: given, it is True) or "repeated" (the flag repeats, each item
    # parsed on its own and the tuples joined; the variable is comma-separated).
    kind: str = "value"
    metavar: str | None = None
    explain_shown: str = ""  # ``explain``'s default where it is not ``run``'s (``shown``)
    choices: tuple[str, ...] | None = None  # listed by ``--help`` and checked by the parser before ``parse`` runs

    @property
    def dest(self) -> str:
        """The flag's name in the parsed arguments (argparse's ``dest``)."""
        return (self.flag or "").lstrip("-").replace("-", "_")

    def parser_for(self, source: str) -> Callable[[str], T]:
        """``parse``, but for a variable in milliseconds its own (``source`` is the flag or a variable)."""
        return _milliseconds if self.millis and source != self.flag else self.parse  # type: ignore[return-value]  # millis: T is float


def _autoscaler_flag(flag: AutoscalerFlag) -> Setting:
    """One of the autoscaler's own flags as a setting: everything but its name's dashes comes from its table row."""
    alone = "; alone it means true, a value follows = (as in the autoscaler)" if flag.type.kind == BOOL else ""
    return Setting(default=flag.default, flag="--" + flag.name, parse=flag.type.parse, metavar=flag.type.metavar,
                   shown=flag.type.show(flag.default), help=flag.help + alone)


# The one table. Keys are Config's fields where a setting has one; the OTLP and cluster-access settings resolve into
# their own records. The order is the order of ``run --help`` and of docs/configuration.md.
SETTINGS: dict[str, Setting[Any]] = {
    "node_name": Setting(
        default="", required=True, flag="--node-name", env=("NODE_NAME",),
        help="the node to watch; the DaemonSet sets it from spec.nodeName"),
    "kubeconfig": Setting(
        default="~/.kube/config", flag="--kubeconfig", env=("KUBECONFIG",), shown="in-cluster, else ~/.kube/config",
        help="kubeconfig file, or files separated as in KUBECONFIG; inside a pod the agent uses its service account "
             "unless --kubeconfig or --context is given"),
    "context": Setting(default=None, flag="--context", shown="current context", help="kubeconfig context to use"),
    "kubernetes_service": Setting(
        default=None, env=("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"),
        help="set by Kubernetes in every pod: the API server's Service, reached with the service account's token "
             "and CA"),
    "serviceaccount_dir": Setting(
        default="/var/run/secrets/kubernetes.io/serviceaccount", env=("NRA_SERVICEACCOUNT_DIR",),
        shown="/var/run/secrets/kubernetes.io/serviceaccount",
        help="in-cluster: the folder holding token and ca.crt (the token is re-read when it changes on disk, "
             "at least every minute, and after a 401)"),
    "replay": Setting(
        default=None, flag="--replay", metavar="FILE",
        help="replay a capture (pod list + watch events) instead of watching a cluster; 'sample' is the bundled "
             "sample node"),
    "once": Setting(default=False, flag="--once", kind="switch", parse=_true_or_false,
                    help="with --replay: export once after the capture is handled, then exit"),
    "exporter": Setting(
        default="otlp", flag="--exporter", env=("OTEL_METRICS_EXPORTER",), choices=EXPORTERS, parse=_one_of(EXPORTERS),
        shown="otlp",
        help="metric exporter: otlp; console, the OTLP request as JSON; table, the same as compact text; none"),
    "otlp_protocol": Setting(
        default="http/protobuf", env=("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"),
        parse=_one_of(OTLP_PROTOCOLS), shown="http/protobuf", help="the OTLP protocol: http/protobuf or grpc"),
    "otlp_endpoint": Setting(
        default={"http/protobuf": "http://localhost:4318", "grpc": "http://localhost:4317"},
        env=("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"), parse=_http_url,
        shown="http://localhost:4318 (gRPC: :4317)",
        help="the Collector's URL; the generic variable gets /v1/metrics appended for HTTP"),
    "otlp_headers": Setting(
        default=(), env=("OTEL_EXPORTER_OTLP_METRICS_HEADERS", "OTEL_EXPORTER_OTLP_HEADERS"), parse=_headers,
        help="key=value pairs, comma-separated and URL-encoded, sent with every export"),
    "otlp_compression": Setting(
        default="none", env=("OTEL_EXPORTER_OTLP_METRICS_COMPRESSION", "OTEL_EXPORTER_OTLP_COMPRESSION"),
        parse=_one_of(OTLP_COMPRESSIONS), shown="none", help="gzip or none"),
    "otlp_certificate": Setting(
        default=None, env=("OTEL_EXPORTER_OTLP_METRICS_CERTIFICATE", "OTEL_EXPORTER_OTLP_CERTIFICATE"),
        shown="the default CAs", help="the CA file the Collector's certificate is checked against"),
    "otlp_client_certificate": Setting(
        default=None,
        env=("OTEL_EXPORTER_OTLP_METRICS_CLIENT_CERTIFICATE", "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE"),
        help="the agent's certificate for mutual TLS"),
    "otlp_client_key": Setting(
        default=None, env=("OTEL_EXPORTER_OTLP_METRICS_CLIENT_KEY", "OTEL_EXPORTER_OTLP_CLIENT_KEY"),
        help="the key of that certificate"),
    "otlp_insecure": Setting(
        default=None, env=("OTEL_EXPORTER_OTLP_METRICS_INSECURE", "OTEL_EXPORTER_OTLP_INSECURE"),
        parse=_otel_boolean, shown="by the endpoint's scheme",
        help="gRPC: true sends without TLS; as OpenTelemetry reads a boolean, a value other than true is false, "
             "and one neither true nor false is also logged as a warning"),
    "otlp_token_file": Setting(
        default=None, env=("NRA_OTLP_TOKEN_FILE",),
        help="a file holding the bearer token shown to the Collector, re-read when it changes"),
    "resource_attributes": Setting(
        default=(), env=("OTEL_RESOURCE_ATTRIBUTES",), parse=_attributes,
        help="key=value pairs added to the resource of every point (the agent's own attributes win)"),
    # Not the SDK's own defaults (OTEL_METRIC_EXPORT_INTERVAL 60 s, _TIMEOUT 30 s): a pod's new value should reach
    # the Collector within one common scrape interval, 15 s, and the shipped Collector forgets a series after 45 s,
    # three intervals. An export that takes longer than 10 s is given up well before the next one is due.
    "export_interval": Setting(
        default=15.0, flag="--export-interval", env=("OTEL_METRIC_EXPORT_INTERVAL",), millis=True, parse=_seconds,
        metavar="SECONDS", shown="15 s", help="seconds between exports"),
    "export_timeout": Setting(
        default=10.0, flag="--export-timeout", env=("OTEL_METRIC_EXPORT_TIMEOUT",), millis=True, parse=_seconds,
        metavar="SECONDS", shown="10 s", help="the longest one export may take, its retries included"),
    # Longer than the API server's bookmark period (about a minute).
    "read_timeout": Setting(
        default=120.0, flag="--read-timeout", parse=_seconds, metavar="SECONDS", shown="120 s",
        help="longest silence on a watch before it is treated as dead and resumed"),
    # No flag: drawn from this range for each watch, so that thousands of agents do not reconnect in step.
    "watch_timeout": Setting(default=(300, 600), shown="300 to 600 s", help="the server-side timeout of a watch"),
    "procfs": Setting(
        default="/proc", flag="--procfs", env=("HOST_PROC",), parse=_off_or(str, "off"), metavar="PATH", shown="/proc",
        help="the /proc to read the used series from ('off' disables); the container's own stat and meminfo are "
             "the host's"),
    "debug_address": Setting(
        default=Address(host="", port=9808), flag="--debug-address", env=("DEBUG_ADDRESS",),
        parse=_off_or(_address, "off", "none"), metavar="HOST:PORT", shown=":9808 (off with --once)",
        help="the read-only debug endpoint and the probes; 'off' disables"),
    "debug_views": Setting(
        default=VIEWS_LOCAL, flag="--debug-views", env=("DEBUG_VIEWS",), choices=DEBUG_VIEWS,
        parse=_one_of(DEBUG_VIEWS), shown=VIEWS_LOCAL,
        help="who may read the debug views (pods, node, runtime, /metrics, the page): local, only loopback peers "
             "such as kubectl port-forward, or any; the probes answer everyone"),
    "debug_hosts": Setting(
        default=(), flag="--debug-host", env=("DEBUG_HOSTS",), kind="repeated", parse=_host_names,
        metavar="NAME",
        help="a Host name the debug views accept besides localhost and IP literals (DNS rebinding protection); "
             "the flag repeats, and it and the variable take names comma-separated"),
    "log_level": Setting(default="INFO", flag="--log-level", env=("LOG_LEVEL",), parse=_one_of(LOG_LEVELS, str.upper),
                         shown="INFO", help="DEBUG, INFO, WARNING or ERROR"),
    "log_format": Setting(
        default="text", flag="--log-format", env=("LOG_FORMAT",), parse=_one_of(LOG_FORMATS), metavar="FORMAT",
        shown="text",
        help="text, or json: one JSON object per line with time, level, logger, message and the node and pod it "
             "is about"),
    "kubernetes_version": Setting(
        default=None, flag="--kubernetes-version", env=("KUBERNETES_VERSION",), parse=parse_version,
        metavar="X.Y",
        shown="the API server's /version, re-read after every relist (with --replay the newest supported)",
        explain_shown=f"with --live the API server's own version, else {NEWEST}, the newest supported",
        help="count requests with this Kubernetes release's rules"),
    # The cluster-autoscaler's settings that decide a node's verdict (docs/configuration.md#the-autoscalers-settings).
    # Its own flags, with its own names and defaults (model.autoscaler_settings), so a line copied from its
    # Deployment's args works here unchanged; the environment takes the whole args line at once.
    "autoscaler_args": Setting(
        default=DEFAULT_AUTOSCALER, env=("NRA_AUTOSCALER_ARGS",), parse=_autoscaler_args,
        shown="the autoscaler's defaults",
        help="the autoscaler's args as its Deployment has them, shell-quoted words read as it reads them (its "
             "other flags are checked and ignored); the flags below win over it"),
    "autoscaler_release": Setting(
        default=DEFAULT_AUTOSCALER.release, flag="--autoscaler-release", env=("NRA_AUTOSCALER_RELEASE",),
        parse=parse_release, metavar="1.MINOR|neon", shown=DEFAULT_AUTOSCALER.release,
        help="the cluster-autoscaler release whose request arithmetic decides: before 1.33 it ignores in-place "
             "resize status and pod-level resources; neon is neon's patched 1.31.1"),
    **{flag.field: _autoscaler_flag(flag) for flag in AUTOSCALER_FLAGS},
    "watch_pdbs": Setting(
        default=True, flag="--watch-pdbs", env=("NRA_WATCH_PDBS",), parse=_true_or_false, metavar="BOOL",
        shown="true",
        help="list and watch the cluster's PodDisruptionBudgets (one cluster-wide watch; needs RBAC list/watch "
             "on policy poddisruptionbudgets); false: kube-system pods are reported as blocking unless a PDB "
             "covers them"),
    "max_pdbs": Setting(
        default=10000, flag="--max-pdbs", env=("NRA_MAX_PDBS",), parse=_positive_count, metavar="N",
        shown="10000",
        help="the most PodDisruptionBudgets the agent keeps; beyond it PDBs are reported as unknown (a problem) "
             "until the cluster holds this many again"),
    "malloc_arenas": Setting(
        default=2, env=("MALLOC_ARENA_MAX",), shown="2, set by the agent",
        help="glibc's limit on malloc arenas: when set, glibc applies it and the agent leaves it alone"),
}


def _default(name: str) -> Any:
    return SETTINGS[name].default


class OtlpSettings(msgspec.Struct, frozen=True, kw_only=True):
    protocol: str
    endpoint: str  # http: the full URL (…/v1/metrics); grpc: scheme://host:port
    headers: tuple[tuple[str, str], ...] = _default("otlp_headers")
    compression: str = _default("otlp_compression")  # "gzip" or "none"
    certificate: str | None = None
    client_certificate: str | None = None
    client_key: str | None = None
    insecure: bool | None = None  # gRPC without TLS; None: decided by the endpoint's scheme
    token_file: str | None = None  # a projected ServiceAccount token, sent as a bearer token


class InCluster(msgspec.Struct, frozen=True, kw_only=True):
    """Inside a pod: the API server's Service and the folder the kubelet projects the token and CA into."""

    host: str
    port: str | None  # as set; source.endpoint says what is wrong with a missing or empty one
    serviceaccount_dir: str


class ClusterAccess(msgspec.Struct, frozen=True, kw_only=True):
    """How to reach the API server: the service account inside a pod, else kubeconfig files (merged as kubectl does)."""

    kubeconfig: str  # one file, or files separated by os.pathsep as in KUBECONFIG
    context: str | None = None
    in_cluster: InCluster | None = None
    skipped: str = ""  # why the in-cluster service account was not tried, when no flag decided it

    def described(self) -> str:
        """What is tried, for a message a person can act on."""
        if self.in_cluster is not None:
            return "the in-cluster service account"
        files = ", ".join(p for p in self.kubeconfig.split(os.pathsep) if p)
        return f"kubeconfig {files}" + (f" (in-cluster skipped: {self.skipped})" if self.skipped else "")


class Config(msgspec.Struct, frozen=True, kw_only=True):
    """What ``run`` starts with, resolved and checked; the defaults are SETTINGS'."""

    node_name: str
    cluster: ClusterAccess | None = None  # None with --replay
    replay: str | None = _default("replay")
    once: bool = _default("once")
    exporter: str = _default("exporter")
    otlp: OtlpSettings | None = None  # always set for the otlp exporter, None for the others
    export_interval: float = _default("export_interval")
    export_timeout: float = _default("export_timeout")
    read_timeout: float = _default("read_timeout")
    watch_timeout: tuple[int, int] = _default("watch_timeout")
    debug_address: Address | None = _default("debug_address")  # None turns the endpoint off
    debug_views: str = _default("debug_views")
    # Host names the views accept besides loopback names and addresses and the IP literal connected to.
    debug_hosts: tuple[str, ...] = _default("debug_hosts")
    procfs: str | None = _default("procfs")  # None turns the "used" series off
    log_level: str = _default("log_level")
    log_format: str = _default("log_format")
    kubernetes_version: KubernetesVersion | None = _default("kubernetes_version")  # None: the API server's /version
    malloc_arenas: int | None = _default("malloc_arenas")  # None: MALLOC_ARENA_MAX is set, glibc applies it
    # OTEL_RESOURCE_ATTRIBUTES, parsed here so the SDK never reads the environment; the agent's own attributes win.
    resource_attributes: tuple[tuple[str, str], ...] = _default("resource_attributes")
    autoscaler: AutoscalerSettings = DEFAULT_AUTOSCALER
    watch_pdbs: bool = _default("watch_pdbs")
    max_pdbs: int = _default("max_pdbs")
    # Values read as their documented fallback rather than refused (an OTLP boolean neither true nor false), each a
    # line naming its variable: ``run`` logs them as warnings once logging is set up.
    warnings: tuple[str, ...] = ()
    # Why the autoscaler's verdict is off: a setting only the verdict reads (VERDICT_SETTINGS) had a value the agent
    # cannot use, the one line naming it; "" when the verdict is on. ``run`` logs it as an error and goes on with the
    # pods' and the node's values (docs/configuration.md#when-a-setting-is-wrong).
    verdict_off: str = ""

    def __post_init__(self) -> None:
        if self.exporter == "otlp" and self.otlp is None:
            raise ConfigError("the otlp exporter needs its OTLP settings (from_sources resolves them)")


def _parsed(name: str, args: Mapping[str, object], env: Mapping[str, str],
            notes: list[str] | None = None) -> tuple[Any, str] | None:
    """The setting's typed value from its flag, else from the first of its variables that is set, with that flag or
    variable; None when it was not given.

    ``args`` holds the flags as argparse left them, by ``dest``: a value's text, a switch's True, a repeated flag's
    list of texts; None, False or empty where not given. A switch is True as it is; each text is parsed once, by the
    row's parser (a repeated flag's items one by one, their tuples joined in order).
    """
    setting = SETTINGS[name]
    if setting.flag is not None and (value := args.get(setting.dest)) not in (None, False, "", []):
        if value is True:
            return True, setting.flag
        if isinstance(value, list):
            return tuple(item for text in value for item in _parse(setting, setting.flag, text, notes)), setting.flag
        return _parse(setting, setting.flag, str(value), notes), setting.flag
    for variable in setting.env:
        if text := env.get(variable, "").strip():
            return _parse(setting, variable, text, notes), variable
    return None


def _parse(setting: Setting[T], source: str, text: str, notes: list[str] | None) -> T:
    """``text`` from ``source`` (a flag or a variable) parsed by the row; a value the parser refuses is a ConfigError
    naming ``source``; one it reads as a fallback goes with a warning into ``notes`` (refused where there are none)."""
    try:
        return setting.parser_for(source)(text.strip())
    except _FellBack as exc:
        if notes is None:
            raise ConfigError(f"{source} {exc}") from None
        notes.append(f"{source} {exc}")
        return exc.value  # type: ignore[return-value]  # the parser's own fallback, of its type
    except _Refused as exc:
        raise ConfigError(f"{source} {exc}") from None
    except ValueError as exc:
        raise ConfigError(f"{source}: {exc}") from None


def _typed(name: str, args: Mapping[str, object], env: Mapping[str, str], notes: list[str] | None = None) -> Any:
    """The setting's typed value (``_parsed``), else its default."""
    parsed = _parsed(name, args, env, notes)
    return _default(name) if parsed is None else parsed[0]


def _pairs(text: str | None, what: str, lower_keys: bool = False) -> tuple[tuple[str, str], ...]:
    """``key=value`` pairs, comma-separated and percent-encoded (the OTel format of headers and resource attributes)."""
    if not text:
        return ()
    out = []
    for part in text.split(","):
        key, sep, value = part.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"{what} {part.strip()!r} is not key=value")
        key = urllib.parse.unquote(key.strip())
        out.append((key.lower() if lower_keys else key, urllib.parse.unquote(value.strip())))
    return tuple(out)


def otlp_settings(env: Mapping[str, str], notes: list[str] | None = None) -> OtlpSettings:
    """The exporter's settings from the standard variables (signal-specific ones win), each parsed by its row; a bad
    value is a ConfigError naming its variable, a boolean neither true nor false a warning in ``notes``."""
    no_flags: dict[str, object] = {}

    def typed(name: str) -> Any:
        return _typed(name, no_flags, env, notes)

    protocol = typed("otlp_protocol")
    given = _parsed("otlp_endpoint", no_flags, env)
    endpoint, source = given if given is not None else (_default("otlp_endpoint")[protocol], None)
    if protocol != "grpc" and source != SETTINGS["otlp_endpoint"].env[0]:
        endpoint = endpoint.rstrip("/") + "/v1/metrics"  # the generic variable and the default name the Collector
    return OtlpSettings(
        protocol=protocol,
        endpoint=endpoint,
        headers=typed("otlp_headers"),
        compression=typed("otlp_compression"),
        certificate=typed("otlp_certificate"),
        client_certificate=typed("otlp_client_certificate"),
        client_key=typed("otlp_client_key"),
        insecure=typed("otlp_insecure"),
        token_file=typed("otlp_token_file"),
    )


def parse_address(text: str) -> Address:
    """``HOST:PORT``, ``[v6]:PORT``, or ``:PORT``: every interface, IPv6 and IPv4 ("" host). Raises ValueError."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"debug address must be HOST:PORT, got {text!r}")
    return Address(host=host.strip("[]"), port=int(port))


def kubernetes_version(args: Mapping[str, object], env: Mapping[str, str]) -> KubernetesVersion | None:
    """``--kubernetes-version``, else KUBERNETES_VERSION, parsed by its row (None when neither is given): ``explain``
    takes it as ``run`` does."""
    return _typed("kubernetes_version", args, env)


def cluster_access(kubeconfig: str | None, context: str | None, env: Mapping[str, str]) -> ClusterAccess:
    """Inside a pod (KUBERNETES_SERVICE_HOST set) with neither --kubeconfig nor --context, the service account;
    else --kubeconfig, else KUBECONFIG's files, else ~/.kube/config."""
    flags = {"kubeconfig": kubeconfig, "context": context}
    host_variable, port_variable = SETTINGS["kubernetes_service"].env
    in_cluster, skipped = None, ""
    if not kubeconfig and not context:
        if host := env.get(host_variable, "").strip():
            in_cluster = InCluster(host=host, port=env.get(port_variable),
                                   serviceaccount_dir=_typed("serviceaccount_dir", flags, env))
        else:
            skipped = f"{host_variable} is not set"
    given = _parsed("kubeconfig", flags, env)
    files = given[0] if given is not None else os.path.expanduser(_default("kubeconfig"))
    return ClusterAccess(kubeconfig=files, context=context or None, in_cluster=in_cluster, skipped=skipped)


#: The SETTINGS keys ``explain`` takes too, and the AutoscalerSettings field each sets: the release and the
#: autoscaler's own flags (AUTOSCALER_FLAGS, whose keys are their fields).
AUTOSCALER_FIELDS = {"autoscaler_release": "release", **{flag.field: flag.field for flag in AUTOSCALER_FLAGS}}


def autoscaler_settings(args: Mapping[str, object], env: Mapping[str, str],
                        notes: list[str] | None = None) -> AutoscalerSettings:
    """The autoscaler's settings: NRA_AUTOSCALER_ARGS' words, then the release and the flags over them (as a later
    word wins in the autoscaler's own flag parsing); a bad value is a ConfigError naming where it came from, a flag
    no autoscaler has in the variable a warning in ``notes``."""
    from_words: AutoscalerSettings = _typed("autoscaler_args", args, env, notes)
    given = {field: parsed[0] for name, field in AUTOSCALER_FIELDS.items()
             if (parsed := _parsed(name, args, env)) is not None}
    return msgspec.structs.replace(from_words, **given) if given else from_words


def _node_name(args: Mapping[str, object], env: Mapping[str, str]) -> str:
    if not (node := _typed("node_name", args, env)):
        raise ConfigError("the node name is required: set NODE_NAME (the DaemonSet sets it from spec.nodeName) or "
                          "pass --node-name")
    return node


def _debug_address(args: Mapping[str, object], env: Mapping[str, str], *, once: bool) -> Address | None:
    """The debug endpoint's address; ``--once`` exports and exits, so it has none unless one is asked for."""
    parsed = _parsed("debug_address", args, env)
    if parsed is None:
        return None if once else _default("debug_address")
    return parsed[0]


#: Config's fields that are a setting's typed value and nothing more, in the order they are checked.
_PLAIN = ("replay", "once", "exporter", "debug_views", "debug_hosts", "procfs", "log_level", "log_format",
          "resource_attributes", "kubernetes_version", "export_interval", "export_timeout", "read_timeout")

#: The SETTINGS only the autoscaler's verdict reads: its args, its release, its own flags, the PDB watch. A value
#: of theirs in the environment that ``run`` cannot use turns the verdict off, not the agent: both install paths set
#: them as variables on every node, copied from another component's Deployment (a release the agent does not know
#: yet, a value it refuses), and refusing would crash-loop every node and stop the pods' values too. A flag is typed
#: by a person, who is better told at once: refused (docs/configuration.md#when-a-setting-is-wrong).
VERDICT_SETTINGS = ("autoscaler_args", *AUTOSCALER_FIELDS, "watch_pdbs", "max_pdbs")


def _verdict_settings(args: Mapping[str, object], env: Mapping[str, str], notes: list[str]) -> dict[str, Any]:
    """Config's fields from VERDICT_SETTINGS: the autoscaler's settings and the PDB watch, or, when a variable of
    theirs is unusable, the verdict off with its one line (and no PDB watch: nothing would read the PDBs). A bad flag
    is a ConfigError, as any other."""
    for name in VERDICT_SETTINGS:
        _parsed(name, args, {})  # the flags alone first: theirs is a refusal
    try:
        return {"autoscaler": autoscaler_settings(args, env, notes), "watch_pdbs": _typed("watch_pdbs", args, env),
                "max_pdbs": _typed("max_pdbs", args, env)}
    except ConfigError as exc:
        return {"verdict_off": str(exc), "watch_pdbs": False}


def from_sources(args: Mapping[str, object], env: Mapping[str, str]) -> Config:
    """Merge the flags (their text as the command line held it; None where not given) with the environment and
    SETTINGS' defaults: each value is parsed once, by its row's parser, and set on Config as it is."""
    node_name = _node_name(args, env)
    plain = {name: _typed(name, args, env) for name in _PLAIN}
    if plain["once"] and plain["replay"] is None:
        raise ConfigError("--once needs --replay: a live agent runs until it is stopped")
    kubeconfig, context = (args.get(SETTINGS[name].dest) for name in ("kubeconfig", "context"))
    notes: list[str] = []
    otlp = otlp_settings(env, notes) if plain["exporter"] == "otlp" else None  # for that exporter only
    return Config(
        node_name=node_name,
        cluster=None if plain["replay"] else cluster_access(kubeconfig, context, env),  # type: ignore[arg-type]  # text or None
        otlp=otlp,
        debug_address=_debug_address(args, env, once=plain["once"]),
        # Set, MALLOC_ARENA_MAX is glibc's to apply; unset, the agent sets its own limit.
        malloc_arenas=None if _parsed("malloc_arenas", args, env) else _default("malloc_arenas"),
        **_verdict_settings(args, env, notes),
        warnings=tuple(notes),
        **plain,
    )
