"""The cluster-autoscaler's settings that decide a node's verdict, in the autoscaler's own flag names, and its flag
grammar.

An operator copies them from the autoscaler Deployment's args, so the agent reads exactly that form: as ``run`` and
``explain`` flags, and in ``NRA_AUTOSCALER_ARGS``. ``release`` says which autoscaler release computes pod requests
(before 1.33 it ignores in-place-resize status and pod-level resources; ``neon`` is neon's patched 1.31.1, which also
applies ``vm.neon.tech/usage``).

The words are read as the autoscaler reads them, in one place, ``go_flag_words``: its flags are Go ``flag`` flags
handed to spf13/pflag (``kube_flag.InitFlags``: ``AddGoFlagSet``, names normalized ``_`` to ``-``), so
``--name=value``, ``--name value`` (not for a boolean: a boolean alone is true and never takes the next word), two
dashes (one only for the one-letter ``-v``); booleans take Go's ``strconv.ParseBool`` spellings, durations
``time.ParseDuration``'s syntax, numbers ``strconv.ParseFloat``'s and ``ParseInt``'s. Its flags the verdict does not
depend on (model.autoscaler_flags, extracted from its source) are accepted, their values checked, and ignored, so the
whole args list can be pasted; a flag it does not have is an error naming it, since it means the list was not what
the operator thought.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping

import msgspec

from agent.model.autoscaler_flags import BOOL, CLUSTER_AUTOSCALER, COMPONENT_BASE, FLOAT, INT, KLOG, UINT
from agent.model.autoscaler_flags import DURATION as DURATION_KIND

__all__ = ["AutoscalerSettings", "AutoscalerArgError", "AutoscalerFlag", "AUTOSCALER_FLAGS", "BOOLEAN", "COUNT",
           "DURATION", "RATIO", "DEFAULT_AUTOSCALER", "FlagType", "parse_autoscaler_args", "parse_release", "RELEASES",
           "NEON", "parse_go_duration", "parse_go_float", "go_flag_words", "FLAG_KINDS"]


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
    # A pod whose ReplicaSet/ReplicationController wants fewer replicas blocks (where controllers are known).
    min_replica_count: int = 0


DEFAULT_AUTOSCALER = AutoscalerSettings()

#: neon's patched autoscaler (neondatabase/autoscaling cluster-autoscaler/ca.patch on cluster-autoscaler 1.31.1).
NEON = "neon"
#: The releases the agent knows the rules of: 1.28 to 1.38, and neon's.
RELEASES: tuple[str, ...] = (*(f"1.{minor}" for minor in range(28, 39)), NEON)

# strconv.ParseBool
_TRUE = {"1", "t", "T", "TRUE", "true", "True"}
_FALSE = {"0", "f", "F", "FALSE", "false", "False"}
# Go's literals, ASCII only (Python's \d and float() also take other scripts' digits, and float() spaces): decimal
# digits with "_" only between digits, as strconv accepts them.
_DIGITS = r"[0-9](?:_?[0-9])*"
_GO_FLOAT = re.compile(rf"[+-]?(?:{_DIGITS}(?:\.(?:{_DIGITS})?)?|\.{_DIGITS})(?:[eE][+-]?{_DIGITS})?")
_GO_HEX_FLOAT = re.compile(r"[+-]?0[xX]_?(?:[0-9a-fA-F](?:_?[0-9a-fA-F])*)?(?:\.(?:[0-9a-fA-F](?:_?[0-9a-fA-F])*)?)?"
                           rf"[pP][+-]?{_DIGITS}")
_GO_INFINITY = re.compile(r"[+-]?(?:inf|infinity)", re.IGNORECASE)
_GO_INT = re.compile(r"0[xX](?:_?[0-9a-fA-F])+|0[oO](?:_?[0-7])+|0[bB](?:_?[01])+|0(?:_?[0-7])*|[1-9](?:_?[0-9])*")
# time.ParseDuration's units in nanoseconds; it counts in int64 nanoseconds and so does parse_go_duration.
_UNITS = {"ns": 1, "us": 10**3, "µs": 10**3, "μs": 10**3, "ms": 10**6, "s": 10**9, "m": 60 * 10**9, "h": 3600 * 10**9}
# One part: a number (its whole digits, a fraction's) and its unit, each possibly empty (checked apart).
_DURATION_PART = re.compile(r"([0-9]*)(?:\.([0-9]*))?([^0-9.]*)")
_MAX_NS = 1 << 63


def parse_go_duration(text: str) -> float:
    """Seconds of a Go duration ("1h", "30m", "90s", "1h30m", "1.5h", ".5h", "0", "-1m"), computed as
    ``time.ParseDuration`` computes it (int64 nanoseconds, a fraction's digits truncated the same way); ValueError
    where it refuses (a bare number other than 0, an unknown unit, out of range)."""
    def refused(why: str = "") -> ValueError:
        return ValueError(f"{text[:40]!r} is not a Go duration (such as 1h, 30m, 90s, 1h30m{why})")

    negative, rest = text[:1] == "-", text[1:] if text[:1] in ("-", "+") else text
    if rest == "0":
        return 0.0
    if not rest:
        raise refused()
    total, at = 0, 0
    while at < len(rest):
        part = _DURATION_PART.match(rest, at)
        if part is None or not (part[1] or part[2]):  # never None: every piece of the pattern may be empty
            raise refused()
        whole, fraction, unit = part[1], part[2], part[3]
        if not unit:
            raise refused(": a number needs its unit")
        if unit not in _UNITS:
            raise refused(f": no unit {unit!r}")
        at, scale = part.end(), _UNITS[unit]
        value = int(whole or "0")
        if value > _MAX_NS // scale:
            raise refused(": out of range")
        value *= scale
        if fraction:
            # leadingFraction: digits past what a uint64 holds are dropped; the part is truncated to a nanosecond.
            digits, divisor = 0, 1.0
            for c in fraction:
                if digits > _MAX_NS // 10:
                    break
                digits, divisor = digits * 10 + int(c), divisor * 10
            value += int(float(digits) * (float(scale) / divisor))
        total += value
        if total > _MAX_NS:
            raise refused(": out of range")
    if not negative and total > _MAX_NS - 1:
        raise refused(": out of range")
    return (-total if negative else total) / 1e9


def parse_go_float(text: str) -> float:
    """A number as ``strconv.ParseFloat(text, 64)`` reads it (decimal or hexadecimal, "_" between digits, inf and
    nan words); ValueError for what it refuses, including a finite number too large for a float64."""
    if _GO_FLOAT.fullmatch(text):
        value = float(text)
    elif _GO_HEX_FLOAT.fullmatch(text):
        sign, body = ("-", text[1:]) if text[0] == "-" else ("", text.lstrip("+"))
        value = float.fromhex(sign + body.replace("_", ""))
    elif _GO_INFINITY.fullmatch(text) or text.lower() == "nan":
        return float(text)
    else:
        raise ValueError(f"{text[:40]!r} is not a number")
    if value in (float("inf"), float("-inf")):
        raise ValueError(f"{text[:40]!r} is out of a float64's range")
    return value


def _go_int(text: str, *, signed: bool = True) -> int:
    """A whole number as ``strconv.ParseInt(text, 0, 64)`` (``ParseUint`` when not ``signed``) reads it: 0x, 0o, 0b
    and a leading 0 (octal) prefixes, "_" between digits."""
    sign, body = (text[0], text[1:]) if signed and text[:1] in ("+", "-") else ("", text)
    if not _GO_INT.fullmatch(body):
        raise ValueError(f"{text[:40]!r} is not a whole number")
    digits = body.replace("_", "")
    value = int(digits, 8) if len(digits) > 1 and digits[0] == "0" and digits[1].isdigit() else int(digits, 0)
    value = -value if sign == "-" else value
    if not (-(1 << 63) <= value < 1 << 63 if signed else value < 1 << 64):
        raise ValueError(f"{text[:40]!r} is out of range")
    return value


def _go_bool(text: str) -> bool:
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError(f"{text[:40]!r} is not a boolean (true or false)")


def _ratio(text: str) -> float:
    value = parse_go_float(text)
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
    """How one of the autoscaler's flags is written: its Go kind (model.autoscaler_flags: a BOOL alone is true), its
    value's parser (the text as Go's flag package reads it, and the range the agent takes; a ValueError says what is
    wrong without naming the flag), and how its default reads."""

    kind: str
    metavar: str
    parse: Callable[[str], object]
    show: Callable[[object], str] = str


BOOLEAN = FlagType(kind=BOOL, metavar="BOOL", parse=_go_bool, show=lambda value: str(value).lower())
RATIO = FlagType(kind=FLOAT, metavar="RATIO", parse=_ratio)
DURATION = FlagType(kind=DURATION_KIND, metavar="DURATION", parse=_duration, show=_show_duration)
COUNT = FlagType(kind=INT, metavar="N", parse=_go_int)  # Go's int flag: any whole number, negatives too


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
    AutoscalerFlag(field="min_replica_count", type=COUNT,
                   help="the autoscaler's: a pod whose ReplicaSet or ReplicationController wants fewer replicas "
                        "blocks removal (only where the controllers are known: explain with them in the dump or "
                        "--live)"),
)
_BY_NAME = {flag.name: flag for flag in AUTOSCALER_FLAGS}


def _normalized(name: str) -> str:
    """A flag's name as the autoscaler looks it up: pflag's WordSepNormalizeFunc makes ``log_dir`` ``log-dir``."""
    return name.replace("_", "-")


#: Every flag of the autoscaler's binary, by its normalized name, with its Go kind (model.autoscaler_flags).
FLAG_KINDS: dict[str, str] = {_normalized(name): kind for table in (KLOG, COMPONENT_BASE, CLUSTER_AUTOSCALER)
                              for name, kind in table.items()}
#: pflag gives a one-letter Go flag a one-dash shorthand (``-v=4``, ``-v4``, ``-v 4``); no other takes one dash.
_SHORTHANDS = {name for name in FLAG_KINDS if len(name) == 1}
#: How each kind's value is checked, as Go's flag package parses it; TEXT takes anything.
_CHECKS: dict[str, Callable[[str], object]] = {
    BOOL: _go_bool, DURATION_KIND: parse_go_duration, FLOAT: parse_go_float, INT: _go_int,
    UINT: lambda text: _go_int(text, signed=False)}


def _unknown(word: str, own: Mapping[str, bool]) -> AutoscalerArgError:
    """An unknown flag, named, with the closest flag of the agent's or the autoscaler's when there is one; a long
    name with one dash is told to take two, as pflag reads only ``-v`` so."""
    import difflib  # only for this error: not resident in the agent that runs with good flags

    name = word.partition("=")[0]
    if not name.startswith("--") and _normalized(name[1:]) in FLAG_KINDS.keys() | {f[2:] for f in own}:
        return AutoscalerArgError(f"unknown flag {name[:60]}: a long flag takes two dashes (-{name[:60]})")
    known = [*(f for f in own if f.startswith("--")), *(f"--{n}" for n in FLAG_KINDS)]
    close = difflib.get_close_matches("--" + _normalized(name.lstrip("-")), known, n=1)
    whose = "neither the agent's nor the cluster-autoscaler's" if own else "not one of the cluster-autoscaler's"
    return AutoscalerArgError(f"unknown flag {name[:60]}" + (f" (did you mean {close[0]}?)" if close else "")
                              + f": {whose}")


#: The autoscaler's flags the agent reads no value of, but whose value changes what the verdict would compute: named
#: in a warning when given, so an ignored flag is never silently ignored.
_NOT_APPLIED = {"feature-gates": "the verdict assumes the release's default feature gates (PodLevelResources and "
                                 "InPlacePodVerticalScaling change which requests the autoscaler counts)"}


def go_flag_words(words: Iterable[str], *, own: Mapping[str, bool] | None = None, notes: list[str] | None = None,
                  lenient: bool = False) -> list[str]:
    """``words`` read as the autoscaler's flag parser (pflag) reads them, rewritten for a reader of plain words.

    The one place of that grammar, for the command line (cli.py hands the result to argparse) and for
    NRA_AUTOSCALER_ARGS (parse_autoscaler_args): a rewriting pass rather than a second parser, so argparse keeps the
    agent's own flags, their help and their errors, and every error stays one line.

    - A flag of the verdict's (AUTOSCALER_FLAGS) becomes one ``--name=value`` word: a boolean alone is ``=true`` and
      never takes the next word; another kind without "=" takes the next word whatever it is, as pflag does.
    - ``own``, the agent's own flags (option string: whether it takes a value), pass as written with their value
      word; they win over the autoscaler's flags of the same name (``--kubeconfig``, ``--namespace``, ``--version``).
    - The autoscaler's other flags (FLAG_KINDS) are dropped, their value checked as its Go kind.
    - ``--`` and what follows it, ``-``, and words that are not flags pass as written.
    A flag neither has, a bad value of a dropped flag, a missing value, or a boolean alone followed by a boolean's
    spelling (``--flag false`` is true and a stray word in Go; written ``--flag=false``) is an AutoscalerArgError
    naming the flag. A flag of _NOT_APPLIED's is dropped with a warning in ``notes``. ``lenient`` (for the args
    list pasted from a Deployment, which the agent does not control and must not stop on) reads what the autoscaler
    itself would accept as it would, with a warning in ``notes`` instead of an error: a flag neither has is dropped
    with the word after it when that is no flag (a newer autoscaler's flag and its value, or so it looks), and a
    boolean alone followed by ``false`` is true, the word ignored (pflag leaves it a positional word the autoscaler
    never reads).
    """
    notes = [] if notes is None else notes
    own = own or {}
    words, out, i = list(words), [], 0

    def value_of(name: str, given: str | None, shown: str = "") -> str:
        nonlocal i
        shown = shown or f"--{name}"
        if given is not None:
            return given
        if FLAG_KINDS.get(name) == BOOL:
            if i < len(words) and words[i] in _TRUE | _FALSE:
                message = (f"{shown} alone means true and {words[i]!r} after it is not a flag (a boolean takes its "
                           f"value after =: {shown}={words[i]})")
                if not lenient:
                    raise AutoscalerArgError(message)
                notes.append(message + ": read as true, as the autoscaler reads it")
                i += 1
            return "true"
        if i >= len(words):
            raise AutoscalerArgError(f"{shown}: needs a value")
        i += 1
        return words[i - 1]

    def check(name: str, text: str, shown: str = "") -> None:
        try:
            _CHECKS.get(FLAG_KINDS[name], str)(text)
        except ValueError as exc:
            raise AutoscalerArgError(f"{shown or '--' + name}: {exc}") from None

    while i < len(words):
        word = words[i]
        i += 1
        if word == "--":
            out += words[i - 1:]
            break
        if not word.startswith("-") or word == "-":
            out.append(word)
            continue
        option, eq, given = word.partition("=")
        if word.startswith("--"):
            name = _normalized(option[2:])
            if not name or name[0] == "-":
                raise AutoscalerArgError(f"bad flag syntax: {word[:60]}")
            if name in _BY_NAME:
                out.append(f"--{name}={value_of(name, given if eq else None)}")
            elif option in own:
                out.append(word)
                if own[option] and not eq and i < len(words):
                    out.append(words[i])
                    i += 1
            elif name in FLAG_KINDS:
                check(name, value := value_of(name, given if eq else None))
                if name in _NOT_APPLIED and value:
                    notes.append(f"--{name}={value[:60]} is not applied: {_NOT_APPLIED[name]}")
            elif lenient:
                notes.append(f"{option[:60]}: no cluster-autoscaler the agent knows has this flag; ignored")
                if not eq and i < len(words) and not words[i].startswith("-"):
                    i += 1
            else:
                raise _unknown(word, own)
        elif word[:2] in own:
            out.append(word)
            if own[word[:2]] and len(word) == 2 and i < len(words):
                out.append(words[i])
                i += 1
        elif word[1] in _SHORTHANDS:  # pflag's -v=4, -v4, -v 4
            rest = word[2:]
            shown = f"-{word[1]}"
            check(word[1], value_of(word[1], rest[1:] if rest.startswith("=") else rest or None, shown), shown)
        else:
            raise _unknown(word, own)
    return out


def parse_release(text: str) -> str:
    """``1.<minor>`` of RELEASES or ``neon``; ValueError otherwise."""
    if text not in RELEASES:
        raise ValueError(f"unknown cluster-autoscaler release {text[:40]!r}; supported: "
                         f"{RELEASES[0]} to {RELEASES[-2]} and {NEON!r} (neon's patched 1.31.1)")
    return text


def parse_autoscaler_args(args: Iterable[str], *, release: str | None = None,
                          notes: list[str] | None = None) -> AutoscalerSettings:
    """Settings from the autoscaler's args, read by ``go_flag_words`` (its other flags checked and ignored; a
    word that is not a flag, a flag it does not have or a known flag with a bad value is an AutoscalerArgError);
    with ``notes`` (a list) read leniently, as the autoscaler reads them, what it would accept going there as a
    warning; ``release`` "1.<minor>" or "neon"."""
    words: list[object] = list(args)  # typed as text, but an environment's list is checked, not trusted
    for word in words:
        if not isinstance(word, str):
            raise AutoscalerArgError(f"autoscaler args: {str(word)[:60]!r} is not a flag (expected --name=value)")
    found: dict[str, object] = {}
    lenient = notes is not None
    for word in go_flag_words(words, notes=notes, lenient=lenient):  # type: ignore[arg-type]  # checked: text
        name, eq, raw = word.partition("=")
        flag = _BY_NAME.get(name[2:]) if name.startswith("--") and eq else None
        if flag is None and notes is not None:  # a positional word: pflag keeps it, the autoscaler never reads it
            notes.append(f"{word[:60]!r} is not a flag; ignored, as the autoscaler ignores it")
            continue
        if flag is None:
            raise AutoscalerArgError(f"autoscaler args: {word[:60]!r} is not a flag (expected --name=value)")
        try:
            found[flag.field] = flag.type.parse(raw)
        except ValueError as exc:
            raise AutoscalerArgError(f"--{flag.name}: {exc}") from None
    if release is not None:
        try:
            found["release"] = parse_release(release)
        except ValueError as exc:
            raise AutoscalerArgError(f"release: {exc}") from None
    return AutoscalerSettings(**found)  # type: ignore[arg-type]  # each field typed by its own flag's parser
