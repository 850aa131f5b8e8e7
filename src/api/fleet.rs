//! Fleet types that `fleet-api-rs` lacks.

use std::borrow::Cow;

use fleet_api_rs::fleet_bundle_namespace_mapping::{
    BundleNamespaceMappingBundleSelector, BundleNamespaceMappingNamespaceSelector,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::{NamespaceResourceScope, Resource};
use serde::{Deserialize, Serialize};

/// Fleet `BundleNamespaceMapping` (`fleet.cattle.io/v1alpha1`): bundles in its namespace matching
/// `bundleSelector` may target clusters in the namespaces matching `namespaceSelector`. Its
/// selectors are top-level fields (there is no `spec`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct BundleNamespaceMapping {
    #[serde(default = "bnm_api_version")]
    pub api_version: String,
    #[serde(default = "bnm_kind")]
    pub kind: String,
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bundle_selector: Option<BundleNamespaceMappingBundleSelector>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<BundleNamespaceMappingNamespaceSelector>,
}

fn bnm_api_version() -> String {
    "fleet.cattle.io/v1alpha1".to_string()
}

fn bnm_kind() -> String {
    "BundleNamespaceMapping".to_string()
}

impl BundleNamespaceMapping {
    /// An empty mapping with `apiVersion` and `kind` set.
    pub fn new(metadata: ObjectMeta) -> Self {
        Self {
            api_version: bnm_api_version(),
            kind: bnm_kind(),
            metadata,
            ..Default::default()
        }
    }
}

impl Resource for BundleNamespaceMapping {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        "BundleNamespaceMapping".into()
    }
    fn group(_: &()) -> Cow<'_, str> {
        "fleet.cattle.io".into()
    }
    fn version(_: &()) -> Cow<'_, str> {
        "v1alpha1".into()
    }
    fn plural(_: &()) -> Cow<'_, str> {
        "bundlenamespacemappings".into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}
