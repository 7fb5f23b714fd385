#!/usr/bin/python3
"""Trains the project's default model on the King James Bible and writes models/kjv.gguf.

    /usr/bin/python3 tools/train/train.py [--minutes M] [--steps N] [--out models]

Recipe (the model card, models/README.md, gives the numbers of the shipped run):
- corpus and held-out split: corpus.py (every 50th chapter held out; never trained on);
- SentencePiece BPE, 2,048 pieces, byte fallback;
- llama architecture (model.py), AdamW, linear warm-up then cosine decay;
- the copying circuit (previous-token head -> induction head) is made to form early by mixing in
  synthetic sequences: a run of random tokens repeated 2-4 times inside natural text (loss only
  on the repeats), and natural text with one of its own spans copied later; their share starts
  high and falls (see syn_share).  Every eval logs the held-out loss, the loss on the first and
  second copy of a repeated held-out span, and the best previous-token and induction scores.
Deterministic for a given --seed and thread count.
"""
import argparse
import json
import math
import os
import sys
import time

def _threads_arg(argv, default="1"):
    """--threads N, read before numpy and torch load OpenBLAS (its pool size is fixed at load)."""
    for i, a in enumerate(argv):
        if a == "--threads" and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith("--threads="):
            return a.split("=", 1)[1]
    return default


# OpenBLAS keeps its own thread pool beside torch's: both get --threads (on a quiet machine, 2
# threads for both trained at 3.2k tokens/s against 2.3k with OpenBLAS on one). On a loaded
# machine pass --threads 1: spinning workers that are descheduled cost more than they give.
os.environ.setdefault("OPENBLAS_NUM_THREADS", _threads_arg(sys.argv))
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np
import sentencepiece as spm
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import corpus  # noqa: E402
import gguf_write  # noqa: E402
from model import Config, Llama, n_params  # noqa: E402

FIRST_NORMAL = 3 + 256  # after <unk>, <s>, </s> and the 256 byte pieces


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--out", default="models")
    p.add_argument("--work", default="build/train")
    p.add_argument("--golden", default="tests/golden", help="where the golden files go")
    p.add_argument("--minutes", type=float, default=40.0, help="wall-time budget of the training loop")
    p.add_argument("--steps", type=int, default=0, help="fixed step count (0: size from --minutes)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--ctx", type=int, default=128)
    p.add_argument("--dim", type=int, default=192)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--ffn", type=int, default=512)
    p.add_argument("--heads", type=int, default=6)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--rope-base", type=float, default=500000.0)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--warmup", type=int, default=50)
    p.add_argument("--syn-start", type=float, default=0.3, help="share of random-repeat sequences early")
    p.add_argument("--syn-end", type=float, default=0.15, help="share of random-repeat sequences late")
    p.add_argument("--nat-rep", type=float, default=0.1, help="share of natural sequences with a copied span")
    p.add_argument("--copy-frac", type=float, default=0.45,
                   help="first share of the steps where --copy-share of the blocks are one random run repeated")
    p.add_argument("--copy-share", type=float, default=0.5)
    p.add_argument("--copy-pure", type=int, default=1000,
                   help="at most this many first steps are all copying data (the circuit forms before text competes)")
    p.add_argument("--copy-formed", type=float, default=0.5,
                   help="the all-copying phase ends once induction on its alphabet reaches this (checked every 25 steps)")
    p.add_argument("--copy-vocab", type=int, default=64,
                   help="random runs draw from this many ids at first (0: the whole vocabulary)")
    p.add_argument("--widen-at", type=int, default=50, help="steps after the all-copying phase until that alphabet doubles")
    p.add_argument("--widen-every", type=int, default=100, help="steps per doubling")
    p.add_argument("--eval-every", type=int, default=50)
    p.add_argument("--no-export", action="store_true")
    p.add_argument("--export-only", action="store_true", help="re-export WORK/kjv.pt (no training)")
    p.add_argument("--max-over", type=float, default=1.3, help="stop at this multiple of --minutes")
    p.add_argument("--tokenizer", default="", help="use this SentencePiece model instead of training one")
    p.add_argument("--init", default="", help="phase 2: start from this checkpoint (a phase-1 kjv.pt)")
    p.add_argument("--stop-induction", type=float, default=0.0,
                   help="stop once an eval finds induction >= this and previous-token >= 0.5 (0: never)")
    return p.parse_args()


