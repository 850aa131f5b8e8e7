//! RBAC privilege-escalation prevention on writes of Roles, ClusterRoles and their bindings,
//! as a real API server's RBAC storage does it (pure; the caller passes the policy).
//!
//! From `k8s.io/kubernetes` `pkg/registry/rbac`:
//! - `clusterrole/policybased/storage.go` (and `role/...`): a create or update is allowed for
//!   `system:masters` (`EscalationAllowed`), for whoever may `escalate` the role
//!   (`RoleEscalationAuthorized`), or when the writer already holds every rule of the new role
//!   (`validation.ConfirmNoEscalation`, in the role's namespace); an aggregating ClusterRole
//!   also needs `*` on everything ("must have cluster-admin privileges to use the
//!   aggregationRule"); an update that only touches `ownerReferences`/`finalizers` is not
//!   checked (`IsOnlyMutatingGCFields`).
//! - `clusterrolebinding/policybased/storage.go` (and `rolebinding/...`): allowed for
//!   `system:masters`, for whoever may `bind` the referenced role (`BindingAuthorized`, in the
//!   binding's namespace), or when the writer holds every rule of the referenced role; a
//!   reference to a missing role is then a 404 (`GetRoleReferenceRules`).
//! - `validation/rule.go` `ConfirmNoEscalation`: the 403 message `user "U" (groups=["g" ...])
//!   is attempting to grant RBAC permissions not currently held:` and one line per missing
//!   rule in `PolicyRule.CompactString` form (`{APIGroups:["g"], Resources:["r"],
//!   Verbs:["v" ...]}`); coverage per `k8s.io/component-helpers` `auth/rbac/validation`
//!   `Covers` (every verb x group x resource x name of the new rule held by some rule).
//!
//! Differences: missing rules are compacted by (group, resource, names) merging verbs, close to
//! but not exactly `CompactRules`; the policy is the one cached when the request arrived.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::rbac::v1::PolicyRule;
use serde_json::Value;

use crate::error::ApiError;
use crate::rbac::{Action, Policy, UserInfo};

/// Who writes, and the RBAC policy to judge the write with.
#[derive(Clone, Debug)]
pub struct Escalation {
    /// The writer.
    pub user: UserInfo,
    /// The policy when the request arrived.
    pub policy: std::sync::Arc<Policy>,
}

/// One permission: a verb on a group/resource (optionally one name), or on a URL.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Atom {
    Resource {
        group: String,
        resource: String,
        name: Option<String>,
        verb: String,
    },
    Url {
        url: String,
        verb: String,
    },
}

fn atoms(rule: &PolicyRule) -> Vec<Atom> {
    let mut out = Vec::new();
    for verb in &rule.verbs {
        for group in rule.api_groups.iter().flatten() {
            for resource in rule.resources.iter().flatten() {
                let names: Vec<Option<String>> = match &rule.resource_names {
                    Some(n) if !n.is_empty() => n.iter().cloned().map(Some).collect(),
                    _ => vec![None],
                };
                for name in names {
                    out.push(Atom::Resource {
                        group: group.clone(),
                        resource: resource.clone(),
                        name,
                        verb: verb.clone(),
                    });
                }
            }
        }
        for url in rule.non_resource_urls.iter().flatten() {
            out.push(Atom::Url {
                url: url.clone(),
                verb: verb.clone(),
            });
        }
    }
    out
}

fn has(list: &[String], value: &str) -> bool {
    list.iter().any(|x| x == "*" || x == value)
}

/// Whether `owner` holds `atom` (`ruleCovers`: a `*` in the new rule needs a `*` in the
/// owner's; `*/sub` covers every resource's `sub`; names only narrow).
fn covers(owner: &PolicyRule, atom: &Atom) -> bool {
    match atom {
        Atom::Resource {
            group,
            resource,
            name,
            verb,
        } => {
            let resources = owner.resources.clone().unwrap_or_default();
            let resource_ok = has(&resources, resource)
                || resource
                    .split_once('/')
                    .is_some_and(|(_, sub)| resources.iter().any(|r| r == &format!("*/{sub}")));
            let name_ok = match &owner.resource_names {
                Some(names) if !names.is_empty() => {
                    name.as_ref().is_some_and(|n| names.contains(n))
                }
                _ => true,
            };
            has(&owner.verbs, verb)
                && has(owner.api_groups.as_deref().unwrap_or_default(), group)
                && resource_ok
                && name_ok
        }
        Atom::Url { url, verb } => {
            has(&owner.verbs, verb)
                && owner.non_resource_urls.iter().flatten().any(|u| {
                    u == "*"
                        || u == url
                        || u.strip_suffix('*')
                            .is_some_and(|prefix| url.starts_with(prefix))
                })
        }
    }
}

