//! Least-privilege RBAC, proven against what the manager actually does.
//!
//! Three scenarios run against sandbox API servers, concurrently:
//! - import: plain, classy and agent-initiated Clusters, create-only mode, templateValues
//!   references, deselection, deletion and cleanup, legacy finalizers, status, leader election
//!   and release;
//! - Fleet installation with the real helm from a chart repository on 127.0.0.1 and from a
//!   private OCI registry (credentials and CA from Secrets), and Fleet settings (inferLocal with
//!   the Endpoints fallback, a CA from a Secret);
//! - the runtime extension's hooks (BeforeClusterCreate, -Upgrade, -Delete) called on a running
//!   manager, the agent chart pulled from an OCI registry with credentials from a Secret.
//!
//! The manager runs as its ServiceAccount, bound only to the roles rendered from `config/`
//! (import and Fleet scenarios: `config/default`) or from the Helm chart (hooks scenario, with
//! the runtime extension's role): the sandbox authorizes every request with them, so a missing
//! rule fails a scenario with the API server's 403, as in a cluster.
//!
//! Every request the manager made (told apart by its User-Agent) is mapped to an RBAC (verb,
//! group, resource, namespace). Requests of the import and Fleet scenarios must be allowed by
//! `config/default` (ClusterRole and leader-election Role); the hooks may also use the optional
//! `config/extensionconfig` ClusterRole; what helm does must be allowed by the optional
//! `config/fleet-installer`. Every rule and verb of the manager's roles and the extension role
//! must be used by some request, or be in [`ALLOWLIST`] with the code path that needs it.
//!
//! The tests at the end run the real helm and kubectl as the ServiceAccount: the sandbox serves
//! TLS there, because client-go sends a kubeconfig's token only over TLS (`k8s.io/client-go`
//! `tools/clientcmd/client_config.go`). helm 4 and helm 3 install charts shaped like Fleet's as
//! the ServiceAccount under `config/fleet-installer` (a rule taken out fails the install with
//! the API server's 403, `escalate` included), and `kubectl auth can-i` answers per the roles
//! of `config/`.

use crate::common;
use crate::fleet_common;

use std::collections::BTreeSet;
use std::time::Duration;

use caapf::api::CapiClusterClass;
use caapf::names;
use common::render::{find, kustomize};
use common::{Harness, eventually, from_manager};
use fleet_api_rs::fleet_clustergroup::ClusterGroup;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use kube_sandbox::{RequestRecord, Verb};
use serde_json::{Value, json};

const NAMESPACE: &str = "caapf-system";
/// The manager's ServiceAccount in `config/` and in the chart.
const SERVICE_ACCOUNT: &str = "caapf-controller-manager";

/// The objects the Helm chart renders into [`NAMESPACE`] with extra `helm template` arguments.
fn chart_objects(extra: &[&str]) -> Vec<Value> {
    let chart = common::render::root()
        .join("charts/cluster-api-addon-provider-fleet")
        .display()
        .to_string();
    let mut args = vec![
        "template",
        "caapf",
        chart.as_str(),
        "--namespace",
        NAMESPACE,
    ];
    args.extend_from_slice(extra);
    common::render::documents(&common::render::helm(&args))
}

/// Rules and verbs that the scenarios do not reliably exercise, and why they are needed anyway.
/// (kind of role, API group, resource, verb, reason)
const ALLOWLIST: &[(&str, &str, &str, &str, &str)] = &[
    (
        "ClusterRole",
        "management.cattle.io",
        "clusters",
        "list",
        "the Rancher cluster of a Cluster Rancher Turtles imports (its finalizer \
         capicluster.turtles.cattle.io: src/controllers/import/clusters.rs observe_rancher, \
         tests/turtles.rs); these scenarios run without Rancher",
    ),
    (
        "ClusterRole",
        "events.k8s.io",
        "events",
        "patch",
        "kube's Recorder patches an existing Event (series count) when the same event repeats \
         within its cache window; scenarios usually, but not reliably, repeat one",
    ),
    (
        "ClusterRole",
        "cluster.x-k8s.io",
        "clusters",
        "get",
        "a finalizer patch that conflicted re-reads the Cluster (src/apply.rs, also in \
         `caapf cleanup`); conflicts depend on timing",
    ),
    (
        "ClusterRole",
        "fleet.cattle.io",
        "clustergroups",
        "get",
        "as for Clusters: removing CAAPF's legacy finalizer from a ClusterGroup after a conflict",
    ),
    (
        "Role",
        "events.k8s.io",
        "events",
        "patch",
        "as above, for the LeaderElection Event on the Lease",
    ),
    (
        "ClusterRole",
        "apiextensions.k8s.io",
        "customresourcedefinitions",
        "list",
        MOVE_RULES,
    ),
    ("ClusterRole", "cluster.x-k8s.io", "*", "list", MOVE_RULES),
    ("ClusterRole", "cluster.x-k8s.io", "*", "patch", MOVE_RULES),
    (
        "ClusterRole",
        "addons.cluster.x-k8s.io",
        "*",
        "patch",
        MOVE_RULES,
    ),
    (
        "ClusterRole",
        "bootstrap.cluster.x-k8s.io",
        "*",
        "patch",
        MOVE_RULES,
    ),
    (
        "ClusterRole",
        "controlplane.cluster.x-k8s.io",
        "*",
        "patch",
        MOVE_RULES,
    ),
    (
        "ClusterRole",
        "infrastructure.cluster.x-k8s.io",
        "*",
        "patch",
        MOVE_RULES,
    ),
    (
        "ClusterRole",
        "ipam.cluster.x-k8s.io",
        "*",
        "patch",
        MOVE_RULES,
    ),
    (
        "ClusterRole",
        "addons.cluster.x-k8s.io",
        "*",
        "list",
        MOVE_RULES,
    ),
    (
        "ClusterRole",
        "bootstrap.cluster.x-k8s.io",
        "*",
        "list",
        MOVE_RULES,
    ),
    (
        "ClusterRole",
        "controlplane.cluster.x-k8s.io",
        "*",
        "list",
        MOVE_RULES,
    ),
    (
        "ClusterRole",
        "infrastructure.cluster.x-k8s.io",
        "*",
        "list",
        MOVE_RULES,
    ),
    (
        "ClusterRole",
        "ipam.cluster.x-k8s.io",
        "*",
        "list",
        MOVE_RULES,
    ),
    (
        "ClusterRole",
        "runtime.cluster.x-k8s.io",
        "*",
        "list",
        MOVE_RULES,
    ),
    (
        "ClusterRole",
        "clusterctl.cluster.x-k8s.io",
        "*",
        "list",
        MOVE_RULES,
    ),
    (
        "ClusterRole",
        "operator.cluster.x-k8s.io",
        "*",
        "list",
        MOVE_RULES,
    ),
    (
        "ClusterRole",
        "fleet.cattle.io",
        "bundles",
        "list",
        MOVE_RULES,
    ),
    (
        "ClusterRole",
        "fleet.cattle.io",
        "bundles",
        "watch",
        MOVE_RULES,
    ),
    (
        "ClusterRole",
        "fleet.cattle.io",
        "bundles",
        "create",
        MOVE_RULES,
    ),
    (
        "ClusterRole",
        "fleet.cattle.io",
        "bundles",
        "patch",
        MOVE_RULES,
    ),
    (
        "ClusterRole",
        "fleet.cattle.io",
        "bundles",
        "delete",
        MOVE_RULES,
    ),
];

/// Why the move controller's rules are not used here.
const MOVE_RULES: &str = "the move controller (self-managed Clusters): tests/move.rs runs it as this \
     ServiceAccount with config/default and fails on any 403";

/// One RBAC rule, flattened.
#[derive(Debug)]
struct Rule {
    origin: &'static str,
    namespace: Option<String>,
    groups: Vec<String>,
    resources: Vec<String>,
    verbs: Vec<String>,
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

fn rules(role: &Value, origin: &'static str) -> Vec<Rule> {
    let namespace = role["metadata"]["namespace"].as_str().map(str::to_string);
    role["rules"]
        .as_array()
        .expect("rules")
        .iter()
        .map(|r| {
            assert!(
                r.get("nonResourceURLs").is_none() && r.get("resourceNames").is_none(),
                "unexpected rule shape {r}"
            );
            Rule {
                origin,
                namespace: namespace.clone(),
                groups: strings(&r["apiGroups"]),
                resources: strings(&r["resources"]),
                verbs: strings(&r["verbs"]),
            }
        })
        .collect()
}

/// A request as RBAC sees it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Access {
    verb: &'static str,
    group: String,
    resource: String,
    namespace: String,
}

