"""An independent reference for the intervention tests: a pure-Python llama forward pass (F32
GGUF tensors only, read with a GGUF reader written from the format's spec) with the hook points
of TransformerLens that attnd's interventions use (hook_resid_pre, hook_z, the attention and MLP
outputs, the residual). Slow but small models only: no numpy needed. Not a test itself
(tests/run.sh runs only test_* files)."""
import math
import struct
from operator import mul

_SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9


def _value(f, vtype):
    if vtype in _SCALAR:
        fmt = _SCALAR[vtype]
        return struct.unpack(fmt, f.read(struct.calcsize(fmt)))[0]
    if vtype == _STRING:
        (n,) = struct.unpack("<Q", f.read(8))
        return f.read(n).decode("utf-8", "replace")
    if vtype == _ARRAY:
        etype, n = struct.unpack("<IQ", f.read(12))
        return [_value(f, etype) for _ in range(n)] if etype != _STRING or n < 4096 else _skip_strings(f, n)
    raise ValueError(f"unknown GGUF value type {vtype}")


def _skip_strings(f, n):
    for _ in range(n):
        (k,) = struct.unpack("<Q", f.read(8))
        f.seek(k, 1)
    return None


def read_gguf(path):
    """(metadata dict, {tensor name: (ne list, flat tuple of floats)}) for an all-F32 file."""
    with open(path, "rb") as f:
        magic, version, n_tensors, n_kv = struct.unpack("<4sIQQ", f.read(24))
        if magic != b"GGUF" or version < 2:
            raise ValueError(f"{path}: not GGUF v2/v3")
        meta = {}
        for _ in range(n_kv):
            (klen,) = struct.unpack("<Q", f.read(8))
            key = f.read(klen).decode()
            (vtype,) = struct.unpack("<I", f.read(4))
            meta[key] = _value(f, vtype)
        infos = []
        for _ in range(n_tensors):
            (nlen,) = struct.unpack("<Q", f.read(8))
            name = f.read(nlen).decode()
            (nd,) = struct.unpack("<I", f.read(4))
            ne = list(struct.unpack(f"<{nd}Q", f.read(8 * nd)))
            ttype, off = struct.unpack("<IQ", f.read(12))
            infos.append((name, ne, ttype, off))
        align = meta.get("general.alignment", 32)
        start = (f.tell() + align - 1) // align * align
        tensors = {}
        for name, ne, ttype, off in infos:
            if ttype != 0:
                raise ValueError(f"{name}: only F32 tensors are read here")
            n = math.prod(ne)
            f.seek(start + off)
            tensors[name] = (ne, struct.unpack(f"<{n}f", f.read(4 * n)))
    return meta, tensors


def _rows(flat, n_in):
    return [flat[i:i + n_in] for i in range(0, len(flat), n_in)]


def _mv(w, x):
    return [sum(map(mul, r, x)) for r in w]


def _rmsnorm(x, w, eps):
    s = 1.0 / math.sqrt(sum(v * v for v in x) / len(x) + eps)
    return [v * s * g for v, g in zip(x, w)]


