#!/usr/bin/python3
"""The HTTP API against the real daemon: greedy /v1/generate equals every golden case of the F32
models (tokens, prompt tokenization through /attention's token ids, usage); streaming equals
the non-streamed answer; /attention rows are causal, sum to 1 and output == weights . values;
/v1/models, /health; more than 30 kinds of bad request each get their status and the one error
shape while the daemon keeps serving; /metrics parses as Prometheus text and counts them."""
import glob
import json
import os
import socket

from attnd_daemon import SHARED, Checker, Daemon, error_shape_ok, model

c = Checker("test_http_api")


def gap_limit(case, tol=1e-3):
    """Steps to compare: up to the first where the reference's top-2 gap is within tol."""
    for s, step in enumerate(case["steps"]):
        top = step["top"]
        if top[0][1] - top[1][1] <= tol:
            return s
    return len(case["tokens"])


# ---------------------------------------------------------------------------------------------
# golden cases, F32 models
# ---------------------------------------------------------------------------------------------
golden_cases = 0
for gpath in sorted(glob.glob(os.path.join(SHARED, "golden", "*.json"))):
    name = os.path.basename(gpath)[:-5]
    if "q8_0" in name:
        continue
    gold = json.load(open(gpath))
    d = Daemon(model(name + ".gguf"), "--keep-requests", "8")
    try:
        for i, case in enumerate(gold["cases"]):
            n = len(case["tokens"])
            out = d.generate(prompt=case["prompt"], max_tokens=n, temperature=0, ignore_eos=True)
            golden_cases += 1
            where = f"{name} case {i}"
            lim = gap_limit(case)
            c.check(len(out["tokens"]) == n and out["tokens"][:lim] == case["tokens"][:lim],
                    f"{where}: tokens {out['tokens']} != {case['tokens']} (first {lim})")
            c.check(out["usage"] == {"prompt_tokens": len(case["prompt_tokens"]), "completion_tokens": n,
                                     "total_tokens": len(case["prompt_tokens"]) + n},
                    f"{where}: usage {out['usage']}")
            c.check(out["finish_reason"] == "length", f"{where}: finish_reason {out['finish_reason']}")
            c.check(out["id"].startswith("gen-") and out["model"], f"{where}: id/model {out['id']} {out['model']}")
            t = out["timings"]
            c.check(all(k in t and t[k] >= 0 for k in ("prompt_ms", "generation_ms", "prompt_tokens_per_s",
                                                        "generation_tokens_per_s")), f"{where}: timings {t}")
            # the prompt as the daemon tokenized it: /attention lists every token of the request
            a = d.get(f"/attention?layer=0&head=0&id={out['id']}").json()
            c.check(a.get("token_ids") == case["prompt_tokens"] + out["tokens"],
                    f"{where}: prompt tokens {str(a)[:300]} != {case['prompt_tokens']}")
        if name == "stories260K":  # context 128: a request that fills it, mapped over all 128 tokens
            g = d.generate(prompt=[1], max_tokens=127, temperature=0, ignore_eos=True)
            a = d.get(f"/attention?layer=4&head=7&id={g['id']}").json()
            c.check(g["usage"]["completion_tokens"] == 127 and a.get("n_tokens") == 128
                    and len(a["weights"]) == 128 and all(abs(sum(r) - 1) <= 1e-5 for r in a["weights"]),
                    f"full-context attention: {str(a)[:200]}")
            g = d.generate(prompt=list(range(1, 101)), temperature=0, ignore_eos=True)  # default max_tokens
            c.check(g["usage"]["completion_tokens"] == 28, f"default max_tokens not fitted to the context: {g['usage']}")
    finally:
        c.check(d.stop() == 0, f"{name}: daemon exit status")
c.check(golden_cases >= 18, f"only {golden_cases} golden cases found under {SHARED}/golden")

# ---------------------------------------------------------------------------------------------
# one daemon for the rest: llama SPM (GQA 8 query heads over 2 KV heads), small context
# ---------------------------------------------------------------------------------------------
d = Daemon(model("tiny-llama-spm-f32.gguf"), "--ctx", "256", "--max-body", "8192", "--max-tokens-cap", "512",
           "--keep-requests", "3", "--attention-max-tokens", "160")
