#!/usr/bin/python3
"""A client that leaves during the shutdown grace period has its request cancelled, whichever
completion route it used (/v1/generate, /v1/chat/completions, /v1/completions), streamed or not.

After SIGTERM the daemon stops listening, detaches the engine and gives the requests in flight
--grace-ms to finish. A request whose client has gone must not run on for the rest of that time:
its KV blocks go back to the pool at once, so the scheduler is idle and the process exits within a
second or two. The requests here would otherwise run for far longer than that (8 choices of 4000
tokens with 20 alternatives each), and the grace period is 60 s."""
import json
import socket
import time

from attnd_daemon import Checker, Daemon, model

c = Checker("test_http_grace_cancel")
MODEL = model("tiny-llama-spm-f32.gguf")
LONG = {"max_tokens": 4000, "ignore_eos": True, "temperature": 1.0, "seed": 1}

BODIES = {
    "/v1/generate": {"prompt": "in the beginning", "logprobs": 20, **LONG},
    "/v1/chat/completions": {"messages": [{"role": "user", "content": "in the beginning"}], "n": 8,
                             "logprobs": True, "top_logprobs": 20, **LONG},
    "/v1/completions": {"prompt": "in the beginning", "n": 8, "logprobs": 5, **LONG},
}


def open_request(d, path, body):
    """Sends the request on a raw socket; returns the socket once the first answer bytes came."""
    s = socket.create_connection(("127.0.0.1", d.port), timeout=30)
    data = json.dumps(body).encode()
    s.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
    return s


def running(d):
    return d.metrics().get("attnd_requests_running", 0)


def check_route(path, stream):
    d = Daemon(MODEL, "--grace-ms", "60000", "--max-tokens-cap", "4000",
               "--max-request-work", "1000000")  # the (6)-sized requests are the point here
    name = f"{path} stream={stream}"
    try:
        body = dict(BODIES[path], stream=stream)
        s = open_request(d, path, body)
        want = body.get("n", 1)  # every choice running: none is left to submit after the signal
        t0 = time.time()
        while running(d) < want and time.time() - t0 < 20:
            time.sleep(0.02)
        c.check(running(d) == want, f"{name}: {running(d)} of {want} choices running")
        if stream:
            c.check(b"data: " in s.recv(4096), f"{name}: no first event")
        d.proc.send_signal(15)
        time.sleep(0.3)  # the grace period has begun: the engine is detached
        s.close()
        t_gone = time.time()
        try:
            rc = d.proc.wait(10)
        except Exception:  # noqa: BLE001 - reported below
            rc = None
        took = time.time() - t_gone
        c.check(rc == 0, f"{name}: exit status {rc} (still running 10 s after its client left)")
        c.check(rc is not None and took < 2.0,
                f"{name}: the process ended {took:.2f} s after the client left (the request ran on)")
        log = d.log()
        c.check("client went away" in log and "cancelled" in log, f"{name}: no cancellation logged")
        print(f"{name}: exited {took:.2f} s after the client left")
    finally:
        d.kill()


for route in BODIES:
    for streamed in (True, False):
        check_route(route, streamed)
c.finish()
