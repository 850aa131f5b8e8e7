//! Requests the API server refused to authorize, and the `Authorized` condition on the
//! `FleetAddonConfig` that names them (pure).
//!
//! A denial is identified by what RBAC checks: verb, API group, resource, subresource and
//! namespace ([`request_info`] derives them from the request we sent, as the API server's
//! `RequestInfoFactory` does: `k8s.io/apiserver` `pkg/endpoints/request/requestinfo.go`). A 403
//! counts as an authorization denial only when its message has the authorizer's shape
//! (`User "…" cannot <verb> resource "…"`, `k8s.io/apiserver`
//! `pkg/endpoints/handlers/responsewriters/errors.go` `forbiddenMessage`): admission plugins also
//! answer 403 (a namespace being terminated), and those are no RBAC problem. The verb is the one
//! in that message when it names one, since it is the verb RBAC checked: a server-side apply
//! (`patch`) that creates the object is also authorized as `create`
//! (`pkg/endpoints/handlers/patch.go`), and that is the one a missing rule refuses.
//!
//! A denial clears when a request with the same verb, resource and namespace succeeds (the
//! rule is back), or when no request was refused that way for [`EXPIRY`] (the object that
//! needed it is gone). Retries back off to at most 5 minutes, so a denial that persists is
//! seen again well before it expires.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

use crate::api::FleetAddonConfig;
use crate::model::fleet_status::ConditionSpec;
use crate::model::plan::{ObjectId, Write};
use crate::names;

/// The condition type on the `FleetAddonConfig`.
pub const AUTHORIZED: &str = "Authorized";
/// Its False reason.
pub const FORBIDDEN: &str = "Forbidden";
/// How many denials the message lists (sorted); the rest are counted.
pub const MAX_LISTED: usize = 5;
/// A denial not seen again for this long is dropped.
pub const EXPIRY: Duration = Duration::from_secs(10 * 60);
/// The ClusterRole the shipped manifests bind the manager to.
pub const MANAGER_ROLE: &str = "caapf-manager-role";

/// What RBAC sees of a request. Sorted by namespace (cluster scope first), then resource, then
/// verb: the order the condition lists denials in.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RequestInfo {
    /// Empty at the cluster scope.
    pub namespace: String,
    /// Empty for the core group.
    pub group: String,
    pub resource: String,
    pub subresource: String,
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, `deletecollection`.
    pub verb: String,
}

/// The RBAC attributes of a resource request (`None` for other paths: discovery, `/version`).
/// `query` is the URL's query string (a `watch=true` list is a watch).
pub fn request_info(method: &str, path: &str, query: Option<&str>) -> Option<RequestInfo> {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    // `/api/v1/...` (core) or `/apis/<group>/<version>/...`.
    let (group, mut rest) = match parts.as_slice() {
        ["api", _version, rest @ ..] => ("", rest),
        ["apis", group, _version, rest @ ..] => (*group, rest),
        _ => return None,
    };
    let mut watch_path = false;
    if rest.first() == Some(&"watch") {
        watch_path = true;
        rest = &rest[1..];
    }
    let mut namespace = "";
    if rest.first() == Some(&"namespaces") && rest.len() > 1 {
        namespace = rest[1];
        // `namespaces/<name>/status|finalize` are subresources of the Namespace itself.
        if rest.len() > 2 && !matches!(rest[2], "status" | "finalize") {
            rest = &rest[2..];
        }
    }
    let resource = *rest.first().filter(|r| !r.is_empty())?;
    let named = rest.len() > 1;
    let subresource = rest.get(2).copied().unwrap_or_default();
    let watch_query = query.is_some_and(|q| {
        q.split('&')
            .any(|kv| kv == "watch=true" || kv == "watch=1" || kv == "watch")
    });
    let verb = match method {
        "GET" | "HEAD" if watch_path || (watch_query && !named) => "watch",
        "GET" | "HEAD" if named => "get",
        "GET" | "HEAD" => "list",
        "POST" => "create",
        "PUT" => "update",
        "PATCH" => "patch",
        "DELETE" if named => "delete",
        "DELETE" => "deletecollection",
        _ => return None,
    };
    Some(RequestInfo {
        verb: verb.to_string(),
        group: group.to_string(),
        resource: resource.to_string(),
        subresource: subresource.to_string(),
        namespace: namespace.to_string(),
    })
}

