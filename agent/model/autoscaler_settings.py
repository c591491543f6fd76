"""The cluster-autoscaler's settings that decide a node's verdict, in the autoscaler's own flag names.

An operator copies them from the autoscaler Deployment's args (``--name=value``), so the agent reads exactly that
form: as ``run`` and ``explain`` flags, and in ``NRA_AUTOSCALER_ARGS``. ``release`` says which autoscaler release
computes pod requests (before 1.33 it ignores in-place-resize status and pod-level resources; ``neon`` is neon's
patched 1.31.1, which also applies ``vm.neon.tech/usage``).
"""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

__all__ = ["AutoscalerSettings", "AutoscalerArgError", "DEFAULT_AUTOSCALER", "parse_autoscaler_args"]


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


def parse_autoscaler_args(args: Iterable[str], *, release: str | None = None) -> AutoscalerSettings:
    """Settings from ``--name=value`` words (the autoscaler's flags; others it has are ignored, a known flag with a
    bad value is an AutoscalerArgError); ``release`` "1.<minor>" or "neon"."""
    raise NotImplementedError  # issue 31: model helper
