//! RBAC authorization as the real API server does it: pure rule matching and rule resolution
//! from the Roles, ClusterRoles and bindings stored in the sandbox.
//!
//! Follows kubernetes `plugin/pkg/auth/authorizer/rbac/rbac.go` (`RuleAllows`),
//! `pkg/apis/rbac/v1/evaluation_helpers.go` (`VerbMatches`, `APIGroupMatches`,
//! `ResourceMatches` with `*/subresource`, `ResourceNameMatches`, `NonResourceURLMatches` with
//! a trailing `*`) and `pkg/registry/rbac/validation/rule.go` (`VisitRulesFor`: every
//! ClusterRoleBinding, then the RoleBindings of the request's namespace; `appliesToUser`:
//! User by name, Group by membership, ServiceAccount by `system:serviceaccount:NS:NAME`).
//! The messages follow `k8s.io/apiserver` `pkg/endpoints/handlers/responsewriters/errors.go`
//! (`forbiddenMessage`) and apimachinery's `NewForbidden`.
//!
//! Aggregated ClusterRoles (`aggregationRule`) are resolved here, when the policy is built, from
//! the ClusterRoles their selectors match (recursively), instead of by a controller writing
//! `rules` as kube-controller-manager's `clusterroleaggregation` controller does: the
//! authorization result is the same, but `kubectl get clusterrole` shows the stored rules.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, Subject,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde_json::Value;

/// The group every request of the built-in admin carries: allowed everything, as on a real
/// server (`system:masters` is authorized before RBAC).
pub const SYSTEM_MASTERS: &str = "system:masters";
/// Group of every authenticated user.
pub const SYSTEM_AUTHENTICATED: &str = "system:authenticated";
/// Group of every ServiceAccount.
pub const SYSTEM_SERVICEACCOUNTS: &str = "system:serviceaccounts";
/// Username prefix of ServiceAccounts.
pub const SERVICEACCOUNT_PREFIX: &str = "system:serviceaccount:";

/// An authenticated identity.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct UserInfo {
    /// User name (`system:serviceaccount:NS:NAME` for ServiceAccounts).
    pub name: String,
    /// Groups.
    pub groups: Vec<String>,
}

impl UserInfo {
    /// The identity of a ServiceAccount, with the groups a real server gives it.
    pub fn service_account(namespace: &str, name: &str) -> UserInfo {
        UserInfo {
            name: format!("{SERVICEACCOUNT_PREFIX}{namespace}:{name}"),
            groups: vec![
                SYSTEM_SERVICEACCOUNTS.to_string(),
                format!("{SYSTEM_SERVICEACCOUNTS}:{namespace}"),
                SYSTEM_AUTHENTICATED.to_string(),
            ],
        }
    }

    /// A user with groups; `system:authenticated` is added, as the real authenticator does.
    pub fn user(name: &str, groups: &[&str]) -> UserInfo {
        let mut g: Vec<String> = groups.iter().map(|s| s.to_string()).collect();
        if !g.iter().any(|x| x == SYSTEM_AUTHENTICATED) {
            g.push(SYSTEM_AUTHENTICATED.to_string());
        }
        UserInfo {
            name: name.to_string(),
            groups: g,
        }
    }

    /// Whether the user is in `system:masters`.
    pub fn is_master(&self) -> bool {
        self.groups.iter().any(|g| g == SYSTEM_MASTERS)
    }
}

/// What a request asks to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// A request for an API resource.
    Resource {
        /// RBAC verb (`get`, `list`, `watch`, `create`, `update`, `patch`, `delete`,
        /// `deletecollection`, or any custom verb).
        verb: String,
        /// API group ("" for core).
        group: String,
        /// Resource plural.
        resource: String,
        /// Subresource ("" for none).
        subresource: String,
        /// Namespace ("" for cluster-scoped or all namespaces).
        namespace: String,
        /// Object name ("" for collections).
        name: String,
    },
    /// A request for a path outside the resource API (`/version`, `/healthz`, `/apis`).
    NonResource {
        /// Lowercase HTTP method (`get`, `post`, ...).
        verb: String,
        /// The URL path.
        path: String,
    },
}

