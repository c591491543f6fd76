"""The issue-30 RSS floor: what an agent in a pod cannot do without, and nothing of the kubernetes package.

Interpreter + one TLS connection to the API server (urllib3, as the agent's
own transport: GET /version with the service account's CA and token, the
connection kept in its pool) + psutil (reading the process's CPU times) +
opentelemetry-sdk with its OTLP/HTTP exporter, exporting the very points the
agent exported through observable gauges every ``interval`` seconds. No
watch, no decoding, no HTTP endpoint, no kubernetes package.

Run by bench/floor_program.py with the production venv's interpreter:
python lean_floor.py SERVER CA_FILE TOKEN POINTS_JSON INTERVAL
"""

import json
import sys
import time
from collections import defaultdict

import psutil
import urllib3
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.metrics import Observation
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader


def main() -> None:
    server, ca_file, token, points_file, interval = sys.argv[1:5] + [float(sys.argv[5])]
    pool = urllib3.PoolManager(cert_reqs="CERT_REQUIRED", ca_certs=ca_file, retries=False)
    pool.request("GET", server + "/version", headers={"Authorization": f"Bearer {token}"}).data  # kept open
    by_metric = defaultdict(list)
    with open(points_file) as f:
        for name, attributes, value in json.load(f):
            by_metric[name].append((attributes, value))
    reader = PeriodicExportingMetricReader(OTLPMetricExporter(), export_interval_millis=interval * 1000)
    meter = MeterProvider(metric_readers=[reader]).get_meter("floor")
    for name, points in by_metric.items():
        meter.create_observable_gauge(name, callbacks=[lambda options, p=points: [Observation(v, a) for a, v in p]])
    process = psutil.Process()
    print("ready", flush=True)
    while True:
        process.cpu_times()
        time.sleep(interval)


if __name__ == "__main__":
    main()
