#!/usr/bin/python3
"""GET /logit_lens against the real daemon: for a finished greedy request with logprobs=5, the
last layer's top entries at position p are the logprobs /v1/generate returned for the token
generated after p (probability = exp(logprob)); every layer's probabilities are sorted and sum
to at most 1; the default id is the most recent request; bad queries answer 400, unknown ids 404,
requests over --attention-max-tokens 413, all in the one error shape and counted in /metrics.
Also: the playground page is served at / without the API key, /logit_lens needs it."""
import math

from attnd_daemon import Checker, Daemon, error_shape_ok, model

c = Checker("test_logit_lens")
MODEL = model("tiny-llama-spm-f32.gguf")


def lens(d, query):
    r = d.get("/logit_lens?" + query)
    if not c.check(r.status_code == 200, f"/logit_lens?{query}: {r.status_code} {r.text[:300]}"):
        return None
    return r.json()


def check_shape(where, lj, n_layer, top):
    c.check(len(lj["layers"]) == n_layer, f"{where}: {len(lj['layers'])} layers, want {n_layer}")
    for k, layer in enumerate(lj["layers"]):
        probs = [p for _, p in layer["top"]]
        ok = (layer["layer"] == k and len(layer["top"]) == top and len(layer["top_ids"]) == top
              and all(isinstance(s, str) for s, _ in layer["top"])
              and all(isinstance(i, int) and i >= 0 for i in layer["top_ids"])
              and all(0 <= p <= 1 for p in probs)
              and all(probs[i] >= probs[i + 1] for i in range(len(probs) - 1))
              and sum(probs) <= 1 + 1e-6)
        c.check(ok, f"{where}: layer {k} not sorted probabilities summing to <= 1: {layer}")