impl Action {
    /// The request's namespace ("" for cluster scope and non-resource requests).
    pub fn namespace(&self) -> &str {
        match self {
            Action::Resource { namespace, .. } => namespace,
            Action::NonResource { .. } => "",
        }
    }
}

/// Whether `rule` allows `action` (`RuleAllows`).
pub fn rule_allows(action: &Action, rule: &PolicyRule) -> bool {
    match action {
        Action::Resource {
            verb,
            group,
            resource,
            subresource,
            name,
            ..
        } => {
            let combined = if subresource.is_empty() {
                resource.clone()
            } else {
                format!("{resource}/{subresource}")
            };
            verb_matches(rule, verb)
                && api_group_matches(rule, group)
                && resource_matches(rule, &combined, subresource)
                && resource_name_matches(rule, name)
        }
        Action::NonResource { verb, path } => {
            verb_matches(rule, verb) && non_resource_url_matches(rule, path)
        }
    }
}

fn verb_matches(rule: &PolicyRule, verb: &str) -> bool {
    rule.verbs.iter().any(|v| v == "*" || v == verb)
}

fn api_group_matches(rule: &PolicyRule, group: &str) -> bool {
    rule.api_groups
        .iter()
        .flatten()
        .any(|g| g == "*" || g == group)
}

fn resource_matches(rule: &PolicyRule, combined: &str, subresource: &str) -> bool {
    rule.resources.iter().flatten().any(|r| {
        r == "*"
            || r == combined
            || (!subresource.is_empty()
                && r.strip_prefix("*/").is_some_and(|sub| sub == subresource))
    })
}

fn resource_name_matches(rule: &PolicyRule, name: &str) -> bool {
    match &rule.resource_names {
        None => true,
        Some(names) if names.is_empty() => true,
        Some(names) => names.iter().any(|n| n == name),
    }
}

fn non_resource_url_matches(rule: &PolicyRule, path: &str) -> bool {
    rule.non_resource_urls.iter().flatten().any(|u| {
        u == "*"
            || u == path
            || u.strip_suffix('*')
                .is_some_and(|prefix| path.starts_with(prefix.trim_end_matches('*')))
    })
}

/// Whether a binding subject names `user` (`appliesToUser`). `binding_namespace` is the
/// namespace of a RoleBinding ("" for ClusterRoleBindings); a ServiceAccount subject without a
/// namespace never matches, as on a real server.
pub fn subject_applies(subject: &Subject, user: &UserInfo) -> bool {
    match subject.kind.as_str() {
        "User" => subject.name == user.name,
        "Group" => user.groups.contains(&subject.name),
        "ServiceAccount" => match subject.namespace.as_deref() {
            Some(ns) if !ns.is_empty() => {
                user.name == format!("{SERVICEACCOUNT_PREFIX}{ns}:{}", subject.name)
            }
            _ => false,
        },
        _ => false,
    }
}

/// Whether a label selector matches a label set (`matchLabels` and `matchExpressions`
/// `In`, `NotIn`, `Exists`, `DoesNotExist`). An empty selector matches everything.
pub fn label_selector_matches(sel: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    let labels_ok = sel
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    let exprs_ok = sel.match_expressions.iter().flatten().all(|e| {
        let values = e.values.as_deref().unwrap_or(&[]);
        match e.operator.as_str() {
            "In" => labels.get(&e.key).is_some_and(|v| values.contains(v)),
            "NotIn" => labels.get(&e.key).is_none_or(|v| !values.contains(v)),
            "Exists" => labels.contains_key(&e.key),
            "DoesNotExist" => !labels.contains_key(&e.key),
            _ => false,
        }
    });
    labels_ok && exprs_ok
}

/// The outcome of an authorization.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// Allowed.
    pub allowed: bool,
    /// The reason (the allowing binding, or resolution errors such as a missing role).
    pub reason: String,
}

