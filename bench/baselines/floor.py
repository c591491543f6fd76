"""The RSS floor: only the packages the design mandates, loaded and holding the agent's points.

Interpreter + kubernetes configuration and API client (loaded from the same
kubeconfig) + psutil (reading the process's CPU times, as the agent reads
/proc) + opentelemetry-sdk with the SDK's own OTLP/HTTP exporter, exporting
the very points the agent exported (read from a file) through observable
gauges every ``interval`` seconds. No watch, no decoding, no HTTP endpoint:
whatever the agent needs beyond this is its own cost.

With ``connect``, the client also asks the API server once (GET /version)
and keeps that connection in its pool: against a TLS API server, which every
real one is, that is the least any client pays for TLS (OpenSSL's context,
the CA store and the handshake's code and tables, about 1.3 MiB), and the
agent cannot do without it.

Run by bench/floor_program.py (the memory and idle benchmarks) with the production venv's interpreter:
python floor.py KUBECONFIG POINTS_JSON INTERVAL [connect]
"""

import functools
import json
import sys
import time
from collections import defaultdict

import psutil
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.metrics import Observation
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader


def main() -> None:
    from kubernetes import config
    from kubernetes.client import ApiClient, Configuration

    kubeconfig, points_file, interval = sys.argv[1], sys.argv[2], float(sys.argv[3])
    configuration = Configuration()
    config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
    api = ApiClient(configuration)  # loaded and held, as the agent holds its client
    if sys.argv[4:] == ["connect"]:
        method, url, headers, _, _ = api.param_serialize("GET", "/version", auth_settings=["BearerToken"])
        api.call_api(method, url, headers).read()
    hold_and_export(points_file, interval)


def _observe(points: list[tuple[dict, float]], _options: object) -> list[Observation]:
    return [Observation(v, a) for a, v in points]


def hold_and_export(points_file: str, interval: float) -> None:
    """The points as observable gauges exported every ``interval`` seconds by the SDK, and psutil reading the
    process's CPU times as often; says "ready" and never returns (lean_floor.py shares it)."""
    by_metric: defaultdict[str, list[tuple[dict, float]]] = defaultdict(list)
    with open(points_file) as f:
        for name, attributes, value in json.load(f):
            by_metric[name].append((attributes, value))
    reader = PeriodicExportingMetricReader(OTLPMetricExporter(), export_interval_millis=interval * 1000)
    meter = MeterProvider(metric_readers=[reader]).get_meter("floor")
    for name, points in by_metric.items():
        meter.create_observable_gauge(name, callbacks=[functools.partial(_observe, points)])
    process = psutil.Process()
    print("ready", flush=True)
    while True:
        process.cpu_times()
        time.sleep(interval)


if __name__ == "__main__":
    main()
