#!/usr/bin/python3
"""The model-server protocol of the Gateway API Inference Extension on GET /metrics, against the
real daemon: the queued and running request counts, the KV cache usage as a fraction and the cache
configuration (block size, number of blocks) as an info gauge, under attnd's names and under the
vLLM names the endpoint picker reads by default (docs/proposals/003-model-server-protocol of
kubernetes-sigs/gateway-api-inference-extension; the picker's built-in "vllm" engine config:
vllm:num_requests_waiting, vllm:num_requests_running, vllm:kv_cache_usage_perc,
vllm:cache_config_info{block_size,num_gpu_blocks}, vllm:lora_requests_info). Each is declared a
gauge (the picker reads only gauge and counter values). The gauges move: with one request running
at a time, two more wait in the queue; KV usage is above its idle value while a long request runs
and equals the blocks its tokens need (ceil(tokens / 16) / pool size), and is back to the idle
value once it ends."""
import math
import os
import re
import threading
import time

from attnd_daemon import Checker, Daemon, parse_prometheus

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
KJV = os.path.join(ROOT, "models", "kjv.gguf")
POOL = 512  # KV blocks (16 tokens each): a pool small enough that one request is a visible fraction
c = Checker("test_gateway_metrics")

# attnd's name -> the vLLM alias the endpoint picker reads by default
ALIASES = {"attnd_queue_depth": "vllm:num_requests_waiting",
           "attnd_requests_running": "vllm:num_requests_running",
           "attnd_kv_cache_usage_ratio": "vllm:kv_cache_usage_perc"}
INFO_RE = re.compile(r'^(attnd|vllm):?_?cache_config_info\{block_size="(\d+)",num_gpu_blocks="(\d+)"\} 1$', re.M)


def scrape(d):
    """(values, text): parsed samples and the raw exposition text."""
    r = d.get("/metrics", timeout=10)
    return parse_prometheus(r.text), r.text


def check_static(mt, text):
    """Types, the info gauge's labels and the aliases, on one scrape."""
    for name in [*ALIASES, *ALIASES.values(), "vllm:gpu_cache_usage_perc", "attnd_cache_config_info",
                 "vllm:cache_config_info", "vllm:lora_requests_info"]:
        c.check(re.search(rf"^# TYPE {re.escape(name)} gauge$", text, re.M), f"{name} is not declared a gauge")
    infos = INFO_RE.findall(text)
    c.check(len(infos) == 2 and all(bs == "16" and int(nb) == POOL for _, bs, nb in infos),
            f"cache_config_info: want block_size 16, num_gpu_blocks {POOL} under both names, got {infos}")
    for own, alias in ALIASES.items():
        c.check(own in mt and mt.get(alias) == mt[own], f"{alias} {mt.get(alias)} != {own} {mt.get(own)}")
    c.check(mt.get("vllm:gpu_cache_usage_perc") == mt.get("vllm:kv_cache_usage_perc"), "gpu_cache_usage_perc alias")
    u = mt.get("attnd_kv_cache_usage_ratio", -1)
    used = mt.get('attnd_kv_cache_blocks{state="used"}', -1)
    c.check(0 <= u <= 1 and abs(u - used / POOL) < 1e-6, f"usage {u} != used blocks {used} / {POOL}")
    lora = [k for k in mt if k.startswith("vllm:lora_requests_info{")]
    c.check(len(lora) == 1 and 'max_lora="0"' in lora[0] and 'running_lora_adapters=""' in lora[0]
            and mt[lora[0]] > 1.6e9, f"lora_requests_info: no adapters, a timestamp value, is {lora}")


def poll_while(d, busy, seen, pred):
    """Scrapes every 20 ms while busy is not set; appends the scrapes for which pred holds."""
    while not busy.is_set():
        mt, _ = scrape(d)
        if pred(mt):
            seen.append(mt)
        time.sleep(0.02)