/// The RBAC checks a request passed: its verb, plus `create` for a server-side apply that
/// created the object (the API server authorizes both, `k8s.io/apiserver`
/// `pkg/endpoints/handlers/patch.go`).
fn accesses(r: &RequestRecord) -> Vec<Access> {
    let a = access(r);
    if r.verb == Verb::Apply && r.code == 201 {
        let create = Access {
            verb: "create",
            ..a.clone()
        };
        vec![a, create]
    } else {
        vec![a]
    }
}

fn access(r: &RequestRecord) -> Access {
    let verb = match r.verb {
        Verb::Get => "get",
        Verb::List => "list",
        Verb::Watch => "watch",
        Verb::Post => "create",
        Verb::Put => "update",
        Verb::Patch | Verb::Apply => "patch",
        Verb::Delete => "delete",
        Verb::DeleteCollection => "deletecollection",
    };
    let resource = if r.subresource.is_empty() {
        r.resource.clone()
    } else {
        format!("{}/{}", r.resource, r.subresource)
    };
    Access {
        verb,
        group: r.group.clone(),
        resource,
        namespace: r.namespace.clone(),
    }
}

fn matches(rule: &Rule, a: &Access) -> bool {
    let any = |list: &[String], value: &str| list.iter().any(|x| x == "*" || x == value);
    any(&rule.groups, &a.group)
        && any(&rule.resources, &a.resource)
        && any(&rule.verbs, a.verb)
        && rule.namespace.as_ref().is_none_or(|ns| *ns == a.namespace)
}

fn dynamic(group: &str, kind: &str) -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk(group, "v1beta2", kind))
}

/// Plays the import scenarios; returns the requests.
async fn import_scenario() -> Vec<RequestRecord> {
    // A server without streaming lists (kube-apiserver 1.33's default): the watches then list
    // in pages as well as watch, so the `list` rights the fallback needs are exercised too.
    let mut h = Harness::with_options(kube_sandbox::SandboxOptions {
        validate_custom_resources: true,
        watch_list: false,
        ..Default::default()
    })
    .await;
    for ns in [NAMESPACE, "team-a", "classes", "apps", "edge"] {
        h.namespace(ns, json!({})).await;
    }
    h.run_as_service_account(&kustomize("config/default"), NAMESPACE, SERVICE_ACCOUNT)
        .await;
    // A ClusterClass CAAPF left with its finalizer; a class group whose class is gone, with
    // CAAPF's finalizer.
    h.class("classes", "quick-start", json!({})).await;
    h.set_class_finalizers("classes", "quick-start", &[names::FINALIZER])
        .await;
    let orphan: ClusterGroup = serde_json::from_value(json!({
        "apiVersion": "fleet.cattle.io/v1alpha1", "kind": "ClusterGroup",
        "metadata": {"name": "gone", "namespace": "classes", "finalizers": [names::FINALIZER],
                     "labels": {names::CLUSTERCLASS_NAME_LABEL: "gone", names::CLUSTERCLASS_NAMESPACE_LABEL: "classes"}},
        "spec": {"selector": {"matchLabels": {names::CLUSTERCLASS_NAME_LABEL: "gone"}}}
    }))
    .expect("group");
    Api::<ClusterGroup>::namespaced(h.client.clone(), "classes")
        .create(&PostParams::default(), &orphan)
        .await
        .expect("orphan class group");

    // A plain Cluster whose ControlPlane exists and InfrastructureCluster does not (both kinds
    // are watched for templateValues); a Cluster using a class from another namespace.
    let c1 = h
        .cluster(
            "team-a",
            json!({"metadata": {"name": "c1", "labels": {"import": "yes"}}, "spec": {
                "controlPlaneRef": {"apiGroup": "controlplane.cluster.x-k8s.io", "kind": "KubeadmControlPlane", "name": "c1-cp"},
                "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "DockerCluster", "name": "c1-infra"}
            }}),
        )
        .await;
    let kcps: Api<DynamicObject> = Api::namespaced_with(
        h.client.clone(),
        "team-a",
        &dynamic("controlplane.cluster.x-k8s.io", "KubeadmControlPlane"),
    );
    kcps.create(
        &PostParams::default(),
        &serde_json::from_value(json!({
            "apiVersion": "controlplane.cluster.x-k8s.io/v1beta2", "kind": "KubeadmControlPlane",
            "metadata": {"name": "c1-cp", "namespace": "team-a", "ownerReferences": [
                {"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "name": "c1", "uid": c1.uid()}]},
            "spec": {"replicas": 1}
        }))
        .expect("kcp"),
    )
    .await
    .expect("create kcp");
    h.initialize("team-a", "c1").await;
    h.cluster(
        "apps",
        json!({"metadata": {"name": "c2", "labels": {"import": "yes"}}, "spec": {"topology": {
            "classRef": {"name": "quick-start", "namespace": "classes"}, "version": "v1.35.0"}}}),
    )
    .await;
    h.initialize("apps", "c2").await;

    h.flags.leader_elect = true;
    h.flags.leader_election_namespace = Some(NAMESPACE.into());
    h.flags.leader_elect_lease_duration = Duration::from_secs(4);
    h.flags.leader_elect_renew_deadline = Duration::from_secs(3);
    h.flags.leader_elect_retry_period = Duration::from_millis(200);
    h.start().await;

    // Defaults (no FleetAddonConfig): import, class groups, cross-namespace objects.
    eventually("defaults converge", || async {
        let c1 = h.fleet_cluster("team-a", "c1").await;
        let c2 = h.fleet_cluster("apps", "c2").await;
        let cross = h.get::<ClusterGroup>("apps", "quick-start.classes").await;
        let mapping = h
            .get::<caapf::api::BundleNamespaceMapping>("classes", "apps")
            .await;
        let class = h.get::<CapiClusterClass>("classes", "quick-start").await?;
        let orphan = h.get::<ClusterGroup>("classes", "gone").await;
        let annotated = h.namespace_annotation("team-a").await.is_some();
        let values = c1
            .as_ref()?
            .spec
            .template_values
            .as_ref()
            .is_some_and(|v| v.contains_key("ControlPlane"));
        (c2.is_some()
            && cross.is_some()
            && mapping.is_some()
            && class.finalizers().is_empty()
            && orphan.is_none()
            && annotated
            && values)
            .then_some(())
    })
    .await;

    // A FleetAddonConfig: selection by label, agent-initiated by label, create-only Fleet
    // Clusters and class groups, deselected Clusters' Fleet Clusters deleted, no owner references.
    h.config(
        "cluster: {selector: {matchLabels: {import: \"yes\"}}, agentInitiatedSelector: {matchLabels: {network: nat}}, \
         patchResource: false, setOwnerReferences: false, applyClassGroup: true, deselectPolicy: Delete}\n\
         clusterClass: {patchResource: false}",
    )
    .await;
    h.cluster(
        "edge",
        json!({"metadata": {"name": "nat", "labels": {"import": "yes", "network": "nat"}}, "spec": {}}),
    )
    .await;
    h.cluster(
        "edge",
        json!({"metadata": {"name": "plain", "labels": {"import": "yes"}}, "spec": {}}),
    )
    .await;
    h.initialize("edge", "plain").await;
    h.class("classes", "other", json!({})).await;
    eventually("agent-initiated, create-only, status", || async {
        let token = h
            .get::<fleet_api_rs::fleet_cluster_registration_token::ClusterRegistrationToken>(
                "edge", "nat",
            )
            .await;
        let plain = h.fleet_cluster("edge", "plain").await;
        let other = h.get::<ClusterGroup>("classes", "other").await;
        let counted = h.addon_config().await?.status?.clusters?.imported >= 3;
        (token.is_some() && plain.is_some() && other.is_some() && counted).then_some(())
    })
    .await;

    // Deselection with deselectPolicy Delete; deletion of an agent-initiated Cluster (token) and
    // of a Cluster whose Fleet Cluster it does not own; the last user of a cross-namespace class.
    h.merge_cluster(
        "team-a",
        "c1",
        json!({"metadata": {"labels": {"import": null}}}),
    )
    .await;
    h.delete_cluster("edge", "nat").await;
    h.delete_cluster("edge", "plain").await;
    h.delete_cluster("apps", "c2").await;
    eventually("deselected and deleted Clusters cleaned up", || async {
        let c1 = h.fleet_cluster("team-a", "c1").await;
        let token = h
            .get::<fleet_api_rs::fleet_cluster_registration_token::ClusterRegistrationToken>(
                "edge", "nat",
            )
            .await;
        let plain = h.fleet_cluster("edge", "plain").await;
        let cross = h.get::<ClusterGroup>("apps", "quick-start.classes").await;
        let mapping = h
            .get::<caapf::api::BundleNamespaceMapping>("classes", "apps")
            .await;
        let gone = h.list::<caapf::api::CapiCluster>("edge").await.is_empty()
            && h.list::<caapf::api::CapiCluster>("apps").await.is_empty();
        (c1.is_none()
            && token.is_none()
            && plain.is_none()
            && cross.is_none()
            && mapping.is_none()
            && gone)
            .then_some(())
    })
    .await;
    // Graceful stop: the Lease is released (an update).
    h.stop().await;
    // `caapf cleanup`, as run in the pod before uninstalling (the manager's identity), with a
    // finalizer left behind.
    h.merge_cluster(
        "team-a",
        "c1",
        json!({"metadata": {"finalizers": [names::FINALIZER]}}),
    )
    .await;
    let removed = caapf::cleanup::run(&h.manager_client().await)
        .await
        .expect("cleanup");
    assert!(removed.clusters >= 1, "{removed:?}");
    h.sandbox.requests().all()
}

/// Installs Fleet with the real helm from a local chart repository, then changes the server
/// settings (inferLocal without EndpointSlices, then a CA from a Secret, then without
/// spec.install, patched into Fleet's ConfigMap); returns the requests.
async fn fleet_scenario() -> Vec<RequestRecord> {
    use k8s_openapi::api::core::v1::Secret;
    use k8s_openapi::api::discovery::v1::EndpointSlice;

    let repo = fleet_common::ChartRepo::start(&["0.2.0"]).await;
    let mut h = Harness::new().await;
    let dir = tempfile::tempdir().expect("tempdir");
    h.use_helm(&fleet_common::helm_bin(), dir.path());
    // The manager's own requests need nothing beyond the default install. (helm, a client-go
    // program, sends no credentials over the sandbox's plain HTTP: it runs as the admin, and
    // its requests are checked against the installer role from the request log below.)
    h.run_as_service_account(&kustomize("config/default"), NAMESPACE, SERVICE_ACCOUNT)
        .await;
    // inferLocal reads the Endpoints only when no EndpointSlice names the API server.
    Api::<EndpointSlice>::namespaced(h.client.clone(), "default")
        .delete("kubernetes", &Default::default())
        .await
        .expect("delete the kubernetes EndpointSlice");
    h.start().await;

    h.config(&format!(
        "install: {{version: 0.2.0, repository: \"{}\"}}\nconfig: {{server: {{inferLocal: true}}}}",
        repo.url()
    ))
    .await;
    let ready = |generation: i64| ready_for(&h, generation);
    eventually("Fleet installed with inferLocal settings", || ready(1)).await;

    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "fleet-ca", "namespace": "default"},
        "stringData": {"ca.crt": "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"},
    }))
    .expect("secret");
    Api::<Secret>::namespaced(h.client.clone(), "default")
        .create(&PostParams::default(), &secret)
        .await
        .expect("CA secret");
    h.config(&format!(
        "install: {{version: 0.2.0, repository: \"{}\"}}\nconfig: {{server: {{custom: {{apiServerUrl: \"https://fleet.example.com\", apiServerCaConfigRef: {{kind: Secret, name: fleet-ca, namespace: default}}}}}}}}",
        repo.url()
    ))
    .await;
    eventually("custom server settings with a Secret CA", || ready(2)).await;

    // A private OCI registry (HTTPS with the test's CA, basic auth): its credentials and CA
    // read from Secrets, and watched by name.
    let ca = common::tls::Ca::new();
    let serving = ca.serving("registry");
    let registry =
        fleet_common::registry::Registry::start(fleet_common::registry::RegistryOptions {
            tls: Some(fleet_common::registry::Tls {
                cert: serving.cert,
                key: serving.key,
                ca: ca.pem.clone(),
            }),
            basic_auth: true,
        });
    registry.push_fleet("0.2.0");
    for (name, key, value) in [
        ("registry-ca", "ca.crt", ca.pem.clone()),
        (
            "registry-pull",
            "config.json",
            registry.config_json(
                fleet_common::registry::USER,
                fleet_common::registry::PASSWORD,
            ),
        ),
    ] {
        let secret: Secret = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "default"},
            "stringData": {key: value},
        }))
        .expect("secret");
        Api::<Secret>::namespaced(h.client.clone(), "default")
            .create(&PostParams::default(), &secret)
            .await
            .expect("registry secret");
    }
    h.config(&format!(
        "install: {{version: 0.2.0, repository: \"{}\", credentials: {{secret: {{name: registry-pull, namespace: default}}}}, tlsConfig: {{caSecret: {{name: registry-ca, namespace: default}}}}}}",
        registry.url()
    ))
    .await;
    eventually("Fleet from a private OCI registry", || ready(3)).await;
    for name in ["registry-pull", "registry-ca"] {
        let reads = h.sandbox.requests().count(|r| {
            from_manager(r)
                && r.verb == Verb::Get
                && r.resource == "secrets"
                && r.name == name
                && r.code == 200
        });
        assert!(reads > 0, "the manager never read Secret {name}");
    }

    // Fleet managed by someone else from now on: the settings go into Fleet's own ConfigMap.
    h.config("config: {server: {custom: {apiServerUrl: \"https://other.example.com\"}}}")
        .await;
    eventually("settings patched into fleet-controller", || ready(4)).await;
    h.stop().await;
    h.sandbox.requests().all()
}