class Llama:
    """The llama forward pass of attnd's forward_cpu.c, in doubles, with intervention hooks."""

    def __init__(self, path):
        meta, t = read_gguf(path)
        a = meta["general.architecture"]
        assert a == "llama", a
        self.d = meta[f"{a}.embedding_length"]
        self.n_layer = meta[f"{a}.block_count"]
        self.n_head = meta[f"{a}.attention.head_count"]
        self.n_head_kv = meta[f"{a}.attention.head_count_kv"]
        self.eps = meta[f"{a}.attention.layer_norm_rms_epsilon"]
        self.base = meta.get(f"{a}.rope.freq_base", 10000.0)
        self.hd = self.d // self.n_head
        self.n_rot = meta.get(f"{a}.rope.dimension_count", self.hd)
        d, nq = self.d, self.n_head * self.hd
        self.emb = _rows(t["token_embd.weight"][1], d)
        self.out = _rows(t["output.weight"][1], d) if "output.weight" in t else self.emb
        self.out_norm = t["output_norm.weight"][1]
        self.layers = []
        for i in range(self.n_layer):
            g = lambda n: t[f"blk.{i}.{n}.weight"][1]  # noqa: E731
            self.layers.append(dict(attn_norm=g("attn_norm"), wq=_rows(g("attn_q"), d), wk=_rows(g("attn_k"), d),
                                    wv=_rows(g("attn_v"), d), wo=_rows(g("attn_output"), nq),
                                    ffn_norm=g("ffn_norm"), wg=_rows(g("ffn_gate"), d), wu=_rows(g("ffn_up"), d),
                                    wd=_rows(g("ffn_down"), len(g("ffn_gate")) // d)))

    def _rope(self, v, n_heads, pos):
        half = self.n_rot // 2
        for i in range(half):
            th = pos * self.base ** (-2.0 * i / self.n_rot)
            c, s = math.cos(th), math.sin(th)
            for h in range(n_heads):
                a, b = h * self.hd + 2 * i, h * self.hd + 2 * i + 1
                v[a], v[b] = v[a] * c - v[b] * s, v[a] * s + v[b] * c

    def _attend(self, q, k, v):
        """z (n rows of n_head * hd): causal GQA softmax attention."""
        hd, grp, scale = self.hd, self.n_head // self.n_head_kv, 1.0 / math.sqrt(self.hd)
        z = []
        for p in range(len(q)):
            row = []
            for h in range(self.n_head):
                qh, kh = q[p][h * hd:(h + 1) * hd], (h // grp) * hd
                sc = [sum(map(mul, qh, k[j][kh:kh + hd])) * scale for j in range(p + 1)]
                m = max(sc)
                e = [math.exp(s - m) for s in sc]
                tot = sum(e)
                row += [sum(e[j] * v[j][kh + i] for j in range(p + 1)) / tot for i in range(hd)]
            z.append(row)
        return z

    def _hook_z(self, z, l, ivs, n_prompt):
        hd = self.hd
        for iv in ivs:
            if iv["layer"] != l or iv["kind"] not in ("head_scale", "head_mean"):
                continue
            o = iv["head"] * hd
            if iv["kind"] == "head_scale":
                for r in z:
                    r[o:o + hd] = [x * iv["scale"] for x in r[o:o + hd]]
                continue
            mean = [sum(z[p][o + i] for p in range(n_prompt)) / n_prompt for i in range(hd)]
            for r in z:
                r[o:o + hd] = mean

    @staticmethod
    def _steered(iv, p, n_prompt):
        where = iv.get("positions", "all")
        return where == "all" or (where == "generated" and p >= n_prompt) or (isinstance(where, list) and p in where)

    def _layer(self, xs, l, ivs, n_prompt):
        L = self.layers[l]
        for iv in ivs:
            if iv["kind"] == "steer" and iv["layer"] == l:
                s = iv.get("scale", 1.0)
                xs = [[a + s * b for a, b in zip(x, iv["vec"])] if self._steered(iv, p, n_prompt) else x
                      for p, x in enumerate(xs)]
        self.cap[("resid_pre", l)] = xs
        hs = [_rmsnorm(x, L["attn_norm"], self.eps) for x in xs]
        q, k, v = [_mv(L["wq"], h) for h in hs], [_mv(L["wk"], h) for h in hs], [_mv(L["wv"], h) for h in hs]
        for p in range(len(xs)):
            self._rope(q[p], self.n_head, p)
            self._rope(k[p], self.n_head_kv, p)
        z = self._attend(q, k, v)
        self._hook_z(z, l, ivs, n_prompt)
        self.cap[("z", l)] = z
        skips = {iv["part"] for iv in ivs if iv["kind"] == "skip" and iv["layer"] == l}
        att = [[0.0] * self.d if "attn" in skips else _mv(L["wo"], r) for r in z]
        out, mlps = [], []
        for x, a in zip(xs, att):
            mid = [u + w for u, w in zip(x, a)]
            h = _rmsnorm(mid, L["ffn_norm"], self.eps)
            g, u = _mv(L["wg"], h), _mv(L["wu"], h)
            m = [0.0] * self.d if "mlp" in skips else _mv(L["wd"], [gi / (1 + math.exp(-gi)) * ui for gi, ui in zip(g, u)])
            base = a if "residual" in skips else mid
            out.append([b + w for b, w in zip(base, m)])
            mlps.append(m)
        self.cap[("attn_out", l)], self.cap[("mlp_out", l)], self.cap[("resid_post", l)] = att, mlps, out
        return out

    def activations(self, toks, n_prompt, ivs):
        """{(site, layer): rows over all positions} for TransformerLens' sites resid_pre, z,
        attn_out, mlp_out, resid_post (each after the interventions at it)."""
        self.cap = {}
        xs = [list(self.emb[t]) for t in toks]
        for l in range(self.n_layer):
            xs = self._layer(xs, l, ivs, n_prompt)
        return self.cap

    def logprobs(self, toks, n_prompt, ivs, rows):
        """Log-softmax rows (lists over the vocabulary) after each position in rows, for the token
        sequence toks (the first n_prompt the prompt) under the interventions ivs (the API's JSON
        form, steer vectors given as "vec")."""
        self.cap = {}
        xs = [list(self.emb[t]) for t in toks]
        for l in range(self.n_layer):
            xs = self._layer(xs, l, ivs, n_prompt)
        res = []
        for p in rows:
            h = _rmsnorm(xs[p], self.out_norm, self.eps)
            lg = _mv(self.out, h)
            m = max(lg)
            lse = m + math.log(sum(math.exp(x - m) for x in lg))
            res.append([x - lse for x in lg])
        return res
