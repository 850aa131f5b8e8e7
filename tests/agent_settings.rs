//! Fleet agent settings per Cluster (docs/agent-settings.md), against the manager (import
//! controller and hooks) and the sandbox: every field at every place (FleetAddonConfig,
//! ClusterClass annotation, `agentOverrides`, Cluster annotation) reaching the Fleet Cluster, the
//! precedence between them, a class annotation change reaching its Clusters, invalid annotations
//! holding only what they apply to with Events naming the field, the first-boot agent the
//! runtime extension renders (through real helm and the `fleet-agent` chart double at Fleet
//! 0.16.1) agreeing with the Fleet Cluster the import controller wrote, and the guide's YAML.

use crate::common;
use crate::fleet_common;

use caapf::hooks::handlers;
use caapf::hooks::types::{Hook, Response, ResponseBody, ResponseStatus};
use caapf::model::agent_patch::SCRIPT_KEY;
use caapf::model::boot_script::script_objects;
use caapf::names::AGENT_SETTINGS_ANNOTATION;
use common::guide::{apply, documents};
use common::{Harness, eventually};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

const NS: &str = "team-a";
/// The Fleet the played installation runs, and so the agent chart version rendered.
const FLEET: &str = "0.16.1";

fn fleet_cluster_resource() -> ApiResource {
    ApiResource {
        group: "fleet.cattle.io".into(),
        version: "v1alpha1".into(),
        api_version: "fleet.cattle.io/v1alpha1".into(),
        kind: "Cluster".into(),
        plural: "clusters".into(),
    }
}

fn token_resource() -> ApiResource {
    ApiResource {
        group: "fleet.cattle.io".into(),
        version: "v1alpha1".into(),
        api_version: "fleet.cattle.io/v1alpha1".into(),
        kind: "ClusterRegistrationToken".into(),
        plural: "clusterregistrationtokens".into(),
    }
}

/// The agent fields of a Fleet Cluster spec (what the settings decide).
const AGENT_FIELDS: &[&str] = &[
    "agentNamespace",
    "agentTolerations",
    "agentEnvVars",
    "hostNetwork",
    "agentAffinity",
    "agentResources",
    "agentSchedulingCustomization",
    "privateRepoURL",
];

fn agent_fields(spec: &Value) -> Value {
    Value::Object(
        AGENT_FIELDS
            .iter()
            .filter_map(|f| spec.get(*f).map(|v| (f.to_string(), v.clone())))
            .collect(),
    )
}

/// Every agent field, with values naming `place`: each place sets the same toleration (key,
/// operator, value and effect; `tolerationSeconds` names the place) and the same variable name,
/// so each replaces the one before.
fn all_fields(place: &str) -> Value {
    json!({
        "agentNamespace": format!("agent-{place}"),
        "agentTolerations": [{"key": "layer", "operator": "Exists", "effect": "NoExecute",
            "tolerationSeconds": 1000 + place.len() as i64}],
        "agentEnvVars": [{"name": "LAYER", "value": place}],
        "hostNetwork": place != "class",
        "agentAffinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "pool", "operator": "In", "values": [place]}]}]}}},
        "agentResources": {"requests": {"memory": format!("{}Mi", 64 + place.len())}},
        "agentSchedulingCustomization": {"priorityClass": {"value": 1000 + place.len() as i64},
            "podDisruptionBudget": {"maxUnavailable": "1"}},
        "privateRepoURL": format!("{place}.registry.example.com"),
    })
}

struct Scene {
    h: Harness,
    charts: fleet_common::ChartRepo,
}

impl Scene {
    /// The manager running with `cluster` (YAML, the `spec.cluster` section) and an agent chart
    /// repository; Fleet 0.16.1 played as installed; namespace [`NS`].
    async fn start(cluster: &str) -> Scene {
        let charts = fleet_common::ChartRepo::start(&[]).await;
        charts.add_agent_version(FLEET);
        let mut h = Harness::new().await;
        h.flags.helm_binary = fleet_common::helm_bin().display().to_string();
        h.config(&format!(
            "cluster: {cluster}\nruntimeExtension: {{agentChartRepository: \"{}\"}}",
            charts.url()
        ))
        .await;
        h.start().await;
        h.namespace(NS, json!({})).await;
        let scene = Scene { h, charts };
        scene.install_fleet().await;
        scene
    }