/// `Ready=True` for `generation`.
async fn ready_for(h: &Harness, generation: i64) -> Option<()> {
    let config = h.addon_config().await?;
    let condition = fleet_common::condition(&config, "Ready")?;
    (condition.status == "True" && condition.observed_generation == Some(generation)).then_some(())
}

/// Calls the lifecycle hooks on a running manager (the test plays Fleet); returns the requests.
async fn hooks_scenario(rbac: Vec<Value>) -> Vec<RequestRecord> {
    use caapf::hooks::handlers;
    use caapf::hooks::types::Hook;
    use k8s_openapi::api::core::v1::{ConfigMap, Secret};

    let mut h = Harness::new().await;
    for ns in [
        NAMESPACE,
        "team-a",
        "cattle-fleet-system",
        "cluster-team-a-c1",
    ] {
        h.namespace(ns, json!({})).await;
    }
    h.run_as_service_account(&rbac, NAMESPACE, SERVICE_ACCOUNT)
        .await;
    h.class("team-a", "quick-start", json!({})).await;
    // The agent chart from an OCI registry asking for basic auth: the hooks read the
    // credentials Secret.
    let registry =
        fleet_common::registry::Registry::start(fleet_common::registry::RegistryOptions {
            tls: None,
            basic_auth: true,
        });
    registry.push_agent("0.13.1");
    let pull: Secret = serde_json::from_value(json!({
        "metadata": {"name": "agent-pull", "namespace": "team-a"},
        "stringData": {"config.json": registry.config_json(
            fleet_common::registry::USER,
            fleet_common::registry::PASSWORD,
        )},
    }))
    .expect("secret");
    Api::<Secret>::namespaced(h.client.clone(), "team-a")
        .create(&PostParams::default(), &pull)
        .await
        .expect("credentials secret");
    h.flags.helm_binary = fleet_common::helm_bin().display().to_string();
    h.config(&format!(
        "cluster: {{agentInitiated: true, setOwnerReferences: true, rollout: {{waves: [canary, rest], kubernetesUpgrades: true}}}}\n\
         runtimeExtension: {{beforeClusterUpgrade: {{waitForBundlesReady: true}}, beforeClusterDelete: {{removeWorkloads: true}}, agentChartRepository: \"{}\", \
         agentChartCredentials: {{secret: {{name: agent-pull, namespace: team-a}}}}}}",
        registry.url()
    ))
    .await;
    let created = h
        .cluster(
            "team-a",
            json!({"metadata": {"name": "c1"}, "spec": {"topology": {
                "classRef": {"name": "quick-start", "namespace": "team-a"}, "version": "v1.33.1",
                "variables": [{"name": "fleetAgent", "value": {"enabled": true}}]}}}),
        )
        .await;
    h.start().await;
    let manager = h.manager.as_ref().expect("manager");
    let mut cluster = serde_json::to_value(&created).expect("json");
    if let Some(meta) = cluster["metadata"].as_object_mut() {
        meta.remove("managedFields");
    }
    let call = |hook: Hook| {
        let body = serde_json::to_vec(&json!({
            "apiVersion": "hooks.runtime.cluster.x-k8s.io/v1alpha1",
            "kind": hook.request_kind(),
            "settings": {},
            "cluster": cluster.clone(),
            "fromKubernetesVersion": "v1.33.1",
            "toKubernetesVersion": "v1.34.0",
        }))
        .expect("json");
        let ctx = manager.hooks.clone();
        async move { handlers::handle(&ctx, hook, &body).await }
    };
    eventually("the configuration is read", || async {
        manager
            .ctx
            .config()
            .filter(|c| c.cluster.is_some())
            .map(|_| ())
    })
    .await;
    // First call: the Fleet Cluster and the token are created; Fleet has not issued it yet.
    call(Hook::BeforeClusterCreate).await;
    // The test plays Fleet: the token's Secret and status, and the fleet-controller ConfigMap.
    let values = "clusterNamespace: team-a\napiServerURL: https://fleet.example.com:6443\napiServerCA: |\n  -----BEGIN CERTIFICATE-----\n  MIIB\n  -----END CERTIFICATE-----\ntoken: sa-token-value\n";
    let token_secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "c1", "namespace": "team-a"},
        "type": "fleet.cattle.io/cluster-registration-values",
        "stringData": {"values": values},
    }))
    .expect("secret");
    Api::<Secret>::namespaced(h.client.clone(), "team-a")
        .create(&PostParams::default(), &token_secret)
        .await
        .expect("token secret");
    let tokens: Api<DynamicObject> = Api::namespaced_with(
        h.client.clone(),
        "team-a",
        &ApiResource::from_gvk(&GroupVersionKind::gvk(
            "fleet.cattle.io",
            "v1alpha1",
            "ClusterRegistrationToken",
        )),
    );
    eventually("the hook created the token", || async {
        tokens.get_opt("c1").await.expect("get").map(|_| ())
    })
    .await;
    tokens
        .patch_status(
            "c1",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"status": {"secretName": "c1", "expires": "2030-01-01T00:00:00Z"}}),
            ),
        )
        .await
        .expect("token status");
    let controller_config = |image: &str| -> ConfigMap {
        serde_json::from_value(json!({
            "metadata": {"name": "fleet-controller", "namespace": "cattle-fleet-system"},
            "data": {"config": format!("{{\"agentImage\":\"{image}\",\"apiServerURL\":\"https://fleet.example.com:6443\"}}")},
        }))
        .expect("configmap")
    };
    let config_maps: Api<ConfigMap> = Api::namespaced(h.client.clone(), "cattle-fleet-system");
    config_maps
        .create(
            &PostParams::default(),
            &controller_config("rancher/fleet-agent:v0.13.1"),
        )
        .await
        .expect("fleet-controller");
    // Creates the bootstrap Secret (read by GeneratePatches from then on).
    call(Hook::BeforeClusterCreate).await;
    eventually("the hook created the bootstrap Secret", || async {
        Api::<Secret>::namespaced(h.client.clone(), "team-a")
            .get_opt("c1-fleet-agent-bootstrap")
            .await
            .expect("get")
            .map(|_| ())
    })
    .await;
    // The import controller keeps the token valid until the Cluster registered: one about to
    // expire is extended (patch); a replaced one, once issued (get), reaches the bootstrap
    // Secret (patch).
    let token_uid = |t: &DynamicObject| t.metadata.uid.clone();
    let first = tokens.get("c1").await.expect("token");
    tokens
        .patch(
            "c1",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {names::REGISTRATION_TOKEN_EXPIRES_ANNOTATION: "2000-01-01T00:00:00Z"}}})),
        )
        .await
        .expect("about to expire");
    eventually("the token extended", || async {
        let token = tokens.get("c1").await.ok()?;
        (token
            .annotations()
            .get(names::REGISTRATION_TOKEN_EXPIRES_ANNOTATION)
            != Some(&"2000-01-01T00:00:00Z".to_string()))
        .then_some(())
    })
    .await;
    tokens
        .delete("c1", &Default::default())
        .await
        .expect("token deleted");
    let secrets: Api<Secret> = Api::namespaced(h.client.clone(), "team-a");
    secrets
        .delete("c1", &Default::default())
        .await
        .expect("values deleted");
    let second = eventually("a new token", || async {
        let token = tokens.get_opt("c1").await.expect("get")?;
        (token_uid(&token) != token_uid(&first)).then_some(token)
    })
    .await;
    secrets
        .create(&PostParams::default(), &token_secret)
        .await
        .expect("new token secret");
    tokens
        .patch_status(
            "c1",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"secretName": "c1"}})),
        )
        .await
        .expect("new token status");
    eventually("the bootstrap Secret follows the new token", || async {
        let secret = secrets.get_opt("c1-fleet-agent-bootstrap").await.ok()??;
        (secret
            .annotations()
            .get(names::REGISTRATION_TOKEN_UID_ANNOTATION)
            .cloned()
            == token_uid(&second))
        .then_some(())
    })
    .await;
    // GeneratePatches for a Cluster without a Secret reads it and prepares its bootstrap.
    h.cluster(
        "team-a",
        json!({"metadata": {"name": "c2"}, "spec": {"topology": {
            "classRef": {"name": "quick-start", "namespace": "team-a"}, "version": "v1.33.1",
            "variables": [{"name": "fleetAgent", "value": {"enabled": true}}]}}}),
    )
    .await;
    let patches = serde_json::to_vec(&json!({
        "apiVersion": "hooks.runtime.cluster.x-k8s.io/v1alpha1", "kind": "GeneratePatchesRequest",
        "variables": [{"name": "builtin", "value": {"cluster": {"name": "c2", "namespace": "team-a"}}},
                      {"name": "fleetAgent", "value": {"enabled": true}}],
        "items": [{"uid": "cp", "holderReference": {"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
                   "namespace": "team-a", "name": "c2", "fieldPath": "spec.controlPlaneRef"},
                   "object": {"apiVersion": "controlplane.cluster.x-k8s.io/v1beta2", "kind": "KubeadmControlPlaneTemplate",
                              "metadata": {"name": "cp"}, "spec": {"template": {"spec": {}}}}}]
    }))
    .expect("json");
    handlers::handle(&manager.hooks, Hook::GeneratePatches, &patches).await;
    eventually(
        "the background preparation created the token of c2",
        || async { tokens.get_opt("c2").await.expect("get").map(|_| ()) },
    )
    .await;
    // Upgrade gate: the Clusters of the namespace are listed (c1 is of the later wave `rest`),
    // and the registered Fleet Cluster's BundleDeployments.
    Api::<DynamicObject>::namespaced_with(
        h.client.clone(),
        "team-a",
        &ApiResource::from_gvk(&GroupVersionKind::gvk(
            "fleet.cattle.io",
            "v1alpha1",
            "Cluster",
        )),
    )
    .patch_status(
        "c1",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"namespace": "cluster-team-a-c1"}})),
    )
    .await
    .expect("registered");
    call(Hook::BeforeClusterUpgrade).await;
    let waves_listed = |r: &RequestRecord| {
        r.verb == Verb::List && r.resource == "clusters" && r.namespace == "team-a"
    };
    let requests = h.sandbox.requests().all();
    assert!(
        requests.iter().any(waves_listed),
        "no LIST of team-a's Clusters"
    );
    call(Hook::BeforeClusterDelete).await;

    // Teardown before deletion (docs/lifecycle.md): the agent checked in (the Fleet Cluster the
    // call above deleted was created again by the import controller), a bundle targets the
    // cluster by name; the Cluster is deleted. The first call marks the Fleet Cluster and
    // writes the condition and an Event; once the import controller drained it, the next call
    // reads the Bundle to say why it is still there.
    let fleet_clusters: Api<DynamicObject> = Api::namespaced_with(
        h.client.clone(),
        "team-a",
        &ApiResource::from_gvk(&GroupVersionKind::gvk(
            "fleet.cattle.io",
            "v1alpha1",
            "Cluster",
        )),
    );
    eventually(
        "the import controller created the Fleet Cluster again",
        || async { fleet_clusters.get_opt("c1").await.expect("get").map(|_| ()) },
    )
    .await;
    fleet_clusters
        .patch_status(
            "c1",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"namespace": "cluster-team-a-c1",
                "agent": {"lastSeen": "2026-11-23T10:00:00Z"}}})),
        )
        .await
        .expect("agent checked in");
    let fleet_api = |kind: &str, ns: &str| -> Api<DynamicObject> {
        Api::namespaced_with(
            h.client.clone(),
            ns,
            &ApiResource::from_gvk(&GroupVersionKind::gvk("fleet.cattle.io", "v1alpha1", kind)),
        )
    };
    let bundle: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "fleet.cattle.io/v1alpha1", "kind": "Bundle",
        "metadata": {"name": "backup", "namespace": "team-a"},
        "spec": {"targets": [{"clusterName": "c1"}]}}))
    .expect("bundle");
    fleet_api("Bundle", "team-a")
        .create(&PostParams::default(), &bundle)
        .await
        .expect("bundle");
    let deployment: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "fleet.cattle.io/v1alpha1", "kind": "BundleDeployment",
        "metadata": {"name": "backup", "namespace": "cluster-team-a-c1", "labels": {
            "fleet.cattle.io/bundle-name": "backup", "fleet.cattle.io/bundle-namespace": "team-a"}},
        "spec": {}}))
    .expect("bundle deployment");
    fleet_api("BundleDeployment", "cluster-team-a-c1")
        .create(&PostParams::default(), &deployment)
        .await
        .expect("bundle deployment");
    h.delete_cluster("team-a", "c1").await;
    let deleting = |cluster: &Value| {
        let mut cluster = cluster.clone();
        cluster["metadata"]["deletionTimestamp"] = json!("2099-01-01T00:00:00Z");
        let body = serde_json::to_vec(&json!({
            "apiVersion": "hooks.runtime.cluster.x-k8s.io/v1alpha1",
            "kind": "BeforeClusterDeleteRequest", "settings": {}, "cluster": cluster,
        }))
        .expect("json");
        let ctx = manager.hooks.clone();
        async move { handlers::handle(&ctx, Hook::BeforeClusterDelete, &body).await }
    };
    let started = deleting(&cluster).await;
    assert!(
        started.message.contains("removing Fleet workloads"),
        "{started:?}"
    );
    eventually("the import controller drains the Fleet Cluster", || async {
        let fleet = fleet_clusters.get("c1").await.expect("Fleet Cluster");
        let labels = fleet.metadata.labels.unwrap_or_default();
        (labels.contains_key(names::TEARDOWN_LABEL)
            && !labels.contains_key(names::CLUSTERCLASS_NAME_LABEL))
        .then_some(())
    })
    .await;
    let explained = deleting(&cluster).await;
    assert!(
        explained.message.contains("targets this cluster by name"),
        "{explained:?}"
    );
    h.stop().await;
    h.sandbox.requests().all()
}

