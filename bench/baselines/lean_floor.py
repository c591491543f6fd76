"""The issue-30 RSS floor: what an agent in a pod cannot do without, and nothing of the kubernetes package.

Interpreter + one TLS connection to the API server (urllib3, as the agent's
own transport: GET /version with the service account's CA and token, the
connection kept in its pool) + psutil (reading the process's CPU times) +
opentelemetry-sdk with its OTLP/HTTP exporter, exporting the very points the
agent exported through observable gauges every ``interval`` seconds. No
watch, no decoding, no HTTP endpoint, no kubernetes package.

With INTERVAL 0 it is the floor as issue 30 words it: the same packages
imported and the connection held, psutil read every second, nothing exported.

Run by bench/floor_program.py with the production venv's interpreter:
python lean_floor.py SERVER CA_FILE TOKEN POINTS_JSON INTERVAL
"""

import sys
import time

import psutil
import urllib3
from floor import hold_and_export  # this folder is the script's: on sys.path (it imports the SDK and the exporter)


def main() -> None:
    server, ca_file, token, points_file = sys.argv[1:5]
    interval = float(sys.argv[5])
    pool = urllib3.PoolManager(cert_reqs="CERT_REQUIRED", ca_certs=ca_file, retries=False)
    # The whole answer read, so the connection goes back to the pool and is kept open.
    _version = pool.request("GET", server + "/version", headers={"Authorization": f"Bearer {token}"}).data
    if interval:
        hold_and_export(points_file, interval)
        return
    process = psutil.Process()
    print("ready", flush=True)
    while True:
        process.cpu_times()
        time.sleep(1)


if __name__ == "__main__":
    main()