    /// Plays the Fleet chart: its namespace and the fleet-controller ConfigMap.
    async fn install_fleet(&self) {
        self.h.namespace("cattle-fleet-system", json!({})).await;
        let api: Api<ConfigMap> = Api::namespaced(self.h.client.clone(), "cattle-fleet-system");
        let cm: ConfigMap = serde_json::from_value(json!({
            "metadata": {"name": "fleet-controller", "namespace": "cattle-fleet-system"},
            "data": {"config": format!(r#"{{"agentImage":"rancher/fleet-agent:v{FLEET}","agentImagePullPolicy":"IfNotPresent","apiServerURL":"https://fleet.example.com:6443"}}"#)},
        }))
        .expect("configmap");
        api.create(&PostParams::default(), &cm)
            .await
            .expect("fleet-controller");
    }

    /// A ClusterClass with the annotation `settings` (none when null).
    async fn class(&self, name: &str, settings: Value) {
        self.h.class(NS, name, json!({})).await;
        self.annotate_class(name, settings).await;
    }

    async fn annotate_class(&self, name: &str, settings: Value) {
        let api: Api<DynamicObject> = Api::namespaced_with(
            self.h.client.clone(),
            NS,
            &ApiResource {
                group: "cluster.x-k8s.io".into(),
                version: "v1beta2".into(),
                api_version: "cluster.x-k8s.io/v1beta2".into(),
                kind: "ClusterClass".into(),
                plural: "clusterclasses".into(),
            },
        );
        api.patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"annotations": {AGENT_SETTINGS_ANNOTATION: text(&settings)}}}),
            ),
        )
        .await
        .expect("annotate class");
    }

    /// A topology Cluster of `class` using the bootstrap (`fleetAgent`, as Cluster API defaults
    /// it from the class variable), with `labels` and the annotation `settings` (none when null).
    async fn cluster(&self, name: &str, class: &str, labels: Value, settings: Value) -> Value {
        let mut annotations = json!({});
        if let Some(text) = text(&settings) {
            annotations[AGENT_SETTINGS_ANNOTATION] = json!(text);
        }
        let created = self
            .h
            .cluster(
                NS,
                json!({"metadata": {"name": name, "labels": labels, "annotations": annotations},
                       "spec": {"topology": {"classRef": {"name": class}, "version": "v1.33.1",
                                "controlPlane": {"replicas": 1},
                                "variables": [{"name": "fleetAgent", "value": {"enabled": true}}]}}}),
            )
            .await;
        let mut value = serde_json::to_value(&created).expect("json");
        if let Some(meta) = value["metadata"].as_object_mut() {
            meta.remove("managedFields");
        }
        value
    }

    async fn annotate_cluster(&self, name: &str, settings: Value) {
        self.h
            .merge_cluster(
                NS,
                name,
                json!({"metadata": {"annotations": {AGENT_SETTINGS_ANNOTATION: text(&settings)}}}),
            )
            .await;
    }

    async fn fleet_cluster(&self, name: &str) -> Option<Value> {
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.h.client.clone(), NS, &fleet_cluster_resource());
        api.get_opt(name)
            .await
            .expect("get")
            .map(|o| serde_json::to_value(o).expect("json"))
    }

    /// Waits until the Fleet Cluster `name`'s agent fields are `expected`.
    async fn wait_agent_fields(&self, name: &str, expected: &Value) -> Value {
        eventually(
            &format!("Fleet Cluster {name} agent fields {expected}"),
            || async {
                self.fleet_cluster(name)
                    .await
                    .filter(|f| &agent_fields(&f["spec"]) == expected)
            },
        )
        .await
    }

    /// The Warning Events with `reason` about `kind` `name`, their notes.
    async fn events(&self, kind: &str, name: &str, reason: &str) -> Vec<String> {
        let api: Api<Event> = Api::namespaced(self.h.client.clone(), NS);
        api.list(&ListParams::default())
            .await
            .expect("events")
            .items
            .into_iter()
            .filter(|e| {
                e.reason.as_deref() == Some(reason)
                    && e.regarding.as_ref().and_then(|r| r.kind.as_deref()) == Some(kind)
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
            })
            .filter_map(|e| e.note)
            .collect()
    }

    async fn call(&self, hook: Hook, cluster: &Value) -> Response {
        let body = json!({
            "apiVersion": "hooks.runtime.cluster.x-k8s.io/v1alpha1",
            "kind": hook.request_kind(),
            "settings": {},
            "cluster": cluster,
        });
        let ctx = self.h.manager.as_ref().expect("manager").hooks.clone();
        handlers::handle(&ctx, hook, &serde_json::to_vec(&body).expect("json")).await
    }

    /// Plays Fleet's token controller for the token `name`: its Secret and status.
    async fn issue_token(&self, name: &str) {
        eventually(&format!("token {name}"), || async {
            let api: Api<DynamicObject> =
                Api::namespaced_with(self.h.client.clone(), NS, &token_resource());
            api.get_opt(name).await.expect("get token")
        })
        .await;
        let secrets: Api<Secret> = Api::namespaced(self.h.client.clone(), NS);
        let secret: Secret = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": NS},
            "type": "fleet.cattle.io/cluster-registration-values",
            "stringData": {"values": format!("clusterNamespace: team-a\napiServerURL: https://fleet.example.com:6443\napiServerCA: |\n  -----BEGIN CERTIFICATE-----\n  MIIB\n  -----END CERTIFICATE-----\ntoken: sa-token-value\nsystemRegistrationNamespace: cattle-fleet-clusters-system\ntokenName: {name}\n")},
        }))
        .expect("secret");
        secrets
            .create(&PostParams::default(), &secret)
            .await
            .expect("token secret");
        let tokens: Api<DynamicObject> =
            Api::namespaced_with(self.h.client.clone(), NS, &token_resource());
        tokens
            .patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(
                    json!({"status": {"secretName": name, "expires": "2030-01-01T00:00:00Z"}}),
                ),
            )
            .await
            .expect("token status");
    }

    /// BeforeClusterCreate as Cluster API calls it until the bootstrap is prepared; the objects
    /// the boot script creates.
    async fn boot(&self, cluster: &Value) -> Vec<Value> {
        let name = cluster["metadata"]["name"].as_str().expect("name");
        let first = self.call(Hook::BeforeClusterCreate, cluster).await;
        assert!(
            first.message.contains("waiting for Fleet to issue"),
            "{first:?}"
        );
        self.issue_token(name).await;
        let done = self.call(Hook::BeforeClusterCreate, cluster).await;
        assert_eq!(done.status, ResponseStatus::Success, "{done:?}");
        assert!(
            !matches!(done.body, ResponseBody::Retry { retry_after_seconds } if retry_after_seconds > 0),
            "{done:?}"
        );
        let secrets: Api<Secret> = Api::namespaced(self.h.client.clone(), NS);
        let secret = secrets
            .get(&format!("{name}-fleet-agent-bootstrap"))
            .await
            .expect("bootstrap secret");
        let script =
            String::from_utf8(secret.data.expect("data")[SCRIPT_KEY].0.clone()).expect("utf-8");
        script_objects(&script).expect("boot script")
    }
}

