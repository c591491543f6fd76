"""Hypothesis strategies for hostile input: any JSON value, any quantity string, pods with arbitrary JSON spliced in."""

import json

from hypothesis import strategies as st

from testkit.factory import container, pod

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=20,
)
quantities = st.one_of(st.sampled_from(["1", "250m", "1Gi", "-1", "1e999", "x", "", "1.5", "0"]), st.text(max_size=10))


@st.composite
def messy_pods(draw):
    p = pod(draw(st.text(min_size=1, max_size=10)), phase=draw(st.sampled_from(["Running", "Pending", "Succeeded", "Failed", "", "?"])),
            containers=[container(f"c{i}", draw(quantities), draw(quantities)) for i in range(draw(st.integers(0, 3)))],
            init_containers=[container(f"i{i}", draw(quantities), draw(quantities),
                                       restart_policy=draw(st.sampled_from([None, "Always", "Never"])))
                             for i in range(draw(st.integers(0, 3)))])
    if draw(st.booleans()):
        usage = draw(st.one_of(st.text(max_size=30), st.builds(lambda c, m: json.dumps({"cpu": c, "memory": m}), quantities, quantities),
                               json_values.map(json.dumps)))
        p["metadata"]["annotations"] = {"vm.neon.tech/usage": usage}
        if draw(st.booleans()):
            p["metadata"]["annotations"]["vm.neon.tech/overcommit"] = draw(
                st.builds(lambda c, m: json.dumps({"cpu": c, "memory": m}), quantities, quantities))
    # Splice arbitrary JSON into random places of the object.
    if draw(st.booleans()):
        names = [c["name"] for c in p["spec"]["containers"] + p["spec"].get("initContainers", [])]
        field = draw(st.sampled_from(["containerStatuses", "initContainerStatuses"]))
        p["status"][field] = [{"name": n, "allocatedResources": {"cpu": draw(quantities)},
                               "resources": {"requests": {"cpu": draw(quantities), "memory": draw(quantities)}}}
                              for n in names if draw(st.booleans())]
        p["status"]["allocatedResources"] = {"memory": draw(quantities)}
        p["status"]["resources"] = {"requests": {"cpu": draw(quantities)}}
        if draw(st.booleans()):
            p["status"]["conditions"] = [{"type": "PodResizePending", "reason": "Infeasible"}]
    for path in draw(st.lists(st.sampled_from(["spec", "status", "metadata", "spec.containers", "spec.overhead",
                                               "spec.resources", "status.containerStatuses", "status.conditions",
                                               "status.initContainerStatuses", "status.allocatedResources",
                                               "status.resources", "metadata.ownerReferences", "metadata.labels"]),
                              max_size=3)):
        parent, _, leaf = path.rpartition(".")
        target = p
        for part in filter(None, parent.split(".")):
            target = target.get(part) if isinstance(target, dict) else None
        if isinstance(target, dict):
            target[leaf] = draw(json_values)
    return p
