#!/usr/bin/python3
"""The daemon's lifecycle: /health answers 503 "loading" (and the API 503) while the model loads,
a model that fails to load ends the process with status 1, SIGTERM during the load ends it with
status 0; SIGTERM stops accepting
connections, lets the request in flight complete and exits 0; a stream that outlives --grace-ms
is cancelled, still ends with its final event and [DONE], and the process exits 0."""
import os
import socket
import tempfile
import threading
import time

from attnd_daemon import Checker, Daemon, error_shape_ok, model, parse_sse, wait_for

c = Checker("test_http_lifecycle")
MODEL = model("tiny-llama-spm-f32.gguf")


def running(d):
    return d.metrics().get("attnd_requests_running", 0)


# ---------------------------------------------------------------------------------------------
# loading: the model path is a FIFO, so loading blocks until we open it for writing
# ---------------------------------------------------------------------------------------------
with tempfile.TemporaryDirectory() as tmp:
    fifo = os.path.join(tmp, "model.gguf")
    os.mkfifo(fifo)
    d = Daemon(fifo, wait_ready=False)
    try:
        r = d.get("/health")
        c.check(r.status_code == 503 and r.json() == {"status": "loading"}, f"/health while loading: {r.status_code} {r.text}")
        r = d.post("/v1/generate", {"prompt": "hi"})
        c.check(error_shape_ok(r, 503) is None and r.headers.get("Retry-After"), f"generate while loading: {error_shape_ok(r, 503)}")
        c.check(error_shape_ok(d.get("/v1/models"), 503) is None, "models while loading")
        c.check(d.metrics().get("attnd_model_loaded") == 0, "metrics while loading")
        with open(fifo, "w"):
            pass  # EOF: the load fails
        c.check(d.proc.wait(30) == 1, "exit status after a failed load")
    finally:
        d.kill()
    # SIGTERM while the model is still loading: the daemon leaves at once with status 0
    d = Daemon(fifo, wait_ready=False)
    try:
        c.check(d.get("/health").status_code == 503, "/health while loading (2)")
        d.proc.send_signal(15)
        try:
            rc = d.proc.wait(10)
        except Exception:  # noqa: BLE001
            rc = None
        c.check(rc == 0, f"exit status after SIGTERM while loading: {rc}")
    finally:
        d.kill()

# ---------------------------------------------------------------------------------------------
# SIGTERM with a request in flight
# ---------------------------------------------------------------------------------------------
d = Daemon(MODEL, "--grace-ms", "20000")
try:
    result = {}

    def in_flight():
        try:
            # a 1500-token prompt and 20 alternatives per token: still running when the signal comes
            result["r"] = d.post("/v1/generate", {"prompt": [1] * 1500, "max_tokens": 200, "temperature": 0,
                                                  "ignore_eos": True, "logprobs": 20}, timeout=60)
        except Exception as ex:  # noqa: BLE001 - reported below
            result["error"] = ex

    t = threading.Thread(target=in_flight)
    t.start()
    c.check(wait_for(lambda: running(d) == 1), "request never started")
    d.proc.send_signal(15)
    time.sleep(0.3)
    try:
        socket.create_connection(("127.0.0.1", d.port), timeout=2).close()
        c.check(False, "still accepting connections after SIGTERM")
    except OSError:
        pass
    t.join(60)
    r = result.get("r")
    c.check(r is not None and r.status_code == 200, f"in-flight request: {result}")
    if r is not None and r.status_code == 200:
        out = r.json()
        c.check(out["finish_reason"] == "length" and len(out["tokens"]) == 200,
                f"in-flight request did not complete: {out['finish_reason']} {len(out['tokens'])}")
    try:
        rc = d.proc.wait(30)
    except Exception:  # noqa: BLE001
        rc = None
    c.check(rc == 0, f"exit status after SIGTERM: {rc}")
finally:
    d.kill()

# ---------------------------------------------------------------------------------------------
# SIGTERM with a stream that outlives --grace-ms: it is cancelled, the stream still ends
# properly, the process exits 0
# ---------------------------------------------------------------------------------------------
d = Daemon(MODEL, "--grace-ms", "300")
try:
    with d.post("/v1/generate", {"prompt": "too long to finish", "max_tokens": 4000, "logprobs": 20, "ignore_eos": True,
                                 "stream": True}, stream=True) as r:
        lines = r.iter_lines(chunk_size=None)
        next(x for x in lines if x.startswith(b"data: "))
        t0 = time.time()
        d.proc.send_signal(15)
        events, done = parse_sse(lines)
    c.check(done and events and events[-1].get("finish_reason") == "cancelled",
            f"stream at grace expiry: done={done} last={events[-1] if events else None}")
    c.check(time.time() - t0 < 10, "grace period not honoured")
    c.check(d.proc.wait(30) == 0, "exit status after grace expiry")
finally:
    d.kill()
c.finish()