fn agent_deployment(objects: &[Value]) -> Value {
    objects
        .iter()
        .find(|o| o["kind"] == "Deployment")
        .expect("agent Deployment")
        .clone()
}

/// The annotation's text of `settings` (`None` for null).
fn text(settings: &Value) -> Option<String> {
    (!settings.is_null()).then(|| serde_yaml::to_string(settings).expect("yaml"))
}

/// Each place sets every field; a Cluster gets the last place that applies to it, field by field.
#[tokio::test]
async fn every_field_at_every_place_and_the_precedence_between_them() {
    let config = all_fields("config");
    let scene = Scene::start(&format!(
        "{{agentInitiated: true, patchResource: true, {}, agentOverrides: [{{selector: {{matchLabels: {{tier: edge}}}}, settings: {}}}]}}",
        serde_json::to_string(&config).expect("json").trim_matches(['{', '}']),
        all_fields("override")
    ))
    .await;
    scene.class("plain", Value::Null).await;
    scene.class("annotated", all_fields("class")).await;

    // (Cluster, class, labels, own annotation, the place whose values it gets)
    let cases = [
        ("c-config", "plain", json!({}), Value::Null, "config"),
        ("c-class", "annotated", json!({}), Value::Null, "class"),
        (
            "c-override",
            "annotated",
            json!({"tier": "edge"}),
            Value::Null,
            "override",
        ),
        (
            "c-override-plain",
            "plain",
            json!({"tier": "edge"}),
            Value::Null,
            "override",
        ),
        (
            "c-own",
            "annotated",
            json!({"tier": "edge"}),
            all_fields("cluster"),
            "cluster",
        ),
        (
            "c-own-plain",
            "plain",
            json!({}),
            all_fields("cluster"),
            "cluster",
        ),
    ];
    for (name, class, labels, own, _) in &cases {
        scene
            .cluster(name, class, labels.clone(), own.clone())
            .await;
    }
    for (name, _, _, _, place) in &cases {
        scene.wait_agent_fields(name, &all_fields(place)).await;
    }

    // Field by field: a Cluster annotation setting one field keeps the others of the places
    // below; lists merge by name and by key, operator, value and effect.
    scene
        .cluster(
            "c-one-field",
            "annotated",
            json!({}),
            json!({"privateRepoURL": "mine.example.com",
                   "agentEnvVars": [{"name": "EXTRA", "value": "1"}],
                   "agentTolerations": [{"key": "other", "operator": "Exists", "effect": "NoExecute"}]}),
        )
        .await;
    let mut expected = all_fields("class");
    expected["privateRepoURL"] = json!("mine.example.com");
    expected["agentEnvVars"] =
        json!([{"name": "LAYER", "value": "class"}, {"name": "EXTRA", "value": "1"}]);
    expected["agentTolerations"] = json!([
        {"key": "layer", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 1005},
        {"key": "other", "operator": "Exists", "effect": "NoExecute"},
    ]);
    scene.wait_agent_fields("c-one-field", &expected).await;
    // The annotation is this provider's, not copied to the Fleet Cluster.
    let fleet = scene
        .fleet_cluster("c-one-field")
        .await
        .expect("Fleet Cluster");
    assert!(
        fleet["metadata"]["annotations"]
            .get(AGENT_SETTINGS_ANNOTATION)
            .is_none(),
        "{}",
        fleet["metadata"]
    );

    // A class annotation change reaches the Clusters of the class that do not override it.
    let mut changed = all_fields("class");
    changed["agentNamespace"] = json!("agent-class-2");
    scene.annotate_class("annotated", changed.clone()).await;
    scene.wait_agent_fields("c-class", &changed).await;
    let mut one_field = expected.clone();
    one_field["agentNamespace"] = json!("agent-class-2");
    scene.wait_agent_fields("c-one-field", &one_field).await;
    // ... and not those a later place overrides.
    assert_eq!(
        agent_fields(&scene.fleet_cluster("c-own").await.expect("c-own")["spec"]),
        all_fields("cluster")
    );

    // A label change moves a Cluster into an override.
    scene
        .h
        .label_cluster(NS, "c-config", json!({"tier": "edge"}))
        .await;
    scene
        .wait_agent_fields("c-config", &all_fields("override"))
        .await;
}

