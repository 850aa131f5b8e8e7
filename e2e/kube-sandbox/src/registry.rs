//! What resources exist: built-in kinds and the ones CRDs register.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;

/// A `additionalPrinterColumns` entry.
#[derive(Debug, Clone, PartialEq)]
pub struct PrinterColumn {
    /// Column header.
    pub name: String,
    /// `string`, `integer`, `number`, `boolean` or `date`.
    pub type_: String,
    /// Optional format (`name` for the name column).
    pub format: String,
    /// Description shown by `kubectl explain`-like tools.
    pub description: String,
    /// 0 = shown by default, >0 only with `-o wide`.
    pub priority: i64,
    /// The JSONPath evaluated against the object.
    pub json_path: String,
}

/// One served version of a resource.
#[derive(Debug, Clone, PartialEq)]
pub struct VersionDef {
    /// Version name (`v1`, `v1beta2`).
    pub name: String,
    /// `openAPIV3Schema` for CRDs; `None` for built-ins (stored without pruning).
    pub schema: Option<Value>,
    /// Printer columns (CRDs only; built-ins show NAME and AGE).
    pub columns: Vec<PrinterColumn>,
}

/// A resource type: one (group, plural) served in one or more versions, stored once.
#[derive(Debug, Clone, PartialEq)]
pub struct ResourceDef {
    /// API group, "" for the core group.
    pub group: String,
    /// Served versions, the storage (preferred) version first.
    pub versions: Vec<VersionDef>,
    /// Kind.
    pub kind: String,
    /// Plural resource name (URL segment).
    pub plural: String,
    /// Singular name.
    pub singular: String,
    /// Namespaced or cluster-scoped.
    pub namespaced: bool,
    /// Short names (`cm`, `deploy`).
    pub short_names: Vec<String>,
    /// Categories (`all`).
    pub categories: Vec<String>,
    /// Whether `/status` is a subresource (status is then ignored on the main resource).
    pub has_status: bool,
    /// Name of the CRD that registered this resource, `None` for built-ins.
    pub crd: Option<String>,
}

/// The verbs every resource here supports.
pub const VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

impl ResourceDef {
    /// The storage version.
    pub fn storage_version(&self) -> &str {
        &self.versions[0].name
    }

    /// A served version by name.
    pub fn version(&self, v: &str) -> Option<&VersionDef> {
        self.versions.iter().find(|x| x.name == v)
    }

    /// `apiVersion` for a version: `v1` or `group/v1`.
    pub fn api_version(&self, v: &str) -> String {
        if self.group.is_empty() {
            v.to_string()
        } else {
            format!("{}/{}", self.group, v)
        }
    }

    /// The kind of the list response (`ConfigMapList`).
    pub fn list_kind(&self) -> String {
        format!("{}List", self.kind)
    }

    /// Whether this resource is a custom resource (strategic merge patch is then unsupported).
    pub fn is_custom(&self) -> bool {
        self.crd.is_some()
    }
}

/// Shorthand to declare a built-in resource.
#[allow(clippy::too_many_arguments)]
fn builtin(
    group: &str,
    version: &str,
    kind: &str,
    plural: &str,
    namespaced: bool,
    short: &[&str],
    categories: &[&str],
    has_status: bool,
) -> ResourceDef {
    ResourceDef {
        group: group.into(),
        versions: vec![VersionDef {
            name: version.into(),
            schema: None,
            columns: Vec::new(),
        }],
        kind: kind.into(),
        plural: plural.into(),
        singular: kind.to_lowercase(),
        namespaced,
        short_names: short.iter().map(|s| s.to_string()).collect(),
        categories: categories.iter().map(|s| s.to_string()).collect(),
        has_status,
        crd: None,
    }
}

