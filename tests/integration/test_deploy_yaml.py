#!/usr/bin/python3
"""Deployment files: every YAML under deploy/ parses, and the key fields agree with the daemon and
with `make image` — the Kubernetes Deployment probes /health on port 8080 (startup, readiness,
liveness) as a non-root user with the models PVC mounted at /models, sets CPU and memory requests
and limits, and runs the image `make image` tags; the Service and the HPA point at it;
docker-compose health-checks /health, runs that image, and passes `docker-compose config` where
the tool is installed; the InferencePool and InferenceObjective validate against our JSON Schema of
the Gateway API Inference Extension v1.5.0 (tests/data/inference-extension-v1.5.0.schema.json),
which refuses each of twelve broken copies (an unknown field, a port out of range, a missing
required field, values outside an enum, a bad pattern...) and two that break the API's CEL rules
and accepts six valid variants; where the project's CRDs are present ($SHARED/crd/, not in CI) the
resources validate against their openAPIV3Schema too, which must give the same verdicts, and both
schemas must state the same facets on the same fields; the pool selects attnd's pods on their
port and names the endpoint picker's Service, and the picker's configuration maps the model-server
protocol to gauges attnd renders; the Dockerfile is multi-stage, installs through
deploy/install-deps.sh, runs as a non-root user, exposes 8080, has a HEALTHCHECK that asks /health, and its runtime stage
installs only the run-time group (no Mesa unless VULKAN_CPU=1); the systemd unit runs
`attnd serve` and stops it with SIGTERM."""
import configparser
import glob
import os
import re
import shutil
import subprocess
import sys

import yaml

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
failures = 0
checks = 0


def check(cond, msg):
    global failures, checks
    checks += 1
    if not cond:
        failures += 1
        print(f"FAIL {msg}")
    return cond


def dig(obj, *path, default=None):
    for p in path:
        if isinstance(obj, dict) and p in obj:
            obj = obj[p]
        elif isinstance(obj, list) and isinstance(p, int) and -len(obj) <= p < len(obj):
            obj = obj[p]
        else:
            return default
    return obj


def port_is_8080(port, container):
    if port == 8080:
        return True
    return any(p.get("name") == port and p.get("containerPort") == 8080 for p in container.get("ports", []))


# ---- the tags `make image` gives: IMAGE (deploy/build-image.sh's default) : VERSION | latest ----
with open(os.path.join(ROOT, "VERSION")) as f:
    VERSION = f.read().strip()
with open(os.path.join(ROOT, "deploy", "build-image.sh")) as f:
    m = re.search(r"^IMAGE=\$\{IMAGE:-([a-z0-9./_-]+)\}", f.read(), re.M)
IMAGE = m.group(1) if m else None
check(IMAGE and re.fullmatch(r"[0-9]+\.[0-9]+\.[0-9]+", VERSION), f"image name {IMAGE} / VERSION {VERSION!r}")
TAGS = {f"{IMAGE}:{VERSION}", f"{IMAGE}:latest"}

# ---- every YAML parses ----
docs = {}
yamls = sorted(glob.glob(os.path.join(ROOT, "deploy", "**", "*.y*ml"), recursive=True))
check(len(yamls) >= 5, f"expected docker-compose.yml and 4 k8s manifests, found {yamls}")
for path in yamls:
    try:
        with open(path) as f:
            docs[os.path.relpath(path, ROOT)] = [d for d in yaml.safe_load_all(f) if d is not None]
    except yaml.YAMLError as ex:
        check(False, f"{path} does not parse: {ex}")

k8s = {}  # (kind, name) -> manifest
for name, ds in docs.items():
    if name.startswith(os.path.join("deploy", "k8s")):
        for d in ds:
            check(isinstance(d, dict) and "apiVersion" in d and "kind" in d and dig(d, "metadata", "name"),
                  f"{name}: a manifest without apiVersion/kind/metadata.name")
            if isinstance(d, dict) and "kind" in d:
                check((d["kind"], dig(d, "metadata", "name")) not in k8s, f"{name}: two {d['kind']} named the same")
                k8s[(d["kind"], dig(d, "metadata", "name"))] = d