/// The verb of an authorizer's 403 message (`… cannot <verb> resource "…"` or `… cannot
/// <verb> path "…"`), `None` when the message is not an authorization denial.
pub fn denied_verb(message: &str) -> Option<&str> {
    let (_, after) = message.split_once(" cannot ")?;
    let (verb, rest) = after.split_once(' ')?;
    (rest.starts_with("resource \"") || rest.starts_with("path \"")).then_some(verb)
}

/// A refused request, as RBAC sees it.
pub type Denial = RequestInfo;

/// The denial a 403 answer to `request` stands for: the request's attributes with the verb the
/// authorizer names. `None` when the message is not an authorization denial.
pub fn denial(request: &RequestInfo, message: &str) -> Option<Denial> {
    let verb = denied_verb(message)?;
    Some(Denial {
        verb: verb.to_string(),
        ..request.clone()
    })
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Seen {
    /// Which parts of the manager were refused (e.g. `import controllers`).
    components: BTreeSet<&'static str>,
    last: Instant,
}

/// The denials seen and not cleared yet.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Denials {
    entries: BTreeMap<Denial, Seen>,
}

impl Denials {
    /// Records that `component` was refused `denial` at `now`. Returns whether it is new (not
    /// listed before, for this component).
    pub fn denied(&mut self, denial: Denial, component: &'static str, now: Instant) -> bool {
        let seen = self.entries.entry(denial).or_insert_with(|| Seen {
            components: BTreeSet::new(),
            last: now,
        });
        seen.last = now;
        seen.components.insert(component)
    }

    /// Records that `request` succeeded (`created`: it created an object, so a server-side
    /// apply was authorized as `create` too). Returns whether a denial cleared.
    pub fn allowed(&mut self, request: &RequestInfo, created: bool) -> bool {
        if self.entries.is_empty() {
            return false;
        }
        let before = self.entries.len();
        self.entries.remove(request);
        if created && request.verb != "create" {
            self.entries.remove(&RequestInfo {
                verb: "create".to_string(),
                ..request.clone()
            });
        }
        self.entries.len() != before
    }

    /// Drops the denials not seen for [`EXPIRY`]. Returns whether any was dropped.
    pub fn expire(&mut self, now: Instant) -> bool {
        let before = self.entries.len();
        self.entries
            .retain(|_, seen| now.saturating_duration_since(seen.last) < EXPIRY);
        self.entries.len() != before
    }

    /// When the oldest denial expires (`None` without denials).
    pub fn next_expiry(&self) -> Option<Instant> {
        self.entries.values().map(|s| s.last + EXPIRY).min()
    }

    /// The `Authorized` condition: False while there are denials, naming the first
    /// [`MAX_LISTED`] (sorted) and counting the rest; True otherwise.
    pub fn condition(&self) -> ConditionSpec {
        if self.entries.is_empty() {
            return ConditionSpec::ok(
                AUTHORIZED,
                "No request of the manager is refused by the API server",
            );
        }
        let mut lines: Vec<String> = self
            .entries
            .iter()
            .take(MAX_LISTED)
            .map(|(denial, seen)| describe(denial, &seen.components))
            .collect();
        if self.entries.len() > MAX_LISTED {
            lines.push(format!("and {} more", self.entries.len() - MAX_LISTED));
        }
        ConditionSpec::failed(
            AUTHORIZED,
            FORBIDDEN,
            format!(
                "{} (check the ClusterRole {MANAGER_ROLE} and the Roles bound to the manager's ServiceAccount)",
                lines.join("; ")
            ),
        )
    }
}

/// `clusters.fleet.cattle.io`, `configmaps`, `fleetaddonconfigs.addons.cluster.x-k8s.io/status`.
pub fn resource_name(request: &RequestInfo) -> String {
    let mut resource = request.resource.clone();
    if !request.group.is_empty() {
        resource = format!("{resource}.{}", request.group);
    }
    if !request.subresource.is_empty() {
        resource = format!("{resource}/{}", request.subresource);
    }
    resource
}

/// `import controllers cannot create clusters.fleet.cattle.io in namespace team-a`.
fn describe(denial: &Denial, components: &BTreeSet<&'static str>) -> String {
    let who: Vec<&str> = components.iter().copied().collect();
    let resource = resource_name(denial);
    let scope = if denial.namespace.is_empty() {
        "at the cluster scope".to_string()
    } else {
        format!("in namespace {}", denial.namespace)
    };
    format!(
        "{} cannot {} {resource} {scope}",
        who.join(" and "),
        denial.verb
    )
}

