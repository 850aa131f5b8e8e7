//! The Fleet objects we want for CAPI objects: Fleet `Cluster`, `ClusterRegistrationToken`,
//! `ClusterGroup` and `BundleNamespaceMapping`. Pure: the controllers and the Runtime SDK hooks
//! build the same objects from the same inputs.

use std::collections::BTreeMap;

use fleet_api_rs::fleet_bundle_namespace_mapping::{
    BundleNamespaceMappingBundleSelector, BundleNamespaceMappingNamespaceSelector,
};
use fleet_api_rs::fleet_cluster::{Cluster as FleetCluster, ClusterSpec as FleetClusterSpec};
use fleet_api_rs::fleet_cluster_registration_token::{
    ClusterRegistrationToken, ClusterRegistrationTokenSpec,
};
use fleet_api_rs::fleet_clustergroup::{ClusterGroup, ClusterGroupSelector, ClusterGroupSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::jiff::Timestamp;
use serde_json::Value;

use crate::api::{AgentSettings, BundleNamespaceMapping};
use crate::model::capi::{ClassRef, ClassView, ClusterView, StringMap, template_object};
use crate::model::config::{ClassGroups, ClusterImport};
use crate::names;

/// Where a Fleet Cluster keeps the copy of its CAPI Cluster (and referenced objects) that the
/// import's cache holds as a digest ([`crate::model::diff::digest_subtree`]).
pub const TEMPLATE_VALUES: &str = "/spec/templateValues";

/// How a Fleet Cluster registers with Fleet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Registration {
    /// Fleet connects to the cluster with the CAPI kubeconfig Secret and deploys the agent.
    ManagerInitiated,
    /// The agent connects to Fleet with a registration token and this client ID.
    AgentInitiated { client_id: String },
}

/// Whether the Cluster registers agent-initiated: the configuration says so, or the runtime
/// extension prepared it that way (the live Fleet Cluster carries our registration annotation).
pub fn is_agent_initiated(
    import: &ClusterImport,
    cluster: &ClusterView,
    live: Option<&ObjectMeta>,
) -> bool {
    import.agent_initiated.applies_to(&cluster.labels) || prepared_by_runtime_extension(live)
}

/// `hostNetwork` of a Cluster whose agent boots through the runtime extension (agent-initiated
/// and [`crate::model::import::may_have_bootstrap`]), when no layer sets it.
pub fn default_boot_host_network(spec: &mut FleetClusterSpec) {
    spec.host_network
        .get_or_insert(crate::model::config::DEFAULT_HOST_NETWORK);
}

/// The Event reason of an agent setting held on a registered agent-initiated Cluster.
pub const AGENT_SETTING_HELD_REASON: &str = "AgentSettingHeld";

/// Agent setting changes that would strand the registered agent of an agent-initiated Cluster,
/// put back to their `live` values in `desired`, each with what to do. Fleet moves an agent to
/// another namespace, and creates the PriorityClass a `priorityClass` names, only when it
/// deploys the agent through a kubeconfig (rancher/fleet v0.16.1
/// `internal/cmd/controller/agentmanagement/controllers/cluster/import.go` `importCluster`);
/// for an agent-initiated cluster it would deploy a new agent without credentials (and
/// garbage-collect the old one), or pods the PriorityClass admission refuses.
pub fn hold_stranding_changes(desired: &mut FleetClusterSpec, live: &FleetCluster) -> Vec<String> {
    let mut held = vec![];
    if !crate::model::teardown::is_registered(live) {
        return held;
    }
    let (live_ns, wanted) = (&live.spec.agent_namespace, &desired.agent_namespace);
    if let Some(live_ns) = live_ns.as_ref().filter(|ns| !ns.is_empty())
        && wanted.as_ref() != Some(live_ns)
    {
        held.push(format!(
            "agentNamespace {:?} is held at {live_ns:?}: Fleet moves only the agent of a cluster it reaches through a kubeconfig, and this agent-initiated cluster would leave Fleet; keep agentNamespace {live_ns:?} for this Cluster (its agent-settings annotation) or register it anew",
            wanted.as_deref().unwrap_or_default()
        ));
        desired.agent_namespace = Some(live_ns.clone());
    }
    let class = |s: &FleetClusterSpec| {
        let s = s.agent_scheduling_customization.as_ref();
        s.is_some_and(|s| s.priority_class.is_some())
    };
    if !class(&live.spec) && class(desired) {
        held.push(format!(
            "agentSchedulingCustomization.priorityClass is held: Fleet creates PriorityClass {} only when it deploys the agent through a kubeconfig; create it on the workload cluster first (the agent's pods are refused without it) and set the priorityClass at the Cluster's creation, or remove it",
            crate::model::fleet_agent_bundle::PRIORITY_CLASS_NAME
        ));
        if let Some(s) = desired.agent_scheduling_customization.as_mut() {
            s.priority_class = None;
        }
    }
    held
}

