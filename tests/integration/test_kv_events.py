#!/usr/bin/python3
"""KV-cache events (attnd serve --kv-events), decoded by the published schema alone: vLLM's
ZeroMQ format (multipart [topic, seq as 8-byte big-endian, msgpack EventBatch], events as
msgspec array_like tagged arrays; include/attnd/kvevents.h and docs/GATEWAY.md), no vLLM code.

Against the real daemon with a small KV pool (stories260K, --ctx 128, --kv-blocks 24):
  1. requests with shared prefixes, then long concurrent ones that force evictions and
     pre-emptions (checked on /metrics);
  2. every BlockStored hash is recomputed from its token ids with the documented scheme
     (docs/GATEWAY.md: splitmix64 chain, written again here from the text), and every event's
     chain is a run of full blocks of some request's prompt + generated ids;
  3. the set of cached block hashes rebuilt from the events equals the daemon's own view
     (GET /debug/kv-blocks, read from the cache on the scheduler thread);
  4. the subscriber is stopped mid-run and a new one started; the replay socket fills the gap
     and the missed start (seq 0, before anyone subscribed), so sequence numbers run 0..N with
     none missing, and replayed payloads equal the published ones byte for byte.
"""
import collections
import os
import random
import socket
import struct
import threading
import time

import msgpack
import zmq

from attnd_daemon import Checker, Daemon, model, wait_for
from block_hash import BLOCK, MASK, ROOT, block_hash, chain

c = Checker("test_kv_events")
TOPIC = b"kv@test-pod@stories260K"


# ---- the wire format ---------------------------------------------------------------------------
def decode(payload):
    """EventBatch -> (ts, [(tag, fields...)], dp_rank); raises on anything off the schema."""
    batch = msgpack.unpackb(payload, raw=False, strict_map_key=False)
    assert isinstance(batch, list) and len(batch) in (2, 3), batch
    ts, events = batch[0], batch[1]
    assert isinstance(ts, float) and isinstance(events, list)
    for ev in events:
        assert isinstance(ev, list) and ev and isinstance(ev[0], str), ev
        if ev[0] == "BlockStored":
            assert len(ev) == 7, ev
            _, hashes, parent, toks, bs, lora, medium = ev
            assert bs == BLOCK and lora is None and medium == "GPU", ev
            assert len(toks) == BLOCK * len(hashes) and hashes, ev
            assert parent is None or 0 <= parent <= MASK
        elif ev[0] == "BlockRemoved":
            assert len(ev) == 3 and ev[2] == "GPU" and ev[1], ev
        else:
            assert ev == ["AllBlocksCleared"], ev
    return ts, events, batch[2] if len(batch) > 2 else None


class Subscriber:
    """A SUB socket on a thread, keeping {seq: payload} and the topics seen."""

    def __init__(self, ctx, endpoint):
        self.sock = ctx.socket(zmq.SUB)
        self.sock.setsockopt(zmq.SUBSCRIBE, b"kv@")
        self.sock.connect(endpoint)
        self.got, self.topics, self.bad = {}, set(), 0
        self.stop = threading.Event()
        self.last = time.time()
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()

    def _run(self):
        while not self.stop.is_set():
            if not self.sock.poll(50):
                continue
            parts = self.sock.recv_multipart()
            if len(parts) != 3 or len(parts[1]) != 8:
                self.bad += 1
                continue
            self.topics.add(parts[0])
            self.got[struct.unpack(">Q", parts[1])[0]] = parts[2]
            self.last = time.time()

    def close(self):
        self.stop.set()
        self.t.join(5)
        self.sock.close(linger=0)


def replay(ctx, endpoint, start):
    """Asks the ROUTER for every kept batch from seq start: {seq: payload}, and whether the end
    marker (-1, empty payload) closed the answer."""
    d = ctx.socket(zmq.DEALER)
    d.connect(endpoint)
    d.send_multipart([b"", struct.pack(">Q", start)])
    got, ended = {}, False
    while d.poll(5000):
        parts = d.recv_multipart()
        if len(parts) != 3 or parts[0] != b"":
            break
        if parts[1] == struct.pack(">q", -1):
            ended = parts[2] == b""
            break
        got[struct.unpack(">Q", parts[1])[0]] = parts[2]
    d.close(linger=0)
    return got, ended


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---- the workload ------------------------------------------------------------------------------
def gen(d, ids, n, **kw):
    r = d.generate(prompt=ids, max_tokens=n, temperature=0, ignore_eos=True, **kw)
    return ids + r["tokens"]


IV = [{"kind": "head_scale", "layer": 0, "head": 1, "scale": 0.5}]


