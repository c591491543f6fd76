"""The cluster-autoscaler's settings that decide a node's verdict, in the autoscaler's own flag names.

An operator copies them from the autoscaler Deployment's args (``--name=value``), so the agent reads exactly that
form: as ``run`` and ``explain`` flags, and in ``NRA_AUTOSCALER_ARGS``. ``release`` says which autoscaler release
computes pod requests (before 1.33 it ignores in-place-resize status and pod-level resources; ``neon`` is neon's
patched 1.31.1, which also applies ``vm.neon.tech/usage``).

The words are read as the autoscaler's own flag parser (pflag over Go's ``flag``) reads them: ``--name=value``,
``--name value`` (not for a boolean) and, for a boolean, ``--name`` alone (true); one leading dash works too. Booleans take Go's
``strconv.ParseBool`` spellings, durations Go's ``time.ParseDuration`` syntax. Flags the verdict does not depend on
are accepted and ignored, so the whole args list can be pasted; a word that is not a flag is an error, since it
means the list was not what the operator thought.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import msgspec

__all__ = ["AutoscalerSettings", "AutoscalerArgError", "DEFAULT_AUTOSCALER", "parse_autoscaler_args",
           "RELEASES", "NEON", "parse_go_duration"]


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

_FLOATS = {"scale-down-utilization-threshold", "scale-down-gpu-utilization-threshold"}
_BOOLS = {"ignore-daemonsets-utilization", "ignore-mirror-pods-utilization", "skip-nodes-with-local-storage",
          "skip-nodes-with-system-pods", "skip-nodes-with-custom-controller-pods"}
_DURATIONS = {"blocking-system-pod-distruption-timeout"}
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


def _release(text: str) -> str:
    if text not in RELEASES:
        raise AutoscalerArgError(f"release: unknown cluster-autoscaler release {text[:40]!r}; supported: "
                                 f"{RELEASES[0]} to {RELEASES[-2]} and {NEON!r} (neon's patched 1.31.1)")
    return text


def _value(flag: str, raw: str) -> object:
    if flag in _BOOLS:
        if raw in _TRUE:
            return True
        if raw in _FALSE:
            return False
        raise AutoscalerArgError(f"--{flag}: {raw[:40]!r} is not a boolean (true or false)")
    if flag in _FLOATS:
        try:
            value = float(raw)
        except ValueError:
            raise AutoscalerArgError(f"--{flag}: {raw[:40]!r} is not a number") from None
        if not 0.0 <= value <= 1.0:  # NaN fails too
            raise AutoscalerArgError(f"--{flag}: {raw[:40]!r} is outside [0, 1]")
        return value
    try:
        seconds = parse_go_duration(raw)
    except ValueError as exc:
        raise AutoscalerArgError(f"--{flag}: {exc}") from None
    if seconds < 0:
        raise AutoscalerArgError(f"--{flag}: {raw[:40]!r} is negative")
    return seconds


def parse_autoscaler_args(args: Iterable[str], *, release: str | None = None) -> AutoscalerSettings:
    """Settings from ``--name=value`` words (the autoscaler's flags; others it has are ignored, a known flag with a
    bad value is an AutoscalerArgError); ``release`` "1.<minor>" or "neon"."""
    words = list(args)
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
        if name not in _BOOLS and name not in _FLOATS and name not in _DURATIONS:
            # Another of the autoscaler's flags: its value, if given apart, is the next word that is not a flag.
            if not eq and i < len(words) and not str(words[i]).startswith("-"):
                i += 1
            continue
        if not eq:
            if name in _BOOLS:
                # `--flag` alone is true, as Go's flag package reads a boolean; a value must follow "=" (pflag
                # would read `--flag false` as true and a stray "false", which here is a word that is not a flag).
                found[name.replace("-", "_")] = True
                continue
            if i >= len(words):
                raise AutoscalerArgError(f"--{name}: needs a value")
            raw = words[i]
            i += 1
        found[name.replace("-", "_")] = _value(name, raw)
    if release is not None:
        found["release"] = _release(release)
    return AutoscalerSettings(**found)  # type: ignore[arg-type]
