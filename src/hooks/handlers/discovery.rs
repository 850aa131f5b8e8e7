//! Discovery: the handlers this extension serves, with their timeouts and failure policies,
//! derived from the one table [`super::HOOKS`] (where each failure policy is explained). The
//! wire format is Cluster API's `DiscoveryResponse` (`api/runtime/hooks/v1alpha1/
//! discovery_types.go`, v1.14; `exp/runtime/hooks/api/v1alpha1/` in older releases).

use crate::hooks::handlers::HOOKS;
use crate::hooks::types::{
    API_VERSION, ExtensionHandler, GroupVersionHook, Hook, Response, ResponseBody,
};

/// The discovery response.
pub fn handle() -> Response {
    Response::success(
        Hook::Discovery,
        ResponseBody::Handlers {
            handlers: HOOKS
                .iter()
                .filter_map(|spec| {
                    let advertised = spec.advertised?;
                    Some(ExtensionHandler {
                        name: advertised.name.to_string(),
                        request_hook: GroupVersionHook {
                            api_version: API_VERSION.to_string(),
                            hook: spec.hook.name().to_string(),
                        },
                        timeout_seconds: advertised.timeout_seconds,
                        failure_policy: advertised.failure_policy,
                    })
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
        let mut advertised = 0;
        for spec in HOOKS {
            let Some(handler) = spec.advertised else {
                assert_eq!(spec.hook, Hook::Discovery);
                continue;
            };
            advertised += 1;
            let name = handler.name;
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
            assert!((1..=30).contains(&handler.timeout_seconds));
        }
        assert_eq!(advertised, HOOKS.len() - 1);
    }

    /// Every advertised row is in the discovery answer, in table order, and the answer is the one
    /// Cluster API has been reading (the golden fixture of the server tests).
    #[test]
    fn the_discovery_answer_is_derived_from_the_table_and_unchanged() {
        let fixture: serde_json::Value =
            serde_json::from_str(include_str!("../../../tests/fixtures/hooks/discovery.json"))
                .expect("fixture");
        let answer = serde_json::to_value(handle()).expect("json");
        assert_eq!(answer, fixture["response"]);
        let names: Vec<&str> = answer["handlers"]
            .as_array()
            .expect("handlers")
            .iter()
            .filter_map(|h| h["name"].as_str())
            .collect();
        let rows: Vec<&str> = HOOKS
            .iter()
            .filter_map(|spec| spec.advertised.map(|a| a.name))
            .collect();
        assert_eq!(names, rows);
    }
}
