#!/usr/bin/python3
"""Tenants and unguessable ids (issue 38 C, D), real daemon over real HTTP:
 - --api-keys FILE: one name:key per line, '#' comments and blank lines allowed; a bad line is a
   start-up error naming the line (exit 2); --api-keys with --api-key is refused.
 - each request belongs to the tenant whose key it shows; /attention and /logit_lens read only
   that tenant's finished requests: without id= its own most recent one, never another's; another
   tenant's id is 404 with the same message as an id that never existed (not 403).
 - response ids are gen-/chatcmpl-/cmpl- and 32 hex digits (128 random bits), all distinct; choice
   i of an n-choice answer is still id=...&index=i.
 - without any key the daemon says it is single-user (start-up log and --help)."""
import os
import re
import subprocess
import tempfile

from attnd_daemon import ATTND, Checker, Daemon, error_shape_ok, model

c = Checker("test_http_tenants")
MODEL = model("stories260K.gguf")
KEYS = {"alice": "alice-key-0123456789abcdef", "bob": "bob-key-fedcba9876543210", "carol": "carol:key:with:colons"}
ID_RE = {"gen": re.compile(r"^gen-[0-9a-f]{32}$"), "chatcmpl": re.compile(r"^chatcmpl-[0-9a-f]{32}$"),
         "cmpl": re.compile(r"^cmpl-[0-9a-f]{32}$")}


def auth(name):
    return {"Authorization": "Bearer " + KEYS[name]}


def generate(d, who, prompt, **kw):
    r = d.post("/v1/generate", {"prompt": prompt, "max_tokens": 3, "temperature": 0, **kw}, headers=auth(who))
    c.check(r.status_code == 200, f"{who} generate: {r.status_code} {r.text[:200]}")
    return r.json() if r.status_code == 200 else {"id": "gen-0", "tokens": []}


def attention(d, who, query=""):
    return d.get("/attention?layer=0&head=0" + query, headers=auth(who))


def lens(d, who, query=""):
    return d.get("/logit_lens?pos=0" + query, headers=auth(who))


def same_but_id(a, b, ida, idb):
    """Two 404 messages that differ only in the id they name."""
    return a.json()["error"]["message"].replace(ida, "ID") == b.json()["error"]["message"].replace(idb, "ID")


def check_isolation(d):
    # carol has made no request yet: without id= she finds nothing, though others have
    c.check(error_shape_ok(attention(d, "carol"), 404) is None, "carol, before any request of hers: 404")
    a = generate(d, "alice", [1, 5, 9])
    b = generate(d, "bob", [1, 7, 7, 7])
    for who, g, prompt in (("alice", a, [1, 5, 9]), ("bob", b, [1, 7, 7, 7])):
        c.check(ID_RE["gen"].match(g["id"]), f"{who}'s id {g['id']} is gen-<32 hex>")
        r = attention(d, who)
        c.check(r.status_code == 200 and r.json()["id"] == g["id"] and r.json()["token_ids"][:len(prompt)] == prompt,
                f"{who}: /attention without id is {who}'s latest: {r.status_code} {r.text[:160]}")
        r = lens(d, who)
        c.check(r.status_code == 200 and r.json()["id"] == g["id"], f"{who}: /logit_lens without id: {r.text[:160]}")
        r = attention(d, who, "&id=" + g["id"])
        c.check(r.status_code == 200, f"{who}: own id: {r.status_code}")
    never = "gen-" + "0" * 32
    for who, other in (("alice", b["id"]), ("bob", a["id"]), ("carol", a["id"])):
        for route in (attention, lens):
            r = route(d, who, "&id=" + other)
            c.check(error_shape_ok(r, 404) is None, f"{who} reads {other} through {route.__name__}: {r.status_code}")
            n = route(d, who, "&id=" + never)
            c.check(error_shape_ok(n, 404) is None and same_but_id(r, n, other, never),
                    f"{who}: another tenant's id and a missing id answer alike: {r.text[:160]} / {n.text[:160]}")
    c.check(error_shape_ok(attention(d, "carol"), 404) is None, "carol still has no request of her own")
    # a tenant's latest stays its own while others keep generating
    for k in range(3):
        generate(d, "bob", [1, 2 + k])
    r = attention(d, "alice")
    c.check(r.status_code == 200 and r.json()["id"] == a["id"], f"alice's latest after bob's requests: {r.text[:120]}")


def check_choices(d):
    r = d.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "n": 2, "max_tokens": 3,
                                        "temperature": 1, "seed": 7}, headers=auth("alice"))
    c.check(r.status_code == 200, f"chat n=2: {r.status_code} {r.text[:200]}")
    if r.status_code != 200:
        return
    cid = r.json()["id"]
    c.check(ID_RE["chatcmpl"].match(cid), f"chat id {cid}")
    texts = [ch["message"]["content"] for ch in r.json()["choices"]]
    for i in range(2):
        a = attention(d, "alice", f"&id={cid}&index={i}")
        c.check(a.status_code == 200 and a.json()["id"] == cid, f"choice {i} by id and index: {a.status_code}")
        if a.status_code == 200:
            tail = "".join(a.json()["tokens"])
            c.check(texts[i] in tail, f"choice {i}'s tokens end in its text {texts[i]!r}: ...{tail[-60:]!r}")
        c.check(error_shape_ok(attention(d, "bob", f"&id={cid}&index={i}"), 404) is None, f"bob, choice {i}: 404")
    c.check(error_shape_ok(attention(d, "alice", f"&id={cid}&index=2"), 404) is None, "choice 2 of 2: 404")
    r = d.post("/v1/completions", {"prompt": "Once", "max_tokens": 2, "temperature": 0}, headers=auth("bob"))
    c.check(r.status_code == 200 and ID_RE["cmpl"].match(r.json()["id"]), f"completion id {r.text[:120]}")
    ids = set()
    for k in range(24):
        ids.add(generate(d, "carol", [1, 10 + k], max_tokens=1)["id"])
    c.check(len(ids) == 24 and all(ID_RE["gen"].match(i) for i in ids), f"24 ids, all distinct and well formed")
    # 24 x 128 random bits: each hex position takes many values (a counter would not)
    c.check(all(len({i[4 + p] for i in ids}) >= 4 for p in range(32)), "every hex digit of the ids varies")