# ---- Kubernetes: attnd's own objects (the endpoint picker's: further down) ----
dep, svc, hpa = (k8s.get((k, "attnd")) for k in ("Deployment", "Service", "HorizontalPodAutoscaler"))
pvc = k8s.get(("PersistentVolumeClaim", "attnd-models"))
for kind, obj in (("Deployment", dep), ("Service", svc), ("HorizontalPodAutoscaler", hpa),
                  ("PersistentVolumeClaim", pvc)):
    check(obj is not None, f"deploy/k8s has no {kind}")
if dep:
    spec = dig(dep, "spec", "template", "spec", default={})
    cont = dig(spec, "containers", 0, default={})
    check(any(p.get("containerPort") == 8080 for p in cont.get("ports", [])), "Deployment: containerPort 8080")
    check(cont.get("image") in TAGS, f"Deployment: image {cont.get('image')} is not one of make image's tags {TAGS}")
    res = cont.get("resources") or {}
    for kind in ("requests", "limits"):
        check(all(dig(res, kind, r) for r in ("cpu", "memory")), f"Deployment: resources.{kind} cpu and memory, is {res}")
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        get = dig(cont, probe, "httpGet", default={})
        check(get.get("path") == "/health" and port_is_8080(get.get("port"), cont),
              f"Deployment: {probe} must GET /health on 8080, is {get}")
    sec = {**(spec.get("securityContext") or {}), **(cont.get("securityContext") or {})}
    check(sec.get("runAsNonRoot") is True and sec.get("runAsUser", 0) != 0, f"Deployment: non-root, is {sec}")
    args = [str(a) for a in cont.get("args", []) + cont.get("command", [])]
    check("serve" in args and "0.0.0.0" in args and "8080" in args, f"Deployment: serve on 0.0.0.0:8080, args {args}")
    mounts = {m.get("name"): m for m in cont.get("volumeMounts", [])}
    vols = {v.get("name"): v for v in spec.get("volumes", [])}
    model_mount = [n for n, m in mounts.items() if m.get("mountPath") == "/models"]
    check(len(model_mount) == 1, "Deployment: a volume mounted at /models")
    if model_mount and pvc:
        claim = dig(vols.get(model_mount[0], {}), "persistentVolumeClaim", "claimName")
        check(claim == dig(pvc, "metadata", "name"), f"Deployment: /models from the PVC, claim {claim}")
    labels = dig(dep, "spec", "template", "metadata", "labels", default={})
    check(dig(dep, "spec", "selector", "matchLabels", default={}).items() <= labels.items(),
          "Deployment: selector matches the pod labels")
    check(int(spec.get("terminationGracePeriodSeconds", 30)) >= 15, "Deployment: time to drain on SIGTERM")
    if svc:
        sel = dig(svc, "spec", "selector", default={})
        check(sel and sel.items() <= labels.items(), f"Service: selector {sel} does not select the pods")
        ports = dig(svc, "spec", "ports", default=[])
        check(any(p.get("port") == 8080 and port_is_8080(p.get("targetPort", p.get("port")), cont) for p in ports),
              f"Service: port 8080 to the container's 8080, is {ports}")
    if hpa:
        ref = dig(hpa, "spec", "scaleTargetRef", default={})
        check(ref.get("kind") == "Deployment" and ref.get("name") == dig(dep, "metadata", "name"),
              f"HPA: targets {ref}")
        lo, hi = dig(hpa, "spec", "minReplicas", default=1), dig(hpa, "spec", "maxReplicas", default=0)
        check(1 <= lo <= hi, f"HPA: replicas {lo}..{hi}")
if pvc:
    check(dig(pvc, "spec", "resources", "requests", "storage") and dig(pvc, "spec", "accessModes"),
          "PVC: storage request and access modes")

