#!/usr/bin/python3
"""Deployment files: every YAML under deploy/ parses, and the key fields agree with the daemon and
with `make image` — the Kubernetes Deployment probes /health on port 8080 (startup, readiness,
liveness) as a non-root user with the models PVC mounted at /models, sets CPU and memory requests
and limits, and runs the image `make image` tags; the Service and the HPA point at it;
docker-compose health-checks /health, runs that image, and passes `docker-compose config` where
the tool is installed; the Dockerfile is multi-stage, installs through deploy/install-deps.sh, runs
as a non-root user, exposes 8080, has a HEALTHCHECK that asks /health, and its runtime stage
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

k8s = {}
for name, ds in docs.items():
    if name.startswith(os.path.join("deploy", "k8s")):
        for d in ds:
            check(isinstance(d, dict) and "apiVersion" in d and "kind" in d and dig(d, "metadata", "name"),
                  f"{name}: a manifest without apiVersion/kind/metadata.name")
            if isinstance(d, dict) and "kind" in d:
                k8s[d["kind"]] = d

# ---- Kubernetes ----
dep, svc, hpa, pvc = (k8s.get(k) for k in ("Deployment", "Service", "HorizontalPodAutoscaler",
                                             "PersistentVolumeClaim"))
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
