#!/usr/bin/python3
"""The daemon on the Vulkan backend (lavapipe here) against the same daemon on the CPU kernels:
/health and /metrics name the backend and device; greedy /v1/generate gives the golden tokens
of tiny-qwen2-f32 on both; GET /attention returns the same weights and values (within 1e-4) on
both, GET /logit_lens the same per-layer predictions; several concurrent requests on the Vulkan daemon (batched steps over its device-resident
KV pools) give the tokens they give alone; `--backend auto` on a machine whose only Vulkan
device is a CPU device runs the CPU kernels; a bad --backend value is a usage error."""
import json
import os
import subprocess
import threading

from attnd_daemon import ATTND, SHARED, Checker, Daemon, model

c = Checker("test_http_vulkan")
name = "tiny-qwen2-f32"
gold = json.load(open(os.path.join(SHARED, "golden", name + ".json")))

vk = Daemon(model(name + ".gguf"), "--backend", "vulkan", "--keep-requests", "16")
cpu = Daemon(model(name + ".gguf"), "--backend", "cpu", "--keep-requests", "16")
try:
    h = vk.get("/health").json()
    c.check(h.get("backend") == "vulkan" and h.get("device"), f"vulkan /health: {h}")
    hc = cpu.get("/health").json()
    c.check(hc.get("backend") == "cpu" and hc.get("device", "").startswith("cpu"), f"cpu /health: {hc}")
    c.check("kernels" not in h and "f32" in hc.get("kernels", {}).get("matrix", {}), "kernels only on the CPU backend")
    m = vk.get("/metrics").text
    c.check('attnd_backend_info{backend="vulkan"' in m, "vulkan /metrics lacks attnd_backend_info")

    def gap_limit(case, tol=1e-3):
        for s, step in enumerate(case["steps"]):
            if step["top"][0][1] - step["top"][1][1] <= tol:
                return s
        return len(case["tokens"])

    ids = {}
    for i, case in enumerate(gold["cases"][:3]):
        n = len(case["tokens"])
        lim = gap_limit(case)
        for label, d in (("vulkan", vk), ("cpu", cpu)):
            out = d.generate(prompt=case["prompt"], max_tokens=n, temperature=0, ignore_eos=True)
            c.check(out["tokens"][:lim] == case["tokens"][:lim],
                    f"{label} case {i}: {out['tokens']} != {case['tokens']} (first {lim})")
            ids[(label, i)] = out["id"]

    # /attention: same weights and values on both backends
    worst = 0.0
    for layer, head in ((0, 0), (1, 3)):
        a = vk.get(f"/attention?layer={layer}&head={head}&values=1&id={ids[('vulkan', 0)]}")
        b = cpu.get(f"/attention?layer={layer}&head={head}&values=1&id={ids[('cpu', 0)]}")
        c.check(a.status_code == 200 and b.status_code == 200, f"attention {a.status_code} {b.status_code}")
        if a.status_code != 200 or b.status_code != 200:
            continue
        a, b = a.json(), b.json()
        c.check(a["token_ids"] == b["token_ids"], "attention token ids differ")
        for ra, rb in zip(a["weights"], b["weights"]):
            c.check(len(ra) == len(rb), "attention row lengths differ")
            worst = max([worst] + [abs(x - y) for x, y in zip(ra, rb)])
        for ra, rb in zip(a["values"], b["values"]):
            worst = max([worst] + [abs(x - y) for x, y in zip(ra, rb)])
    print(f"/attention vulkan vs cpu: max |difference| {worst:.2e}")
    c.check(worst <= 1e-4, f"/attention differs between backends by {worst}")

    # /logit_lens: the same per-layer top tokens and probabilities on both backends
    worst = 0.0
    for pos in (0, 5, 10):
        a = vk.get(f"/logit_lens?id={ids[('vulkan', 0)]}&pos={pos}&top=5")
        b = cpu.get(f"/logit_lens?id={ids[('cpu', 0)]}&pos={pos}&top=5")
        c.check(a.status_code == 200 and b.status_code == 200, f"logit_lens {a.status_code} {b.status_code}")
        if a.status_code != 200 or b.status_code != 200:
            continue
        for la, lb in zip(a.json()["layers"], b.json()["layers"]):
            pa, pb = [p for _, p in la["top"]], [p for _, p in lb["top"]]
            worst = max([worst] + [abs(x - y) for x, y in zip(pa, pb)])
            c.check(la["top_ids"][0] == lb["top_ids"][0] or abs(pa[0] - pa[1]) <= 1e-4,
                    f"logit_lens pos {pos} layer {la['layer']}: top {la['top_ids']} vs {lb['top_ids']}")
    print(f"/logit_lens vulkan vs cpu: max |probability difference| {worst:.2e}")
    c.check(worst <= 1e-4, f"/logit_lens differs between backends by {worst}")

    # concurrent requests on the Vulkan daemon: same tokens as alone
    alone = {}
    prompts = [case["prompt"] for case in gold["cases"][:4]]
    for i, p in enumerate(prompts):
        alone[i] = vk.generate(prompt=p, max_tokens=12, temperature=0, ignore_eos=True)["tokens"]
    together = {}

    def run(i):
        together[i] = vk.generate(prompt=prompts[i], max_tokens=12, temperature=0, ignore_eos=True)["tokens"]

    ts = [threading.Thread(target=run, args=(i,)) for i in range(len(prompts))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    for i in alone:
        c.check(together.get(i) == alone[i], f"concurrent request {i}: {together.get(i)} != alone {alone[i]}")
    mv = vk.metrics()  # parses as Prometheus text, the backend label included
    c.check(mv.get("attnd_requests_running") == 0, f"requests still running: {mv.get('attnd_requests_running')}")
    c.check(any(k.startswith('attnd_backend_info{backend="vulkan"') for k in mv), "attnd_backend_info not parsed")
finally:
    for d in (vk, cpu):
        rc = d.stop()
        c.check(rc == 0, f"daemon exit {rc}:\n{d.log()[-1500:]}")

# auto with only a CPU Vulkan device -> CPU kernels; a bad value -> usage error (exit 2)
auto = Daemon(model(name + ".gguf"), "--backend", "auto")
try:
    h = auto.get("/health").json()
    print(f"--backend auto: {h}")
    c.check(h.get("backend") in ("cpu", "vulkan"), f"auto /health: {h}")
    if h.get("backend") == "vulkan":
        c.check("llvmpipe" not in h.get("device", "").lower(), "auto picked the CPU Vulkan device")
finally:
    auto.stop()
r = subprocess.run([ATTND, "serve", "-m", model(name + ".gguf"), "--backend", "metal"], capture_output=True, text=True)
c.check(r.returncode == 2 and "--backend" in r.stderr, f"bad --backend: exit {r.returncode} {r.stderr[-300:]}")
c.finish()
