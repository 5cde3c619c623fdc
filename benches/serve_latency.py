"""Latency of `/search` on loopback: starts `ri-batch serve` on a finished run and sends N searches
(the run's own questions, each to its repository, k=10) from C clients at once, each over its own
keep-alive connection; with R > 0, POSTs /reload R times while the searches run (each reload opens
the run afresh and swaps it in). Prints p50/p95/max over all searches, over the first pass through
the questions (each repository opened on first use) and over questions asked again, and every
failed request (any status but 200, or a broken connection): there must be none. Also prints the
server's resident memory and threads when idle after start, at the end of the load, and 3 s later
(memory handed back after a load).

    python3 benches/serve_latency.py target/release/ri-batch outputs/multi-repo datasets/questions.jsonl 1000 [C] [R] [RETRIEVER]

RETRIEVER is bm25 (default), dense or hybrid (the run needs [embed]).
"""
import http.client
import json
import subprocess
import sys
import threading
import time
import urllib.parse

binary, run, questions, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
clients = int(sys.argv[5]) if len(sys.argv) > 5 else 1
reloads = int(sys.argv[6]) if len(sys.argv) > 6 else 0
retriever = sys.argv[7] if len(sys.argv) > 7 else "bm25"
server = subprocess.Popen([binary, "serve", run, "--addr", "127.0.0.1:0"], stdout=subprocess.PIPE, text=True)
failures = []
latencies = []
lock = threading.Lock()


def memory():
    """The server's resident set (MB) and thread count, from /proc."""
    fields = dict(line.split(":", 1) for line in open(f"/proc/{server.pid}/status"))
    return f"rss={int(fields['VmRSS'].split()[0]) / 1024:.0f} MB threads={fields['Threads'].strip()}"


def client(host, port, qs, start, count):
    conn = http.client.HTTPConnection(host, port)
    mine = []
    for i in range(start, start + count):
        q = qs[i % len(qs)]
        path = "/search?" + urllib.parse.urlencode({"q": q["question"], "repo": q["repo"], "k": 10, "retriever": retriever})
        t = time.perf_counter()
        try:
            conn.request("GET", path)
            r = conn.getresponse()
            r.read()
            if r.status != 200:
                failures.append(f"{path}: status {r.status}")
        except Exception as e:  # a broken connection is a failure too
            failures.append(f"{path}: {e!r}")
            conn = http.client.HTTPConnection(host, port)
        mine.append(((time.perf_counter() - t) * 1000, i >= len(qs)))
    with lock:
        latencies.extend(mine)


try:
    host, port = server.stdout.readline().strip().split("http://")[1].split(":")
    port = int(port)
    qs = [json.loads(line) for line in open(questions)]
    per = n // clients
    idle = memory()
    threads = [threading.Thread(target=client, args=(host, port, qs, c * per, per)) for c in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    done_reloads = 0
    for _ in range(reloads):
        time.sleep(0.2)
        conn = http.client.HTTPConnection(host, port)
        conn.request("POST", "/reload")
        r = conn.getresponse()
        body = r.read()
        if r.status != 200:
            failures.append(f"/reload: status {r.status} {body[:200]!r}")
        done_reloads += 1
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    loaded = memory()
    time.sleep(3)
    after = memory()
    def stats(ls):
        ls = sorted(ls)
        m = len(ls)
        if m == 0:
            return "none"
        return f"n={m} p50={ls[m // 2]:.2f} ms p95={ls[int(m * 0.95)]:.2f} ms max={ls[-1]:.2f} ms"

    m = len(latencies)
    print(
        f"all: {stats([l for l, _ in latencies])} clients={clients} reloads={done_reloads} "
        f"throughput={m / wall:.0f}/s failures={len(failures)}"
    )
    # A question asked again: its repository's scope and chunks are already open (unless a
    # reload swapped the run in between).
    print(f"  first pass over the questions: {stats([l for l, again in latencies if not again])}")
    print(f"  questions asked again:         {stats([l for l, again in latencies if again])}")
    print(f"  memory: idle {idle}; end of load {loaded}; 3 s later {after}")
    for f in failures[:10]:
        print("failed:", f)
    if failures:
        sys.exit(1)
finally:
    server.kill()
