"""Helpers shared by the test_http*.py scripts (not a test itself: tests/run.sh runs only
test_* files). Starts the real daemon on loopback with --port 0, reads the port from its
stderr, and stops it at the end."""
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

import requests

SHARED = os.environ.get("SHARED", "../shared")
ATTND = os.environ.get("ATTND", "build/release/attnd")
MODELS = os.path.join(SHARED, "models")


def model(name):
    path = os.path.join(MODELS, name)
    if not os.path.exists(path):
        print(f"missing test model {path} (set SHARED=...)")
        sys.exit(1)
    return path


class Daemon:
    """`attnd serve -m MODEL --port 0 ARGS...`; .url is http://127.0.0.1:PORT once started."""

    def __init__(self, model_path, *args, wait_ready=True):
        cmd = [ATTND, "serve", "-m", model_path, "--port", "0", "--threads", "2", *args]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True, errors="replace")
        self.lines = []
        self.port = None
        self._got_port = threading.Event()
        self._reader = threading.Thread(target=self._read_stderr, daemon=True)
        self._reader.start()
        if not self._got_port.wait(30) or self.port is None:
            self.kill()
            raise RuntimeError("daemon did not print its address:\n" + "".join(self.lines[-20:]))
        self.url = f"http://127.0.0.1:{self.port}"
        if wait_ready:
            self.wait_ready()

    def _read_stderr(self):
        for line in self.proc.stderr:
            self.lines.append(line)
            m = re.search(r"listening on http://\S+:(\d+)", line)
            if m and self.port is None:
                self.port = int(m.group(1))
                self._got_port.set()
        self._got_port.set()

    def wait_ready(self, timeout=60):
        t0 = time.time()
        while time.time() - t0 < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError("daemon exited:\n" + "".join(self.lines[-20:]))
            try:
                if requests.get(self.url + "/health", timeout=5).status_code == 200:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.05)
        raise RuntimeError("daemon not ready in time")

    def log(self):
        return "".join(self.lines)

    def stop(self, timeout=30):
        """SIGTERM, then wait; returns the exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            rc = -9
        self._reader.join(5)
        return rc

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    # ---- requests ----
    def get(self, path, **kw):
        kw.setdefault("timeout", 60)
        return requests.get(self.url + path, **kw)

    def post(self, path, body=None, **kw):
        kw.setdefault("timeout", 120)
        if isinstance(body, (dict, list)):
            body = json.dumps(body)
        return requests.post(self.url + path, data=body, **kw)

    def generate(self, **fields):
        r = self.post("/v1/generate", fields)
        if r.status_code != 200:
            raise RuntimeError(f"generate {fields}: {r.status_code} {r.text[:300]}")
        return r.json()

    def stream(self, **fields):
        """Streams a generation; returns (events, saw_done)."""
        fields["stream"] = True
        with self.post("/v1/generate", fields, stream=True) as r:
            if r.status_code != 200:
                raise RuntimeError(f"stream {fields}: {r.status_code} {r.text[:300]}")
            assert r.headers.get("Content-Type", "").startswith("text/event-stream"), r.headers
            return parse_sse(r.iter_lines(chunk_size=None))

    def metrics(self, **kw):
        r = self.get("/metrics", **kw)
        assert r.status_code == 200, r.text
        return parse_prometheus(r.text)


def wait_for(pred, timeout=10.0):
    """Polls pred() every 50 ms until it is true (True) or timeout seconds pass (False)."""
    t0 = time.time()
    while time.time() - t0 < timeout:
        if pred():
            return True
        time.sleep(0.05)
    return False


def parse_sse(lines):
    """Events from an SSE line iterator: a list of parsed `data:` payloads, and whether
    `data: [DONE]` ended the stream."""
    events, data, done = [], [], False
    for raw in lines:
        line = raw.decode("utf-8") if isinstance(raw, bytes) else raw
        if line == "":
            if data:
                payload = "\n".join(data)
                data = []
                if payload == "[DONE]":
                    done = True
                else:
                    events.append(json.loads(payload))
            continue
        if line.startswith(":"):
            continue  # comment (keep-alive)
        if line.startswith("data:"):
            data.append(line[5:].lstrip(" ") if line.startswith("data: ") else line[5:])
    return events, done


PROM_LINE = re.compile(
    r'^([a-zA-Z_:][a-zA-Z0-9_:]*)'
    r'(\{(?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\.)*")(?:,[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\.)*")*\})?'
    r' ([-+]?(?:[0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?|\.[0-9]+|Inf|NaN|\+Inf|-Inf))$')


def parse_prometheus(text):
    """{'name{labels}': value}; raises on any line that is not valid exposition format."""
    out = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        if line.startswith("#"):
            if not re.match(r"^# (HELP|TYPE) [a-zA-Z_:][a-zA-Z0-9_:]* .+$", line):
                raise ValueError(f"bad comment line: {line!r}")
            continue
        m = PROM_LINE.match(line)
        if not m:
            raise ValueError(f"bad metrics line: {line!r}")
        out[m.group(1) + (m.group(2) or "")] = float(m.group(3))
    return out


def error_shape_ok(r, status):
    """The response has the given status and the one error shape with that code."""
    if r.status_code != status:
        return f"status {r.status_code}, want {status}: {r.text[:200]}"
    if not r.headers.get("Content-Type", "").startswith("application/json"):
        return f"content type {r.headers.get('Content-Type')}"
    try:
        e = r.json()["error"]
    except Exception as ex:  # noqa: BLE001 - any failure is a wrong shape
        return f"not the error shape ({ex}): {r.text[:200]}"
    if set(e) != {"code", "type", "message"} or e["code"] != status or not isinstance(e["type"], str) \
            or not isinstance(e["message"], str) or not e["message"]:
        return f"wrong error object: {e}"
    return None


class Checker:
    def __init__(self, name):
        self.name = name
        self.failures = 0
        self.checks = 0

    def check(self, cond, msg):
        self.checks += 1
        if not cond:
            self.failures += 1
            print(f"FAIL {msg}")
        return cond

    def finish(self, extra=""):
        print(f"{self.name}: {self.checks} checks, {self.failures} failures{extra}")
        sys.exit(1 if self.failures else 0)
