//! Which Clusters get the Fleet agent bootstrap, and what the hooks answer: pure decisions.
//!
//! Two rules keep real clusters safe (issue: a patch that names a Secret nobody wrote hangs
//! control-plane rollouts):
//! 1. **The patch follows the Secret.** GeneratePatches adds the bootstrap to a control-plane
//!    template only when the Cluster's bootstrap Secret exists; otherwise it answers an empty
//!    patch and the Secret is prepared in the background, so CAPI's next topology reconcile adds
//!    the patch (one rollout, onto machines whose bootstrap data can be generated).
//!    BeforeClusterCreate writes the Secret before CAPI creates the first machine, so a new
//!    Cluster gets the patch from the start (kubernetes-sigs/cluster-api v1.10–v1.11
//!    `internal/controllers/topology/cluster/cluster_controller.go`: BeforeClusterCreate is
//!    called before the desired state, and so GeneratePatches, is computed).
//! 2. **Clusters that do not use the bootstrap are never held.** A Cluster without the
//!    `fleetAgent` variable (its class does not use this extension's variables) or with
//!    `fleetAgent.enabled: false` gets Success from BeforeClusterCreate at once, before any
//!    configuration or API read.

use serde_json::Value;

/// Name of the ClusterClass variable this extension defines (DiscoverVariables) and reads from
/// Clusters (`spec.topology.variables`, with the control plane's override).
pub const FLEET_AGENT_VARIABLE: &str = "fleetAgent";

/// Whether a Cluster's control plane uses the Fleet agent bootstrap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FleetAgentSetting {
    /// No `fleetAgent` variable: the Cluster's class does not use this extension's variables.
    NotUsed,
    /// `fleetAgent.enabled: false`.
    Disabled,
    /// `fleetAgent` set, `enabled` true or absent (the schema's default is true).
    Enabled,
}

impl FleetAgentSetting {
    /// From the control plane's variable values: the control-plane override
    /// (`spec.topology.controlPlane.variables.overrides`) wins over the Cluster-level variable
    /// (`spec.topology.variables`), as Cluster API hands the control-plane template the
    /// overridden value (v1.11 `internal/webhooks/cluster.go` `DefaultVariables`).
    pub fn of(cluster_level: Option<&Value>, control_plane_override: Option<&Value>) -> Self {
        match control_plane_override.or(cluster_level) {
            None => FleetAgentSetting::NotUsed,
            Some(value) if value.get("enabled").and_then(Value::as_bool) == Some(false) => {
                FleetAgentSetting::Disabled
            }
            Some(_) => FleetAgentSetting::Enabled,
        }
    }

    pub fn enabled(self) -> bool {
        self == FleetAgentSetting::Enabled
    }
}

/// What a GeneratePatches request does for one Cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PatchPlan {
    /// Add the bootstrap to the control-plane templates.
    Patch,
    /// Leave every template as it is.
    NoPatch,
    /// Leave every template as it is and prepare the bootstrap Secret: the next topology
    /// reconcile after it exists adds the patch.
    NoPatchPrepare,
}

/// GeneratePatches' rule: patch only when the bootstrap Secret exists.
pub fn patch_plan(setting: FleetAgentSetting, secret_exists: bool) -> PatchPlan {
    match (setting.enabled(), secret_exists) {
        (false, _) => PatchPlan::NoPatch,
        (true, true) => PatchPlan::Patch,
        (true, false) => PatchPlan::NoPatchPrepare,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn setting_from_cluster_and_control_plane_values() {
        let on = json!({"enabled": true});
        let off = json!({"enabled": false});
        let defaulted = json!({});
        let rows: [(Option<&Value>, Option<&Value>, FleetAgentSetting); 7] = [
            (None, None, FleetAgentSetting::NotUsed),
            (Some(&on), None, FleetAgentSetting::Enabled),
            (Some(&defaulted), None, FleetAgentSetting::Enabled),
            (Some(&off), None, FleetAgentSetting::Disabled),
            // A control-plane override true under a cluster-level false: the control plane is
            // patched, so the Secret must be prepared.
            (Some(&off), Some(&on), FleetAgentSetting::Enabled),
            (Some(&on), Some(&off), FleetAgentSetting::Disabled),
            (None, Some(&on), FleetAgentSetting::Enabled),
        ];
        for (cluster, control_plane, expected) in rows {
            assert_eq!(
                FleetAgentSetting::of(cluster, control_plane),
                expected,
                "{cluster:?} {control_plane:?}"
            );
        }
    }

    #[test]
    fn the_patch_follows_the_secret() {
        use FleetAgentSetting::*;
        let rows = [
            (Enabled, true, PatchPlan::Patch),
            (Enabled, false, PatchPlan::NoPatchPrepare),
            (Disabled, true, PatchPlan::NoPatch),
            (Disabled, false, PatchPlan::NoPatch),
            (NotUsed, true, PatchPlan::NoPatch),
            (NotUsed, false, PatchPlan::NoPatch),
        ];
        for (setting, exists, expected) in rows {
            assert_eq!(
                patch_plan(setting, exists),
                expected,
                "{setting:?} {exists}"
            );
        }
    }
}
