#!/usr/bin/python3
"""The container image, run the way a deployment runs it (`make image-test`; `make image` first).

The image's own ENTRYPOINT + CMD (read from the image's config) run from the image's own root
file system with `buildah run --isolation chroot` (no Docker engine here) as uid 10001, with a
model directory mounted read-only at /models. Checked over real HTTP:
  - /health is 503 {"status":"loading"} while the model loads (the mounted model.gguf is a FIFO,
    so the load waits), the image's HEALTHCHECK command fails then, SIGTERM then exits 0;
  - with a real model /health goes to 200 and the HEALTHCHECK command succeeds;
  - a greedy /v1/generate answers exactly what the host build (build/release/attnd) answers for
    the same request on the same model, and /attention matches the host's numbers;
  - SIGTERM with a request in flight: no new connections, the request completes, exit status 0;
  - the process runs as uid/gid 10001 (read from /proc);
  - the runtime image holds no compiler, no source and no -dev package, ldd finds every library,
    the Vulkan loader is there and (default variant) Mesa/LLVM are not;
  - with models/kjv.gguf in the tree: the image holds it as /models/model.gguf and serves it
    with no mount; without it: /models in the image is empty.
The only port option changed from the image's CMD is --port (a free one: the machine is shared);
the HEALTHCHECK command gets the same port through ATTND_PORT. Prints the transcript of the
health, generate and drain checks, and the image size. Exit 0 pass, 1 fail."""
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import requests

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
from attnd_daemon import Checker, Daemon, model, parse_sse  # noqa: E402

VERSION = open(os.path.join(ROOT, "VERSION")).read().strip()
TAG = os.environ.get("IMAGE_TAG", f"{os.environ.get('IMAGE', 'attnd')}:{VERSION}")
USER = "10001:10001"
c = Checker("test_image")


def say(msg):
    print(msg, flush=True)