/// Whether the runtime extension created this Fleet Cluster for agent-initiated registration.
pub fn prepared_by_runtime_extension(live: Option<&ObjectMeta>) -> bool {
    live.and_then(|meta| meta.annotations.as_ref())
        .and_then(|a| a.get(names::REGISTRATION_ANNOTATION))
        .is_some_and(|v| v == names::REGISTRATION_RUNTIME_EXTENSION)
}

/// The client ID of an agent-initiated Fleet Cluster: the live one if there is one (it is never
/// regenerated, or the registered agent would be orphaned), otherwise `fresh()`.
pub fn client_id(live: Option<&FleetCluster>, fresh: impl FnOnce() -> String) -> String {
    live.and_then(|c| c.spec.client_id.clone())
        .filter(|id| !id.is_empty())
        .unwrap_or_else(fresh)
}

/// How the import writes a Fleet Cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FleetClusterWrite {
    /// Server-side apply of the whole desired object (when it would change something).
    Apply,
    /// Create it when absent, never update it (CAAPF's `patchResource: false`).
    CreateOnly,
}

/// Which write a Fleet Cluster gets: `patchResource` applies; create-only still completes a
/// registration stub (see [`is_registration_stub`]) once, or it would never get its agent
/// namespace, labels or templateValues.
pub fn fleet_cluster_write(patch_resource: bool, live: Option<&FleetCluster>) -> FleetClusterWrite {
    if patch_resource || live.is_some_and(is_registration_stub) {
        FleetClusterWrite::Apply
    } else {
        FleetClusterWrite::CreateOnly
    }
}

/// Whether a Fleet Cluster is still the registration stub that an agent-initiated import
/// ([`names::REGISTRATION_FIELD_MANAGER`]) or BeforeClusterCreate
/// ([`names::RUNTIME_EXTENSION_FIELD_MANAGER`]) created ([`registration_stub`]) and that no
/// import completed since: it has one of those field managers' entries and none of
/// [`names::FIELD_MANAGER`]. (A Fleet Cluster created by another tool, e.g. an earlier CAAPF,
/// has neither, and create-only leaves it alone.)
pub fn is_registration_stub(live: &FleetCluster) -> bool {
    let managers: Vec<&str> = live
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter_map(|entry| entry.manager.as_deref())
        .collect();
    (managers.contains(&names::REGISTRATION_FIELD_MANAGER)
        || managers.contains(&names::RUNTIME_EXTENSION_FIELD_MANAGER))
        && !managers.contains(&names::FIELD_MANAGER)
}

/// A new random client ID: 64 alphanumeric characters (hard to guess, as Fleet recommends).
pub fn random_client_id() -> String {
    use rand::Rng;
    use rand::distr::Alphanumeric;
    rand::rng()
        .sample_iter(&Alphanumeric)
        .take(64)
        .map(char::from)
        .collect()
}

/// The `templateValues` of a Fleet Cluster: the stable part of the Cluster, its ControlPlane
/// and InfrastructureCluster objects (each when available), and the topology variables.
pub fn template_values(
    cluster: &Value,
    view: &ClusterView,
    control_plane: Option<&Value>,
    infrastructure: Option<&Value>,
) -> BTreeMap<String, Value> {
    let mut values = BTreeMap::new();
    values.insert("Cluster".to_string(), template_object(cluster));
    if let Some(cp) = control_plane {
        values.insert("ControlPlane".to_string(), template_object(cp));
    }
    if let Some(infra) = infrastructure {
        values.insert("InfrastructureCluster".to_string(), template_object(infra));
    }
    if !view.variables.is_empty() {
        values.insert(
            "Variables".to_string(),
            Value::Object(
                view.variables
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
            ),
        );
    }
    values
}

/// The owner reference of a CAPI Cluster, as CAAPF set it (no controller flag), in the API
/// version the Cluster came in.
pub fn cluster_owner_reference(cluster: &ClusterView) -> OwnerReference {
    OwnerReference {
        api_version: cluster.api_version.clone(),
        kind: "Cluster".to_string(),
        name: cluster.name.clone(),
        uid: cluster.uid.clone(),
        ..Default::default()
    }
}

