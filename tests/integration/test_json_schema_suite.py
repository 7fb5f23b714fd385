#!/usr/bin/python3
"""The JSON-schema compiler against the JSON Schema Test Suite (draft 2020-12, as Debian ships it
in libtest-json-schema-acceptance-perl): for every schema of the suite, `attnd grammar --schema`
either refuses it (a keyword or combination it cannot honour: counted per reason) or compiles it,
and then for every test instance the grammar must accept the instance's JSON text exactly when the
suite marks the instance valid.

The instance text is json.dumps(ensure_ascii=False), compact and with the default ", " / ": "
separators; JSON objects are unordered while a grammar generates one order of keys, so an
instance counts as accepted when some order of its keys is accepted. Cases the grammar form
cannot express are skipped with their reason and counted (see SKIPS). Any other disagreement
fails the test."""
import collections
import itertools
import json
import os
import subprocess
import sys
import tempfile

SUITE = os.environ.get("JSON_SCHEMA_SUITE",
                       "/usr/share/perl5/auto/share/dist/Test-JSON-Schema-Acceptance/tests/draft2020-12")
attnd = os.environ.get("ATTND", "build/release/attnd")
OPTIONAL = ["optional/format/date.json", "optional/format/time.json", "optional/format/date-time.json",
            "optional/format/uuid.json"]
MAX_VARIANTS = 720

try:
    import jsonschema
except ImportError:  # only the oneOf exclusivity check needs it
    jsonschema = None


def walk(x):
    yield x
    if isinstance(x, dict):
        for v in x.values():
            yield from walk(v)
    elif isinstance(x, list):
        for v in x:
            yield from walk(v)


def has_surrogate(x):
    return any(isinstance(v, str) and any(0xD800 <= ord(ch) <= 0xDFFF for ch in v) for v in walk(x)) or \
        any(isinstance(v, dict) and any(0xD800 <= ord(ch) <= 0xDFFF for k in v for ch in k) for v in walk(x))


def skip_reason(schema, data):
    """Why (schema, data) is outside what a grammar of this form can decide, or None."""
    text = json.dumps(schema)
    nums = [v for v in walk(data) if isinstance(v, (int, float)) and not isinstance(v, bool)]
    if has_surrogate(data):
        return "a lone surrogate cannot be written as UTF-8 text"
    if any(isinstance(v, float) and v == int(v) for v in nums if v == v and abs(v) != float("inf")) and \
            any(k in text for k in ('"integer"', '"const"', '"enum"')):
        return "1.0 equals 1 in JSON Schema; the grammar spells an integer one way"
    if any(len(str(abs(int(v)))) > 16 for v in nums if isinstance(v, int)) or \
            any(isinstance(v, float) and len(repr(v)) > 24 for v in nums):
        return "numbers over 16 digits are outside the number grammar"
    if '"time"' in text or '"date-time"' in text:
        if any(isinstance(v, str) and ":60" in v for v in walk(data)):
            return "leap seconds (23:59:60 UTC, offset arithmetic) are left out of the time grammar"
    if jsonschema and isinstance(schema, dict) and "oneOf" in schema:
        rest = {k: v for k, v in schema.items() if k != "oneOf"}
        try:
            hits = sum(jsonschema.Draft202012Validator(dict(rest, allOf=[b])).is_valid(data) for b in schema["oneOf"])
        except Exception:  # the validator's own bugs (unevaluated*): such schemas are refused anyway
            hits = 0
        if hits > 1:
            return "oneOf is compiled as anyOf: 'exactly one branch' is not expressible"
    return None


def variants(x):
    """x with its objects' keys in every order (bounded), as Python values."""
    if isinstance(x, dict):
        keys = list(x)
        per_value = [variants(x[k]) for k in keys]
        out = []
        for perm in itertools.permutations(range(len(keys))):
            for vals in itertools.product(*(per_value[i] for i in perm)):
                out.append({keys[i]: v for i, v in zip(perm, vals)})
                if len(out) > MAX_VARIANTS:
                    return out
        return out
    if isinstance(x, list):
        out = [[]]
        for v in x:
            out = [o + [w] for o in out for w in variants(v)][:MAX_VARIANTS + 1]
        return out
    return [x]