/// Go's `%q` of a `[]string`: `["a" "b"]`.
fn quoted(list: &[String]) -> String {
    let items: Vec<String> = list
        .iter()
        .map(|s| serde_json::to_string(s).unwrap_or_default())
        .collect();
    format!("[{}]", items.join(" "))
}

/// The missing permissions, one `CompactString` line per (group, resource, name) or URL.
fn describe(missing: &[Atom]) -> Vec<String> {
    let mut resources: BTreeMap<(String, String, Option<String>), BTreeSet<String>> =
        BTreeMap::new();
    let mut urls: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for atom in missing {
        match atom {
            Atom::Resource {
                group,
                resource,
                name,
                verb,
            } => {
                resources
                    .entry((group.clone(), resource.clone(), name.clone()))
                    .or_default()
                    .insert(verb.clone());
            }
            Atom::Url { url, verb } => {
                urls.entry(url.clone()).or_default().insert(verb.clone());
            }
        }
    }
    let mut lines: BTreeSet<String> = BTreeSet::new();
    for ((group, resource, name), verbs) in resources {
        let verbs: Vec<String> = verbs.into_iter().collect();
        let names = name
            .map(|n| format!(", ResourceNames:{}", quoted(&[n])))
            .unwrap_or_default();
        lines.insert(format!(
            "{{APIGroups:{}, Resources:{}{names}, Verbs:{}}}",
            quoted(&[group]),
            quoted(&[resource]),
            quoted(&verbs)
        ));
    }
    for (url, verbs) in urls {
        let verbs: Vec<String> = verbs.into_iter().collect();
        lines.insert(format!(
            "{{NonResourceURLs:{}, Verbs:{}}}",
            quoted(&[url]),
            quoted(&verbs)
        ));
    }
    lines.into_iter().collect()
}

/// `ConfirmNoEscalation`: `Err(message)` unless `user`'s rules in `namespace` hold `rules`.
fn confirm_no_escalation(
    policy: &Policy,
    user: &UserInfo,
    namespace: &str,
    rules: &[PolicyRule],
) -> Result<(), String> {
    let mut owner: Vec<PolicyRule> = Vec::new();
    let errors = policy.visit_rules(user, namespace, |_, rule| {
        owner.push(rule.clone());
        true
    });
    let missing: Vec<Atom> = rules
        .iter()
        .flat_map(atoms)
        .filter(|atom| !owner.iter().any(|o| covers(o, atom)))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let mut message = format!(
        "user {} (groups={}) is attempting to grant RBAC permissions not currently held:\n{}",
        serde_json::to_string(&user.name).unwrap_or_default(),
        quoted(&user.groups),
        describe(&missing).join("\n")
    );
    if !errors.is_empty() {
        message.push_str(&format!("; resolution errors: [{}]", errors.join(" ")));
    }
    Err(message)
}

fn rules_of(object: &Value) -> Vec<PolicyRule> {
    object
        .get("rules")
        .and_then(|r| serde_json::from_value(r.clone()).ok())
        .unwrap_or_default()
}

fn aggregates(object: Option<&Value>) -> bool {
    object
        .and_then(|o| o.pointer("/aggregationRule/clusterRoleSelectors"))
        .and_then(Value::as_array)
        .is_some_and(|s| !s.is_empty())
}

/// Only `ownerReferences`/`finalizers` (and bookkeeping) differ (`IsOnlyMutatingGCFields`).
fn only_gc_fields(new: &Value, old: &Value) -> bool {
    let strip = |v: &Value| {
        let mut v = v.clone();
        if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
            for key in [
                "ownerReferences",
                "finalizers",
                "managedFields",
                "resourceVersion",
                "generation",
            ] {
                m.remove(key);
            }
        }
        v
    };
    strip(new) == strip(old)
}

fn forbidden(plural: &str, name: &str, message: &str) -> ApiError {
    ApiError::new(
        403,
        "Forbidden",
        format!("{plural}.rbac.authorization.k8s.io \"{name}\" is forbidden: {message}"),
    )
    .with_details("rbac.authorization.k8s.io", plural, name)
}