/// Labels every Fleet object of a classy Cluster or ClusterClass carries.
pub fn class_labels(class: &ClassRef) -> StringMap {
    StringMap::from([
        (
            names::CLUSTERCLASS_NAME_LABEL.to_string(),
            class.name.clone(),
        ),
        (
            names::CLUSTERCLASS_NAMESPACE_LABEL.to_string(),
            class.namespace.clone(),
        ),
    ])
}

/// The class labels a Fleet Cluster carries: ours, and Rancher Turtles' `fleet-integration` ones
/// (PR #2803), so that targets written for either select it.
pub fn fleet_cluster_class_labels(class: &ClassRef) -> StringMap {
    let mut labels = class_labels(class);
    let turtles = [
        (names::TURTLES_CLUSTERCLASS_NAME_LABEL, &class.name),
        (
            names::TURTLES_CLUSTERCLASS_NAMESPACE_LABEL,
            &class.namespace,
        ),
    ];
    labels.extend(turtles.map(|(k, v)| (k.to_string(), v.clone())));
    labels
}

/// The Fleet Cluster of a CAPI Cluster, with its agent settings resolved from every layer
/// ([`crate::model::config::ClusterImport::agent_settings`]).
pub fn desired_fleet_cluster(
    cluster: &ClusterView,
    import: &ClusterImport,
    agent: &AgentSettings,
    registration: &Registration,
    template_values: Option<BTreeMap<String, Value>>,
) -> FleetCluster {
    let mut labels = cluster.labels.clone();
    if let Some(class) = &cluster.class {
        labels.extend(fleet_cluster_class_labels(class));
    }
    let mut annotations = cluster.annotations.clone();
    annotations.remove(names::LAST_APPLIED_ANNOTATION);
    // Read by this provider, meaningless to Fleet.
    annotations.remove(names::AGENT_SETTINGS_ANNOTATION);
    let (kube_config_secret, client_id) = match registration {
        Registration::ManagerInitiated => {
            (Some(names::kubeconfig_secret_name(&cluster.name)), None)
        }
        Registration::AgentInitiated { client_id } => (None, Some(client_id.clone())),
    };
    let mut fleet = FleetCluster::new(
        &import.fleet_cluster_name(&cluster.name),
        FleetClusterSpec {
            agent_namespace: agent.agent_namespace.clone(),
            agent_tolerations: agent.agent_tolerations.clone(),
            host_network: agent.host_network,
            agent_env_vars: agent.agent_env_vars.clone(),
            agent_affinity: agent.agent_affinity.clone(),
            agent_resources: agent.agent_resources.clone(),
            agent_scheduling_customization: agent.agent_scheduling_customization.clone(),
            private_repo_url: agent.private_repo_url.clone(),
            kube_config_secret,
            client_id,
            template_values,
            ..Default::default()
        },
    );
    fleet.metadata = ObjectMeta {
        name: Some(import.fleet_cluster_name(&cluster.name)),
        namespace: Some(cluster.namespace.clone()),
        labels: Some(labels).filter(|l| !l.is_empty()),
        annotations: Some(annotations).filter(|a| !a.is_empty()),
        owner_references: import
            .set_owner_references
            .then(|| vec![cluster_owner_reference(cluster)]),
        ..Default::default()
    };
    fleet
}

/// The first version of an agent-initiated Fleet Cluster: only its name and client ID. It is
/// created with a plain POST, so that of two creators (the import controller and the runtime
/// extension) exactly one wins and the other adopts its client ID — a client ID must never
/// change. Everything else is applied afterwards by the import controller; keeping the first
/// write this small also keeps its field manager from co-owning (and so pinning) fields the
/// import controller may later need to remove.
pub fn registration_stub(
    cluster: &ClusterView,
    import: &ClusterImport,
    client_id: &str,
) -> FleetCluster {
    let mut stub = FleetCluster::new(
        &import.fleet_cluster_name(&cluster.name),
        FleetClusterSpec {
            client_id: Some(client_id.to_string()),
            ..Default::default()
        },
    );
    stub.metadata.namespace = Some(cluster.namespace.clone());
    stub
}

