#!/usr/bin/env bash
# Compares the test double of Fleet's fleet-agent chart (tests/fixtures/charts/fleet-agent) with
# the real chart of each supported Fleet minor, rendered by the same helm with the same values.
#
#   hack/compare-agent-chart.sh FLEET_GIT_DIR [TAG...]
#
# FLEET_GIT_DIR is a git directory of rancher/fleet (a bare clone is enough). The real chart is
# packaged the way Fleet's release does (.github/scripts/package-charts.sh: `tag: dev` becomes the
# tag, `helm package --version`) into a scratch directory that is removed afterwards; nothing of
# it is kept. Default tags: the first 0.12 (it still has the hook Job) and the latest patch of
# each minor 0.12-0.16. Prints one line per tag and mode (hooks rendered or not; other values)
# and the differences; exits 1 when any rendering differs.
set -euo pipefail

FLEET_GIT="${1:?usage: $0 FLEET_GIT_DIR [TAG...]}"
shift
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
HELM="${HELM_BIN:-$ROOT/bin/helm}"
DOUBLE="$ROOT/tests/fixtures/charts/fleet-agent"
if [ "$#" -gt 0 ]; then
  TAGS=("$@")
else
  TAGS=(v0.12.0)
  for minor in 12 13 14 15 16; do
    TAGS+=("$(git -C "$FLEET_GIT" tag --list "v0.$minor.*" | grep -E '^v0\.[0-9]+\.[0-9]+$' | sort -V | tail -1)")
  done
fi

SCRATCH="$(mktemp -d)"
trap 'rm -rf "$SCRATCH"' EXIT
export HOME="$SCRATCH/home" XDG_CACHE_HOME="$SCRATCH/home/cache" XDG_CONFIG_HOME="$SCRATCH/home/config" XDG_DATA_HOME="$SCRATCH/home/data"

# Real-shaped values, as the provider passes them (token values, client ID, TLS mode, agent
# settings, release location), with host network and tolerations so those paths render too.
cat > "$SCRATCH/values.yaml" <<'VALUES'
clusterNamespace: team-a
apiServerURL: https://fleet.example.com:6443
apiServerCA: |
  -----BEGIN CERTIFICATE-----
  MIIBszCCAVmgAwIBAgIUQm9vdHN0cmFwIHRlc3QgQ0EwCgYIKoZIzj0EAwIwFDES
  -----END CERTIFICATE-----
token: eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ0ZXN0In0.c2lnbmF0dXJl
tokenName: c1
systemRegistrationNamespace: cattle-fleet-clusters-system
clientID: 0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
agentTLSMode: system-store
fleetAgent:
  hostNetwork: true
  tolerations:
  - {key: node.kubernetes.io/not-ready, operator: Exists}
  - {key: node-role.kubernetes.io/control-plane, operator: Exists, effect: NoSchedule}
internal:
  systemNamespace: fleet-addon-agent
  managedReleaseName: fleet-agent
labels:
  env: dev
VALUES
# The other branches of the templates: debug flags, a proxy (0.15+), a registry prefix, a node
# selector, no host network, no security context.
cat > "$SCRATCH/values-other.yaml" <<'VALUES'
clusterNamespace: team-a
apiServerURL: https://fleet.example.com:6443
token: t
tokenName: c1
clientID: c
debug: true
debugLevel: 3
proxy: http://proxy.example.com:3128
disableSecurityContext: true
global:
  cattle:
    systemDefaultRegistry: registry.example.com:5000
fleetAgent:
  nodeSelector: {role: agents}
internal:
  systemNamespace: fleet-addon-agent
VALUES

normalize() {
  python3 - "$1" <<'PY'
import json, sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
for d in docs:
    # Same JSON, written differently: compare the parsed config.
    if d.get("kind") == "ConfigMap" and "config" in d.get("data", {}):
        d["data"]["config"] = json.loads(d["data"]["config"])
docs.sort(key=lambda d: (d.get("kind", ""), d["metadata"]["name"]))
print(yaml.safe_dump_all(docs, sort_keys=True))
PY
}

status=0
for tag in "${TAGS[@]}"; do
  version="${tag#v}"
  real="$SCRATCH/real-$version"
  double="$SCRATCH/double-$version/fleet-agent"
  mkdir -p "$real" "$double"
  git -C "$FLEET_GIT" archive --prefix=fleet-agent/ "$tag:charts/fleet-agent" | tar -x -C "$real"
  sed -i -e "s@tag: dev@tag: $tag@" "$real/fleet-agent/values.yaml"
  "$HELM" package --version "$version" --app-version "$version" -d "$SCRATCH/pkg-real-$version" "$real/fleet-agent" >/dev/null
  cp -R "$DOUBLE/templates" "$DOUBLE/values.yaml" "$double/"
  sed -i -e "s@tag: dev@tag: $tag@" "$double/values.yaml"
  printf 'apiVersion: v2\nname: fleet-agent\nversion: %s\nappVersion: "%s"\n' "$version" "$version" > "$double/Chart.yaml"
  "$HELM" package -d "$SCRATCH/pkg-double-$version" "$double" >/dev/null
  for mode in hooks no-hooks other-values; do
    flags=(--namespace fleet-addon-agent --values "$SCRATCH/values.yaml")
    [ "$mode" = no-hooks ] && flags+=(--no-hooks)
    [ "$mode" = other-values ] && flags=(--namespace fleet-addon-agent --values "$SCRATCH/values-other.yaml")
    for side in real double; do
      "$HELM" template fleet-agent "$SCRATCH/pkg-$side-$version/fleet-agent-$version.tgz" "${flags[@]}" > "$SCRATCH/$side-$version-$mode.yaml"
      normalize "$SCRATCH/$side-$version-$mode.yaml" > "$SCRATCH/$side-$version-$mode.norm"
    done
    kinds="$(grep -c '^kind: ' "$SCRATCH/real-$version-$mode.yaml" || true)"
    if diff -u "$SCRATCH/real-$version-$mode.norm" "$SCRATCH/double-$version-$mode.norm" > "$SCRATCH/diff"; then
      echo "$tag $mode: same ($kinds objects)"
    else
      echo "$tag $mode: DIFFERENT"
      cat "$SCRATCH/diff"
      status=1
    fi
  done
done
exit "$status"
