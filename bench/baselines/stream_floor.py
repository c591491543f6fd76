"""The floor of the event path: a watch stream read over HTTPS, each line parsed by ``json.loads``, nothing else.

The issue's yardstick is "json.loads of the same bytes"; a process that only
parses cannot get the bytes, so the floor also pays the least any Python
client pays to receive them: one TLS connection (the standard library's
``ssl`` and ``http.client``, the layer urllib3 itself is built on), the
chunked body read with ``read1`` (at most one HTTP chunk per call, as the
body arrives), lines cut at the newline, ``json.loads`` of each. No decoding
into records, no queue, no state: what the agent does beyond this is its own
cost.

Run by bench/stream.py with the production venv's interpreter:
python stream_floor.py URL CA_FILE TOKEN LINES_PER_BURST
It prints "ready" once the watch answered, then "burst" after every LINES_PER_BURST lines.
"""

import http.client
import json
import ssl
import sys
import urllib.parse


def main() -> None:
    url, ca_file, token, per_burst = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    target = urllib.parse.urlsplit(url)
    if target.hostname is None:
        raise SystemExit(f"stream_floor.py: {url} names no host")
    conn = http.client.HTTPSConnection(target.hostname, target.port,
                                       context=ssl.create_default_context(cafile=ca_file))
    conn.request("GET", f"{target.path}?{target.query}",
                 headers={"Authorization": f"Bearer {token}", "Accept": "application/json"})
    response = conn.getresponse()
    if response.status != 200:
        raise SystemExit(f"watch answered {response.status}")
    print("ready", flush=True)
    rest, lines = b"", 0
    while chunk := response.read1(65536):
        *complete, rest = (rest + chunk).split(b"\n")
        for line in complete:
            if line:
                json.loads(line)
                lines += 1
                if lines == per_burst:
                    lines = 0
                    print("burst", flush=True)


if __name__ == "__main__":
    main()
