#!/usr/bin/env bash
# Builds the provider image without a container daemon (make image), then checks it.
#
# From `scratch`, with buildah: a statically linked `caapf` (glibc, `-C target-feature=+crt-static`,
# built for x86_64-unknown-linux-gnu), the pinned helm that hack/install-helm.sh installs into
# ./bin, CA certificates, /etc/passwd and /etc/group naming the non-root user, and /tmp. The user,
# entrypoint, exposed ports and environment are read from the final stage of the Dockerfile, so
# both images agree. The result is committed to buildah's local storage as $IMAGE and written as
# an OCI layout to $OUT/oci (tag `dev`).
#
# Checks: ./bin/helm is the version the Dockerfile pins (ARG HELM_VERSION); both binaries are statically linked (`file`, `ldd`); the image configuration has the
# Dockerfile's user, entrypoint, ports and environment; the image holds exactly the expected
# files; `caapf --version` and `helm version` run from the image's root file system, as the
# image's user with its environment (podman when it can run containers here, else the OCI
# layout unpacked with umoci and the binaries run in a chroot of its rootfs).
#
# Environment: IMAGE (localhost/cluster-api-addon-provider-fleet:dev), OUT (_out/image),
# CARGO_TARGET_DIR (target), SKIP_BUILD=1 to reuse an existing release binary,
# BUILDAH_STORAGE_DRIVER (vfs, which works without kernel overlay support).
# Needs root (buildah, umoci and chroot), buildah, umoci, file, python3.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
image="${IMAGE:-localhost/cluster-api-addon-provider-fleet:dev}"
out="${OUT:-$root/_out/image}"
target_dir="${CARGO_TARGET_DIR:-$root/target}"
triple="x86_64-unknown-linux-gnu"
driver="${BUILDAH_STORAGE_DRIVER:-vfs}"
buildah=(buildah --storage-driver "$driver")

die() { echo "build-image: $*" >&2; exit 1; }
for tool in buildah umoci file python3; do
  command -v "$tool" >/dev/null || die "$tool is required (apt-get install -y buildah umoci file python3)"
done

# 1. The binaries.
if [[ "${SKIP_BUILD:-}" != 1 ]]; then
  (cd "$root" && RUSTFLAGS='-C target-feature=+crt-static' CARGO_TARGET_DIR="$target_dir" \
    cargo build --release --locked --target "$triple" --bin caapf)
fi
caapf="$target_dir/$triple/release/caapf"
[[ -x "$caapf" ]] || die "$caapf is missing (build it, or unset SKIP_BUILD)"
[[ -x "$root/bin/helm" ]] || "$root/hack/install-helm.sh"
helm="$root/bin/helm"
# The image ships the helm the Dockerfile pins (ARG HELM_VERSION, the one place it is written).
helm_version="$(sed -n 's/^ARG HELM_VERSION=//p' "$root/Dockerfile")"
[[ -n "$helm_version" ]] || die "no ARG HELM_VERSION in the Dockerfile"
[[ "$("$helm" version --template '{{.Version}}')" == "$helm_version" ]] \
  || die "$helm is $("$helm" version --template '{{.Version}}'), the Dockerfile pins $helm_version (run hack/install-helm.sh)"
for binary in "$caapf" "$helm"; do
  file "$binary" | grep -Eq 'statically linked|static-pie linked' || die "$binary is not statically linked: $(file "$binary")"
  deps="$(ldd "$binary" 2>&1 || true)"
  [[ "$deps" == *"not a dynamic executable"* || "$deps" == *"statically linked"* ]] || die "$binary has dynamic dependencies: $deps"
done

# 2. The Dockerfile's final stage: user, entrypoint, ports, environment.
config_json="$(python3 - "$root/Dockerfile" <<'EOF'
import json, re, shlex, sys
text = open(sys.argv[1]).read().replace("\\\n", " ")
stage = re.split(r"(?m)^FROM ", text)[-1]
out = {"user": None, "entrypoint": None, "ports": [], "env": []}
for line in stage.splitlines():
    line = line.strip()
    if not line or line.startswith("#"):
        continue
    word, _, rest = line.partition(" ")
    if word == "USER":
        out["user"] = rest.strip()
    elif word == "ENTRYPOINT":
        out["entrypoint"] = json.loads(rest)
    elif word == "EXPOSE":
        out["ports"] += rest.split()
    elif word == "ENV":
        out["env"] += shlex.split(rest)
json.dump(out, sys.stdout)
EOF
)"
field() { python3 -c 'import json,sys; v=json.loads(sys.argv[1])[sys.argv[2]]; print(v if isinstance(v,str) else "\n".join(v) if sys.argv[2]!="entrypoint" else json.dumps(v))' "$config_json" "$1"; }
user="$(field user)"
entrypoint="$(field entrypoint)"
mapfile -t ports < <(field ports)
mapfile -t envs < <(field env)
uid="${user%%:*}"
gid="${user##*:}"
[[ "$uid" =~ ^[0-9]+$ && "$uid" != 0 ]] || die "the Dockerfile's USER is not a numeric non-root user: $user"

