//! Decoding of Kubernetes protobuf request bodies for the built-in kinds that client-go's typed
//! clients send as protobuf: helm's release Secrets and the `kubectl create` generators
//! (namespace, configmap, secret, serviceaccount, deployment, service, role, clusterrole,
//! rolebinding, clusterrolebinding). Responses are always JSON, which those clients accept.
//!
//! Decoding is strict: a field this decoder does not know makes the whole body a 415, so
//! nothing is silently dropped. Other kinds answer 415 too.

use base64::Engine;
use serde_json::{Map, Value, json};

/// The magic prefix of Kubernetes protobuf payloads.
const MAGIC: &[u8] = b"k8s\x00";

#[derive(Clone, Copy)]
enum T {
    Str,
    /// An integer whose zero means "unset" (dropped).
    Int,
    /// An optional integer (pointer in Go): zero is kept.
    OptInt,
    /// `intstr.IntOrString`.
    IntOrStr,
    /// Known, and deliberately ignored (read-only or server-managed).
    Skip,
    Bool,
    Time,
    MapStr,
    MapBytes,
    RepStr,
    Msg(&'static [F]),
    RepMsg(&'static [F]),
}

type F = (u64, &'static str, T);

const OWNER_REF: &[F] = &[
    (1, "kind", T::Str),
    (3, "name", T::Str),
    (4, "uid", T::Str),
    (5, "apiVersion", T::Str),
    (6, "controller", T::Bool),
    (7, "blockOwnerDeletion", T::Bool),
];

const OBJECT_META: &[F] = &[
    (1, "name", T::Str),
    (2, "generateName", T::Str),
    (3, "namespace", T::Str),
    (4, "selfLink", T::Skip),
    (5, "uid", T::Str),
    (6, "resourceVersion", T::Str),
    (7, "generation", T::Int),
    (8, "creationTimestamp", T::Time),
    (9, "deletionTimestamp", T::Skip),
    (10, "deletionGracePeriodSeconds", T::Skip),
    (11, "labels", T::MapStr),
    (12, "annotations", T::MapStr),
    (13, "ownerReferences", T::RepMsg(OWNER_REF)),
    (14, "finalizers", T::RepStr),
    (15, "clusterName", T::Skip),
    (17, "managedFields", T::Skip),
];

const OBJECT_REF: &[F] = &[
    (1, "kind", T::Str),
    (2, "namespace", T::Str),
    (3, "name", T::Str),
    (4, "uid", T::Str),
    (5, "apiVersion", T::Str),
    (6, "resourceVersion", T::Str),
    (7, "fieldPath", T::Str),
];

const SELECTOR_REQ: &[F] = &[
    (1, "key", T::Str),
    (2, "operator", T::Str),
    (3, "values", T::RepStr),
];

const LABEL_SELECTOR: &[F] = &[
    (1, "matchLabels", T::MapStr),
    (2, "matchExpressions", T::RepMsg(SELECTOR_REQ)),
];

const CONTAINER_PORT: &[F] = &[
    (1, "name", T::Str),
    (2, "hostPort", T::Int),
    (3, "containerPort", T::Int),
    (4, "protocol", T::Str),
    (5, "hostIP", T::Str),
];

// Quantities are not decoded: only empty `resources` (what generators send) pass.
const RESOURCES: &[F] = &[];

const ENV_VAR: &[F] = &[(1, "name", T::Str), (2, "value", T::Str)];

const CONTAINER: &[F] = &[
    (1, "name", T::Str),
    (2, "image", T::Str),
    (3, "command", T::RepStr),
    (4, "args", T::RepStr),
    (5, "workingDir", T::Str),
    (6, "ports", T::RepMsg(CONTAINER_PORT)),
    (7, "env", T::RepMsg(ENV_VAR)),
    (8, "resources", T::Msg(RESOURCES)),
    (14, "imagePullPolicy", T::Str),
];

const POD_SPEC: &[F] = &[
    (2, "containers", T::RepMsg(CONTAINER)),
    (3, "restartPolicy", T::Str),
    (8, "serviceAccountName", T::Str),
];

const POD_TEMPLATE: &[F] = &[
    (1, "metadata", T::Msg(OBJECT_META)),
    (2, "spec", T::Msg(POD_SPEC)),
];

const ROLLING_UPDATE: &[F] = &[
    (1, "maxUnavailable", T::IntOrStr),
    (2, "maxSurge", T::IntOrStr),
];

const STRATEGY: &[F] = &[
    (1, "type", T::Str),
    (2, "rollingUpdate", T::Msg(ROLLING_UPDATE)),
];

const DEPLOYMENT_SPEC: &[F] = &[
    (1, "replicas", T::OptInt),
    (2, "selector", T::Msg(LABEL_SELECTOR)),
    (3, "template", T::Msg(POD_TEMPLATE)),
    (4, "strategy", T::Msg(STRATEGY)),
    (5, "minReadySeconds", T::Int),
    (6, "revisionHistoryLimit", T::OptInt),
    (7, "paused", T::Bool),
    (9, "progressDeadlineSeconds", T::OptInt),
];

const DEPLOYMENT: &[F] = &[
    (1, "metadata", T::Msg(OBJECT_META)),
    (2, "spec", T::Msg(DEPLOYMENT_SPEC)),
    (3, "status", T::Skip),
];

const SERVICE_PORT: &[F] = &[
    (1, "name", T::Str),
    (2, "protocol", T::Str),
    (3, "port", T::Int),
    (4, "targetPort", T::IntOrStr),
    (5, "nodePort", T::Int),
    (6, "appProtocol", T::Str),
];

const SERVICE_SPEC: &[F] = &[
    (1, "ports", T::RepMsg(SERVICE_PORT)),
    (2, "selector", T::MapStr),
    (3, "clusterIP", T::Str),
    (4, "type", T::Str),
    (5, "externalIPs", T::RepStr),
    (7, "sessionAffinity", T::Str),
    (10, "externalName", T::Str),
    (11, "externalTrafficPolicy", T::Str),
];

const SERVICE: &[F] = &[
    (1, "metadata", T::Msg(OBJECT_META)),
    (2, "spec", T::Msg(SERVICE_SPEC)),
    (3, "status", T::Skip),
];

const POLICY_RULE: &[F] = &[
    (1, "verbs", T::RepStr),
    (2, "apiGroups", T::RepStr),
    (3, "resources", T::RepStr),
    (4, "resourceNames", T::RepStr),
    (5, "nonResourceURLs", T::RepStr),
];

const ROLE: &[F] = &[
    (1, "metadata", T::Msg(OBJECT_META)),
    (2, "rules", T::RepMsg(POLICY_RULE)),
];

const AGGREGATION_RULE: &[F] = &[(1, "clusterRoleSelectors", T::RepMsg(LABEL_SELECTOR))];

const CLUSTER_ROLE: &[F] = &[
    (1, "metadata", T::Msg(OBJECT_META)),
    (2, "rules", T::RepMsg(POLICY_RULE)),
    (3, "aggregationRule", T::Msg(AGGREGATION_RULE)),
];

const SUBJECT: &[F] = &[
    (1, "kind", T::Str),
    (2, "apiGroup", T::Str),
    (3, "name", T::Str),
    (4, "namespace", T::Str),
];

const ROLE_REF: &[F] = &[
    (1, "apiGroup", T::Str),
    (2, "kind", T::Str),
    (3, "name", T::Str),
];

const BINDING: &[F] = &[
    (1, "metadata", T::Msg(OBJECT_META)),
    (2, "subjects", T::RepMsg(SUBJECT)),
    (3, "roleRef", T::Msg(ROLE_REF)),
];

const SECRET: &[F] = &[
    (1, "metadata", T::Msg(OBJECT_META)),
    (2, "data", T::MapBytes),
    (3, "type", T::Str),
    (4, "stringData", T::MapStr),
    (5, "immutable", T::Bool),
];

const CONFIG_MAP: &[F] = &[
    (1, "metadata", T::Msg(OBJECT_META)),
    (2, "data", T::MapStr),
    (3, "binaryData", T::MapBytes),
    (4, "immutable", T::Bool),
];

const NAMESPACE_SPEC: &[F] = &[(1, "finalizers", T::RepStr)];

const NAMESPACE: &[F] = &[
    (1, "metadata", T::Msg(OBJECT_META)),
    (2, "spec", T::Msg(NAMESPACE_SPEC)),
    (3, "status", T::Skip),
];

const LOCAL_REF: &[F] = &[(1, "name", T::Str)];

const SERVICE_ACCOUNT: &[F] = &[
    (1, "metadata", T::Msg(OBJECT_META)),
    (2, "secrets", T::RepMsg(OBJECT_REF)),
    (3, "imagePullSecrets", T::RepMsg(LOCAL_REF)),
    (4, "automountServiceAccountToken", T::Bool),
];

// authentication.k8s.io/v1 and authorization.k8s.io/v1 (`kubectl create token`,
// `kubectl auth can-i`), field numbers from k8s.io/api `authentication/v1/generated.proto` and
// `authorization/v1/generated.proto`.
const BOUND_OBJECT_REF: &[F] = &[
    (1, "kind", T::Str),
    (2, "apiVersion", T::Str),
    (3, "name", T::Str),
    (4, "uid", T::Str),
];

const TOKEN_REQUEST_SPEC: &[F] = &[
    (1, "audiences", T::RepStr),
    (3, "boundObjectRef", T::Msg(BOUND_OBJECT_REF)),
    (4, "expirationSeconds", T::OptInt),
];

const TOKEN_REQUEST: &[F] = &[
    (1, "metadata", T::Msg(OBJECT_META)),
    (2, "spec", T::Msg(TOKEN_REQUEST_SPEC)),
    (3, "status", T::Skip),
];

const RESOURCE_ATTRIBUTES: &[F] = &[
    (1, "namespace", T::Str),
    (2, "verb", T::Str),
    (3, "group", T::Str),
    (4, "version", T::Str),
    (5, "resource", T::Str),
    (6, "subresource", T::Str),
    (7, "name", T::Str),
    // Field and label selector attributes: not evaluated by RBAC.
    (8, "fieldSelector", T::Skip),
    (9, "labelSelector", T::Skip),
];

const NON_RESOURCE_ATTRIBUTES: &[F] = &[(1, "path", T::Str), (2, "verb", T::Str)];

const ACCESS_REVIEW_SPEC: &[F] = &[
    (1, "resourceAttributes", T::Msg(RESOURCE_ATTRIBUTES)),
    (2, "nonResourceAttributes", T::Msg(NON_RESOURCE_ATTRIBUTES)),
    (3, "user", T::Str),
    (4, "groups", T::RepStr),
    (5, "extra", T::Skip),
    (6, "uid", T::Str),
];

const ACCESS_REVIEW: &[F] = &[
    (1, "metadata", T::Msg(OBJECT_META)),
    (2, "spec", T::Msg(ACCESS_REVIEW_SPEC)),
    (3, "status", T::Skip),
];

const PRECONDITIONS: &[F] = &[(1, "uid", T::Str), (2, "resourceVersion", T::Str)];

const DELETE_OPTIONS: &[F] = &[
    (1, "gracePeriodSeconds", T::Int),
    (2, "preconditions", T::Msg(PRECONDITIONS)),
    (3, "orphanDependents", T::Bool),
    (4, "propagationPolicy", T::Str),
    (5, "dryRun", T::RepStr),
    (
        6,
        "ignoreStoreReadErrorWithClusterBreakingPotential",
        T::Bool,
    ),
];

/// Whether a Content-Type is Kubernetes protobuf.
pub fn is_protobuf(ct: &str) -> bool {
    ct.split(';').next().unwrap_or("").trim() == "application/vnd.kubernetes.protobuf"
}

/// Decodes a protobuf body into the JSON object it stands for; `None` when the payload is
/// malformed or of a kind this decoder does not know.
pub fn decode(body: &[u8]) -> Option<Value> {
    let rest = body.strip_prefix(MAGIC)?;
    let unknown = fields(rest)?;
    let mut api_version = String::new();
    let mut kind = String::new();
    let mut raw: &[u8] = &[];
    for (num, val) in unknown {
        match (num, val) {
            (1, Wire::Len(tm)) => {
                for (n, v) in fields(tm)? {
                    if let Wire::Len(s) = v {
                        let s = String::from_utf8(s.to_vec()).ok()?;
                        match n {
                            1 => api_version = s,
                            2 => kind = s,
                            _ => {}
                        }
                    }
                }
            }
            (2, Wire::Len(r)) => raw = r,
            _ => {}
        }
    }
    let schema = match (api_version.as_str(), kind.as_str()) {
        ("v1", "Secret") => SECRET,
        ("v1", "ConfigMap") => CONFIG_MAP,
        ("v1", "Namespace") => NAMESPACE,
        ("v1", "ServiceAccount") => SERVICE_ACCOUNT,
        (_, "DeleteOptions") => DELETE_OPTIONS,
        ("authentication.k8s.io/v1", "TokenRequest") => TOKEN_REQUEST,
        ("authorization.k8s.io/v1", "SelfSubjectAccessReview" | "SubjectAccessReview") => {
            ACCESS_REVIEW
        }
        ("apps/v1", "Deployment") => DEPLOYMENT,
        ("v1", "Service") => SERVICE,
        ("rbac.authorization.k8s.io/v1", "Role") => ROLE,
        ("rbac.authorization.k8s.io/v1", "ClusterRole") => CLUSTER_ROLE,
        ("rbac.authorization.k8s.io/v1", "RoleBinding" | "ClusterRoleBinding") => BINDING,
        _ => return None,
    };
    let mut obj = message(raw, schema)?;
    obj.insert("apiVersion".into(), json!(api_version));
    obj.insert("kind".into(), json!(kind));
    Some(Value::Object(obj))
}

enum Wire<'a> {
    Varint(u64),
    Len(&'a [u8]),
    Fixed,
}

fn varint(b: &[u8], i: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = *b.get(*i)?;
        *i += 1;
        v |= ((byte & 0x7f) as u64) << shift;
        if byte & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

fn fields(b: &[u8]) -> Option<Vec<(u64, Wire<'_>)>> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let key = varint(b, &mut i)?;
        let (num, wt) = (key >> 3, key & 7);
        let w = match wt {
            0 => Wire::Varint(varint(b, &mut i)?),
            2 => {
                let len = varint(b, &mut i)? as usize;
                let s = b.get(i..i.checked_add(len)?)?;
                i += len;
                Wire::Len(s)
            }
            1 => {
                i = i.checked_add(8)?;
                Wire::Fixed
            }
            5 => {
                i = i.checked_add(4)?;
                Wire::Fixed
            }
            _ => return None,
        };
        out.push((num, w));
    }
    (i == b.len()).then_some(out)
}

fn string(b: &[u8]) -> Option<String> {
    String::from_utf8(b.to_vec()).ok()
}

fn map_entry(b: &[u8], bytes: bool) -> Option<(String, Value)> {
    let mut k = String::new();
    let mut v = json!("");
    for (n, w) in fields(b)? {
        if let Wire::Len(s) = w {
            match n {
                1 => k = string(s)?,
                2 if bytes => v = json!(base64::engine::general_purpose::STANDARD.encode(s)),
                2 => v = json!(string(s)?),
                _ => {}
            }
        }
    }
    Some((k, v))
}

fn message(b: &[u8], schema: &[F]) -> Option<Map<String, Value>> {
    let mut obj = Map::new();
    for (num, w) in fields(b)? {
        let Some((_, name, t)) = schema.iter().find(|(n, _, _)| *n == num) else {
            // Unknown fields fail the decode, unless they hold a zero value (the Go encoding
            // writes every non-pointer field, so `stdin: false` or `hostNetwork: false` arrive
            // as zeros and carry nothing to lose).
            match w {
                Wire::Len([]) | Wire::Varint(0) => continue,
                _ => {
                    tracing::info!(
                        field = num,
                        "protobuf body has a field the sandbox does not decode"
                    );
                    return None;
                }
            }
        };
        let name = name.to_string();
        match (t, w) {
            // Empty strings and zeros are how the proto2-style encoding says "unset".
            (T::Str, Wire::Len(s)) => {
                if !s.is_empty() {
                    obj.insert(name, json!(string(s)?));
                }
            }
            (T::Int, Wire::Varint(v)) => {
                if v != 0 {
                    obj.insert(name, json!(v as i64));
                }
            }
            (T::OptInt, Wire::Varint(v)) => {
                obj.insert(name, json!(v as i64));
            }
            (T::Skip, _) => {}
            (T::IntOrStr, Wire::Len(s)) => {
                let (mut ty, mut int, mut st) = (0, 0i64, String::new());
                for (n, w) in fields(s)? {
                    match (n, w) {
                        (1, Wire::Varint(v)) => ty = v,
                        (2, Wire::Varint(v)) => int = v as i64,
                        (3, Wire::Len(b)) => st = string(b)?,
                        _ => return None,
                    }
                }
                obj.insert(name, if ty == 1 { json!(st) } else { json!(int) });
            }
            (T::Bool, Wire::Varint(v)) => {
                obj.insert(name, json!(v != 0));
            }
            (T::Time, Wire::Len(s)) => {
                let mut secs = 0i64;
                for (n, w) in fields(s)? {
                    if let (1, Wire::Varint(v)) = (n, w) {
                        secs = v as i64;
                    }
                }
                if let Ok(ts) = jiff::Timestamp::from_second(secs) {
                    obj.insert(name, json!(ts.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()));
                }
            }
            (T::MapStr | T::MapBytes, Wire::Len(s)) => {
                let (k, v) = map_entry(s, matches!(t, T::MapBytes))?;
                let m = obj.entry(name).or_insert_with(|| json!({}));
                if let Some(m) = m.as_object_mut() {
                    m.insert(k, v);
                }
            }
            (T::RepStr, Wire::Len(s)) => {
                let a = obj.entry(name).or_insert_with(|| json!([]));
                if let Some(a) = a.as_array_mut() {
                    a.push(json!(string(s)?));
                }
            }
            (T::Msg(inner), Wire::Len(s)) => {
                obj.insert(name, Value::Object(message(s, inner)?));
            }
            (T::RepMsg(inner), Wire::Len(s)) => {
                let m = message(s, inner)?;
                let a = obj.entry(name).or_insert_with(|| json!([]));
                if let Some(a) = a.as_array_mut() {
                    a.push(Value::Object(m));
                }
            }
            _ => return None,
        }
    }
    Some(obj)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn len_field(num: u64, b: &[u8]) -> Vec<u8> {
        let mut out = vec![((num << 3) | 2) as u8, b.len() as u8];
        out.extend_from_slice(b);
        out
    }

    #[test]
    fn decodes_a_secret() {
        let mut meta = len_field(1, b"sh.helm.release.v1.demo.v1");
        meta.extend(len_field(3, b"default"));
        let mut label = len_field(1, b"owner");
        label.extend(len_field(2, b"helm"));
        meta.extend(len_field(11, &label));
        let mut secret = len_field(1, &meta);
        let mut entry = len_field(1, b"release");
        entry.extend(len_field(2, b"\x01\x02"));
        secret.extend(len_field(2, &entry));
        secret.extend(len_field(3, b"helm.sh/release.v1"));
        let mut tm = len_field(1, b"v1");
        tm.extend(len_field(2, b"Secret"));
        let mut body = MAGIC.to_vec();
        body.extend(len_field(1, &tm));
        body.extend(len_field(2, &secret));
        let v = decode(&body).unwrap();
        assert_eq!(
            v,
            json!({"apiVersion": "v1", "kind": "Secret", "type": "helm.sh/release.v1",
                   "metadata": {"name": "sh.helm.release.v1.demo.v1", "namespace": "default", "labels": {"owner": "helm"}},
                   "data": {"release": "AQI="}})
        );
        assert!(decode(b"k8s\x00\xff").is_none());
    }

    fn configmap_with(extra: &[u8]) -> Vec<u8> {
        let mut cm = len_field(1, &len_field(1, b"c"));
        cm.extend_from_slice(extra);
        let mut tm = len_field(1, b"v1");
        tm.extend(len_field(2, b"ConfigMap"));
        let mut body = MAGIC.to_vec();
        body.extend(len_field(1, &tm));
        body.extend(len_field(2, &cm));
        body
    }

    #[test]
    fn unknown_fields_fail_unless_zero() {
        // Field 9 is not in the ConfigMap schema: zero values pass, real content fails.
        assert!(decode(&configmap_with(&[9 << 3, 0])).is_some());
        assert!(decode(&configmap_with(&len_field(9, b""))).is_some());
        assert!(decode(&configmap_with(&[9 << 3, 1])).is_none());
        assert!(decode(&configmap_with(&len_field(9, b"x"))).is_none());
    }
}
