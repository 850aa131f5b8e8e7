//! A sandbox API server with the manager running against it, and helpers to play CAPI.

#![allow(dead_code)]

pub mod fleet_walk;
pub mod guide;
pub mod pod_security;
pub mod process;
pub mod render;
pub mod tls;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use caapf::api::{CapiCluster, CapiClusterClass, FleetAddonConfig};
use caapf::cli::ManagerFlags;
use caapf::context::{ConfigSender, Context};
use caapf::hooks::bootstrap_secrets::BootstrapSecrets;
use caapf::hooks::hook_context::HookContext;
use caapf::manager::Manager;
use caapf::metrics::ControllerLabels;
use caapf::model::config::EffectiveConfig;
use fleet_api_rs::fleet_cluster::Cluster as FleetCluster;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use kube_sandbox::Sandbox;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// A namespaced Kubernetes type the typed API reads.
pub trait Namespaced:
    kube::Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
    + Clone
    + DeserializeOwned
    + std::fmt::Debug
{
}

impl<K> Namespaced for K where
    K: kube::Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
{
}

/// How long a test waits for the controllers to converge.
pub const TIMEOUT: Duration = Duration::from_secs(30);

pub struct Harness {
    pub sandbox: Sandbox,
    pub client: Client,
    pub manager: Option<Manager>,
    pub flags: ManagerFlags,
    /// The bearer token the manager's clients send (None: the sandbox's admin).
    pub token: Option<String>,
}

impl Harness {
    /// A sandbox with every CRD, validating custom resources against their schemas (so a test
    /// never relies on an object a real API server would reject), no manager yet.
    pub async fn new() -> Self {
        Self::with_options(kube_sandbox::SandboxOptions {
            validate_custom_resources: true,
            ..Default::default()
        })
        .await
    }

    /// A sandbox started with `options` (e.g. without the Fleet CRDs), no manager yet.
    pub async fn with_options(options: kube_sandbox::SandboxOptions) -> Self {
        let sandbox = Sandbox::start_with(options).await.expect("sandbox starts");
        let client = sandbox.client();
        let flags = ManagerFlags {
            health_probe_bind_address: "0".into(),
            metrics_bind_address: "0".into(),
            // No client-side rate limit in tests (src/client.rs tests it on its own).
            kube_api_qps: 0.0,
            // The Runtime SDK extension starts with every manager: a free port on loopback, so
            // tests run in parallel (no certificate: it stays not ready, which they ignore).
            webhook_host: "127.0.0.1".into(),
            webhook_port: 0,
            ..Default::default()
        };
        Self {
            sandbox,
            client,
            manager: None,
            flags,
            token: None,
        }
    }

    /// Makes the manager run as the ServiceAccount `namespace/name`, authorized only by the
    /// RBAC objects in `objects` (rendered manifests: their Namespaces, ServiceAccounts,
    /// ClusterRoles, Roles and bindings are applied; everything else is ignored), as in a
    /// cluster: a request its roles do not allow gets the API server's 403.
    pub async fn run_as_service_account(&mut self, objects: &[Value], namespace: &str, name: &str) {
        apply_rbac(&self.client, objects).await;
        self.token = Some(
            self.sandbox
                .service_account_token(namespace, name)
                .expect("the rendered manifests hold the ServiceAccount"),
        );
    }

    /// Starts the manager with `self.flags`, with a client built as the binary builds it (its
    /// requests carry [`caapf::client::user_agent`], which tells them from the test's own).
    pub async fn start(&mut self) {
        assert!(self.manager.is_none(), "manager already running");
        let manager = Manager::start_with_clients(
            self.manager_clients().await,
            self.flags.clone(),
            CancellationToken::new(),
        )
        .await
        .expect("manager starts");
        self.manager = Some(manager);
    }

    /// A client for a manager: the sandbox's address, the manager's user agent and rate limit.
    pub async fn manager_client(&self) -> Client {
        caapf::client::build(self.manager_config().await, &self.flags).expect("manager client")
    }

    /// A manager's clients, built as the binary builds them.
    pub async fn manager_clients(&self) -> caapf::client::Clients {
        caapf::client::build_clients(self.manager_config().await, &self.flags)
            .expect("manager clients")
    }