/// The built-in kinds the sandbox serves.
pub fn builtins() -> Vec<ResourceDef> {
    vec![
        builtin(
            "",
            "v1",
            "Namespace",
            "namespaces",
            false,
            &["ns"],
            &[],
            true,
        ),
        builtin(
            "",
            "v1",
            "ConfigMap",
            "configmaps",
            true,
            &["cm"],
            &[],
            false,
        ),
        builtin("", "v1", "Secret", "secrets", true, &[], &[], false),
        builtin(
            "",
            "v1",
            "ServiceAccount",
            "serviceaccounts",
            true,
            &["sa"],
            &[],
            false,
        ),
        builtin(
            "",
            "v1",
            "Service",
            "services",
            true,
            &["svc"],
            &["all"],
            true,
        ),
        builtin(
            "",
            "v1",
            "Endpoints",
            "endpoints",
            true,
            &["ep"],
            &[],
            false,
        ),
        builtin(
            "",
            "v1",
            "PersistentVolumeClaim",
            "persistentvolumeclaims",
            true,
            &["pvc"],
            &[],
            true,
        ),
        // Cluster-scoped storage objects a workload cluster's teardown waits for.
        builtin(
            "",
            "v1",
            "PersistentVolume",
            "persistentvolumes",
            false,
            &["pv"],
            &[],
            true,
        ),
        builtin(
            "storage.k8s.io",
            "v1",
            "VolumeAttachment",
            "volumeattachments",
            false,
            &[],
            &[],
            true,
        ),
        builtin("", "v1", "Event", "events", true, &["ev"], &[], false),
        builtin(
            "discovery.k8s.io",
            "v1",
            "EndpointSlice",
            "endpointslices",
            true,
            &[],
            &[],
            false,
        ),
        builtin(
            "events.k8s.io",
            "v1",
            "Event",
            "events",
            true,
            &["ev"],
            &[],
            false,
        ),
        builtin(
            "coordination.k8s.io",
            "v1",
            "Lease",
            "leases",
            true,
            &[],
            &[],
            false,
        ),
        builtin(
            "apps",
            "v1",
            "Deployment",
            "deployments",
            true,
            &["deploy"],
            &["all"],
            true,
        ),
        builtin(
            "apps",
            "v1",
            "ReplicaSet",
            "replicasets",
            true,
            &["rs"],
            &["all"],
            true,
        ),
        builtin("", "v1", "Pod", "pods", true, &["po"], &["all"], true),
        builtin(
            "apps",
            "v1",
            "StatefulSet",
            "statefulsets",
            true,
            &["sts"],
            &["all"],
            true,
        ),
        builtin(
            "apps",
            "v1",
            "DaemonSet",
            "daemonsets",
            true,
            &["ds"],
            &["all"],
            true,
        ),
        builtin("batch", "v1", "Job", "jobs", true, &[], &["all"], true),
        builtin(
            "batch",
            "v1",
            "CronJob",
            "cronjobs",
            true,
            &["cj"],
            &["all"],
            true,
        ),
        builtin(
            "policy",
            "v1",
            "PodDisruptionBudget",
            "poddisruptionbudgets",
            true,
            &["pdb"],
            &[],
            true,
        ),
        builtin(
            "networking.k8s.io",
            "v1",
            "NetworkPolicy",
            "networkpolicies",
            true,
            &["netpol"],
            &[],
            false,
        ),
        builtin(
            "networking.k8s.io",
            "v1",
            "Ingress",
            "ingresses",
            true,
            &["ing"],
            &[],
            true,
        ),
        builtin(
            "admissionregistration.k8s.io",
            "v1",
            "ValidatingWebhookConfiguration",
            "validatingwebhookconfigurations",
            false,
            &[],
            &["api-extensions"],
            false,
        ),
        builtin(
            "admissionregistration.k8s.io",
            "v1",
            "MutatingWebhookConfiguration",
            "mutatingwebhookconfigurations",
            false,
            &[],
            &["api-extensions"],
            false,
        ),
        builtin(
            "scheduling.k8s.io",
            "v1",
            "PriorityClass",
            "priorityclasses",
            false,
            &["pc"],
            &[],
            false,
        ),
        builtin(
            "rbac.authorization.k8s.io",
            "v1",
            "ClusterRole",
            "clusterroles",
            false,
            &[],
            &[],
            false,
        ),
        builtin(
            "rbac.authorization.k8s.io",
            "v1",
            "ClusterRoleBinding",
            "clusterrolebindings",
            false,
            &[],
            &[],
            false,
        ),
        builtin(
            "rbac.authorization.k8s.io",
            "v1",
            "Role",
            "roles",
            true,
            &[],
            &[],
            false,
        ),
        builtin(
            "rbac.authorization.k8s.io",
            "v1",
            "RoleBinding",
            "rolebindings",
            true,
            &[],
            &[],
            false,
        ),
        builtin(
            "authorization.k8s.io",
            "v1",
            "SelfSubjectAccessReview",
            "selfsubjectaccessreviews",
            false,
            &[],
            &[],
            false,
        ),
        builtin(
            "authorization.k8s.io",
            "v1",
            "SubjectAccessReview",
            "subjectaccessreviews",
            false,
            &[],
            &[],
            false,
        ),
        builtin(
            "apiextensions.k8s.io",
            "v1",
            "CustomResourceDefinition",
            "customresourcedefinitions",
            false,
            &["crd", "crds"],
            &["api-extensions"],
            true,
        ),
    ]
}

