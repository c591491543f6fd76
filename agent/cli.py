"""The command line: parse, then hand over to the command's own package (``run``, ``explain``).

As the DaemonSet runs it (``run`` and nothing else: every setting comes from
the environment) there is nothing to parse, so no parser is built and argparse
is never imported: its 0.35 MiB of code would otherwise stay resident for the
life of the agent on every node.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

import msgspec

from agent import __version__
from agent.config import (
    AUTOSCALER_FIELDS,
    SETTINGS,
    ConfigError,
    Setting,
    autoscaler_settings,
    cluster_access,
    from_sources,
    kubernetes_version,
)
from agent.model.autoscaler_settings import AutoscalerArgError, go_flag_words

if TYPE_CHECKING:
    import argparse

EXIT_CONFIG = 2

#: The SETTINGS rows ``explain`` takes as flags too.
EXPLAIN_SETTINGS = ("kubeconfig", "context", "kubernetes_version", *AUTOSCALER_FIELDS)


COMMANDS = ("run", "explain")


def _prog() -> str:
    """``kubectl node-requests`` when run as the kubectl plugin (kubectl execs ``kubectl-node_requests``)."""
    return "kubectl node-requests" if os.path.basename(sys.argv[0]).startswith("kubectl-") else "node-requests-agent"


def _flag_form(setting: Setting) -> dict[str, Any]:
    """argparse's arguments for a setting's flag: it collects the text, which config parses with the setting's own
    parser (no ``type=`` here, so nothing is parsed twice); every flag defaults to unset, so the environment can
    decide."""
    if setting.kind == "switch":
        return {"action": "store_true"}
    form: dict[str, Any] = {"action": "append"} if setting.kind == "repeated" else {}
    if setting.choices:
        form["choices"] = setting.choices
    if setting.metavar:
        form["metavar"] = setting.metavar
    return form


def _default_text(setting: Setting, shown: str = "") -> str:
    shown = shown or setting.shown
    return "required" if setting.required else f"default {shown}" if shown else ""


def _flag_help(setting: Setting, command: str = "run") -> str:
    """The flag's help from its row: what it means, its variables and its default (``explain``'s where the row has
    one)."""
    unit = " in ms" if setting.millis else ""
    said = [f"env {' or '.join(setting.env)}{unit}"] if setting.env else []
    said += [text] if (text := _default_text(setting, setting.explain_shown if command == "explain" else "")) else []
    return f"{setting.help} ({'; '.join(said)})" if said else setting.help


def _environment_help() -> str:
    """``run --help``'s list of every environment variable the agent reads, from the same table as the flags."""
    import textwrap

    lines = ["environment (a flag wins over its variable, OTEL_EXPORTER_OTLP_METRICS_* over OTEL_EXPORTER_OTLP_*;",
             "an empty variable counts as unset):"]
    for setting in SETTINGS.values():
        if setting.env:
            unit = " (ms)" if setting.millis else ""
            flag = f" ({setting.flag})" if setting.flag else ""
            lines.append(f"  {', '.join(setting.env)}{unit}{flag}")
            text = _default_text(setting)
            lines += textwrap.wrap(setting.help + (f"; {text}" if text else ""), 100, initial_indent=" " * 6,
                                   subsequent_indent=" " * 6)
    return "\n".join(lines)


