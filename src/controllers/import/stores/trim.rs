//! What a cache keeps of a watched object: the fields read, our own managedFields entries, and
//! `templateValues` as a digest.

use std::sync::Arc;

use fleet_api_rs::fleet_cluster::Cluster as FleetCluster;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry};
use kube::ResourceExt;
use kube::core::Resource;

use crate::api::{CachedFleetCluster, CapiCluster};
use crate::model::capi::keep_read_status;
use crate::model::diff::{compact_fields, digest_subtree};
use crate::names;

/// Field managers whose `managedFields` entries we keep in caches.
pub(super) const OUR_MANAGERS: &[&str] = &[
    names::FIELD_MANAGER,
    // Tells a registration stub from a completed Fleet Cluster (`is_registration_stub`).
    names::REGISTRATION_FIELD_MANAGER,
    names::RUNTIME_EXTENSION_FIELD_MANAGER,
    names::NAMESPACE_FIELD_MANAGER,
    names::HEALTH_FIELD_MANAGER,
];

/// What the Cluster cache keeps of a watched Cluster: the metadata, spec and read status fields
/// (`tests/cache_footprint.rs` measures it). Of our managedFields entries only the manager and
/// the subresource: the health controller asks whether it owns status fields, and
/// nothing reads a cached Cluster's owned fields (the finalizer patch reads `finalizers`, the
/// condition's no-op check the condition itself), which were about 450 bytes in 8 allocations.
pub fn prepare_cached_cluster(cluster: &mut CapiCluster) {
    // Before `slim`, which then has no fieldsV1 left to compact.
    for entry in cluster.metadata.managed_fields.iter_mut().flatten() {
        *entry = ManagedFieldsEntry {
            manager: entry.manager.take(),
            subresource: entry.subresource.take(),
            ..ManagedFieldsEntry::default()
        };
    }
    slim(cluster);
    cluster.body.edit(keep_read_status);
}

/// What the Fleet Cluster cache keeps of a watched Fleet Cluster: our managedFields entries,
/// `templateValues` as a digest, the rest as compact text.
pub fn cached_fleet_cluster(mut fleet: FleetCluster) -> CachedFleetCluster {
    forget_owned_template_values(&mut fleet);
    slim(&mut fleet);
    digest_template_values(&mut fleet);
    CachedFleetCluster::of(fleet)
}

/// A cached Fleet Cluster, decoded.
pub fn decoded(cached: &CachedFleetCluster) -> Option<Arc<FleetCluster>> {
    let typed = cached.typed();
    if typed.is_none() {
        tracing::error!(fleet_cluster = %cached.name_any(), namespace = ?cached.namespace(), "cached Fleet Cluster does not decode");
    }
    typed.map(Arc::new)
}

/// Keeps only our managedFields entries (their fieldsV1 as compact text), and drops the
/// last-applied annotation.
pub(super) fn slim<K: Resource>(object: &mut K) {
    let meta = object.meta_mut();
    if let Some(entries) = meta.managed_fields.as_mut() {
        entries.retain(|entry| {
            entry
                .manager
                .as_deref()
                .is_some_and(|m| OUR_MANAGERS.contains(&m))
        });
        entries.iter_mut().for_each(compact_fields);
        if entries.is_empty() {
            meta.managed_fields = None;
        }
    }
    if let Some(annotations) = meta.annotations.as_mut() {
        annotations.remove(names::LAST_APPLIED_ANNOTATION);
    }
}

/// Replaces a cached Fleet Cluster's `templateValues` by their digest: a copy of the CAPI
/// Cluster's metadata and spec that is only ever compared whole (the no-op check digests the
/// desired object alike, see `model/import.rs`); as a tree of maps it was the largest part of every
/// cached Fleet Cluster. Nothing else reads them from the cache.
pub(super) fn digest_template_values(fleet: &mut FleetCluster) {
    let Some(values) = fleet.spec.template_values.take() else {
        return;
    };
    let mut spec = serde_json::json!({"templateValues": values});
    digest_subtree(&mut spec, "/templateValues");
    if let Some(serde_json::Value::Object(digest)) =
        spec.get_mut("templateValues").map(serde_json::Value::take)
    {
        fleet.spec.template_values = Some(digest.into_iter().collect());
    }
}

/// Empties what our managedFields entries list below `templateValues`: one field per field of
/// the CAPI Cluster and its referenced objects, and never read, as the no-op check compares
/// `templateValues` by digest (a digest owns its whole subtree: `model::diff::drops_owned`).
/// The entry still owns `templateValues` itself, so a desired object without them still reads
/// as a change.
pub(super) fn forget_owned_template_values(fleet: &mut FleetCluster) {
    for entry in fleet.metadata.managed_fields.iter_mut().flatten() {
        if let Some(FieldsV1(fields)) = entry.fields_v1.as_mut()
            && let Some(owned) = fields.pointer_mut(OWNED_TEMPLATE_VALUES)
        {
            *owned = serde_json::json!({});
        }
    }
}

/// [`crate::model::fleet::TEMPLATE_VALUES`] in a `fieldsV1` tree.
const OWNED_TEMPLATE_VALUES: &str = "/f:spec/f:templateValues";
