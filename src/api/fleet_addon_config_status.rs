//! The observed state of a FleetAddonConfig (`status`).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_with::skip_serializing_none;

/// Observed state.
#[skip_serializing_none]
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct FleetAddonConfigStatus {
    /// Fleet version installed by this provider.
    pub installed_version: Option<String>,

    /// Conditions: `Ready`, `Installed`, `RepoAdd`, `RepoUpdate`, `FlagsUpdate`, `ConfigValid`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,

    /// Cluster import counts, updated at a bounded rate.
    pub clusters: Option<ClusterCounts>,

    /// Rollout waves: per wave the clusters, held and ready, and the bundles rolling out; the
    /// soaks under way. Added by this provider.
    pub rollout: Option<RolloutStatus>,
}

/// `status.rollout`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutStatus {
    #[serde(default)]
    pub waves: Vec<WaveStatus>,
    /// Soaks under way, per ClusterClass (`namespace/name`) and wave: kept across restarts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub soaks: Vec<SoakStatus>,
}

/// One wave in `status.rollout.waves`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WaveStatus {
    pub name: String,
    pub clusters: i64,
    pub held: i64,
    pub ready: i64,
    /// Bundles not ready on clusters of the wave (at most 10).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rolling: Vec<String>,
}

/// One soak in `status.rollout.soaks`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SoakStatus {
    pub class: String,
    pub wave: String,
    /// RFC 3339.
    pub until: String,
}

/// Counts of CAPI Clusters by import state.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterCounts {
    /// CAPI Clusters selected by the configuration.
    pub selected: i64,
    /// Selected Clusters with a Fleet Cluster.
    pub imported: i64,
    /// Selected Clusters waiting for their control plane to be initialized.
    pub waiting: i64,
    /// Imported Clusters whose Fleet agent checks in and whose Fleet bundles are all ready (their
    /// `FleetReady` condition is, or would be, True). Added by this provider.
    #[serde(default)]
    pub ready: i64,
}
