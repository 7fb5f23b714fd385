#!/usr/bin/python3
"""attnd's Jinja engine against Python's jinja2 as Hugging Face transformers configures it
($SHARED/tools/render_chat.py): every chat template of $SHARED/templates and every
tokenizer.chat_template[.NAME] carried by a GGUF file of $SHARED/vocab and $SHARED/models is
rendered for every case of tests/golden/chat_cases.json by both, and each case must be
byte-identical. A case the reference refuses ({"error": ...}) must be refused by attnd too; when
the refusal is the template's own raise_exception ("TemplateError: MSG"), the message must be
MSG exactly.
Then the same for tests/golden/jinja/*.jinja: small templates of our own that exercise what the
engine must get right beyond those templates (Python's number, string and repr semantics, filters
and tests, scoping, whitespace control, raw blocks, unknown names, refusals)."""
import glob
import json
import os
import struct
import subprocess
import sys
import tempfile

shared = os.environ.get("SHARED", "../shared")
attnd = os.environ.get("ATTND", "build/release/attnd")
here = os.path.dirname(os.path.abspath(__file__))
cases = os.path.join(here, "..", "golden", "chat_cases.json")
render_chat = os.path.join(shared, "tools", "render_chat.py")

_SCALAR = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


def _skip(f, vtype):
    if vtype in _SCALAR:
        f.read(_SCALAR[vtype])
    elif vtype == 8:
        (n,) = struct.unpack("<Q", f.read(8))
        f.seek(n, 1)
    elif vtype == 9:
        etype, n = struct.unpack("<IQ", f.read(12))
        if etype in _SCALAR:
            f.seek(_SCALAR[etype] * n, 1)
        else:
            for _ in range(n):
                _skip(f, etype)
    else:
        raise ValueError(f"unknown GGUF value type {vtype}")


def gguf_templates(path):
    """{variant or None: template text} of the file's tokenizer.chat_template* strings."""
    out = {}
    with open(path, "rb") as f:
        magic, version, _, n_kv = struct.unpack("<4sIQQ", f.read(24))
        if magic != b"GGUF" or version < 2:
            return out
        for _ in range(n_kv):
            (klen,) = struct.unpack("<Q", f.read(8))
            key = f.read(klen).decode("utf-8", "replace")
            (vtype,) = struct.unpack("<I", f.read(4))
            if key.startswith("tokenizer.chat_template") and vtype == 8:
                (n,) = struct.unpack("<Q", f.read(8))
                name = key[len("tokenizer.chat_template."):] if key != "tokenizer.chat_template" else None
                out[name] = f.read(n).decode("utf-8")
            else:
                _skip(f, vtype)
    return out


def run(cmd):
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, encoding="utf-8")
    except OSError as e:
        raise RuntimeError(f"{cmd[0]}: {e}") from e
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {r.returncode}: {r.stderr[-800:]}")
    return json.loads(r.stdout)


def same(ref, ours):
    if "prompt" in ref:
        return ours.get("prompt") == ref["prompt"]
    if "error" not in ours:
        return False
    msg = ref["error"]
    return not msg.startswith("TemplateError: ") or ours["error"] == msg[len("TemplateError: "):]


def compare(label, ref_cmd, our_cmd):
    """Returns (cases compared, failures)."""
    try:
        ref, ours = run(ref_cmd), run(our_cmd)
    except (RuntimeError, ValueError) as e:
        print(f"FAIL {label}: {e}")
        return 0, 1
    if [c["name"] for c in ref] != [c["name"] for c in ours]:
        print(f"FAIL {label}: the case lists differ")
        return 0, 1
    bad = 0
    for r, o in zip(ref, ours):
        if not same(r, o):
            bad += 1
            print(f"FAIL {label} / {r['name']}:\n  ref  {json.dumps(r.get('prompt', r.get('error')))[:1500]}\n"
                  f"  ours {json.dumps(o.get('prompt', o.get('error')))[:1500]}")
    return len(ref), bad


def main():
    templates = sorted(glob.glob(os.path.join(shared, "templates", "*.jinja")))
    if not templates or not os.path.exists(render_chat):
        print(f"SKIP: no templates or render_chat.py under {shared}")
        return 77
    total = failures = refusals = 0
    for t in templates:
        n, bad = compare(os.path.basename(t), ["/usr/bin/python3", render_chat, t, cases],
                         [attnd, "template", "--file", t, "--cases", cases])
        total += n
        failures += bad
        refusals += sum(1 for c in run(["/usr/bin/python3", render_chat, t, cases]) if "error" in c) if n else 0
    if not total:
        print(f"FAIL: nothing compared (is {attnd} built?)")
        return 1
    probes = sorted(glob.glob(os.path.join(here, "..", "golden", "jinja", "*.jinja")))
    for t in probes:
        n, bad = compare("jinja/" + os.path.basename(t), ["/usr/bin/python3", render_chat, t, cases],
                         [attnd, "template", "--file", t, "--cases", cases])
        total += n
        failures += bad
    ggufs = sorted(glob.glob(os.path.join(shared, "vocab", "*.gguf")) +
                   glob.glob(os.path.join(shared, "models", "**", "*.gguf"), recursive=True))
    n_gguf = 0
    with tempfile.TemporaryDirectory() as tmp:
        for g in ggufs:
            for variant, text in gguf_templates(g).items():
                path = os.path.join(tmp, "t.jinja")
                with open(path, "w", encoding="utf-8") as f:
                    f.write(text)
                cmd = [attnd, "template", "--gguf", g, "--cases", cases] + (["--variant", variant] if variant else [])
                n, bad = compare(f"{os.path.basename(g)}:{variant or 'default'}",
                                 ["/usr/bin/python3", render_chat, path, cases], cmd)
                n_gguf += 1
                total += n
                failures += bad
    print(f"chat templates: {len(templates)} files + {n_gguf} GGUF templates + {len(probes)} probes, {total} cases compared "
          f"({refusals} refusals among the files'), {total - failures} byte-identical, {failures} different")
    return 1 if failures or not total else 0


if __name__ == "__main__":
    sys.exit(main())
