#!/usr/bin/python3
"""Fair scheduling, back-pressure and the work cap (issue 38, findings 2 and 6), real daemon over
raw sockets, with short limits set by flags so it takes seconds:
 - two tenants (--api-keys): 50 stalled streams of tenant A (each a streaming max_tokens 4000
   request with logprobs 20 whose socket never reads) and then a 4-token request of tenant B:
   B is answered within 2 s; the stalled streams are paused (attnd_requests_paused) and
   cancelled after --stall-timeout-ms (attnd_stalled_cancels_total);
 - 50 busy streams of A that do read: B's request waits no more than about one turn of the
   scheduler (its latency beside B alone, and the step time, are printed);
 - --max-queued-per-tenant: past it, 429 with Retry-After; the other tenant is still served;
 - a paused stream, once read, gives the tokens of the same request answered whole;
 - without keys the turns are between client addresses (127.0.0.2 stalls, 127.0.0.3 is served);
 - --max-request-work: the (6) request (n 8, logprobs 20, max_tokens 4080) is a 400 naming the
   fields and the cap; an ordinary n 8 x 2048 request without logprobs is accepted.
Against a daemon that lacks the new flags (the parent commit) the flags it does not know are
left out, so the same checks run and show what fails there."""
import json
import os
import socket
import subprocess
import tempfile
import threading
import time

from attnd_daemon import ATTND, Checker, Daemon, error_shape_ok, model, wait_for

c = Checker("test_http_fair")
MODEL = model("stories260K.gguf")
KEYS = {"A": "tenant-a-key-0123456789", "B": "tenant-b-key-9876543210"}
HELP = subprocess.run([ATTND, "serve", "--help"], capture_output=True, text=True).stdout + \
    subprocess.run([ATTND, "serve", "--help"], capture_output=True, text=True).stderr
STALL_MS = 3000


def flags(*pairs):
    """The flags this binary knows (the others are reported and left out)."""
    out = []
    for name, val in pairs:
        if name in HELP:
            out += [name, str(val)]
        else:
            print(f"note: {ATTND} has no {name}: left out")
    return out


def start(keyfile, *extra):
    base = [("--ctx", 8192), ("--max-connections", 512), ("--max-per-client", 256), ("--max-queue", 256),
            ("--api-keys", keyfile)]
    return Daemon(MODEL, *flags(*base, *extra))


def request_bytes(d, who, body, path="/v1/generate"):
    data = json.dumps(body).encode()
    auth = f"Authorization: Bearer {KEYS[who]}\r\n" if who else ""
    return (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{d.port}\r\n{auth}"
            f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n").encode() + data


def open_stream(d, who, body, rcvbuf=4096, path="/v1/generate", src=None):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)  # a client that reads nothing holds little
    if src:
        s.bind((src, 0))
    s.connect(("127.0.0.1", d.port))
    s.sendall(request_bytes(d, who, body, path))
    return s


def status_of(sock, timeout=10.0):
    """The status code and headers of the answer on sock (reads up to the blank line)."""
    sock.settimeout(timeout)
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(4096)
        if not chunk:
            break
        buf += chunk
    head = buf.split(b"\r\n\r\n")[0].decode(errors="replace")
    lines = head.split("\r\n")
    code = int(lines[0].split()[1]) if lines and len(lines[0].split()) > 1 else 0
    hdrs = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
    return code, hdrs, buf


def ask_b(d, timeout=30.0, who="B", src=None):
    """Tenant B's 4-token request, whole: (seconds, status, body)."""
    t0 = time.time()
    s = socket.create_connection(("127.0.0.1", d.port), source_address=(src, 0) if src else None)
    s.sendall(request_bytes(d, who, {"prompt": "Once upon a time", "max_tokens": 4, "temperature": 0,
                                     "ignore_eos": True}, "/v1/completions"))
    s.settimeout(timeout)
    buf = b""
    try:
        while True:
            code, hdrs, buf = (0, {}, buf) if buf else status_of(s, timeout)
            body = buf.split(b"\r\n\r\n", 1)[1] if b"\r\n\r\n" in buf else b""
            n = int(hdrs.get("content-length", "-1")) if hdrs else -1
            while n >= 0 and len(body) < n:
                chunk = s.recv(65536)
                if not chunk:
                    break
                body += chunk
            return time.time() - t0, code, body
    except OSError as e:
        return time.time() - t0, 0, str(e).encode()
    finally:
        s.close()


