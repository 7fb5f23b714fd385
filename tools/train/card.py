#!/usr/bin/python3
"""Writes the model card (OUT/README.md) from the training log that train.py leaves
(OUT/kjv-train-log.json) and, if given, the census JSON of `attnd heads --json`.

    /usr/bin/python3 tools/train/card.py [--out models] [--census heads.json]
"""
import argparse
import json
import os


def census_table(c):
    rows = ["| layer | " + " | ".join("head %d" % h for h in range(c["n_head"])) + " |",
            "|---" * (c["n_head"] + 1) + "|"]
    for l in range(c["n_layer"]):
        cells = []
        for h in range(c["n_head"]):
            e = c["heads"][l * c["n_head"] + h]
            key = {"induction": "induction", "previous-token": "previous_token", "first-token": "first_token",
                   "self": "self"}.get(e["role"])
            cells.append("%s %.2f" % (e["role"], e[key]) if key else "diffuse (H %.1f)" % e["entropy"])
        rows.append("| %d | %s |" % (l, " | ".join(cells)))
    return "\n".join(rows)


def intro(info, args):
    """The card's title, what the model is, and its corpus."""
    return ["# kjv.gguf: the default model\n",
            "A small llama-architecture model trained from scratch by this project (`make model`, recipe in "
            "`tools/train/`) so that `make run` serves a model that writes English and whose attention heads "
            "do recognisable things. It is a toy: %.1f M parameters, trained for %.0f minutes on %d CPU thread(s)."
            % (info["params"] / 1e6, info["train_seconds"] / 60, args["threads"]),
            "\n## Corpus and licence\n",
            "The King James Version of the Bible as Debian's `bible-kjv-text` ships it (`bible -f "
            "Gen1:1-Rev22:21`: 31,102 verses, 4.4 MB). The KJV text is in the public domain (outside the UK, "
            "where the Crown's letters patent apply). Each chapter is one document, its verses joined by spaces "
            "without verse numbers. Every 50th chapter (from the 26th: %s) is held out: neither the "
            "tokenizer nor the model saw it." % ", ".join(info["held_out_chapters"])]


