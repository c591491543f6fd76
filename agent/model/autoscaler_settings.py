"""The cluster-autoscaler's settings that decide a node's verdict, in the autoscaler's own flag names.

An operator copies them from the autoscaler Deployment's args (``--name=value``), so the agent reads exactly that
form: as ``run`` and ``explain`` flags, and in ``NRA_AUTOSCALER_ARGS``. ``release`` says which autoscaler release
computes pod requests (before 1.33 it ignores in-place-resize status and pod-level resources; ``neon`` is neon's
patched 1.31.1, which also applies ``vm.neon.tech/usage``).

The words are read as the autoscaler's own flag parser (pflag over Go's ``flag``) reads them: ``--name=value``,
``--name value`` (not for a boolean) and, for a boolean, ``--name`` alone (true); one leading dash works too. Booleans
take Go's ``strconv.ParseBool`` spellings, durations Go's ``time.ParseDuration`` syntax. Flags the verdict does not
depend on are accepted and ignored, so the whole args list can be pasted; a word that is not a flag is an error, since
it means the list was not what the operator thought.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

import msgspec

__all__ = ["AutoscalerSettings", "AutoscalerArgError", "AutoscalerFlag", "AUTOSCALER_FLAGS", "BOOLEAN", "DURATION",
           "RATIO", "DEFAULT_AUTOSCALER", "FlagType", "parse_autoscaler_args", "parse_release", "RELEASES", "NEON",
           "parse_go_duration"]


class AutoscalerArgError(ValueError):
    """One line naming the flag and what is wrong with its value."""


class AutoscalerSettings(msgspec.Struct, frozen=True, kw_only=True):
    release: str = "1.36"
    scale_down_utilization_threshold: float = 0.5
    scale_down_gpu_utilization_threshold: float = 0.5
    ignore_daemonsets_utilization: bool = False
    ignore_mirror_pods_utilization: bool = False
    skip_nodes_with_local_storage: bool = True
    skip_nodes_with_system_pods: bool = True
    skip_nodes_with_custom_controller_pods: bool = True
    # The autoscaler spells it "distruption"; seconds.
    blocking_system_pod_distruption_timeout: float = 3600.0


DEFAULT_AUTOSCALER = AutoscalerSettings()

#: neon's patched autoscaler (neondatabase/autoscaling cluster-autoscaler/ca.patch on cluster-autoscaler 1.31.1).
NEON = "neon"
#: The releases the agent knows the rules of: 1.28 to 1.38, and neon's.
RELEASES: tuple[str, ...] = (*(f"1.{minor}" for minor in range(28, 39)), NEON)

# strconv.ParseBool
_TRUE = {"1", "t", "T", "TRUE", "true", "True"}
_FALSE = {"0", "f", "F", "FALSE", "false", "False"}
# A flag name as pflag accepts it (letters, digits, dashes, dots, underscores).
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
# time.ParseDuration: an optionally signed sequence of decimal numbers, each with a unit.
_DURATION_PART = re.compile(r"(\d+\.?\d*|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_go_duration(text: str) -> float:
    """Seconds of a Go duration ("1h", "30m", "90s", "1h30m", "1.5h", "0"); ValueError otherwise."""
    sign, rest = (-1.0, text[1:]) if text[:1] == "-" else (1.0, text[1:] if text[:1] == "+" else text)
    if rest == "0":
        return 0.0
    total, at = 0.0, 0
    while at < len(rest):
        match = _DURATION_PART.match(rest, at)
        if match is None:
            raise ValueError(f"not a Go duration (such as 1h, 30m, 90s, 1h30m): {text!r}")
        total += float(match[1]) * _UNITS[match[2]]
        at = match.end()
    if not rest:
        raise ValueError(f"not a Go duration (such as 1h, 30m, 90s, 1h30m): {text!r}")
    return sign * total


def _go_bool(text: str) -> bool:
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError(f"{text[:40]!r} is not a boolean (true or false)")


def _ratio(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{text[:40]!r} is not a number") from None
    if not 0.0 <= value <= 1.0:  # NaN fails too
        raise ValueError(f"{text[:40]!r} is outside [0, 1]")
    return value


def _duration(text: str) -> float:
    seconds = parse_go_duration(text)
    if seconds < 0:
        raise ValueError(f"{text[:40]!r} is negative")
    return seconds


def _show_duration(seconds: object) -> str:
    """3600.0 as "1h", 5400.0 as "1h30m": a duration as an operator writes it."""
    hours, rest = divmod(float(seconds), 3600)  # type: ignore[arg-type]  # a duration's default is a float
    minutes, secs = divmod(rest, 60)
    text = "".join(f"{int(n)}{unit}" for n, unit in ((hours, "h"), (minutes, "m")) if n)
    return text + (f"{secs:g}s" if secs else "") or "0s"


class FlagType(msgspec.Struct, frozen=True, kw_only=True):
    """How one of the autoscaler's flags is written: its value's parser (the text as Go's flag package reads it; a
    ValueError says what is wrong without naming the flag), how its default reads, and what the flag alone means."""

    metavar: str
    parse: Callable[[str], object]
    show: Callable[[object], str] = str
    # The value of the flag given alone: Go's flag package reads a bare boolean as true; None: a value must follow.
    bare: str | None = None


BOOLEAN = FlagType(metavar="BOOL", parse=_go_bool, show=lambda value: str(value).lower(), bare="true")
RATIO = FlagType(metavar="RATIO", parse=_ratio)
DURATION = FlagType(metavar="DURATION", parse=_duration, show=_show_duration)


class AutoscalerFlag(msgspec.Struct, frozen=True, kw_only=True):
    """One of the autoscaler's flags the verdict depends on: the AutoscalerSettings field it sets (its name is the
    flag's, with dashes), its type, and what it means. Its default is the field's."""

    field: str
    type: FlagType
    help: str

    @property
    def name(self) -> str:
        """The flag as the autoscaler's Deployment writes it, without its dashes."""
        return self.field.replace("_", "-")

    @property
    def default(self) -> object:
        return getattr(DEFAULT_AUTOSCALER, self.field)


