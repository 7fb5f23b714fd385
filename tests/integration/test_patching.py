#!/usr/bin/python3
"""POST /v1/patching against the real daemon and the pure-Python reference (iv_reference.py's
llama forward pass with a patch hook added here): on the tiny F32 llama, for every site
(resid_pre, resid_post, attn_out, mlp_out, z by layer x head) the clean and corrupted logit
differences and every grid cell ((patched - corrupted) / (clean - corrupted), the corrupted run
with the reference's own clean activation written in) agree within 1e-4; the patched runs go
through the scheduler together (far fewer steps than runs), cells patching only positions before
the prompts' first difference are not run and exactly 0; equal prompts give a grid of nulls;
a one-token text names the answer or distractor; a client that leaves cancels the runs; a "patch" intervention on
/v1/activations changes that site at that position only; bad bodies answer 400 naming the field."""
import base64
import json
import math
import re
import socket
import struct
import time

from attnd_daemon import Checker, Daemon, model
from iv_reference import Llama, _mv, _rmsnorm

c = Checker("test_patching")
MODEL = model("tiny-llama-spm-f32.gguf")
TOL = 1e-4
CLEAN = [1, 450, 4996, 17354, 1701, 432, 29871, 920, 278, 17366]
CORR = [1, 450, 4996, 3, 1701, 432, 29871, 920, 278, 500]
ANSWER, DISTRACTOR = 3, 77


class PatchLlama(Llama):
    """The reference with activation patching: self.patches holds (site, layer, head, pos, vec)
    and each replaces that site's value (z with a head: that head's slice) at pos."""

    patches = ()

    def _patch(self, site, l, rows):
        for s, pl, h, p, vec in self.patches:
            if s == site and pl == l:
                o = h * self.hd if h is not None else 0
                rows[p] = rows[p][:o] + list(vec) + rows[p][o + len(vec):]
        return rows

    def _layer(self, xs, l, ivs, n_prompt):
        L = self.layers[l]
        xs = self._patch("resid_pre", l, [list(x) for x in xs])
        self.cap[("resid_pre", l)] = xs
        hs = [_rmsnorm(x, L["attn_norm"], self.eps) for x in xs]
        q, k, v = [_mv(L["wq"], h) for h in hs], [_mv(L["wk"], h) for h in hs], [_mv(L["wv"], h) for h in hs]
        for p in range(len(xs)):
            self._rope(q[p], self.n_head, p)
            self._rope(k[p], self.n_head_kv, p)
        z = self._patch("z", l, self._attend(q, k, v))
        self.cap[("z", l)] = z
        att = self._patch("attn_out", l, [_mv(L["wo"], r) for r in z])
        mids = [[u + w for u, w in zip(x, a)] for x, a in zip(xs, att)]
        mlps = []
        for mid in mids:
            h = _rmsnorm(mid, L["ffn_norm"], self.eps)
            g, u = _mv(L["wg"], h), _mv(L["wu"], h)
            mlps.append(_mv(L["wd"], [gi / (1 + math.exp(-gi)) * ui for gi, ui in zip(g, u)]))
        mlps = self._patch("mlp_out", l, mlps)
        out = self._patch("resid_post", l, [[b + w for b, w in zip(mid, m)] for mid, m in zip(mids, mlps)])
        self.cap[("attn_out", l)], self.cap[("mlp_out", l)], self.cap[("resid_post", l)] = att, mlps, out
        return out

    def diff(self, toks, patches=()):
        """answer - distractor logits at the last position, and the captures."""
        self.patches = patches
        cap = self.activations(toks, len(toks), [])
        h = _rmsnorm(cap[("resid_post", self.n_layer - 1)][-1], self.out_norm, self.eps)
        return sum(a * b for a, b in zip(h, self.out[ANSWER])) - sum(a * b for a, b in zip(h, self.out[DISTRACTOR])), cap


ref = PatchLlama(MODEL)


def ref_grid(site, layers, positions):
    clean, cap = ref.diff(CLEAN)
    corr, _ = ref.diff(CORR)
    raw = []
    for l in layers:
        rows = cap[(site, l)]
        if site == "z":
            cells = [[("z", l, h, p, rows[p][h * ref.hd:(h + 1) * ref.hd]) for p in positions] for h in range(ref.n_head)]
        else:
            cells = [[(site, l, None, p, rows[p])] for p in positions]
        raw.append([ref.diff(CORR, patches)[0] for patches in cells])
    return clean, corr, raw


