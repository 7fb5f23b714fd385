#!/usr/bin/python3
"""Hostile clients and a broken model over real HTTP (issue 17):
 1. --max-connections sockets that send half a request header and stop no longer starve the
    daemon: one address gets at most --max-per-client of them, /health answers another address
    at once, and after --timeout-ms of silence the idle sockets are closed and /health answers
    the first address too.
 2. A request path with %0A cannot forge a log line (the logged path is escaped).
 3. NUL in JSON, raw or as \\u0000 in a key or a string, is a 400 (cJSON would cut the string
    there: {"prompt\\u0000x":...} read as "prompt"); an escaped backslash before u0000 is not a NUL.
    A body of 300k values ([0,0,...]) is refused before cJSON builds its ~20 MB of nodes.
 4. max_tokens 0 and a prompt of exactly the context size answer 200, no tokens, "length";
    /attention maps such a request.
 5. A model with a NaN in one row of output.weight: /v1/generate (whole, streamed, with logprobs)
    answers 500 with the one error shape saying "non-finite", /logit_lens 500, and the daemon
    keeps serving (/health 200, a good bad-request 400).
 6. During the shutdown grace a client that disconnects still has its request cancelled (the
    daemon exits soon after, not when the 2000-token generation would have ended).
 7. An oversized chunked body (no Content-Length) is cut off soon after --max-body (it was read
    up to 16 x --max-body)."""
import os
import shutil
import signal
import socket
import tempfile
import time

from attnd_daemon import Checker, Daemon, error_shape_ok, model
from gguf_patch import poke_f32, tensor_offsets

c = Checker("test_http_harden")
MODEL = model("tiny-llama-spm-f32.gguf")
CTX = 64


def half_header(port, src="127.0.0.1"):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind((src, 0))
    s.settimeout(5)
    s.connect(("127.0.0.1", port))
    s.sendall(b"POST /v1/generate HTTP/1.1\r\nHost: x\r\nContent-Le")
    return s


def raw_get(port, path, src="127.0.0.1", timeout=5.0):
    """(status line or None, seconds) for GET path from source address src."""
    t0 = time.time()
    try:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.bind((src, 0))
        s.settimeout(timeout)
        s.connect(("127.0.0.1", port))
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while True:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
        s.close()
        return (data.split(b"\r\n", 1)[0].decode(errors="replace") if data else None), time.time() - t0
    except OSError:
        return None, time.time() - t0


def closed_by_peer(s):
    try:
        return s.recv(1) == b""
    except socket.timeout:
        return False
    except OSError:
        return True