#: The autoscaler's flags, listed once: the agent's settings table, its ``run`` and ``explain`` flags, the args-list
#: parser below and docs/configuration.md's rows all come from here.
AUTOSCALER_FLAGS: tuple[AutoscalerFlag, ...] = (
    AutoscalerFlag(field="scale_down_utilization_threshold", type=RATIO,
                   help="the autoscaler's: a node at or below this utilization (0 to 1) is a scale-down candidate "
                        "(from 1.32; strictly below before)"),
    AutoscalerFlag(field="scale_down_gpu_utilization_threshold", type=RATIO,
                   help="the autoscaler's: the same for a GPU node, judged by its GPU alone"),
    AutoscalerFlag(field="ignore_daemonsets_utilization", type=BOOLEAN,
                   help="the autoscaler's: DaemonSet pods leave both the sum and the allocatable"),
    AutoscalerFlag(field="ignore_mirror_pods_utilization", type=BOOLEAN,
                   help="the autoscaler's: mirror (static) pods leave both the sum and the allocatable"),
    AutoscalerFlag(field="skip_nodes_with_local_storage", type=BOOLEAN,
                   help="the autoscaler's: a pod with hostPath or disk-backed emptyDir volumes blocks removal"),
    AutoscalerFlag(field="skip_nodes_with_system_pods", type=BOOLEAN,
                   help="the autoscaler's: a kube-system pod no PodDisruptionBudget covers blocks removal"),
    AutoscalerFlag(field="skip_nodes_with_custom_controller_pods", type=BOOLEAN,
                   help="the autoscaler's: a pod whose controller is not a ReplicationController, Job, ReplicaSet or "
                        "StatefulSet blocks removal"),
    AutoscalerFlag(field="blocking_system_pod_distruption_timeout", type=DURATION,
                   help="the autoscaler's (its spelling): a kube-system pod older than this stops blocking (1.33 and "
                        "later)"),
)
_BY_NAME = {flag.name: flag for flag in AUTOSCALER_FLAGS}


def parse_release(text: str) -> str:
    """``1.<minor>`` of RELEASES or ``neon``; ValueError otherwise."""
    if text not in RELEASES:
        raise ValueError(f"unknown cluster-autoscaler release {text[:40]!r}; supported: "
                         f"{RELEASES[0]} to {RELEASES[-2]} and {NEON!r} (neon's patched 1.31.1)")
    return text


def parse_autoscaler_args(args: Iterable[str], *, release: str | None = None) -> AutoscalerSettings:
    """Settings from ``--name=value`` words (the autoscaler's flags; others it has are ignored, a known flag with a
    bad value is an AutoscalerArgError); ``release`` "1.<minor>" or "neon"."""
    words: list[object] = list(args)  # typed as text, but an environment's list is checked, not trusted
    found: dict[str, object] = {}
    i = 0
    while i < len(words):
        word = words[i]
        i += 1
        if not isinstance(word, str) or not word.startswith("-") or word in ("-", "--"):
            raise AutoscalerArgError(f"autoscaler args: {str(word)[:60]!r} is not a flag (expected --name=value)")
        name, eq, raw = word.lstrip("-").partition("=")
        if _NAME.fullmatch(name) is None:
            raise AutoscalerArgError(f"autoscaler args: {word[:60]!r} is not a flag (expected --name=value)")
        flag = _BY_NAME.get(name)
        if flag is None:
            # Another of the autoscaler's flags: its value, if given apart, is the next word that is not a flag.
            if not eq and i < len(words) and not str(words[i]).startswith("-"):
                i += 1
            continue
        if not eq:
            if flag.type.bare is not None:
                # `--flag` alone is true, as Go's flag package reads a boolean; a value must follow "=" (pflag
                # would read `--flag false` as true and a stray "false", which here is a word that is not a flag).
                raw = flag.type.bare
            elif i >= len(words):
                raise AutoscalerArgError(f"--{name}: needs a value")
            else:
                raw = str(words[i])
                i += 1
        try:
            found[flag.field] = flag.type.parse(raw)
        except ValueError as exc:
            raise AutoscalerArgError(f"--{name}: {exc}") from None
    if release is not None:
        try:
            found["release"] = parse_release(release)
        except ValueError as exc:
            raise AutoscalerArgError(f"release: {exc}") from None
    return AutoscalerSettings(**found)  # type: ignore[arg-type]  # each field typed by its own flag's parser
