//! Discovery: the handlers this extension serves, with their timeouts and failure policies,
//! derived from the one table [`super::HOOKS`] (where each failure policy is explained), one
//! answer per [`Catalog`]. The wire format is Cluster API's `DiscoveryResponse`
//! (`api/runtime/hooks/v1alpha1/discovery_types.go`, v1.14; `exp/runtime/hooks/api/v1alpha1/` in
//! older releases).

use crate::hooks::handlers::{Catalog, HOOKS};
use crate::hooks::types::{
    API_VERSION, ExtensionHandler, FailurePolicy, GroupVersionHook, Hook, Response, ResponseBody,
};

/// The discovery response of `catalog`, BeforeClusterDelete with `delete_policy`.
pub fn handle(catalog: Catalog, delete_policy: FailurePolicy) -> Response {
    Response::success(
        Hook::Discovery,
        ResponseBody::Handlers {
            handlers: HOOKS
                .iter()
                .filter(|spec| spec.catalog == catalog)
                .filter_map(|spec| {
                    let advertised = spec.advertised?;
                    Some(ExtensionHandler {
                        name: advertised.name.to_string(),
                        request_hook: GroupVersionHook {
                            api_version: API_VERSION.to_string(),
                            hook: spec.hook.name().to_string(),
                        },
                        timeout_seconds: advertised.timeout_seconds,
                        failure_policy: if spec.hook == Hook::BeforeClusterDelete {
                            delete_policy
                        } else {
                            advertised.failure_policy
                        },
                    })
                })
                .collect(),
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The hooks Cluster API v1.11 knows (cluster-api v1.11.11 `api/runtime/hooks/v1alpha1/`:
    /// every `catalogBuilder.RegisterHook`); v1.10's catalog is the same list.
    const CAPI_1_11_HOOKS: [&str; 9] = [
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

    /// What v1.12 adds (cluster-api v1.12.0–v1.12.11 `lifecyclehooks_types.go`,
    /// `upgrade_plan_types.go`, `inplaceupdate_types.go`; unchanged in v1.13.5 and v1.14.0).
    const CAPI_1_12_ADDED: [&str; 7] = [
        "BeforeControlPlaneUpgrade",
        "BeforeWorkersUpgrade",
        "AfterWorkersUpgrade",
        "GenerateUpgradePlan",
        "CanUpdateMachine",
        "CanUpdateMachineSet",
        "UpdateMachine",
    ];

    /// Cluster API's check of a discovery answer against its catalog
    /// (`defaultAndValidateDiscoveryResponse`, v1.11.11 and v1.12.11
    /// `internal/runtime/client/client.go`): every handler's hook in the catalog, names unique
    /// DNS-1123 labels, timeouts 0–30, policy Ignore or Fail. One wrong handler fails the whole
    /// answer.
    fn valid_for(catalog: &[&str], answer: &serde_json::Value) -> Result<(), String> {
        let mut names = Vec::new();
        for handler in answer["handlers"].as_array().into_iter().flatten() {
            let name = handler["name"].as_str().unwrap_or_default();
            let hook = handler["requestHook"]["hook"].as_str().unwrap_or_default();
            if handler["requestHook"]["apiVersion"] != API_VERSION || !catalog.contains(&hook) {
                return Err(format!(
                    "handler {name} requestHook {hook} is not in the Runtime SDK catalog"
                ));
            }
            let label = !name.is_empty()
                && name.len() <= 63
                && name
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && !name.starts_with('-')
                && !name.ends_with('-');
            if !label || names.contains(&name) {
                return Err(format!("handler name {name:?}"));
            }
            names.push(name);
            let timeout = handler["timeoutSeconds"].as_i64().unwrap_or(-1);
            if !(0..=30).contains(&timeout) {
                return Err(format!("{name}: timeoutSeconds {timeout}"));
            }
            if !["Ignore", "Fail"].contains(&handler["failurePolicy"].as_str().unwrap_or_default())
            {
                return Err(format!("{name}: failurePolicy"));
            }
        }
        Ok(())
    }

    /// One install answers both releases: the root discovery is valid for v1.11 and v1.12; the
    /// upgrade-steps discovery is valid for v1.12 and would fail v1.11's (so only v1.12+
    /// management clusters register it), and together they advertise every served hook once.
    #[test]
    fn each_discovery_is_valid_for_the_releases_that_register_it() {
        let v1_12: Vec<&str> = CAPI_1_11_HOOKS
            .iter()
            .chain(CAPI_1_12_ADDED.iter())
            .copied()
            .collect();
        let base =
            serde_json::to_value(handle(Catalog::Base, FailurePolicy::Ignore)).expect("json");
        let steps = serde_json::to_value(handle(Catalog::UpgradeSteps, FailurePolicy::Ignore))
            .expect("json");
        assert_eq!(valid_for(&CAPI_1_11_HOOKS, &base), Ok(()));
        assert_eq!(valid_for(&v1_12, &base), Ok(()));
        assert_eq!(valid_for(&v1_12, &steps), Ok(()));
        assert!(
            valid_for(&CAPI_1_11_HOOKS, &steps)
                .is_err_and(|e| e.contains("is not in the Runtime SDK catalog")),
            "v1.11 would refuse the upgrade-steps discovery"
        );
        let advertised = |answer: &serde_json::Value| -> Vec<String> {
            answer["handlers"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|h| h["requestHook"]["hook"].as_str().map(str::to_string))
                .collect()
        };
        let mut all = advertised(&base);
        all.extend(advertised(&steps));
        let served: Vec<String> = HOOKS
            .iter()
            .filter(|spec| spec.advertised.is_some())
            .map(|spec| spec.hook.name().to_string())
            .collect();
        assert_eq!(
            all.len(),
            served.len(),
            "each hook advertised once: {all:?}"
        );
        for hook in served {
            assert!(all.contains(&hook), "{hook} is advertised");
        }
    }

    /// Every advertised row is in its discovery answer, in table order, and the answers are the
    /// golden fixtures of the server tests.
    #[test]
    fn the_discovery_answers_are_derived_from_the_table_and_unchanged() {
        for (catalog, fixture) in [
            (
                Catalog::Base,
                include_str!("../../../tests/fixtures/hooks/discovery.json"),
            ),
            (
                Catalog::UpgradeSteps,
                include_str!("../../../tests/fixtures/hooks/discovery-upgrade-steps.json"),
            ),
        ] {
            let fixture: serde_json::Value = serde_json::from_str(fixture).expect("fixture");
            let answer =
                serde_json::to_value(handle(catalog, FailurePolicy::Ignore)).expect("json");
            assert_eq!(answer, fixture["response"], "{catalog:?}");
            let names: Vec<&str> = answer["handlers"]
                .as_array()
                .expect("handlers")
                .iter()
                .filter_map(|h| h["name"].as_str())
                .collect();
            let rows: Vec<&str> = HOOKS
                .iter()
                .filter(|spec| spec.catalog == catalog)
                .filter_map(|spec| spec.advertised.map(|a| a.name))
                .collect();
            assert_eq!(names, rows, "{catalog:?}");
        }
    }

    /// `--before-cluster-delete-failure-policy=Fail`: BeforeClusterDelete fail-closed, the rest
    /// as the table says.
    #[test]
    fn before_cluster_delete_can_fail_closed() {
        let answer =
            serde_json::to_value(handle(Catalog::Base, FailurePolicy::Fail)).expect("json");
        for handler in answer["handlers"].as_array().expect("handlers") {
            let want = match handler["requestHook"]["hook"].as_str() {
                Some("BeforeClusterDelete" | "GeneratePatches" | "DiscoverVariables") => "Fail",
                _ => "Ignore",
            };
            assert_eq!(handler["failurePolicy"], want, "{handler}");
        }
    }
}
