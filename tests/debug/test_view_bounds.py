"""Each debug view's memory is bounded whatever the pods hold (issue 38, item 4 and the debug endpoint's bounds).

Four pods of 10,000 containers each (the API server admits them where etcd's request limit is raised) once raised one /debug/pods from 76 to 124 MiB of
the agent's peak; now their records keep at most MAX_CONTAINERS lines of each list, /debug/pods is paged
(``?limit=&continue=``, and at most PAGE_BYTES of JSON a page) and the page shows at most PAGE_ROWS pods. The views
are rendered through the endpoint's own route, in-process, their peak allocation traced.
"""

from __future__ import annotations

import json
import tracemalloc

import pytest

from agent.config import Address
from agent.debug.endpoint import PAGE_BYTES, PAGE_PODS, DebugServer
from agent.decode.reader import POD
from agent.model.container_bound import MAX_CONTAINERS
from agent.pipeline.events import PodsListed
from agent.pipeline.handler import Handler
from agent.pipeline.state import NodeState
from agent.report.views import MAX_PROBLEMS_SHOWN
from agent.telemetry.health import HealthLimits
from agent.telemetry.stats import RuntimeStats
from testkit.factory import container, pod

#: What rendering one view may allocate at its peak, above what the state holds: four 10,000-container pods rendered
#: one by one took about 48 MiB.
VIEW_PEAK_BOUND = 4 << 20


def wide(name: str, n: int = 10_000) -> dict:
    return pod(name, containers=[container(f"c{i}", "1m", "1Mi") for i in range(n)],
               init_containers=[container(f"i{i}", "2m", "2Mi", restart_policy="Always" if i % 3 else None)
                                for i in range(n)])


@pytest.fixture
def serve():
    made: list[DebugServer] = []

    def make(*pods: dict) -> DebugServer:
        state, stats = NodeState("node-a"), RuntimeStats()
        Handler(state=state, metrics=stats).handle(PodsListed(pods=tuple(POD.record(p) for p in pods)))
        server = DebugServer(Address(host="127.0.0.1", port=0), state, stats,
                             HealthLimits(source=10, handler=5, export=20, stale=240))
        made.append(server)
        return server

    yield make
    for server in made:
        server.stop()


def peak(render) -> tuple[int, tuple[int, str, bytes]]:
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        answer = render()
        return tracemalloc.get_traced_memory()[1] - base, answer
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("path", ["/debug/pods", "/", "/debug/node", "/metrics"])
def test_four_pods_of_ten_thousand_containers_cost_each_view_a_bounded_peak(serve, path):
    server = serve(*(wide(f"wide-{i}") for i in range(4)))
    used, (status, _, body) = peak(lambda: server.route(path))
    assert status == 200 and used < VIEW_PEAK_BOUND, used
    if path == "/debug/pods":
        pods = json.loads(body)["pods"]
        assert len(pods) == 4
        for shown in pods:
            # Every pod is there with its exact value (app containers plus sidecars: more than any init container's
            # peak); its lines are bounded and the folding is said.
            assert shown["cpu_cores"] == pytest.approx(10_000 * 0.001 + sum(0.002 for i in range(10_000) if i % 3))
            assert len(shown["contributions"]) <= 2 * MAX_CONTAINERS + 3
            assert any("per-container detail dropped" in p for p in shown["problems"])


def test_pods_are_paged_with_limit_and_continue_each_once_in_order(serve):
    server = serve(*(pod(f"p{i:02d}", namespace=f"ns{i % 3}") for i in range(25)))
    seen, query, pages = [], "limit=7", 0
    while True:
        status, _, body = server.route("/debug/pods", query)
        page = json.loads(body)
        assert status == 200 and len(page["pods"]) <= 7 and page["totals"]["pods_reported"] == 25
        seen += [(p["namespace"], p["name"]) for p in page["pods"]]
        pages += 1
        assert page["remaining"] == 25 - len(seen)
        if page["continue"] is None:
            break
        query = f"limit=7&continue={page['continue']}"
    assert pages == 4 and seen == sorted(seen) and len(set(seen)) == 25
    everything = json.loads(server.route("/debug/pods")[2])
    assert [(p["namespace"], p["name"]) for p in everything["pods"]] == seen and everything["continue"] is None


@pytest.mark.parametrize("query", ["limit=0", f"limit={PAGE_PODS + 1}", "limit=x", "limit=1&limit=2", "page=2",
                                   "continue=not-a-token", "continue=" + "A" * 5000, "limit"])
def test_a_query_the_pods_view_does_not_understand_is_a_400_with_one_line(serve, query):
    status, _, body = serve(pod("a")).route("/debug/pods", query)
    assert status == 400 and "\n" not in json.loads(body)["error"]


def test_a_page_ends_at_its_byte_budget_and_says_where_the_next_begins(serve):
    """Pods of 40 containers each weigh ~6 KB of JSON: a page of 500 would be 3 MB, so the budget ends it sooner. The
    budget is what is served (indented JSON: about 1.7 times the compact text once counted instead)."""
    server = serve(*(pod(f"p{i:03d}", containers=[container(f"c{j}", "1m", "1Mi") for j in range(40)])
                     for i in range(500)))
    status, _, body = server.route("/debug/pods")
    page = json.loads(body)
    assert status == 200 and 0 < len(page["pods"]) < 500 and page["continue"]
    assert page["remaining"] == 500 - len(page["pods"])
    one_pod = len(body) / len(page["pods"])
    assert PAGE_BYTES - 2 * one_pod - 8192 < len(body) <= PAGE_BYTES  # full, and within the budget


def test_a_pod_with_thousands_of_problems_shows_a_bounded_count_of_them(serve):
    p = pod("odd", containers=[{"name": f"c{i}", "resources": {"requests": {"cpu": "lots"}}} for i in range(5000)])
    shown = json.loads(serve(p).route("/debug/pods")[2])["pods"][0]["problems"]
    assert len(shown) == MAX_PROBLEMS_SHOWN + 1 and shown[-1].endswith("more problems not shown")
