#!/usr/bin/python3
"""POST /v1/embeddings (the OpenAI shape) against the real daemon and the pure-Python reference
(iv_reference.py): each embedding is the mean over the input's tokens of the last layer's
resid_post, L2-normalised, within 1e-5 of the reference on the tiny F32 llama, for every input
form (a string, strings, token ids, arrays of ids), both encodings (float, base64) and
"dimensions" (the first k components, normalised again); 100 inputs in one call (more than the
queue holds) come back in order; bad bodies answer 400 in the OpenAI error shape naming the param."""
import base64
import math
import struct

from attnd_daemon import Checker, Daemon, model
from iv_reference import Llama

c = Checker("test_embeddings")
MODEL = model("tiny-llama-spm-f32.gguf")
TOL = 1e-5
IDS = [[1, 450, 4996, 17354, 1701, 432, 29871, 920], [1, 3, 77, 1234], [1, 500]]
ref = Llama(MODEL)
_cache = {}


def want(toks, dims=None):
    key = tuple(toks)
    if key not in _cache:
        rows = ref.activations(list(toks), len(toks), [])[("resid_post", ref.n_layer - 1)]
        _cache[key] = [sum(r[k] for r in rows) / len(rows) for k in range(ref.d)]
    v = _cache[key][:dims or ref.d]
    n = math.sqrt(sum(x * x for x in v))
    return [x / n for x in v]


def vectors(j, b64, dims):
    out = []
    for i, e in enumerate(j["data"]):
        c.check(e["object"] == "embedding" and e["index"] == i, f"data[{i}]: {e['object']} {e['index']}")
        v = e["embedding"]
        out.append(list(struct.unpack(f"<{dims}f", base64.b64decode(v))) if b64 else v)
    return out


def compare(d, name, body, toks):
    r = d.post("/v1/embeddings", body)
    if not c.check(r.status_code == 200, f"{name}: {r.status_code} {r.text[:300]}"):
        return
    j = r.json()
    dims = body.get("dimensions", ref.d)
    got = vectors(j, body.get("encoding_format") == "base64", dims)
    n_tok = sum(len(t) for t in toks)
    c.check(j["object"] == "list" and isinstance(j["model"], str) and len(got) == len(toks) and
            j["usage"] == {"prompt_tokens": n_tok, "total_tokens": n_tok}, f"{name}: shape {str(j)[:200]}")
    worst = 0.0
    for g, t in zip(got, toks):
        c.check(len(g) == dims and abs(math.sqrt(sum(x * x for x in g)) - 1) < 1e-5, f"{name}: length, norm")
        worst = max(worst, max(abs(x - y) for x, y in zip(g, want(t, dims))))
    c.check(worst <= TOL, f"{name}: max |attnd - reference| = {worst:.2e}")
    print(f"test_embeddings: {name}: {len(toks)} inputs, max |attnd - reference| = {worst:.2e}")


def tokens_of(d, text):
    r = d.post("/v1/activations", {"prompt": text, "sites": [{"site": "z", "layer": 0, "head": 0}]})
    return r.json()["tokens"]


def check_bad(d):
    cases = [
        ({"input": ""}, "input", "empty"),
        ({"input": []}, "input", "1..2048"),
        ({"input": [1, "a"]}, "input", "input'[1]"),
        ({"input": ["a", [1, 2]]}, "input", "input[1]"),
        ({"input": [[1, 2], []]}, "input", "input[1]"),
        ({"input": [1, 32000]}, "input", "token id"),
        ({"input": 5}, "input", "must be a string"),
        ({}, "input", "required"),
        ({"input": "a", "encoding_format": "hex"}, "encoding_format", "base64"),
        ({"input": "a", "dimensions": 0}, "dimensions", "[1, 64]"),
        ({"input": "a", "dimensions": ref.d + 1}, "dimensions", "[1, 64]"),
        ({"input": "a", "extra": 1}, "extra", "extra"),
    ]
    for body, param, text in cases:
        r = d.post("/v1/embeddings", body)
        ok = r.status_code == 400 and "error" in r.json()
        e = r.json().get("error", {}) if ok else {}
        c.check(ok and e.get("param") == param and text in e.get("message", "") and e.get("type") ==
                "invalid_request_error", f"{body}: {r.status_code} {r.text[:200]}")


d = Daemon(MODEL, "--ctx", "1024")
try:
    compare(d, "arrays of ids", {"input": IDS}, IDS)
    compare(d, "ids", {"input": IDS[0], "model": "x"}, IDS[:1])
    texts = ["In the beginning", "the quick brown fox jumps", "a"]
    toks = [tokens_of(d, t) for t in texts]
    compare(d, "string", {"input": texts[1]}, toks[1:2])
    compare(d, "strings, base64", {"input": texts, "encoding_format": "base64"}, toks)
    compare(d, "dimensions 16", {"input": IDS, "dimensions": 16, "encoding_format": "float"}, IDS)
    many = [[1, 3 + i, 500 + 7 * i] for i in range(100)]
    r = d.post("/v1/embeddings", {"input": many})
    got = vectors(r.json(), False, ref.d) if c.check(r.status_code == 200, f"100 inputs: {r.status_code}") else []
    worst = max((max(abs(x - y) for x, y in zip(got[i], want(many[i]))) for i in (0, 63, 64, 99)), default=1)
    c.check(len(got) == 100 and worst <= TOL, f"100 inputs: {len(got)}, max |attnd - reference| = {worst:.2e}")
    check_bad(d)
finally:
    c.check(d.stop() == 0, "daemon exit status")

c.finish()
