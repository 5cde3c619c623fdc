"""Latency of `/search` on loopback: starts `ri-batch serve` on a finished run, sends N searches
(the run's own questions, each to its repository, k=10) one after another over one keep-alive
connection, and prints p50/p95/max. Usage (after `ri-batch run pipelines/multi-repo.toml`):

    python3 benches/serve_latency.py target/release/ri-batch outputs/multi-repo datasets/questions.jsonl 1000
"""
import http.client
import json
import subprocess
import sys
import time
import urllib.parse

binary, run, questions, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
server = subprocess.Popen([binary, "serve", run, "--addr", "127.0.0.1:0"], stdout=subprocess.PIPE, text=True)
try:
    host, port = server.stdout.readline().strip().split("http://")[1].split(":")
    qs = [json.loads(line) for line in open(questions)]
    conn = http.client.HTTPConnection(host, int(port))
    latencies = []
    for i in range(n):
        q = qs[i % len(qs)]
        path = "/search?" + urllib.parse.urlencode({"q": q["question"], "repo": q["repo"], "k": 10})
        t = time.perf_counter()
        conn.request("GET", path)
        r = conn.getresponse()
        r.read()
        latencies.append((time.perf_counter() - t) * 1000)
        if r.status != 200:
            sys.exit(f"{path}: status {r.status}")
    latencies.sort()
    print(f"n={n} p50={latencies[n // 2]:.2f} ms p95={latencies[int(n * 0.95)]:.2f} ms max={latencies[-1]:.2f} ms")
finally:
    server.kill()
