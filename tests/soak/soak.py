#!/usr/bin/python3
"""Soak: 16 loopback clients against a live `attnd serve` for N seconds (not part of make test:
`make soak SOAK_SECONDS=N`). Each client loops over a weighted mix: whole generations,
streamed generations, streams it abandons after a few events, bad requests (malformed JSON,
unknown fields, NUL escapes, out-of-range values, half-sent headers), /attention and
/logit_lens of finished requests, /health and /metrics. At the end it waits for the daemon to
go idle and reports requests done, errors by kind, RSS and open fds of the daemon (after a
warm-up, and at the end) and KV blocks in use. Exit 1 if RSS grew more than 5 % after the
warm-up, the fd count grew, KV blocks stayed in use, or any unexpected 5xx/connection error
was seen.   Usage: soak.py SECONDS [MODEL]   (env: ATTND, SHARED)"""
import collections
import json
import os
import random
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from attnd_daemon import Daemon, model  # noqa: E402

import requests  # noqa: E402

SECONDS = int(sys.argv[1]) if len(sys.argv) > 1 else 300
MODEL = sys.argv[2] if len(sys.argv) > 2 else model("stories260K.gguf")
CLIENTS = 16
WARMUP = min(60.0, SECONDS / 5)

lock = threading.Lock()
done = collections.Counter()      # requests completed, by kind
errors = collections.Counter()    # unexpected outcomes, by kind
expected = collections.Counter()  # expected refusals (4xx for the bad requests), by status
ids = []                          # finished request ids (for /attention, /logit_lens)


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def n_fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def note(kind, r, ok_codes=(200,)):
    with lock:
        if r.status_code in ok_codes:
            done[kind] += 1
        elif 400 <= r.status_code < 500 or r.status_code == 503:
            expected[f"{kind} {r.status_code}"] += 1
            done[kind] += 1
        else:
            errors[f"{kind} {r.status_code}"] += 1


def whole(d, rnd):
    body = {"prompt": rnd.choice(["Once upon a time", "The cat", "Lily and Ben", [1, 2, 3, 4]]),
            "max_tokens": rnd.randint(0, 24), "temperature": rnd.choice([0, 0.8]), "seed": rnd.randint(0, 99)}
    if rnd.random() < 0.3:
        body["logprobs"] = rnd.randint(1, 5)
    r = d.post("/v1/generate", body, timeout=120)
    note("whole", r)
    if r.status_code == 200:
        with lock:
            ids.append(r.json()["id"])
            del ids[:-8]


def stream(d, rnd, abandon):
    body = {"prompt": "Once upon a time", "max_tokens": rnd.randint(4, 48), "stream": True, "ignore_eos": True,
            "temperature": 0.8, "seed": rnd.randint(0, 99)}
    with d.post("/v1/generate", body, stream=True, timeout=120) as r:
        if r.status_code != 200:
            note("stream", r)
            return
        n, final = 0, False
        for line in r.iter_lines(chunk_size=None):
            if line.startswith(b"data: "):
                n += 1
                if line == b"data: [DONE]":
                    final = True
                elif b'"error"' in line:
                    with lock:
                        errors["stream error event"] += 1
                if abandon and n >= 3:
                    break  # closes the connection mid-stream
    with lock:
        if abandon:
            done["stream abandoned"] += 1
        elif final:
            done["stream"] += 1
        else:
            errors["stream without [DONE]"] += 1


BAD = [b'{"prompt":', b'{"prompt":"x","bogus":1}', b'{"prompt\\u0000x":"hi"}', b'{"prompt":"x","max_tokens":-1}',
       b'{"prompt":[99999999]}', b'[]', b'{"prompt":"x","temperature":"hot"}', b'{"prompt":""}']


def bad(d, rnd):
    if rnd.random() < 0.2:  # half a header, then gone
        s = socket.create_connection(("127.0.0.1", d.port), timeout=5)
        s.sendall(b"POST /v1/generate HTTP/1.1\r\nHost: x\r\nContent-Le")
        time.sleep(rnd.random() * 0.2)
        s.close()
        with lock:
            done["half header"] += 1
        return
    r = d.post("/v1/generate", rnd.choice(BAD), timeout=30)
    with lock:
        if 400 <= r.status_code < 500:
            done["bad request"] += 1
            expected[f"bad {r.status_code}"] += 1
        else:
            errors[f"bad request answered {r.status_code}"] += 1