/// The RBAC objects of a sandbox, parsed and indexed. Built again whenever an RBAC object
/// changes; authorization then only walks the bindings that can apply.
#[derive(Debug, Default)]
pub struct Policy {
    /// ClusterRole name -> effective rules (aggregation resolved).
    cluster_roles: BTreeMap<String, Vec<PolicyRule>>,
    /// (namespace, name) -> Role rules.
    roles: BTreeMap<(String, String), Vec<PolicyRule>>,
    /// ClusterRoleBindings.
    cluster_role_bindings: Vec<ClusterRoleBinding>,
    /// namespace -> RoleBindings.
    role_bindings: BTreeMap<String, Vec<RoleBinding>>,
}

fn parse<T: serde::de::DeserializeOwned>(v: &Value) -> Option<T> {
    serde_json::from_value(v.clone()).ok()
}

impl Policy {
    /// Builds a policy from stored objects (objects that do not parse are ignored, as an
    /// informer of a real server would never see them).
    pub fn build<'a>(
        cluster_roles: impl IntoIterator<Item = &'a Value>,
        roles: impl IntoIterator<Item = &'a Value>,
        cluster_role_bindings: impl IntoIterator<Item = &'a Value>,
        role_bindings: impl IntoIterator<Item = &'a Value>,
    ) -> Policy {
        let crs: BTreeMap<String, ClusterRole> = cluster_roles
            .into_iter()
            .filter_map(parse::<ClusterRole>)
            .map(|c| (c.metadata.name.clone().unwrap_or_default(), c))
            .collect();
        let mut resolved = BTreeMap::new();
        for name in crs.keys() {
            let mut seen = BTreeSet::new();
            let rules = effective_rules(&crs, name, &mut seen);
            resolved.insert(name.clone(), rules);
        }
        let roles = roles
            .into_iter()
            .filter_map(parse::<Role>)
            .map(|r| {
                (
                    (
                        r.metadata.namespace.clone().unwrap_or_default(),
                        r.metadata.name.clone().unwrap_or_default(),
                    ),
                    r.rules.unwrap_or_default(),
                )
            })
            .collect();
        let mut rbs: BTreeMap<String, Vec<RoleBinding>> = BTreeMap::new();
        for rb in role_bindings.into_iter().filter_map(parse::<RoleBinding>) {
            rbs.entry(rb.metadata.namespace.clone().unwrap_or_default())
                .or_default()
                .push(rb);
        }
        Policy {
            cluster_roles: resolved,
            roles,
            cluster_role_bindings: cluster_role_bindings
                .into_iter()
                .filter_map(parse::<ClusterRoleBinding>)
                .collect(),
            role_bindings: rbs,
        }
    }

    /// Visits the rules that apply to `user` in `namespace`, in the real resolver's order
    /// (ClusterRoleBindings, then the namespace's RoleBindings). `visit` gets a description of
    /// the binding and the rule; it returns `false` to stop. Returns the resolution errors
    /// (bindings to roles that do not exist), formatted as the real server formats them.
    pub fn visit_rules(
        &self,
        user: &UserInfo,
        namespace: &str,
        mut visit: impl FnMut(&str, &PolicyRule) -> bool,
    ) -> Vec<String> {
        let mut errors = Vec::new();
        for crb in &self.cluster_role_bindings {
            if !crb
                .subjects
                .iter()
                .flatten()
                .any(|s| subject_applies(s, user))
            {
                continue;
            }
            let name = crb.metadata.name.as_deref().unwrap_or_default();
            if crb.role_ref.kind != "ClusterRole" {
                continue;
            }
            match self.cluster_roles.get(&crb.role_ref.name) {
                Some(rules) => {
                    let source = format!(
                        "ClusterRoleBinding \"{name}\" of ClusterRole \"{}\" to {}",
                        crb.role_ref.name,
                        describe_subject(crb.subjects.iter().flatten(), user)
                    );
                    for r in rules {
                        if !visit(&source, r) {
                            return errors;
                        }
                    }
                }
                None => errors.push(format!(
                    "clusterrole.rbac.authorization.k8s.io \"{}\" not found",
                    crb.role_ref.name
                )),
            }
        }
        if namespace.is_empty() {
            return errors;
        }
        for rb in self.role_bindings.get(namespace).into_iter().flatten() {
            if !rb
                .subjects
                .iter()
                .flatten()
                .any(|s| subject_applies(s, user))
            {
                continue;
            }
            let name = rb.metadata.name.as_deref().unwrap_or_default();
            let rules = match rb.role_ref.kind.as_str() {
                "ClusterRole" => self.cluster_roles.get(&rb.role_ref.name).ok_or_else(|| {
                    format!(
                        "clusterrole.rbac.authorization.k8s.io \"{}\" not found",
                        rb.role_ref.name
                    )
                }),
                "Role" => self
                    .roles
                    .get(&(namespace.to_string(), rb.role_ref.name.clone()))
                    .ok_or_else(|| {
                        format!(
                            "role.rbac.authorization.k8s.io \"{}\" not found",
                            rb.role_ref.name
                        )
                    }),
                _ => continue,
            };
            match rules {
                Ok(rules) => {
                    let source = format!(
                        "RoleBinding \"{name}/{namespace}\" of {} \"{}\" to {}",
                        rb.role_ref.kind,
                        rb.role_ref.name,
                        describe_subject(rb.subjects.iter().flatten(), user)
                    );
                    for r in rules {
                        if !visit(&source, r) {
                            return errors;
                        }
                    }
                }
                Err(e) => errors.push(e),
            }
        }
        errors
    }

    /// The rules of the role a binding in `namespace` refers to (`GetRoleReferenceRules`;
    /// a ClusterRole's with aggregation resolved); `None` when it does not exist.
    pub fn role_rules(&self, kind: &str, namespace: &str, name: &str) -> Option<Vec<PolicyRule>> {
        match kind {
            "ClusterRole" => self.cluster_roles.get(name).cloned(),
            "Role" => self
                .roles
                .get(&(namespace.to_string(), name.to_string()))
                .cloned(),
            _ => None,
        }
    }

    /// Authorizes an action (`system:masters` is always allowed).
    pub fn authorize(&self, user: &UserInfo, action: &Action) -> Decision {
        if user.is_master() {
            return Decision {
                allowed: true,
                reason: String::new(),
            };
        }
        let mut allowed_by = None;
        let errors = self.visit_rules(user, action.namespace(), |source, rule| {
            if rule_allows(action, rule) {
                allowed_by = Some(format!("RBAC: allowed by {source}"));
                false
            } else {
                true
            }
        });
        match allowed_by {
            Some(reason) => Decision {
                allowed: true,
                reason,
            },
            None if errors.is_empty() => Decision {
                allowed: false,
                reason: String::new(),
            },
            None => Decision {
                allowed: false,
                reason: format!("RBAC: {}", aggregate(&errors)),
            },
        }
    }
}