fn role_rules(objects: &[Value], kind: &str, name: &str, origin: &'static str) -> Vec<Rule> {
    rules(find(objects, kind, name), origin)
}

fn denied<'a>(accesses: &'a [Access], rules: &[&Rule]) -> BTreeSet<&'a Access> {
    accesses
        .iter()
        .filter(|a| !rules.iter().any(|rule| matches(rule, a)))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_manager_needs_exactly_the_rights_it_is_given() {
    let objects = kustomize("config/default");
    let role = find(&objects, "Role", "caapf-leader-election-role");
    assert_eq!(role["metadata"]["namespace"], NAMESPACE);
    let manager = role_rules(&objects, "ClusterRole", "caapf-manager-role", "ClusterRole");
    let leader = rules(role, "Role");
    let extension = role_rules(
        &kustomize("config/extensionconfig"),
        "ClusterRole",
        "caapf-runtime-extension-role",
        "ExtensionRole",
    );
    let installer = role_rules(
        &kustomize("config/fleet-installer"),
        "ClusterRole",
        "caapf-fleet-installer",
        "InstallerRole",
    );

    // The hooks run with the RBAC of the Helm chart (runtime extension enabled), the other
    // scenarios with config/: both must give the manager what it needs.
    let chart_rbac = chart_objects(&["--set", "runtimeExtension.enabled=true"]);
    let (import, fleet, hooks) = tokio::join!(
        import_scenario(),
        fleet_scenario(),
        hooks_scenario(chart_rbac)
    );
    let ours = |records: &[RequestRecord]| -> Vec<Access> {
        let mine: Vec<&RequestRecord> = records.iter().filter(|r| from_manager(r)).collect();
        // The sandbox authorized every one of them as the ServiceAccount.
        let others: BTreeSet<&str> = mine
            .iter()
            .map(|r| r.user.as_str())
            .filter(|u| !u.ends_with(&format!(":{NAMESPACE}:{SERVICE_ACCOUNT}")))
            .collect();
        assert!(others.is_empty(), "manager requests as {others:?}");
        let forbidden: Vec<String> = mine
            .iter()
            .filter(|r| r.code == 403)
            .map(|r| {
                format!(
                    "{:?} {}/{} {}/{}",
                    r.verb, r.resource, r.subresource, r.namespace, r.name
                )
            })
            .collect();
        assert!(
            forbidden.is_empty(),
            "the API server refused: {forbidden:#?}"
        );
        mine.into_iter().flat_map(accesses).collect()
    };
    let (import, helm, fleet, hooks) = (
        ours(&import),
        fleet
            .iter()
            .filter(|r| r.user_agent.starts_with("Helm/"))
            .flat_map(accesses)
            .collect::<Vec<_>>(),
        ours(&fleet),
        ours(&hooks),
    );
    assert!(import.len() > 50, "too few import requests: {import:?}");
    assert!(
        fleet
            .iter()
            .any(|a| a.resource == "fleetaddonconfigs/status")
    );
    assert!(!helm.is_empty(), "helm made no requests");
    assert!(
        hooks
            .iter()
            .any(|a| a.resource == "secrets" && a.verb == "create")
    );

    // (a) Everything the manager did is allowed: by the default install, plus the extension's
    // role for the hooks; helm by the manager's role plus the installer's.
    let default_rules: Vec<&Rule> = manager.iter().chain(&leader).collect();
    let mut problems = Vec::new();
    for (scenario, accesses, extra) in [
        ("import", &import, Vec::new()),
        ("fleet", &fleet, Vec::new()),
        ("hooks", &hooks, extension.iter().collect::<Vec<_>>()),
        ("helm", &helm, installer.iter().collect::<Vec<_>>()),
    ] {
        let allowed: Vec<&Rule> = default_rules.iter().copied().chain(extra).collect();
        for access in denied(accesses, &allowed) {
            problems.push(format!("{scenario}: {access:?}"));
        }
    }
    assert!(
        problems.is_empty(),
        "requests the roles do not allow: {problems:#?}"
    );

    // (b) Every rule and verb is used, or allowlisted with a reason.
    let all: Vec<Access> = import.iter().chain(&fleet).chain(&hooks).cloned().collect();
    let mut unused = Vec::new();
    for rule in manager.iter().chain(&leader).chain(&extension) {
        for group in &rule.groups {
            for resource in &rule.resources {
                for verb in &rule.verbs {
                    let used = all.iter().any(|a| {
                        a.verb == verb
                            && a.group == *group
                            && (resource == "*" || a.resource == *resource)
                            && rule.namespace.as_ref().is_none_or(|ns| *ns == a.namespace)
                    });
                    let allowed = ALLOWLIST.iter().any(|(origin, g, r, v, _)| {
                        *origin == rule.origin && g == group && r == resource && v == verb
                    });
                    if !used && !allowed {
                        unused.push(format!("{} {verb} {group}/{resource}", rule.origin));
                    }
                }
            }
        }
    }
    assert!(unused.is_empty(), "rules no code path needs: {unused:#?}");

    // Both arbitrary-kind groups were read through a concrete kind.
    for group in [
        "controlplane.cluster.x-k8s.io",
        "infrastructure.cluster.x-k8s.io",
    ] {
        assert!(
            import.iter().any(|a| a.group == group && a.verb == "watch"),
            "no watch in {group}"
        );
    }
}