    /// The manager's client configuration: the sandbox, with the ServiceAccount's token when
    /// [`Harness::run_as_service_account`] was called.
    async fn manager_config(&self) -> kube::Config {
        let mut config = sandbox_config(&self.sandbox).await;
        if let Some(token) = &self.token {
            config.auth_info.token = Some(token.clone().into());
        }
        config
    }

    /// Stops the manager.
    pub async fn stop(&mut self) {
        if let Some(manager) = self.manager.take() {
            manager.stop().await;
        }
    }

    /// Reconciliations so far of a controller of the running manager.
    pub fn reconciles(&self, controller: &'static str) -> u64 {
        self.manager
            .as_ref()
            .map(|m| {
                m.ctx
                    .metrics
                    .reconciles
                    .get_or_create(&ControllerLabels { controller })
                    .get()
            })
            .unwrap_or(0)
    }

    /// Writes recorded by the sandbox (Events and Leases excluded: neither changes state).
    pub fn state_writes(&self) -> Vec<String> {
        self.sandbox
            .requests()
            .all()
            .into_iter()
            .filter(|r| r.verb.is_write() && r.resource != "events" && r.resource != "leases")
            .map(|r| {
                format!(
                    "{:?} {}/{} {}/{}",
                    r.verb, r.resource, r.subresource, r.namespace, r.name
                )
            })
            .collect()
    }