d = Daemon(MODEL, "--ctx", "256", "--keep-requests", "3", "--attention-max-tokens", "64")
try:
    info = d.get("/v1/models").json()["data"][0]
    n_layer = info["n_layer"]
    c.check(n_layer >= 1 and info["n_head"] >= 1, f"/v1/models lacks n_layer/n_head: {info}")

    c.check(error_shape_ok(d.get("/logit_lens?pos=0"), 404) is None, "no finished request yet: 404")

    gen = d.generate(prompt="Once upon a time there was a little robot", max_tokens=8, temperature=0,
                     logprobs=5, ignore_eos=True)
    gid = gen["id"]
    n_prompt = gen["usage"]["prompt_tokens"]
    n_tokens = n_prompt + len(gen["tokens"])
    c.check(len(gen["logprobs"]) == len(gen["tokens"]) == 8, f"generate: {gen}")

    # ---- the last layer is the real next-token distribution ---------------------------------
    for k, lp in enumerate(gen["logprobs"]):
        p = n_prompt - 1 + k
        lj = lens(d, f"id={gid}&pos={p}&top=5")
        if not lj:
            continue
        where = f"{gid} pos {p}"
        c.check(lj["id"] == gid and lj["pos"] == p and lj["n_tokens"] == n_tokens and lj["top"] == 5
                and isinstance(lj["token"], str), f"{where}: header {dict((x, lj[x]) for x in lj if x != 'layers')}")
        if p >= n_prompt:
            c.check(lj["token_id"] == gen["tokens"][p - n_prompt], f"{where}: token_id {lj['token_id']}")
        check_shape(where, lj, n_layer, 5)
        last = lj["layers"][-1]
        want_ids = [i for i, _ in lp["top"]]
        want_p = [math.exp(v) for _, v in lp["top"]]
        got_p = [v for _, v in last["top"]]
        c.check(all(abs(a - b) <= 1e-4 for a, b in zip(got_p, want_p)) and len(got_p) == len(want_p),
                f"{where}: last layer probabilities {got_p} != exp(logprobs) {want_p}")
        # ids in the same order, except where two probabilities tie
        for i, (a, b) in enumerate(zip(last["top_ids"], want_ids)):
            tie = any(abs(want_p[i] - want_p[j]) <= 1e-6 for j in (i - 1, i + 1) if 0 <= j < len(want_p))
            c.check(a == b or tie, f"{where}: last layer ids {last['top_ids']} != logprobs ids {want_ids}")
        c.check(last["top_ids"][0] == gen["tokens"][k], f"{where}: greedy token {gen['tokens'][k]} is not top 1")

    # ---- defaults, other top sizes, position 0 ------------------------------------------------
    a = lens(d, f"pos={n_prompt}")
    b = lens(d, f"id={gid}&pos={n_prompt}&top=5")
    c.check(a is not None and a == b, "default id (most recent) and default top (5)")
    t20 = lens(d, f"id={gid}&pos=0&top=20")
    if t20:
        check_shape("top=20", t20, n_layer, 20)
    t1 = lens(d, f"id={gid}&pos={n_tokens - 1}&top=1")
    if t1:
        check_shape("top=1, last position", t1, n_layer, 1)
    b20 = lens(d, f"id={gid}&pos=0&top=20")
    c.check(t20 == b20, "the same query answers the same numbers")

    gen2 = d.generate(prompt="A second request", max_tokens=2, temperature=0)
    latest = lens(d, "pos=0")
    c.check(latest is not None and latest["id"] == gen2["id"], f"default id is the most recent request: {latest}")
    old = lens(d, f"id={gid}&pos=0&top=5")
    c.check(old is not None and old["id"] == gid, "an older request by id")
    num_id = lens(d, f"id={gid[4:]}&pos=0")
    c.check(num_id is not None and num_id["id"] == gid, "id without the gen- prefix")

    # ---- errors -------------------------------------------------------------------------------
    bad400 = ["", "pos=", "pos=-1", "pos=abc", "pos=1.5", f"id={gid}&pos={n_tokens}", f"id={gid}&pos=99999999999",
              "pos=0&top=0", "pos=0&top=21", "pos=0&top=x", "pos=0&layer=1", "pos=0&pos=1", "pos=0&id=bogus",
              "id=&pos=0"]
    for q in bad400:
        err = error_shape_ok(d.get("/logit_lens?" + q), 400)
        c.check(err is None, f"/logit_lens?{q}: {err}")
    c.check(error_shape_ok(d.get("/logit_lens?id=gen-999999&pos=0"), 404) is None, "unknown id: 404")
    c.check(error_shape_ok(d.post("/logit_lens?pos=0", "{}"), 405) is None, "POST: 405")
    long = d.generate(prompt=list(range(100, 170)), max_tokens=1, temperature=0)
    c.check(error_shape_ok(d.get(f"/logit_lens?id={long['id']}&pos=0"), 413) is None,
            "71 tokens over --attention-max-tokens 64: 413")
    c.check(d.get("/health").status_code == 200, "daemon still serving")

    mt = d.metrics()
    ok = mt.get('attnd_requests_total{route="/logit_lens",status="200"}', 0)
    c.check(ok >= 12, f"/logit_lens 200s counted: {ok}")
    c.check(mt.get('attnd_requests_total{route="/logit_lens",status="400"}', 0) == len(bad400), "400s counted")
    c.check(mt.get('attnd_requests_total{route="/logit_lens",status="404"}', 0) == 2, "404s counted")
    c.check(mt.get('attnd_requests_total{route="/logit_lens",status="413"}', 0) == 1, "413 counted")

    # ---- the playground page ------------------------------------------------------------------
    for path, ctype in (("/", "text/html"), ("/app.js", "text/javascript"), ("/style.css", "text/css")):
        r = d.get(path)
        c.check(r.status_code == 200 and r.headers.get("Content-Type", "").startswith(ctype) and r.content,
                f"GET {path}: {r.status_code} {r.headers.get('Content-Type')}")
    c.check(error_shape_ok(d.get("/nope.css"), 404) is None, "unknown file: 404")
finally:
    c.check(d.stop() == 0, "daemon exit status")

d = Daemon(MODEL, "--api-key", "sesame")
try:
    c.check(d.get("/").status_code == 200, "the page needs no key (it asks for one)")
    c.check(error_shape_ok(d.get("/logit_lens?pos=0"), 401) is None, "/logit_lens needs the key")
    r = d.get("/logit_lens?pos=0", headers={"Authorization": "Bearer sesame"})
    c.check(error_shape_ok(r, 404) is None, f"with the key, nothing finished yet: 404 ({r.status_code})")
finally:
    c.check(d.stop() == 0, "daemon exit status (api key)")

c.finish()
