#!/usr/bin/python3
"""usage.prompt_tokens_details.cached_tokens on the OpenAI routes (the field OpenAI's API and the
routers that bill or route by cache hits read), against the real daemon: 0 on a cold prompt; on a
repeat, the prompt tokens the prefix cache held (whole 16-token blocks, fewer than the prompt) and
exactly what the daemon's own prefix-cache hit counter grew by; once per prompt with n > 1 (its
choices share one prefix); the same in a stream's usage chunk; on /v1/completions too."""
import json
import os

from attnd_daemon import Checker, Daemon, parse_sse

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
KJV = os.path.join(ROOT, "models", "kjv.gguf")
SYSTEM = ("In the beginning God created the heaven and the earth. And the earth was without form, and void; "
          "and darkness was upon the face of the deep. And the Spirit of God moved upon the face of the waters. "
          "And God said, Let there be light: and there was light. And God saw the light, that it was good: "
          "and God divided the light from the darkness. And God called the light Day, and the darkness he "
          "called Night. And the evening and the morning were the first day.")
c = Checker("test_cached_tokens")


def hits(d):
    return d.metrics()["attnd_prefix_cache_hit_tokens_total"]


def chat(d, question, **extra):
    body = {"model": "kjv", "max_tokens": 4, "temperature": 0,
            "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}], **extra}
    r = d.post("/v1/chat/completions", body)
    assert r.status_code == 200, r.text[:300]
    return r.json()["usage"]


def cached(usage):
    return (usage.get("prompt_tokens_details") or {}).get("cached_tokens")


def check_chat(d):
    h0 = hits(d)
    cold = chat(d, "Who made the light?")
    c.check(cached(cold) == 0, f"a cold prompt: cached_tokens {cached(cold)}, want 0 ({cold})")
    h1 = hits(d)
    warm = chat(d, "Who divided the waters?")
    n = cached(warm)
    h2 = hits(d)
    c.check(isinstance(n, int) and 0 < n < warm["prompt_tokens"] and n % 16 == 0,
            f"a repeated system prompt: cached_tokens {n} of {warm['prompt_tokens']} (want whole blocks, > 0)")
    c.check(n == h2 - h1 and h1 - h0 == 0, f"cached_tokens {n}, the hit counter grew by {h2 - h1:.0f} "
            f"(and by {h1 - h0:.0f} for the cold one)")
    several = chat(d, "Who divided the waters?", n=3)
    c.check(cached(several) is not None and cached(several) >= n,
            f"n=3 on a cached prompt: cached_tokens {cached(several)}, want >= {n}")
    c.check(cached(several) < several["prompt_tokens"],
            f"n=3: cached_tokens {cached(several)} not below prompt_tokens {several['prompt_tokens']} "
            "(counted per choice?)")
    return n


def check_stream(d, want):
    body = {"model": "kjv", "max_tokens": 4, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True},
            "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Who divided the waters?"}]}
    with d.post("/v1/chat/completions", json.dumps(body), stream=True) as r:
        events, done = parse_sse(r.iter_lines(chunk_size=None))
    usage = [e["usage"] for e in events if e.get("usage")]
    c.check(done and len(usage) == 1 and cached(usage[0]) is not None and cached(usage[0]) >= want,
            f"stream's usage chunk: {usage}, want cached_tokens >= {want}")


def check_completions(d):
    prompt = SYSTEM + " Then"
    r1 = d.post("/v1/completions", {"model": "kjv", "prompt": prompt, "max_tokens": 2, "temperature": 0}).json()
    r2 = d.post("/v1/completions", {"model": "kjv", "prompt": prompt, "max_tokens": 2, "temperature": 0}).json()
    n1, n2 = cached(r1["usage"]), cached(r2["usage"])
    c.check(n1 is not None and n2 is not None and n2 > 0 and n2 % 16 == 0 and n2 < r2["usage"]["prompt_tokens"],
            f"/v1/completions: cached_tokens {n1} then {n2} of {r2['usage']['prompt_tokens']}")


def main():
    d = Daemon(KJV, "--threads", "1", "--ctx", "512")
    try:
        want = check_chat(d)
        check_stream(d, want)
        check_completions(d)
    finally:
        d.stop()
    c.finish()


if __name__ == "__main__":
    main()