    pub async fn namespace(&self, name: &str, labels: Value) {
        let api: Api<Namespace> = Api::all(self.client.clone());
        let ns: Namespace = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": labels}
        }))
        .expect("namespace");
        api.create(&PostParams::default(), &ns)
            .await
            .expect("create namespace");
    }

    pub async fn label_namespace(&self, name: &str, labels: Value) {
        let api: Api<Namespace> = Api::all(self.client.clone());
        api.patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": labels}})),
        )
        .await
        .expect("label namespace");
    }

    /// Creates a CAPI Cluster from `body` (metadata and spec as JSON).
    pub async fn cluster(&self, namespace: &str, body: Value) -> CapiCluster {
        let api: Api<CapiCluster> = Api::namespaced(self.client.clone(), namespace);
        let mut object = body;
        object["apiVersion"] = json!("cluster.x-k8s.io/v1beta2");
        object["kind"] = json!("Cluster");
        object["metadata"]["namespace"] = json!(namespace);
        let cluster: CapiCluster = serde_json::from_value(object).expect("cluster");
        api.create(&PostParams::default(), &cluster)
            .await
            .expect("create cluster")
    }

    /// A kubeadm/Docker CAPI Cluster `namespace/name` with its control plane initialized: ready
    /// for a manager-initiated import.
    pub async fn importable_cluster(&self, namespace: &str, name: &str) {
        self.cluster(
            namespace,
            json!({"metadata": {"name": name}, "spec": {
                "controlPlaneRef": {"apiGroup": "controlplane.cluster.x-k8s.io", "kind": "KubeadmControlPlane", "name": format!("{name}-cp")},
                "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "DockerCluster", "name": format!("{name}-infra")}
            }}),
        )
        .await;
        self.initialize(namespace, name).await;
    }

    /// Plays CAPI: marks the control plane initialized.
    pub async fn initialize(&self, namespace: &str, name: &str) {
        self.merge_cluster_status(
            namespace,
            name,
            json!({"initialization": {"controlPlaneInitialized": true}}),
        )
        .await;
    }

    /// Plays CAPI: merges `status` into the CAPI Cluster's status.
    pub async fn merge_cluster_status(&self, namespace: &str, name: &str, status: Value) {
        let api: Api<CapiCluster> = Api::namespaced(self.client.clone(), namespace);
        api.patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": status })),
        )
        .await
        .unwrap_or_else(|e| panic!("Cluster API's status write to {namespace}/{name}: {e}"));
    }

    pub async fn merge_cluster(&self, namespace: &str, name: &str, patch: Value) {
        let api: Api<CapiCluster> = Api::namespaced(self.client.clone(), namespace);
        api.patch(name, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .expect("patch cluster");
    }

    pub async fn delete_cluster(&self, namespace: &str, name: &str) {
        let api: Api<CapiCluster> = Api::namespaced(self.client.clone(), namespace);
        api.delete(name, &DeleteParams::default())
            .await
            .expect("delete cluster");
    }

    pub async fn class(&self, namespace: &str, name: &str, labels: Value) -> CapiClusterClass {
        let api: Api<CapiClusterClass> = Api::namespaced(self.client.clone(), namespace);
        let class: CapiClusterClass = serde_json::from_value(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "ClusterClass",
            "metadata": {"name": name, "namespace": namespace, "labels": labels},
            // The least a real CAPI v1beta2 server accepts.
            "spec": {
                "controlPlane": {"templateRef": {"apiVersion": "controlplane.cluster.x-k8s.io/v1beta2", "kind": "KubeadmControlPlaneTemplate", "name": "cp"}},
                "infrastructure": {"templateRef": {"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "DockerClusterTemplate", "name": "infra"}}
            }
        }))
        .expect("class");
        api.create(&PostParams::default(), &class)
            .await
            .expect("create class")
    }

    /// Creates or replaces (PUT) the FleetAddonConfig from a YAML spec.
    pub async fn config(&self, spec_yaml: &str) {
        let api: Api<FleetAddonConfig> = Api::all(self.client.clone());
        let spec: Value = serde_yaml::from_str(spec_yaml).expect("spec yaml");
        let mut body = json!({
            "apiVersion": "addons.cluster.x-k8s.io/v1alpha1", "kind": "FleetAddonConfig",
            "metadata": {"name": "fleet-addon-config"}, "spec": spec
        });
        match api.get_opt("fleet-addon-config").await.expect("get config") {
            Some(live) => {
                body["metadata"]["resourceVersion"] = json!(live.metadata.resource_version);
                let object: FleetAddonConfig = serde_json::from_value(body).expect("config");
                api.replace("fleet-addon-config", &PostParams::default(), &object)
                    .await
                    .expect("replace FleetAddonConfig");
            }
            None => {
                let object: FleetAddonConfig = serde_json::from_value(body).expect("config");
                api.create(&PostParams::default(), &object)
                    .await
                    .expect("create FleetAddonConfig");
            }
        }
    }

    pub async fn get<K>(&self, namespace: &str, name: &str) -> Option<K>
    where
        K: Namespaced,
    {
        Api::<K>::namespaced(self.client.clone(), namespace)
            .get_opt(name)
            .await
            .expect("get")
    }

    pub async fn fleet_cluster(&self, namespace: &str, name: &str) -> Option<FleetCluster> {
        self.get(namespace, name).await
    }

    pub async fn list<K>(&self, namespace: &str) -> Vec<K>
    where
        K: Namespaced,
    {
        Api::<K>::namespaced(self.client.clone(), namespace)
            .list(&Default::default())
            .await
            .expect("list")
            .items
    }

    /// Creates a CAPI Cluster from `body` (as [`Harness::cluster`]) and marks its control plane
    /// initialized.
    pub async fn initialized_cluster(&self, namespace: &str, body: Value) -> CapiCluster {
        let cluster = self.cluster(namespace, body).await;
        self.initialize(namespace, &cluster.name_any()).await;
        cluster
    }

    /// Merges `labels` into the CAPI Cluster's labels (`null` removes one).
    pub async fn label_cluster(&self, namespace: &str, name: &str, labels: Value) {
        self.merge_cluster(namespace, name, json!({"metadata": {"labels": labels}}))
            .await;
    }

    /// The FleetAddonConfig, if there is one.
    pub async fn addon_config(&self) -> Option<FleetAddonConfig> {
        Api::<FleetAddonConfig>::all(self.client.clone())
            .get_opt("fleet-addon-config")
            .await
            .expect("config")
    }

    /// Waits until `namespace/name` (a `K`) does not exist.
    pub async fn wait_gone<K>(&self, what: &str, namespace: &str, name: &str)
    where
        K: Namespaced,
    {
        eventually(what, || async {
            self.get::<K>(namespace, name).await.is_none().then_some(())
        })
        .await
    }

    /// Waits until the CAPI Cluster `namespace/name` exists with our finalizer (`present`) or
    /// without it.
    pub async fn wait_finalizer(&self, what: &str, namespace: &str, name: &str, present: bool) {
        eventually(what, || async {
            self.get::<CapiCluster>(namespace, name)
                .await
                .filter(|c| has_finalizer(c) == present)
                .map(|_| ())
        })
        .await
    }

    /// Waits until `controller` has reconciled more than `before` times (count `before` ahead of
    /// the change: the reconcile it causes can finish before a count taken after).
    pub async fn wait_reconciled_since(&self, what: &str, controller: &'static str, before: u64) {
        eventually(what, || async {
            (self.reconciles(controller) > before).then_some(())
        })
        .await
    }

    /// Waits until the Fleet Cluster `namespace/name` exists and satisfies `check`; returns it.
    pub async fn wait_fleet_cluster(
        &self,
        what: &str,
        namespace: &str,
        name: &str,
        check: impl Fn(&FleetCluster) -> bool,
    ) -> FleetCluster {
        eventually(what, || async {
            self.fleet_cluster(namespace, name)
                .await
                .filter(|c| check(c))
        })
        .await
    }

    /// Plays Fleet: once the Fleet Cluster `namespace/name` exists, replaces its status (as
    /// Fleet's status updates do).
    pub async fn play_fleet_status(&self, namespace: &str, name: &str, status: Value) {
        eventually(&format!("Fleet Cluster {name}"), || async {
            self.fleet_cluster(namespace, name).await.map(|_| ())
        })
        .await;
        let api: Api<FleetCluster> = Api::namespaced(self.client.clone(), namespace);
        let patch: json_patch::Patch =
            serde_json::from_value(json!([{"op": "add", "path": "/status", "value": status}]))
                .expect("patch");
        api.patch_status(name, &PatchParams::default(), &Patch::<()>::Json(patch))
            .await
            .expect("write Fleet Cluster status");
    }

    /// Plays Fleet's agent: the Fleet Cluster is ready, its agent last seen `ago` before now.
    pub async fn play_fleet_ready(&self, namespace: &str, name: &str, ago: Duration) {
        self.play_fleet_status(namespace, name, fleet_status_seen("status-ready.yaml", ago))
            .await;
    }

    /// Makes the manager run `helm` against the sandbox as its admin, with the kubeconfig and
    /// helm's home in `dir`.
    pub fn use_helm(&mut self, helm: &std::path::Path, dir: &std::path::Path) {
        let kubeconfig = dir.join("kubeconfig");
        self.sandbox
            .write_kubeconfig(&kubeconfig)
            .expect("kubeconfig");
        self.flags.helm_binary = helm.display().to_string();
        self.flags.helm_kubeconfig = Some(kubeconfig);
        self.flags.helm_home = Some(dir.join("helm-home"));
    }

    /// Sets the finalizers of the ClusterClass `namespace/name` (as an old CAAPF left them).
    pub async fn set_class_finalizers(&self, namespace: &str, name: &str, finalizers: &[&str]) {
        Api::<CapiClusterClass>::namespaced(self.client.clone(), namespace)
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"finalizers": finalizers}})),
            )
            .await
            .unwrap_or_else(|e| panic!("finalizers of ClusterClass {namespace}/{name}: {e}"));
    }

    pub async fn namespace_annotation(&self, name: &str) -> Option<String> {
        let api: Api<Namespace> = Api::all(self.client.clone());
        api.get(name)
            .await
            .expect("namespace")
            .annotations()
            .get(caapf::names::FLEET_WORKSPACE_ANNOTATION)
            .cloned()
    }
}