/// Whether the `Authorized` condition must be written: `desired` differs from the `current`
/// one (type, status, reason, message), and a True condition is only written over a False one
/// (no condition is written while nothing was ever refused).
pub fn needs_write(current: Option<&ConditionSpec>, desired: &ConditionSpec) -> bool {
    match current {
        None => !desired.status,
        Some(current) => current != desired,
    }
}

/// The `Authorized` condition to write over `current` (as the object has it) and its write, a
/// status apply by its own field manager owning only that condition (`None`: [`needs_write`]
/// says no). Its transition time moves only when its status changes.
pub fn condition_write(
    current: Option<&Condition>,
    desired: &ConditionSpec,
    now: Timestamp,
) -> Option<(Condition, Write)> {
    let spec = current.map(|c| ConditionSpec {
        type_: AUTHORIZED,
        status: c.status == "True",
        reason: c.reason.clone(),
        message: c.message.clone(),
    });
    if !needs_write(spec.as_ref(), desired) {
        return None;
    }
    let status = if desired.status { "True" } else { "False" };
    let last_transition_time = match current {
        Some(c) if c.status == status => c.last_transition_time.clone(),
        _ => Time(now),
    };
    let condition = Condition {
        type_: AUTHORIZED.to_string(),
        status: status.to_string(),
        reason: desired.reason.clone(),
        message: desired.message.clone(),
        observed_generation: None,
        last_transition_time,
    };
    let write = Write::ApplyStatus {
        object: ObjectId::of::<FleetAddonConfig>(None, names::CONFIG_NAME, None),
        body: serde_json::json!({
            "apiVersion": "addons.cluster.x-k8s.io/v1alpha1",
            "kind": "FleetAddonConfig",
            "metadata": {"name": names::CONFIG_NAME},
            "status": {"conditions": [condition]},
        }),
        manager: names::AUTHORIZATION_STATUS_FIELD_MANAGER,
    };
    Some((condition, write))
}

/// What the writer knows of the condition on the object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Live {
    /// Not read yet (or a write failed).
    Unknown,
    /// Absent, or True.
    NotFalse,
    False,
}

/// Whether the writer has something to do: a denial to report; a False condition to clear,
/// known from its own reads and writes or, once the process has run for [`EXPIRY`] (as long as
/// a denial lives), possibly left False by an earlier run (then it reads it once). Nothing
/// otherwise: no request while nothing is refused.
pub fn worth_a_look(desired: &ConditionSpec, live: Live, running_for: Duration) -> bool {
    !desired.status || live == Live::False || (live == Live::Unknown && running_for >= EXPIRY)
}

#[cfg(test)]
mod tests {
    use super::*;

    impl Denials {
        pub fn is_empty(&self) -> bool {
            self.entries.is_empty()
        }
    }

    fn info(verb: &str, group: &str, resource: &str, sub: &str, ns: &str) -> RequestInfo {
        RequestInfo {
            verb: verb.into(),
            group: group.into(),
            resource: resource.into(),
            subresource: sub.into(),
            namespace: ns.into(),
        }
    }

    #[test]
    fn request_attributes_as_the_api_server_derives_them() {
        let fleet = "fleet.cattle.io";
        for (method, path, query, want) in [
            (
                "POST",
                "/apis/fleet.cattle.io/v1alpha1/namespaces/team-a/clusters",
                None,
                Some(info("create", fleet, "clusters", "", "team-a")),
            ),
            (
                "PATCH",
                "/apis/fleet.cattle.io/v1alpha1/namespaces/team-a/clusters/c1",
                Some("fieldManager=x&force=true"),
                Some(info("patch", fleet, "clusters", "", "team-a")),
            ),
            (
                "PATCH",
                "/apis/addons.cluster.x-k8s.io/v1alpha1/fleetaddonconfigs/fleet-addon-config/status",
                None,
                Some(info(
                    "patch",
                    "addons.cluster.x-k8s.io",
                    "fleetaddonconfigs",
                    "status",
                    "",
                )),
            ),
            (
                "GET",
                "/api/v1/namespaces/default/configmaps/kube-root-ca.crt",
                None,
                Some(info("get", "", "configmaps", "", "default")),
            ),
            (
                "GET",
                "/api/v1/secrets",
                Some("labelSelector=a%3Db"),
                Some(info("list", "", "secrets", "", "")),
            ),
            (
                "GET",
                "/apis/cluster.x-k8s.io/v1beta2/clusters",
                Some("watch=true&resourceVersion=5"),
                Some(info("watch", "cluster.x-k8s.io", "clusters", "", "")),
            ),
            (
                "GET",
                "/api/v1/watch/namespaces/ns/pods",
                None,
                Some(info("watch", "", "pods", "", "ns")),
            ),
            (
                "DELETE",
                "/api/v1/namespaces/ns/secrets",
                None,
                Some(info("deletecollection", "", "secrets", "", "ns")),
            ),
            (
                "DELETE",
                "/api/v1/namespaces/ns/secrets/s",
                None,
                Some(info("delete", "", "secrets", "", "ns")),
            ),
            (
                "PUT",
                "/api/v1/namespaces/ns/status",
                None,
                Some(info("update", "", "namespaces", "status", "ns")),
            ),
            (
                "GET",
                "/api/v1/namespaces/ns",
                None,
                Some(info("get", "", "namespaces", "", "ns")),
            ),
            (
                "GET",
                "/api/v1/namespaces",
                None,
                Some(info("list", "", "namespaces", "", "")),
            ),
            ("GET", "/apis", None, None),
            ("GET", "/version", None, None),
            ("GET", "/apis/fleet.cattle.io/v1alpha1", None, None),
        ] {
            assert_eq!(request_info(method, path, query), want, "{method} {path}");
        }
    }

