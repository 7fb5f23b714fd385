#!/usr/bin/python3
"""CORS (--cors ORIGINS): a browser app of an allowed origin may call the API. Preflights
(OPTIONS with Access-Control-Request-Method) are answered 204 without the key, naming the route's
methods and the headers a client sends; every answer, error, stream and map included, carries
Access-Control-Allow-Origin for an allowed Origin and nothing for another; the key is still
required on the real request. Without --cors nothing changes."""
import json

import requests

from attnd_daemon import Checker, Daemon, model

c = Checker("test_http_cors")
MODEL = model("tiny-llama-spm-f32.gguf")
APP, OTHER = "http://app.example:3000", "http://evil.example"
KEY = {"Authorization": "Bearer sekret"}
BODY = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}


def preflight(d, path, origin, method="POST"):
    return requests.options(d.url + path, headers={"Origin": origin, "Access-Control-Request-Method": method,
                                                   "Access-Control-Request-Headers": "authorization, content-type"},
                            timeout=30)


def listed():
    d = Daemon(MODEL, "--cors", f"{APP}, http://localhost:8000", "--api-key", "sekret")
    try:
        r = preflight(d, "/v1/chat/completions", APP)
        h = r.headers
        c.check(r.status_code == 204 and h.get("Access-Control-Allow-Origin") == APP and "Origin" in h.get("Vary", ""),
                f"preflight: {r.status_code} {dict(h)}")
        c.check("POST" in h.get("Access-Control-Allow-Methods", "") and
                "Authorization" in h.get("Access-Control-Allow-Headers", ""), f"preflight lists: {dict(h)}")
        r = preflight(d, "/v1/chat/completions", OTHER)
        c.check("Access-Control-Allow-Origin" not in r.headers, f"preflight of another origin: {dict(r.headers)}")
        r = d.post("/v1/chat/completions", BODY, headers={"Origin": APP, **KEY})
        c.check(r.status_code == 200 and r.headers.get("Access-Control-Allow-Origin") == APP, f"answer: {dict(r.headers)}")
        r = d.post("/v1/chat/completions", BODY, headers={"Origin": APP})
        c.check(r.status_code == 401 and r.headers.get("Access-Control-Allow-Origin") == APP,
                f"the key is still needed, and the 401 is readable by the app: {r.status_code} {dict(r.headers)}")
        r = d.post("/v1/chat/completions", BODY, headers={"Origin": OTHER, **KEY})
        c.check(r.status_code == 200 and "Access-Control-Allow-Origin" not in r.headers, f"another origin: {dict(r.headers)}")
        with d.post("/v1/chat/completions", dict(BODY, stream=True), headers={"Origin": "http://localhost:8000", **KEY},
                    stream=True) as r:
            c.check(r.headers.get("Access-Control-Allow-Origin") == "http://localhost:8000", f"stream: {dict(r.headers)}")
            list(r.iter_lines())
        gen = d.post("/v1/generate", {"prompt": "hi", "max_tokens": 2}, headers=KEY).json()
        r = d.get(f"/attention?id={gen['id']}&layer=0&head=0", headers={"Origin": APP, **KEY})
        c.check(r.status_code == 200 and r.headers.get("Access-Control-Allow-Origin") == APP, f"map: {dict(r.headers)}")
    finally:
        c.check(d.stop() == 0, "clean exit")


def any_and_off():
    d = Daemon(MODEL, "--cors", "*")
    try:
        r = d.post("/v1/generate", {"prompt": "hi", "max_tokens": 2}, headers={"Origin": OTHER})
        c.check(r.headers.get("Access-Control-Allow-Origin") == "*", f"'*': {dict(r.headers)}")
    finally:
        d.stop()
    d = Daemon(MODEL)
    try:
        r = preflight(d, "/v1/generate", APP)
        c.check(r.status_code == 405 and "Access-Control-Allow-Origin" not in r.headers,
                f"without --cors, OPTIONS is a 405 as before: {r.status_code} {dict(r.headers)}")
        r = d.post("/v1/generate", json.dumps({"prompt": "hi", "max_tokens": 2}), headers={"Origin": APP})
        c.check("Access-Control-Allow-Origin" not in r.headers, f"without --cors: {dict(r.headers)}")
    finally:
        d.stop()


listed()
any_and_off()
c.finish()