def keyed_phase(d, rng, seqs):
    """One prompt plain, then twice under interventions: their blocks chain from another root
    (docs/GATEWAY.md), sent as a non-nil parent of the first block. Returns the prompt."""
    ids = [rng.randrange(3, 512) for _ in range(40)]
    seqs.append(gen(d, ids, 8))
    for _ in range(2):
        seqs.append(gen(d, ids, 8, interventions=IV))
    return ids


def shared_prefix_phase(d, rng, seqs):
    """Two families of prompts sharing a 48-token prefix, one after another: the second of each
    family reuses the first's blocks."""
    for _ in range(2):
        base = [rng.randrange(3, 512) for _ in range(48)]
        for k in range(3):
            seqs.append(gen(d, base + [rng.randrange(3, 512) for _ in range(10 + 7 * k)], 12))


def long_phase(d, rng, seqs, n=4):
    """n concurrent requests of 8 blocks each on a 24-block pool: evictions and pre-emptions."""
    out = [None] * n

    def one(i):
        out[i] = gen(d, [rng.randrange(3, 512) for _ in range(60)], 60)
    ts = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    seqs.extend(s for s in out if s)


# ---- the checks --------------------------------------------------------------------------------
def check_hashes(batches, seqs):
    """Every stored block's hash from its tokens and parent (documented scheme), and every chain
    a run of full blocks of one request's ids."""
    stored = {h for _, events, _ in batches for ev in events if ev[0] == "BlockStored" for h in ev[1]}
    roots = {ROOT} | {ev[2] for _, events, _ in batches for ev in events
                      if ev[0] == "BlockStored" and ev[2] is not None and ev[2] not in stored}
    known = set()
    for s in seqs:
        for r in roots:
            known.update(chain(s, r))
    n_blocks = bad = unknown = 0
    for _, events, _ in batches:
        for ev in events:
            if ev[0] != "BlockStored":
                continue
            h = ROOT if ev[2] is None else ev[2]
            for i, bh in enumerate(ev[1]):
                h = block_hash(h, ev[3][i * BLOCK:(i + 1) * BLOCK])
                n_blocks += 1
                bad += h != bh
                unknown += bh not in known
    c.check(n_blocks > 0, "no BlockStored events")
    c.check(bad == 0, f"{bad} of {n_blocks} stored blocks' hashes differ from the documented scheme")
    c.check(unknown == 0, f"{unknown} stored blocks are no full block of any request's ids")
    return n_blocks, roots - {ROOT}


def check_keyed(batches, ids, roots):
    """The keyed prompt's first block was stored twice: once plain (parent nil, the plain
    chain's hash) and once under the interventions' root (non-nil parent, a different hash)."""
    firsts = [(ev[2], ev[1][0]) for _, events, _ in batches for ev in events
              if ev[0] == "BlockStored" and ev[3][:BLOCK] == ids[:BLOCK]]
    plain = [f for f in firsts if f[0] is None]
    keyed = [f for f in firsts if f[0] is not None]
    c.check(plain and plain[0][1] == chain(ids)[0], f"plain first block: {plain}")
    c.check(len(keyed) == 1 and keyed[0][0] in roots and keyed[0][1] == block_hash(keyed[0][0], ids[:BLOCK])
            and keyed[0][1] != chain(ids)[0], f"keyed first block stored once under its root: {keyed}")


def rebuild(batches):
    """The multiset of cached hashes the events describe, and counts per event kind."""
    cached, kinds = collections.Counter(), collections.Counter()
    for _, events, _ in batches:
        for ev in events:
            kinds[ev[0]] += 1
            if ev[0] == "BlockStored":
                cached.update(ev[1])
            elif ev[0] == "BlockRemoved":
                for h in ev[1]:
                    c.check(cached[h] > 0, f"BlockRemoved of {h}, not stored")
                    cached[h] -= 1
            else:
                cached.clear()
    return +cached, kinds


def daemon_view(d):
    r = d.get("/debug/kv-blocks")
    c.check(r.status_code == 200, f"/debug/kv-blocks: {r.status_code} {r.text[:200]}")
    j = r.json()
    c.check(j["block_size"] == BLOCK and not j["truncated"] and j["n_blocks"] == len(j["blocks"]), str(j)[:200])
    return collections.Counter(int(b["hash"]) for b in j["blocks"]), j


def quiet(subs, secs=0.5, timeout=10):
    """Waits until no subscriber got a message for secs."""
    return wait_for(lambda: all(time.time() - s.last > secs for s in subs), timeout)


