//! API types: our own CRD and the printer of its manifest.

mod capi;
pub mod compact;
mod fleet;
mod fleet_addon_config;

pub use capi::{CapiCluster, CapiClusterClass};
pub use fleet::{BundleNamespaceMapping, CachedFleetCluster};
pub use fleet_addon_config::*;

use kube::CustomResourceExt;

/// The CRDs this provider defines, as YAML documents (what `caapf crd` prints and what
/// `config/crd/bases/` holds).
pub fn crds_yaml() -> Result<String, serde_yaml::Error> {
    let crd = FleetAddonConfig::crd();
    Ok(format!("---\n{}", serde_yaml::to_string(&crd)?))
}

/// Path of the checked-in CRD manifest, relative to the repository root.
pub const CRD_MANIFEST_PATH: &str =
    "config/crd/bases/addons.cluster.x-k8s.io_fleetaddonconfigs.yaml";