def probe(d, rnd):
    with lock:
        rid = rnd.choice(ids) if ids else None
    if rid is None:
        return
    if rnd.random() < 0.5:
        r = d.get(f"/attention?layer={rnd.randint(0, 4)}&head={rnd.randint(0, 7)}&id={rid}", timeout=60)
        note("attention", r)
    else:
        r = d.get(f"/logit_lens?pos={rnd.randint(0, 3)}&id={rid}&top=5", timeout=60)
        note("logit_lens", r)


def misc(d, rnd):
    r = d.get(rnd.choice(["/health", "/metrics", "/v1/models"]), timeout=30)
    note("health/metrics", r)


ACTIONS = [(whole, 30), (lambda d, rnd: stream(d, rnd, False), 20), (lambda d, rnd: stream(d, rnd, True), 10),
           (bad, 15), (probe, 15), (misc, 10)]


def client(d, k, deadline):
    rnd = random.Random(k)
    fns, weights = zip(*ACTIONS)
    while time.time() < deadline:
        fn = rnd.choices(fns, weights)[0]
        try:
            fn(d, rnd)
        except requests.RequestException as e:
            with lock:
                errors[f"connection: {type(e).__name__}"] += 1
        except OSError as e:
            with lock:
                errors[f"socket: {type(e).__name__}"] += 1


def metric(d, name):
    for line in d.get("/metrics", timeout=30).text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            if line.split(" ")[0] == name:
                return float(line.split()[-1])
    return None


def main():
    d = Daemon(MODEL, "--ctx", "256", "--max-running", "16", "--kv-blocks", "512", "--timeout-ms", "10000")
    pid = d.proc.pid
    t0 = time.time()
    rss0, fd0 = rss_kb(pid), n_fds(pid)
    deadline = t0 + SECONDS
    threads = [threading.Thread(target=client, args=(d, k, deadline), daemon=True) for k in range(CLIENTS)]
    for t in threads:
        t.start()
    time.sleep(WARMUP)
    rss_w, fd_w = rss_kb(pid), n_fds(pid)
    samples = []
    while time.time() < deadline:
        time.sleep(min(30, max(0.1, deadline - time.time())))
        samples.append((round(time.time() - t0), rss_kb(pid), n_fds(pid)))
    for t in threads:
        t.join(180)
    time.sleep(12)  # past --timeout-ms: half-sent requests are closed, the scheduler is idle
    rss1, fd1 = rss_kb(pid), n_fds(pid)
    used = metric(d, 'attnd_kv_cache_blocks{state="used"}')
    running = metric(d, "attnd_requests_running")
    rc = d.stop()
    total = sum(done.values())
    growth = (rss1 - rss_w) / rss_w * 100 if rss_w else 0
    report = {"seconds": SECONDS, "clients": CLIENTS, "requests_done": total, "done_by_kind": dict(done),
              "expected_refusals": dict(expected), "unexpected_errors": dict(errors),
              "rss_kb": {"start": rss0, "after_warmup": rss_w, "end": rss1, "growth_after_warmup_pct": round(growth, 2)},
              "fds": {"start": fd0, "after_warmup": fd_w, "end": fd1},
              "kv_blocks_used_at_end": used, "requests_running_at_end": running, "exit_status": rc,
              "samples_s_rss_fds": samples}
    print(json.dumps(report, indent=None, separators=(",", ": ")).replace(', "', ',\n "'))
    fails = []
    if growth >= 5:
        fails.append(f"RSS grew {growth:.1f} % after warm-up")
    if fd1 > fd0:  # idle at start and at end: the same descriptors
        fails.append(f"fds grew {fd0} -> {fd1}")
    if used != 0:
        fails.append(f"{used} KV blocks still used")
    if errors:
        fails.append(f"unexpected errors {dict(errors)}")
    if rc != 0:
        fails.append(f"daemon exit status {rc}")
    print("soak: " + ("PASS" if not fails else "FAIL: " + "; ".join(fails)))
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
