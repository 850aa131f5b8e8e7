//! The hooks this extension serves, one row each in [`HOOKS`] (hook, handler name, the function
//! answering it, timeout, failure policy), and the dispatch of a request to its row. Discovery
//! ([`discovery`]), routing (`crate::hooks::server`) and dispatch ([`handle`]) are derived from
//! the table: adding a hook is a row and a function.
//!
//! One handler per hook family, each a function from request to response:
//! [`create`] (BeforeClusterCreate), [`delete`] (BeforeClusterDelete), [`upgrade`]
//! (BeforeClusterUpgrade), [`topology`] (GeneratePatches, DiscoverVariables), [`discovery`].
//! Side effects only in BeforeClusterCreate (and the preparation GeneratePatches asks for) and
//! BeforeClusterDelete; what they decide is in [`crate::model::hook_plan`].

mod api;
pub mod create;
pub mod delete;
pub mod discovery;
pub mod topology;
pub mod upgrade;

use futures::future::BoxFuture;
use serde_json::Value;

use crate::hooks::cluster::ClusterInfo;
use crate::hooks::hook_context::HookContext;
use crate::hooks::types::{
    API_VERSION, FailurePolicy, GeneratePatchesRequest, Hook, LifecycleRequest, RequestMeta,
    Response,
};
use crate::model::hook_plan::HookOutcome;
use crate::model::upgrade_steps::UpgradeHook;

/// Handler name of BeforeClusterCreate.
pub const BEFORE_CLUSTER_CREATE: &str = "before-cluster-create";
/// Handler name of AfterControlPlaneInitialized.
pub const AFTER_CONTROL_PLANE_INITIALIZED: &str = "after-control-plane-initialized";
/// Handler name of BeforeClusterUpgrade.
pub const BEFORE_CLUSTER_UPGRADE: &str = "before-cluster-upgrade";
/// Handler name of BeforeControlPlaneUpgrade (Cluster API v1.12+).
pub const BEFORE_CONTROL_PLANE_UPGRADE: &str = "before-control-plane-upgrade";
/// Handler name of AfterControlPlaneUpgrade.
pub const AFTER_CONTROL_PLANE_UPGRADE: &str = "after-control-plane-upgrade";
/// Handler name of BeforeWorkersUpgrade (Cluster API v1.12+).
pub const BEFORE_WORKERS_UPGRADE: &str = "before-workers-upgrade";
/// Handler name of AfterWorkersUpgrade (Cluster API v1.12+).
pub const AFTER_WORKERS_UPGRADE: &str = "after-workers-upgrade";
/// Handler name of AfterClusterUpgrade.
pub const AFTER_CLUSTER_UPGRADE: &str = "after-cluster-upgrade";
/// Handler name of BeforeClusterDelete.
pub const BEFORE_CLUSTER_DELETE: &str = "before-cluster-delete";
/// Handler name of GeneratePatches, referenced by ClusterClasses as
/// `fleet-agent-bootstrap.<ExtensionConfig name>`. Distinctive on purpose: BeforeClusterCreate
/// recognises ClusterClasses that use it by this prefix.
pub const GENERATE_PATCHES: &str = "fleet-agent-bootstrap";
/// Handler name of DiscoverVariables (`fleet-agent-variables.<ExtensionConfig name>`).
pub const DISCOVER_VARIABLES: &str = "fleet-agent-variables";

/// The function answering a hook, by the request it decodes.
#[derive(Clone, Copy, Debug)]
pub enum Serve {
    /// The discovery answer, derived from [`HOOKS`].
    Discovery,
    /// A `GeneratePatchesRequest`.
    GeneratePatches,
    /// A `DiscoverVariablesRequest` (nothing in it is read).
    DiscoverVariables,
    /// An upgrade hook's request: the Cluster and the versions (`upgrade::upgrade_step`).
    Upgrade(UpgradeHook),
    /// A lifecycle request (the Cluster, and for upgrades the versions).
    Lifecycle(
        for<'a> fn(
            &'a HookContext,
            &'a ClusterInfo,
            &'a LifecycleRequest,
        ) -> BoxFuture<'a, HookOutcome>,
    ),
}