/// utilerrors.NewAggregate's format: one error as is, several as `[a, b]`.
fn aggregate(errors: &[String]) -> String {
    if errors.len() == 1 {
        errors[0].clone()
    } else {
        format!("[{}]", errors.join(", "))
    }
}

fn describe_subject<'a>(subjects: impl Iterator<Item = &'a Subject>, user: &UserInfo) -> String {
    subjects
        .filter(|s| subject_applies(s, user))
        .map(|s| match &s.namespace {
            Some(ns) if s.kind == "ServiceAccount" => format!("{} \"{ns}/{}\"", s.kind, s.name),
            _ => format!("{} \"{}\"", s.kind, s.name),
        })
        .next()
        .unwrap_or_default()
}

/// Rules of a ClusterRole: its own `rules`, plus (for an aggregated role) the effective rules
/// of every other ClusterRole one of its selectors matches, in name order, without repeats.
fn effective_rules(
    all: &BTreeMap<String, ClusterRole>,
    name: &str,
    seen: &mut BTreeSet<String>,
) -> Vec<PolicyRule> {
    if !seen.insert(name.to_string()) {
        return Vec::new();
    }
    let Some(role) = all.get(name) else {
        return Vec::new();
    };
    let Some(agg) = &role.aggregation_rule else {
        return role.rules.clone().unwrap_or_default();
    };
    let selectors = agg.cluster_role_selectors.as_deref().unwrap_or(&[]);
    let mut rules: Vec<PolicyRule> = Vec::new();
    for (other, r) in all {
        if other == name {
            continue;
        }
        let labels = r.metadata.labels.clone().unwrap_or_default();
        if selectors.iter().any(|s| label_selector_matches(s, &labels)) {
            for rule in effective_rules(all, other, seen) {
                if !rules.contains(&rule) {
                    rules.push(rule);
                }
            }
        }
    }
    rules
}