# 3. The root file system.
staging="$(mktemp -d)"
trap 'rm -rf "$staging"' EXIT
install -D -m 0755 "$caapf" "$staging/caapf"
install -D -m 0755 "$helm" "$staging/usr/local/bin/helm"
install -D -m 0644 /etc/ssl/certs/ca-certificates.crt "$staging/etc/ssl/certs/ca-certificates.crt"
printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%s:%s:nonroot:/tmp:/sbin/nologin\n' "$uid" "$gid" >"$staging/etc/passwd"
printf 'root:x:0:\nnonroot:x:%s:\n' "$gid" >"$staging/etc/group"
chmod 0644 "$staging/etc/passwd" "$staging/etc/group"
install -d -m 1777 "$staging/tmp"

# 4. The image.
container="$("${buildah[@]}" from scratch)"
cleanup() { "${buildah[@]}" rm "$container" >/dev/null 2>&1 || true; rm -rf "$staging"; }
trap cleanup EXIT
"${buildah[@]}" copy "$container" "$staging/" / >/dev/null
args=(--user "$user" --entrypoint "$entrypoint" --workingdir /
  --label org.opencontainers.image.source=https://github.com/example/cluster-api-addon-provider-fleet
  --label "org.opencontainers.image.revision=$(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)")
for port in "${ports[@]}"; do args+=(--port "$port"); done
# distroless sets PATH in its base image; from scratch it is set here.
args+=(--env PATH=/usr/local/bin:/usr/bin:/bin)
for env in "${envs[@]}"; do args+=(--env "$env"); done
"${buildah[@]}" config "${args[@]}" "$container"
"${buildah[@]}" commit --quiet --format oci "$container" "$image" >/dev/null
rm -rf "$out"
mkdir -p "$out"
"${buildah[@]}" push --quiet "$image" "oci:$out/oci:dev"
echo "build-image: built $image and $out/oci:dev"

# 5. Inspect the configuration and the files.
"${buildah[@]}" inspect --type image "$image" >"$out/inspect.json"
python3 - "$out/inspect.json" "$config_json" <<'EOF'
import json, sys
image = json.load(open(sys.argv[1]))["OCIv1"]["config"]
want = json.loads(sys.argv[2])
problems = []
if image.get("User") != want["user"]:
    problems.append(f"user {image.get('User')!r}, want {want['user']!r}")
if image.get("Entrypoint") != want["entrypoint"]:
    problems.append(f"entrypoint {image.get('Entrypoint')!r}, want {want['entrypoint']!r}")
ports = sorted(p.split("/")[0] for p in image.get("ExposedPorts", {}))
if ports != sorted(want["ports"]):
    problems.append(f"ports {ports}, want {sorted(want['ports'])}")
env = set(image.get("Env", []))
missing = [e for e in want["env"] if e not in env]
if missing:
    problems.append(f"environment lacks {missing}")
if problems:
    sys.exit("build-image: the image configuration differs from the Dockerfile: " + "; ".join(problems))
print(f"build-image: user {image['User']}, entrypoint {image['Entrypoint']}, ports {ports}, env {sorted(env)}")
EOF

bundle="$out/bundle"
umoci unpack --image "$out/oci:dev" "$bundle" >/dev/null
rootfs="$bundle/rootfs"
files="$(cd "$rootfs" && find . -mindepth 1 | sort | tr '\n' ' ')"
expected="./caapf ./etc ./etc/group ./etc/passwd ./etc/ssl ./etc/ssl/certs ./etc/ssl/certs/ca-certificates.crt ./tmp ./usr ./usr/local ./usr/local/bin ./usr/local/bin/helm "
[[ "$files" == "$expected" ]] || die "unexpected files in the image: $files"
[[ "$(stat -c %a "$rootfs/tmp")" == 1777 ]] || die "/tmp is not world-writable with the sticky bit"
echo "build-image: files $files"

# 6. Run the binaries from the image's root file system, as its user, with its environment.
run_env=(PATH=/usr/local/bin:/usr/bin:/bin)
chroot_bin="$(command -v chroot)"
for env in "${envs[@]}"; do run_env+=("$env"); done
if command -v podman >/dev/null && podman run --rm "$image" --version >/dev/null 2>&1; then
  echo "build-image: podman run: $(podman run --rm "$image" --version)"
  echo "build-image: podman run helm: $(podman run --rm --entrypoint /usr/local/bin/helm "$image" version --short)"
else
  version="$(env -i "${run_env[@]}" "$chroot_bin" --userspec="$uid:$gid" "$rootfs" /caapf --version)"
  image_helm="$(env -i "${run_env[@]}" "$chroot_bin" --userspec="$uid:$gid" "$rootfs" /usr/local/bin/helm version --short)"
  [[ "$image_helm" == "$helm_version"+* ]] || die "the image's helm is $image_helm, the Dockerfile pins $helm_version"
  echo "build-image: (no podman) chroot $rootfs as $uid:$gid: caapf --version: $version; helm version: $image_helm"
fi
rm -rf "$bundle"
echo "build-image: ok ($(du -sh "$out/oci" | cut -f1) OCI layout in $out/oci)"
