"""KJV corpus: extraction from the bible-kjv package, chapter split, SentencePiece vocabulary.

The corpus is the King James Version (public domain; Debian's bible-kjv-text).  Each chapter is
one document: its verses joined by single spaces, without verse numbers.  Every 50th chapter
(counting from the 25th, so the held-out set is spread over the books) is held out: the
tokenizer and the model never see it.
"""
import os
import re
import subprocess

import sentencepiece as spm

VERSE_RE = re.compile(r"^([1-3]?[A-Za-z]+)(\d+):(\d+) (.*)$")
HELD_OUT_EVERY = 50
HELD_OUT_PHASE = 25


def read_chapters():
    """Returns [(ref, text)] for all 1,189 chapters, in canonical order (ref like 'Ge1')."""
    out = subprocess.run(["bible", "-f", "Gen1:1-Rev22:21"], check=True, capture_output=True,
                         text=True).stdout
    chapters, cur, verses = [], None, []
    for line in out.splitlines():
        m = VERSE_RE.match(line)
        if not m:
            raise ValueError("unexpected line from bible: %r" % line[:80])
        ref = m.group(1) + m.group(2)
        if ref != cur:
            if verses:
                chapters.append((cur, " ".join(verses)))
            cur, verses = ref, []
        verses.append(m.group(4).strip())
    if verses:
        chapters.append((cur, " ".join(verses)))
    return chapters


def split(chapters):
    """(train, held_out): lists of (ref, text); held-out = every 50th chapter."""
    train, held = [], []
    for i, c in enumerate(chapters):
        (held if i % HELD_OUT_EVERY == HELD_OUT_PHASE else train).append(c)
    return train, held


def train_tokenizer(train_chapters, out_dir, vocab_size=2048):
    """Trains a BPE SentencePiece model (byte fallback, identity normalisation so that attnd's
    llama-SPM tokenizer sees the same text) on the training chapters' verses."""
    os.makedirs(out_dir, exist_ok=True)
    txt = os.path.join(out_dir, "spm_input.txt")
    with open(txt, "w") as f:
        for _, text in train_chapters:
            f.write(text + "\n")
    prefix = os.path.join(out_dir, "kjv_spm")
    spm.SentencePieceTrainer.train(
        input=txt, model_prefix=prefix, model_type="bpe", vocab_size=vocab_size,
        byte_fallback=True, character_coverage=1.0, normalization_rule_name="identity",
        remove_extra_whitespaces=False, split_digits=True, num_threads=1,
        max_sentence_length=1 << 16, bos_id=1, eos_id=2, unk_id=0, pad_id=-1,
        minloglevel=2)
    return spm.SentencePieceProcessor(model_file=prefix + ".model")


def corpus_words(chapters):
    """The set of words (letters and apostrophes) of the given chapters, for the word-list file."""
    words = set()
    for _, text in chapters:
        words.update(w.lower() for w in re.findall(r"[A-Za-z']+", text))
    return words