def steps(d):
    m = re.search(r"^attnd_scheduler_steps_total (\d+)", d.get("/metrics").text, re.M)
    return int(m.group(1))


def compare(d, site, layers=None, positions=None):
    body = {"clean": CLEAN, "corrupted": CORR, "answer": ANSWER, "distractor": DISTRACTOR, "site": site}
    if layers is not None:
        body["layers"] = layers
    if positions is not None:
        body["positions"] = positions
    s0 = steps(d)
    r = d.post("/v1/patching", body)
    n_steps = steps(d) - s0
    if not c.check(r.status_code == 200, f"{site}: {r.status_code} {r.text[:300]}"):
        return
    j = r.json()
    layers = layers if layers is not None else list(range(ref.n_layer))
    positions = positions if positions is not None else list(range(len(CLEAN)))
    clean, corr, raw = ref_grid(site, layers, positions)
    cols = ref.n_head if site == "z" else len(positions)
    c.check(j["layers"] == layers and j["positions"] == positions and len(j["grid"]) == len(layers) and
            all(len(row) == cols for row in j["grid"]), f"{site}: shape {j['layers']} {j['positions']}")
    c.check(j["tokens"]["clean"] == CLEAN and j["tokens"]["corrupted"] == CORR and j["tokens"]["answer"] == ANSWER,
            f"{site}: tokens")
    worst = max(abs(j["clean_diff"] - clean), abs(j["corrupted_diff"] - corr))
    for gr, pr, rr in zip(j["grid"], j["patched_diff"], raw):
        for g, p, w in zip(gr, pr, rr):
            worst = max(worst, abs(p - w), abs(g - (w - corr) / (clean - corr)))
    c.check(worst <= TOL, f"{site}: max |attnd - reference| = {worst:.2e}")
    runs, first = j["runs"], next(i for i, (a, b) in enumerate(zip(CLEAN, CORR)) if a != b)
    noop = [p < first for p in positions] if site != "z" else [all(p < first for p in positions)] * cols
    skipped = len(layers) * sum(noop)
    c.check(j["skipped"] == skipped and runs == 2 + len(layers) * cols - skipped and n_steps * 2 <= runs + 2,
            f"{site}: {runs} runs ({j['skipped']} cells not run, want {skipped}) in {n_steps} steps")
    c.check(all(g == 0 for gr in j["grid"] for g, z in zip(gr, noop) if z), f"{site}: cells not run are exactly 0")
    print(f"test_patching: {site}: {len(layers)}x{cols} grid, clean {clean:.4f} corrupted {corr:.4f}, "
          f"max |attnd - reference| = {worst:.2e}, {runs} runs ({skipped} cells before the first difference not "
          f"run) in {n_steps} scheduler steps, {j['ms']:.1f} ms")


def check_patch_kind(d):
    """The public kind on /v1/activations: resid_pre of layer 1 at position 4 replaced, nothing else."""
    vec = [0.25 * ((i % 7) - 3) for i in range(ref.d)]
    b64 = base64.b64encode(struct.pack(f"<{ref.d}f", *vec)).decode()
    iv = {"kind": "patch", "site": "resid_pre", "layer": 1, "position": 4, "vector_b64": b64}
    body = {"prompt": CLEAN, "sites": [{"site": "resid_pre", "layer": 1}, {"site": "resid_post", "layer": 1}],
            "interventions": [iv]}
    r = d.post("/v1/activations", body)
    if not c.check(r.status_code == 200, f"patch kind: {r.status_code} {r.text[:300]}"):
        return
    ref.patches = [("resid_pre", 1, None, 4, vec)]
    cap = ref.activations(CLEAN, len(CLEAN), [])
    ref.patches = ()
    worst = 0.0
    for a, key in zip(r.json()["activations"], [("resid_pre", 1), ("resid_post", 1)]):
        for gr, wr in zip(a["data"], cap[key]):
            worst = max(worst, max(abs(x - y) for x, y in zip(gr, wr)))
    c.check(worst <= TOL, f"patch kind on /v1/activations: max |attnd - reference| = {worst:.2e}")