/// Server-side applies the RBAC-relevant objects of rendered manifests (Namespaces,
/// ServiceAccounts, ClusterRoles, ClusterRoleBindings, Roles, RoleBindings) as the admin.
pub async fn apply_rbac(client: &Client, objects: &[Value]) {
    use kube::api::DynamicObject;
    use kube::core::{ApiResource, GroupVersionKind};
    let mut ordered: Vec<&Value> = objects.iter().collect();
    // Namespaces first, so namespaced objects have one.
    ordered.sort_by_key(|o| o["kind"] != "Namespace");
    for object in ordered {
        let kind = object["kind"].as_str().unwrap_or_default();
        let (group, plural, namespaced) = match kind {
            "Namespace" => ("", "namespaces", false),
            "ServiceAccount" => ("", "serviceaccounts", true),
            "ClusterRole" => ("rbac.authorization.k8s.io", "clusterroles", false),
            "ClusterRoleBinding" => ("rbac.authorization.k8s.io", "clusterrolebindings", false),
            "Role" => ("rbac.authorization.k8s.io", "roles", true),
            "RoleBinding" => ("rbac.authorization.k8s.io", "rolebindings", true),
            _ => continue,
        };
        let ar =
            ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, "v1", kind), plural);
        let name = object["metadata"]["name"].as_str().expect("name");
        let api: Api<DynamicObject> = if namespaced {
            let ns = object["metadata"]["namespace"].as_str().expect("namespace");
            Api::namespaced_with(client.clone(), ns, &ar)
        } else {
            Api::all_with(client.clone(), &ar)
        };
        api.patch(
            name,
            &PatchParams::apply("test-rbac").force(),
            &Patch::Apply(object),
        )
        .await
        .unwrap_or_else(|e| panic!("applying {kind} {name}: {e}"));
    }
}