/// An invalid annotation holds the Fleet Clusters it applies to as they are, and only those;
/// Warning Events name the field on the object carrying it and on each held Cluster; a fix
/// applies at once. BeforeClusterCreate answers "retry" with the field and prepares nothing.
#[tokio::test]
async fn invalid_annotations_hold_only_what_they_apply_to() {
    let scene = Scene::start("{agentInitiated: true, patchResource: true}").await;
    scene
        .class(
            "karpenter",
            json!({"agentEnvVars": [{"name": "CLASS", "value": "1"}]}),
        )
        .await;
    scene
        .cluster("a", "karpenter", json!({}), Value::Null)
        .await;
    scene
        .cluster("b", "karpenter", json!({}), Value::Null)
        .await;
    let defaults = |env: Value| {
        let mut fields = agent_fields(&json!({
            "agentNamespace": "fleet-addon-agent",
            "hostNetwork": true,
            "agentTolerations": [
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists"},
                {"effect": "NoSchedule", "key": "node.cluster.x-k8s.io/uninitialized", "operator": "Exists"},
                {"effect": "NoSchedule", "key": "node.cloudprovider.kubernetes.io/uninitialized", "operator": "Equal", "value": "true"},
                {"effect": "NoSchedule", "key": "node-role.kubernetes.io/control-plane", "operator": "Exists"},
            ],
        }));
        fields["agentEnvVars"] = env;
        fields
    };
    let class_env = json!([{"name": "CLASS", "value": "1"}]);
    scene
        .wait_agent_fields("a", &defaults(class_env.clone()))
        .await;
    scene
        .wait_agent_fields("b", &defaults(class_env.clone()))
        .await;

    // Cluster a's own annotation is wrong: a is held, b follows a class change.
    scene
        .annotate_cluster(
            "a",
            json!({"agentTolerations": [{"key": "k", "operator": "Exists", "efect": "NoSchedule"}]}),
        )
        .await;
    let path = "metadata.annotations[fleet.addons.cluster.x-k8s.io/agent-settings].agentTolerations[0].efect";
    let notes = eventually("InvalidAgentSettings on Cluster a", || async {
        Some(scene.events("Cluster", "a", "InvalidAgentSettings").await).filter(|n| !n.is_empty())
    })
    .await;
    assert!(notes[0].contains(path), "{notes:?}");
    let new_env = json!([{"name": "CLASS", "value": "2"}]);
    scene
        .annotate_class("karpenter", json!({"agentEnvVars": new_env}))
        .await;
    scene
        .wait_agent_fields("b", &defaults(new_env.clone()))
        .await;
    assert_eq!(
        agent_fields(&scene.fleet_cluster("a").await.expect("a")["spec"]),
        defaults(class_env.clone()),
        "the held Fleet Cluster is left as it was"
    );
    // Fixed: applied.
    scene
        .annotate_cluster(
            "a",
            json!({"agentEnvVars": [{"name": "OWN", "value": "1"}]}),
        )
        .await;
    scene
        .wait_agent_fields(
            "a",
            &defaults(json!([{"name": "CLASS", "value": "2"}, {"name": "OWN", "value": "1"}])),
        )
        .await;

    // The class annotation is wrong: every Cluster of the class is held, a new one is not
    // created, and BeforeClusterCreate prepares nothing.
    scene
        .annotate_class("karpenter", json!({"agentNamespace": "Not_A_Namespace"}))
        .await;
    let class_notes = eventually("InvalidAgentSettings on the ClusterClass", || async {
        Some(
            scene
                .events("ClusterClass", "karpenter", "InvalidAgentSettings")
                .await,
        )
        .filter(|n| !n.is_empty())
    })
    .await;
    assert!(
        class_notes[0].contains(
            "metadata.annotations[fleet.addons.cluster.x-k8s.io/agent-settings].agentNamespace: \"Not_A_Namespace\" is not a valid namespace name"
        ),
        "{class_notes:?}"
    );
    let c = scene
        .cluster("c", "karpenter", json!({}), Value::Null)
        .await;
    eventually("InvalidAgentSettings on the new Cluster c", || async {
        Some(scene.events("Cluster", "c", "InvalidAgentSettings").await).filter(|n| {
            n.iter()
                .any(|note| note.contains("ClusterClass team-a/karpenter metadata.annotations"))
        })
    })
    .await;
    assert!(
        scene.fleet_cluster("c").await.is_none(),
        "not created while held"
    );
    let answer = scene.call(Hook::BeforeClusterCreate, &c).await;
    assert!(
        matches!(answer.body, ResponseBody::Retry { retry_after_seconds } if retry_after_seconds > 0)
            && answer.message.contains("ClusterClass team-a/karpenter metadata.annotations[fleet.addons.cluster.x-k8s.io/agent-settings].agentNamespace"),
        "{answer:?}"
    );
    let tokens: Api<DynamicObject> =
        Api::namespaced_with(scene.h.client.clone(), NS, &token_resource());
    assert!(
        tokens.get_opt("c").await.expect("get").is_none(),
        "nothing prepared"
    );
    assert!(scene.fleet_cluster("c").await.is_none(), "nothing prepared");
    // Fixed: the class's Clusters follow, the new one is created.
    scene
        .annotate_class("karpenter", json!({"agentNamespace": "agents"}))
        .await;
    let mut fixed = defaults(Value::Null);
    fixed["agentNamespace"] = json!("agents");
    fixed
        .as_object_mut()
        .expect("object")
        .remove("agentEnvVars");
    scene.wait_agent_fields("c", &fixed).await;
    scene.wait_agent_fields("b", &fixed).await;
}