def check_bad(d):
    base = {"clean": CLEAN, "corrupted": CORR, "answer": ANSWER, "distractor": DISTRACTOR, "site": "resid_pre"}
    long_ids = list(range(3, 2103))
    cases = [
        (dict(base, corrupted=CORR[:-1]), "corrupted"),
        (dict(base, layers=[0, 2]), "layers[1]"),
        (dict(base, positions=[10]), "positions[0]"),
        (dict(base, answer="hello world again"), "answer"),
        (dict(base, distractor=32000), "distractor"),
        (dict(base, site="resid"), "site"),
        (dict(base, heads=[0]), "heads"),
        (dict(base, site="z", heads=[8]), "heads[0]"),
        (dict(base, clean=long_ids, corrupted=long_ids), "at most 4096"),
        ({k: v for k, v in base.items() if k != "answer"}, "answer"),
        (dict(base, extra=1), "extra"),
        (dict(base, clean=[]), "'clean': "),
        (dict(base, corrupted=CORR[:-1] + [32000]), "'corrupted': "),
    ]
    for body, text in cases:
        r = d.post("/v1/patching", body)
        c.check(r.status_code == 400 and text in r.text, f"{str(body)[:90]}: {r.status_code} {r.text[:200]}")
    bad_iv = [{"kind": "patch", "site": "attn_out", "layer": 0, "position": 1, "vector": [0.0] * 3},
              {"kind": "patch", "site": "mlp_out", "layer": 0, "head": 1, "position": 1, "vector": [0.0] * ref.d},
              {"kind": "patch", "site": "z", "layer": 0, "head": 1, "position": -1, "vector": [0.0] * ref.hd}]
    for i, iv in enumerate(bad_iv):
        r = d.post("/v1/activations", {"prompt": CLEAN, "sites": [{"site": "z", "layer": 0}], "interventions": [iv]})
        field = ["interventions[0].vector", "interventions[0].head", "interventions[0].position"][i]
        c.check(r.status_code == 400 and field in r.text, f"bad patch {i}: {r.status_code} {r.text[:200]}")


def check_client_gone(d):
    """A client that leaves mid-grid cancels its runs: 802 runs of 400 tokens take at least 1250
    steps of 256 tokens; a generation right after answers at once and the steps stop."""
    ids = [1] + [3 + (i * 37) % 3000 for i in range(399)]
    body = json.dumps({"clean": ids, "corrupted": ids[:5] + [77] + ids[6:], "answer": ANSWER,
                       "distractor": DISTRACTOR, "site": "mlp_out"}).encode()
    s0 = steps(d)
    sock = socket.create_connection(("127.0.0.1", d.port))
    sock.sendall(b"POST /v1/patching HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    time.sleep(0.2)
    sock.close()
    t = time.time()
    # the same client address is the same owner for the fair scheduler: until the departed grid's
    # queued runs are cancelled (the route polls its socket every 200 ms) its share of the queue may
    # still be full, which is a 429 with Retry-After, not a wait
    r = d.post("/v1/generate", {"prompt": [1, 2, 3], "max_tokens": 4})
    while r.status_code == 429 and time.time() - t < 5:
        time.sleep(0.25)
        r = d.post("/v1/generate", {"prompt": [1, 2, 3], "max_tokens": 4})
    wall = time.time() - t
    time.sleep(0.3)
    n = steps(d) - s0
    c.check(r.status_code == 200 and wall < 5 and n < 1000 and steps(d) - s0 == n,
            f"client gone: generate {r.status_code} in {wall:.2f} s, {n} steps in all")


d = Daemon(MODEL, "--ctx", "4096")
try:
    compare(d, "resid_pre")
    compare(d, "attn_out", layers=[1, 0], positions=[9, 3, 0])
    compare(d, "mlp_out")
    compare(d, "resid_post", layers=[0])
    compare(d, "z", positions=[3, 9])
    compare(d, "z", layers=[1], positions=[0, 2])
    check_patch_kind(d)
    same = d.post("/v1/patching", {"clean": CLEAN, "corrupted": CLEAN, "answer": ANSWER, "distractor": "the",
                                   "site": "mlp_out", "layers": [1]}).json()
    c.check(same["clean_diff"] == same["corrupted_diff"] and same["grid"] == [[None] * len(CLEAN)] and
            same["tokens"]["distractor"] == 278, f"clean == corrupted: grid of nulls, text distractor: {str(same)[:200]}")
    check_bad(d)
    check_client_gone(d)
finally:
    c.check(d.stop() == 0, "daemon exit status")

c.finish()