/// The message of a 403 (`forbiddenMessage` and apimachinery's `NewForbidden`), e.g.
/// `configmaps "x" is forbidden: User "u" cannot get resource "configmaps" in API group "" in
/// the namespace "ns"`. `reason` is appended after `": "` when not empty.
pub fn forbidden_message(user: &UserInfo, action: &Action, reason: &str) -> String {
    let inner = match action {
        Action::NonResource { verb, path } => {
            format!("User \"{}\" cannot {verb} path \"{path}\"", user.name)
        }
        Action::Resource {
            verb,
            group,
            resource,
            subresource,
            namespace,
            ..
        } => {
            let res = if subresource.is_empty() {
                resource.clone()
            } else {
                format!("{resource}/{subresource}")
            };
            if namespace.is_empty() {
                format!(
                    "User \"{}\" cannot {verb} resource \"{res}\" in API group \"{group}\" at the cluster scope",
                    user.name
                )
            } else {
                format!(
                    "User \"{}\" cannot {verb} resource \"{res}\" in API group \"{group}\" in the namespace \"{namespace}\"",
                    user.name
                )
            }
        }
    };
    // The real server escapes what could read as HTML.
    let inner = inner
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;");
    let err = if reason.is_empty() {
        inner
    } else {
        format!("{inner}: {reason}")
    };
    match action {
        Action::NonResource { .. } => format!("forbidden: {err}"),
        Action::Resource {
            group,
            resource,
            name,
            ..
        } => {
            let gr = crate::error::qualified(group, resource);
            if name.is_empty() {
                format!("{gr} is forbidden: {err}")
            } else {
                format!("{gr} \"{name}\" is forbidden: {err}")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rule(v: Value) -> PolicyRule {
        serde_json::from_value(v).unwrap()
    }

    fn res(verb: &str, group: &str, resource: &str, sub: &str, ns: &str, name: &str) -> Action {
        Action::Resource {
            verb: verb.into(),
            group: group.into(),
            resource: resource.into(),
            subresource: sub.into(),
            namespace: ns.into(),
            name: name.into(),
        }
    }

    fn path(verb: &str, p: &str) -> Action {
        Action::NonResource {
            verb: verb.into(),
            path: p.into(),
        }
    }

    #[test]
    fn rule_matching() {
        let cases: Vec<(&str, Value, Action, bool)> = vec![
            (
                "exact",
                json!({"verbs": ["get"], "apiGroups": [""], "resources": ["configmaps"]}),
                res("get", "", "configmaps", "", "ns", "x"),
                true,
            ),
            (
                "other verb",
                json!({"verbs": ["get"], "apiGroups": [""], "resources": ["configmaps"]}),
                res("list", "", "configmaps", "", "ns", ""),
                false,
            ),
            (
                "other group",
                json!({"verbs": ["get"], "apiGroups": ["apps"], "resources": ["configmaps"]}),
                res("get", "", "configmaps", "", "ns", "x"),
                false,
            ),
            (
                "wildcards",
                json!({"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}),
                res("deletecollection", "x.io", "things", "status", "", ""),
                true,
            ),
            (
                "resource does not grant its subresource",
                json!({"verbs": ["patch"], "apiGroups": ["cluster.x-k8s.io"], "resources": ["clusters"]}),
                res("patch", "cluster.x-k8s.io", "clusters", "status", "ns", "c"),
                false,
            ),
            (
                "subresource named",
                json!({"verbs": ["patch"], "apiGroups": ["cluster.x-k8s.io"], "resources": ["clusters/status"]}),
                res("patch", "cluster.x-k8s.io", "clusters", "status", "ns", "c"),
                true,
            ),
            (
                "subresource does not grant the resource",
                json!({"verbs": ["patch"], "apiGroups": ["cluster.x-k8s.io"], "resources": ["clusters/status"]}),
                res("patch", "cluster.x-k8s.io", "clusters", "", "ns", "c"),
                false,
            ),
            (
                "*/subresource",
                json!({"verbs": ["get"], "apiGroups": ["*"], "resources": ["*/status"]}),
                res("get", "apps", "deployments", "status", "ns", "d"),
                true,
            ),
            (
                "*/subresource is not */other",
                json!({"verbs": ["get"], "apiGroups": ["*"], "resources": ["*/status"]}),
                res("get", "", "serviceaccounts", "token", "ns", "d"),
                false,
            ),
            (
                "resourceNames match",
                json!({"verbs": ["get"], "apiGroups": ["addons.cluster.x-k8s.io"], "resources": ["fleetaddonconfigs"], "resourceNames": ["fleet-addon-config"]}),
                res(
                    "get",
                    "addons.cluster.x-k8s.io",
                    "fleetaddonconfigs",
                    "",
                    "",
                    "fleet-addon-config",
                ),
                true,
            ),
            (
                "resourceNames other name",
                json!({"verbs": ["get"], "apiGroups": ["addons.cluster.x-k8s.io"], "resources": ["fleetaddonconfigs"], "resourceNames": ["fleet-addon-config"]}),
                res(
                    "get",
                    "addons.cluster.x-k8s.io",
                    "fleetaddonconfigs",
                    "",
                    "",
                    "other",
                ),
                false,
            ),
            (
                "resourceNames never allow a list",
                json!({"verbs": ["list"], "apiGroups": [""], "resources": ["secrets"], "resourceNames": ["s"]}),
                res("list", "", "secrets", "", "ns", ""),
                false,
            ),
            (
                "non-resource exact",
                json!({"verbs": ["get"], "nonResourceURLs": ["/version"]}),
                path("get", "/version"),
                true,
            ),
            (
                "non-resource prefix",
                json!({"verbs": ["get"], "nonResourceURLs": ["/healthz/*"]}),
                path("get", "/healthz/etcd"),
                true,
            ),
            (
                "non-resource prefix needs the slash",
                json!({"verbs": ["get"], "nonResourceURLs": ["/healthz/*"]}),
                path("get", "/healthz"),
                false,
            ),
            (
                "non-resource star",
                json!({"verbs": ["get"], "nonResourceURLs": ["*"]}),
                path("get", "/anything"),
                true,
            ),
            (
                "resource rule does not grant paths",
                json!({"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}),
                path("get", "/version"),
                false,
            ),
            (
                "path rule does not grant resources",
                json!({"verbs": ["*"], "nonResourceURLs": ["*"]}),
                res("get", "", "pods", "", "ns", "p"),
                false,
            ),
        ];
        for (what, r, action, want) in cases {
            assert_eq!(rule_allows(&action, &rule(r)), want, "{what}");
        }
    }

    #[test]
    fn subjects() {
        let sa = UserInfo::service_account("caapf-system", "caapf");
        let user = UserInfo::user("alice", &["devs"]);
        let s = |v: Value| -> Subject { serde_json::from_value(v).unwrap() };
        let cases = [
            (
                json!({"kind": "ServiceAccount", "name": "caapf", "namespace": "caapf-system"}),
                &sa,
                true,
            ),
            (
                json!({"kind": "ServiceAccount", "name": "caapf", "namespace": "other"}),
                &sa,
                false,
            ),
            (
                json!({"kind": "ServiceAccount", "name": "caapf"}),
                &sa,
                false,
            ),
            (
                json!({"kind": "Group", "name": "system:serviceaccounts"}),
                &sa,
                true,
            ),
            (
                json!({"kind": "Group", "name": "system:serviceaccounts:caapf-system"}),
                &sa,
                true,
            ),
            (
                json!({"kind": "Group", "name": "system:serviceaccounts:other"}),
                &sa,
                false,
            ),
            (
                json!({"kind": "Group", "name": "system:authenticated"}),
                &user,
                true,
            ),
            (json!({"kind": "Group", "name": "devs"}), &user, true),
            (json!({"kind": "User", "name": "alice"}), &user, true),
            (json!({"kind": "User", "name": "bob"}), &user, false),
            (
                json!({"kind": "User", "name": "system:serviceaccount:caapf-system:caapf"}),
                &sa,
                true,
            ),
        ];
        for (subject, u, want) in cases {
            assert_eq!(subject_applies(&s(subject.clone()), u), want, "{subject}");
        }
    }

    fn policy(objs: Vec<Value>) -> Policy {
        let of = |k: &str| -> Vec<Value> {
            objs.iter()
                .filter(|o| o["kind"] == k)
                .cloned()
                .collect::<Vec<_>>()
        };
        Policy::build(
            &of("ClusterRole"),
            &of("Role"),
            &of("ClusterRoleBinding"),
            &of("RoleBinding"),
        )
    }

    fn cr(name: &str, labels: Value, rules: Value) -> Value {
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
               "metadata": {"name": name, "labels": labels}, "rules": rules})
    }

    fn binding(
        kind: &str,
        ns: &str,
        name: &str,
        role_kind: &str,
        role: &str,
        subj: Value,
    ) -> Value {
        let mut meta = json!({"name": name});
        if !ns.is_empty() {
            meta["namespace"] = json!(ns);
        }
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind, "metadata": meta,
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role},
               "subjects": [subj]})
    }

    #[test]
    fn resolution_and_aggregation() {
        let sa = UserInfo::service_account("caapf-system", "caapf");
        let subj = json!({"kind": "ServiceAccount", "name": "caapf", "namespace": "caapf-system"});
        let p = policy(vec![
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                   "metadata": {"name": "agg"},
                   "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"agg": "true"}}]}}),
            cr(
                "part-a",
                json!({"agg": "true"}),
                json!([{"verbs": ["get"], "apiGroups": [""], "resources": ["secrets"]}]),
            ),
            cr(
                "part-b",
                json!({"agg": "true"}),
                json!([{"verbs": ["list"], "apiGroups": [""], "resources": ["secrets"]}]),
            ),
            cr(
                "unrelated",
                json!({"agg": "false"}),
                json!([{"verbs": ["delete"], "apiGroups": [""], "resources": ["secrets"]}]),
            ),
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                   "metadata": {"name": "leader", "namespace": "caapf-system"},
                   "rules": [{"verbs": ["update"], "apiGroups": ["coordination.k8s.io"], "resources": ["leases"]}]}),
            binding(
                "ClusterRoleBinding",
                "",
                "b1",
                "ClusterRole",
                "agg",
                subj.clone(),
            ),
            binding(
                "RoleBinding",
                "caapf-system",
                "b2",
                "Role",
                "leader",
                subj.clone(),
            ),
            binding(
                "RoleBinding",
                "team",
                "b3",
                "ClusterRole",
                "unrelated",
                subj.clone(),
            ),
        ]);
        let cases = [
            (
                "aggregated a",
                res("get", "", "secrets", "", "x", "s"),
                true,
            ),
            ("aggregated b", res("list", "", "secrets", "", "", ""), true),
            (
                "not aggregated",
                res("delete", "", "secrets", "", "x", "s"),
                false,
            ),
            (
                "Role in its namespace",
                res(
                    "update",
                    "coordination.k8s.io",
                    "leases",
                    "",
                    "caapf-system",
                    "l",
                ),
                true,
            ),
            (
                "Role elsewhere",
                res("update", "coordination.k8s.io", "leases", "", "other", "l"),
                false,
            ),
            (
                "ClusterRole through a RoleBinding: in its namespace",
                res("delete", "", "secrets", "", "team", "s"),
                true,
            ),
        ];
        for (what, action, want) in cases {
            let d = p.authorize(&sa, &action);
            assert_eq!(d.allowed, want, "{what}: {d:?}");
        }
        let other = UserInfo::service_account("caapf-system", "other");
        assert!(
            !p.authorize(&other, &res("get", "", "secrets", "", "x", "s"))
                .allowed
        );
        let admin = UserInfo::user("admin", &[SYSTEM_MASTERS]);
        assert!(
            p.authorize(&admin, &res("delete", "", "nodes", "", "", "n"))
                .allowed
        );
    }

    #[test]
    fn missing_roles_are_the_reason() {
        let u = UserInfo::user("alice", &[]);
        let subj = json!({"kind": "User", "name": "alice"});
        let p = policy(vec![
            binding(
                "ClusterRoleBinding",
                "",
                "b",
                "ClusterRole",
                "gone",
                subj.clone(),
            ),
            binding("RoleBinding", "ns", "rb", "Role", "gone-too", subj),
        ]);
        let d = p.authorize(&u, &res("get", "", "pods", "", "ns", "p"));
        assert!(!d.allowed);
        assert_eq!(
            d.reason,
            "RBAC: [clusterrole.rbac.authorization.k8s.io \"gone\" not found, role.rbac.authorization.k8s.io \"gone-too\" not found]"
        );
    }

    #[test]
    fn forbidden_messages() {
        let u = UserInfo::service_account("caapf-system", "caapf");
        let cases = [
            (
                res("list", "", "secrets", "", "default", ""),
                "",
                "secrets is forbidden: User \"system:serviceaccount:caapf-system:caapf\" cannot list resource \"secrets\" in API group \"\" in the namespace \"default\"",
            ),
            (
                res(
                    "patch",
                    "cluster.x-k8s.io",
                    "clusters",
                    "status",
                    "ns",
                    "c1",
                ),
                "",
                "clusters.cluster.x-k8s.io \"c1\" is forbidden: User \"system:serviceaccount:caapf-system:caapf\" cannot patch resource \"clusters/status\" in API group \"cluster.x-k8s.io\" in the namespace \"ns\"",
            ),
            (
                res("create", "", "namespaces", "", "", ""),
                "RBAC: clusterrole.rbac.authorization.k8s.io \"x\" not found",
                "namespaces is forbidden: User \"system:serviceaccount:caapf-system:caapf\" cannot create resource \"namespaces\" in API group \"\" at the cluster scope: RBAC: clusterrole.rbac.authorization.k8s.io \"x\" not found",
            ),
            (
                path("get", "/metrics"),
                "",
                "forbidden: User \"system:serviceaccount:caapf-system:caapf\" cannot get path \"/metrics\"",
            ),
        ];
        for (action, reason, want) in cases {
            assert_eq!(forbidden_message(&u, &action, reason), want);
        }
    }

    #[test]
    fn selectors() {
        let sel = |v: Value| -> LabelSelector { serde_json::from_value(v).unwrap() };
        let labels: BTreeMap<String, String> = [("a".to_string(), "1".to_string())].into();
        let cases = [
            (json!({}), true),
            (json!({"matchLabels": {"a": "1"}}), true),
            (json!({"matchLabels": {"a": "2"}}), false),
            (
                json!({"matchExpressions": [{"key": "a", "operator": "In", "values": ["1", "2"]}]}),
                true,
            ),
            (
                json!({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]}),
                false,
            ),
            (
                json!({"matchExpressions": [{"key": "b", "operator": "DoesNotExist"}]}),
                true,
            ),
            (
                json!({"matchExpressions": [{"key": "b", "operator": "Exists"}]}),
                false,
            ),
        ];
        for (s, want) in cases {
            assert_eq!(
                label_selector_matches(&sel(s.clone()), &labels),
                want,
                "{s}"
            );
        }
    }
}