/// The first-boot agent BeforeClusterCreate renders carries every field of the Fleet Cluster
/// the import controller wrote, each from a different place, as Fleet 0.16.1 deploys it
/// (rancher/fleet v0.16.1 `internal/cmd/controller/agentmanagement/agent/manifest.go`): the two
/// paths read the class differently (cache, GET) and must agree.
#[tokio::test]
async fn the_first_boot_agent_is_the_agent_of_the_fleet_cluster() {
    let scene = Scene::start(
        "{agentInitiated: true, patchResource: true, agentResources: {limits: {memory: 256Mi}}, \
         agentOverrides: [{selector: {matchLabels: {tier: edge}}, settings: {privateRepoURL: mirror.example.com:5000/rancher, \
         agentEnvVars: [{name: FLEET_AGENT_METRICS_BIND_ADDRESS, value: \":8090\"}]}}]}",
    )
    .await;
    scene
        .class(
            "karpenter",
            json!({
                "agentTolerations": [{"key": "karpenter.sh/controller", "operator": "Equal", "value": "true", "effect": "NoSchedule"}],
                "agentAffinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [{"key": "pool", "operator": "In", "values": ["system"]}]}]}}},
                "agentSchedulingCustomization": {"priorityClass": {"value": 1000}},
            }),
        )
        .await;
    let cluster = scene
        .cluster(
            "edge-1",
            "karpenter",
            json!({"tier": "edge"}),
            json!({"agentNamespace": "edge-agent", "hostNetwork": false,
                   "agentEnvVars": [{"name": "KUBERNETES_SERVICE_HOST", "value": "10.0.0.10"}]}),
        )
        .await;
    let objects = scene.boot(&cluster).await;
    let deployment = agent_deployment(&objects);
    let fleet = eventually("the Fleet Cluster completed by the import", || async {
        scene
            .fleet_cluster("edge-1")
            .await
            .filter(|f| f["spec"].get("agentNamespace").is_some())
    })
    .await;
    let spec = &fleet["spec"];
    // Every place reached the Fleet Cluster.
    assert_eq!(spec["agentNamespace"], "edge-agent");
    assert_eq!(spec["hostNetwork"], false);
    assert_eq!(spec["privateRepoURL"], "mirror.example.com:5000/rancher");
    assert_eq!(
        spec["agentResources"],
        json!({"limits": {"memory": "256Mi"}})
    );
    assert_eq!(
        spec["agentSchedulingCustomization"]["priorityClass"]["value"],
        1000
    );

    // ... and the first-boot agent is that Fleet Cluster's agent.
    assert_eq!(deployment["metadata"]["namespace"], spec["agentNamespace"]);
    let pod = &deployment["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    assert!(pod.get("hostNetwork").is_none(), "hostNetwork false: {pod}");
    assert_eq!(pod["affinity"], spec["agentAffinity"]);
    assert_eq!(container["resources"], spec["agentResources"]);
    assert_eq!(
        container["image"],
        format!("mirror.example.com:5000/rancher/rancher/fleet-agent:v{FLEET}")
    );
    // Fleet 0.14+: the priority class named when agentSchedulingCustomization.priorityClass is
    // set, and created by the bootstrap (Fleet creates it only for clusters it imports itself).
    assert_eq!(pod["priorityClassName"], "fleet-agent-priority-class");
    let class = objects
        .iter()
        .find(|o| o["kind"] == "PriorityClass")
        .expect("PriorityClass");
    assert_eq!(class["metadata"]["name"], "fleet-agent-priority-class");
    assert_eq!(class["value"], 1000);
    let tolerations = pod["tolerations"].as_array().expect("tolerations");
    for toleration in spec["agentTolerations"]
        .as_array()
        .expect("agentTolerations")
    {
        assert!(
            tolerations.contains(toleration),
            "{toleration} missing from {tolerations:?}"
        );
    }
    let env = container["env"].as_array().expect("env");
    for var in spec["agentEnvVars"].as_array().expect("agentEnvVars") {
        assert!(env.contains(var), "{var} missing from {env:?}");
    }
    assert!(
        env.contains(&json!({"name": "AGENT_SCOPE", "value": "edge-agent"})),
        "{env:?}"
    );
}

fn guide() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/agent-settings.md");
    std::fs::read_to_string(path).expect("docs/agent-settings.md")
}