d = Daemon(KJV, "--ctx", "4096", "--kv-blocks", str(POOL), "--max-running", "1")
try:
    idle, text = scrape(d)
    check_static(idle, text)
    idle_usage = idle["attnd_kv_cache_usage_ratio"]
    c.check(idle["attnd_queue_depth"] == 0 and idle["attnd_requests_running"] == 0 and idle_usage == 0,
            f"idle: queued {idle['attnd_queue_depth']}, running {idle['attnd_requests_running']}, usage {idle_usage}")

    # ---- one long request: usage above idle while it runs, equal to the blocks its tokens need ----
    done, seen = threading.Event(), []
    poller = threading.Thread(target=poll_while, args=(d, done, seen, lambda m: m["attnd_requests_running"] >= 1))
    poller.start()
    out = d.generate(prompt="In the beginning God created the heaven and the earth.", max_tokens=3500,
                     ignore_eos=True, temperature=0)
    done.set()
    poller.join()
    c.check(len(seen) >= 3, f"only {len(seen)} scrapes saw the long request running")
    c.check(all(m["attnd_kv_cache_usage_ratio"] > idle_usage for m in seen),
            f"usage not above idle while running: {[m['attnd_kv_cache_usage_ratio'] for m in seen][:10]}")
    # blocks a sequence of n tokens holds: ceil(n / 16) (nothing shared: the pool held no prefix)
    c.check(all(abs(m["attnd_kv_cache_usage_ratio"] * POOL - math.ceil(m["attnd_kv_cache_tokens_used"] / 16)) < 1e-3
                for m in seen if m["attnd_kv_cache_tokens_used"] > 0),
            "usage != ceil(tokens used / 16) / pool while one request runs")
    grew = [m["attnd_kv_cache_usage_ratio"] for m in seen]
    c.check(len(grew) >= 2 and grew[-1] > grew[0], f"usage did not grow with the generation: {grew[:3]}..{grew[-3:]}")
    c.check(out["usage"]["completion_tokens"] == 3500, f"long request: {out['usage']}")
    after, text = scrape(d)
    c.check(after["attnd_kv_cache_usage_ratio"] == idle_usage and after["vllm:kv_cache_usage_perc"] == idle_usage,
            f"usage after the request {after['attnd_kv_cache_usage_ratio']} != idle {idle_usage}")
    c.check(after["attnd_requests_running"] == 0 and after["vllm:num_requests_running"] == 0, "running after")

    # ---- three at once with --max-running 1: one runs, two wait ----
    done2, seen2 = threading.Event(), []
    poller = threading.Thread(target=poll_while, args=(d, done2, seen2, lambda m: m["attnd_queue_depth"] >= 1))
    poller.start()
    outs = []
    clients = [threading.Thread(target=lambda i=i: outs.append(d.generate(prompt=f"And God said {i}", max_tokens=1500,
                                                                          ignore_eos=True)))
               for i in range(3)]
    for t in clients:
        t.start()
    for t in clients:
        t.join()
    done2.set()
    poller.join()
    c.check(len(outs) == 3, f"{len(outs)} of 3 requests answered")
    c.check(any(m["attnd_queue_depth"] == 2 and m["vllm:num_requests_waiting"] == 2 for m in seen2),
            f"never saw 2 queued: {[m['attnd_queue_depth'] for m in seen2][:20]}")
    # the running count is the scheduler's copy published after each step (at most 20 ms old), the
    # queue is read live: a scrape between a submission and the next step may show 0 running
    c.check(any(m["attnd_queue_depth"] == 2 and m["attnd_requests_running"] == 1 for m in seen2),
            "never saw 2 queued beside 1 running")
    c.check(all(m["attnd_requests_running"] <= 1 and m["vllm:num_requests_running"] == m["attnd_requests_running"]
                for m in seen2), f"more than 1 running with --max-running 1: "
            f"{[(m['attnd_queue_depth'], m['attnd_requests_running']) for m in seen2]}")
    final, text = scrape(d)
    check_static(final, text)
    c.check(final["attnd_queue_depth"] == 0 and final["attnd_requests_running"] == 0
            and final["attnd_kv_cache_usage_ratio"] == idle_usage, "not back to idle at the end")
finally:
    c.check(d.stop() == 0, "daemon exit status")
c.finish()
