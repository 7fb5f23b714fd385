#!/usr/bin/python3
"""The response budget (--response-budget-mb, issue 38): /attention and /logit_lens answers hold
their bytes from before they are computed until they are sent, all clients together. 64 clients
that ask for the map of a 2000-token request (about 22 MB of JSON each) and never read must not
raise the daemon's RSS (/proc/PID/status VmRSS) by more than 300 MB: past the budget they get 503
with Retry-After (counted in /metrics), and once the stalled sockets are closed the budget is
whole again (a fresh reader gets its 200). Prints the RSS it measured."""
import os
import socket
import sys
import time

from attnd_daemon import Checker, Daemon, error_shape_ok, model

c = Checker("test_http_budget")
MODEL = model("tiny-llama-spm-f32.gguf")
N_TOKENS, READERS, LIMIT_MB = 2000, 64, 300
# measuring by hand: test_http_budget.py 100000 40 (a budget that never binds, a 40 s window)
BUDGET = sys.argv[1] if len(sys.argv) > 1 else None
WINDOW = float(sys.argv[2]) if len(sys.argv) > 2 else 10.0


def rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def stalled(port, path):
    """A client that sends the request and never reads (its receive buffer kept small)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(("127.0.0.1", port))
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    return s


args = ["--ctx", "2048", "--attention-max-tokens", "2048", "--max-connections", "200", "--max-per-client", "150",
        "--timeout-ms", "60000"]
if BUDGET:
    args += ["--response-budget-mb", BUDGET]
d = Daemon(MODEL, *args)
try:
    prompt = [1] + [(7 * i) % 3000 + 100 for i in range(N_TOKENS - 1)]
    g = d.generate(prompt=prompt, max_tokens=1, temperature=0)
    path = f"/attention?layer=0&head=0&id={g['id']}"
    r = d.get(path)
    c.check(r.status_code == 200 and r.json()["n_tokens"] == N_TOKENS + 1, f"one map read whole: {r.status_code}")
    size_mb = len(r.content) / 2**20
    time.sleep(0.5)
    base = peak = rss_mb(d.proc.pid)
    m0 = d.metrics().get('attnd_errors_total{type="service_unavailable"}', 0)
    socks = [stalled(d.port, path) for _ in range(READERS)]
    t0 = time.time()
    while time.time() - t0 < WINDOW:  # the maps are computed and queued; the sockets stay stalled
        peak = max(peak, rss_mb(d.proc.pid))
        time.sleep(0.02)
    refused = d.metrics().get('attnd_errors_total{type="service_unavailable"}', 0) - m0
    for s in socks:
        s.close()
    time.sleep(1.0)  # the daemon sees the readers gone and frees their answers
    after = rss_mb(d.proc.pid)
    print(f"map {size_mb:.1f} MB; RSS before {base:.0f} MB, peak {peak:.0f} MB (+{peak - base:.0f}) in {WINDOW:.0f} s, "
          f"after the readers left {after:.0f} MB; {refused:.0f} of {READERS} readers refused with 503"
          f" (--response-budget-mb {BUDGET or 'default 256'})")
    c.check(peak - base <= LIMIT_MB, f"{READERS} stalled readers raised RSS by {peak - base:.0f} MB (limit {LIMIT_MB})")
    if not BUDGET:
        c.check(refused >= READERS // 2, f"readers past the budget were refused with 503: {refused:.0f}")
        r = d.get(path + "&values=0")
        c.check(r.status_code == 200, f"once the readers left the budget is whole again: {r.status_code} {r.text[:120]}")
        # readers that arrive at once are admitted against the upper bound of their answer (about
        # 40 MB here) and hold only the body (28 MB) once computed, so a burst leaves room: add
        # stalled readers one by one until a fresh reader is refused (at most 24: 24 x 28 MB is
        # well past 256 MB)
        busy = []
        r = d.get(path)
        while r.status_code == 200 and len(busy) < 24:
            busy.append(stalled(d.port, path))
            time.sleep(0.5)
            r = d.get(path)
        print(f"a fresh reader refused with {len(busy)} stalled readers holding their answers")
        c.check(error_shape_ok(r, 503) is None and r.headers.get("Retry-After") == "1",
                f"while the budget is spent: {r.status_code} {r.headers.get('Retry-After')} {r.text[:120]}")
        for s in busy:
            s.close()
        r = d.get(f"/logit_lens?id={g['id']}&pos=5")
        c.check(r.status_code in (200, 503), f"/logit_lens draws on the same budget: {r.status_code}")
finally:
    c.check(d.stop() == 0, "exit status")
c.finish(f" (peak +{peak - base:.0f} MB)" if "peak" in dir() else "")
