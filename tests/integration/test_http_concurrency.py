#!/usr/bin/python3
"""Several clients at once: 8 clients get the same answers as each alone; a client that
disconnects (mid-stream, or while waiting for a whole answer) has its request cancelled, the
metrics count it and the daemon serves on; a full queue answers 503 with Retry-After."""
import threading
import time

import requests

from attnd_daemon import Checker, Daemon, error_shape_ok, model, wait_for

c = Checker("test_http_concurrency")
MODEL = model("tiny-llama-spm-f32.gguf")


def cancelled(d):
    return d.metrics().get('attnd_generations_total{finish_reason="cancelled"}', 0)


def running(d):
    return d.metrics().get("attnd_requests_running", 0)


# ---------------------------------------------------------------------------------------------
# 8 clients at once == each alone; cancellation by disconnect
# ---------------------------------------------------------------------------------------------
d = Daemon(MODEL, "--max-queue", "16")
try:
    reqs = []
    for k in range(8):
        f = {"prompt": f"Client number {k} says", "max_tokens": 16 + k, "ignore_eos": True}
        if k % 2:
            f.update(temperature=0.8, top_k=20, seed=100 + k)
        else:
            f.update(temperature=0)
        f["stream"] = k % 3 == 0
        reqs.append(f)

    def run(f):
        if f["stream"]:
            g = dict(f)
            events, done = d.stream(**g)
            toks = [e for e in events if "token" in e]
            return {"tokens": [e["token"] for e in toks],
                    "text": "".join(e["text"] for e in toks) + events[-1].get("text", ""), "done": done}
        out = d.generate(**f)
        return {"tokens": out["tokens"], "text": out["text"], "done": True}

    alone = [run(f) for f in reqs]
    together = [None] * len(reqs)
    errors = []

    def worker(i):
        try:
            together[i] = run(reqs[i])
        except Exception as ex:  # noqa: BLE001 - reported as a failure below
            errors.append(f"client {i}: {ex}")

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(reqs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    c.check(not errors, f"concurrent clients failed: {errors}")
    for i in range(len(reqs)):
        c.check(together[i] == alone[i], f"client {i}: concurrent answer differs from the one alone")
    c.check(wait_for(lambda: d.metrics().get('attnd_requests_total{route="/v1/generate",status="200"}', 0) == 16),
            "16 answers counted")

    # disconnect mid-stream
    before = cancelled(d)
    t0 = time.time()
    r = d.post("/v1/generate", {"prompt": "A long story", "max_tokens": 4000, "temperature": 0, "ignore_eos": True,
                                "stream": True, "logprobs": 20}, stream=True)
    lines = r.iter_lines(chunk_size=None)
    got = 0
    for line in lines:
        if line.startswith(b"data: "):
            got += 1
            if got == 3:
                break
    r.close()
    c.check(wait_for(lambda: cancelled(d) == before + 1), "disconnected stream not cancelled")
    c.check(wait_for(lambda: running(d) == 0), "cancelled stream still running")
    c.check(time.time() - t0 < 10, "cancellation took too long")

    # disconnect while waiting for a whole answer
    try:
        # 4000 tokens with 20 alternatives each take seconds even on the tiny model; the client
        # gives up after 0.15 s
        d.post("/v1/generate", {"prompt": "Another long story", "max_tokens": 4000, "temperature": 0,
                                "ignore_eos": True, "logprobs": 20}, timeout=0.15)
        c.check(False, "a 4000-token request finished in 0.15 s")
    except requests.exceptions.ReadTimeout:
        pass
    c.check(wait_for(lambda: cancelled(d) == before + 2), "disconnected non-stream request not cancelled")
    c.check(wait_for(lambda: running(d) == 0), "cancelled request still running")

    # still serving, promptly
    t0 = time.time()
    out = d.generate(prompt="after the cancellations", max_tokens=4, temperature=0, ignore_eos=True)
    c.check(len(out["tokens"]) == 4 and time.time() - t0 < 5, "generate after cancellations")
    c.check(d.get("/health").status_code == 200, "/health after cancellations")
    mt = d.metrics()
    c.check(mt.get('attnd_generations_total{finish_reason="cancelled"}') == 2, "metrics: 2 cancelled requests")
finally:
    c.check(d.stop() == 0, "daemon exit status")

# ---------------------------------------------------------------------------------------------
# a full queue
# ---------------------------------------------------------------------------------------------
d = Daemon(MODEL, "--max-queue", "1", "--max-running", "1")
try:
    # long, slow requests (20 alternatives per token), so neither can finish before it is closed
    s1 = d.post("/v1/generate", {"prompt": "one", "max_tokens": 4000, "ignore_eos": True, "stream": True,
                                 "logprobs": 20}, stream=True)
    it1 = s1.iter_lines(chunk_size=None)
    next(x for x in it1 if x.startswith(b"data: "))  # running
    s2 = d.post("/v1/generate", {"prompt": "two", "max_tokens": 4000, "ignore_eos": True, "stream": True,
                                 "logprobs": 20}, stream=True)  # queued
    r = d.post("/v1/generate", {"prompt": "three", "max_tokens": 5})
    c.check(error_shape_ok(r, 503) is None, f"full queue: {error_shape_ok(r, 503)}")
    c.check(r.headers.get("Retry-After") == "1", f"full queue: Retry-After {r.headers.get('Retry-After')}")
    s1.close()
    s2.close()
    c.check(wait_for(lambda: cancelled(d) == 2 and running(d) == 0), "closed streams not cancelled")

finally:
    c.check(d.stop() == 0, "daemon exit status")
c.finish()