/// How discovery advertises a handler: `ExtensionHandler` of Cluster API's
/// `api/runtime/hooks/v1alpha1/discovery_types.go` (v1.14; `exp/runtime/hooks/api/v1alpha1/` in
/// older releases): `name`, `timeoutSeconds`, `failurePolicy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Advertised {
    /// Handler name: a DNS-1123 label, unique in this extension.
    pub name: &'static str,
    pub timeout_seconds: i32,
    pub failure_policy: FailurePolicy,
}

/// Which discovery advertises a hook. A discovery answer naming a hook the Cluster API release
/// does not know fails that ExtensionConfig's whole discovery, and at the next start of
/// capi-controller-manager its warm-up, which is fatal after 60 s (cluster-api v1.11.11 and
/// v1.12.11 `internal/runtime/client/client.go` `defaultAndValidateDiscoveryResponse`;
/// `internal/controllers/extensionconfig/warmup.go`). The request is the same from every
/// release, so the extension cannot tell them apart: the hooks only v1.12+ knows have their own
/// discovery, at the path prefix [`UPGRADE_STEPS_PREFIX`], for a second ExtensionConfig that
/// only v1.12+ management clusters apply (`config/extensionconfig/upgrade-steps`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Catalog {
    /// Known to Cluster API v1.10 onward (the ExtensionConfig at the server's root).
    Base,
    /// Known to Cluster API v1.12 onward.
    UpgradeSteps,
}

/// The path prefix of the [`Catalog::UpgradeSteps`] discovery (the second ExtensionConfig's
/// `spec.clientConfig.service.path`).
pub const UPGRADE_STEPS_PREFIX: &str = "/upgrade-steps";

impl Catalog {
    /// The catalog of a request path: the part before the hooks path ends with
    /// [`UPGRADE_STEPS_PREFIX`], or not.
    pub fn of_prefix(prefix: &str) -> Catalog {
        if prefix.trim_end_matches('/').ends_with(UPGRADE_STEPS_PREFIX) {
            Catalog::UpgradeSteps
        } else {
            Catalog::Base
        }
    }
}

/// One served hook.
#[derive(Clone, Copy, Debug)]
pub struct HookSpec {
    pub hook: Hook,
    pub serve: Serve,
    /// The discovery that advertises it (Discovery itself: served under both).
    pub catalog: Catalog,
    /// `None` for Discovery itself (served without a handler name, not advertised).
    pub advertised: Option<Advertised>,
}

impl HookSpec {
    /// The path Cluster API calls (`GVHToPath`, `api/runtime/catalog/catalog.go`, v1.14: the
    /// group, the version, the lower-case hook name and, if any, the handler name).
    pub fn path(&self) -> String {
        let hook = self.hook.name().to_ascii_lowercase();
        let prefix = match self.catalog {
            Catalog::Base => "",
            Catalog::UpgradeSteps => UPGRADE_STEPS_PREFIX,
        };
        match self.advertised {
            Some(handler) => format!("{prefix}/{API_VERSION}/{hook}/{}", handler.name),
            None => format!("{prefix}/{API_VERSION}/{hook}"),
        }
    }
}

const fn advertised(
    name: &'static str,
    timeout_seconds: i32,
    failure_policy: FailurePolicy,
) -> Option<Advertised> {
    Some(Advertised {
        name,
        timeout_seconds,
        failure_policy,
    })
}