def baseline(d):
    """B's request alone: the best of 3 (the first after the start is slower)."""
    runs = [ask_b(d) for _ in range(3)]
    c.check(all(r[1] == 200 for r in runs), f"B alone: {[r[1] for r in runs]}")
    return min(r[0] for r in runs)


LONG = {"prompt": "Once upon a time", "max_tokens": 4000, "logprobs": 20, "stream": True, "temperature": 1,
        "ignore_eos": True}


def metric(d, name):
    try:
        hdr = {"Authorization": "Bearer " + KEYS["B"]} if "--api-keys" in d.proc.args else {}
        return d.metrics(timeout=10, headers=hdr).get(name, -1)
    except Exception:  # noqa: BLE001 - a daemon that does not answer reads as "no value"
        return -1


def check_stalled(keyfile):
    d = start(keyfile, ("--stall-timeout-ms", STALL_MS), ("--stream-pause-kib", 16))
    socks = []
    try:
        alone = baseline(d)
        socks = [open_stream(d, "A", LONG) for _ in range(50)]
        time.sleep(1.0)  # the streams fill their buffers
        lat, code, body = ask_b(d, timeout=30)
        print(f"B's 4-token request beside 50 stalled streams of A: {lat:.3f} s (B alone: {alone:.3f} s)")
        c.check(code == 200 and lat <= 2.0, f"B beside 50 stalled streams: {code} in {lat:.2f} s (want <= 2 s)")
        # all of A's 32 admitted streams (--max-running 32) pause; A's other 18 wait for its slots
        paused = wait_for(lambda: metric(d, "attnd_requests_paused") >= 32, timeout=15)
        print(f"paused streams: {metric(d, 'attnd_requests_paused')}, running {metric(d, 'attnd_requests_running')}")
        s0 = metric(d, "attnd_scheduler_steps_total")
        time.sleep(0.5)
        s1 = metric(d, "attnd_scheduler_steps_total")
        c.check(paused and s1 == s0, f"paused streams compute nothing: scheduler steps {s0} then {s1} over 0.5 s")
        c.check(paused, f"stalled streams paused: attnd_requests_paused {metric(d, 'attnd_requests_paused')}")
        t0 = time.time()
        cancelled = wait_for(lambda: metric(d, "attnd_stalled_cancels_total") >= 32, timeout=STALL_MS / 1e3 + 15)
        print(f"stalled streams cancelled: {metric(d, 'attnd_stalled_cancels_total')} after {time.time() - t0:.1f} s "
              f"(--stall-timeout-ms {STALL_MS})")
        c.check(cancelled, f"stalled streams cancelled after the stall timeout: "
                           f"{metric(d, 'attnd_stalled_cancels_total')}")
        for s in socks:
            s.close()
        used = 'attnd_kv_cache_blocks{state="used"}'
        idle = wait_for(lambda: metric(d, used) == 0 and metric(d, "attnd_requests_paused") == 0
                        and metric(d, "attnd_queue_depth") == 0, timeout=15)
        c.check(idle, f"clients gone: no KV block used ({metric(d, used)}), nothing paused or waiting")
    finally:
        for s in socks:
            s.close()
        c.check(d.stop() == 0, "daemon exits 0 after the stalled test")


def reader(sock, stop, counts, i):
    sock.settimeout(0.5)
    while not stop.is_set():
        try:
            chunk = sock.recv(65536)
        except socket.timeout:
            continue
        except OSError:
            return
        if not chunk:
            return
        counts[i] += len(chunk)