/// The ```text block after `marker` in the guide.
fn text_block_after(guide: &str, marker: &str) -> String {
    let rest = &guide[guide.find(marker).expect("marker")..];
    let start = rest.find("```text\n").expect("text block") + "```text\n".len();
    let end = rest[start..].find("```").expect("end of block");
    rest[start..start + end].to_string()
}

/// docs/agent-settings.md: every YAML document applies, the Fleet Cluster of its Cluster is what
/// the guide shows, and the Cluster boots with that agent.
#[tokio::test]
async fn the_guide_applies_and_shows_what_the_fleet_cluster_holds() {
    let guide = guide();
    let documents = documents(&guide);
    let kinds: Vec<&str> = documents
        .iter()
        .filter_map(|d| d["kind"].as_str())
        .collect();
    assert_eq!(kinds, ["FleetAddonConfig", "ClusterClass", "Cluster"]);
    let charts = fleet_common::ChartRepo::start(&[]).await;
    charts.add_agent_version(FLEET);
    let mut h = Harness::new().await;
    h.flags.helm_binary = fleet_common::helm_bin().display().to_string();
    h.start().await;
    h.namespace(NS, json!({})).await;
    let scene = Scene { h, charts };
    scene.install_fleet().await;
    // The class exists before the guide annotates it (an infrastructure provider ships it).
    scene.h.class(NS, "karpenter", json!({})).await;
    for document in &documents {
        let mut document = document.clone();
        if document["kind"] == "FleetAddonConfig" {
            // The test's agent chart repository (the guide uses Fleet's).
            document["spec"]["runtimeExtension"] =
                json!({"agentChartRepository": scene.charts.url()});
        }
        apply(&scene.h, &document).await;
    }
    let shown: Value =
        serde_yaml::from_str(&text_block_after(&guide, "Its Fleet Cluster then holds"))
            .expect("yaml");
    let fleet = scene
        .wait_agent_fields("edge-1", &agent_fields(&shown["spec"]))
        .await;

    // The Cluster boots with that agent (Cluster API defaults `fleetAgent` from the class).
    scene
        .h
        .merge_cluster(
            NS,
            "edge-1",
            json!({"spec": {"topology": {"variables": [{"name": "fleetAgent", "value": {"enabled": true}}]}}}),
        )
        .await;
    let api: Api<DynamicObject> = Api::namespaced_with(
        scene.h.client.clone(),
        NS,
        &ApiResource {
            group: "cluster.x-k8s.io".into(),
            version: "v1beta2".into(),
            api_version: "cluster.x-k8s.io/v1beta2".into(),
            kind: "Cluster".into(),
            plural: "clusters".into(),
        },
    );
    let mut cluster =
        serde_json::to_value(api.get("edge-1").await.expect("cluster")).expect("json");
    cluster["metadata"]
        .as_object_mut()
        .expect("meta")
        .remove("managedFields");
    let deployment = agent_deployment(&scene.boot(&cluster).await);
    let pod = &deployment["spec"]["template"]["spec"];
    for toleration in fleet["spec"]["agentTolerations"]
        .as_array()
        .expect("tolerations")
    {
        assert!(
            pod["tolerations"]
                .as_array()
                .expect("tolerations")
                .contains(toleration),
            "{toleration}"
        );
    }
    let env = pod["containers"][0]["env"].as_array().expect("env");
    for var in fleet["spec"]["agentEnvVars"].as_array().expect("env vars") {
        assert!(env.contains(var), "{var}");
    }
    assert_eq!(pod["hostNetwork"], true);

    // The Warning the guide shows for a misspelt field, on that Cluster.
    let shown_warning = text_block_after(&guide, "names the field:");
    scene
        .h
        .merge_cluster(
            NS,
            "edge-1",
            json!({"metadata": {"annotations": {AGENT_SETTINGS_ANNOTATION: "agentTolerations: [{key: k, operator: Exists, efect: NoSchedule}]"}}}),
        )
        .await;
    let notes = eventually("the guide's Warning", || async {
        Some(
            scene
                .events("Cluster", "edge-1", "InvalidAgentSettings")
                .await,
        )
        .filter(|n| !n.is_empty())
    })
    .await;
    let shown_note = shown_warning
        .split("Cluster team-a/edge-1  ")
        .nth(1)
        .expect("note")
        .trim()
        .trim_end_matches('…')
        .trim();
    assert!(
        notes[0].starts_with(shown_note),
        "{:?} vs {shown_note:?}",
        notes[0]
    );
}