/// `config/default` with the manager's ClusterRole lacking `create` on Fleet Clusters: the
/// rendered objects, the crippled ClusterRole, and the same role with the rule restored.
fn without_fleet_cluster_create() -> (Vec<Value>, Value, Value) {
    let mut objects = kustomize("config/default");
    let role = objects
        .iter_mut()
        .find(|o| o["kind"] == "ClusterRole" && o["metadata"]["name"] == "caapf-manager-role")
        .expect("manager role");
    let restored = role.clone();
    let fleet_clusters = role["rules"]
        .as_array_mut()
        .expect("rules")
        .iter_mut()
        .find(|r| {
            r["apiGroups"] == json!(["fleet.cattle.io"]) && r["resources"] == json!(["clusters"])
        })
        .expect("the rule for Fleet Clusters");
    let full = fleet_clusters["verbs"].clone();
    fleet_clusters["verbs"] = json!(
        full.as_array()
            .expect("verbs")
            .iter()
            .filter(|v| *v != "create")
            .collect::<Vec<_>>()
    );
    let crippled = role.clone();
    (objects, crippled, restored)
}

/// The `Authorized` condition of the FleetAddonConfig, as (status, reason, message).
async fn authorized(h: &Harness) -> Option<(String, String, String)> {
    let config = Api::<caapf::api::FleetAddonConfig>::all(h.client.clone())
        .get_opt(names::CONFIG_NAME)
        .await
        .expect("get FleetAddonConfig")?;
    let condition = config
        .status?
        .conditions
        .into_iter()
        .find(|c| c.type_ == "Authorized")?;
    Some((condition.status, condition.reason, condition.message))
}

