#!/usr/bin/python3
"""Prefix-affinity routing through HAProxy (deploy/haproxy/attnd.cfg) in front of three real attnd
replicas, all on 127.0.0.1.

The shipped configuration passes `haproxy -c` as shipped. The test runs HAProxy on configurations
derived from it (a stats socket and an X-Served-By response header added; for the comparison the
`balance hash` line replaced by `balance roundrobin`) over replicas of models/kjv.gguf (--ctx
1024), each with a KV pool of POOL_BLOCKS = 128 blocks (2048 tokens): room for about five of the
eight system prompts, so that one replica cannot keep every prompt cached but three replicas that
split the prompts between them can.

The load: 8 system prompts of ~400 tokens (prompt i: KJV words drawn with seed i; these eight hash
3/2/3 onto the three replicas; with so few keys a skewed split can happen, seeds 1000-1007 give
7/1/0), 96 streamed chat requests (request i: prompt i % 8, its own question, 16 tokens) from 6
client threads, in 4 rounds of 24 that alternate between a round-robin and a hash setup on fresh
replicas, so that both see the same background load. Each replica's prefix-cache hit counter
(attnd_prefix_cache_hit_tokens_total) is read from /metrics before and after; the reference is
each prompt's shared prefix: the tokens two requests with that system prompt and different
questions have in common (the daemon's token ids, from /attention). Asserted: with hash routing
the hits are >= 85 % of the shared prefix tokens of all 96 requests, every request goes to its
prompt's replica (>= 80 % with HASH_BALANCE_FACTOR=N, the bounded-load variant), and the mean time
to first token (to the first streamed content) is lower than round-robin's (the ratio is printed;
the goal is 2x).

Then, on the hash setup: a replica killed with SIGKILL while it generates is marked DOWN by HAProxy
within 2 s (health checks every 500 ms, fall 2), the streams it was sending fail and nothing else
does: every request started after the kill succeeds (HAProxy retries a refused connection or an
empty response on another replica); a replica sent SIGTERM while it generates drains: no request
fails, its own streams finish, it exits 0 and leaves the pool within 2 s."""
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter

import requests

from attnd_daemon import ATTND, Checker, Daemon

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
KJV = os.path.join(ROOT, "models", "kjv.gguf")
SHIPPED = os.path.join(ROOT, "deploy", "haproxy", "attnd.cfg")
HAPROXY = "/usr/sbin/haproxy"
N_PROMPTS, N_REQUESTS, N_THREADS, MAX_TOKENS = 8, 96, 6, 16
POOL_BLOCKS = int(os.environ.get("POOL_BLOCKS", "128"))  # 2048 tokens: ~5 prompts of ~25 blocks
NAMES = ("attnd1", "attnd2", "attnd3")  # the server names of attnd.cfg
c = Checker("test_haproxy")

# Words of the KJV for the system prompts (the model was trained on that text, so they are ~1.4
# tokens each): prompt i is sentences of words drawn with seed i.
WORDS = ("and the lord god said unto moses behold i will send thee to pharaoh that thou mayest bring forth my "
         "people children of israel out egypt land milk honey went came house father mother son daughter king "
         "david jerusalem temple priest offering altar fire water bread wine servant heaven earth light darkness "
         "day night spirit word truth grace mercy peace love faith hope glory kingdom power holy name blessed "
         "shall be upon them all his her their our your from with for not but also when then there this").split()


def system_prompt(i, n_words=265):
    r = random.Random(i)
    words = []
    while len(words) < n_words:
        s = [r.choice(WORDS) for _ in range(r.randint(6, 14))]
        words += (" ".join(s).capitalize() + ".").split()
    return " ".join(words)