/// Fleet 0.16 names the `fleet-controller` configuration's `imagePullSecrets` on the agent and
/// copies them into the agent namespace only with its agent bundle (rancher/fleet v0.16.1
/// `secret/util.go` `GetAgentPullSecrets`, `manageagent.go`), so a private agent image at first
/// boot needs them in the boot script: BeforeClusterCreate answers "retry" naming a missing one,
/// then carries it, type and data, into the agent namespace (issue #38 item 5).
#[tokio::test]
async fn the_first_boot_agent_gets_the_pull_secrets_fleet_would_copy() {
    let scene = Scene::start("{agentInitiated: true, patchResource: true}").await;
    let api: Api<ConfigMap> = Api::namespaced(scene.h.client.clone(), "cattle-fleet-system");
    let config = format!(
        r#"{{"agentImage":"registry.example.com/rancher/fleet-agent:v{FLEET}","apiServerURL":"https://fleet.example.com:6443","imagePullSecrets":[{{"name":"registry-pull"}}]}}"#
    );
    api.patch(
        "fleet-controller",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"config": config}})),
    )
    .await
    .expect("fleet-controller");
    scene.class("plain", Value::Null).await;
    let cluster = scene
        .cluster("private-1", "plain", json!({}), Value::Null)
        .await;
    let first = scene.call(Hook::BeforeClusterCreate, &cluster).await;
    assert!(
        first.message.contains("waiting for Fleet to issue"),
        "{first:?}"
    );
    scene.issue_token("private-1").await;
    let missing = scene.call(Hook::BeforeClusterCreate, &cluster).await;
    assert!(
        missing.message.contains(
            "Fleet's imagePullSecrets names Secret cattle-fleet-system/registry-pull, which does not exist"
        ),
        "{missing:?}"
    );
    let secrets: Api<Secret> = Api::namespaced(scene.h.client.clone(), "cattle-fleet-system");
    let pull: Secret = serde_json::from_value(json!({
        "metadata": {"name": "registry-pull", "namespace": "cattle-fleet-system"},
        "type": "kubernetes.io/dockerconfigjson",
        "data": {".dockerconfigjson": "eyJhdXRocyI6e319"},
    }))
    .expect("secret");
    secrets
        .create(&PostParams::default(), &pull)
        .await
        .expect("pull secret");
    let done = scene.call(Hook::BeforeClusterCreate, &cluster).await;
    assert_eq!(done.status, ResponseStatus::Success, "{done:?}");
    let bootstrap: Api<Secret> = Api::namespaced(scene.h.client.clone(), NS);
    let secret = bootstrap
        .get("private-1-fleet-agent-bootstrap")
        .await
        .expect("bootstrap secret");
    let script =
        String::from_utf8(secret.data.expect("data")[SCRIPT_KEY].0.clone()).expect("utf-8");
    let objects = script_objects(&script).expect("boot script");
    let carried = objects
        .iter()
        .find(|o| o["kind"] == "Secret" && o["metadata"]["name"] == "registry-pull")
        .expect("the pull Secret in the boot script");
    assert_eq!(carried["metadata"]["namespace"], "fleet-addon-agent");
    assert_eq!(carried["type"], "kubernetes.io/dockerconfigjson");
    // Written as plain text, which compresses better (`compact`).
    assert_eq!(
        carried["stringData"][".dockerconfigjson"],
        r#"{"auths":{}}"#
    );
    let deployment = agent_deployment(&objects);
    assert_eq!(
        deployment["spec"]["template"]["spec"]["imagePullSecrets"],
        json!([{"name": "registry-pull"}])
    );
}