# ---------------------------------------------------------------- data

class Sampler:
    """Draws training blocks of ctx+1 tokens, each starting with BOS, and their loss masks."""

    def __init__(self, stream, bos, vocab, ctx, rng):
        self.stream, self.bos, self.vocab, self.ctx, self.rng = stream, bos, vocab, ctx, rng
        self.rand_hi = vocab  # random runs draw ids from [FIRST_NORMAL, rand_hi): see copy_vocab()

    def natural(self, n):
        s = self.rng.randint(0, len(self.stream) - n)
        return self.stream[s:s + n].astype(np.int64)

    def block(self, kind):
        T = self.ctx
        body = self.natural(T)
        mask = np.ones(T, dtype=np.float32)  # mask[t]: loss on predicting body[t]
        if kind == "random":
            L = self.rng.randint(8, max(9, min(49, T // 3)))
            reps = self.rng.randint(2, 5)
            while reps * L > T - 8:
                reps -= 1
            r = self.rng.randint(FIRST_NORMAL, self.rand_hi, size=L)
            p = self.rng.randint(0, T - reps * L + 1)
            body[p:p + reps * L] = np.tile(r, reps)
            mask[p:p + L] = 0.0  # the first copy cannot be predicted
        elif kind == "copy":  # the whole block: one random run repeated from just after BOS
            L = self.rng.randint(6, min(31, T // 2 + 1))
            body, mask = self.repeated(self.rng.randint(FIRST_NORMAL, self.rand_hi, size=L))
        elif kind == "span":
            L = self.rng.randint(8, max(9, min(65, T // 4)))
            a = self.rng.randint(0, T // 2 - L)
            b = self.rng.randint(a + L, T - L + 1)
            body[b:b + L] = body[a:a + L]
        return np.concatenate(([self.bos], body)), mask

    def repeated(self, r):
        """A block body of the run r repeated to ctx tokens, and its loss mask (the first copy,
        which cannot be predicted, unscored)."""
        T, L = self.ctx, len(r)
        mask = np.ones(T, dtype=np.float32)
        mask[:L] = 0.0
        return np.tile(r, T // L + 1)[:T].astype(np.int64), mask

    def copy_batch(self, n, rng, alphabet):
        """The all-copying phase: n blocks of BOS + one run of 6-30 ids from the first `alphabet`
        learned pieces, repeated to the end (no loss on the first copy), from its own generator."""
        xs, ms = [], []
        for _ in range(n):
            L = rng.randint(6, 31)
            body, mask = self.repeated(rng.randint(FIRST_NORMAL, FIRST_NORMAL + alphabet, size=L))
            xs.append(np.concatenate(([self.bos], body)))
            ms.append(mask)
        x = torch.from_numpy(np.stack(xs))
        return x[:, :-1], x[:, 1:], torch.from_numpy(np.stack(ms))

    def batch(self, n, syn, nat_rep, copy=0.0):
        xs, ms = [], []
        for _ in range(n):
            u = self.rng.rand()
            if u < copy:
                kind = "copy"
            else:
                u = (u - copy) / (1.0 - copy)
                kind = "random" if u < syn else ("span" if u < syn + nat_rep else "plain")
            b, m = self.block(kind)
            xs.append(b)
            ms.append(m)
        x = torch.from_numpy(np.stack(xs))
        return x[:, :-1], x[:, 1:], torch.from_numpy(np.stack(ms))


def encode_chapters(sp, chapters):
    return [np.array(sp.encode(text), dtype=np.int64) for _, text in chapters]


# ---------------------------------------------------------------- measurements

def masked_ce(logits, y, mask):
    l = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1), reduction="none")
    m = mask.reshape(-1)
    return (l * m).sum() / m.sum()


class Probe:
    """Fixed held-out measurements: loss, repeated-span loss, previous-token and induction scores."""

    def __init__(self, held_ids, bos, vocab, ctx, seed):
        rng = np.random.RandomState(seed + 1000)
        stream = np.concatenate(held_ids)
        blocks = []
        for _ in range(16):
            s = rng.randint(0, len(stream) - ctx)
            blocks.append(np.concatenate(([bos], stream[s:s + ctx])))
        self.text = torch.from_numpy(np.stack(blocks))
        # a held-out span of S tokens at a..a+S-1 copied to b..b+S-1
        S, a, b = min(32, ctx // 4), ctx // 8 + 1, ctx // 2 + 1
        rep = self.text.clone()
        rep[:, b:b + S] = rep[:, a:a + S]
        self.rep, self.span = rep, (S, a, b)
        L = 50
        r = rng.randint(FIRST_NORMAL, vocab, size=(16, L))
        self.ind = torch.from_numpy(np.concatenate((np.full((16, 1), bos), r, r), axis=1))
        self.ind_L = L
        self.sub_L = 30  # the same probe on the training alphabet of the moment (as long as its runs)
        self.sub_u = rng.rand(16, self.sub_L)
        self.bos = bos

    @staticmethod
    def _induction(model, seq, L):
        model(seq, keep_attn=True)
        A = model.attn_maps()
        d = torch.arange(L + 1, 2 * L + 1)
        return A[:, :, :, d, d - L + 1].mean(dim=(1, 3))

    @torch.no_grad()
    def alphabet_induction(self, model, hi):
        """The best induction score on random ids from [FIRST_NORMAL, hi), repeated once."""
        was = model.training
        model.eval()
        r = torch.from_numpy(FIRST_NORMAL + (self.sub_u * (hi - FIRST_NORMAL)).astype(np.int64))
        seq = torch.cat((torch.full((16, 1), self.bos, dtype=torch.int64), r, r), dim=1)
        v = self._induction(model, seq, self.sub_L).max().item()
        model.train(was)
        return v

    @torch.no_grad()
    def run(self, model, alphabet_hi=None):
        model.eval()
        out = {}
        x, y = self.text[:, :-1], self.text[:, 1:]
        logits = model(x, keep_attn=True)
        out["held_loss"] = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1)).item()
        A = model.attn_maps()  # (L, B, H, T, T)
        T = A.shape[-1]
        i = torch.arange(1, T)
        prev = A[:, :, :, i, i - 1].mean(dim=(1, 3))  # (L, H)
        x, y = self.rep[:, :-1], self.rep[:, 1:]
        lr = F.cross_entropy(model(x).transpose(1, 2), y, reduction="none")  # (B, T)
        # targets y[t] = rep[t+1]: the copies' tokens after their first, predicted at t = a..a+S-2
        S, a, b = self.span
        out["rep_first"] = lr[:, a:a + S - 1].mean().item()
        out["rep_second"] = lr[:, b:b + S - 1].mean().item()
        L = self.ind_L
        ind = self._induction(model, self.ind, L)
        if alphabet_hi:
            out["ind_alphabet"] = self.alphabet_induction(model, alphabet_hi)
        out["prev"] = prev.tolist()
        out["ind"] = ind.tolist()
        out["prev_max"] = prev.max().item()
        out["ind_max"] = ind.max().item()
        model.train()
        return out


@torch.no_grad()
def bits_per_byte(model, held_ids, held_chapters, bos, ctx):
    """Held-out NLL of every token of every held-out chapter (chunks of ctx-1 after a BOS)."""
    model.eval()
    nll, ntok = 0.0, 0
    for ids in held_ids:
        for c in range(0, len(ids), ctx - 1):
            seq = torch.from_numpy(np.concatenate(([bos], ids[c:c + ctx - 1]))[None, :])
            logits = model(seq[:, :-1])
            nll += F.cross_entropy(logits[0], seq[0, 1:], reduction="sum").item()
            ntok += seq.shape[1] - 1
    nbytes = sum(len(t.encode("utf-8")) for _, t in held_chapters)
    model.train()
    return nll / ntok, nll / math.log(2) / nbytes, ntok, nbytes


def syn_share(step, total, start, end):
    """Share of random-repeat blocks: `start` for the first 30 % of steps, then linear to `end` at 60 %."""
    f = step / max(1, total)
    if f < 0.3:
        return start
    if f < 0.6:
        return start + (end - start) * (f - 0.3) / 0.3
    return end


def copy_vocab(step, start, widen_at, every, full):
    """How many distinct ids the random runs draw from at a step: `start` until `widen_at`, then
    doubled every `every` steps up to the whole vocabulary. The copying circuit forms within a
    few hundred steps on a small alphabet (a probe: 64 ids, pure copy data, phase change at step
    150-175) but not on the whole vocabulary; widening it afterwards carries it over."""
    if start <= 0 or step < widen_at:
        return full if start <= 0 else min(full, start)
    return min(full, start << (1 + (step - widen_at) // max(1, every)))


def lr_at(step, total, peak, warmup):
    if step < warmup:
        return peak * (step + 1) / warmup
    f = (step - warmup) / max(1, total - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * f)))


# ---------------------------------------------------------------- outputs

@torch.no_grad()
def generate(model, sp, prompt, n, temp=0.0, gen=None):
    ids = [sp.bos_id()] + sp.encode(prompt)
    model.eval()
    for _ in range(n):
        logits = model(torch.tensor([ids[-model.cfg.ctx:]]))[0, -1]
        if temp <= 0:
            nxt = int(logits.argmax())
        else:
            nxt = int(torch.multinomial((logits / temp).softmax(-1), 1, generator=gen))
        ids.append(nxt)
    model.train()
    return sp.decode(ids[1:])[len(prompt):] if sp.decode(ids[1:]).startswith(prompt) else sp.decode(ids[1:])


@torch.no_grad()
def golden_case(model, sp, prompt, n_steps):
    """The shared/golden JSON shape: teacher-forced greedy steps with the top-8 log-probabilities."""
    ids = [sp.bos_id()] + sp.encode(prompt)
    case = {"prompt": prompt, "prompt_tokens": list(ids), "tokens": [], "steps": []}
    model.eval()
    for _ in range(n_steps):
        lp = model(torch.tensor([ids]))[0, -1].double().log_softmax(-1)
        top = torch.topk(lp, 8)
        nxt = int(top.indices[0])
        case["steps"].append({"id": nxt, "logprob": float(top.values[0]),
                              "top": [[int(i), float(v)] for v, i in zip(top.values, top.indices)]})
        case["tokens"].append(nxt)
        ids.append(nxt)
    model.train()
    return case


def round_to_f16(model):
    """Weights as the GGUF stores them (matrices F16, norms F32), so goldens describe the file."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim == 2:
                p.copy_(p.half().float())


def write_outputs(args, model, data, log, info):
    sp, held, held_ids, chapters = data.sp, data.held, data.held_ids, data.chapters
    os.makedirs(args.out, exist_ok=True)
    round_to_f16(model)
    ho_loss, bpb, ntok, nbytes = bits_per_byte(model, held_ids, held, sp.bos_id(), model.cfg.ctx)
    info.update(held_out_loss=ho_loss, bits_per_byte=bpb, held_out_tokens=ntok, held_out_bytes=nbytes,
                bytes_per_token=nbytes / ntok)
    print("held-out (F16 weights): loss %.4f nats/token, %.4f bits/byte over %d tokens, %d bytes"
          % (ho_loss, bpb, ntok, nbytes), flush=True)
    gguf_write.write(os.path.join(args.out, "kjv.gguf"), model, sp, "kjv-llama-%dM" % round(n_params(model) / 1e6))
    # goldens: log-probabilities on held-out prompts, SentencePiece's own tokenization of held-out text
    gdir = args.golden
    os.makedirs(gdir, exist_ok=True)
    prompts = [t[:120].rsplit(" ", 1)[0] for _, t in held[:3]] + ["And God said"]
    gold = {"model": "models/kjv.gguf", "tolerance_f16_file": 1e-3,
            "cases": [golden_case(model, sp, p, 16) for p in prompts]}
    json.dump(gold, open(os.path.join(gdir, "kjv.json"), "w"), indent=1)
    texts = [t for _, t in held[3:15]] + ["  two  spaces, UTF-8 caf\u00e9 \u00e6 \u2014 and 1234567890!", "Selah."]
    with open(os.path.join(gdir, "kjv-tok.inp"), "w") as f:
        for t in texts:
            f.write(t + "\n__ggml_vocab_test__\n")
    with open(os.path.join(gdir, "kjv-tok.out"), "w") as f:
        for t in texts:
            f.write(" ".join(map(str, sp.encode(t))) + "\n")
    words = sorted(corpus.corpus_words(chapters))
    with open(os.path.join(gdir, "kjv-words.txt"), "w") as f:
        f.write("\n".join(words) + "\n")
    # samples for the model card
    gen = torch.Generator().manual_seed(args.seed)
    info["samples"] = [{"prompt": p, "greedy": generate(model, sp, p, 48),
                        "sampled_t0.8": generate(model, sp, p, 48, 0.8, gen)}
                       for p in ["And God said", "In the beginning", "Jesus answered and said unto them"]]
    json.dump({"info": info, "log": log}, open(os.path.join(args.out, "kjv-train-log.json"), "w"), indent=1)
    plot(log, os.path.join(args.out, "kjv-loss.png"))


def plot(log, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib missing: no loss plot", flush=True)
        return
    tr = [e for e in log if e["kind"] == "train"]
    ev = [e for e in log if e["kind"] == "eval"]
    fig, ax = plt.subplots(1, 2, figsize=(10, 3.6))
    ax[0].plot([e["tokens"] / 1e6 for e in tr], [e["loss"] for e in tr], lw=0.6, label="train (mixed)")
    ax[0].plot([e["tokens"] / 1e6 for e in ev], [e["held_loss"] for e in ev], "o-", ms=3, label="held-out text")
    ax[0].plot([e["tokens"] / 1e6 for e in ev], [e["rep_first"] for e in ev], ":", lw=1,
               label="held-out, 1st copy of a span")
    ax[0].plot([e["tokens"] / 1e6 for e in ev], [e["rep_second"] for e in ev], "s-", ms=3,
               label="held-out, 2nd copy of a span")
    ax[0].set_xlabel("tokens seen (M)"); ax[0].set_ylabel("loss (nats/token)"); ax[0].legend(); ax[0].grid(alpha=.3)
    ax[1].plot([e["tokens"] / 1e6 for e in ev], [e["prev_max"] for e in ev], "o-", ms=3, label="best previous-token")
    ax[1].plot([e["tokens"] / 1e6 for e in ev], [e["ind_max"] for e in ev], "s-", ms=3, label="best induction")
    ax[1].set_xlabel("tokens seen (M)"); ax[1].set_ylabel("head score"); ax[1].set_ylim(0, 1); ax[1].legend()
    ax[1].grid(alpha=.3)
    fig.tight_layout()
    fig.savefig(path, dpi=90)


# ---------------------------------------------------------------- main

class Data:
    """The corpus split, the tokenizer and the token streams of one run."""

    def __init__(self, args):
        t0 = time.time()
        self.chapters = corpus.read_chapters()
        self.train_ch, self.held = corpus.split(self.chapters)
        os.makedirs(args.work, exist_ok=True)
        self.sp = (spm.SentencePieceProcessor(model_file=args.tokenizer) if args.tokenizer
                   else corpus.train_tokenizer(self.train_ch, args.work))
        self.held_ids = encode_chapters(self.sp, self.held)
        self.stream = np.concatenate(encode_chapters(self.sp, self.train_ch))
        print("corpus: %d chapters (%d held out), %d training tokens, tokenizer %.1fs"
              % (len(self.chapters), len(self.held), len(self.stream), time.time() - t0), flush=True)


def train_loop(args, model, data, prior, rng):
    """Runs the optimisation; returns (log, steps, tokens, seconds) of this phase."""
    cfg = model.cfg
    decay = [p for p in model.parameters() if p.ndim == 2]
    other = [p for p in model.parameters() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": other, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8)
    sampler = Sampler(data.stream, data.sp.bos_id(), cfg.vocab, cfg.ctx, rng)
    probe = Probe(data.held_ids, data.sp.bos_id(), cfg.vocab, cfg.ctx, args.seed)
    p_steps, p_tokens = (prior["info"]["steps"], prior["info"]["tokens_seen"]) if prior else (0, 0)
    phase = 2 if prior else 1
    log, tokens, t_loop, step = (list(prior["log"]) if prior else []), 0, time.time(), 0
    total = args.steps or 10 ** 9
    pure_end = args.copy_pure  # the all-copying phase ends when the circuit is there (or at this step)
    copy_rng = np.random.RandomState(args.seed)
    while step < total:
        syn = syn_share(step, total, args.syn_start, args.syn_end) if args.steps or step >= 20 else args.syn_start
        # constant after the warm-up while only copying; the cosine runs over the text steps
        lr = lr_at(step, total, args.lr, args.warmup) if step >= pure_end else args.lr * min(1.0, (step + 1) / args.warmup)
        for g in opt.param_groups:
            g["lr"] = lr
        copy = 1.0 if step < pure_end else args.copy_share if step < args.copy_frac * total else 0.0
        sampler.rand_hi = FIRST_NORMAL + copy_vocab(step, args.copy_vocab, pure_end + args.widen_at,
                                                    args.widen_every, cfg.vocab - FIRST_NORMAL)
        if step < pure_end:
            x, y, m = sampler.copy_batch(args.batch, copy_rng, args.copy_vocab)
        else:
            x, y, m = sampler.batch(args.batch, syn, args.nat_rep, copy)
        loss = masked_ce(model(x), y, m)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        tokens += x.numel()
        el = time.time() - t_loop
        if not args.steps and step == 20:  # size the run from the measured step time
            total = max(40, int(args.minutes * 60 / (el / 20) * 0.92))
            print("sizing: %.2f s/step -> %d steps for %.0f min (reproduce with --steps %d)"
                  % (el / 20, total, args.minutes, total), flush=True)
        if step % 10 == 0 or step == total or step <= 5:
            print("step %5d/%d  loss %.4f  lr %.2e  syn %.2f copy %.2f ids %4d  %6.0f tok/s  %5.1fM tok  ETA %4.1f min"
                  % (step, total, loss.item(), lr, syn, copy, sampler.rand_hi - FIRST_NORMAL, tokens / el, tokens / 1e6,
                     (total - step) * el / step / 60), flush=True)
            log.append({"kind": "train", "step": p_steps + step, "tokens": p_tokens + tokens, "loss": loss.item(),
                        "time": el, "phase": phase})
        if not args.steps and el > args.max_over * args.minutes * 60 and step < total:
            print("over the time budget: stopping at step %d of %d" % (step, total), flush=True)
            total = step
        if step < pure_end and step % 25 == 0:
            ia = probe.alphabet_induction(model, sampler.rand_hi)
            print("copy phase %d: induction %.3f on the %d-id alphabet" % (step, ia, sampler.rand_hi - FIRST_NORMAL),
                  flush=True)
            if ia >= args.copy_formed:
                print("the copying circuit formed at step %d: text from here" % step, flush=True)
                pure_end = step
                log.append({"kind": "formed", "step": p_steps + step, "induction_alphabet": ia})
        if step % args.eval_every == 0 or step == total:
            r = probe.run(model, sampler.rand_hi)
            r.update(kind="eval", step=p_steps + step, tokens=p_tokens + tokens, time=time.time() - t_loop, phase=phase)
            log.append(r)
            print("eval  %5d  held-out %.4f  span 1st %.3f 2nd %.3f  prev-token %.3f  induction %.3f (%.3f on the %d-id "
                  "alphabet)" % (step, r["held_loss"], r["rep_first"], r["rep_second"], r["prev_max"], r["ind_max"],
                                 r.get("ind_alphabet", 0), sampler.rand_hi - FIRST_NORMAL), flush=True)
            if args.stop_induction and r["ind_max"] >= args.stop_induction and r["prev_max"] >= 0.5 and step < total:
                print("the copying circuit is there: stopping at step %d" % step, flush=True)
                total = step
    return log, step, tokens, time.time() - t_loop


def run_info(args, model, data, prior, step, tokens, wall):
    info = {"steps": step, "tokens_seen": tokens, "train_seconds": wall, "tokens_per_second": tokens / wall,
            "params": n_params(model), "config": model.cfg.__dict__, "args": vars(args),
            "train_tokens": int(len(data.stream)), "held_out_chapters": [r for r, _ in data.held]}
    if prior:  # totals over both phases; each phase's own numbers kept
        pi = prior["info"]
        info.update(phase1={k: pi[k] for k in ("steps", "tokens_seen", "train_seconds", "tokens_per_second", "args")},
                    phase2={"steps": step, "tokens_seen": tokens, "train_seconds": wall, "args": vars(args)},
                    steps=pi["steps"] + step, tokens_seen=pi["tokens_seen"] + tokens,
                    train_seconds=pi["train_seconds"] + wall,
                    tokens_per_second=(pi["tokens_seen"] + tokens) / (pi["train_seconds"] + wall),
                    args=pi["args"])
    return info


def main():
    args = parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = np.random.RandomState(args.seed)
    t0 = time.time()
    data = Data(args)
    cfg = Config(vocab=data.sp.get_piece_size(), dim=args.dim, n_layer=args.layers, n_head=args.heads,
                 n_head_kv=args.kv_heads, ffn=args.ffn, ctx=args.ctx, rope_base=args.rope_base)
    model = Llama(cfg)
    print("model: %d parameters, %s" % (n_params(model), cfg), flush=True)
    if args.export_only:
        ck = torch.load(os.path.join(args.work, "kjv.pt"))
        model.load_state_dict(ck["model"])
        write_outputs(args, model, data, ck["log"], ck["info"])
        return
    prior = torch.load(args.init) if args.init else None
    if prior:
        model.load_state_dict(prior["model"])
    log, step, tokens, wall = train_loop(args, model, data, prior, rng)
    info = run_info(args, model, data, prior, step, tokens, wall)
    print("trained %d steps, %d tokens in %.1f min (%.0f tok/s)" % (step, tokens, wall / 60, tokens / wall),
          flush=True)
    torch.save({"model": model.state_dict(), "log": log, "info": info}, os.path.join(args.work, "kjv.pt"))
    if not args.no_export:
        write_outputs(args, model, data, log, info)
    print("total %.1f min" % ((time.time() - t0) / 60), flush=True)


if __name__ == "__main__":
    main()