/// The registration token of an agent-initiated Cluster (named after the CAPI Cluster, as CAAPF),
/// created `now`: with the configured TTL, and when it expires recorded for its renewal
/// ([`crate::model::registration_token`]).
pub fn desired_registration_token(
    cluster: &ClusterView,
    import: &ClusterImport,
    now: Timestamp,
) -> ClusterRegistrationToken {
    let mut token = ClusterRegistrationToken::new(
        &cluster.name,
        ClusterRegistrationTokenSpec {
            ttl: Some(import.registration_token_ttl.clone()),
        },
    );
    token.metadata.namespace = Some(cluster.namespace.clone());
    if let Ok(ttl) = crate::api::duration::parse_duration(&import.registration_token_ttl) {
        token.metadata.annotations = Some(BTreeMap::from([(
            names::REGISTRATION_TOKEN_EXPIRES_ANNOTATION.to_string(),
            crate::model::registration_token::expires_annotation(now, ttl),
        )]));
    }
    token.metadata.owner_references = import
        .set_owner_references
        .then(|| vec![cluster_owner_reference(cluster)]);
    token
}

/// The ClusterGroup of a ClusterClass: same name and namespace, carrying the class labels and
/// selecting the Fleet Clusters of the class in that namespace.
pub fn desired_class_group(class: &ClassView, config: &ClassGroups) -> ClusterGroup {
    let class_ref = ClassRef {
        name: class.name.clone(),
        namespace: class.namespace.clone(),
    };
    let selector = class_labels(&class_ref);
    let mut labels = class.labels.clone();
    labels.extend(selector.clone());
    let mut group = ClusterGroup::new(
        &class.name,
        ClusterGroupSpec {
            selector: Some(ClusterGroupSelector {
                match_labels: Some(selector),
                ..Default::default()
            }),
        },
    );
    group.metadata.namespace = Some(class.namespace.clone());
    group.metadata.labels = Some(labels);
    group.metadata.owner_references = config.set_owner_references.then(|| {
        vec![OwnerReference {
            api_version: "cluster.x-k8s.io/v1beta2".to_string(),
            kind: "ClusterClass".to_string(),
            name: class.name.clone(),
            uid: class.uid.clone(),
            ..Default::default()
        }]
    });
    group
}

/// Name of the ClusterGroup, in a Cluster's namespace, for a class from another namespace.
pub fn cross_namespace_group_name(class: &ClassRef) -> String {
    format!("{}.{}", class.name, class.namespace)
}

/// The ClusterGroup `<class>.<class namespace>` in `namespace`, selecting the Fleet Clusters of
/// that class there. Carries the ClusterClass labels when the class is known. It is shared by
/// every Cluster of the namespace using the class, so it has no owner reference: the namespace
/// controller deletes it when the last such Cluster goes.
pub fn desired_cross_namespace_group(
    namespace: &str,
    class: &ClassRef,
    class_object_labels: Option<&StringMap>,
) -> ClusterGroup {
    let selector = class_labels(class);
    let mut labels = class_object_labels.cloned().unwrap_or_default();
    labels.extend(selector.clone());
    labels.insert(names::MANAGED_LABEL.to_string(), "true".to_string());
    let mut group = ClusterGroup::new(
        &cross_namespace_group_name(class),
        ClusterGroupSpec {
            selector: Some(ClusterGroupSelector {
                match_labels: Some(selector),
                ..Default::default()
            }),
        },
    );
    group.metadata.namespace = Some(namespace.to_string());
    group.metadata.labels = Some(labels);
    group
}

/// The BundleNamespaceMapping `<cluster namespace>` in the class namespace: bundles next to the
/// class may target Fleet Clusters in the cluster namespace.
pub fn desired_bundle_namespace_mapping(
    cluster_namespace: &str,
    class_namespace: &str,
) -> BundleNamespaceMapping {
    let mut mapping = BundleNamespaceMapping::new(ObjectMeta {
        name: Some(cluster_namespace.to_string()),
        namespace: Some(class_namespace.to_string()),
        labels: Some(BTreeMap::from([(
            names::MANAGED_LABEL.to_string(),
            "true".to_string(),
        )])),
        ..Default::default()
    });
    mapping.bundle_selector = Some(BundleNamespaceMappingBundleSelector::default());
    mapping.namespace_selector = Some(BundleNamespaceMappingNamespaceSelector {
        match_labels: Some(BTreeMap::from([(
            "kubernetes.io/metadata.name".to_string(),
            cluster_namespace.to_string(),
        )])),
        ..Default::default()
    });
    mapping
}