/// Every hook served, in discovery order; [`Catalog`] says which discovery advertises each. Why
/// each failure policy:
///
/// | hook | policy | why |
/// |---|---|---|
/// | BeforeClusterCreate | `Ignore` | Cluster API calls it for every Cluster of the selected namespaces, so an outage of ours must not block them all; the control-plane patch follows the bootstrap Secret (GeneratePatches adds it only once the Secret exists), so a Cluster created while this hook was unreachable gets its bootstrap one reconcile later, never a patch naming a missing Secret |
/// | AfterControlPlaneInitialized | `Ignore` | informational only; the import controller does not depend on it |
/// | BeforeClusterUpgrade and the other upgrade hooks | `Ignore` | optional gates: an unreachable extension must not stop upgrades (an answer "retry" still holds them); a step Fleet was not told of is told at the next hook |
/// | BeforeClusterDelete | `Ignore` (`Fail` with `--before-cluster-delete-failure-policy=Fail`) | an uninstalled extension must not block every deletion; what it would clean up is owned by the CAPI Cluster (garbage-collected) or expires (the token's TTL). `Ignore` turns a transport error into success (cluster-api v1.11.11 `internal/runtime/client/client.go` `CallExtension`), which ends a teardown half-done: `Fail` is the fail-closed choice |
/// | GeneratePatches | `Fail` | `Ignore` would apply the templates without the patch on a transport error, flipping the desired control plane and rolling machines |
/// | DiscoverVariables | `Fail` | the ClusterClass must know `fleetAgent` before Clusters use it; CAPI retries |
pub const HOOKS: &[HookSpec] = &[
    HookSpec {
        hook: Hook::Discovery,
        serve: Serve::Discovery,
        catalog: Catalog::Base,
        advertised: None,
    },
    HookSpec {
        hook: Hook::BeforeClusterCreate,
        serve: Serve::Lifecycle(|ctx, cluster, _| {
            Box::pin(create::before_cluster_create(ctx, cluster))
        }),
        catalog: Catalog::Base,
        advertised: advertised(BEFORE_CLUSTER_CREATE, 10, FailurePolicy::Ignore),
    },
    HookSpec {
        hook: Hook::AfterControlPlaneInitialized,
        // Nothing to do: the import controller watches Clusters itself.
        serve: Serve::Lifecycle(|_, _, _| Box::pin(async { HookOutcome::ok() })),
        catalog: Catalog::Base,
        advertised: advertised(AFTER_CONTROL_PLANE_INITIALIZED, 5, FailurePolicy::Ignore),
    },
    HookSpec {
        hook: Hook::BeforeClusterUpgrade,
        serve: Serve::Upgrade(UpgradeHook::BeforeClusterUpgrade),
        catalog: Catalog::Base,
        advertised: advertised(BEFORE_CLUSTER_UPGRADE, 10, FailurePolicy::Ignore),
    },
    HookSpec {
        hook: Hook::AfterControlPlaneUpgrade,
        serve: Serve::Upgrade(UpgradeHook::AfterControlPlaneUpgrade),
        catalog: Catalog::Base,
        advertised: advertised(AFTER_CONTROL_PLANE_UPGRADE, 10, FailurePolicy::Ignore),
    },
    HookSpec {
        hook: Hook::AfterClusterUpgrade,
        serve: Serve::Upgrade(UpgradeHook::AfterClusterUpgrade),
        catalog: Catalog::Base,
        advertised: advertised(AFTER_CLUSTER_UPGRADE, 10, FailurePolicy::Ignore),
    },
    HookSpec {
        hook: Hook::BeforeControlPlaneUpgrade,
        serve: Serve::Upgrade(UpgradeHook::BeforeControlPlaneUpgrade),
        catalog: Catalog::UpgradeSteps,
        advertised: advertised(BEFORE_CONTROL_PLANE_UPGRADE, 10, FailurePolicy::Ignore),
    },
    HookSpec {
        hook: Hook::BeforeWorkersUpgrade,
        serve: Serve::Upgrade(UpgradeHook::BeforeWorkersUpgrade),
        catalog: Catalog::UpgradeSteps,
        advertised: advertised(BEFORE_WORKERS_UPGRADE, 10, FailurePolicy::Ignore),
    },
    HookSpec {
        hook: Hook::AfterWorkersUpgrade,
        serve: Serve::Upgrade(UpgradeHook::AfterWorkersUpgrade),
        catalog: Catalog::UpgradeSteps,
        advertised: advertised(AFTER_WORKERS_UPGRADE, 10, FailurePolicy::Ignore),
    },
    HookSpec {
        hook: Hook::BeforeClusterDelete,
        serve: Serve::Lifecycle(|ctx, cluster, _| {
            Box::pin(delete::before_cluster_delete(ctx, cluster))
        }),
        catalog: Catalog::Base,
        advertised: advertised(BEFORE_CLUSTER_DELETE, 10, FailurePolicy::Ignore),
    },
    HookSpec {
        hook: Hook::GeneratePatches,
        serve: Serve::GeneratePatches,
        catalog: Catalog::Base,
        advertised: advertised(GENERATE_PATCHES, 10, FailurePolicy::Fail),
    },
    HookSpec {
        hook: Hook::DiscoverVariables,
        serve: Serve::DiscoverVariables,
        catalog: Catalog::Base,
        advertised: advertised(DISCOVER_VARIABLES, 10, FailurePolicy::Fail),
    },
];

