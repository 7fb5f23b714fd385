# node_common.sh - what the Node.js-driven tests share (sourced, not run): the paths they resolve,
# the checks that fail (no binary, no model) or skip (no Node.js >= 20, exit 77), the npm install of
# a pinned test folder, and one `attnd serve` on a free loopback port.
#   ATTND   attnd binary (default build/release/attnd)
#   SHARED  shared test data folder (default ../shared)
# After `nt_init NAME`: $root (the repository, the working directory), $ATTND and $SHARED (absolute).

abs() { case $1 in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }

# nt_init NAME: resolve the paths (relative ones before moving to the repository root), check the binary
nt_init() {
  nt_name=$1
  root=$(cd "$(dirname "${BASH_SOURCE[1]}")/../.." && pwd)
  ATTND=$(abs "${ATTND:-$root/build/release/attnd}")
  SHARED=$(abs "${SHARED:-$root/../shared}")
  cd "$root"
  if [ ! -x "$ATTND" ]; then
    echo "$nt_name: no attnd binary at $ATTND (build it, or set ATTND=...)" >&2
    exit 1
  fi
}

# nt_need_model PATH: fail when a test model is missing
nt_need_model() {
  if [ ! -f "$1" ]; then
    echo "$nt_name: missing test model $1 (set SHARED=...)" >&2
    exit 1
  fi
}

# nt_need_node WHAT: skip (77) without node and npm, or with a Node.js older than 20 (WHAT needs it)
nt_need_node() {
  if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    echo "skip: node and npm are needed for $1"
    exit 77
  fi
  if [ "$(node -p 'process.versions.node.split(".")[0]')" -lt 20 ]; then
    echo "skip: $1 needs Node.js >= 20 (found $(node --version))"
    exit 77
  fi
}

# nt_npm DIR PACKAGE...: `npm ci` in DIR (its package-lock.json pins the versions) unless every PACKAGE is there
nt_npm() {
  local dir=$1 p
  shift
  for p in "$@"; do
    if [ ! -d "$dir/node_modules/$p" ]; then
      (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
      return
    fi
  done
}

# nt_serve MODEL ARGS...: `attnd serve` on port 0; sets $nt_pid, $nt_log and $base (http://127.0.0.1:PORT) once
# /health answers 200; the EXIT trap stops it. Fails with the daemon's log when it prints no address.
nt_serve() {
  local model=$1 port=""
  shift
  nt_log=$(mktemp)
  trap nt_stop EXIT
  "$ATTND" serve -m "$model" --host 127.0.0.1 --port 0 "$@" </dev/null >/dev/null 2>"$nt_log" &
  nt_pid=$!
  for _ in $(seq 300); do
    port=$(sed -n 's|.*listening on http://[^ ]*:\([0-9][0-9]*\).*|\1|p' "$nt_log" | head -n1)
    [ -n "$port" ] && break
    kill -0 "$nt_pid" 2>/dev/null || break
    sleep 0.1
  done
  if [ -z "$port" ]; then
    echo "$nt_name: attnd printed no address:" >&2
    cat "$nt_log" >&2
    exit 1
  fi
  base="http://127.0.0.1:$port"
  for _ in $(seq 600); do
    [ "$(curl -s -o /dev/null -w '%{http_code}' "$base/health")" = 200 ] && break
    sleep 0.1
  done
}

# nt_alive: 0 while the daemon nt_serve started runs; otherwise prints its log and returns 1
nt_alive() {
  kill -0 "$nt_pid" 2>/dev/null && return 0
  echo "$nt_name: attnd died during the tests:" >&2
  cat "$nt_log" >&2
  return 1
}

# shellcheck disable=SC2317  # run by the trap
nt_stop() {
  if [ -n "${nt_pid:-}" ]; then kill "$nt_pid" 2>/dev/null || true; wait "$nt_pid" 2>/dev/null || true; fi
  [ -n "${nt_log:-}" ] && rm -f "$nt_log"
  nt_pid=
}