/// What the condition says about the refused import.
const REFUSED_IMPORT: &str =
    "import controllers cannot create clusters.fleet.cattle.io in namespace team-a";

/// The default ClusterRole without `create` on Fleet Clusters: importing a Cluster gets the API
/// server's 403. The manager keeps running, retries with backoff (no hot loop), says so in the
/// FleetAddonConfig condition `Authorized` (written once, not per retry), imports the Cluster
/// once the rule is back and sets the condition True.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_rule_is_a_403_the_manager_backs_off_from_and_recovers() {
    let (objects, _, restored) = without_fleet_cluster_create();
    let mut h = Harness::new().await;
    h.namespace(NAMESPACE, json!({})).await;
    h.namespace("team-a", json!({})).await;
    h.run_as_service_account(&objects, NAMESPACE, SERVICE_ACCOUNT)
        .await;
    h.config("cluster: {}").await;
    h.importable_cluster("team-a", "c1").await;
    h.start().await;
    let denied = |h: &Harness| {
        h.sandbox.requests().count(|r| {
            from_manager(r)
                && r.code == 403
                && r.group == "fleet.cattle.io"
                && r.resource == "clusters"
        })
    };
    eventually(
        "the manager is refused creating the Fleet Cluster",
        || async { (denied(&h) > 0).then_some(()) },
    )
    .await;
    // Backoff: 5 s after the first failure, then doubling; a hot loop would retry at once.
    // (A measurement window, not a synchronisation.)
    let first = denied(&h);
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        denied(&h) <= first + 1,
        "the manager retried a forbidden request {} times in 3 s",
        denied(&h) - first
    );
    assert!(h.sandbox.requests().all().iter().any(|r| from_manager(r)
        && r.user == format!("system:serviceaccount:{NAMESPACE}:{SERVICE_ACCOUNT}")));

    // The condition names who was refused what, where.
    let (status, reason, message) = eventually("Authorized is False", || async {
        authorized(&h)
            .await
            .filter(|(status, ..)| status == "False")
    })
    .await;
    assert_eq!((status.as_str(), reason.as_str()), ("False", "Forbidden"));
    assert_eq!(
        message,
        format!(
            "{REFUSED_IMPORT} (check the ClusterRole caapf-manager-role and the Roles bound to the manager's ServiceAccount)"
        )
    );
    // Not written again by the next failing retry (nothing else changes the status meanwhile:
    // the Fleet reconcile is done and the import counts are stable).
    let status_writes = |h: &Harness| {
        h.sandbox.requests().count(|r| {
            from_manager(r) && r.resource == "fleetaddonconfigs" && r.subresource == "status"
        })
    };
    let (writes, refused) = (status_writes(&h), denied(&h));
    eventually("the next retry is refused", || async {
        (denied(&h) > refused).then_some(())
    })
    .await;
    assert_eq!(
        status_writes(&h),
        writes,
        "a status write per failing retry"
    );

    // The rule comes back: the next retry imports the Cluster, and the condition clears.
    common::apply_rbac(&h.client, &[restored]).await;
    eventually(
        "the Fleet Cluster is created after the rule is restored",
        || async { h.fleet_cluster("team-a", "c1").await.map(|_| ()) },
    )
    .await;
    let (_, reason, message) = eventually("Authorized is True", || async {
        authorized(&h).await.filter(|(status, ..)| status == "True")
    })
    .await;
    assert_eq!(reason, "Authorized");
    assert!(!message.contains("cannot"), "{message}");
    h.stop().await;
}