def check_busy(keyfile):
    d = start(keyfile)
    stop = threading.Event()
    socks, threads = [], []
    try:
        alone = baseline(d)
        counts = [0] * 50
        for i in range(50):
            socks.append(open_stream(d, "A", LONG, rcvbuf=1 << 20))
            threads.append(threading.Thread(target=reader, args=(socks[-1], stop, counts, i), daemon=True))
            threads[-1].start()
        wait_for(lambda: metric(d, "attnd_requests_running") >= 32, timeout=10)
        s0, t0 = metric(d, "attnd_scheduler_steps_total"), time.time()
        time.sleep(1.0)
        step = (time.time() - t0) / max(1.0, metric(d, "attnd_scheduler_steps_total") - s0)
        lat, code, _ = ask_b(d, timeout=60)
        # one turn: B joins at the next step, then needs its prompt and 4 tokens (~6 steps)
        bound = alone + 12 * step + 0.5
        print(f"B's 4-token request beside 50 reading streams of A: {lat:.3f} s (B alone {alone:.3f} s, "
              f"a step {step * 1e3:.1f} ms, bound {bound:.2f} s); bytes read by A: {sum(counts)}")
        c.check(code == 200 and lat <= bound, f"B beside 50 busy streams: {code} in {lat:.2f} s (want <= {bound:.2f})")
    finally:
        stop.set()
        for t in threads:
            t.join(2)
        for s in socks:
            s.close()
        c.check(d.stop() == 0, "daemon exits 0 after the busy test")


def check_queue_limit(keyfile):
    d = start(keyfile, ("--max-running-per-tenant", 2), ("--max-queued-per-tenant", 2),
              ("--stall-timeout-ms", 60000), ("--stream-pause-kib", 16))
    socks = []
    try:
        got, bodies = [], []
        for _ in range(8):  # 2 running (then paused), 2 waiting, the rest refused
            socks.append(open_stream(d, "A", LONG))
            code, hdrs, raw = status_of(socks[-1])
            got.append((code, hdrs.get("retry-after")))
            if code == 429:
                bodies.append(raw.split(b"\r\n\r\n", 1)[1])
            time.sleep(0.1)
        err = json.loads(bodies[0])["error"] if bodies else {}
        c.check(err.get("code") == 429 and err.get("type") == "service_unavailable"
                and "--max-queued-per-tenant" in err.get("message", ""), f"the 429's error: {err}")
        ok = sum(1 for g in got if g[0] == 200)
        refused = sum(1 for g in got if g == (429, "1"))
        print(f"A's 8 streams with 2 running + 2 waiting allowed: {ok} accepted, {refused} refused with 429")
        c.check(ok <= 4 and refused >= 4 and ok + refused == 8, f"A past 2 running + 2 waiting: 429 + Retry-After: {got}")
        lat, code, _ = ask_b(d, timeout=30)
        c.check(code == 200 and lat <= 2.0, f"B meanwhile: {code} in {lat:.2f} s")
    finally:
        for s in socks:
            s.close()
        c.check(d.stop() == 0, "daemon exits 0 after the queue-limit test")


def dechunk(raw):
    """The body of a chunked HTTP/1.1 answer (raw: the bytes after the header)."""
    out, i = b"", 0
    while True:
        j = raw.find(b"\r\n", i)
        if j < 0:
            return out
        size = int(raw[i:j].split(b";")[0] or b"0", 16)
        if size == 0:
            return out
        out += raw[j + 2:j + 2 + size]
        i = j + 2 + size + 2


def read_all(sock, timeout=60.0):
    sock.settimeout(timeout)
    buf = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            return buf
        buf += chunk
        if buf.endswith(b"\r\n0\r\n\r\n"):
            return buf