/// The hook a path segment names (`beforeclustercreate`, compared without case), if served.
pub fn hook_of_segment(segment: &str) -> Option<Hook> {
    HOOKS
        .iter()
        .find(|spec| spec.hook.name().eq_ignore_ascii_case(segment))
        .map(|spec| spec.hook)
}

/// The row serving `hook` under `handler` (`None`: Discovery's path, which has no handler name).
pub fn find(hook: Hook, handler: Option<&str>) -> Option<&'static HookSpec> {
    HOOKS.iter().find(|spec| {
        spec.hook == hook && spec.advertised.map(|advertised| advertised.name) == handler
    })
}

/// Decodes `body` as the request of `hook` and answers it, as served at the server's root.
pub async fn handle(ctx: &HookContext, hook: Hook, body: &[u8]) -> Response {
    handle_in(ctx, Catalog::Base, hook, body).await
}

/// Decodes `body` as the request of `hook` and answers it; `catalog` is the discovery the path
/// names. Every problem with the request is a Failure answer naming it.
pub async fn handle_in(ctx: &HookContext, catalog: Catalog, hook: Hook, body: &[u8]) -> Response {
    let fail = |message: String| Response::failure(Some(hook), message);
    let Some(spec) = HOOKS.iter().find(|spec| spec.hook == hook) else {
        return fail(format!("{} is not served", hook.name()));
    };
    let value: Value = match serde_json::from_slice(body) {
        Ok(value) => value,
        Err(err) => return fail(format!("the request body is not valid JSON: {err}")),
    };
    if !value.is_object() {
        return fail("the request body is not a JSON object".to_string());
    }
    let meta: RequestMeta = serde_json::from_value(value.clone()).unwrap_or_default();
    if let Some(kind) = meta.kind.as_deref().filter(|k| !k.is_empty())
        && kind != hook.request_kind()
    {
        return fail(format!("expected kind {}, got {kind}", hook.request_kind()));
    }
    if let Some(api_version) = meta.api_version.as_deref().filter(|v| !v.is_empty())
        && api_version != API_VERSION
    {
        return fail(format!(
            "expected apiVersion {API_VERSION}, got {api_version}"
        ));
    }
    match spec.serve {
        Serve::Discovery => discovery::handle(
            catalog,
            if ctx.base.flags.before_cluster_delete_failure_policy == "Fail" {
                FailurePolicy::Fail
            } else {
                FailurePolicy::Ignore
            },
        ),
        Serve::DiscoverVariables => topology::discover_variables(),
        Serve::GeneratePatches => match serde_json::from_value::<GeneratePatchesRequest>(value) {
            Ok(request) => topology::serve_generate_patches(ctx, &request).await,
            Err(err) => fail(format!("malformed GeneratePatchesRequest: {err}")),
        },
        Serve::Lifecycle(answer) => match lifecycle_request(hook, value) {
            Ok((request, cluster)) => {
                let outcome = answer(ctx, &cluster, &request).await;
                lifecycle_response(hook, &cluster, outcome)
            }
            Err(response) => response,
        },
        Serve::Upgrade(step) => match lifecycle_request(hook, value) {
            Ok((request, cluster)) => {
                let outcome = upgrade::upgrade_step(ctx, &cluster, step, &request).await;
                lifecycle_response(hook, &cluster, outcome)
            }
            Err(response) => response,
        },
    }
}