/// The manager binary, refused the same way: its log has one ERROR line naming the component,
/// verb, resource and namespace (JSON, as a user gets it), and never its token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_403_is_logged_as_an_error_naming_verb_and_resource_without_the_token() {
    let (objects, _, _) = without_fleet_cluster_create();
    let h = Harness::new().await;
    h.namespace(NAMESPACE, json!({})).await;
    h.namespace("team-a", json!({})).await;
    common::apply_rbac(&h.client, &objects).await;
    let token = h
        .sandbox
        .service_account_token(NAMESPACE, SERVICE_ACCOUNT)
        .expect("token");
    h.config("cluster: {}").await;
    h.importable_cluster("team-a", "c1").await;
    let dir = tempfile::tempdir().expect("temp dir");
    let kubeconfig = dir.path().join("kubeconfig");
    h.sandbox
        .write_kubeconfig_with_token(&kubeconfig, &token)
        .expect("kubeconfig");
    let process = common::process::ManagerProcess::start(
        &kubeconfig,
        dir.path(),
        "caapf-rbac",
        0,
        // As the Deployment in config/ runs it.
        &["--log-format=json".to_string()],
    );
    let log = process.log.clone();
    let refusal = |text: &str| {
        text.lines()
            .filter(|l| l.contains("\"verb\":\"create\"") && l.contains("clusters.fleet.cattle.io"))
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    let line = tokio::time::timeout(common::TIMEOUT, async {
        loop {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            if let Some(line) = refusal(&text).into_iter().next() {
                return line;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .unwrap_or_else(|_| {
        panic!(
            "no ERROR line for the refusal in: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        )
    });
    let entry: Value = serde_json::from_str(&line).expect("a JSON log line");
    assert_eq!(entry["level"], "ERROR", "{line}");
    // Events are flattened (src/telemetry.rs).
    let fields = &entry;
    assert_eq!(fields["component"], "import controllers", "{line}");
    assert_eq!(fields["resource"], "clusters.fleet.cattle.io", "{line}");
    assert_eq!(fields["namespace"], "team-a", "{line}");
    // The condition is there too (what a user reads next).
    eventually("Authorized is False", || async {
        authorized(&h)
            .await
            .filter(|(status, _, message)| status == "False" && message.contains(REFUSED_IMPORT))
    })
    .await;
    process.kill().await;
    let text = std::fs::read_to_string(&log).expect("log");
    assert!(!text.contains(&token), "the token is in the log");
    assert_eq!(
        refusal(&text).len(),
        1,
        "one line per denial, not per retry: {text}"
    );
}

#[test]
fn bindings_name_the_deployment_service_account_and_never_cluster_admin() {
    let objects = kustomize("config/default");
    let deployment = find(&objects, "Deployment", "caapf-controller-manager");
    let account = deployment["spec"]["template"]["spec"]["serviceAccountName"]
        .as_str()
        .expect("serviceAccountName");
    assert_eq!(account, "caapf-controller-manager");
    find(&objects, "ServiceAccount", account);
    for (kind, name, role) in [
        (
            "ClusterRoleBinding",
            "caapf-manager-rolebinding",
            "caapf-manager-role",
        ),
        (
            "RoleBinding",
            "caapf-leader-election-rolebinding",
            "caapf-leader-election-role",
        ),
    ] {
        let binding = find(&objects, kind, name);
        assert_eq!(binding["roleRef"]["name"], role);
        assert_eq!(binding["subjects"][0]["kind"], "ServiceAccount");
        assert_eq!(binding["subjects"][0]["name"], account);
        assert_eq!(binding["subjects"][0]["namespace"], NAMESPACE);
    }
    for object in &objects {
        assert_ne!(
            object["roleRef"]["name"], "cluster-admin",
            "{} binds cluster-admin",
            object["metadata"]["name"]
        );
        if object["kind"] == "ClusterRole" || object["kind"] == "Role" {
            for rule in object["rules"].as_array().expect("rules") {
                for verb in strings(&rule["verbs"]) {
                    assert!(
                        !["*", "escalate", "bind", "impersonate"].contains(&verb.as_str()),
                        "{}: verb {verb}",
                        object["metadata"]["name"]
                    );
                }
                assert!(
                    !strings(&rule["apiGroups"]).contains(&"*".to_string()),
                    "{}: every API group",
                    object["metadata"]["name"]
                );
            }
        }
    }

    // The optional installer binds the same ServiceAccount, and only it holds escalate/bind.
    let installer = kustomize("config/fleet-installer");
    let binding = find(
        &installer,
        "ClusterRoleBinding",
        "caapf-fleet-installer-rolebinding",
    );
    assert_eq!(binding["roleRef"]["name"], "caapf-fleet-installer");
    assert_eq!(binding["subjects"][0]["name"], account);
    assert_eq!(binding["subjects"][0]["namespace"], NAMESPACE);
    find(&installer, "ClusterRole", "caapf-fleet-installer");
    assert!(installer.iter().all(|o| o["kind"] != "Namespace"));
    // So does the optional runtime extension's.
    let extension = kustomize("config/extensionconfig");
    let binding = find(
        &extension,
        "ClusterRoleBinding",
        "caapf-runtime-extension-rolebinding",
    );
    assert_eq!(binding["roleRef"]["name"], "caapf-runtime-extension-role");
    assert_eq!(binding["subjects"][0]["name"], account);
    assert_eq!(binding["subjects"][0]["namespace"], NAMESPACE);
    find(&extension, "ExtensionConfig", "caapf");
    assert!(extension.iter().all(|o| o["kind"] != "Namespace"));
}

/// The installer ClusterRole of `config/fleet-installer`, optionally without one verb of one
/// resource (group, resource, verb).
fn installer_role(without: Option<(&str, &str, &str)>) -> Vec<Value> {
    let mut objects = kustomize("config/fleet-installer");
    if let Some((group, resource, verb)) = without {
        let role = objects
            .iter_mut()
            .find(|o| o["kind"] == "ClusterRole")
            .expect("installer role");
        let mut found = false;
        for rule in role["rules"].as_array_mut().expect("rules") {
            if strings(&rule["apiGroups"]).iter().any(|g| g == group)
                && strings(&rule["resources"]).iter().any(|r| r == resource)
            {
                let verbs: Vec<String> = strings(&rule["verbs"])
                    .into_iter()
                    .filter(|v| v != verb)
                    .collect();
                rule["verbs"] = json!(verbs);
                found = true;
            }
        }
        assert!(found, "no installer rule for {group}/{resource}");
    }
    objects
}

/// helm, started by the manager, installs Fleet from charts with the structure of Fleet's real
/// ones as the manager's ServiceAccount, authorized by `config/default` plus
/// `config/fleet-installer` (with `without` taken out of the installer role). The sandbox
/// serves TLS, so helm (client-go) sends the token of the kubeconfig it gets through
/// `--helm-kubeconfig` (in a cluster, helm uses the pod's ServiceAccount token the same way).
/// Returns the harness (manager running, FleetAddonConfig created) and the charts' directory.
async fn install_as_service_account(
    helm: std::path::PathBuf,
    without: Option<(&str, &str, &str)>,
) -> (Harness, tempfile::TempDir, String) {
    use kube_sandbox::{CrdSet, SandboxOptions};
    let dir = tempfile::tempdir().expect("tempdir");
    let repo = fleet_common::real_charts::repository(dir.path()).await;
    let mut h = Harness::with_options(SandboxOptions {
        crds: vec![CrdSet::Capi, CrdSet::Bootstrap, CrdSet::Provider],
        tls: true,
        ..Default::default()
    })
    .await;
    h.namespace(NAMESPACE, json!({})).await;
    let mut objects = kustomize("config/default");
    objects.extend(installer_role(without));
    h.run_as_service_account(&objects, NAMESPACE, SERVICE_ACCOUNT)
        .await;
    let kubeconfig = dir.path().join("kubeconfig");
    h.sandbox
        .write_kubeconfig_with_token(&kubeconfig, h.token.as_deref().expect("token"))
        .expect("kubeconfig");
    h.flags.helm_binary = helm.display().to_string();
    h.flags.helm_kubeconfig = Some(kubeconfig);
    h.flags.helm_home = Some(dir.path().join("helm-home"));
    h.start().await;
    h.config(&format!(
        "install: {{version: {}, repository: \"{}\"}}\nconfig: {{server: {{custom: {{apiServerUrl: \"https://fleet.example.com\"}}}}}}",
        fleet_common::real_charts::VERSION,
        repo.url()
    ))
    .await;
    // The repository serves until the test ends.
    std::mem::forget(repo);
    (
        h,
        dir,
        format!("system:serviceaccount:{NAMESPACE}:{SERVICE_ACCOUNT}"),
    )
}

/// helm's requests in the request log (helm's User-Agent is `Helm/<version>`).
fn helm_requests(h: &Harness) -> Vec<RequestRecord> {
    h.sandbox
        .requests()
        .all()
        .into_iter()
        .filter(|r| r.user_agent.starts_with("Helm/"))
        .collect()
}

/// The FleetAddonConfig's conditions, `type: message`, when one of them mentions `text`.
async fn condition_mentioning(client: kube::Client, text: &str) -> Option<String> {
    let config: caapf::api::FleetAddonConfig = Api::all(client)
        .get_opt("fleet-addon-config")
        .await
        .expect("config")?;
    let conditions = &config.status.as_ref()?.conditions;
    conditions
        .iter()
        .any(|c| c.message.contains(text))
        .then(|| {
            conditions
                .iter()
                .map(|c| format!("{}={}: {}", c.type_, c.status, c.message))
                .collect::<Vec<_>>()
                .join("\n")
        })
}

/// Waits for `Ready=True`; on timeout fails with the conditions and what helm was refused.
async fn wait_installed(h: &Harness) {
    let deadline = tokio::time::Instant::now() + common::TIMEOUT;
    while condition_mentioning(h.client.clone(), "")
        .await
        .is_none_or(|c| !c.contains("Ready=True"))
    {
        if tokio::time::Instant::now() > deadline {
            let refused: Vec<String> = helm_requests(h)
                .iter()
                .filter(|r| r.code == 403)
                .map(|r| format!("{:?} {} {}", r.verb, r.resource, r.name))
                .collect();
            panic!(
                "Fleet not installed by the ServiceAccount after {:?}: {:?}; helm refused: {refused:#?}",
                common::TIMEOUT,
                condition_mentioning(h.client.clone(), "").await
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// helm 4 installs Fleet's real-shaped charts as the manager's ServiceAccount: with the
/// installer role of `config/fleet-installer` minus `create` on CRDs the install fails with the
/// API server's 403 (shown in the FleetAddonConfig's conditions), exactly as on a cluster; with
/// the rule back the next retry installs Fleet. Every request helm made was authenticated as the
/// ServiceAccount.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_installs_fleet_as_the_service_account_with_the_installer_role() {
    let crds = (
        "apiextensions.k8s.io",
        "customresourcedefinitions",
        "create",
    );
    let (mut h, _dir, user) =
        install_as_service_account(fleet_common::helm_bin(), Some(crds)).await;
    let refused = format!(
        "User \"{user}\" cannot create resource \"customresourcedefinitions\" in API group \"apiextensions.k8s.io\""
    );
    let client = h.client.clone();
    let conditions = eventually("the install refused by the API server", || {
        condition_mentioning(client.clone(), &refused)
    })
    .await;
    assert!(conditions.contains("Ready=False"), "{conditions}");
    // helm 4 creates by server-side apply (APPLY), helm 3 by POST: both need `create`.
    let denied: BTreeSet<String> = helm_requests(&h)
        .iter()
        .filter(|r| r.code == 403)
        .map(|r| format!("{:?} {}", r.verb, r.resource))
        .collect();
    assert!(
        !denied.is_empty()
            && denied
                .iter()
                .all(|d| d == "Apply customresourcedefinitions"
                    || d == "Post customresourcedefinitions"),
        "helm was refused only what the role lacks: {denied:?}"
    );

    // The rule is back: the next retry installs everything the charts hold.
    common::apply_rbac(&h.client, &installer_role(None)).await;
    wait_installed(&h).await;
    let requests = helm_requests(&h);
    let users: BTreeSet<&str> = requests.iter().map(|r| r.user.as_str()).collect();
    assert_eq!(users, [user.as_str()].into(), "helm's identities");
    // Every kind of the charts was created (201) by helm, and the hook Job deleted after it
    // succeeded.
    for resource in [
        "customresourcedefinitions",
        "cronjobs",
        "jobs",
        "deployments",
        "services",
        "roles",
        "rolebindings",
        "clusterroles",
        "clusterrolebindings",
        "serviceaccounts",
        "configmaps",
        "secrets",
    ] {
        assert!(
            requests
                .iter()
                .any(|r| r.verb.is_write() && r.resource == resource && r.code == 201),
            "helm did not create {resource} as the ServiceAccount"
        );
    }
    assert!(
        requests
            .iter()
            .any(|r| r.verb == Verb::Delete && r.resource == "jobs" && r.code == 200),
        "helm did not delete the succeeded hook Job"
    );
    h.stop().await;
}

/// helm 3 (`HELM3_BIN`, also supported) installs the same charts as the ServiceAccount with the
/// installer role as shipped: no request refused, every one authenticated as the ServiceAccount.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm3_installs_fleet_as_the_service_account_with_the_installer_role() {
    let (mut h, _dir, user) = install_as_service_account(fleet_common::helm3_bin(), None).await;
    wait_installed(&h).await;
    let requests = helm_requests(&h);
    assert!(
        requests
            .iter()
            .any(|r| r.resource == "cronjobs" && r.code == 201),
        "helm 3 created the CronJob"
    );
    let users: BTreeSet<&str> = requests.iter().map(|r| r.user.as_str()).collect();
    assert_eq!(users, [user.as_str()].into(), "helm's identities");
    let refused: Vec<String> = requests
        .iter()
        .filter(|r| r.code == 403)
        .map(|r| format!("{:?} {} {}", r.verb, r.resource, r.name))
        .collect();
    assert!(refused.is_empty(), "refused: {refused:#?}");
    h.stop().await;
}

/// `kubectl auth can-i` as the manager's ServiceAccount (a token kubeconfig over TLS, so
/// kubectl sends it), answered from the roles of `config/`: the default install, then with the
/// optional runtime extension role, then with the optional Fleet installer role.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_auth_can_i_as_the_service_account_follows_the_roles_of_config() {
    use kube_sandbox::SandboxOptions;
    // (kubectl auth can-i arguments; default install, + extensionconfig, + fleet-installer)
    let table: &[(&[&str], [bool; 3])] = &[
        (
            &["create", "clusters.fleet.cattle.io", "-n", "team-a"],
            [true; 3],
        ),
        (
            &["delete", "clusters.cluster.x-k8s.io", "-n", "team-a"],
            [false; 3],
        ),
        (
            &[
                "patch",
                "clusters.cluster.x-k8s.io",
                "--subresource=status",
                "-n",
                "team-a",
            ],
            [true; 3],
        ),
        (
            &[
                "update",
                "clusters.cluster.x-k8s.io",
                "--subresource=status",
                "-n",
                "team-a",
            ],
            [false; 3],
        ),
        (
            &["watch", "fleetaddonconfigs.addons.cluster.x-k8s.io"],
            [true; 3],
        ),
        (
            &["update", "leases.coordination.k8s.io", "-n", NAMESPACE],
            [true; 3],
        ),
        (
            &["update", "leases.coordination.k8s.io", "-n", "default"],
            [false, false, false],
        ),
        (&["get", "secrets", "-n", "team-a"], [true; 3]),
        (&["create", "secrets", "-n", "team-a"], [false, true, true]),
        (
            &["list", "bundledeployments.fleet.cattle.io", "-n", "team-a"],
            [false, true, true],
        ),
        (
            &["create", "customresourcedefinitions"],
            [false, false, true],
        ),
        (
            &["create", "cronjobs.batch", "-n", "cattle-fleet-system"],
            [false, false, true],
        ),
        (&["escalate", "clusterroles"], [false, false, true]),
        (&["impersonate", "users"], [false; 3]),
    ];
    let mut h = Harness::with_options(SandboxOptions {
        tls: true,
        ..Default::default()
    })
    .await;
    h.namespace(NAMESPACE, json!({})).await;
    h.run_as_service_account(&kustomize("config/default"), NAMESPACE, SERVICE_ACCOUNT)
        .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = dir.path().join("kubeconfig");
    h.sandbox
        .write_kubeconfig_with_token(&kubeconfig, h.token.as_deref().expect("token"))
        .expect("kubeconfig");
    let can_i = |args: &'static [&'static str]| {
        let kubeconfig = kubeconfig.clone();
        async move {
            let out = tokio::time::timeout(
                Duration::from_secs(60),
                tokio::process::Command::new("kubectl")
                    .arg("--kubeconfig")
                    .arg(&kubeconfig)
                    .args(["auth", "can-i"])
                    .args(args)
                    .output(),
            )
            .await
            .expect("kubectl finished")
            .expect("running kubectl");
            let answer = String::from_utf8_lossy(&out.stdout).trim().to_string();
            // Exit code 0 and "yes", or 1 and "no".
            match (out.status.code(), answer.as_str()) {
                (Some(0), "yes") => true,
                (Some(1), "no") => false,
                other => panic!(
                    "kubectl auth can-i {args:?}: {other:?} {}",
                    String::from_utf8_lossy(&out.stderr)
                ),
            }
        }
    };
    for (stage, extra) in [
        "config/default",
        "config/extensionconfig",
        "config/fleet-installer",
    ]
    .into_iter()
    .enumerate()
    {
        if stage > 0 {
            common::apply_rbac(&h.client, &kustomize(extra)).await;
        }
        let answers = futures::future::join_all(table.iter().map(|(args, _)| can_i(args))).await;
        let wrong: Vec<String> = table
            .iter()
            .zip(answers)
            .filter(|((_, want), got)| want[stage] != *got)
            .map(|((args, want), got)| format!("{args:?}: {got}, want {}", want[stage]))
            .collect();
        assert!(wrong.is_empty(), "with {extra}: {wrong:#?}");
    }
    let reviews = h.sandbox.requests().all();
    let reviews: Vec<&RequestRecord> = reviews
        .iter()
        .filter(|r| r.resource == "selfsubjectaccessreviews")
        .collect();
    assert_eq!(reviews.len(), table.len() * 3);
    assert!(
        reviews
            .iter()
            .all(|r| r.user == format!("system:serviceaccount:{NAMESPACE}:{SERVICE_ACCOUNT}")),
        "kubectl asked as someone else"
    );
}

/// The API server refuses a role that grants more than its writer holds unless the writer may
/// `escalate` (`k8s.io/kubernetes` `pkg/registry/rbac/clusterrole/policybased/storage.go`):
/// Fleet's chart creates ClusterRoles granting everything on `fleet.cattle.io`, so the
/// installer role without `escalate` fails the install with that 403, as on a cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_escalate_the_installer_cannot_create_fleet_s_cluster_roles() {
    let escalate = ("rbac.authorization.k8s.io", "clusterroles", "escalate");
    let (mut h, _dir, _user) =
        install_as_service_account(fleet_common::helm_bin(), Some(escalate)).await;
    let client = h.client.clone();
    let conditions = eventually("the install refused for escalation", || {
        condition_mentioning(
            client.clone(),
            "is attempting to grant RBAC permissions not currently held",
        )
    })
    .await;
    // helm creates the objects of one kind concurrently (helm `pkg/kube/client.go`,
    // `batchPerform`), so whichever of the chart's ClusterRoles is refused first is reported.
    assert!(
        ["fleet-controller", "gitjob"]
            .iter()
            .any(|role| conditions.contains(&format!(
                "clusterroles.rbac.authorization.k8s.io \"{role}\" is forbidden"
            ))),
        "{conditions}"
    );
    h.stop().await;
}