/// The Fleet Cluster the runtime extension (BeforeClusterCreate) creates for an agent-initiated
/// Cluster without one: only the name, the client ID and the mark
/// [`names::REGISTRATION_ANNOTATION`], so the import controller keeps it agent-initiated even
/// when FleetAddonConfig alone would not. The hook only ever creates it (never updates it), so
/// this client ID is the one kept forever; every other field is the import controller's (a
/// field written here would stay co-owned by the hook's field manager, and the import
/// controller could never remove it, e.g. a label removed from the CAPI Cluster).
pub fn runtime_extension_stub(
    cluster: &ClusterView,
    import: &ClusterImport,
    client_id: &str,
) -> FleetCluster {
    let mut fleet_cluster = registration_stub(cluster, import, client_id);
    fleet_cluster
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(
            names::REGISTRATION_ANNOTATION.to_string(),
            names::REGISTRATION_RUNTIME_EXTENSION.to_string(),
        );
    fleet_cluster
}

/// Name of the ClusterRegistrationToken of a CAPI Cluster (CAAPF's: the CAPI Cluster name).
pub fn registration_token_name(cluster: &ClusterView) -> String {
    cluster.name.clone()
}

/// Owner reference to the CAPI Cluster for its bootstrap Secret: [`cluster_owner_reference`]
/// (the API version the Cluster came in, `v1beta1` on Cluster API releases that serve only
/// it), `None` without a uid.
pub fn bootstrap_secret_owner(cluster: &ClusterView) -> Option<OwnerReference> {
    (!cluster.uid.is_empty()).then(|| cluster_owner_reference(cluster))
}

#[cfg(test)]
mod runtime_extension_tests {
    use super::*;
    use crate::model::config::EffectiveConfig;
    use serde_json::json;