# ---- Gateway API Inference Extension: InferencePool, InferenceObjective, the endpoint picker ----
# The custom resources are validated against tests/data/inference-extension-v1.5.0.schema.json, a
# JSON Schema written for this project from the API's facts at release v1.5.0 (its $comment says
# which). Where the project's own CRDs are at hand ($SHARED/crd/, fetched from
# github.com/kubernetes-sigs/gateway-api-inference-extension, config/crd/bases/ at v1.5.0; not
# committed here, and absent in CI) the resources are validated against their openAPIV3Schema
# as well, every broken and valid copy below must get the same verdict from both, and the two
# schemas must state the same facets on the same fields: our schema is checked against the real one.
OUR_SCHEMA = os.path.join(ROOT, "tests", "data", "inference-extension-v1.5.0.schema.json")
CRD_FILES = ("inference.networking.k8s.io_inferencepools.yaml", "inference.networking.x-k8s.io_inferenceobjectives.yaml")
SHARED = os.environ.get("SHARED", os.path.join(ROOT, "..", "shared"))
CRD_DIR = os.path.join(SHARED, "crd")


def to_json_schema(node):
    """A CRD's structural OpenAPI v3 schema as JSON Schema. The x-kubernetes-* extensions are
    dropped (CEL rules, list types) except the two that change what is valid: int-or-string and
    preserve-unknown-fields. An object schema with properties and no additionalProperties gets
    additionalProperties false: the API server's strict field validation (kubectl's default)
    rejects unknown fields rather than pruning them silently. nullable becomes a "null" type."""
    if isinstance(node, list):
        return [to_json_schema(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: to_json_schema(v) for k, v in node.items()
           if not k.startswith("x-kubernetes-") and k not in ("nullable", "description")}
    if node.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if node.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    if (out.get("type") == "object" and "properties" in out and "additionalProperties" not in out
            and not node.get("x-kubernetes-preserve-unknown-fields")):
        out["additionalProperties"] = False
    return out


def load_crd_schemas():
    """{(apiVersion, kind): JSON Schema} of every version of the CRDs in $SHARED/crd/; {} when
    that folder is absent (CI). A folder that holds one CRD and not the other is a failure."""
    schemas = {}
    if not os.path.isdir(CRD_DIR):
        return schemas
    for fname in CRD_FILES:
        path = os.path.join(CRD_DIR, fname)
        if not check(os.path.exists(path), f"CRD {fname} not found under {CRD_DIR}: git show "
                     f"v1.5.0:config/crd/bases/{fname} of kubernetes-sigs/gateway-api-inference-extension"):
            continue
        with open(path) as f:
            crd = yaml.safe_load(f)
        group, kind = dig(crd, "spec", "group"), dig(crd, "spec", "names", "kind")
        for v in dig(crd, "spec", "versions", default=[]):
            schemas[(f"{group}/{v['name']}", kind)] = to_json_schema(dig(v, "schema", "openAPIV3Schema"))
    return schemas


def load_our_schema():
    """tests/data's schema of the two resources (None, and a failure, if it is not a valid one)."""
    import json
    import jsonschema
    try:
        with open(OUR_SCHEMA) as f:
            schema = json.load(f)
        jsonschema.Draft7Validator.check_schema(schema)
    except (OSError, ValueError, jsonschema.SchemaError) as ex:
        check(False, f"{OUR_SCHEMA}: {ex}")
        return None
    check("v1.5.0" in schema.get("$comment", "") and "gateway-api-inference-extension" in schema["$comment"],
          f"{OUR_SCHEMA}: its $comment must name the API release and source it describes")
    return schema


def validation_errors(schema, obj):
    """Draft 7 validation errors of obj against schema, as 'path: message' strings."""
    import jsonschema
    return [f"{'/'.join(map(str, e.absolute_path)) or '(root)'}: {e.message}"
            for e in jsonschema.Draft7Validator(schema).iter_errors(obj)]


def crd_errors(schemas, obj):
    """Validation errors of one manifest against the CRDs (one error if no CRD knows its kind)."""
    schema = schemas.get((obj.get("apiVersion"), obj.get("kind")))
    if schema is None:
        return [f"no CRD schema for {obj.get('apiVersion')} {obj.get('kind')}"]
    return validation_errors(schema, obj)


def mutated(obj, path, value=None, delete=False):
    """A deep copy of obj with the field at path set to value (or deleted)."""
    import copy
    o = copy.deepcopy(obj)
    cur = o
    for p in path[:-1]:
        cur = cur[p]
    if delete:
        del cur[path[-1]]
    else:
        cur[path[-1]] = value
    return o


FACETS = ("type", "required", "enum", "default", "format", "minimum", "maximum", "minLength", "maxLength",
          "pattern", "minItems", "maxItems", "minProperties", "maxProperties")


def schema_facets(schema, root, path="", out=None):
    """{field path: its facets} for every node of a schema: local $refs inlined (a $ref's siblings,
    e.g. a default, kept), required and enum as sorted lists, minLength 0 dropped (it says nothing),
    "closed" for additionalProperties false. Keywords outside FACETS (const, uniqueItems, if/then:
    the CEL rules the CRD leaves to the API server) are not compared."""
    out = {} if out is None else out
    while isinstance(schema, dict) and "$ref" in schema:
        target = root
        for part in schema["$ref"].lstrip("#/").split("/"):
            target = target[part]
        schema = {**target, **{k: v for k, v in schema.items() if k != "$ref"}}
    f = {k: (sorted(v) if k in ("required", "enum") else v) for k, v in schema.items()
         if k in FACETS and not (k == "minLength" and v == 0)}
    out[path or "(root)"] = f
    for name, sub in schema.get("properties", {}).items():
        schema_facets(sub, root, f"{path}.{name}", out)
    extra = schema.get("additionalProperties")
    if isinstance(extra, dict):
        schema_facets(extra, root, f"{path}.*", out)
    elif extra is False:
        f["closed"] = True
    if isinstance(schema.get("items"), dict):
        schema_facets(schema["items"], root, f"{path}[]", out)
    return out


def compare_with_crds(ours, crds):
    """Our schema states the same fields, with the same facets, as each CRD's schema."""
    nodes = facets = 0
    for (api, kind), crd_schema in sorted(crds.items()):
        mine = dig(ours, "definitions", kind)
        if not check(mine is not None and dig(mine, "properties", "apiVersion", "const") == api,
                     f"{OUR_SCHEMA} has no definition of {api} {kind}"):
            continue
        a, b = schema_facets(mine, ours), schema_facets(crd_schema, crd_schema)
        check(a.keys() == b.keys(), f"{kind}: fields only in our schema {sorted(a.keys() - b.keys())}, "
              f"only in the CRD {sorted(b.keys() - a.keys())}")
        for p in sorted(a.keys() & b.keys()):
            nodes += 1
            facets += len(b[p])
            check(a[p] == b[p], f"{kind} {p}: our schema says {a[p]}, the CRD says {b[p]}")
    print(f"our schema vs the CRDs: {nodes} fields, {facets} facets compared")


def schema_cases(pool, obj):
    """(broken copies both schemas must refuse, CEL-rule breaks only ours can see, valid copies)."""
    import copy
    cond = {"type": "Accepted", "status": "True", "reason": "Accepted", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}
    status = {"parents": [{"parentRef": {"name": "gw", "namespace": "default"}, "controllerName": "example.com/gw",
                           "conditions": [cond]}]}
    no_kind = copy.deepcopy(pool)
    dig(no_kind, "spec", "endpointPickerRef").pop("kind", None)
    broken = [("unknown field spec.targetPort (a typo of targetPorts)", mutated(pool, ["spec", "targetPort"], [{"number": 8080}])),
              ("port number 70000 > 65535", mutated(pool, ["spec", "targetPorts", 0, "number"], 70000)),
              ("no selector (required)", mutated(pool, ["spec", "selector"], delete=True)),
              ("failureMode not in the enum", mutated(pool, ["spec", "endpointPickerRef", "failureMode"], "FailSometimes")),
              ("9 target ports (maxItems 8)", mutated(pool, ["spec", "targetPorts"], [{"number": 8000 + i} for i in range(9)])),
              ("a label value with a space", mutated(pool, ["spec", "selector", "matchLabels", "app.kubernetes.io/name"], "at tnd")),
              ("appProtocol grpc (not in the enum)", mutated(pool, ["spec", "appProtocol"], "grpc")),
              ("InferenceObjective priority as a string", mutated(obj, ["spec", "priority"], "high")),
              ("InferenceObjective without poolRef", mutated(obj, ["spec", "poolRef"], delete=True)),
              ("empty matchLabels (minProperties 1)", mutated(pool, ["spec", "selector", "matchLabels"], {})),
              ("poolRef kind 9Pool (Kind pattern)", mutated(obj, ["spec", "poolRef", "kind"], "9Pool")),
              ("a status condition Maybe (not in the enum)",
               mutated(pool, ["status"], {"parents": [{**status["parents"][0], "conditions": [{**cond, "status": "Maybe"}]}]}))]
    cel = [("two target ports 8080 (port numbers unique)", mutated(pool, ["spec", "targetPorts"], [{"number": 8080}] * 2)),
           ("endpointPickerRef of kind Service (the default) without a port",
            mutated(no_kind, ["spec", "endpointPickerRef", "port"], delete=True))]
    valid = [("appProtocol kubernetes.io/h2c, failureMode FailClose",
              mutated(mutated(pool, ["spec", "appProtocol"], "kubernetes.io/h2c"), ["spec", "endpointPickerRef", "failureMode"], "FailClose")),
             ("8 distinct target ports", mutated(pool, ["spec", "targetPorts"], [{"number": 8000 + i} for i in range(8)])),
             ("endpointPickerRef group \"\" and kind Service spelled out",
              mutated(pool, ["spec", "endpointPickerRef"], {**pool["spec"]["endpointPickerRef"], "group": "", "kind": "Service"})),
             ("endpointPickerRef of another kind without a port",
              mutated(pool, ["spec", "endpointPickerRef"], {"group": "example.com", "kind": "Picker", "name": "p"})),
             ("an InferencePool with a status", mutated(pool, ["status"], status)),
             ("an InferenceObjective without priority, with a status",
              mutated(mutated(obj, ["spec", "priority"], delete=True), ["status"], {"conditions": [{**cond, "type": "Ready"}]}))]
    return broken, cel, valid


def check_inference_schemas():
    ours, crds = load_our_schema(), load_crd_schemas()
    custom = [d for (kind, _), d in k8s.items() if str(d.get("apiVersion", "")).startswith("inference.networking.")]
    check(any(d["kind"] == "InferencePool" for d in custom), "deploy/k8s has no InferencePool")
    judges = ([("tests/data schema", lambda o: validation_errors(ours, o))] if ours else []) + \
             ([("CRD", lambda o: crd_errors(crds, o))] if crds else [])
    for d in custom:
        for judge, errors in judges:
            errs = errors(d)
            check(not errs, f"{d['kind']} {dig(d, 'metadata', 'name')} does not validate against the {judge}: {errs}")
    print(f"{len(custom)} custom resources validated against: {', '.join(j for j, _ in judges) or 'nothing'}"
          + ("" if crds else f" (no CRDs in {CRD_DIR}: our schema is not compared with them here)"))
    pool = k8s.get(("InferencePool", "attnd"))
    obj = next((d for d in custom if d["kind"] == "InferenceObjective"), None)
    if not pool or not obj or not ours:
        return
    broken, cel, valid = schema_cases(pool, obj)
    counts = {}
    for judge, errors in judges:
        for group, cases, want_refused in (("broken", broken, True), ("valid", valid, False)):
            for what, case in cases:
                ok = bool(errors(case)) == want_refused
                counts[(judge, group)] = counts.get((judge, group), 0) + ok
                check(ok, f"the {judge} {'accepted a broken' if want_refused else 'refused a valid'} manifest: {what}"
                      + ("" if want_refused else f": {errors(case)}"))
    for what, case in cel:
        ok = bool(validation_errors(ours, case))
        counts[("tests/data schema", "cel")] = counts.get(("tests/data schema", "cel"), 0) + ok
        check(ok, f"the tests/data schema accepted a manifest the API server's CEL rule refuses: {what}")
    for judge, _ in judges:
        print(f"{judge}: refuses {counts.get((judge, 'broken'), 0)} of {len(broken)} broken copies, accepts "
              f"{counts.get((judge, 'valid'), 0)} of {len(valid)} valid ones")
    print(f"tests/data schema: refuses {counts.get(('tests/data schema', 'cel'), 0)} of {len(cel)} CEL-rule breaks; e.g. "
          f"{validation_errors(ours, broken[0][1])[:1]}")
    if crds:
        compare_with_crds(ours, crds)


def check_inference_wiring():
    """The pool selects attnd's pods on their port, the EPP serves the pool on the port the pool
    names, and its configuration names metrics attnd exports."""
    pool, epp, epp_svc = k8s.get(("InferencePool", "attnd")), k8s.get(("Deployment", "attnd-epp")), \
        k8s.get(("Service", "attnd-epp"))
    cm = k8s.get(("ConfigMap", "attnd-epp"))
    for kind, o in (("InferencePool attnd", pool), ("Deployment attnd-epp", epp), ("Service attnd-epp", epp_svc),
                    ("ConfigMap attnd-epp", cm)):
        check(o is not None, f"deploy/k8s has no {kind}")
    if not (pool and epp and epp_svc and cm and dep):
        return
    pod_labels = dig(dep, "spec", "template", "metadata", "labels", default={})
    check(dig(pool, "spec", "selector", "matchLabels", default={}).items() <= pod_labels.items(),
          "InferencePool: the selector does not select attnd's pods")
    cont = dig(dep, "spec", "template", "spec", "containers", 0, default={})
    check([p.get("number") for p in dig(pool, "spec", "targetPorts", default=[])] ==
          [p.get("containerPort") for p in cont.get("ports", [])], "InferencePool: targetPorts != attnd's containerPort")
    ref = dig(pool, "spec", "endpointPickerRef", default={})
    check(ref.get("name") == dig(epp_svc, "metadata", "name") and
          any(p.get("port") == dig(ref, "port", "number") for p in dig(epp_svc, "spec", "ports", default=[])),
          f"InferencePool: endpointPickerRef {ref} is not the EPP Service's port")
    eppc = dig(epp, "spec", "template", "spec", "containers", 0, default={})
    args = [str(a) for a in eppc.get("args", [])]
    check("--pool-name" in args and args[args.index("--pool-name") + 1] == dig(pool, "metadata", "name"),
          f"EPP: --pool-name is not the pool, args {args}")
    cfg_file = args[args.index("--config-file") + 1] if "--config-file" in args else ""
    mount = next((m for m in eppc.get("volumeMounts", []) if cfg_file.startswith(m.get("mountPath", "?") + "/")), None)
    vol = next((v for v in dig(epp, "spec", "template", "spec", "volumes", default=[])
                if mount and v.get("name") == mount.get("name")), {})
    check(dig(vol, "configMap", "name") == "attnd-epp" and os.path.basename(cfg_file) in cm.get("data", {}),
          f"EPP: --config-file {cfg_file} is not the ConfigMap's key")
    sel = dig(epp_svc, "spec", "selector", default={})
    check(sel and sel.items() <= dig(epp, "spec", "template", "metadata", "labels", default={}).items(),
          "Service attnd-epp does not select the EPP's pods")
    check(dig(epp, "spec", "template", "spec", "serviceAccountName") in {n for k, n in k8s if k == "ServiceAccount"},
          "EPP: its ServiceAccount is not in deploy/k8s")
    check_epp_config(yaml.safe_load(cm["data"].get(os.path.basename(cfg_file), "")) or {})


def check_epp_config(conf):
    """The EndpointPickerConfig scrapes /metrics and maps the protocol's metrics to names that
    server/api/metrics.c renders (as gauges)."""
    check(conf.get("kind") == "EndpointPickerConfig", f"EPP config kind {conf.get('kind')}")
    plugins = {p.get("type"): p for p in conf.get("plugins", [])}
    check(dig(plugins, "metrics-data-source", "parameters", "path") == "/metrics", "EPP: metrics-data-source path")
    ext = dig(plugins, "core-metrics-extractor", "parameters", default={})
    engines = {e.get("name"): e for e in ext.get("engineConfigs", [])}
    eng = engines.get(ext.get("defaultEngine"))
    if not check(eng, f"EPP: no engine config for the default engine {ext.get('defaultEngine')}"):
        return
    with open(os.path.join(ROOT, "server", "api", "metrics.c")) as f:
        src = f.read()
    for key in ("queuedRequestsSpec", "runningRequestsSpec", "kvUsageSpec", "cacheInfoSpec"):
        name = eng.get(key, "")
        check(re.fullmatch(r"attnd_[a-z_]+", name) and f'"{name}", "gauge"' in src,
              f"EPP: {key} {name!r} is not a gauge attnd renders (server/api/metrics.c)")
    for prof in conf.get("schedulingProfiles", []):
        for ref in prof.get("plugins", []):
            check(ref.get("pluginRef") in plugins, f"EPP: profile {prof.get('name')} names an unknown plugin {ref}")


check_inference_schemas()
check_inference_wiring()

# ---- docker compose ----
compose = (docs.get(os.path.join("deploy", "docker-compose.yml")) or [None])[0]
check(isinstance(compose, dict) and compose.get("services"), "deploy/docker-compose.yml: services")
for name, s in (compose or {}).get("services", {}).items():
    check(any(str(p).endswith("8080:8080") or dig(p, "target") == 8080 for p in s.get("ports", [])),
          f"compose {name}: publishes 8080")
    test = " ".join(map(str, dig(s, "healthcheck", "test", default=[])))
    # attnd-healthcheck is deploy/healthcheck.sh in the image (checked with the Dockerfile below)
    check("/health" in test or test == "CMD /usr/local/bin/attnd-healthcheck", f"compose {name}: healthcheck on /health, is {test!r}")
    vols = s.get("volumes", [])
    check(any((isinstance(v, str) and ":/models" in v) or dig(v, "target") == "/models" for v in vols),
          f"compose {name}: models volume at /models")
    check(str(s.get("user", "10001")).split(":")[0] not in ("0", "root"), f"compose {name}: non-root user")
    check(s.get("image") in TAGS, f"compose {name}: image {s.get('image')} is not one of make image's tags {TAGS}")
if shutil.which("docker-compose"):
    r = subprocess.run(["docker-compose", "-f", os.path.join(ROOT, "deploy", "docker-compose.yml"), "config", "-q"],
                       capture_output=True, text=True, env={**os.environ, "MODEL_DIR": "/models"})
    check(r.returncode == 0, f"docker-compose config: {r.stderr.strip()}")
    print("docker-compose config -q: " + ("valid" if r.returncode == 0 else "INVALID"))
else:
    print("docker-compose not installed (deploy/install-deps.sh installs it): compose schema not validated")

# ---- Dockerfile ----
with open(os.path.join(ROOT, "Dockerfile")) as f:
    text = f.read()
# join continuation lines, drop comments
lines = [ln.strip() for ln in re.sub(r"\\\n", " ", text).splitlines() if ln.strip() and not ln.strip().startswith("#")]
instr = [(ln.split(None, 1)[0].upper(), ln.split(None, 1)[1] if " " in ln else "") for ln in lines]
froms = [a for i, a in instr if i == "FROM"]
check(len(froms) >= 2, f"Dockerfile: multi-stage, FROMs {froms}")
last_stage = max(k for k, (i, _) in enumerate(instr) if i == "FROM")
final = instr[last_stage:]
users = [a.split(":")[0].strip() for i, a in final if i == "USER"]
check(users and users[-1] not in ("root", "0"), f"Dockerfile: final stage runs as non-root, USER {users}")
check(any(i == "EXPOSE" and "8080" in a.split() for i, a in final), "Dockerfile: EXPOSE 8080")
hc = [a for i, a in final if i == "HEALTHCHECK"]
hc_script = ""
if hc and "attnd-healthcheck" in hc[-1]:
    check(any(i == "COPY" and a.split() == ["deploy/healthcheck.sh", "/usr/local/bin/attnd-healthcheck"] for i, a in final),
          "Dockerfile: the HEALTHCHECK script is deploy/healthcheck.sh")
    with open(os.path.join(ROOT, "deploy", "healthcheck.sh")) as f:
        hc_script = f.read()
check(hc and ("/health" in hc[-1] or "GET /health " in hc_script), f"Dockerfile: HEALTHCHECK on /health, is {hc}")
check(any(i == "RUN" and "install-deps.sh" in a for i, a in instr[:last_stage]), "Dockerfile: build stage uses install-deps.sh")
check(any(i == "RUN" and "install-deps.sh runtime" in a for i, a in final), "Dockerfile: runtime uses install-deps.sh runtime")
check(any(i == "RUN" and "install-deps.sh build" in a for i, a in instr[:last_stage]),
      "Dockerfile: the build stage installs only the build group")
# /models holds the baked-in default model; a VOLUME there would copy it into an anonymous volume per run
check(any(i == "COPY" and a.split()[-1].rstrip("/") == "/models" for i, a in final), "Dockerfile: /models in the image")
check(not any(i == "VOLUME" and "/models" in a for i, a in final), "Dockerfile: no VOLUME over the baked-in /models")
cmd = " ".join(a for i, a in final if i in ("CMD", "ENTRYPOINT"))
check("serve" in cmd and "0.0.0.0" in cmd, f"Dockerfile: serves on 0.0.0.0 by default, is {cmd}")
with open(os.path.join(ROOT, "deploy", "install-deps.sh")) as f:
    deps = f.read()
m = re.search(r'^runtime="([^"]*)"', deps, re.M)
rt = m.group(1).split() if m else []
for pkg in ("libvulkan1", "libmicrohttpd12", "libcjson1", "liburing2", "libpcre2-8-0"):
    check(pkg in rt, f"install-deps.sh runtime lacks {pkg}")
check("mesa-vulkan-drivers" not in rt and "curl" not in rt, f"install-deps.sh runtime is not slim: {rt}")
m = re.search(r'^vulkan_cpu="([^"]*)"', deps, re.M)
check(m and "mesa-vulkan-drivers" in m.group(1).split(), "install-deps.sh: the vulkan-cpu group has Mesa's drivers")

# ---- systemd ----
unit = configparser.ConfigParser(strict=False, interpolation=None)
unit.optionxform = str
unit.read(os.path.join(ROOT, "deploy", "attnd.service"))
check(unit.has_section("Service") and unit.has_section("Install"), "attnd.service: [Service] and [Install]")
if unit.has_section("Service"):
    sv = unit["Service"]
    check("attnd serve" in sv.get("ExecStart", ""), f"attnd.service: ExecStart {sv.get('ExecStart')}")
    check(sv.get("KillSignal", "SIGTERM") == "SIGTERM", "attnd.service: SIGTERM to stop")
    check(sv.get("DynamicUser") == "yes" or sv.get("User", "root") != "root", "attnd.service: non-root")

print(f"test_deploy_yaml: {len(yamls)} YAML files, {checks} checks, {failures} failures")
sys.exit(1 if failures else 0)