/// A client built as the binary builds it (user agent, `--kube-api-qps` limit) for `sandbox`.
pub async fn manager_client(sandbox: &Sandbox, flags: &ManagerFlags) -> Client {
    caapf::client::build(sandbox_config(sandbox).await, flags).expect("manager client")
}

/// The kube client configuration of the sandbox's kubeconfig.
pub async fn sandbox_config(sandbox: &Sandbox) -> kube::Config {
    kube::Config::from_custom_kubeconfig(sandbox.kubeconfig(), &Default::default())
        .await
        .expect("sandbox kubeconfig")
}

/// Whether a recorded request came from a manager (not from the test).
pub fn from_manager(request: &kube_sandbox::RequestRecord) -> bool {
    is_manager_agent(&request.user_agent)
}

/// Whether a User-Agent is a manager's (`caapf/<version>`, with the pod name when set).
pub fn is_manager_agent(agent: &str) -> bool {
    agent == caapf::client::user_agent_for(None)
        || agent.starts_with(&format!("{} (", caapf::client::user_agent_for(None)))
}

/// Waits until `check` returns `Some`, polling; panics with `what` after [`TIMEOUT`].
pub async fn eventually<T, F, Fut>(what: &str, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    eventually_within(what, TIMEOUT, check).await
}

/// [`eventually`] with its own deadline, for waits whose work grows with a test's size.
pub async fn eventually_within<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        if tokio::time::Instant::now() > deadline {
            panic!("timed out after {timeout:?} waiting for: {what}");
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// A Fleet Cluster status as Fleet writes it, from `tests/fixtures/fleet/`.
pub fn fleet_status(fixture: &str) -> Value {
    let path = format!(
        "{}/tests/fixtures/fleet/{fixture}",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).expect("fixture");
    serde_yaml::from_str(&text).expect("fixture YAML")
}

/// [`fleet_status`] with the agent's `lastSeen` moved to `ago` before now.
pub fn fleet_status_seen(fixture: &str, ago: Duration) -> Value {
    let mut status = fleet_status(fixture);
    let at = k8s_openapi::jiff::Timestamp::now()
        - k8s_openapi::jiff::SignedDuration::try_from(ago).expect("duration");
    status["agent"]["lastSeen"] = json!(at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string());
    status
}

/// Whether `object` has the label `key` with `value`.
pub fn has_label<K: ResourceExt>(object: &K, key: &str, value: &str) -> bool {
    object.labels().get(key).is_some_and(|v| v == value)
}

pub fn has_finalizer<K: ResourceExt>(object: &K) -> bool {
    object
        .finalizers()
        .iter()
        .any(|f| f == caapf::names::FINALIZER)
}

/// A context for calling the hooks directly or serving them: `client` for the API server and
/// `config` as the FleetAddonConfig read (kept while the returned sender lives).
pub fn hook_context(client: Client, config: EffectiveConfig) -> (Arc<HookContext>, ConfigSender) {
    let (tx, rx) = caapf::context::config_channel();
    tx.send_replace(Some(Arc::new(config)));
    (
        Arc::new(HookContext::new(
            Arc::new(Context::new(
                client,
                ManagerFlags::default(),
                rx,
                CancellationToken::new(),
            )),
            BootstrapSecrets::default(),
        )),
        tx,
    )
}

/// A port free on 127.0.0.1 when asked.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}