def check_resume(keyfile):
    """A stream paused while its client does not read gives, once read, the same tokens as the
    same request answered whole."""
    d = start(keyfile, ("--stream-pause-kib", 16))
    try:
        body = {"prompt": "Once upon a time", "max_tokens": 400, "logprobs": 20, "temperature": 0, "ignore_eos": True}
        r = d.post("/v1/generate", body, headers={"Authorization": "Bearer " + KEYS["A"]})
        want = r.json()["tokens"] if r.status_code == 200 else None
        s = open_stream(d, "A", dict(body, stream=True))
        paused = wait_for(lambda: metric(d, "attnd_requests_paused") >= 1, timeout=10)
        c.check(paused, "a stream whose client does not read is paused")
        time.sleep(0.5)
        raw = read_all(s)
        s.close()
        events = [json.loads(ln[6:]) for ln in dechunk(raw.split(b"\r\n\r\n", 1)[1]).decode().split("\n")
                  if ln.startswith("data: {")]
        got = [e["token"] for e in events if "token" in e]
        c.check(want is not None and got == want, f"resumed stream: the whole answer's {len(want or [])} tokens "
                                                  f"(got {len(got)})")
        print(f"paused stream resumed and read: {len(got)} tokens, {len(raw)} bytes")
    finally:
        c.check(d.stop() == 0, "daemon exits 0 after the resume test")


def check_no_keys():
    """Without keys the owners are client addresses: 50 stalled streams from 127.0.0.2 and a
    request from 127.0.0.3."""
    d = Daemon(MODEL, *flags(("--ctx", 8192), ("--max-connections", 512), ("--max-per-client", 256),
                             ("--max-queue", 256), ("--stall-timeout-ms", 60000), ("--stream-pause-kib", 16)))
    socks = []
    try:
        try:
            socks = [open_stream(d, None, LONG, src="127.0.0.2") for _ in range(50)]
        except OSError as e:  # a loopback without 127.0.0.2: nothing to compare
            print(f"note: cannot connect from 127.0.0.2 ({e}): the per-address check is left out")
            return
        time.sleep(1.0)
        lat, code, _ = ask_b(d, timeout=30, who=None, src="127.0.0.3")
        print(f"without keys: a 4-token request from 127.0.0.3 beside 50 stalled streams from 127.0.0.2: {lat:.3f} s")
        c.check(code == 200 and lat <= 2.0, f"per address without keys: {code} in {lat:.2f} s (want <= 2 s)")
    finally:
        for s in socks:
            s.close()
        c.check(d.stop() == 0, "daemon exits 0 after the no-keys test")


def check_work_cap(keyfile):
    d = start(keyfile)
    try:
        hdr = {"Authorization": "Bearer " + KEYS["A"]}
        chat = {"messages": [{"role": "user", "content": "hi"}], "n": 8, "logprobs": True, "top_logprobs": 20,
                "max_tokens": 4080}
        cmpl = {"prompt": "Once upon a time", "n": 8, "logprobs": 5, "max_tokens": 4080}
        for path, body in (("/v1/chat/completions", chat), ("/v1/completions", cmpl)):
            try:
                r = d.post(path, body, headers=hdr, timeout=15)
                code, msg = r.status_code, r.text
            except Exception as e:  # noqa: BLE001 - a request that runs on past the timeout was not refused
                code, msg = 0, f"no answer in 15 s ({type(e).__name__})"
            c.check(code == 400 and "max_tokens" in msg and "--max-request-work" in msg and "131072" in msg,
                    f"{path} n 8 x max_tokens 4080 x logprobs: a 400 naming the fields and the cap: {code} {msg[:300]}")
        s = open_stream(d, "A", {"prompt": "Once upon a time", "n": 8, "max_tokens": 2048, "stream": True},
                        path="/v1/completions")
        code, _, _ = status_of(s)
        s.close()
        c.check(code == 200, f"an ordinary n 8 x 2048 request without logprobs is accepted: {code}")
    finally:
        c.check(d.stop() == 0, "daemon exits 0 after the work-cap test")


def main():
    with tempfile.NamedTemporaryFile("w", suffix=".keys", delete=False) as f:
        f.write("".join(f"{k}:{v}\n" for k, v in KEYS.items()))
        keyfile = f.name
    try:
        check_stalled(keyfile)
        check_busy(keyfile)
        check_queue_limit(keyfile)
        check_resume(keyfile)
        check_work_cap(keyfile)
        check_no_keys()
    finally:
        os.unlink(keyfile)
    c.finish()


main()