    #[test]
    fn only_the_authorizers_403_is_a_denial() {
        // Messages in the shapes of k8s.io/apiserver's forbiddenMessage and NewForbidden.
        for (message, want) in [
            (
                r#"clusters.fleet.cattle.io "c1" is forbidden: User "system:serviceaccount:caapf-system:caapf-controller-manager" cannot create resource "clusters" in API group "fleet.cattle.io" in the namespace "team-a""#,
                Some("create"),
            ),
            (
                r#"namespaces is forbidden: User "u" cannot list resource "namespaces" in API group "" at the cluster scope: RBAC: clusterrole.rbac.authorization.k8s.io "x" not found"#,
                Some("list"),
            ),
            (
                r#"forbidden: User "u" cannot get path "/metrics""#,
                Some("get"),
            ),
            // Admission (NamespaceLifecycle): not an authorization problem.
            (
                r#"clusters.fleet.cattle.io "c1" is forbidden: unable to create new content in namespace team-a because it is being terminated"#,
                None,
            ),
            ("forbidden", None),
        ] {
            assert_eq!(denied_verb(message), want, "{message}");
        }
        // A server-side apply that creates: RBAC refused `create`, not `patch`.
        let apply = info("patch", "fleet.cattle.io", "clusters", "", "team-a");
        let denial = denial(
            &apply,
            r#"clusters.fleet.cattle.io "c1" is forbidden: User "u" cannot create resource "clusters" in API group "fleet.cattle.io" in the namespace "team-a""#,
        );
        assert_eq!(
            denial,
            Some(info("create", "fleet.cattle.io", "clusters", "", "team-a"))
        );
    }

    #[test]
    fn denials_clear_when_the_same_request_succeeds_or_expire() {
        let t0 = Instant::now();
        let create = info("create", "fleet.cattle.io", "clusters", "", "team-a");
        let mut denials = Denials::default();
        assert!(denials.denied(create.clone(), "import controllers", t0));
        // The same again (a retry): nothing new.
        assert!(!denials.denied(create.clone(), "import controllers", t0));
        // The same request in another namespace, or another verb, clears nothing.
        let elsewhere = RequestInfo {
            namespace: "team-b".into(),
            ..create.clone()
        };
        assert!(!denials.allowed(&elsewhere, true));
        let patch = RequestInfo {
            verb: "patch".into(),
            ..create.clone()
        };
        assert!(!denials.allowed(&patch, false));
        // An apply that created the object was authorized as `create` too.
        assert!(denials.allowed(&patch, true));
        assert!(denials.is_empty());

        assert!(denials.denied(create.clone(), "import controllers", t0));
        assert_eq!(denials.next_expiry(), Some(t0 + EXPIRY));
        let t1 = t0 + EXPIRY - Duration::from_secs(1);
        assert!(!denials.expire(t1));
        // Seen again: its expiry moves.
        denials.denied(create.clone(), "import controllers", t1);
        assert!(!denials.expire(t0 + EXPIRY));
        assert!(denials.expire(t1 + EXPIRY));
        assert!(denials.is_empty());
        assert_eq!(denials.next_expiry(), None);
    }

