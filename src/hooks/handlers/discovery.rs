//! Discovery: the handlers this extension serves, with their timeouts and failure policies.
//!
//! Only hooks in the catalog of every supported CAPI release (v1.10 onward) are advertised: a hook
//! a release does not know fails its whole discovery.
//!
//! | hook | handler | timeout | failure policy | why |
//! |---|---|---|---|---|
//! | BeforeClusterCreate | `before-cluster-create` | 10 s | `Ignore` | Cluster API calls it for every Cluster of the selected namespaces, so an outage of ours must not block them all; the control-plane patch follows the bootstrap Secret (GeneratePatches adds it only once the Secret exists), so a Cluster created while this hook was unreachable gets its bootstrap one reconcile later, never a patch naming a missing Secret |
//! | AfterControlPlaneInitialized | `after-control-plane-initialized` | 5 s | `Ignore` | informational only; the import controller does not depend on it |
//! | BeforeClusterUpgrade | `before-cluster-upgrade` | 10 s | `Ignore` | an optional gate: an unreachable extension must not stop upgrades (an answer "retry" still holds them) |
//! | BeforeClusterDelete | `before-cluster-delete` | 10 s | `Ignore` | an uninstalled extension must not block every deletion; what it would clean up is owned by the CAPI Cluster (garbage-collected) or expires (the token's TTL) |
//! | GeneratePatches | `fleet-agent-bootstrap` | 10 s | `Fail` | `Ignore` would apply the templates without the patch on a transport error, flipping the desired control plane and rolling machines |
//! | DiscoverVariables | `fleet-agent-variables` | 10 s | `Fail` | the ClusterClass must know `fleetAgent` before Clusters use it; CAPI retries |

use crate::hooks::types::{
    API_VERSION, ExtensionHandler, FailurePolicy, GroupVersionHook, Hook, Response, ResponseBody,
};

/// Handler name of BeforeClusterCreate.
pub const BEFORE_CLUSTER_CREATE: &str = "before-cluster-create";
/// Handler name of AfterControlPlaneInitialized.
pub const AFTER_CONTROL_PLANE_INITIALIZED: &str = "after-control-plane-initialized";
/// Handler name of BeforeClusterUpgrade.
pub const BEFORE_CLUSTER_UPGRADE: &str = "before-cluster-upgrade";
/// Handler name of BeforeClusterDelete.
pub const BEFORE_CLUSTER_DELETE: &str = "before-cluster-delete";
/// Handler name of GeneratePatches, referenced by ClusterClasses as
/// `fleet-agent-bootstrap.<ExtensionConfig name>`. Distinctive on purpose: BeforeClusterCreate
/// recognises ClusterClasses that use it by this prefix.
pub const GENERATE_PATCHES: &str = "fleet-agent-bootstrap";
/// Handler name of DiscoverVariables (`fleet-agent-variables.<ExtensionConfig name>`).
pub const DISCOVER_VARIABLES: &str = "fleet-agent-variables";

/// One served handler.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HandlerSpec {
    pub hook: Hook,
    pub name: &'static str,
    pub timeout_seconds: i32,
    pub failure_policy: FailurePolicy,
}

/// Every handler, in discovery order.
pub const HANDLERS: [HandlerSpec; 6] = [
    HandlerSpec {
        hook: Hook::BeforeClusterCreate,
        name: BEFORE_CLUSTER_CREATE,
        timeout_seconds: 10,
        failure_policy: FailurePolicy::Ignore,
    },
    HandlerSpec {
        hook: Hook::AfterControlPlaneInitialized,
        name: AFTER_CONTROL_PLANE_INITIALIZED,
        timeout_seconds: 5,
        failure_policy: FailurePolicy::Ignore,
    },
    HandlerSpec {
        hook: Hook::BeforeClusterUpgrade,
        name: BEFORE_CLUSTER_UPGRADE,
        timeout_seconds: 10,
        failure_policy: FailurePolicy::Ignore,
    },
    HandlerSpec {
        hook: Hook::BeforeClusterDelete,
        name: BEFORE_CLUSTER_DELETE,
        timeout_seconds: 10,
        failure_policy: FailurePolicy::Ignore,
    },
    HandlerSpec {
        hook: Hook::GeneratePatches,
        name: GENERATE_PATCHES,
        timeout_seconds: 10,
        failure_policy: FailurePolicy::Fail,
    },
    HandlerSpec {
        hook: Hook::DiscoverVariables,
        name: DISCOVER_VARIABLES,
        timeout_seconds: 10,
        failure_policy: FailurePolicy::Fail,
    },
];

/// The handler serving `hook` under `name`, if any.
pub fn find(hook: Hook, name: &str) -> Option<&'static HandlerSpec> {
    HANDLERS
        .iter()
        .find(|spec| spec.hook == hook && spec.name == name)
}

/// The discovery response.
pub fn handle() -> Response {
    Response::success(
        Hook::Discovery,
        ResponseBody::Handlers {
            handlers: HANDLERS
                .iter()
                .map(|spec| ExtensionHandler {
                    name: spec.name.to_string(),
                    request_hook: GroupVersionHook {
                        api_version: API_VERSION.to_string(),
                        hook: spec.hook.name().to_string(),
                    },
                    timeout_seconds: spec.timeout_seconds,
                    failure_policy: spec.failure_policy,
                })
                .collect(),
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hooks in the catalog of CAPI v1.10 (the oldest supported release).
    const CAPI_1_10_HOOKS: [&str; 9] = [
        "BeforeClusterCreate",
        "AfterControlPlaneInitialized",
        "BeforeClusterUpgrade",
        "AfterControlPlaneUpgrade",
        "AfterClusterUpgrade",
        "BeforeClusterDelete",
        "GeneratePatches",
        "ValidateTopology",
        "DiscoverVariables",
    ];

    #[test]
    fn handler_names_are_unique_dns1123_labels_and_hooks_known_since_capi_1_10() {
        let mut names = Vec::new();
        for spec in HANDLERS {
            let name = spec.name;
            assert!(name.len() <= 63, "{name}");
            assert!(
                name.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'),
                "{name}"
            );
            assert!(!name.starts_with('-') && !name.ends_with('-'), "{name}");
            assert!(!names.contains(&name), "duplicate {name}");
            names.push(name);
            assert!(
                CAPI_1_10_HOOKS.contains(&spec.hook.name()),
                "{} is not known to CAPI v1.10",
                spec.hook.name()
            );
            assert!((1..=30).contains(&spec.timeout_seconds));
        }
    }
}