PROMPTS = [system_prompt(i) for i in range(N_PROMPTS)]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------------------------------------
# replicas and HAProxy
# ---------------------------------------------------------------------------------------------
class Replicas:
    """Three `attnd serve` on fixed loopback ports (so that HAProxy's addresses stay valid when one
    is restarted)."""

    def __init__(self):
        self.ports = [free_port() for _ in NAMES]
        self.d = {}
        for name in NAMES:
            self.start(name)

    def start(self, name):
        port = self.ports[NAMES.index(name)]
        self.d[name] = Daemon(KJV, "--port", str(port), "--threads", "1", "--ctx", "1024",
                              "--kv-blocks", str(POOL_BLOCKS), "--keep-requests", "32")

    def env(self):
        return {f"ATTND_BACKEND{i + 1}": f"127.0.0.1:{p}" for i, p in enumerate(self.ports)}

    def hits(self):
        """{name: prefix-cache hit tokens} of the replicas that are alive."""
        return {n: d.metrics()["attnd_prefix_cache_hit_tokens_total"] for n, d in self.d.items()
                if d.proc.poll() is None}

    def stop(self):
        for d in self.d.values():
            if d.proc.poll() is None:
                d.stop()


def derived_config(tmp, mode):
    """The shipped configuration with a stats socket and an X-Served-By header; mode "roundrobin"
    replaces the hash balancing. Returns (path, stats socket path)."""
    with open(SHIPPED) as f:
        text = f.read()
    sock = os.path.join(tmp, f"haproxy-{mode}.sock")
    text = text.replace("\nglobal\n", f"\nglobal\n    stats socket {sock} mode 600 level admin\n", 1)
    text = text.replace("\nbackend attnd\n", "\nbackend attnd\n    http-response set-header X-Served-By %s\n", 1)
    if os.environ.get("HASH_BALANCE_FACTOR"):  # to measure the bounded-load variant
        text = text.replace("# hash-balance-factor 200", "hash-balance-factor " + os.environ["HASH_BALANCE_FACTOR"])
    if mode == "roundrobin":
        lines = [ln for ln in text.splitlines() if not ln.strip().startswith(("hash-type", "hash-balance-factor"))]
        text = "\n".join("    balance roundrobin" if ln.strip().startswith("balance ") else ln for ln in lines) + "\n"
    path = os.path.join(tmp, f"attnd-{mode}.cfg")
    with open(path, "w") as f:
        f.write(text)
    return path, sock


class HAProxy:
    def __init__(self, cfg, sock, env):
        self.sock = sock
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {**os.environ, **env, "ATTND_LISTEN": f"127.0.0.1:{self.port}"}
        self.log_path = cfg[:-4] + ".log"
        self.log = open(self.log_path, "w")  # the request log (option httplog), for a failure's details
        self.proc = subprocess.Popen([HAPROXY, "-db", "-f", cfg], env=self.env, stdin=subprocess.DEVNULL,
                                     stdout=self.log, stderr=subprocess.STDOUT, text=True)
        t0 = time.time()
        while time.time() - t0 < 15 and set(self.status().values()) != {"UP"}:
            if self.proc.poll() is not None:
                raise RuntimeError("haproxy exited: " + open(self.log_path).read()[-2000:])
            time.sleep(0.05)
        if set(self.status().values()) != {"UP"}:
            raise RuntimeError(f"haproxy: backends not UP: {self.status()}")

    def command(self, cmd):
        try:
            with socket.socket(socket.AF_UNIX) as s:
                s.connect(self.sock)
                s.sendall(cmd.encode() + b"\n")
                out = b""
                while chunk := s.recv(65536):
                    out += chunk
            return out.decode()
        except OSError:
            return ""

    def status(self):
        """{server: "UP" | "DOWN" | ...} of backend attnd (from `show stat`)."""
        out = {}
        lines = self.command("show stat").splitlines()
        if not lines:
            return out
        head = lines[0].lstrip("# ").split(",")
        for ln in lines[1:]:
            row = dict(zip(head, ln.split(",")))
            if row.get("pxname") == "attnd" and row.get("svname") in NAMES:
                out[row["svname"]] = row.get("status", "").split(" ")[0]
        return out

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()

    def log_lines(self, pred):
        with open(self.log_path) as f:
            return [ln.rstrip() for ln in f if pred(ln)]


