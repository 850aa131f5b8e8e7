//! API types: our own CRD and the printer of its manifest, the cached forms of the objects we
//! watch, and durations as these APIs write them.

/// `kube::Resource` for a namespaced type of fixed group, version, kind and plural whose
/// `metadata` field is an `ObjectMeta`.
macro_rules! namespaced_resource {
    ($name:ty, $group:literal, $version:literal, $kind:literal, $plural:literal) => {
        impl kube::core::Resource for $name {
            type DynamicType = ();
            type Scope = kube::core::NamespaceResourceScope;

            fn kind(_: &()) -> std::borrow::Cow<'_, str> {
                $kind.into()
            }
            fn group(_: &()) -> std::borrow::Cow<'_, str> {
                $group.into()
            }
            fn version(_: &()) -> std::borrow::Cow<'_, str> {
                $version.into()
            }
            fn plural(_: &()) -> std::borrow::Cow<'_, str> {
                $plural.into()
            }
            fn meta(&self) -> &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                &self.metadata
            }
            fn meta_mut(
                &mut self,
            ) -> &mut k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                &mut self.metadata
            }
        }
    };
}

pub(crate) use namespaced_resource;

mod capi;
pub mod compact;
pub mod duration;
mod fleet;
mod fleet_addon_config;
mod fleet_addon_config_status;
mod schema;

pub use capi::{CapiCluster, CapiClusterClass};
pub use fleet::{BundleNamespaceMapping, CachedFleetCluster};
pub use fleet_addon_config::*;
pub use fleet_addon_config_status::*;

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
