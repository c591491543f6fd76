"""What a user would otherwise write: the kubernetes client's Watch with model objects, caching V1Pods.

Run by bench/versus.py as a subprocess next to the agent, on the same fake API server and event stream.
Usage: python alternative.py KUBECONFIG NODE
"""

import sys

from kubernetes import client, config, watch


def main() -> None:
    kubeconfig, node = sys.argv[1], sys.argv[2]
    config.load_kube_config(config_file=kubeconfig)
    v1 = client.CoreV1Api()
    selector = f"spec.nodeName={node}"
    listed = v1.list_pod_for_all_namespaces(field_selector=selector, resource_version="0")
    cache = {p.metadata.uid: p for p in listed.items if p.metadata is not None}
    print("synced", len(cache), flush=True)
    rv = listed.metadata.resource_version if listed.metadata is not None else None
    while True:
        for event in watch.Watch().stream(v1.list_pod_for_all_namespaces, field_selector=selector,
                                          resource_version=rv, timeout_seconds=300, allow_watch_bookmarks=True):
            obj = event["object"]
            if event["type"] == "BOOKMARK":
                continue
            rv = obj.metadata.resource_version
            if event["type"] == "DELETED":
                cache.pop(obj.metadata.uid, None)
            else:
                cache[obj.metadata.uid] = obj
                # The naive value: the sum of container requests.
                sum(float((c.resources.requests or {}).get("cpu", "0").rstrip("m") or 0)
                    for c in obj.spec.containers if c.resources)


if __name__ == "__main__":
    main()
