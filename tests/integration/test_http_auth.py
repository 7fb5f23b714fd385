#!/usr/bin/python3
"""--api-key / --api-key-file: every route but /health needs `Authorization: Bearer KEY`
(401 with the one error shape and WWW-Authenticate otherwise); /health stays open; wrong keys,
other schemes and keys of other lengths are refused; bad flags are refused at start-up."""
import os
import subprocess
import tempfile

from attnd_daemon import ATTND, Checker, Daemon, error_shape_ok, model

c = Checker("test_http_auth")
MODEL = model("stories260K.gguf")
KEY = "s3cret-Key_0123456789"

with tempfile.TemporaryDirectory() as tmp:
    key_file = os.path.join(tmp, "key")
    with open(key_file, "w") as f:
        f.write(KEY + "\n")
    for flag, value in (("--api-key", KEY), ("--api-key-file", key_file)):
        d = Daemon(MODEL, flag, value)
        try:
            good = {"Authorization": "Bearer " + KEY}
            c.check(d.get("/health").status_code == 200, f"{flag}: /health must stay open")
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
            c.check(r.status_code == 200 and 'attnd_errors_total{type="authentication_error"} 30' in r.text,
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
