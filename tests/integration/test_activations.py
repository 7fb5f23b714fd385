#!/usr/bin/python3
"""POST /v1/activations against the real daemon and the pure-Python reference (iv_reference.py):
every site (resid_pre, resid_post, attn_out, mlp_out, z with and without a head) of the tiny F32
llama, plain and under interventions, equals the reference within 1e-4 at every position asked
for, in both encodings (json rows, base64 float32); the shape is [rows, width]; positions come
back in the order asked; bad bodies answer 400 naming the field path, an answer over the size cap
413; a request beside a running generation leaves that generation as it is alone."""
import base64
import struct
import threading

from attnd_daemon import Checker, Daemon, model
from iv_reference import Llama

c = Checker("test_activations")
MODEL = model("tiny-llama-spm-f32.gguf")
TOL = 1e-4
PROMPT = [1, 450, 4996, 17354, 1701, 432, 29871, 920, 278, 17366, 11203, 29889, 3, 77, 1234, 29871, 500, 42, 9]
ref = Llama(MODEL)
SITES = [{"site": s, "layer": l} for s in ("resid_pre", "resid_post", "attn_out", "mlp_out", "z") for l in (0, 1)]
SITES.append({"site": "z", "layer": 1, "head": 5})
IVS = [{"kind": "head_scale", "layer": 0, "head": 2, "scale": 0}, {"kind": "skip", "layer": 1, "part": "mlp"},
       {"kind": "steer", "layer": 1, "vector": [0.5] * ref.d, "scale": 2, "positions": [3, 4]}]


def want_rows(cap, site, positions):
    rows = cap[(site["site"], site["layer"])]
    if "head" in site:
        h = site["head"]
        rows = [r[h * ref.hd:(h + 1) * ref.hd] for r in rows]
    return [rows[p] for p in positions]


def decode(a, n, w):
    if "data_b64" in a:
        flat = struct.unpack(f"<{n * w}f", base64.b64decode(a["data_b64"]))
        return [list(flat[i * w:(i + 1) * w]) for i in range(n)]
    return a["data"]


def compare(name, d, body, ivs):
    r = d.post("/v1/activations", body)
    if not c.check(r.status_code == 200, f"{name}: {r.status_code} {r.text[:300]}"):
        return
    j = r.json()
    positions = body.get("positions", list(range(len(PROMPT))))
    positions = list(range(len(PROMPT))) if positions == "all" else positions
    cap = ref.activations(PROMPT, len(PROMPT), [dict(iv, vec=iv["vector"]) if "vector" in iv else iv for iv in ivs])
    c.check(j["tokens"] == PROMPT and len(j["activations"]) == len(body["sites"]), f"{name}: tokens, count")
    c.check(j.get("interventions") == (len(ivs) or None), f"{name}: interventions {j.get('interventions')}")
    worst = 0.0
    for a, site in zip(j["activations"], body["sites"]):
        w = ref.hd if "head" in site else (ref.n_head * ref.hd if site["site"] == "z" else ref.d)
        ok = a["site"] == site["site"] and a["layer"] == site["layer"] and a.get("head") == site.get("head")
        c.check(ok and a["shape"] == [len(positions), w], f"{name}: {site}: {a['site']} {a['shape']}")
        got = decode(a, len(positions), w)
        for gr, wr in zip(got, want_rows(cap, site, positions)):
            worst = max(worst, max(abs(x - y) for x, y in zip(gr, wr)))
    c.check(worst <= TOL, f"{name}: max |attnd - reference| = {worst:.2e}")
    print(f"test_activations: {name}: max |attnd - reference| = {worst:.2e} over {len(body['sites'])} sites")


def check_bad(d):
    cases = [
        ({"prompt": PROMPT, "sites": [{"site": "resid", "layer": 0}]}, 400, "sites[0].site"),
        ({"prompt": PROMPT, "sites": [{"site": "z", "layer": 0}, {"site": "z", "layer": 2}]}, 400, "sites[1].layer"),
        ({"prompt": PROMPT, "sites": [{"site": "mlp_out", "layer": 0, "head": 1}]}, 400, "sites[0].head"),
        ({"prompt": PROMPT, "sites": [{"site": "z", "layer": 0, "head": 8}]}, 400, "sites[0].head"),
        ({"prompt": PROMPT, "sites": [{"site": "z", "layer": 0}], "positions": [19]}, 400, "positions"),
        ({"prompt": PROMPT, "sites": []}, 400, "sites"),
        ({"prompt": PROMPT, "sites": [{"site": "z", "layer": 0}], "encoding": "hex"}, 400, "encoding"),
        ({"prompt": PROMPT, "sites": [{"site": "z", "layer": 0}], "interventions": [{"kind": "x"}]}, 400,
         "interventions[0].kind"),
        ({"sites": [{"site": "z", "layer": 0}]}, 400, "prompt"),
        ({"prompt": PROMPT, "sites": [{"site": "z", "layer": 0}], "extra": 1}, 400, "extra"),
        ({"prompt": list(range(3, 2003)), "sites": [{"site": "resid_pre", "layer": l} for l in (0, 1)] * 32},
         413, "at most"),
    ]
    for body, code, text in cases:
        r = d.post("/v1/activations", body)
        c.check(r.status_code == code and text in r.text, f"{str(body)[:80]}: {r.status_code} {r.text[:200]}")


d = Daemon(MODEL, "--ctx", "4096")
try:
    compare("plain, json", d, {"prompt": PROMPT, "sites": SITES}, [])
    compare("plain, base64, positions", d, {"prompt": PROMPT, "sites": SITES, "encoding": "base64",
                                            "positions": [18, 0, 7, 7]}, [])
    compare("interventions", d, {"prompt": PROMPT, "sites": SITES, "interventions": IVS}, IVS)
    # beside a running generation: that one's answer is what it is alone
    gen = {"prompt": PROMPT, "max_tokens": 40, "temperature": 0, "logprobs": 1, "ignore_eos": True}
    alone = d.post("/v1/generate", gen).json()
    res = {}
    t = threading.Thread(target=lambda: res.update(g=d.post("/v1/generate", gen).json()))
    t.start()
    for _ in range(3):
        compare("beside a generation", d, {"prompt": PROMPT, "sites": SITES[:4], "interventions": IVS}, IVS)
    t.join()
    worst = max(abs(a["logprob"] - b["logprob"]) for a, b in zip(alone["logprobs"], res["g"]["logprobs"]))
    c.check(alone["tokens"] == res["g"]["tokens"] and worst <= 1e-4, f"generation beside activations: {worst:.2e}")
    check_bad(d)
finally:
    c.check(d.stop() == 0, "daemon exit status")

c.finish()
