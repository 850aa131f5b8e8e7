#!/usr/bin/env python3
"""Checks rendered provider manifests against clusterctl's provider contract.

    hack/check-components.py components FILE   # addon-components.yaml: every rule below
    hack/check-components.py extra FILE        # an optional extra manifest (no Namespace of its own)
    hack/check-components.py metadata FILE [--tag vX.Y.Z]

Rules (cluster-api docs/book/src/developer/providers/contracts/clusterctl.md):
  - components: exactly one Namespace; every namespaced object in it; cluster-scoped objects
    without a namespace; a Deployment with a container named `manager`;
  - every object labelled cluster.x-k8s.io/provider=<label> (--provider-label, default addon-fleet);
  - variables only as ${NAME} or ${NAME:=default}, NAME upper-case and starting with the provider
    prefix (--prefix, default CAAPF_); no bare $NAME, which clusterctl would also substitute;
  - no binding to cluster-admin;
  - metadata: apiVersion clusterctl.cluster.x-k8s.io/v1alpha3, kind Metadata, non-empty
    releaseSeries of {major, minor, contract}, and the series of --tag listed.

Prints the variables found (NAME=default) and exits 1 listing every problem.
Needs PyYAML.
"""

import argparse
import re
import sys

try:
    import yaml
except ImportError:  # pragma: no cover
    sys.exit("hack/check-components.py needs PyYAML (pip install pyyaml)")

# Kinds without a namespace. Anything else is namespaced.
CLUSTER_SCOPED = {
    "APIService",
    "ClusterRole",
    "ClusterRoleBinding",
    "CustomResourceDefinition",
    "ExtensionConfig",
    "MutatingWebhookConfiguration",
    "Namespace",
    "PriorityClass",
    "StorageClass",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
    "ValidatingWebhookConfiguration",
}

PROVIDER_LABEL = "cluster.x-k8s.io/provider"
VARIABLE = re.compile(r"\$\{(?P<name>[^}:=]*)(?P<op>:=)?(?P<default>[^}]*)\}")


def describe(obj):
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace")
    name = meta.get("name", "<no name>")
    return f"{obj.get('kind', '<no kind>')} {namespace + '/' if namespace else ''}{name}"


def check_variables(text, prefix, problems):
    """Returns {name: default or None}; appends problems for malformed or unprefixed ones."""
    found = {}
    i = 0
    while i < len(text):
        if text[i] != "$":
            i += 1
            continue
        nxt = text[i + 1] if i + 1 < len(text) else ""
        line = text.count("\n", 0, i) + 1
        if nxt == "$":  # an escaped dollar
            i += 2
            continue
        if nxt == "{":
            match = VARIABLE.match(text, i)
            if not match:
                problems.append(f"line {line}: unterminated variable {text[i:i + 30]!r}")
                i += 2
                continue
            name, op, default = match.group("name"), match.group("op"), match.group("default")
            if not re.fullmatch(r"[A-Z][A-Z0-9_]*", name):
                problems.append(f"line {line}: variable {match.group(0)!r}: name must be upper-case letters, digits and _")
            elif not name.startswith(prefix):
                problems.append(f"line {line}: variable {name} must start with the provider prefix {prefix}")
            if op is None and default:
                problems.append(f"line {line}: variable {match.group(0)!r}: use ${{NAME}} or ${{NAME:=default}}")
            if "$" in default or "{" in default:
                problems.append(f"line {line}: variable {name}: the default must not contain $ or {{")
            value = default if op else None
            if name in found and found[name] != value:
                problems.append(f"line {line}: variable {name} has two defaults: {found[name]!r} and {value!r}")
            found[name] = value
            i = match.end()
            continue
        if re.match(r"[A-Za-z_]", nxt):
            word = re.match(r"[A-Za-z_][A-Za-z0-9_]*", text[i + 1:]).group(0)
            problems.append(f"line {line}: bare ${word}: clusterctl would substitute it (write ${{...}} or $$)")
        i += 1
    return found


def load(path):
    with open(path, encoding="utf-8") as handle:
        text = handle.read()
    docs = [d for d in yaml.safe_load_all(text) if d]
    return text, docs


