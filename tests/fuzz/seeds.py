#!/usr/bin/python3
"""Writes seed inputs derived from the shared test data into the working corpora:
fuzz_tokenizer: every test string of SHARED/vocab/NAME.gguf.inp, once per vocabulary index and
special/BOS bit combination (the selector byte fuzz_tokenizer.c reads);
fuzz_detok: the reference token ids of NAME.gguf.out for the three vocabularies fuzz_detok.c
loads, as 3-byte little-endian ids. Usage: seeds.py SHARED WORKDIR (idempotent)."""
import os
import sys

shared, work = sys.argv[1], sys.argv[2]
TOK = ["llama-spm", "phi-3", "gpt-2", "llama-bpe", "qwen2", "falcon", "starcoder", "deepseek-coder"]
DETOK = ["llama-spm", "gpt-2", "qwen2"]


def put(name, key, data):
    d = os.path.join(work, name)
    os.makedirs(d, exist_ok=True)
    p = os.path.join(d, "seed-" + key)
    if not os.path.exists(p):
        with open(p, "wb") as f:
            f.write(data)


for vi, v in enumerate(TOK):
    path = os.path.join(shared, "vocab", f"ggml-vocab-{v}.gguf.inp")
    if not os.path.exists(path):
        sys.exit(f"seeds: missing {path} (set SHARED=...)")
    texts = open(path, "rb").read().split(b"\n__ggml_vocab_test__\n")
    for ti, t in enumerate(texts):
        for bits in (0x00, 0xC0):
            put("fuzz_tokenizer", f"{v}-{ti}-{bits:x}", bytes([vi | bits]) + t)
for vi, v in enumerate(DETOK):
    lines = open(os.path.join(shared, "vocab", f"ggml-vocab-{v}.gguf.out")).read().splitlines()
    for li, line in enumerate(lines):
        ids = [int(x) for x in line.split()]
        put("fuzz_detok", f"{v}-{li}", bytes([vi]) + b"".join(i.to_bytes(3, "little") for i in ids))