# ---------------------------------------------------------------------------------------------
# the load
# ---------------------------------------------------------------------------------------------
def chat(url, i, max_tokens=MAX_TOKENS):
    """One streamed chat request (prompt i % 8, question i); a dict with ok, ttft (s), served_by,
    t0 / t1 (monotonic), error."""
    body = json.dumps({"model": "kjv", "messages": [
        {"role": "system", "content": PROMPTS[i % N_PROMPTS]},
        {"role": "user", "content": f"Question {i}: who shall go up unto the house of the lord?"}],
        "max_tokens": max_tokens, "stream": True})
    res = {"i": i, "ok": False, "ttft": None, "served_by": None, "t0": time.monotonic(), "error": None}
    try:
        with requests.post(url + "/v1/chat/completions", data=body, stream=True, timeout=60,
                           headers={"Content-Type": "application/json"}) as r:
            res["served_by"] = r.headers.get("X-Served-By")
            if r.status_code != 200:
                res["error"] = f"status {r.status_code}: {r.text[:200]}"
                return res
            done = 0
            for line in r.iter_lines():
                if line == b"data: [DONE]":
                    done = 1
                elif line.startswith(b"data: ") and res["ttft"] is None:
                    delta = json.loads(line[6:])["choices"][0]["delta"]
                    if delta.get("content"):
                        res["ttft"] = time.monotonic() - res["t0"]
            res["ok"] = bool(done)
            if not done:
                res["error"] = "stream ended without [DONE]"
    except (requests.RequestException, ValueError) as ex:
        res["error"] = f"{type(ex).__name__}: {ex}"
    res["t1"] = time.monotonic()
    return res


