#!/usr/bin/env bash
# Runs the provider without a cluster: starts the sandbox API server, runs `caapf` against it,
# applies example CAPI objects and a HelmOp (examples/playground), marks their control planes
# initialized, prints the Fleet objects the provider created, plays Fleet's status for one
# Cluster (agent checked in, the HelmOp's bundle ready) and prints the CAPI Clusters with their
# FleetReady condition. Both processes keep running; use the
# printed KUBECONFIG with kubectl, and the printed command to stop them.
#
# Environment: CAAPF_BIN / SANDBOX_BIN (prebuilt binaries; built with cargo otherwise),
# PLAYGROUND_DIR (state and logs, default _out/playground), PLAYGROUND_EXIT=1 (stop both
# processes after printing, for tests).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dir="${PLAYGROUND_DIR:-$root/_out/playground}"
mkdir -p "$dir"
kubeconfig="$dir/kubeconfig"
rm -f "$kubeconfig"

if [[ -z "${CAAPF_BIN:-}" || -z "${SANDBOX_BIN:-}" ]]; then
  build=()
  [[ -z "${CAAPF_BIN:-}" ]] && build+=(-p cluster-api-addon-provider-fleet --bin caapf)
  [[ -z "${SANDBOX_BIN:-}" ]] && build+=(-p kube-sandbox --bin kube-sandbox)
  (cd "$root" && cargo build --quiet --locked "${build[@]}")
  target="$(cd "$root" && cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')"
  CAAPF_BIN="${CAAPF_BIN:-$target/debug/caapf}"
  SANDBOX_BIN="${SANDBOX_BIN:-$target/debug/kube-sandbox}"
fi

pids=()
stop() { for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap 'stop; exit 1' ERR INT TERM

"$SANDBOX_BIN" --addr 127.0.0.1:0 --kubeconfig "$kubeconfig" --validate >"$dir/sandbox.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 300); do
  grep -q "kube-sandbox listening on" "$dir/sandbox.log" 2>/dev/null && break
  sleep 0.1
done
grep -q "kube-sandbox listening on" "$dir/sandbox.log" || { echo "sandbox did not start:" >&2; cat "$dir/sandbox.log" >&2; exit 1; }
export KUBECONFIG="$kubeconfig"

"$CAAPF_BIN" --health-probe-bind-address=127.0.0.1:0 --metrics-bind-address=127.0.0.1:0 \
  --webhook-host=127.0.0.1 --webhook-port=0 >"$dir/caapf.log" 2>&1 &
pids+=($!)
printf '%s\n' "${pids[@]}" >"$dir/pids"

kubectl apply -f "$root/examples/playground/" >/dev/null
for cluster in docker-demo capi-quickstart; do
  kubectl patch clusters.cluster.x-k8s.io "$cluster" -n default --subresource=status --type=merge \
    -p '{"status":{"initialization":{"controlPlaneInitialized":true}}}' >/dev/null
done

# Wait for the provider's objects (a condition, with a deadline).
wanted=(
  "clusters.fleet.cattle.io/docker-demo -n default"
  "clusters.fleet.cattle.io/capi-quickstart -n default"
  "clustergroups.fleet.cattle.io/quick-start -n clusterclass"
  "clustergroups.fleet.cattle.io/quick-start.clusterclass -n default"
  "bundlenamespacemappings.fleet.cattle.io/default -n clusterclass"
)
deadline=$((SECONDS + 60))
for object in "${wanted[@]}"; do
  # shellcheck disable=SC2086
  until kubectl get $object >/dev/null 2>&1; do
    if ((SECONDS > deadline)); then echo "timed out waiting for $object; see $dir/caapf.log" >&2; stop; exit 1; fi
    sleep 0.2
  done
done

echo "Fleet objects created by the provider:"
kubectl get clusters.fleet.cattle.io,clustergroups.fleet.cattle.io,bundlenamespacemappings.fleet.cattle.io -A
echo
echo "Namespace default annotations:"
kubectl get namespace default -o jsonpath='{.metadata.annotations}'; echo
echo

# Play Fleet for capi-quickstart: its agent checked in just now and the HelmOp's bundle is ready.
now="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
kubectl patch clusters.fleet.cattle.io capi-quickstart -n default --subresource=status --type=json -p "[{\"op\":\"add\",\"path\":\"/status\",\"value\":{
  \"namespace\":\"cluster-default-capi-quickstart-1a2b3c4d5e6f\",
  \"agent\":{\"lastSeen\":\"$now\",\"namespace\":\"fleet-addon-agent\"},
  \"summary\":{\"ready\":1,\"desiredReady\":1},\"display\":{\"readyBundles\":\"1/1\"},
  \"readyHelmOps\":1,\"desiredReadyHelmOps\":1}}]" >/dev/null
fleet_ready() {
  kubectl get clusters.cluster.x-k8s.io "$1" -n default \
    -o jsonpath='{.status.conditions[?(@.type=="FleetReady")].reason}' 2>/dev/null
}
until [[ "$(fleet_ready capi-quickstart)" == "Ready" && -n "$(fleet_ready docker-demo)" ]]; do
  if ((SECONDS > deadline)); then echo "timed out waiting for FleetReady; see $dir/caapf.log" >&2; stop; exit 1; fi
  sleep 0.2
done
echo "CAPI Clusters and their FleetReady condition:"
kubectl get clusters.cluster.x-k8s.io -A -o custom-columns='NAMESPACE:.metadata.namespace,NAME:.metadata.name,FLEETREADY:.status.conditions[?(@.type=="FleetReady")].status,REASON:.status.conditions[?(@.type=="FleetReady")].reason,MESSAGE:.status.conditions[?(@.type=="FleetReady")].message'
echo
if [[ "${PLAYGROUND_EXIT:-0}" == "1" ]]; then
  stop
  echo "playground stopped"
  exit 0
fi
cat <<MSG
The sandbox API server and the provider keep running (logs in $dir).
  export KUBECONFIG=$kubeconfig
  kubectl get clusters.fleet.cattle.io -A -o yaml
Stop them with:
  kill \$(cat $dir/pids)
MSG
