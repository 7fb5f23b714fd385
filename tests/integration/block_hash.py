"""The prefix cache's documented block hash (docs/GATEWAY.md), computed from token ids alone: it names
the disk tier's files (test_kv_disk.py) and the KV-cache events' block hashes (test_kv_events.py)."""
MASK = (1 << 64) - 1
ROOT = 0x6A09E667F3BCC908  # the parent of a sequence's first block (no cache key)
BLOCK = 16                 # tokens per KV block


def mix64(x):
    x ^= x >> 30
    x = (x * 0xBF58476D1CE4E5B9) & MASK
    x ^= x >> 27
    x = (x * 0x94D049BB133111EB) & MASK
    x ^= x >> 31
    return x


def block_hash(parent, tokens):
    h = mix64(parent ^ 0x243F6A8885A308D3)
    for i in range(0, BLOCK, 2):  # two token ids per 64-bit word
        w = (tokens[i] & 0xFFFFFFFF) | ((tokens[i + 1] & 0xFFFFFFFF) << 32)
        h = (mix64(h ^ ((w * 0x9E3779B97F4A7C15) & MASK)) + 0x632BE59BD9B4E019) & MASK
    return mix64(h ^ BLOCK)


def chain(ids, root=ROOT):
    """Hashes of the full blocks of ids, in order, the first one's parent root."""
    out, h = [], root
    for b in range(len(ids) // BLOCK):
        h = block_hash(h, ids[b * BLOCK:(b + 1) * BLOCK])
        out.append(h)
    return out
