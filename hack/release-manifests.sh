#!/usr/bin/env bash
# Renders the clusterctl release assets into _out/ (or $OUT_DIR) and checks them against
# clusterctl's provider contract (hack/check-components.py):
#
#   addon-components.yaml  config/default; ${CAAPF_*} variables kept for clusterctl
#   fleet-installer.yaml   config/fleet-installer: OPTIONAL rights for installing Fleet with helm
#   runtime-extension.yaml config/extensionconfig: OPTIONAL ExtensionConfig and the hooks' rights
#   runtime-extension-upgrade-steps.yaml config/extensionconfig/upgrade-steps: OPTIONAL, Cluster API
#                          v1.12+ only: the ExtensionConfig of the hooks only v1.12 knows
#   metadata.yaml          release series and contracts
#
#   hack/release-manifests.sh                 # image default ...:dev, as in config/
#   hack/release-manifests.sh --tag v0.1.0    # image default ...:v0.1.0, tag checked in metadata.yaml
#
# Needs kustomize (or kubectl, whose built-in kustomize is used) and python3 with PyYAML.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${OUT_DIR:-$root/_out}"
tag="${RELEASE_TAG:-}"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --tag) tag="$2"; shift 2 ;;
    --tag=*) tag="${1#--tag=}"; shift ;;
    --out) out="$2"; shift 2 ;;
    --out=*) out="${1#--out=}"; shift ;;
    *) echo "usage: $0 [--tag vX.Y.Z] [--out DIR]" >&2; exit 2 ;;
  esac
done

# The image reference config/default/manager_image_patch.yaml uses by default.
image_repository="ghcr.io/example/cluster-api-addon-provider-fleet"
dev_image="${image_repository}:dev"

render() {
  if command -v kustomize >/dev/null 2>&1; then
    kustomize build "$1"
  else
    kubectl kustomize "$1"
  fi
}

mkdir -p "$out"
render "$root/config/default" >"$out/addon-components.yaml"
render "$root/config/fleet-installer" >"$out/fleet-installer.yaml"
render "$root/config/extensionconfig" >"$out/runtime-extension.yaml"
render "$root/config/extensionconfig/upgrade-steps" >"$out/runtime-extension-upgrade-steps.yaml"
cp "$root/metadata.yaml" "$out/metadata.yaml"

if [[ -n "$tag" ]]; then
  # Exactly the default image reference, exactly once (not every "dev" in the file).
  count="$(grep -o -F "\${CAAPF_IMAGE:=${dev_image}}" "$out/addon-components.yaml" | wc -l)"
  if [[ "$count" -ne 1 ]]; then
    echo "expected the image default \${CAAPF_IMAGE:=${dev_image}} once, found it $count times" >&2
    exit 1
  fi
  python3 - "$out/addon-components.yaml" "$dev_image" "${image_repository}:${tag}" <<'PY'
import sys
path, old, new = sys.argv[1:]
text = open(path, encoding="utf-8").read()
open(path, "w", encoding="utf-8").write(text.replace("${CAAPF_IMAGE:=%s}" % old, "${CAAPF_IMAGE:=%s}" % new))
PY
fi

check="$root/hack/check-components.py"
echo "clusterctl variables in addon-components.yaml:"
python3 "$check" components "$out/addon-components.yaml"
python3 "$check" extra "$out/fleet-installer.yaml" >/dev/null
python3 "$check" extra "$out/runtime-extension.yaml" >/dev/null
python3 "$check" extra "$out/runtime-extension-upgrade-steps.yaml" >/dev/null
python3 "$check" metadata "$out/metadata.yaml" --tag "$tag"
echo "release manifests in $out"