def buildah(*args, check=True):
    r = subprocess.run(["buildah", *args], capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RuntimeError(f"buildah {' '.join(args)}: {r.stderr.strip()}")
    return r.stdout.strip()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def descendants(pid):
    """Every process below pid (from /proc), pid itself first."""
    children = {}
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open(f"/proc/{p}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(p))
            except (OSError, IndexError, ValueError):
                pass
    out, todo = [], [pid]
    while todo:
        q = todo.pop()
        out.append(q)
        todo.extend(children.get(q, []))
    return out


def proc_comm(pid):
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return None


class Container:
    """A working container of the image: buildah from / run / mount / rm."""

    def __init__(self, tag):
        self.name = f"attnd-image-test-{os.getpid()}-{int(time.time() * 1000) % 100000}"
        buildah("from", "--pull=never", "--quiet", "--name", self.name, tag)
        self.config = json.loads(buildah("inspect", "--type", "image", tag))["Docker"]["config"]
        self.root = None

    def mount(self):
        if self.root is None:
            self.root = buildah("mount", self.name)
        return self.root

    def run_argv(self, argv, mounts=(), env=()):
        cmd = ["buildah", "run", "--isolation", "chroot", "--user", USER]
        for m in mounts:
            cmd += ["-v", m]
        for e in env:
            cmd += ["--env", e]
        return cmd + [self.name, "--", *argv]

    def run(self, argv, mounts=(), env=(), timeout=60):
        return subprocess.run(self.run_argv(argv, mounts, env), capture_output=True, text=True, timeout=timeout)

    def remove(self):
        if self.root is not None:
            buildah("umount", self.name, check=False)
        buildah("rm", self.name, check=False)


class Served:
    """The image's entrypoint + CMD (with --port P) running in the container."""

    def __init__(self, ctr, mounts):
        self.ctr = ctr
        self.port = free_port()
        cmd = list(ctr.config.get("Cmd") or [])
        if not c.check("--port" in cmd and cmd[cmd.index("--port") + 1] == "8080", f"image CMD serves on 8080: {cmd}"):
            raise RuntimeError("image CMD has no --port 8080")
        cmd[cmd.index("--port") + 1] = str(self.port)
        self.argv = list(ctr.config.get("Entrypoint") or []) + cmd
        self.url = f"http://127.0.0.1:{self.port}"
        self.lines = []
        self.listening = threading.Event()
        self.proc = subprocess.Popen(ctr.run_argv(self.argv, mounts), stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, errors="replace")
        threading.Thread(target=self._read, daemon=True).start()
        if not self.listening.wait(60) or self.proc.poll() is not None:
            self.kill()
            raise RuntimeError("the daemon in the image did not start:\n" + "".join(self.lines[-20:]))
        self.pid = next((p for p in descendants(self.proc.pid) if proc_comm(p) == "attnd"), None)

    def _read(self):
        for line in self.proc.stderr:
            self.lines.append(line)
            if "listening on" in line:
                self.listening.set()
        self.listening.set()

    def health(self):
        try:
            r = requests.get(self.url + "/health", timeout=5)
            return r.status_code, r.text.strip()
        except requests.RequestException as ex:
            return None, str(ex)

    def healthcheck(self):
        """The image's HEALTHCHECK command, run in the container: its exit status."""
        test = (self.ctr.config.get("Healthcheck") or {}).get("Test") or []
        if test[:1] == ["CMD-SHELL"]:
            argv = ["/bin/sh", "-c", test[1]]
        else:
            argv = test[1:]
        return self.ctr.run(argv, env=[f"ATTND_PORT={self.port}"], timeout=30).returncode

    def signal_and_wait(self, timeout=60):
        if self.pid:
            os.kill(self.pid, signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return None

    def kill(self):
        for p in reversed(descendants(self.proc.pid)):
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass
        self.proc.wait()


# ---------------------------------------------------------------------------------------------
# what the image holds
# ---------------------------------------------------------------------------------------------
def installed_packages(root):
    pkgs, name = set(), None
    with open(os.path.join(root, "var/lib/dpkg/status")) as f:
        for line in f:
            if line.startswith("Package: "):
                name = line.split()[1]
            elif line.startswith("Status: ") and line.strip().endswith("install ok installed"):
                pkgs.add(name)
    return pkgs


def check_contents(ctr):
    root = ctr.mount()
    pkgs = installed_packages(root)
    bad = sorted(p for p in pkgs if p.endswith("-dev") or re.fullmatch(r"(gcc|g\+\+|cpp|clang|tcc)(-[0-9]+)?", p)
                 or p.startswith(("binutils", "llvm")) or p in ("build-essential", "make", "glslang-tools"))
    c.check(not bad, f"compiler or -dev packages in the runtime image: {bad}")
    tools = [t for t in ("gcc", "cc", "c++", "g++", "cpp", "clang", "tcc", "as", "ld", "make", "glslangValidator")
             for d in ("usr/bin", "usr/local/bin", "bin") if os.path.lexists(os.path.join(root, d, t))]
    c.check(not tools, f"compilers in the runtime image: {tools}")
    sources = []
    for dirpath, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not os.path.ismount(os.path.join(dirpath, d))]
        sources += [os.path.join(dirpath, f)[len(root):] for f in files
                    if f.endswith((".c", ".h", ".cc", ".cpp", ".comp", ".glsl")) or f == "Makefile"]
    c.check(not sources and not os.path.exists(os.path.join(root, "src")),
            f"source files in the runtime image: {sources[:10]}")
    c.check("libvulkan1" in pkgs, "the Vulkan loader (libvulkan1) is missing")
    if TAG.endswith("-vulkan-cpu"):
        c.check("mesa-vulkan-drivers" in pkgs, "the -vulkan-cpu image has no Mesa Vulkan drivers")
    else:
        c.check(not any(p.startswith(("mesa-", "libllvm")) for p in pkgs), "Mesa/LLVM in the default (slim) image")
    ldd = ctr.run(["ldd", "/usr/local/bin/attnd"])
    c.check(ldd.returncode == 0 and "not found" not in ldd.stdout, f"ldd in the image: {ldd.stdout}{ldd.stderr}")
    size = sum(os.lstat(os.path.join(d, f)).st_size for d, _, fs in os.walk(root) for f in fs)
    say(f"image {TAG}: {len(pkgs)} packages, {size / 1e6:.0f} MB of files, "
        f"binary {os.path.getsize(os.path.join(root, 'usr/local/bin/attnd')) / 1e6:.1f} MB")
    return root


# ---------------------------------------------------------------------------------------------
# the checks over HTTP
# ---------------------------------------------------------------------------------------------
def check_loading(ctr, tmp):
    """A FIFO as the model: the load waits on it, so /health must say 503 loading."""
    d = os.path.join(tmp, "fifo")
    os.mkdir(d)
    os.mkfifo(os.path.join(d, "model.gguf"), 0o644)
    s = Served(ctr, [f"{d}:/models:ro"])
    try:
        code, body = s.health()
        say(f"[health, loading]  GET /health -> {code} {body}")
        c.check(code == 503 and json.loads(body or "{}").get("status") == "loading", f"/health while loading: {code} {body}")
        rc = s.healthcheck()
        say(f"[health, loading]  HEALTHCHECK {s.ctr.config['Healthcheck']['Test']} -> exit {rc}")
        c.check(rc != 0, "the HEALTHCHECK command succeeds while the model loads")
        rc = s.signal_and_wait(30)
        say(f"[health, loading]  SIGTERM while loading -> exit {rc}")
        c.check(rc == 0, f"exit status after SIGTERM while loading: {rc}")
    finally:
        if s.proc.poll() is None:
            s.kill()


def check_serving(s):
    seen = []
    t0 = time.time()
    while time.time() - t0 < 60:
        code, body = s.health()
        if not seen or seen[-1][0] != code:
            seen.append((code, body))
        if code == 200:
            break
        time.sleep(0.02)
    for code, body in seen:
        say(f"[health]  GET /health -> {code} {body}")
    if not c.check(seen and seen[-1][0] == 200, f"/health never 200: {seen}"):
        raise RuntimeError("the daemon in the image is not serving:\n" + "".join(s.lines[-20:]))
    rc = s.healthcheck()
    say(f"[health]  HEALTHCHECK {s.ctr.config['Healthcheck']['Test']} -> exit {rc}")
    c.check(rc == 0, f"the image's HEALTHCHECK command fails on a serving daemon: exit {rc}")
    with open(f"/proc/{s.pid}/status") as f:
        ids = {ln.split(":")[0]: ln.split()[1:] for ln in f if ln.startswith(("Uid:", "Gid:"))}
    say(f"[user]  attnd pid {s.pid}: Uid {' '.join(ids['Uid'])}, Gid {' '.join(ids['Gid'])}")
    c.check(ids["Uid"] == ["10001"] * 4 and ids["Gid"] == ["10001"] * 4, f"not running as 10001: {ids}")


def check_against_host(s, host, label):
    req = {"prompt": "In the beginning God created", "max_tokens": 24, "temperature": 0, "ignore_eos": True}
    a = requests.post(s.url + "/v1/generate", json=req, timeout=120)
    b = host.post("/v1/generate", req)
    say(f"[generate, {label}]  POST /v1/generate {json.dumps(req)}")
    for who, r in (("image", a), ("host ", b)):
        j = r.json() if r.status_code == 200 else {}
        say(f"    {who}: {r.status_code} tokens={j.get('tokens')} text={j.get('text')!r}")
    ok = a.status_code == 200 and b.status_code == 200
    c.check(ok and a.json()["tokens"] == b.json()["tokens"] and a.json()["text"] == b.json()["text"],
            f"{label}: greedy answer differs from the host build's")
    q = "/attention?layer=1&head=0"
    a, b = requests.get(s.url + q, timeout=60), host.get(q)
    c.check(a.status_code == 200 and b.status_code == 200, f"{label}: /attention {a.status_code} {a.text[:200]}")
    if a.status_code == b.status_code == 200:
        wa, wb = a.json()["weights"], b.json()["weights"]
        diff = max(abs(x - y) for ra, rb in zip(wa, wb) for x, y in zip(ra, rb))
        say(f"[attention, {label}]  GET {q} -> 200, {a.json()['n_tokens']} tokens, max |image - host| = {diff:.2e}, "
            f"rows sum to {min(sum(r) for r in wa):.6f}..{max(sum(r) for r in wa):.6f}")
        c.check(a.json()["token_ids"] == b.json()["token_ids"] and len(wa) == len(wb) and diff <= 1e-5,
                f"{label}: /attention differs from the host's (max diff {diff})")


def check_drain(s):
    ctx = requests.get(s.url + "/v1/models", timeout=10).json()["data"][0]["context_length"]
    req = {"prompt": "And the earth was without form", "max_tokens": min(300, ctx - 32), "temperature": 0, "ignore_eos": True,
           "stream": True}
    with requests.post(s.url + "/v1/generate", json=req, stream=True, timeout=120) as r:
        lines = r.iter_lines(chunk_size=None)
        next(x for x in lines if x.startswith(b"data: "))
        t0 = time.time()
        os.kill(s.pid, signal.SIGTERM)
        say(f"[drain]  stream of {req['max_tokens']} tokens started; SIGTERM sent to attnd (pid {s.pid})")
        time.sleep(0.3)
        try:
            socket.create_connection(("127.0.0.1", s.port), timeout=2).close()
            refused = False
        except OSError:
            refused = True
        say(f"[drain]  new connection after SIGTERM: {'refused' if refused else 'accepted'}")
        c.check(refused, "still accepting connections after SIGTERM")
        events, done = parse_sse(lines)
    last = events[-1] if events else {}
    say(f"[drain]  stream ended {time.time() - t0:.2f} s after SIGTERM: {len(events)} more events, "
        f"finish_reason={last.get('finish_reason')}, completion_tokens={last.get('usage', {}).get('completion_tokens')}, "
        f"[DONE]={done}")
    c.check(done and last.get("finish_reason") == "length"
            and last.get("usage", {}).get("completion_tokens") == req["max_tokens"], f"request in flight not drained: {last}")
    try:
        rc = s.proc.wait(30)
    except subprocess.TimeoutExpired:
        rc = None
    say(f"[drain]  exit status {rc}; last log lines: {''.join(s.lines[-2:]).strip()}")
    c.check(rc == 0, f"exit status after SIGTERM with a request in flight: {rc}")


def check_lavapipe(ctr, mdir):
    """The -vulkan-cpu image: `--backend vulkan` finds lavapipe and generates what the host's CPU build does."""
    argv = ["/usr/local/bin/attnd", "run", "-m", "/models/model.gguf", "--backend", "vulkan", "-p", "In the beginning",
            "-n", "8", "--temp", "0", "--json"]
    r = ctr.run(argv, mounts=[f"{mdir}:/models:ro"], timeout=300)
    h = subprocess.run([os.environ.get("ATTND", "build/release/attnd"), *argv[1:3], os.path.join(mdir, "model.gguf"),
                        "--backend", "cpu", *argv[6:]], capture_output=True, text=True, timeout=300)
    ok = r.returncode == 0 and h.returncode == 0
    out = [json.loads(x.stdout) if ok else {} for x in (r, h)]
    say(f"[vulkan-cpu]  attnd run --backend vulkan in the image -> exit {r.returncode}, {out[0].get('device')}, "
        f"tokens {out[0].get('tokens')}; host cpu {out[1].get('tokens')}")
    c.check(ok and out[0]["backend"] == "vulkan" and out[0]["tokens"] == out[1]["tokens"],
            f"lavapipe in the image: {r.stderr[-500:]}")


def serve_and_check(ctr, mounts, model_path, label):
    host = Daemon(model_path)
    s = Served(ctr, mounts)
    try:
        say(f"[{label}]  buildah run --isolation chroot --user {USER} {' '.join('-v ' + m for m in mounts)} "
            f"{TAG} -- {' '.join(s.argv)}")
        check_serving(s)
        check_against_host(s, host, label)
        check_drain(s)
    finally:
        host.stop()
        if s.proc.poll() is None:
            s.kill()


def check_default_model(ctr, root):
    baked = os.path.join(root, "models", "model.gguf")
    tree = os.path.join(ROOT, "models", "kjv.gguf")
    if not os.path.exists(tree):
        c.check(not os.listdir(os.path.join(root, "models")), "a model in the image without models/kjv.gguf in the tree")
        say("[default model]  models/kjv.gguf not in the tree: the image's /models is empty, the test mounts one")
        return
    digest = [hashlib.sha256(open(p, "rb").read()).hexdigest() for p in (baked, tree)] if os.path.exists(baked) else []
    c.check(digest and digest[0] == digest[1], "the image's /models/model.gguf is not models/kjv.gguf")
    st = os.stat(baked) if os.path.exists(baked) else None
    c.check(st and st.st_mode & 0o004, "the baked model is not readable by the unprivileged user")
    serve_and_check(ctr, [], tree, "baked models/kjv.gguf")


def main():
    t0 = time.time()
    if not shutil.which("buildah"):
        print("buildah not installed (make image-test installs it: deploy/install-deps.sh image)")
        sys.exit(1)
    ctr = Container(TAG)
    tmp = tempfile.mkdtemp(prefix="attnd-image-test-")
    try:
        os.chmod(tmp, 0o755)
        root = check_contents(ctr)
        check_loading(ctr, tmp)
        mdir = os.path.join(tmp, "models")
        os.mkdir(mdir)
        src = model("tiny-llama-spm-f32.gguf")
        shutil.copyfile(src, os.path.join(mdir, "model.gguf"))
        os.chmod(os.path.join(mdir, "model.gguf"), 0o644)
        serve_and_check(ctr, [f"{mdir}:/models:ro"], src, "mounted tiny-llama-spm-f32")
        if TAG.endswith("-vulkan-cpu"):
            check_lavapipe(ctr, mdir)
        check_default_model(ctr, root)
    finally:
        ctr.remove()
        shutil.rmtree(tmp, ignore_errors=True)
    c.finish(f" ({time.time() - t0:.0f} s)")


if __name__ == "__main__":
    main()