/// Checks a write of `new` (replacing `old`) to `plural` (`roles`, `clusterroles`,
/// `rolebindings`, `clusterrolebindings`) in `namespace` by `esc.user`.
pub fn check(
    esc: &Escalation,
    plural: &str,
    namespace: &str,
    new: &Value,
    old: Option<&Value>,
) -> Result<(), ApiError> {
    let (user, policy) = (&esc.user, &*esc.policy);
    if user.is_master() {
        return Ok(());
    }
    let name = crate::util::name_of(new).to_string();
    let allowed = |verb: &str, resource: &str, name: &str, namespace: &str| {
        policy
            .authorize(
                user,
                &Action::Resource {
                    verb: verb.to_string(),
                    group: "rbac.authorization.k8s.io".to_string(),
                    resource: resource.to_string(),
                    subresource: String::new(),
                    namespace: namespace.to_string(),
                    name: name.to_string(),
                },
            )
            .allowed
    };
    match plural {
        "roles" | "clusterroles" => {
            if allowed("escalate", plural, &name, namespace)
                || old.is_some_and(|o| only_gc_fields(new, o))
            {
                return Ok(());
            }
            confirm_no_escalation(policy, user, namespace, &rules_of(new))
                .map_err(|m| forbidden(plural, &name, &m))?;
            if plural == "clusterroles" && (aggregates(Some(new)) || aggregates(old)) {
                let everything: Vec<PolicyRule> = serde_json::from_value(serde_json::json!([
                    {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
                    {"nonResourceURLs": ["*"], "verbs": ["*"]}
                ]))
                .unwrap_or_default();
                confirm_no_escalation(policy, user, namespace, &everything).map_err(|_| {
                    forbidden(
                        plural,
                        &name,
                        "must have cluster-admin privileges to use the aggregationRule",
                    )
                })?;
            }
            Ok(())
        }
        "rolebindings" | "clusterrolebindings" => {
            let kind = new
                .pointer("/roleRef/kind")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let role = new
                .pointer("/roleRef/name")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let role_resource = match kind {
                "ClusterRole" => "clusterroles",
                "Role" => "roles",
                _ => return Ok(()),
            };
            if allowed("bind", role_resource, role, namespace) {
                return Ok(());
            }
            let rules = policy.role_rules(kind, namespace, role).ok_or_else(|| {
                ApiError::not_found("rbac.authorization.k8s.io", role_resource, role)
            })?;
            confirm_no_escalation(policy, user, namespace, &rules)
                .map_err(|m| forbidden(plural, &name, &m))
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rule(v: Value) -> PolicyRule {
        serde_json::from_value(v).expect("rule")
    }

    #[test]
    fn coverage_follows_the_real_comparator() {
        let cases = [
            // (owner, new rule, covered)
            (
                json!({"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}),
                json!({"apiGroups": ["fleet.cattle.io"], "resources": ["*"], "verbs": ["*"]}),
                true,
            ),
            (
                json!({"apiGroups": ["fleet.cattle.io"], "resources": ["clusters"], "verbs": ["*"]}),
                json!({"apiGroups": ["fleet.cattle.io"], "resources": ["*"], "verbs": ["get"]}),
                false,
            ),
            (
                json!({"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]}),
                json!({"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]}),
                true,
            ),
            (
                json!({"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}),
                json!({"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "delete"]}),
                false,
            ),
            (
                json!({"apiGroups": [""], "resources": ["*/status"], "verbs": ["patch"]}),
                json!({"apiGroups": [""], "resources": ["pods/status"], "verbs": ["patch"]}),
                true,
            ),
            (
                json!({"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["a"], "verbs": ["get"]}),
                json!({"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}),
                false,
            ),
            (
                json!({"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}),
                json!({"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["a"], "verbs": ["get"]}),
                true,
            ),
            (
                json!({"nonResourceURLs": ["/api/*"], "verbs": ["get"]}),
                json!({"nonResourceURLs": ["/api/v1"], "verbs": ["get"]}),
                true,
            ),
            (
                json!({"nonResourceURLs": ["/api"], "verbs": ["get"]}),
                json!({"nonResourceURLs": ["*"], "verbs": ["get"]}),
                false,
            ),
        ];
        for (owner, new, want) in cases {
            let (owner, new) = (rule(owner), rule(new));
            let got = atoms(&new).iter().all(|a| covers(&owner, a));
            assert_eq!(got, want, "{owner:?} covers {new:?}");
        }
    }

    fn policy(objects: &[Value]) -> std::sync::Arc<Policy> {
        fn of<'a>(objects: &'a [Value], kind: &'static str) -> impl Iterator<Item = &'a Value> {
            objects.iter().filter(move |o| o["kind"] == kind)
        }
        std::sync::Arc::new(Policy::build(
            of(objects, "ClusterRole"),
            of(objects, "Role"),
            of(objects, "ClusterRoleBinding"),
            of(objects, "RoleBinding"),
        ))
    }

    #[test]
    fn roles_need_the_rights_or_escalate_and_bindings_need_them_or_bind() {
        let bot = UserInfo::service_account("ns", "bot");
        let grant = |rules: Value| {
            vec![
                json!({"kind": "ClusterRole", "metadata": {"name": "bot"}, "rules": rules}),
                json!({"kind": "ClusterRoleBinding", "metadata": {"name": "bot"},
                       "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "bot"},
                       "subjects": [{"kind": "ServiceAccount", "name": "bot", "namespace": "ns"}]}),
            ]
        };
        let fleet_role = json!({"kind": "ClusterRole", "metadata": {"name": "fleet"},
            "rules": [{"apiGroups": ["fleet.cattle.io"], "resources": ["*"], "verbs": ["*"]}]});
        let writer = [
            json!({"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles", "clusterrolebindings"], "verbs": ["create"]}),
        ];
        let esc = |rules: Value| Escalation {
            user: bot.clone(),
            policy: policy(&grant(rules)),
        };

        // Without the rights: the real 403.
        let e = check(&esc(json!(writer)), "clusterroles", "", &fleet_role, None).unwrap_err();
        assert_eq!(e.code, 403);
        assert_eq!(
            e.message,
            "clusterroles.rbac.authorization.k8s.io \"fleet\" is forbidden: user \"system:serviceaccount:ns:bot\" (groups=[\"system:serviceaccounts\" \"system:serviceaccounts:ns\" \"system:authenticated\"]) is attempting to grant RBAC permissions not currently held:\n{APIGroups:[\"fleet.cattle.io\"], Resources:[\"*\"], Verbs:[\"*\"]}"
        );
        // Holding them, or with escalate: allowed.
        let mut holding = writer.to_vec();
        holding.push(json!({"apiGroups": ["fleet.cattle.io"], "resources": ["*"], "verbs": ["*"]}));
        check(&esc(json!(holding)), "clusterroles", "", &fleet_role, None).unwrap();
        let mut escalate = writer.to_vec();
        escalate.push(json!({"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"], "verbs": ["escalate"]}));
        check(&esc(json!(escalate)), "clusterroles", "", &fleet_role, None).unwrap();
        // A GC-only update is not checked.
        let mut owned = fleet_role.clone();
        owned["metadata"]["finalizers"] = json!(["x"]);
        check(
            &esc(json!(writer)),
            "clusterroles",
            "",
            &owned,
            Some(&fleet_role),
        )
        .unwrap();

        // Bindings: the referenced role's rules, or bind.
        let binding = json!({"kind": "ClusterRoleBinding", "metadata": {"name": "fleet"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "fleet"},
            "subjects": [{"kind": "ServiceAccount", "name": "fleet", "namespace": "f"}]});
        let with_role = |rules: Value| {
            let mut objects = grant(rules);
            objects.push(fleet_role.clone());
            Escalation {
                user: bot.clone(),
                policy: policy(&objects),
            }
        };
        let e = check(
            &with_role(json!(writer)),
            "clusterrolebindings",
            "",
            &binding,
            None,
        )
        .unwrap_err();
        assert!(e.message.starts_with("clusterrolebindings.rbac.authorization.k8s.io \"fleet\" is forbidden: user \"system:serviceaccount:ns:bot\""), "{}", e.message);
        let mut bind = writer.to_vec();
        bind.push(json!({"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"], "verbs": ["bind"], "resourceNames": ["fleet"]}));
        check(
            &with_role(json!(bind)),
            "clusterrolebindings",
            "",
            &binding,
            None,
        )
        .unwrap();
        check(
            &with_role(json!(holding)),
            "clusterrolebindings",
            "",
            &binding,
            None,
        )
        .unwrap();
        // Without bind, a binding to a missing role is a 404.
        let e = check(
            &esc(json!(writer)),
            "clusterrolebindings",
            "",
            &binding,
            None,
        )
        .unwrap_err();
        assert_eq!(e.code, 404);
        // The admin is never checked.
        let admin = Escalation {
            user: crate::auth::admin(),
            policy: policy(&[]),
        };
        check(&admin, "clusterroles", "", &fleet_role, None).unwrap();
    }
}