def check_stream_ids(d):
    with d.post("/v1/generate", {"prompt": [1, 4], "max_tokens": 2, "temperature": 0, "stream": True}, stream=True,
                headers=auth("bob")) as r:
        body = r.text
    ids = set(re.findall(r'"id":"([^"]+)"', body))
    c.check(len(ids) == 1 and ID_RE["gen"].match(next(iter(ids))), f"one well-formed id in the stream: {ids}")
    if len(ids) == 1:
        sid = ids.pop()
        c.check(attention(d, "bob", "&id=" + sid).status_code == 200, "the streamed request by its id")
        c.check(error_shape_ok(attention(d, "alice", "&id=" + sid), 404) is None, "alice cannot read bob's stream")


def startup(args, what):
    r = subprocess.run([ATTND, "serve", "-m", MODEL, "--port", "0", *args], capture_output=True, text=True, timeout=30)
    return r


with tempfile.TemporaryDirectory() as tmp:
    keys = os.path.join(tmp, "keys")
    with open(keys, "w") as f:
        f.write("# tenants of this test\n\n")
        f.write(f"alice:{KEYS['alice']}\n   \n")
        f.write(f"  bob : {KEYS['bob']}  \r\n")
        f.write(f"carol:{KEYS['carol']}\n# the end\n")
    d = Daemon(MODEL, "--api-keys", keys)
    try:
        c.check("3 tenants" in d.log(), "the start-up log counts the tenants:\n" + d.log()[-400:])
        c.check(error_shape_ok(d.get("/attention?layer=0&head=0"), 401) is None, "no key: 401")
        r = d.get("/attention?layer=0&head=0", headers={"Authorization": "Bearer " + KEYS["alice"][:-1]})
        c.check(error_shape_ok(r, 401) is None, "a key's prefix: 401")
        r = d.get("/attention?layer=0&head=0", headers={"Authorization": "Bearer carol"})
        c.check(error_shape_ok(r, 401) is None, "a tenant's name is not its key")
        check_isolation(d)
        check_choices(d)
        check_stream_ids(d)
        c.check(d.get("/health").status_code == 200, "/health stays open")
    finally:
        c.check(d.stop() == 0, "exit status")

    # start-up errors name the line
    bad = [("alice:k1\nno colon here\n", "line 2"), ("alice:k1\n\n:k2\n", "line 3"), ("alice:k1\nbob:\n", "line 2"),
           ("alice:k1\nalice:k2\n", "line 2"), ("alice:k1\nbob:k1\n", "line 2"), ("# only comments\n\n", "no"),
           ("al ice:k1\n", "line 1"), ("x" * 70 + ":k1\n", "line 1")]
    for i, (text, word) in enumerate(bad):
        path = os.path.join(tmp, f"bad{i}")
        with open(path, "w") as f:
            f.write(text)
        r = startup(["--api-keys", path], text)
        c.check(r.returncode == 2 and word in r.stderr and path in r.stderr,
                f"bad keys file {text!r}: exit {r.returncode}, stderr {r.stderr.strip()[-200:]!r}")
    for args in (["--api-keys", keys, "--api-key", "k"], ["--api-keys", os.path.join(tmp, "missing")]):
        r = startup(args, "")
        c.check(r.returncode != 0 and "--api-key" in r.stderr, f"serve {args}: exit {r.returncode} {r.stderr[-200:]!r}")

# single-user: said in --help and at start-up; every client shares one history
h = subprocess.run([ATTND, "serve", "--help"], capture_output=True, text=True, timeout=30)
c.check("single-user" in h.stdout + h.stderr, "--help says the daemon without a key is single-user")
d = Daemon(MODEL)
try:
    c.check("single-user" in d.log(), "the start-up log says single-user:\n" + d.log()[-400:])
    g = d.generate(prompt=[1, 6], max_tokens=2, temperature=0)
    c.check(ID_RE["gen"].match(g["id"]), f"id {g['id']}")
    r = d.get("/attention?layer=0&head=0", headers={"Authorization": "Bearer anything"})
    c.check(r.status_code == 200 and r.json()["id"] == g["id"], "single-user: any client reads the latest request")
    r = d.get(f"/attention?layer=0&head=0&id={g['id'][4:]}")
    c.check(r.status_code == 200 and r.json()["id"] == g["id"], "the id's 32 hex digits alone still address it")
finally:
    c.check(d.stop() == 0, "single-user: exit status")
c.finish()