def check_refusals(mpath):
    """Bad --kv-events settings are refused at start, with the reason."""
    import subprocess
    from attnd_daemon import ATTND
    base = [ATTND, "serve", "-m", mpath, "--port", "0"]
    r = subprocess.run(base + ["--kv-events-replay", "tcp://127.0.0.1:1"], capture_output=True, text=True, timeout=30)
    c.check(r.returncode == 2 and "--kv-events" in r.stderr, f"replay alone: {r.returncode} {r.stderr[-200:]}")
    r = subprocess.run(base + ["--kv-events", "nonsense://x"], capture_output=True, text=True, timeout=30)
    c.check(r.returncode == 1 and "cannot bind the PUB socket to nonsense://x" in r.stderr,
            f"bad endpoint: {r.returncode} {r.stderr[-200:]}")


def collect(d, ctx, pub, rng, seqs):
    """Runs the workload with a subscriber restarted in the middle; returns what each one got
    and the long phase the gap saw."""
    s1 = Subscriber(ctx, pub)
    time.sleep(0.3)  # the SUB's connection; what went out before it is fetched by replay
    shared_prefix_phase(d, rng, seqs)
    quiet([s1])
    s1.close()
    long_phase(d, rng, seqs)  # nobody subscribed: only replay can fill this
    s2 = Subscriber(ctx, pub)
    time.sleep(0.3)
    long_phase(d, rng, seqs, 3)
    shared_prefix_phase(d, rng, seqs)
    keyed = keyed_phase(d, rng, seqs)
    quiet([s2])
    s2.close()
    return s1, s2, keyed


def main():
    mpath = model("stories260K.gguf")
    check_refusals(mpath)
    pub, rep = f"tcp://127.0.0.1:{free_port()}", f"tcp://127.0.0.1:{free_port()}"
    d = Daemon(mpath, "--ctx", "128", "--kv-blocks", "24", "--max-running", "4", "--kv-events", pub,
               "--kv-events-replay", rep, "--kv-events-topic", TOPIC.decode())
    ctx = zmq.Context()
    rng = random.Random(37)
    seqs = []
    try:
        s1, s2, keyed = collect(d, ctx, pub, rng, seqs)
        got = dict(s1.got)
        got.update(s2.got)
        top = max(got)
        missing = sorted(set(range(top + 1)) - set(got))
        c.check(0 in missing and len(missing) > 1, f"the restart lost nothing to replay: missing {missing[:5]}")
        rp, ended = replay(ctx, rep, 0)
        c.check(ended, "replay did not end with the (-1, empty) marker")
        c.check(all(rp[k] == got[k] for k in got if k in rp), "a replayed payload differs from the published one")
        c.check(set(got) <= set(rp), "replay lacks batches the subscribers saw")
        got.update(rp)
        c.check(sorted(got) == list(range(top + 1)), f"sequence numbers not continuous after replay (0..{top})")
        c.check(s1.topics | s2.topics == {TOPIC} and not s1.bad and not s2.bad, f"topics {s1.topics | s2.topics}")
        batches = [decode(got[k]) for k in sorted(got)]
        c.check(all(b[2] == 0 for b in batches), "data_parallel_rank is not 0")
        c.check(all(a[0] <= b[0] for a, b in zip(batches, batches[1:])), "batch timestamps go back")
        c.check(batches[0][1][0] == ["AllBlocksCleared"], f"seq 0 starts with {batches[0][1][:1]}")
        n_stored, roots = check_hashes(batches, seqs)
        check_keyed(batches, keyed, roots)
        cached, kinds = rebuild(batches)
        view, j = daemon_view(d)
        c.check(cached == view, f"events say {sum(cached.values())} cached blocks, the daemon {sum(view.values())}: "
                f"{len(cached - view)} only in events, {len(view - cached)} only in the daemon")
        m = d.metrics()
        pre = m.get("attnd_preemptions_total", 0)
        c.check(kinds["BlockRemoved"] > 0, "no evictions: the pool was not small enough")
        c.check(pre > 0, "no pre-emptions")
        c.check(m.get("attnd_prefix_cache_hit_tokens_total", 0) > 0, "no prefix-cache hits")
        c.check(m.get("attnd_kv_events_dropped_total", -1) == 0, "events dropped or no metric")
        print(f"{len(seqs)} requests, {len(batches)} batches (seq 0..{top}, {len(missing)} filled by replay), "
              f"{n_stored} blocks stored, {kinds['BlockRemoved']} removal events, {int(pre)} pre-emptions; "
              f"rebuilt {sum(cached.values())} cached blocks == daemon's {sum(view.values())}")
        s3 = Subscriber(ctx, pub)
        time.sleep(0.3)
        c.check(d.stop() == 0, "daemon exit status")
        quiet([s3])
        s3.close()
        last = decode(s3.got[max(s3.got)])[1] if s3.got else []
        c.check(last[-1:] == [["AllBlocksCleared"]], f"shutdown's last event: {last[-1:]}")
    finally:
        d.kill()
        ctx.term()
    c.finish()


if __name__ == "__main__":
    main()