def texts(data):
    vs = variants(data)
    if len(vs) > MAX_VARIANTS:
        return None
    out = []
    for v in vs:
        out.append(json.dumps(v, ensure_ascii=False, separators=(",", ":")))
        out.append(json.dumps(v, ensure_ascii=False))
    return out


def run_group(schema, cases, tmp):
    """Returns ("refused", reason) or ("ok", [accepted per case])."""
    spath, cpath = os.path.join(tmp, "schema.json"), os.path.join(tmp, "cases.txt")
    with open(spath, "w") as f:
        json.dump(schema, f, ensure_ascii=False)
    lines, spans = [], []
    for c in cases:
        t = c["texts"]
        spans.append((len(lines), len(t)))
        lines += t
    with open(cpath, "w", encoding="utf-8") as f:
        f.write("".join(line + "\n" for line in lines))
    p = subprocess.run([attnd, "grammar", "--schema", spath, "--check-file", cpath], capture_output=True,
                       text=True, timeout=120)
    if p.returncode != 0:
        if "json schema:" in p.stderr:
            return "refused", p.stderr.strip().split("json schema: ", 1)[1].split(" (")[0]
        raise RuntimeError(f"attnd grammar failed: {p.stderr.strip()}")
    got = p.stdout.split()
    return "ok", [any(g == "1" for g in got[a:a + n]) for a, n in spans]


def suite_files():
    top = sorted(f for f in os.listdir(SUITE) if f.endswith(".json"))
    return top + OPTIONAL


def main():
    if not os.path.isdir(SUITE):
        print(f"JSON Schema Test Suite not found at {SUITE} (Debian: libtest-json-schema-acceptance-perl)")
        return 1
    counts = collections.Counter()
    skips, refusals, failures = collections.Counter(), collections.Counter(), []
    with tempfile.TemporaryDirectory() as tmp:
        for name in suite_files():
            with open(os.path.join(SUITE, name)) as f:
                groups = json.load(f)
            for g in groups:
                cases = []
                for t in g["tests"]:
                    why = skip_reason(g["schema"], t["data"])
                    tx = None if why else texts(t["data"])
                    if not why and tx is None:
                        why = "too many key orders to try"
                    if why:
                        skips[why] += 1
                        continue
                    cases.append(dict(t, texts=tx))
                kind, res = run_group(g["schema"], cases, tmp)
                counts["groups"] += 1
                if kind == "refused" and res.startswith("no JSON value satisfies"):
                    # an empty language is refused (a 400): right exactly when no instance is valid
                    counts["empty-language groups"] += 1
                    for c in cases:
                        counts["cases"] += 1
                        if not c["valid"]:
                            counts["passed"] += 1
                        else:
                            failures.append(f"{name}: {g['description']} / {c['description']}: refused as "
                                            f"admitting nothing, but the suite has it valid")
                    continue
                if kind == "refused":
                    refusals[res] += 1
                    counts["refused groups"] += 1
                    counts["cases in refused groups"] += len(cases)
                    continue
                counts["compiled groups"] += 1
                for c, acc in zip(cases, res):
                    counts["cases"] += 1
                    if acc == c["valid"]:
                        counts["passed"] += 1
                    else:
                        failures.append(f"{name}: {g['description']} / {c['description']}: valid={c['valid']} "
                                        f"accepted={acc}: {c['texts'][1]}")
    report(counts, skips, refusals, failures)
    return 1 if failures else 0


def report(counts, skips, refusals, failures):
    print(f"groups: {counts['groups']} ({counts['compiled groups']} compiled, {counts['empty-language groups']} "
          f"refused as admitting no value (their cases must all be invalid), {counts['refused groups']} refused "
          f"(their {counts['cases in refused groups']} cases not run))")
    print(f"cases checked: {counts['cases']}, passed {counts['passed']}, failed {len(failures)}")
    print(f"skipped as inexpressible: {sum(skips.values())}")
    for why, n in skips.most_common():
        print(f"  {n:4d}  {why}")
    print("refusals (by reason):")
    for why, n in refusals.most_common():
        print(f"  {n:4d}  {why}")
    for f in failures:
        print("FAIL " + f)


if __name__ == "__main__":
    sys.exit(main())