try:
    m = d.get("/v1/models").json()
    c.check(m["object"] == "list" and len(m["data"]) == 1 and m["data"][0]["context_length"] == 256
            and m["data"][0]["id"], f"/v1/models: {m}")
    h = d.get("/health")
    hj = h.json() if h.status_code == 200 else {}
    c.check(h.status_code == 200 and set(hj) - {"kernels"} == {"status", "backend", "device"} and hj["status"] == "ok"
            and hj["backend"] in ("cpu", "vulkan") and hj["device"], f"/health: {h.status_code} {h.text}")
    if hj.get("backend") == "cpu":  # which kernel variant runs, per weight type of the model's matrices
        k = hj.get("kernels", {})
        variants = {"scalar", "avx2", "avx512", "avx2-panel"}
        c.check(k.get("chosen_by") in ("measured", "cached", "rules") and k.get("cpu") and k.get("isa")
                and k.get("fa2", {}).get("prefill") in ("scalar", "avx2", "avx512")
                and k["fa2"].get("decode") in ("scalar", "avx2", "avx512") and set(k.get("matrix", {})) == {"f32"}
                and all(set(v) == {"matvec", "batch", "gemm"} and set(v.values()) <= variants
                        for v in k["matrix"].values()), f"/health kernels: {k}")

    # ---- streaming equals the whole answer ----
    for fields in ({"prompt": "Once upon a time", "max_tokens": 24, "temperature": 0, "ignore_eos": True},
                   {"prompt": "The ünïcödé test ✓ 😀", "max_tokens": 20, "temperature": 0.9, "seed": 7,
                    "ignore_eos": True, "logprobs": 3},
                   {"prompt": [1, 450, 4996], "max_tokens": 16, "temperature": 0, "stop": ["zzzz", "qq"],
                    "ignore_eos": True}):
        whole = d.generate(**fields)
        events, done = d.stream(**fields)
        toks = [e for e in events if "token" in e]
        final = events[-1] if events else {}
        pieces = "".join(e["text"] for e in toks) + final.get("text", "")
        what = f"stream {fields['prompt']!r}"
        c.check(done, f"{what}: no [DONE]")
        c.check([e["token"] for e in toks] == whole["tokens"], f"{what}: tokens differ")
        c.check(pieces == whole["text"], f"{what}: pieces {pieces!r} != text {whole['text']!r}")
        c.check(final.get("finish_reason") == whole["finish_reason"] and final.get("usage") == whole["usage"]
                and "timings" in final, f"{what}: final event {final}")
        if fields.get("logprobs"):
            c.check(len(whole["logprobs"]) == len(whole["tokens"])
                    and all(len(lp["top"]) == 3 and lp["token"] == t for lp, t in zip(whole["logprobs"], whole["tokens"])),
                    f"{what}: logprobs {whole['logprobs'][:2]}")
            c.check(all(e["logprobs"]["top"] == lp["top"] for e, lp in zip(toks, whole["logprobs"])),
                    f"{what}: streamed logprobs differ")

    # stop string: the text ends before it and finish_reason is "stop"
    base = d.generate(prompt="Once upon a time", max_tokens=24, temperature=0, ignore_eos=True)
    if len(base["text"]) > 8:
        stop = base["text"][5:8]
        s = d.generate(prompt="Once upon a time", max_tokens=24, temperature=0, ignore_eos=True, stop=stop)
        c.check(s["finish_reason"] == "stop" and s["text"] == base["text"][:base["text"].index(stop)],
                f"stop {stop!r}: {s['finish_reason']} {s['text']!r} vs {base['text']!r}")

    # ---- /attention ----
    g = d.generate(prompt="Attention is all you need, they said", max_tokens=12, temperature=0, ignore_eos=True)
    n = g["usage"]["prompt_tokens"] + g["usage"]["completion_tokens"]
    for layer, head in ((0, 0), (1, 5), (1, 7)):
        a = d.get(f"/attention?layer={layer}&head={head}&values=1")
        c.check(a.status_code == 200, f"attention {layer}/{head}: {a.status_code} {a.text[:200]}")
        if a.status_code != 200:
            continue
        a = a.json()
        w, v, o = a["weights"], a["values"], a["output"]
        c.check(a["id"] == g["id"] and a["layer"] == layer and a["head"] == head and a["kv_head"] == head // 4,
                f"attention header {a['id']} {a['kv_head']}")
        c.check(len(a["tokens"]) == n and len(w) == n and all(len(w[i]) == i + 1 for i in range(n)),
                f"attention {layer}/{head}: shape")
        c.check(all(abs(sum(row) - 1) <= 1e-5 for row in w), f"attention {layer}/{head}: rows do not sum to 1")
        c.check(all(x >= 0 for row in w for x in row), f"attention {layer}/{head}: negative weight")
        hd = len(v[0])
        worst = max(abs(sum(w[i][j] * v[j][k] for j in range(i + 1)) - o[i][k]) for i in range(n) for k in range(hd))
        c.check(worst <= 1e-4, f"attention {layer}/{head}: output != weights . values (max error {worst})")
    c.check("values" not in d.get("/attention?layer=0&head=0").json(), "values returned without values=1")

    # history: --keep-requests 3 keeps the last three finished requests
    ids = [d.generate(prompt=[1, 2 + k], max_tokens=2, temperature=0, ignore_eos=True)["id"] for k in range(4)]
    c.check(d.get(f"/attention?layer=0&head=0&id={ids[3]}").json()["token_ids"][:2] == [1, 5], "attention by id")
    c.check(d.get(f"/attention?layer=0&head=0&id={ids[1]}").status_code == 200, "second-newest of 3 kept")
    c.check(error_shape_ok(d.get(f"/attention?layer=0&head=0&id={ids[0]}"), 404) is None, "evicted id is 404")

    # ---- bad requests: (what, method, path, body or None, headers, status) ----
    long_prompt = list(range(10, 310))
    bad = [
        ("not JSON", "POST", "/v1/generate", "not json", {}, 400),
        ("empty body", "POST", "/v1/generate", "", {}, 400),
        ("JSON array body", "POST", "/v1/generate", "[1,2]", {}, 400),
        ("prompt a number", "POST", "/v1/generate", {"prompt": 5}, {}, 400),
        ("no prompt", "POST", "/v1/generate", {}, {}, 400),
        ("empty prompt", "POST", "/v1/generate", {"prompt": ""}, {}, 400),
        ("empty token list", "POST", "/v1/generate", {"prompt": []}, {}, 400),
        ("negative token id", "POST", "/v1/generate", {"prompt": [1, -1]}, {}, 400),
        ("token id past vocabulary", "POST", "/v1/generate", {"prompt": [1, 32000]}, {}, 400),
        ("fractional token id", "POST", "/v1/generate", {"prompt": [1, 2.5]}, {}, 400),
        ("string token id", "POST", "/v1/generate", {"prompt": [1, "a"]}, {}, 400),
        ("negative max_tokens", "POST", "/v1/generate", {"prompt": "hi", "max_tokens": -1}, {}, 400),
        ("string max_tokens", "POST", "/v1/generate", {"prompt": "hi", "max_tokens": "10"}, {}, 400),
        ("fractional max_tokens", "POST", "/v1/generate", {"prompt": "hi", "max_tokens": 1.5}, {}, 400),
        ("max_tokens over the cap", "POST", "/v1/generate", {"prompt": "hi", "max_tokens": 100000}, {}, 400),
        ("huge max_tokens", "POST", "/v1/generate", '{"prompt":"hi","max_tokens":1e400}', {}, 400),
        ("negative temperature", "POST", "/v1/generate", {"prompt": "hi", "temperature": -1}, {}, 400),
        ("string temperature", "POST", "/v1/generate", {"prompt": "hi", "temperature": "hot"}, {}, 400),
        ("top_p 0", "POST", "/v1/generate", {"prompt": "hi", "top_p": 0}, {}, 400),
        ("top_p 1.5", "POST", "/v1/generate", {"prompt": "hi", "top_p": 1.5}, {}, 400),
        ("min_p 2", "POST", "/v1/generate", {"prompt": "hi", "min_p": 2}, {}, 400),
        ("negative top_k", "POST", "/v1/generate", {"prompt": "hi", "top_k": -3}, {}, 400),
        ("repetition_penalty 0", "POST", "/v1/generate", {"prompt": "hi", "repetition_penalty": 0}, {}, 400),
        ("presence_penalty 5", "POST", "/v1/generate", {"prompt": "hi", "presence_penalty": 5}, {}, 400),
        ("frequency_penalty -5", "POST", "/v1/generate", {"prompt": "hi", "frequency_penalty": -5}, {}, 400),
        ("negative seed", "POST", "/v1/generate", {"prompt": "hi", "seed": -1}, {}, 400),
        ("string seed", "POST", "/v1/generate", {"prompt": "hi", "seed": "x"}, {}, 400),
        ("stop a number", "POST", "/v1/generate", {"prompt": "hi", "stop": 5}, {}, 400),
        ("empty stop string", "POST", "/v1/generate", {"prompt": "hi", "stop": [""]}, {}, 400),
        ("17 stop strings", "POST", "/v1/generate", {"prompt": "hi", "stop": ["s%d" % k for k in range(17)]}, {}, 400),
        ("ignore_eos a string", "POST", "/v1/generate", {"prompt": "hi", "ignore_eos": "yes"}, {}, 400),
        ("stream a number", "POST", "/v1/generate", {"prompt": "hi", "stream": 1}, {}, 400),
        ("logprobs 21", "POST", "/v1/generate", {"prompt": "hi", "logprobs": 21}, {}, 400),
        ("logprobs -1", "POST", "/v1/generate", {"prompt": "hi", "logprobs": -1}, {}, 400),
        ("unknown field", "POST", "/v1/generate", {"prompt": "hi", "foo": 1}, {}, 400),
        ("duplicate field", "POST", "/v1/generate", '{"prompt":"hi","prompt":"ho"}', {}, 400),
        ("trailing garbage", "POST", "/v1/generate", '{"prompt":"hi"} x', {}, 400),
        ("nesting too deep", "POST", "/v1/generate", "[" * 2000 + "]" * 2000, {}, 400),
        ("prompt longer than the context", "POST", "/v1/generate", {"prompt": long_prompt, "max_tokens": 1}, {}, 400),
        ("prompt + max_tokens over the context", "POST", "/v1/generate", {"prompt": long_prompt[:200],
                                                                         "max_tokens": 100}, {}, 400),
        ("body over --max-body", "POST", "/v1/generate", json.dumps({"prompt": "x" * 9000}), {}, 413),
        ("GET /v1/generate", "GET", "/v1/generate", None, {}, 405),
        ("POST /health", "POST", "/health", "{}", {}, 405),
        ("DELETE /attention", "DELETE", "/attention", None, {}, 405),
        ("PUT /metrics", "PUT", "/metrics", "x", {}, 405),
        ("unknown route", "GET", "/nope", None, {}, 404),
        ("trailing slash", "GET", "/v1/generate/", None, {}, 404),
        ("attention without parameters", "GET", "/attention", None, {}, 400),
        ("attention layer not a number", "GET", "/attention?layer=x&head=0", None, {}, 400),
        ("attention negative layer", "GET", "/attention?layer=-1&head=0", None, {}, 400),
        ("attention layer out of range", "GET", "/attention?layer=2&head=0", None, {}, 400),
        ("attention head out of range", "GET", "/attention?layer=0&head=8", None, {}, 400),
        ("attention unknown parameter", "GET", "/attention?layer=0&head=0&bogus=1", None, {}, 400),
        ("attention repeated parameter", "GET", "/attention?layer=0&layer=1&head=0", None, {}, 400),
        ("attention bad id", "GET", "/attention?layer=0&head=0&id=abc", None, {}, 400),
        ("attention unknown id", "GET", "/attention?layer=0&head=0&id=gen-999999", None, {}, 404),
        ("attention bad values flag", "GET", "/attention?layer=0&head=0&values=maybe", None, {}, 400),
    ]
    for what, method, path, body, hdrs, status in bad:
        if body is not None and not isinstance(body, str):
            body = json.dumps(body)
        r = d.post(path, body, headers=hdrs) if method == "POST" else \
            __import__("requests").request(method, d.url + path, data=body, headers=hdrs, timeout=30)
        err = error_shape_ok(r, status)
        c.check(err is None, f"bad request '{what}': {err}")
        if status == 405:
            c.check(r.headers.get("Allow") in ("POST", "GET, HEAD"), f"'{what}': Allow header {r.headers.get('Allow')}")

    # a body over --max-body sent chunked (no Content-Length)
    r = d.post("/v1/generate", (b"x" * 1024 for _ in range(16)))
    c.check(error_shape_ok(r, 413) is None, f"chunked oversized body: {error_shape_ok(r, 413)}")
    # a raw request with a Content-Length far over the cap is refused before its body is read
    with socket.create_connection(("127.0.0.1", d.port), timeout=10) as s:
        s.sendall(b"POST /v1/generate HTTP/1.1\r\nHost: x\r\nContent-Length: 100000000\r\n\r\n{")
        head = s.recv(4096).decode("latin-1")
        c.check(head.startswith("HTTP/1.1 413"), f"huge Content-Length: {head[:80]!r}")
    # the attention size cap: a request of more than 160 tokens
    g = d.generate(prompt=long_prompt[:150], max_tokens=20, temperature=0, ignore_eos=True)
    r = d.get("/attention?layer=0&head=0")
    c.check(error_shape_ok(r, 413) is None, f"attention over the size cap: {error_shape_ok(r, 413)}")
    c.check(len(bad) >= 30, "fewer than 30 kinds of bad request")

    # still serving
    c.check(d.get("/health").status_code == 200, "/health after bad requests")
    ok = d.post("/v1/generate", {"prompt": "still alive", "max_tokens": 3, "temperature": 0})
    c.check(ok.status_code == 200 and len(ok.json()["tokens"]) <= 3, f"generate after bad requests: {ok.status_code}")

    # ---- /metrics ----
    r = d.get("/metrics")
    c.check(r.status_code == 200 and r.headers["Content-Type"].startswith("text/plain"), "metrics content type")
    try:
        mt = d.metrics()
    except ValueError as ex:
        c.check(False, f"/metrics does not parse: {ex}")
        mt = {}
    for name in ("attnd_prompt_tokens_total", "attnd_generated_tokens_total", "attnd_queue_depth",
                 "attnd_requests_running", "attnd_kv_cache_tokens_used", "attnd_kv_cache_tokens_capacity",
                 "attnd_time_to_first_token_seconds_count", "attnd_time_per_output_token_seconds_count",
                 'attnd_time_to_first_token_seconds_bucket{le="+Inf"}'):
        c.check(name in mt, f"metric {name} missing")
    c.check(mt.get('attnd_requests_total{route="/v1/generate",status="400"}', 0) >= 30, "400s not counted")
    c.check(mt.get('attnd_requests_total{route="/v1/generate",status="200"}', 0) >= 10, "200s not counted")
    c.check(mt.get('attnd_errors_total{type="invalid_request"}', 0) >= 40, "invalid_request errors not counted")
    c.check(mt.get('attnd_errors_total{type="payload_too_large"}', 0) >= 3, "413s not counted")
    c.check(mt.get('attnd_errors_total{type="method_not_allowed"}', 0) == 4, "405s not counted")
    c.check(mt.get("attnd_kv_cache_tokens_capacity", 0) >= 256, "kv capacity below one context")
    c.check(mt.get("attnd_generated_tokens_total", 0) >= 100, "generated tokens not counted")
finally:
    c.check(d.stop() == 0, "daemon exit status")
c.finish(f" ({golden_cases} golden cases)")