# ---------------------------------------------------------------------------------------------
d = Daemon(MODEL, "--ctx", str(CTX), "--max-connections", "8", "--max-per-client", "4", "--timeout-ms", "2000")
try:
    # 1. idle half-header sockets
    socks = []
    for _ in range(8):
        try:
            socks.append(half_header(d.port))
        except OSError:
            pass
    time.sleep(0.3)
    status, secs = raw_get(d.port, "/health", src="127.0.0.2", timeout=1.5)
    c.check(status and " 200 " in status + " " and secs < 1.5,
            f"/health from another address while 8 idle sockets are open: {status} after {secs:.2f} s")
    t_idle = time.time()
    time.sleep(3.0)  # past --timeout-ms
    n_closed = 0
    for s in socks:
        s.settimeout(0.5)
        n_closed += closed_by_peer(s)
        s.close()
    c.check(n_closed == len(socks), f"{n_closed} of {len(socks)} idle sockets closed after {time.time() - t_idle:.1f} s")
    status, secs = raw_get(d.port, "/health")
    c.check(status and " 200" in status, f"/health from the idle clients' address afterwards: {status}")

    # 2. log injection
    status, _ = raw_get(d.port, "/%0Afake-line%0D%22x")
    time.sleep(0.2)
    log = d.log()
    c.check(not any(l.startswith("fake-line") for l in log.splitlines()), "a forged log line was written")
    c.check("\\x0afake-line\\x0d\\x22x" in log, "the escaped path is in the log:\n" + log[-600:])

    # 3. NUL in JSON
    for body, what in ((b'{"prompt\\u0000x":"hi","max_tokens":1}', "NUL escape in a key"),
                       (b'{"prompt":"\\u0000abc","max_tokens":1}', "NUL escape in a string"),
                       (b'{"prompt":"ab\x00c","max_tokens":1}', "raw NUL in a string")):
        r = d.post("/v1/generate", body)
        c.check(error_shape_ok(r, 400) is None and "NUL" in r.text, f"{what}: {r.status_code} {r.text[:200]}")
    # a body of far more values than any valid one is refused before cJSON builds a node per value
    r = d.post("/v1/generate", b'{"prompt":[' + b",".join([b"0"] * 300000) + b"]}")
    c.check(error_shape_ok(r, 400) is None and "JSON values" in r.text, f"300k-value body: {r.status_code} {r.text[:200]}")
    r = d.post("/v1/generate", b'{"prompt":"a\\\\u0000","max_tokens":1,"temperature":0}')
    c.check(r.status_code == 200, f"an escaped backslash before u0000 is text: {r.status_code} {r.text[:200]}")

    # 4. max_tokens 0, prompt == context
    r = d.post("/v1/generate", {"prompt": "Once upon a time", "max_tokens": 0})
    ok = r.status_code == 200 and r.json()["tokens"] == [] and r.json()["finish_reason"] == "length"
    c.check(ok, f"max_tokens 0: {r.status_code} {r.text[:300]}")
    full = [1] + [(7 * i) % 3000 + 100 for i in range(CTX - 1)]
    r = d.post("/v1/generate", {"prompt": full})
    ok = r.status_code == 200 and r.json()["tokens"] == [] and r.json()["usage"]["prompt_tokens"] == CTX
    c.check(ok, f"prompt of exactly the context: {r.status_code} {r.text[:300]}")
    if ok:
        a = d.get(f"/attention?layer=0&head=0&id={r.json()['id']}")
        c.check(a.status_code == 200 and a.json()["n_tokens"] == CTX, f"/attention of it: {a.status_code} {a.text[:200]}")
    r = d.post("/v1/generate", {"prompt": full, "max_tokens": 1})
    c.check(error_shape_ok(r, 400) is None, f"prompt == context plus max_tokens 1: {r.status_code}")

    # 7. a chunked body that goes on and on: with the default 1 MiB cap it used to be read to 16 MiB
    s = socket.create_connection(("127.0.0.1", d.port), timeout=10)
    s.sendall(b"POST /v1/generate HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
    chunk = b"10000\r\n" + b"x" * 0x10000 + b"\r\n"
    sent = 0
    try:
        while sent < (14 << 20):
            s.sendall(chunk)
            sent += 0x10000
    except OSError:
        pass
    s.close()
    c.check(sent < (14 << 20), f"all {sent >> 20} MiB of an oversized chunked body were read")
finally:
    d.stop()

# ---------------------------------------------------------------------------------------------
# 6. a client that leaves during the shutdown grace
d = Daemon(MODEL, "--grace-ms", "60000")
try:
    r = d.post("/v1/generate", {"prompt": "Once", "max_tokens": 2000, "ignore_eos": True, "temperature": 0,
                                "stream": True}, stream=True)
    it = r.iter_lines(chunk_size=None)
    first = next(l for l in it if l.startswith(b"data: "))
    d.proc.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    r.close()
    t0 = time.time()
    rc = d.stop(timeout=60)
    took = time.time() - t0
    c.check(rc == 0 and took < 5, f"exit {rc} {took:.1f} s after the client left during the grace period")
    c.check("cancelled" in d.log(), "the request was cancelled")
finally:
    d.kill()

# ---------------------------------------------------------------------------------------------
# 5. NaN logits
with tempfile.TemporaryDirectory() as tmp:
    bad = os.path.join(tmp, "nan.gguf")
    shutil.copy(MODEL, bad)
    _, ne, _ = tensor_offsets(bad)["output.weight"]
    poke_f32(bad, "output.weight", 5 * ne[0] + 3, float("nan"))  # token 5's row
    d = Daemon(bad, "--ctx", str(CTX))
    try:
        for fields in ({}, {"logprobs": 5}):
            r = d.post("/v1/generate", {"prompt": "Once upon a time", "max_tokens": 3, **fields})
            c.check(error_shape_ok(r, 500) is None and "non-finite" in r.text, f"NaN model {fields}: {r.status_code} {r.text[:300]}")
        r = d.post("/v1/generate", {"prompt": "Once upon a time", "max_tokens": 3, "stream": True})
        events = [l for l in r.text.splitlines() if l.startswith("data: ")]
        c.check(r.status_code in (200, 500) and "non-finite" in r.text and '"token"' not in r.text,
                f"NaN model, streamed: {r.status_code} {events[:3]}")
        r = d.post("/v1/generate", {"prompt": "Once upon a time", "max_tokens": 0})
        c.check(r.status_code == 200, f"max_tokens 0 on the NaN model reads the prompt only: {r.status_code}")
        ll = d.get("/logit_lens?pos=2")
        c.check(error_shape_ok(ll, 500) is None, f"/logit_lens on the NaN model: {ll.status_code} {ll.text[:200]}")
        c.check(d.get("/health").status_code == 200, "/health after the NaN errors")
        c.check(error_shape_ok(d.post("/v1/generate", {"prompt": ""}), 400) is None, "still validating requests")
    finally:
        d.stop()

c.finish()