def run_load(url, n, threads=N_THREADS, max_tokens=MAX_TOKENS, first=0):
    """n requests (ids first..first+n) from `threads` client threads; the results in id order."""
    results, lock, nxt = [], threading.Lock(), [first]

    def worker():
        while True:
            with lock:
                i = nxt[0]
                if i >= first + n:
                    return
                nxt[0] += 1
            r = chat(url, i, max_tokens)
            with lock:
                results.append(r)

    ts = [threading.Thread(target=worker) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return sorted(results, key=lambda r: r["i"])


def shared_prefix_tokens(d):
    """Per prompt, the tokens two chats with that system prompt and different questions share
    (the daemon's own token ids of both requests, from /attention)."""
    out = []
    for p in range(N_PROMPTS):
        ids = []
        for q in (p, p + N_PROMPTS):  # two requests of prompt p
            body = {"messages": [{"role": "system", "content": PROMPTS[p]},
                                 {"role": "user", "content": f"Question {q}: who shall go up unto the house of the lord?"}],
                    "max_tokens": 1}
            rid = d.post("/v1/chat/completions", body).json()["id"]
            ids.append(d.get(f"/attention?layer=0&head=0&id={rid}").json()["token_ids"])
        n = 0
        while n < min(map(len, ids)) and ids[0][n] == ids[1][n]:
            n += 1
        out.append(n)
    return out


class Setup:
    """Fresh replicas behind HAProxy on the derived configuration of mode."""

    def __init__(self, tmp, mode):
        self.mode = mode
        self.reps = Replicas()
        cfg, sock = derived_config(tmp, mode)
        r = subprocess.run([HAPROXY, "-c", "-f", cfg], capture_output=True, text=True,
                           env={**os.environ, **self.reps.env()})
        c.check(r.returncode == 0, f"haproxy -c on the derived {mode} configuration: {r.stdout} {r.stderr}")
        self.hp = HAProxy(cfg, sock, self.reps.env())
        self.hits0 = self.reps.hits()
        self.results = []

    def round(self, first, n):
        self.results += run_load(self.hp.url, n, first=first)

    def report(self, shared):
        """(mean TTFT s, hit fraction of the shared prefix tokens); prints the figures."""
        res, after = self.results, self.reps.hits()
        hit = sum(after[n] - self.hits0[n] for n in NAMES)
        ok = [r for r in res if r["ok"]]
        c.check(len(ok) == len(res) == N_REQUESTS, f"{self.mode}: {N_REQUESTS - len(ok)} requests failed: "
                f"{[r['error'] for r in res if not r['ok']][:3]}")
        ttfts = sorted(r["ttft"] for r in ok if r["ttft"] is not None)
        c.check(len(ttfts) == len(ok), f"{self.mode}: {len(ok) - len(ttfts)} answers streamed no content")
        mean = sum(ttfts) / max(1, len(ttfts))
        per = {n: sum(1 for r in ok if r["served_by"] == n) for n in NAMES}
        total = sum(shared[r["i"] % N_PROMPTS] for r in res)
        print(f"{self.mode}: {len(ok)}/{len(res)} ok, TTFT mean {mean * 1e3:.1f} ms, median "
              f"{ttfts[len(ttfts) // 2] * 1e3:.1f} ms; prefix-cache hits {hit:.0f} of {total} shared prefix tokens "
              f"({100 * hit / total:.1f} %); requests per replica {per}")
        return mean, hit / total

    def stop(self):
        self.hp.stop()
        self.reps.stop()


def compare(tmp, shared):
    """Round-robin and hash side by side on fresh replicas, the 96 requests in 4 rounds of 24
    that alternate between the two (so that both see the same background load). Returns the hash
    setup, still running."""
    rr = Setup(tmp, "roundrobin")
    try:
        h = Setup(tmp, "hash")
    except Exception:
        rr.stop()
        raise
    try:
        rounds = 4
        for k in range(rounds):
            for s in ((rr, h) if k % 2 == 0 else (h, rr)):
                s.round(k * N_REQUESTS // rounds, N_REQUESTS // rounds)
        rr_ttft, rr_hit = rr.report(shared)
        h_ttft, h_hit = h.report(shared)
    except Exception:
        h.stop()
        raise
    finally:
        rr.stop()
    c.check(h_hit >= 0.85, f"hash: prefix-cache hits {100 * h_hit:.1f} % of the shared prefix tokens (want >= 85 %)")
    # each prompt has one home replica (with hash-balance-factor F a request goes elsewhere while
    # its home has F/100 times the mean number of requests in flight)
    where = {p: Counter(r["served_by"] for r in h.results if r["i"] % N_PROMPTS == p) for p in range(N_PROMPTS)}
    at_home = sum(max(v.values()) for v in where.values())
    want = 0.8 * N_REQUESTS if os.environ.get("HASH_BALANCE_FACTOR") else N_REQUESTS
    c.check(at_home >= want, f"hash: only {at_home} of {N_REQUESTS} requests at their prompt's replica: {where}")
    c.check(h_ttft < rr_ttft, f"hash: mean TTFT {h_ttft * 1e3:.1f} ms not below round-robin's {rr_ttft * 1e3:.1f} ms")
    print(f"hash: {at_home} of {N_REQUESTS} requests at their prompt's home replica; "
          f"{[dict(v) for v in where.values()]}")
    print(f"mean TTFT round-robin / hash: {rr_ttft / h_ttft:.2f}x (goal 2x); prefix-cache hits: hash "
          f"{100 * h_hit:.1f} %, round-robin {100 * rr_hit:.1f} %")
    return h


# ---------------------------------------------------------------------------------------------
# failures: SIGKILL and SIGTERM of a replica under load
# ---------------------------------------------------------------------------------------------
def in_background(url, n, first):
    out = []
    t = threading.Thread(target=lambda: out.extend(run_load(url, n, max_tokens=200, first=first)))
    t.start()
    return t, out


def wait_down(hp, name, timeout=10.0):
    """Seconds until HAProxy no longer has name UP (None if it stays UP for timeout seconds)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if hp.status().get(name, "UP") != "UP":
            return time.monotonic() - t0
        time.sleep(0.02)
    return None


def kill_test(reps, hp, victim="attnd2"):
    t, res = in_background(hp.url, 60, first=1000)
    time.sleep(0.5)
    # kill it while it is generating (its scheduler reports a running request)
    while t.is_alive() and reps.d[victim].metrics()["attnd_requests_running"] < 1:
        time.sleep(0.01)
    t_kill = time.monotonic()
    reps.d[victim].proc.kill()
    down = wait_down(hp, victim)
    t.join()
    reps.d[victim].proc.wait()
    failed = [r for r in res if not r["ok"]]
    streaming = [r for r in res if r["served_by"] == victim and r["t0"] < t_kill < r["t1"]]
    c.check(down is not None and down <= 2.0, f"SIGKILL: {victim} left the pool after {down} s (want <= 2 s)")
    c.check(len(res) == 60 and all(r["served_by"] == victim and r["t0"] < t_kill for r in failed),
            f"SIGKILL: a request failed that was not in flight on {victim}: "
            f"{[(r['i'], r['served_by'], r['error']) for r in failed if r['served_by'] != victim or r['t0'] >= t_kill]}")
    c.check(all(r["ok"] for r in res if r["t0"] > t_kill), "SIGKILL: a request started after the kill failed")
    c.check(streaming and all(not r["ok"] for r in streaming),
            f"SIGKILL: {len(streaming)} streams in flight on {victim} at the kill, all must have failed")
    c.check(len(failed) <= N_THREADS, f"SIGKILL: {len(failed)} failures, more than the {N_THREADS} clients")
    print(f"SIGKILL {victim}: out of the pool after {down:.2f} s; {len(failed)} of 60 requests failed, the "
          f"{len(streaming)} streams it was sending; {sum(1 for r in res if r['t0'] > t_kill)} started after "
          f"the kill, all ok")


def drain_test(reps, hp, name="attnd1"):
    t, res = in_background(hp.url, 60, first=2000)
    time.sleep(0.5)
    while t.is_alive() and reps.d[name].metrics()["attnd_requests_running"] < 1:
        time.sleep(0.01)
    t_term = time.monotonic()
    reps.d[name].proc.send_signal(signal.SIGTERM)
    down = wait_down(hp, name)
    t.join()
    rc = reps.d[name].proc.wait(30)
    failed = [r for r in res if not r["ok"]]
    own = [r for r in res if r["served_by"] == name and r["t0"] < t_term < r["t1"]]
    c.check(not failed, f"SIGTERM: {len(failed)} client-visible failures: {[(r['served_by'], r['error']) for r in failed][:3]}")
    c.check(rc == 0, f"SIGTERM: {name} exit status {rc}")
    c.check(down is not None and down <= 2.0, f"SIGTERM: {name} left the pool after {down} s")
    c.check(len(res) == 60, f"SIGTERM: {len(res)} of 60 requests answered")
    c.check(own, f"SIGTERM: no stream was in flight on {name} at the signal (nothing drained)")
    print(f"SIGTERM {name}: out of the pool after {down:.2f} s, exit {rc}; 60 of 60 requests ok, {len(own)} of them "
          f"streaming from {name} when it got the signal (finished in its grace time)")


def check_shipped():
    env = {k: v for k, v in os.environ.items() if not k.startswith("ATTND_")}
    r = subprocess.run([HAPROXY, "-c", "-f", SHIPPED], capture_output=True, text=True, env=env)
    c.check(r.returncode == 0, f"haproxy -c -f deploy/haproxy/attnd.cfg: {r.stdout} {r.stderr}")
    with open(SHIPPED) as f:
        text = f.read()
    for need in ("balance hash req.body,bytes(0,", "hash-type consistent", "option http-buffer-request",
                 "http-check send meth GET uri /health", "inter 500ms", "fall 2", "retry-on conn-failure",
                 *(f"presetenv ATTND_BACKEND{i} 127.0.0.1:808{i}" for i in (1, 2, 3))):
        c.check(need in " ".join(text.split()), f"attnd.cfg lacks {need!r}")


def main():
    for path in (KJV, HAPROXY, ATTND):
        if not os.path.exists(path):
            print(f"missing {path}")
            sys.exit(1)
    check_shipped()
    tmp = tempfile.mkdtemp(prefix="attnd-haproxy-")
    d = Daemon(KJV, "--threads", "1", "--ctx", "1024", "--keep-requests", "32")
    try:
        shared = shared_prefix_tokens(d)
    finally:
        d.stop()
    print(f"shared prefix of each system prompt, tokens: {shared}")
    try:
        h = compare(tmp, shared)
        try:
            kill_test(h.reps, h.hp)
            drain_test(h.reps, h.hp)
        finally:
            h.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    c.finish()


main()