def check_objects(docs, label, problems, namespace_required):
    namespaces = [d for d in docs if d.get("kind") == "Namespace"]
    target = None
    if namespace_required:
        if len(namespaces) != 1:
            names = ", ".join(describe(n) for n in namespaces) or "none"
            problems.append(f"exactly one Namespace is allowed, found {len(namespaces)} ({names})")
        if namespaces:
            target = (namespaces[0].get("metadata") or {}).get("name")
    elif namespaces:
        problems.append("an extra manifest must not contain a Namespace")
    seen = set()
    for obj in docs:
        meta = obj.get("metadata") or {}
        what = describe(obj)
        key = (obj.get("apiVersion"), obj.get("kind"), meta.get("namespace"), meta.get("name"))
        if key in seen:
            problems.append(f"{what}: defined twice")
        seen.add(key)
        labels = meta.get("labels") or {}
        if labels.get(PROVIDER_LABEL) != label:
            problems.append(f"{what}: label {PROVIDER_LABEL} must be {label!r}, is {labels.get(PROVIDER_LABEL)!r}")
        kind = obj.get("kind")
        if kind in CLUSTER_SCOPED:
            if meta.get("namespace"):
                problems.append(f"{what}: a cluster-scoped {kind} must not have a namespace")
        elif not meta.get("namespace"):
            problems.append(f"{what}: a namespaced object needs metadata.namespace")
        elif target is not None and meta["namespace"] != target:
            problems.append(f"{what}: must be in the provider namespace {target}")
        if kind in ("ClusterRoleBinding", "RoleBinding"):
            if (obj.get("roleRef") or {}).get("name") == "cluster-admin":
                problems.append(f"{what}: binds cluster-admin")
    deployments = [d for d in docs if d.get("kind") == "Deployment"]
    if namespace_required and not deployments:
        problems.append("no Deployment: the provider's controller is missing")
    for deployment in deployments:
        containers = (((deployment.get("spec") or {}).get("template") or {}).get("spec") or {}).get("containers") or []
        if not any(c.get("name") == "manager" for c in containers):
            problems.append(f"{describe(deployment)}: needs a container named 'manager'")
    return target


def check_metadata(path, tag, problems):
    with open(path, encoding="utf-8") as handle:
        meta = yaml.safe_load(handle) or {}
    if meta.get("apiVersion") != "clusterctl.cluster.x-k8s.io/v1alpha3":
        problems.append(f"{path}: apiVersion must be clusterctl.cluster.x-k8s.io/v1alpha3")
    if meta.get("kind") != "Metadata":
        problems.append(f"{path}: kind must be Metadata")
    series = meta.get("releaseSeries") or []
    if not series:
        problems.append(f"{path}: releaseSeries must not be empty")
    for entry in series:
        if not isinstance(entry.get("major"), int) or not isinstance(entry.get("minor"), int):
            problems.append(f"{path}: releaseSeries entry {entry} needs integer major and minor")
        if not re.fullmatch(r"v1beta[12]", str(entry.get("contract", ""))):
            problems.append(f"{path}: releaseSeries entry {entry} needs contract v1beta1 or v1beta2")
    if tag:
        match = re.fullmatch(r"v(\d+)\.(\d+)\.(\d+)(-[0-9A-Za-z.-]+)?", tag)
        if not match:
            problems.append(f"tag {tag!r} is not a semantic version vX.Y.Z")
        elif not any(e.get("major") == int(match.group(1)) and e.get("minor") == int(match.group(2)) for e in series):
            problems.append(f"{path}: releaseSeries has no entry for {match.group(1)}.{match.group(2)} (tag {tag})")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=["components", "extra", "metadata"])
    parser.add_argument("file")
    parser.add_argument("--provider-label", default="addon-fleet")
    parser.add_argument("--prefix", default="CAAPF_")
    parser.add_argument("--tag", default="")
    args = parser.parse_args()

    problems = []
    if args.mode == "metadata":
        check_metadata(args.file, args.tag, problems)
    else:
        text, docs = load(args.file)
        if not docs:
            problems.append("no objects")
        check_objects(docs, args.provider_label, problems, namespace_required=args.mode == "components")
        variables = check_variables(text, args.prefix, problems)
        for name, default in sorted(variables.items()):
            print(f"{name}={'' if default is None else default}" + ("" if default is not None else "  (required)"))
    if problems:
        for problem in problems:
            print(f"{args.file}: {problem}", file=sys.stderr)
        sys.exit(1)
    print(f"{args.file}: ok ({args.mode})", file=sys.stderr)


if __name__ == "__main__":
    main()
