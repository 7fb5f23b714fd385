#!/usr/bin/python3
"""Closed-loop load on OpenAI-style completion servers: N clients, each sending one request after
another, every request a prompt of P random token ids and G generated tokens (greedy, EOS
ignored). Prints one markdown row per server and client count: generated tokens per second over
the whole level (first request sent to last answer), requests per second and the median latency.

    bench/load.py NAME=URL [NAME=URL ...] [--clients 1,4,8,16] [--prompt 128] [--gen 64]
                  [--requests 3] [--vocab 32000]

Several servers are measured level by level, taking turns (server A at 1 client, B at 1, A at 4,
...), so a slow spell of the machine falls on all of them; the last table gives each server's
rate over the first one's. Prompts differ per request (seeded), so no server answers from a prompt
cache. Both attnd and llama.cpp's llama-server take token-id prompts and "ignore_eos". Standard
library only.
"""
import argparse
import http.client
import json
import random
import statistics
import sys
import threading
import time
import urllib.parse


def one_request(url, prompt, gen):
    u = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=600)
    body = json.dumps({"prompt": prompt, "max_tokens": gen, "temperature": 0, "ignore_eos": True})
    t0 = time.time()
    conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    r = conn.getresponse()
    data = r.read()
    conn.close()
    if r.status != 200:
        raise RuntimeError("%s: HTTP %d %s" % (url, r.status, data[:200]))
    usage = json.loads(data).get("usage", {})
    return usage.get("completion_tokens", 0), time.time() - t0


def level(url, clients, requests, prompt_len, gen, vocab, seed):
    """Runs `clients` closed loops of `requests` requests; returns (gen tok/s, req/s, median s)."""
    lat, toks, errors = [], [0], []
    lock = threading.Lock()

    def client(ci):
        rng = random.Random(seed * 1000 + ci)
        for _ in range(requests):
            prompt = [rng.randrange(300, vocab) for _ in range(prompt_len)]
            try:
                n, dt = one_request(url, prompt, gen)
            except Exception as e:  # noqa: BLE001 - reported below
                with lock:
                    errors.append(str(e))
                return
            with lock:
                lat.append(dt)
                toks[0] += n

    ts = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    t0 = time.time()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    wall = time.time() - t0
    if errors:
        raise RuntimeError(errors[0])
    return toks[0] / wall, len(lat) / wall, statistics.median(lat)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("servers", nargs="+", help="NAME=URL")
    p.add_argument("--clients", default="1,4,8,16")
    p.add_argument("--prompt", type=int, default=128)
    p.add_argument("--gen", type=int, default=64)
    p.add_argument("--requests", type=int, default=3, help="per client and level")
    p.add_argument("--vocab", type=int, default=32000, help="prompt ids are drawn from [300, vocab)")
    a = p.parse_args()
    servers = [s.split("=", 1) for s in a.servers]
    levels = [int(c) for c in a.clients.split(",")]
    for name, url in servers:  # warm-up: load pages, allocate caches
        one_request(url, [300 + i for i in range(a.prompt)], 8)
    res = {}
    print("\n## Server: %d-token prompts + %d generated, closed loop, %d requests per client\n"
          % (a.prompt, a.gen, a.requests))
    print("| server | clients | generated tok/s | requests/s | median latency s |")
    print("|---|---|---|---|---|")
    for n in levels:
        for si, (name, url) in enumerate(servers):
            r = level(url, n, a.requests, a.prompt, a.gen, a.vocab, seed=n * 10 + 1)
            res[(name, n)] = r
            print("| %s | %d | %.1f | %.2f | %.2f |" % (name, n, r[0], r[1], r[2]), flush=True)
    if len(servers) > 1:
        base = servers[0][0]
        print("\n| clients | " + " | ".join("%s / %s" % (n, base) for n, _ in servers[1:]) + " |")
        print("|---|" + "---|" * (len(servers) - 1))
        for n in levels:
            print("| %d | " % n + " | ".join("%.2f" % (res[(s, n)][0] / res[(base, n)][0]) for s, _ in servers[1:])
                  + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
