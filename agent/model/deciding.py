"""Which term of Kubernetes' formula decided a pod's value, per resource.

A pod's request is max(app containers + sidecars, the highest init container
peak), replaced by pod-level requests where set, plus overhead; a NeonVM's
usage stands in for the first container. ``explain`` names the winning term
so a reader sees at once why a pod costs what it costs. Read back from the
contributions ``pod_requests`` lists (in its order), so both cannot disagree.
"""

from __future__ import annotations

from agent.model.pod import RESOURCES
from agent.model.valuation import SOURCE_VM_USAGE, PodValue

__all__ = ["deciding_terms", "describe_terms"]



def deciding_terms(value: PodValue) -> dict[str, str]:
    """``{"cpu": term, "memory": term}``: "containers", "containers + sidecars", "init NAME peak",
    "pod-level" or "vm usage", with " + overhead" when overhead adds to it; "nothing requested" for 0."""
    terms = {}
    for index, resource in enumerate(RESOURCES):
        app = sidecars = overhead = 0
        has_sidecar = resized = False
        best_init, best_peak, pod_level = "", -1, None
        for c in value.contributions:
            amount = (c.cpu, c.memory)[index]
            amount = 0 if amount is None else amount
            if c.kind == "container":
                app += amount
                resized = resized or c.note.startswith("resize")
            elif c.kind == "sidecar":
                app += amount
                sidecars += amount
                has_sidecar = has_sidecar or amount > 0
            elif c.kind == "init":
                if amount + sidecars > best_peak:
                    best_init, best_peak = c.name, amount + sidecars
            elif c.kind == "pod-level" and (c.cpu, c.memory)[index] is not None:
                pod_level = amount
            elif c.kind == "overhead":
                overhead += amount
        if pod_level is not None:
            term = "pod-level"
        elif best_peak > app:
            term = f"init {best_init} peak"
        elif value.source == SOURCE_VM_USAGE:
            term = "vm usage"
        elif app == 0:
            term = "nothing requested"
        else:
            term = "containers + sidecars" if has_sidecar else "containers"
            if resized:
                term += " (resize status)"
        if overhead:
            term = "overhead" if term == "nothing requested" else f"{term} + overhead"
        terms[resource] = term
    return terms


def describe_terms(value: PodValue) -> str:
    """One short phrase for a table cell."""
    if not value.reported:
        return "not reported"
    terms = deciding_terms(value)
    if terms["cpu"] == terms["memory"]:
        return terms["cpu"]
    return f"cpu: {terms['cpu']}; memory: {terms['memory']}"