    #[test]
    fn the_condition_names_a_bounded_sorted_list() {
        let t0 = Instant::now();
        let mut denials = Denials::default();
        let ok = denials.condition();
        assert_eq!(
            (ok.type_, ok.status, ok.reason.as_str()),
            (AUTHORIZED, true, AUTHORIZED)
        );

        denials.denied(
            info("create", "fleet.cattle.io", "clusters", "", "ns-1"),
            "import controllers",
            t0,
        );
        denials.denied(
            info("create", "fleet.cattle.io", "clusters", "", "ns-1"),
            "hooks",
            t0,
        );
        denials.denied(
            info(
                "patch",
                "addons.cluster.x-k8s.io",
                "fleetaddonconfigs",
                "status",
                "",
            ),
            "fleet-config controller",
            t0,
        );
        let two = denials.condition();
        assert_eq!((two.status, two.reason.as_str()), (false, FORBIDDEN));
        assert_eq!(
            two.message,
            "fleet-config controller cannot patch fleetaddonconfigs.addons.cluster.x-k8s.io/status at the cluster scope; \
             hooks and import controllers cannot create clusters.fleet.cattle.io in namespace ns-1 \
             (check the ClusterRole caapf-manager-role and the Roles bound to the manager's ServiceAccount)"
        );

        for i in 0..7 {
            denials.denied(
                info("get", "", "secrets", "", &format!("ns-{i}")),
                "import controllers",
                t0,
            );
        }
        let many = denials.condition();
        assert_eq!(many.message.matches(" cannot ").count(), MAX_LISTED);
        assert!(many.message.contains("; and 4 more ("), "{}", many.message);
    }

    #[test]
    fn written_only_on_change_and_true_only_after_false() {
        let t0 = Instant::now();
        let mut denials = Denials::default();
        let ok = denials.condition();
        denials.denied(
            info("get", "", "secrets", "", "ns"),
            "import controllers",
            t0,
        );
        let refused = denials.condition();
        for (current, desired, want) in [
            (None, &ok, false),
            (None, &refused, true),
            (Some(&refused), &refused, false),
            (Some(&refused), &ok, true),
            (Some(&ok), &ok, false),
            (Some(&ok), &refused, true),
        ] {
            assert_eq!(
                needs_write(current, desired),
                want,
                "{current:?} -> {desired:?}"
            );
        }
    }

    #[test]
    fn the_writer_looks_only_with_something_to_say() {
        let mut denials = Denials::default();
        let ok = denials.condition();
        denials.denied(
            info("get", "", "secrets", "", "ns"),
            "import controllers",
            Instant::now(),
        );
        let refused = denials.condition();
        let early = Duration::from_secs(1);
        for (desired, live, running_for, want) in [
            (&refused, Live::Unknown, early, true),
            (&refused, Live::NotFalse, early, true),
            (&ok, Live::Unknown, early, false),
            (&ok, Live::NotFalse, early, false),
            (&ok, Live::False, early, true),
            // A False condition of an earlier run: read once after EXPIRY.
            (&ok, Live::Unknown, EXPIRY, true),
            (&ok, Live::NotFalse, EXPIRY, false),
        ] {
            assert_eq!(
                worth_a_look(desired, live, running_for),
                want,
                "{} {live:?} {running_for:?}",
                desired.status
            );
        }
    }

    /// The condition is written when it changes, keeping its transition time while its status
    /// stays; a first True is not written (nothing was ever refused).
    #[test]
    fn the_condition_write_keeps_the_transition_time_of_a_kept_status() {
        let t = |s: i64| Timestamp::from_second(s).expect("time");
        let spec = |status: bool, message: &str| ConditionSpec {
            type_: AUTHORIZED,
            status,
            reason: if status { AUTHORIZED } else { FORBIDDEN }.to_string(),
            message: message.to_string(),
        };
        assert!(condition_write(None, &spec(true, ""), t(1)).is_none());
        let (first, write) = condition_write(None, &spec(false, "a"), t(1)).expect("write");
        let Write::ApplyStatus {
            object,
            body,
            manager,
        } = write
        else {
            panic!("{write:?}")
        };
        assert_eq!(
            (object.name.as_str(), manager),
            (
                names::CONFIG_NAME,
                names::AUTHORIZATION_STATUS_FIELD_MANAGER
            )
        );
        assert_eq!(body["status"]["conditions"][0]["status"], "False");
        assert!(condition_write(Some(&first), &spec(false, "a"), t(2)).is_none());
        let (reworded, _) = condition_write(Some(&first), &spec(false, "b"), t(2)).expect("write");
        assert_eq!(reworded.last_transition_time, first.last_transition_time);
        let (cleared, _) = condition_write(Some(&first), &spec(true, ""), t(3)).expect("write");
        assert_eq!(cleared.last_transition_time, Time(t(3)));
    }
}