/// The request of a lifecycle hook and its Cluster, or the Failure naming what is wrong.
fn lifecycle_request(
    hook: Hook,
    value: Value,
) -> Result<(LifecycleRequest, ClusterInfo), Response> {
    let request = serde_json::from_value::<LifecycleRequest>(value).map_err(|err| {
        Response::failure(
            Some(hook),
            format!("malformed {}: {err}", hook.request_kind()),
        )
    })?;
    let cluster = ClusterInfo::decode(&request.cluster)
        .map_err(|message| Response::failure(Some(hook), message))?;
    Ok((request, cluster))
}

fn lifecycle_response(hook: Hook, cluster: &ClusterInfo, outcome: HookOutcome) -> Response {
    log_outcome(hook, cluster, &outcome);
    Response::lifecycle(hook, outcome)
}

fn log_outcome(hook: Hook, cluster: &ClusterInfo, outcome: &HookOutcome) {
    let (status, message) = match outcome {
        HookOutcome::Success { message } => ("Success", message),
        HookOutcome::Retry { message, .. } => ("Retry", message),
        HookOutcome::Failure { message } => ("Failure", message),
    };
    if matches!(outcome, HookOutcome::Failure { .. }) {
        tracing::warn!(hook = hook.name(), cluster = %cluster.name, namespace = %cluster.namespace, status, %message, "hook answered");
    } else {
        tracing::debug!(hook = hook.name(), cluster = %cluster.name, namespace = %cluster.namespace, status, %message, "hook answered");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hooks::server::{Route, route};

    #[test]
    fn hooks_from_path_segments() {
        for spec in HOOKS {
            let hook = spec.hook;
            assert_eq!(
                hook_of_segment(&hook.name().to_ascii_lowercase()),
                Some(hook)
            );
        }
        assert_eq!(hook_of_segment("generateupgradeplan"), None);
        assert_eq!(hook_of_segment(""), None);
    }

    /// Every row is routed to itself from its path (the path Cluster API calls), and every hook
    /// appears once.
    #[test]
    fn every_row_is_served_at_its_path() {
        let mut hooks = Vec::new();
        for spec in HOOKS {
            assert!(!hooks.contains(&spec.hook), "{:?} twice", spec.hook);
            hooks.push(spec.hook);
            let handler = spec.advertised.map(|advertised| advertised.name);
            assert_eq!(
                route(&spec.path()),
                Route::Hook {
                    hook: spec.hook,
                    handler: handler.map(str::to_string),
                    catalog: spec.catalog,
                },
                "{}",
                spec.path()
            );
            let found = find(spec.hook, handler).expect("served");
            assert_eq!(found.hook, spec.hook);
            if spec.hook == Hook::Discovery {
                assert!(matches!(spec.serve, Serve::Discovery));
            } else {
                assert!(find(spec.hook, None).is_none(), "{:?}", spec.hook);
                assert!(find(spec.hook, Some("other")).is_none(), "{:?}", spec.hook);
            }
            // Lifecycle functions for exactly the hooks whose requests carry a Cluster.
            assert_eq!(
                matches!(spec.serve, Serve::Lifecycle(_) | Serve::Upgrade(_)),
                matches!(
                    spec.hook,
                    Hook::BeforeClusterCreate
                        | Hook::AfterControlPlaneInitialized
                        | Hook::BeforeClusterUpgrade
                        | Hook::BeforeControlPlaneUpgrade
                        | Hook::AfterControlPlaneUpgrade
                        | Hook::BeforeWorkersUpgrade
                        | Hook::AfterWorkersUpgrade
                        | Hook::AfterClusterUpgrade
                        | Hook::BeforeClusterDelete
                ),
                "{:?}",
                spec.hook
            );
        }
    }
}