/// Storage key of a resource: (group, plural). Core events and `events.k8s.io` events are
/// separate stores here (on a real server they share one; see the README).
pub type GroupResource = (String, String);

/// All registered resources, indexed for URL resolution.
#[derive(Debug, Default, Clone)]
pub struct Registry {
    defs: BTreeMap<GroupResource, Arc<ResourceDef>>,
}

impl Registry {
    /// A registry holding the built-in kinds.
    pub fn with_builtins() -> Self {
        let mut r = Registry::default();
        for d in builtins() {
            r.insert(d);
        }
        r
    }

    /// Adds or replaces a resource.
    pub fn insert(&mut self, def: ResourceDef) -> Arc<ResourceDef> {
        let def = Arc::new(def);
        self.defs
            .insert((def.group.clone(), def.plural.clone()), def.clone());
        def
    }

    /// Removes a resource.
    pub fn remove(&mut self, group: &str, plural: &str) -> Option<Arc<ResourceDef>> {
        self.defs.remove(&(group.to_string(), plural.to_string()))
    }

    /// Looks up a resource by group and plural.
    pub fn get(&self, group: &str, plural: &str) -> Option<&Arc<ResourceDef>> {
        self.defs.get(&(group.to_string(), plural.to_string()))
    }

    /// Looks up a resource served at `group/version` under `plural`.
    pub fn resolve(&self, group: &str, version: &str, plural: &str) -> Option<Arc<ResourceDef>> {
        self.get(group, plural)
            .filter(|d| d.version(version).is_some())
            .cloned()
    }

    /// Looks up a resource by group and kind.
    pub fn by_kind(&self, group: &str, kind: &str) -> Option<Arc<ResourceDef>> {
        self.defs
            .values()
            .find(|d| d.group == group && d.kind == kind)
            .cloned()
    }

    /// All resources.
    pub fn all(&self) -> impl Iterator<Item = &Arc<ResourceDef>> {
        self.defs.values()
    }

    /// Groups with their versions, the preferred version first, core group ("") included.
    pub fn groups(&self) -> BTreeMap<String, Vec<String>> {
        let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for d in self.defs.values() {
            let vs = out.entry(d.group.clone()).or_default();
            for v in &d.versions {
                if !vs.contains(&v.name) {
                    vs.push(v.name.clone());
                }
            }
        }
        for vs in out.values_mut() {
            vs.sort_by_key(|v| std::cmp::Reverse(version_priority(v)));
        }
        out
    }
}

/// Kubernetes version ordering: GA > beta > alpha, then by number (v1 > v1beta2 > v1beta1 >
/// v1alpha1).
pub fn version_priority(v: &str) -> (u8, u32, u32) {
    let Some(rest) = v.strip_prefix('v') else {
        return (0, 0, 0);
    };
    let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
    let major = digits.parse().unwrap_or(0);
    let tail = &rest[digits.len()..];
    if tail.is_empty() {
        return (3, major, 0);
    }
    let (stage, num) = if let Some(n) = tail.strip_prefix("beta") {
        (2, n)
    } else if let Some(n) = tail.strip_prefix("alpha") {
        (1, n)
    } else {
        return (0, major, 0);
    };
    (stage, major, num.parse().unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_ordering() {
        let mut v = vec!["v1alpha1", "v1beta1", "v1", "v1beta2", "v2"];
        v.sort_by_key(|x| std::cmp::Reverse(version_priority(x)));
        assert_eq!(v, vec!["v2", "v1", "v1beta2", "v1beta1", "v1alpha1"]);
    }

    #[test]
    fn builtins_resolve() {
        let r = Registry::with_builtins();
        assert!(r.resolve("apps", "v1", "deployments").is_some());
        assert!(r.resolve("", "v1", "configmaps").is_some());
        assert!(r.resolve("apps", "v2", "deployments").is_none());
    }
}