def synthetic(info, log, cfg, args):
    """The paragraph on the synthetic copying data mixed into training."""
    n_copy = int(args.get("copy_frac", 0) * info.get("phase1", info)["steps"])
    syn = []
    if n_copy and args.get("copy_share"):
        pure = args.get("copy_pure", 0)
        formed = next((e["step"] for e in log if e["kind"] == "formed"), None)
        lead = ""
        if pure:
            lead = ("the run starts on such copying blocks only (no text) until the induction score on their "
                    "alphabet reaches %g (at most %d steps; %s); then "
                    % (args.get("copy_formed", 0.5), pure, "here step %d" % formed if formed else "not reached"))
        syn.append("%sfor the first %d steps (%.0f %% of them), %.0f %% of the blocks are one run of 6-%d uniformly "
                   "random tokens repeated from just after BOS to the end of the block (no loss on the first copy, "
                   "which cannot be predicted)"
                   % (lead, n_copy, 100 * args["copy_frac"], 100 * args["copy_share"], min(30, cfg["ctx"] // 2)))
    lead = "of the other blocks, %.0f %% hold" if syn else "%.0f %% of the blocks hold"
    syn.append((lead + " a run of 8-%d random tokens repeated 2-4 times at a random place inside natural text "
                "(first copy unscored) for the first 30 %% of steps, falling linearly to %.0f %% at 60 %% and "
                "staying there") % (100 * args["syn_start"], min(48, cfg["ctx"] // 3), 100 * args["syn_end"]))
    syn.append("another %.0f %% are natural text with one of their own spans (8-%d tokens) copied further on"
               % (100 * args["nat_rep"], min(64, cfg["ctx"] // 4)))
    if args.get("copy_vocab"):
        syn.append("the random tokens of both kinds come from a small alphabet at first: %d ids (the first "
                   "learned pieces) until step %d, then twice as many every %d steps until the whole vocabulary "
                   "is in use (the copying circuit forms within a few hundred steps on a small alphabet and "
                   "carries over as it widens; on the whole vocabulary from the start it did not form in any "
                   "run, see below)" % (args["copy_vocab"], args["widen_at"], args["widen_every"]))
    return "\n**Synthetic data mixed in** (to make the copying circuit form within the budget): " + "; ".join(syn) + "."


def vocab_and_shape(info, cfg, size):
    """The vocabulary and the model's shape (size: the file's bytes)."""
    return ["\n## Vocabulary\n",
            "SentencePiece BPE, %d pieces (3 control, 256 byte-fallback pieces `<0x00>`..`<0xFF>`, the rest "
            "learned), identity normalisation, digits split; stored as the GGUF `llama` SPM vocabulary "
            "(scores, token types, BOS 1, EOS 2, UNK 0). attnd's tokenization of held-out chapters equals "
            "SentencePiece's own (tests/golden/kjv-tok.*). %.2f bytes per token on the held-out text."
            % (cfg["vocab"], info["bytes_per_token"]),
            "\n## Shape\n",
            "| | |\n|---|---|\n| architecture | llama: RMSNorm, RoPE (adjacent pairs, base %g), SwiGLU, tied "
            "embeddings |\n| layers | %d |\n| width | %d |\n| query heads / KV heads | %d / %d (head size %d) |\n"
            "| feed-forward | %d |\n| context | %d |\n| parameters | %d |\n| file | F16 matrices, F32 norms, "
            "%.1f MB |" % (cfg["rope_base"], cfg["n_layer"], cfg["dim"], cfg["n_head"], cfg["n_head_kv"],
                           cfg["dim"] // cfg["n_head"], cfg["ffn"], cfg["ctx"], info["params"], size / 1e6)]


def training(info, cfg, args):
    """The optimiser, the budget and, for a two-phase run, the copying phase."""
    s = ["\n## Training\n",
         "AdamW (β = 0.9, 0.95, weight decay 0.1 on matrices), peak learning rate %g after %d warm-up "
         "steps, cosine decay to a tenth, gradient clipping at 1, batch %d x %d tokens, seed %d, %d torch "
         "thread(s) and as many OpenBLAS threads. %d steps, %.2f M tokens seen (%.1f passes over the %.2f M "
         "training tokens, synthetic ones included), %.1f minutes of training loop, %.0f tokens/s. Reproduce "
         "with `make model TRAIN_ARGS='--steps %d'` (deterministic for a seed, step count and thread count)."
         % (args["lr"], args["warmup"], args["batch"], cfg["ctx"], args["seed"], args["threads"], info["steps"],
            info["tokens_seen"] / 1e6, info["tokens_seen"] / info["train_tokens"], info["train_tokens"] / 1e6,
            info["train_seconds"] / 60, info["tokens_per_second"], info.get("phase1", info)["steps"])]
    if "phase2" in info:
        p1, p2 = info["phase1"], info["phase2"]
        a2 = p2["args"]
        s.append("\nTwo phases: the run above (%d steps, %.2f M tokens, %.1f min) and then a copying phase from its "
                 "weights: %d steps of batch %d x %d, peak learning rate %g (%d warm-up steps), random-repeat "
                 "share %.0f %% throughout, %.2f M tokens, %.1f min%s. `make model` runs both."
                 % (p1["steps"], p1["tokens_seen"] / 1e6, p1["train_seconds"] / 60, p2["steps"], a2["batch"],
                    cfg["ctx"], a2["lr"], a2["warmup"], 100 * a2["syn_start"], p2["tokens_seen"] / 1e6,
                    p2["train_seconds"] / 60, ", stopped once an eval found induction >= %g and previous-token >= "
                    "0.5" % a2["stop_induction"] if a2.get("stop_induction") else ""))
    return s


def results(info, log):
    """The loss curve, the held-out results table and what bits per byte means."""
    ev = [e for e in log if e["kind"] == "eval"]
    last = ev[-1]
    first_ind = next((e for e in ev if e["ind_max"] >= 0.3), None)
    return ["\n![loss curve and head scores](kjv-loss.png)\n",
            "## Results\n",
            "| | |\n|---|---|\n| held-out loss | %.3f nats/token |\n| held-out bits per byte | %.3f |\n"
            "| loss on a repeated held-out span, first / second copy | %.2f / %.2f nats |\n"
            "| best previous-token score (training probe) | %.2f |\n| best induction score (training probe) | %.2f |\n"
            "| induction score first >= 0.3 | %s |"
            % (info["held_out_loss"], info["bits_per_byte"], last["rep_first"], last["rep_second"], last["prev_max"],
               last["ind_max"], "step %d (%.2f M tokens)" % (first_ind["step"], first_ind["tokens"] / 1e6)
               if first_ind else "never"),
            "\nBits per byte: the summed held-out loss in bits over the UTF-8 bytes of the held-out chapters "
            "(%d tokens, %d bytes), computed on the F16-rounded weights the file holds." %
            (info["held_out_tokens"], info["held_out_bytes"])]


def census_section(path):
    """The head census of `attnd heads --json` (the file at path)."""
    c = json.load(open(path))
    bi, bp = c["best"]["induction"], c["best"]["previous_token"]
    return ["\n### Head census (`attnd heads -m models/kjv.gguf`)\n",
            census_table(c),
            "\nStrongest previous-token head L%d H%d (%.3f), strongest induction head L%d H%d (%.3f)."
            % (bp["layer"], bp["head"], bp["score"], bi["layer"], bi["head"], bi["score"])]


def samples(info, args):
    """The greedy and sampled continuations train.py logged."""
    s = ["\n## Samples\n",
         "48 tokens each, from PyTorch; greedy, then sampled at temperature 0.8 (seed %d).\n" % args["seed"]]
    for smp in info["samples"]:
        s.append("**%s**\n\n- greedy: %s\n- sampled: %s\n" % (smp["prompt"], smp["greedy"].strip().replace("\n", " "),
                                                            smp["sampled_t0.8"].strip().replace("\n", " ")))
    return s


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="models")
    ap.add_argument("--census", default=None)
    ap.add_argument("--notes", default=None, help="a Markdown file appended to the card")
    a = ap.parse_args()
    d = json.load(open(os.path.join(a.out, "kjv-train-log.json")))
    info, log = d["info"], d["log"]
    cfg, args = info["config"], info["args"]
    size = os.path.getsize(os.path.join(a.out, "kjv.gguf"))
    s = intro(info, args)
    s.append(synthetic(info, log, cfg, args))
    s += vocab_and_shape(info, cfg, size)
    s += training(info, cfg, args)
    s += results(info, log)
    if a.census:
        s += census_section(a.census)
    s += samples(info, args)
    if a.notes:
        s.append(open(a.notes).read())
    open(os.path.join(a.out, "README.md"), "w").write("\n".join(s) + "\n")


if __name__ == "__main__":
    main()