def build_parser(prog: str = "node-requests-agent") -> argparse.ArgumentParser:
    """Every command's flags. Built only for a command line with flags (``run`` alone, as the DaemonSet runs it, is not
    parsed): public so the tests can read what each option parses to and its help."""
    import argparse

    class OneLineErrors(argparse.ArgumentParser):
        """An unknown flag or a bad value is one line and exit 2, as for every other bad setting
        (docs/configuration.md), not argparse's usage dump before it; the subcommands' parsers are of this class."""

        def __init__(self, *args, **kwargs) -> None:
            self.options: dict[str, bool] = {}  # every option string of this parser: whether it takes a value
            # No abbreviations: the autoscaler's flag parser takes none, and its flags pass through here.
            kwargs.setdefault("allow_abbrev", False)
            super().__init__(*args, **kwargs)
            self.commands: dict[str, OneLineErrors] = {}  # the subcommands' parsers, by name

        def add_argument(self, *args, **kwargs):
            action = super().add_argument(*args, **kwargs)
            self.options.update(dict.fromkeys(action.option_strings, action.nargs != 0))
            return action

        def error(self, message: str) -> NoReturn:
            self.exit(EXIT_CONFIG, f"{self.prog}: {message}; see {self.prog} --help\n")

        def parse_args(self, args=None, namespace=None):
            """The command's words read in the autoscaler's flag grammar first (go_flag_words: its flags pasted
            from its Deployment); then flags no parser knows are the command's error (its --help lists its flags),
            not the program's."""
            args = list(sys.argv[1:] if args is None else args)
            notes: list[str] = []
            if args and (command := self.commands.get(args[0])) is not None:
                try:
                    args[1:] = go_flag_words(args[1:], own=command.options, notes=notes)
                except AutoscalerArgError as exc:
                    command.error(str(exc))
            parsed, unknown = self.parse_known_args(args, namespace)
            parsed.flag_notes = notes  # warnings about flags read but not applied: the command prints or logs them
            if unknown:
                self.commands.get(getattr(parsed, "command", None) or "", self).error(
                    f"unrecognized arguments: {' '.join(unknown)}")
            return parsed

    parser = OneLineErrors(
        prog=prog,
        description="Per-node agent: exports what each pod costs the cluster-autoscaler "
                    "(NeonVM usage, else effective requests) as OpenTelemetry metrics.")
    version: dict[str, Any] = {"action": "version", "version": f"node-requests-agent {__version__}",
                               "help": "print the version and exit"}
    parser.add_argument("--version", **version)
    sub = parser.add_subparsers(dest="command", metavar="{run,explain}")

    run = sub.add_parser("run", help="run the agent (the default command)",
                         description="Watch this node's pods and push their values over OTLP.",
                         epilog=_environment_help(), formatter_class=argparse.RawDescriptionHelpFormatter)
    run.add_argument("--version", **version)
    for setting in SETTINGS.values():
        if setting.flag is not None:
            run.add_argument(setting.flag, help=_flag_help(setting), **_flag_form(setting))

    explain = sub.add_parser(
        "explain", help="explain, node by node, what the agent would export for a dump or a live cluster",
        description="Read pods and Nodes (a Pod, a List such as `kubectl get nodes,pods -A -o json`, or a watch "
                    "capture, JSON or YAML), or list them from the cluster with --live, and print per node what each "
                    "pod costs the cluster-autoscaler and why.")
    explain.add_argument("--version", **version)
    explain.add_argument("file", nargs="?", default="-",
                         help="input file, - for standard input (default), or 'sample' for the bundled sample node")
    explain.add_argument("--output", "-o", choices=("table", "wide", "json"), default="table",
                         help="table (fits the terminal), wide (every column and name in full) or json")
    explain.add_argument("--node-file", metavar="FILE",
                         help="a Node object (JSON or YAML) for the node comparisons; Nodes inside the input work too")
    explain.add_argument("--node", metavar="NAME", help="only this node's pods and comparisons")
    explain.add_argument("--namespace", "-n", metavar="NS",
                         help="only pods of this namespace (node sums still cover every pod)")
    explain.add_argument("--source", choices=("vm_usage", "pod_requests"), help="only pods valued this way")
    explain.add_argument("--problems", action="store_true", help="only pods whose input had problems")
    explain.add_argument("--sort", choices=("busy", "cpu", "memory", "name"), default="busy",
                         help="node and pod order: busy (pod_or_vm / allocatable, the larger of cpu and memory; "
                              "default), cpu, memory or name")
    explain.add_argument("--at", metavar="TIME",
                         help="judge the verdicts as of TIME (RFC 3339, e.g. 2026-12-05T10:00:00Z; default: now): "
                              "when the dump was taken, for a kube-system pod's timeout and a deleted pod's grace")
    explain.add_argument("--live", action="store_true",
                         help="read pods and Nodes from the cluster (one LIST each, no watch) instead of a file")
    # The settings explain shares with `run`, from their rows and read as `run` reads them (their variables too):
    # the cluster's access (with --live), the Kubernetes release, the autoscaler's settings.
    for name in EXPLAIN_SETTINGS:
        setting = SETTINGS[name]
        assert setting.flag is not None, name  # each is a flag of run's too
        explain.add_argument(setting.flag, help=_flag_help(setting, "explain"), **_flag_form(setting))
    parser.commands = {"run": run, "explain": explain}
    return parser


def _unknown_command(word: str) -> str:
    import difflib

    close = difflib.get_close_matches(word, COMMANDS, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"unknown command {word!r}{hint}; commands: {', '.join(COMMANDS)}"


#: What a shell reports for a command ended by SIGPIPE (128 + 13), as `yes | head` shows for yes.
EXIT_PIPE_CLOSED = 141


def _to_a_pipe(command: Callable[[], int]) -> int:
    """Run a command that prints; if the reader went away (``explain | head``), stop quietly as CLI tools do.

    Python's documented recipe (the signal module's note on SIGPIPE): the output still buffered goes to devnull, so
    the interpreter's last flush does not raise again. The recipe exits 1; this exits 141, what the shell reports for
    `yes | head` and other tools a closed pipe ends, so `set -o pipefail` scripts see what they see for those.
    """
    try:
        code = command()
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_PIPE_CLOSED


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    prog = _prog()
    if argv and not argv[0].startswith("-") and argv[0] not in COMMANDS:
        print(f"{prog}: {_unknown_command(argv[0])}", file=sys.stderr)
        return EXIT_CONFIG
    if not argv or argv[0] not in (*COMMANDS, "-h", "--help", "--version"):
        argv.insert(0, "run")
    if argv == ["run"]:
        flags: dict[str, object] = {}  # no flag given: what the parser would return, every option unset
    else:
        args = build_parser(prog).parse_args(argv)
        if args.command == "explain":
            from agent.explain.command import explain

            try:
                notes: list[str] = list(args.flag_notes)
                autoscaler = autoscaler_settings(vars(args), os.environ, notes)
                version = kubernetes_version(vars(args), os.environ)
            except ConfigError as exc:
                print(f"node-requests-agent explain: {exc}", file=sys.stderr)
                return EXIT_CONFIG
            for note in notes:
                print(f"node-requests-agent explain: {note}", file=sys.stderr)
            return _to_a_pipe(lambda: explain(args, cluster_access(args.kubeconfig, args.context, os.environ),
                                              autoscaler=autoscaler, version=version))
        flags = vars(args)
    try:
        config = from_sources(flags, os.environ)
        if isinstance(flag_notes := flags.get("flag_notes"), list) and flag_notes:
            config = msgspec.structs.replace(config, warnings=(*map(str, flag_notes), *config.warnings))
    except ConfigError as exc:
        print(f"node-requests-agent: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    from agent.run.command import run
    from agent.run.logs import configure_logging

    configure_logging(config.log_level, config.log_format, node_name=config.node_name)

    try:
        return run(config)
    except ConfigError as exc:
        print(f"node-requests-agent: {exc}", file=sys.stderr)
        return EXIT_CONFIG
