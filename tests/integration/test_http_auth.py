#!/usr/bin/python3
"""--api-key / --api-key-file: every route but the open ones needs `Authorization: Bearer KEY`
(401 with the one error shape and WWW-Authenticate otherwise); wrong keys, other schemes and
keys of other lengths are refused; bad flags are refused at start-up. The open ones are what
`serve --help` lists (/health and the playground's files, every file of web/): the daemon's
actual behaviour is checked against that text, route by route and file by file."""
import os
import re
import subprocess
import tempfile

from attnd_daemon import ATTND, Checker, Daemon, error_shape_ok, model

c = Checker("test_http_auth")
MODEL = model("stories260K.gguf")
KEY = "s3cret-Key_0123456789"
WEB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "web")


def help_lists():
    """(every route's path, the paths --help says are open) from `attnd serve --help`."""
    text = subprocess.run([ATTND, "serve", "--help"], capture_output=True, text=True, timeout=30).stdout
    text = text + subprocess.run([ATTND, "serve", "--help"], capture_output=True, text=True, timeout=30).stderr
    flat = " ".join(text.split())
    routes = re.search(r"Routes: (.*?)\(", flat)
    opened = re.search(r"Open without a key: (.*?)Every other path needs the key", flat)
    if not c.check(routes and opened, f"--help lists the routes and the open ones:\n{text[-800:]}"):
        return [], []
    paths = re.findall(r"(?:GET|POST) (/\S*?)[,.]?(?= |$)", routes.group(1))
    return paths, re.findall(r"(/(?:[A-Za-z0-9_]+(?:\.[A-Za-z0-9_]+)*)?)", opened.group(1))


def check_open_list(d, flag):
    """Every path --help names as open answers without the key, and so does every file of web/
    (the text says "every other file of web/"); every other route and an unknown file need it."""
    paths, opened = help_lists()
    c.check("/health" in opened and "/" in opened and "/index.html" in opened, f"--help open list: {opened}")
    for name in sorted(os.listdir(WEB)):
        opened.append("/" + name)
    for p in sorted(set(opened)):
        r = d.get(p)
        c.check(r.status_code == 200, f"{flag}: {p} is listed as open but answers {r.status_code} without the key")
    closed = [p for p in paths if p not in opened] + ["/no-such-file.js", "/index.htm", "/web/app.js"]
    c.check(len(closed) >= 8, f"routes that need the key: {closed}")
    for p in closed:
        r = d.get(p)
        c.check(r.status_code == 401, f"{flag}: {p} is not listed as open but answers {r.status_code} without the key")
    return len(closed)

with tempfile.TemporaryDirectory() as tmp:
    key_file = os.path.join(tmp, "key")
    with open(key_file, "w") as f:
        f.write(KEY + "\n")
    for flag, value in (("--api-key", KEY), ("--api-key-file", key_file)):
        d = Daemon(MODEL, flag, value)
        try:
            good = {"Authorization": "Bearer " + KEY}
            c.check(d.get("/health").status_code == 200, f"{flag}: /health must stay open")
            n401 = check_open_list(d, flag)
            for method, path, body in (("GET", "/v1/models", None), ("GET", "/metrics", None),
                                       ("GET", "/attention?layer=0&head=0", None),
                                       ("POST", "/v1/generate", {"prompt": [1, 2], "max_tokens": 2}),
                                       ("GET", "/nope", None)):
                for hdrs, what in (({}, "no header"), ({"Authorization": "Bearer wrong"}, "wrong key"),
                                   ({"Authorization": "Bearer " + KEY[:-1]}, "key prefix"),
                                   ({"Authorization": "Bearer " + KEY + "x"}, "longer key"),
                                   ({"Authorization": "Basic " + KEY}, "other scheme"),
                                   ({"Authorization": KEY}, "bare key")):
                    r = d.post(path, body, headers=hdrs) if method == "POST" else d.get(path, headers=hdrs)
                    err = error_shape_ok(r, 401)
                    c.check(err is None and r.headers.get("WWW-Authenticate") == "Bearer",
                            f"{flag}: {method} {path} with {what}: {err}")
            r = d.post("/v1/generate", {"prompt": [1, 2], "max_tokens": 3, "temperature": 0}, headers=good)
            c.check(r.status_code == 200 and len(r.json()["tokens"]) <= 3, f"{flag}: generate with the key: {r.status_code}")
            c.check(d.get("/v1/models", headers=good).status_code == 200, f"{flag}: models with the key")
            c.check(d.get("/attention?layer=0&head=0", headers=good).status_code == 200, f"{flag}: attention with the key")
            r = d.get("/metrics", headers=good)
            c.check(r.status_code == 200 and 'attnd_errors_total{type="authentication_error"} %d' % (30 + n401) in r.text,
                    f"{flag}: 401s counted in /metrics")
            c.check(error_shape_ok(d.get("/nope", headers=good), 404) is None, f"{flag}: 404 with the key")
        finally:
            c.check(d.stop() == 0, f"{flag}: exit status")

    # refused at start-up: an empty key file, both flags, a missing file
    empty = os.path.join(tmp, "empty")
    open(empty, "w").close()
    for args in (["--api-key-file", empty], ["--api-key", KEY, "--api-key-file", key_file],
                 ["--api-key-file", os.path.join(tmp, "missing")], ["--api-key", ""]):
        r = subprocess.run([ATTND, "serve", "-m", MODEL, "--port", "0", *args], capture_output=True, text=True,
                           timeout=30)
        c.check(r.returncode == 2, f"serve {args}: exit {r.returncode}, want 2")
c.finish()
