"""Writes a trained Llama (model.py) and its SentencePiece vocabulary as a GGUF v3 file.

Layout (GGUF v3): magic, version, tensor count, key/value count, key/values, tensor infos, then
tensor data aligned to general.alignment (32).  Dimensions are listed innermost first, so a
PyTorch Linear weight (out, in) is written as ne = [in, out].  Matrices are F16, norms F32.
"""
import struct

import numpy as np

GGUF_MAGIC = 0x46554747
ALIGN = 32
# value types
U32, I32, F32, BOOL, STRING, ARRAY = 4, 5, 6, 7, 8, 9
# tensor types
T_F32, T_F16 = 0, 1
# SentencePiece piece kinds -> llama.cpp token types
TT_NORMAL, TT_UNKNOWN, TT_CONTROL, TT_BYTE = 1, 2, 3, 6


def _str(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def _kv(key, vtype, value):
    out = _str(key) + struct.pack("<I", vtype)
    if vtype == STRING:
        return out + _str(value)
    if vtype == ARRAY:
        etype, items = value
        out += struct.pack("<IQ", etype, len(items))
        if etype == STRING:
            return out + b"".join(_str(s) for s in items)
        fmt = {I32: "<i", F32: "<f", U32: "<I"}[etype]
        return out + b"".join(struct.pack(fmt, v) for v in items)
    fmt = {U32: "<I", I32: "<i", F32: "<f", BOOL: "<?"}[vtype]
    return out + struct.pack(fmt, value)


def vocab_kvs(sp):
    """The tokenizer.ggml.* keys of a SentencePiece processor (attnd's 'llama' SPM vocabulary)."""
    n = sp.get_piece_size()
    pieces, scores, types = [], [], []
    for i in range(n):
        pieces.append(sp.id_to_piece(i))
        scores.append(float(sp.get_score(i)))
        if sp.is_unknown(i):
            types.append(TT_UNKNOWN)
        elif sp.is_control(i):
            types.append(TT_CONTROL)
        elif sp.is_byte(i):
            types.append(TT_BYTE)
        else:
            types.append(TT_NORMAL)
    return [
        ("tokenizer.ggml.model", STRING, "llama"),
        ("tokenizer.ggml.tokens", ARRAY, (STRING, pieces)),
        ("tokenizer.ggml.scores", ARRAY, (F32, scores)),
        ("tokenizer.ggml.token_type", ARRAY, (I32, types)),
        ("tokenizer.ggml.bos_token_id", U32, sp.bos_id()),
        ("tokenizer.ggml.eos_token_id", U32, sp.eos_id()),
        ("tokenizer.ggml.unknown_token_id", U32, sp.unk_id()),
        ("tokenizer.ggml.add_bos_token", BOOL, True),
        ("tokenizer.ggml.add_eos_token", BOOL, False),
        ("tokenizer.ggml.add_space_prefix", BOOL, True),
    ]


def model_tensors(model):
    """[(gguf name, numpy array)] in llama.cpp's names."""
    sd = {k: v.detach().cpu().numpy() for k, v in model.state_dict().items()}
    out = [("token_embd.weight", sd["embed.weight"].astype(np.float16)),
           ("output_norm.weight", sd["norm.weight"].astype(np.float32))]
    names = {"attn_norm.weight": "attn_norm.weight", "wq.weight": "attn_q.weight",
             "wk.weight": "attn_k.weight", "wv.weight": "attn_v.weight",
             "wo.weight": "attn_output.weight", "ffn_norm.weight": "ffn_norm.weight",
             "w_gate.weight": "ffn_gate.weight", "w_up.weight": "ffn_up.weight",
             "w_down.weight": "ffn_down.weight"}
    for l in range(model.cfg.n_layer):
        for ours, theirs in names.items():
            a = sd["layers.%d.%s" % (l, ours)]
            a = a.astype(np.float32 if a.ndim == 1 else np.float16)
            out.append(("blk.%d.%s" % (l, theirs), a))
    return out


def write(path, model, sp, name, extra_kvs=()):
    cfg = model.cfg
    kvs = [
        ("general.architecture", STRING, "llama"),
        ("general.name", STRING, name),
        ("general.alignment", U32, ALIGN),
        ("llama.context_length", U32, cfg.ctx),
        ("llama.embedding_length", U32, cfg.dim),
        ("llama.block_count", U32, cfg.n_layer),
        ("llama.feed_forward_length", U32, cfg.ffn),
        ("llama.attention.head_count", U32, cfg.n_head),
        ("llama.attention.head_count_kv", U32, cfg.n_head_kv),
        ("llama.rope.dimension_count", U32, cfg.head_dim),
        ("llama.rope.freq_base", F32, cfg.rope_base),
        ("llama.attention.layer_norm_rms_epsilon", F32, cfg.eps),
        ("general.file_type", U32, 1),  # mostly F16
    ] + vocab_kvs(sp) + list(extra_kvs)
    tensors = model_tensors(model)
    head = struct.pack("<IIQQ", GGUF_MAGIC, 3, len(tensors), len(kvs))
    head += b"".join(_kv(*kv) for kv in kvs)
    infos, blobs, off = b"", [], 0
    for tname, a in tensors:
        a = np.ascontiguousarray(a)
        ttype = T_F16 if a.dtype == np.float16 else T_F32
        infos += _str(tname) + struct.pack("<I", a.ndim)
        infos += b"".join(struct.pack("<Q", d) for d in reversed(a.shape))
        infos += struct.pack("<IQ", ttype, off)
        blob = a.tobytes()
        pad = (-len(blob)) % ALIGN
        blobs.append(blob + b"\0" * pad)
        off += len(blob) + pad
    meta = head + infos
    meta += b"\0" * ((-len(meta)) % ALIGN)
    with open(path, "wb") as f:
        f.write(meta)
        for b in blobs:
            f.write(b)