    fn cluster() -> ClusterView {
        ClusterView::from_json(&json!({
            "metadata": {"name": "c1", "namespace": "ns", "uid": "u-1",
                "labels": {"env": "dev"},
                "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}", "team": "a"}},
            "spec": {"topology": {"class": "quick-start", "classNamespace": "classes"}}
        }))
        .expect("cluster")
    }

    #[test]
    fn fleet_cluster_is_the_minimal_registration_stub_marked_as_prepared() {
        let config = EffectiveConfig::default();
        let import = config.cluster.as_ref().expect("import");
        let fleet_cluster = runtime_extension_stub(&cluster(), import, "id-1");
        let value = serde_json::to_value(&fleet_cluster).expect("json");
        assert_eq!(value["metadata"]["name"], "c1");
        assert!(
            value["metadata"].get("labels").is_none(),
            "the import controller owns labels"
        );
        assert_eq!(
            value["metadata"]["annotations"],
            json!({"fleet.addons.cluster.x-k8s.io/registration": "runtime-extension"})
        );
        assert_eq!(value["spec"]["clientID"], "id-1");
        assert!(value["spec"]["kubeConfigSecret"].is_null());
        assert!(prepared_by_runtime_extension(Some(&fleet_cluster.metadata)));
        assert!(is_agent_initiated(
            import,
            &cluster(),
            Some(&fleet_cluster.metadata)
        ));
    }

    /// The bootstrap Secret's owner and the Fleet objects' owners name the same API version.
    /// They disagreed when the hook told the version from the fields only: a request Cluster
    /// with `apiVersion: cluster.x-k8s.io/v1beta1` and neither topology nor references got a
    /// `v1beta2` owner on its Secret, a `v1beta1` one on its Fleet Cluster.
    #[test]
    fn bootstrap_secret_owner_follows_the_request_version() {
        let rows = [
            (cluster(), Some("cluster.x-k8s.io/v1beta1")),
            (
                ClusterView::from_json(&json!({"apiVersion": "cluster.x-k8s.io/v1beta1",
                    "metadata": {"name": "c1", "namespace": "ns", "uid": "u-1"}, "spec": {}}))
                .expect("cluster"),
                Some("cluster.x-k8s.io/v1beta1"),
            ),
            (
                ClusterView::from_json(&json!({"apiVersion": "cluster.x-k8s.io/v1beta2",
                    "metadata": {"name": "c1", "namespace": "ns", "uid": "u-1"}, "spec": {}}))
                .expect("cluster"),
                Some("cluster.x-k8s.io/v1beta2"),
            ),
            (
                ClusterView::from_json(&json!({"metadata": {"name": "c1", "namespace": "ns"}}))
                    .expect("cluster"),
                None,
            ),
        ];
        for (cluster, expected) in rows {
            let owner = bootstrap_secret_owner(&cluster);
            assert_eq!(
                owner.as_ref().map(|o| o.api_version.as_str()),
                expected,
                "{cluster:?}"
            );
            if let Some(owner) = owner {
                assert_eq!(owner, cluster_owner_reference(&cluster));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn with_managers(managers: &[&str]) -> FleetCluster {
        let mut cluster = FleetCluster::new("c", Default::default());
        cluster.metadata.managed_fields = Some(
            managers
                .iter()
                .map(
                    |m| k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry {
                        manager: Some(m.to_string()),
                        operation: Some("Apply".into()),
                        ..Default::default()
                    },
                )
                .collect(),
        );
        cluster
    }

    #[test]
    fn which_write_a_fleet_cluster_gets() {
        use FleetClusterWrite::{Apply, CreateOnly};
        let stub = with_managers(&[names::REGISTRATION_FIELD_MANAGER]);
        let completed = with_managers(&[names::REGISTRATION_FIELD_MANAGER, names::FIELD_MANAGER]);
        let ours = with_managers(&[names::FIELD_MANAGER]);
        let foreign = with_managers(&["manager"]);
        let hook_stub = with_managers(&[names::RUNTIME_EXTENSION_FIELD_MANAGER]);
        let unmanaged = FleetCluster::new("c", Default::default());
        // (patchResource, live, write)
        let rows: [(bool, Option<&FleetCluster>, FleetClusterWrite); 13] = [
            (true, None, Apply),
            (true, Some(&stub), Apply),
            (true, Some(&completed), Apply),
            (true, Some(&foreign), Apply),
            (false, None, CreateOnly),
            // A stub left by the hook or by a reconcile that failed after creating it.
            (false, Some(&stub), Apply),
            (false, Some(&hook_stub), Apply),
            (false, Some(&completed), CreateOnly),
            (false, Some(&ours), CreateOnly),
            (false, Some(&foreign), CreateOnly),
            (false, Some(&unmanaged), CreateOnly),
            (true, Some(&unmanaged), Apply),
            (true, Some(&ours), Apply),
        ];
        for (patch_resource, live, want) in rows {
            assert_eq!(
                fleet_cluster_write(patch_resource, live),
                want,
                "patchResource {patch_resource}, managers {:?}",
                live.map(|l| l.metadata.managed_fields.clone())
            );
        }
    }
    use crate::model::config::EffectiveConfig;
    use crate::model::selection::AgentInitiated;

    fn cluster(extra: Value) -> ClusterView {
        let mut object = json!({
            "metadata": {
                "name": "c1", "namespace": "ns", "uid": "uid-1",
                "labels": {"env": "dev"},
                "annotations": {"a": "b", "kubectl.kubernetes.io/last-applied-configuration": "{}"}
            },
            "spec": {}
        });
        if let Some(topology) = extra.get("topology") {
            object["spec"]["topology"] = topology.clone();
        }
        ClusterView::from_json(&object).expect("view")
    }

    fn default_import() -> ClusterImport {
        EffectiveConfig::default().cluster.expect("import")
    }

    fn to_json<T: serde::Serialize>(value: &T) -> Value {
        serde_json::to_value(value).expect("serialises")
    }

    #[test]
    fn manager_initiated_fleet_cluster() {
        let fleet = desired_fleet_cluster(
            &cluster(json!({})),
            &default_import(),
            &default_import().agent,
            &Registration::ManagerInitiated,
            None,
        );
        assert_eq!(
            to_json(&fleet),
            json!({
                "apiVersion": "fleet.cattle.io/v1alpha1",
                "kind": "Cluster",
                "metadata": {
                    "name": "c1", "namespace": "ns",
                    "labels": {"env": "dev"},
                    "annotations": {"a": "b"},
                    "ownerReferences": [{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "name": "c1", "uid": "uid-1"}]
                },
                "spec": {
                    "agentNamespace": "fleet-addon-agent",
                    "agentTolerations": [
                        {"key": "node.kubernetes.io/not-ready", "operator": "Exists"},
                        {"effect": "NoSchedule", "key": "node.cluster.x-k8s.io/uninitialized", "operator": "Exists"},
                        {"effect": "NoSchedule", "key": "node.cloudprovider.kubernetes.io/uninitialized", "operator": "Equal", "value": "true"},
                        {"effect": "NoSchedule", "key": "node-role.kubernetes.io/control-plane", "operator": "Exists"}
                    ],
                    "kubeConfigSecret": "c1-kubeconfig"
                }
            })
        );
    }

    #[test]
    fn naming_class_labels_and_no_owner_reference() {
        let mut import = default_import();
        import.name_prefix = "fleet-".into();
        import.name_suffix = "-x".into();
        import.set_owner_references = false;
        import.agent.host_network = Some(false);
        let view = cluster(
            json!({"topology": {"classRef": {"name": "quick-start", "namespace": "classes"}, "version": "v1"}}),
        );
        let fleet = to_json(&desired_fleet_cluster(
            &view,
            &import,
            &import.agent,
            &Registration::ManagerInitiated,
            None,
        ));
        assert_eq!(fleet["metadata"]["name"], "fleet-c1-x");
        // The kubeconfig Secret is CAPI's, named after the CAPI Cluster, not the Fleet name.
        assert_eq!(fleet["spec"]["kubeConfigSecret"], "c1-kubeconfig");
        assert_eq!(
            fleet["metadata"]["labels"],
            json!({
                "env": "dev",
                "clusterclass-name.fleet.addons.cluster.x-k8s.io": "quick-start",
                "clusterclass-namespace.fleet.addons.cluster.x-k8s.io": "classes",
                // Rancher Turtles' fleet-integration labels (PR #2803), so its targets port.
                "cluster-api.cattle.io/clusterclass-name": "quick-start",
                "cluster-api.cattle.io/clusterclass-namespace": "classes"
            })
        );
        assert!(fleet["metadata"].get("ownerReferences").is_none());
        assert_eq!(fleet["spec"]["hostNetwork"], false);
    }

    #[test]
    fn class_namespace_label_defaults_to_cluster_namespace() {
        let view = cluster(json!({"topology": {"classRef": {"name": "qs"}, "version": "v1"}}));
        let fleet = to_json(&desired_fleet_cluster(
            &view,
            &default_import(),
            &default_import().agent,
            &Registration::ManagerInitiated,
            None,
        ));
        assert_eq!(
            fleet["metadata"]["labels"]["clusterclass-namespace.fleet.addons.cluster.x-k8s.io"],
            "ns"
        );
    }

    #[test]
    fn agent_initiated_fleet_cluster_and_token() {
        let mut import = default_import();
        import.agent_initiated = AgentInitiated::All;
        let view = cluster(json!({}));
        assert!(is_agent_initiated(&import, &view, None));
        let fleet = to_json(&desired_fleet_cluster(
            &view,
            &import,
            &import.agent,
            &Registration::AgentInitiated {
                client_id: "id-1".into(),
            },
            None,
        ));
        assert_eq!(fleet["spec"]["clientID"], "id-1");
        assert!(fleet["spec"].get("kubeConfigSecret").is_none());
        let now: k8s_openapi::jiff::Timestamp = "2026-11-20T08:00:00Z".parse().expect("time");
        let token = to_json(&desired_registration_token(&view, &import, now));
        assert_eq!(
            token,
            json!({
                "apiVersion": "fleet.cattle.io/v1alpha1",
                "kind": "ClusterRegistrationToken",
                "metadata": {
                    "name": "c1", "namespace": "ns",
                    // When Fleet deletes it, for its renewal (the token watch keeps metadata only).
                    "annotations": {"fleet.addons.cluster.x-k8s.io/registration-token-expires": "2026-11-21T08:00:00Z"},
                    "ownerReferences": [{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "name": "c1", "uid": "uid-1"}]
                },
                "spec": {"ttl": "24h"}
            })
        );
    }

    #[test]
    fn registration_stub_holds_only_name_and_client_id() {
        let mut import = default_import();
        import.name_prefix = "f-".into();
        let stub = to_json(&registration_stub(&cluster(json!({})), &import, "id-9"));
        assert_eq!(
            stub,
            json!({
                "apiVersion": "fleet.cattle.io/v1alpha1", "kind": "Cluster",
                "metadata": {"name": "f-c1", "namespace": "ns"},
                "spec": {"clientID": "id-9"}
            })
        );
    }

    #[test]
    fn client_id_is_generated_once_and_preserved() {
        let fresh = random_client_id();
        assert_eq!(fresh.len(), 64);
        assert!(fresh.chars().all(|c| c.is_ascii_alphanumeric()));
        assert_ne!(fresh, random_client_id());

        let mut live = FleetCluster::new("c1", FleetClusterSpec::default());
        assert_eq!(client_id(Some(&live), || "new".into()), "new");
        live.spec.client_id = Some("kept".into());
        assert_eq!(
            client_id(Some(&live), || panic!("must not regenerate")),
            "kept"
        );
        assert_eq!(client_id(None, || "new".into()), "new");
    }

    #[test]
    fn runtime_extension_marks_agent_initiated() {
        let import = default_import();
        let view = cluster(json!({}));
        let mut live = FleetCluster::new("c1", FleetClusterSpec::default());
        assert!(!is_agent_initiated(&import, &view, Some(&live.metadata)));
        live.metadata.annotations = Some(BTreeMap::from([(
            names::REGISTRATION_ANNOTATION.to_string(),
            names::REGISTRATION_RUNTIME_EXTENSION.to_string(),
        )]));
        assert!(is_agent_initiated(&import, &view, Some(&live.metadata)));
    }

    #[test]
    fn template_values_hold_the_three_objects_and_variables() {
        let object = json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
            "metadata": {"name": "c1", "namespace": "ns", "resourceVersion": "9"},
            "spec": {"topology": {"classRef": {"name": "qs"}, "version": "v1", "variables": [{"name": "cni", "value": "calico"}]}},
            "status": {"phase": "Provisioned"}
        });
        let view = ClusterView::from_json(&object).expect("view");
        let cp = json!({"apiVersion": "controlplane.cluster.x-k8s.io/v1beta2", "kind": "KubeadmControlPlane",
                        "metadata": {"name": "cp", "namespace": "ns", "uid": "x"}, "spec": {"replicas": 1}, "status": {"ready": true}});
        let values = template_values(&object, &view, Some(&cp), None);
        assert_eq!(
            values.keys().collect::<Vec<_>>(),
            ["Cluster", "ControlPlane", "Variables"]
        );
        assert!(values["Cluster"].get("status").is_none());
        assert!(
            values["Cluster"]["metadata"]
                .get("resourceVersion")
                .is_none()
        );
        assert_eq!(values["ControlPlane"]["spec"], json!({"replicas": 1}));
        assert!(values["ControlPlane"]["metadata"].get("uid").is_none());
        assert_eq!(values["Variables"], json!({"cni": "calico"}));
    }

    #[test]
    fn class_group_and_cross_namespace_objects() {
        let class = ClassView::from_json(&json!({"metadata": {
            "name": "quick-start", "namespace": "classes", "uid": "cc-1", "labels": {"team": "a"}
        }}))
        .expect("class");
        let group = to_json(&desired_class_group(
            &class,
            &ClassGroups {
                patch_resource: true,
                set_owner_references: true,
            },
        ));
        let selector = json!({
            "clusterclass-name.fleet.addons.cluster.x-k8s.io": "quick-start",
            "clusterclass-namespace.fleet.addons.cluster.x-k8s.io": "classes"
        });
        assert_eq!(
            group,
            json!({
                "apiVersion": "fleet.cattle.io/v1alpha1", "kind": "ClusterGroup",
                "metadata": {
                    "name": "quick-start", "namespace": "classes",
                    "labels": {"team": "a",
                        "clusterclass-name.fleet.addons.cluster.x-k8s.io": "quick-start",
                        "clusterclass-namespace.fleet.addons.cluster.x-k8s.io": "classes"},
                    "ownerReferences": [{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "ClusterClass", "name": "quick-start", "uid": "cc-1"}]
                },
                "spec": {"selector": {"matchLabels": selector.clone()}}
            })
        );
        let class_ref = ClassRef {
            name: "quick-start".into(),
            namespace: "classes".into(),
        };
        let cross = to_json(&desired_cross_namespace_group(
            "default",
            &class_ref,
            Some(&class.labels),
        ));
        assert_eq!(cross["metadata"]["name"], "quick-start.classes");
        assert_eq!(cross["metadata"]["namespace"], "default");
        assert_eq!(cross["metadata"]["labels"]["team"], "a");
        assert_eq!(cross["metadata"]["labels"][names::MANAGED_LABEL], "true");
        assert!(cross["metadata"].get("ownerReferences").is_none());
        assert_eq!(cross["spec"]["selector"]["matchLabels"], selector);

        let mapping = to_json(&desired_bundle_namespace_mapping("default", "classes"));
        assert_eq!(
            mapping,
            json!({
                "apiVersion": "fleet.cattle.io/v1alpha1", "kind": "BundleNamespaceMapping",
                "metadata": {"name": "default", "namespace": "classes", "labels": {names::MANAGED_LABEL: "true"}},
                "bundleSelector": {},
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "default"}}
            })
        );
    }
}
