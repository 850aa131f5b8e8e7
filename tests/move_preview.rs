//! `caapf move-preview` against the sandbox API server: the binary discovers a Cluster's objects
//! like clusterctl (CRDs labelled `clusterctl.cluster.x-k8s.io`, Secrets, the provider inventory),
//! prints the creation groups and the Bundles, and writes nothing.

use crate::common;

use std::process::{Command, Output};

use common::{Harness, eventually};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

/// Runs the binary off the runtime thread, so the sandbox (served by this runtime) answers it.
async fn caapf(args: &[&str], kubeconfig: &std::path::Path) -> Output {
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let kubeconfig = kubeconfig.to_path_buf();
    tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_caapf"))
            .args(&args)
            .env("KUBECONFIG", &kubeconfig)
            .env_remove("RUST_LOG")
            .env_remove("KUBERNETES_SERVICE_HOST")
            .output()
            .expect("caapf runs")
    })
    .await
    .expect("caapf task")
}

async fn create(
    client: &Client,
    api_version: &str,
    kind: &str,
    plural: &str,
    body: Value,
) -> String {
    let ar = resource(api_version, kind, plural);
    let mut object = body;
    object["apiVersion"] = json!(api_version);
    object["kind"] = json!(kind);
    let namespace = object["metadata"]["namespace"]
        .as_str()
        .unwrap_or("default")
        .to_string();
    let object: DynamicObject = serde_json::from_value(object).expect("object");
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &namespace, &ar);
    let created = api
        .create(&PostParams::default(), &object)
        .await
        .expect("create");
    created.uid().expect("uid")
}

/// A Secret in `default` from `body` (metadata and data); its UID.
async fn create_secret(client: &Client, body: Value) -> String {
    create(client, "v1", "Secret", "secrets", body).await
}

fn resource(api_version: &str, kind: &str, plural: &str) -> ApiResource {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: api_version.into(),
        kind: kind.into(),
        plural: plural.into(),
    }
}

fn owner(api_version: &str, kind: &str, name: &str, uid: &str) -> Value {
    json!([{"apiVersion": api_version, "kind": kind, "name": name, "uid": uid, "controller": true}])
}

#[tokio::test]
async fn preview_prints_the_graph_and_the_bundles_and_writes_nothing() {
    let h = Harness::new().await;
    let client = h.client.clone();

    // Before clusterctl's labels: the preview names what is missing and how to fix it.
    let early = tempfile::tempdir().expect("tempdir");
    let early_kubeconfig = early.path().join("kubeconfig");
    h.sandbox
        .write_kubeconfig(&early_kubeconfig)
        .expect("kubeconfig");
    let out = caapf(&["move-preview", "default/c1"], &early_kubeconfig).await;
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("carries the label clusterctl.cluster.x-k8s.io")
            && stderr.contains("kubectl label crd"),
        "{stderr}"
    );

    // clusterctl labels every provider CRD; the inventory CRD comes with clusterctl itself.
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in [
        "clusters.cluster.x-k8s.io",
        "kubeadmcontrolplanes.controlplane.cluster.x-k8s.io",
        "dockerclusters.infrastructure.cluster.x-k8s.io",
    ] {
        crds.patch(
            crd,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"clusterctl.cluster.x-k8s.io": ""}}})),
        )
        .await
        .expect("label CRD");
    }
    let mut inventory = kube_sandbox::crds::permissive_crd(
        "clusterctl.cluster.x-k8s.io",
        "Provider",
        "providers",
        &["v1alpha3"],
        "v1alpha3",
        true,
        &[],
        &[],
        false,
        json!({"clusterctl.cluster.x-k8s.io/core": "inventory"}),
    );
    // The inventory's fields are top-level (clusterctl `api/v1alpha3/provider_type.go`).
    for field in ["providerName", "type", "version"] {
        inventory["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"][field] =
            json!({"type": "string"});
    }
    let inventory: CustomResourceDefinition =
        serde_json::from_value(inventory).expect("inventory CRD");
    crds.create(&PostParams::default(), &inventory)
        .await
        .expect("inventory CRD");
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace =
        serde_json::from_value(json!({"metadata": {"name": "capi-system"}})).unwrap();
    namespaces
        .create(&PostParams::default(), &ns)
        .await
        .expect("namespace");
    eventually("the inventory type is served", || {
        let client = client.clone();
        async move {
            let ar = resource(
                "clusterctl.cluster.x-k8s.io/v1alpha3",
                "Provider",
                "providers",
            );
            let api: Api<DynamicObject> = Api::all_with(client, &ar);
            api.list(&Default::default()).await.ok().map(|_| ())
        }
    })
    .await;
    create(
        &client,
        "clusterctl.cluster.x-k8s.io/v1alpha3",
        "Provider",
        "providers",
        json!({"metadata": {"name": "cluster-api", "namespace": "capi-system"},
            "providerName": "cluster-api", "type": "CoreProvider", "version": "v1.11.0"}),
    )
    .await;

    let cluster = h
        .cluster(
            "default",
            json!({"metadata": {"name": "c1"}, "spec": {
                "controlPlaneRef": {"apiGroup": "controlplane.cluster.x-k8s.io", "kind": "KubeadmControlPlane", "name": "c1-cp"},
                "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "DockerCluster", "name": "c1"}}}),
        )
        .await;
    let c1 = cluster.uid().expect("uid");
    h.cluster("default", json!({"metadata": {"name": "c2"}, "spec": {}}))
        .await;
    let kcp = create(
        &client,
        "controlplane.cluster.x-k8s.io/v1beta2",
        "KubeadmControlPlane",
        "kubeadmcontrolplanes",
        json!({"metadata": {"name": "c1-cp", "ownerReferences": owner("cluster.x-k8s.io/v1beta2", "Cluster", "c1", &c1)},
            "spec": {"replicas": 1, "version": "v1.33.0"}}),
    )
    .await;
    create(
        &client,
        "infrastructure.cluster.x-k8s.io/v1beta2",
        "DockerCluster",
        "dockerclusters",
        json!({"metadata": {"name": "c1", "ownerReferences": owner("cluster.x-k8s.io/v1beta2", "Cluster", "c1", &c1)},
            "spec": {}}),
    )
    .await;
    create_secret(
        &client,
        json!({"metadata": {"name": "c1-kubeconfig", "ownerReferences": owner("controlplane.cluster.x-k8s.io/v1beta2", "KubeadmControlPlane", "c1-cp", &kcp)},
            "data": {"value": "a3ViZWNvbmZpZw=="}}),
    )
    .await;
    for name in ["c1-etcd", "c2-etcd"] {
        create_secret(&client, json!({"metadata": {"name": name}, "data": {}})).await;
    }

    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = dir.path().join("kubeconfig");
    h.sandbox.write_kubeconfig(&kubeconfig).expect("kubeconfig");
    let writes = h.sandbox.write_count();

    let out = caapf(&["move-preview", "default/c1"], &kubeconfig).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        stdout,
        "Cluster default/c1: 5 objects in 3 creation groups
  group 01:
    Cluster default/c1
  group 02:
    KubeadmControlPlane default/c1-cp
    DockerCluster default/c1
    Secret default/c1-etcd
  group 03:
    Secret default/c1-kubeconfig
Not provisioned (the move waits before pausing anything):
  Cluster default/c1 is still provisioning its infrastructure
Providers (1 objects):
  CoreProvider capi-system/cluster-api v1.11.0
Bundles in namespace default targeting Fleet Cluster c1:
  c1-move-providers: 2 resources
  c1-move-01: 1 resources (after c1-move-providers)
  c1-move-02: 2 resources (after c1-move-01)
Secrets written to the target by the move controller (never in a Bundle):
  Secret default/c1-etcd
  Secret default/c1-kubeconfig
"
    );

    let out = caapf(
        &["move-preview", "default/c1", "--output", "yaml"],
        &kubeconfig,
    )
    .await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bundles = common::render::documents(&String::from_utf8_lossy(&out.stdout));
    let names: Vec<&str> = bundles
        .iter()
        .map(|b| b["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["c1-move-providers", "c1-move-01", "c1-move-02"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        !text.contains("kind: Secret"),
        "no Secret in a Bundle: {text}"
    );
    assert!(!text.contains("a3ViZWNvbmZpZw=="), "no Secret data: {text}");
    assert!(!text.contains("lookup"), "{text}");
    assert!(!text.contains(&kcp), "source UIDs must not travel");
    let kcp_copy = bundles[2]["spec"]["resources"][0]["content"]
        .as_str()
        .unwrap();
    assert!(
        kcp_copy.contains("kind: KubeadmControlPlane") && !kcp_copy.contains("ownerReferences"),
        "{kcp_copy}"
    );
    let cluster_copy = bundles[1]["spec"]["resources"][0]["content"]
        .as_str()
        .unwrap();
    assert!(cluster_copy.contains("paused: true"), "{cluster_copy}");

    let out = caapf(&["move-preview", "default/nope"], &kubeconfig).await;
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(caapf::move_preview::EXPERIMENTAL_NOTE),
        "move-preview says the move is unproven: {stderr}"
    );
    assert!(
        stderr.contains("Cluster default/nope is not among the objects read"),
        "{stderr}"
    );

    assert_eq!(
        h.sandbox.write_count(),
        writes,
        "move-preview must not write"
    );
}

/// A chart holding `templates` (name, content), as Fleet's agent builds one from a Bundle's
/// resources (rancher/fleet v0.16.1 `internal/bundlereader`, `internal/helmdeployer/render`:
/// resources under `templates/` become chart templates), in a fresh directory.
fn chart(templates: &[(String, String)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let chart = dir.path().join("chart");
    std::fs::create_dir_all(chart.join("templates")).expect("chart dir");
    std::fs::write(
        chart.join("Chart.yaml"),
        "apiVersion: v2\nname: move\nversion: 0.0.0\n",
    )
    .expect("Chart.yaml");
    for (name, content) in templates {
        std::fs::write(chart.join(name), content).expect("template");
    }
    dir
}

/// Runs `helm` (the binary at `helm`) with `args` on the chart in `dir`, with a private home.
fn run_helm(helm: &std::path::Path, dir: &std::path::Path, args: &[&str]) -> Output {
    let home = dir.join("home");
    Command::new(helm)
        .args(args)
        .arg(dir.join("chart"))
        .env("HOME", &home)
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_DATA_HOME", home.join("data"))
        .env_remove("KUBECONFIG")
        .output()
        .expect("helm runs")
}

/// The templates of one Bundle.
fn bundle_templates(bundle: &Value) -> Vec<(String, String)> {
    bundle["spec"]["resources"]
        .as_array()
        .expect("resources")
        .iter()
        .map(|r| {
            (
                r["name"].as_str().expect("name").to_string(),
                r["content"].as_str().expect("content").to_string(),
            )
        })
        .collect()
}

/// The objects each Bundle must put on the target: the graph's copies (Secrets aside).
fn wanted_copies(target_paused: bool) -> Vec<Value> {
    let bundles = move_bundles(target_paused);
    bundles
        .iter()
        .flat_map(bundle_templates)
        .map(|(_, content)| {
            // The template is the escaped YAML of the copy: unescape to get the copy itself.
            let yaml = content.replace("{{`{{`}}", "{{");
            serde_yaml::from_str::<Value>(&yaml).expect("copy YAML")
        })
        .collect()
}

fn node(
    object: Value,
    owners: Vec<caapf::model::move_graph::OwnerLink>,
) -> caapf::model::move_graph::MoveNode {
    let object: DynamicObject = serde_json::from_value(object).expect("object");
    let tm = object.types.clone().expect("types");
    caapf::model::move_graph::MoveNode {
        id: caapf::model::move_graph::ObjectId {
            api_version: tm.api_version,
            kind: tm.kind,
            namespace: object.metadata.namespace.clone(),
            name: object.name_any(),
        },
        owners,
        blocking: false,
        object,
        exclusive: true,
        global: false,
    }
}

/// What every supported Fleet's agent runs first, a client-side render (rancher/fleet
/// v0.12.0-v0.14.0 always; v0.14.1-v0.16.1 when no template calls `lookup`: `getDryRunConfig`),
/// with the real helm 4 (Fleet v0.15+) and helm 3 (Fleet v0.12-v0.14): every Bundle renders to
/// its copies verbatim (Go templates in ClusterClass patches included), with no owner reference
/// and no Secret.
#[test]
fn helm_renders_the_move_bundles_verbatim_client_side() {
    let wanted = wanted_copies(true);
    assert!(
        wanted
            .iter()
            .all(|o| o["kind"] != "Secret" && o["metadata"].get("ownerReferences").is_none()),
        "{wanted:#?}"
    );
    let class = wanted
        .iter()
        .find(|o| o["kind"] == "ClusterClass")
        .expect("the class");
    assert!(
        serde_json::to_string(class)
            .unwrap()
            .contains(r#"{{ printf \\\"%s\\\" .x }} }} {{"#),
        "{class}"
    );
    for helm in [common::render::helm_bin(), helm3_bin()] {
        let mut rendered = Vec::new();
        for bundle in move_bundles(true) {
            let dir = chart(&bundle_templates(&bundle));
            let out = run_helm(&helm, dir.path(), &["template", "move"]);
            assert!(
                out.status.success(),
                "{}: {}",
                helm.display(),
                String::from_utf8_lossy(&out.stderr)
            );
            rendered.extend(common::render::documents(&String::from_utf8_lossy(
                &out.stdout,
            )));
        }
        assert_eq!(rendered, wanted, "{}", helm.display());
    }

    // A copy renders as the model writes it.
    let secret_free = node(
        json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "ClusterClass",
            "metadata": {"name": "cc", "namespace": "default", "uid": "u-cc", "resourceVersion": "7"},
            "spec": {"patches": [{"name": "p", "definitions": [{"jsonPatches": [{"op": "add", "path": "/spec/x",
                "valueFrom": {"template": "{{ .builtin.cluster.name }}-{{ printf \"%s\" .x }} }} {{"}}]}]}]}}),
        vec![],
    );
    let content =
        caapf::model::move_plan::render_node(&secret_free, "default/c1", true).expect("render");
    let dir = chart(&[("templates/000-object.yaml".to_string(), content)]);
    let out = run_helm(
        &common::render::helm_bin(),
        dir.path(),
        &["template", "move"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        common::render::documents(&String::from_utf8_lossy(&out.stdout)),
        vec![caapf::model::move_plan::target_object(
            &secret_free,
            "default/c1",
            true
        )]
    );
}

fn helm3_bin() -> std::path::PathBuf {
    let path = std::env::var_os("HELM3_BIN")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| common::render::root().join("bin/helm3"));
    assert!(
        path.is_file(),
        "helm 3 not found at {}: run hack/install-helm.sh (or set HELM3_BIN)",
        path.display()
    );
    path
}

/// Why the move no longer looks owners up: the template it used renders only where `lookup`
/// reaches the API server (`helm install --dry-run=server` against the sandbox, as Fleet's agent
/// runs a chart it detects `lookup` in), and fails where it does not (`helm template`, the
/// client-side render every supported Fleet runs for it, since `hasLookupFunction` cannot parse
/// it: tests/fixtures/fleet/has-lookup-function.yaml). The move's own Bundles install the same
/// copies either way, with helm 4 and helm 3, into an API server that validates them against the
/// Cluster API schemas.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_installs_the_move_bundles_the_way_fleet_runs_them() {
    let h = Harness::new().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = dir.path().join("kubeconfig");
    h.sandbox.write_kubeconfig(&kubeconfig).expect("kubeconfig");
    let owner_uid = create_secret(
        &h.client,
        json!({"metadata": {"name": "owner"}, "data": {}}),
    )
    .await;
    let old = r#"apiVersion: v1
kind: ConfigMap
metadata:
  name: dependent
  ownerReferences:
  - apiVersion: v1
    kind: Secret
    name: owner
    uid: {{ required "owner Secret default/owner not found on the target" (dig "metadata" "uid" "" (lookup "v1" "Secret" "default" "owner")) | quote }}
"#;
    let kube = kubeconfig.display().to_string();
    let run = |helm: std::path::PathBuf, templates: Vec<(String, String)>, args: Vec<String>| {
        tokio::task::spawn_blocking(move || {
            let dir = chart(&templates);
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            run_helm(&helm, dir.path(), &args)
        })
    };
    for helm in [common::render::helm_bin(), helm3_bin()] {
        let old_chart = vec![("templates/cm.yaml".to_string(), old.to_string())];
        let client_side = run(
            helm.clone(),
            old_chart.clone(),
            vec!["template".into(), "old".into()],
        )
        .await
        .expect("helm");
        assert!(!client_side.status.success());
        assert!(
            String::from_utf8_lossy(&client_side.stderr)
                .contains("owner Secret default/owner not found on the target"),
            "{}",
            String::from_utf8_lossy(&client_side.stderr)
        );
        let server_side = run(
            helm.clone(),
            old_chart,
            vec![
                "install".into(),
                "old".into(),
                "--namespace".into(),
                "default".into(),
                "--dry-run=server".into(),
                "--kubeconfig".into(),
                kube.clone(),
            ],
        )
        .await
        .expect("helm");
        assert!(
            server_side.status.success(),
            "{}",
            String::from_utf8_lossy(&server_side.stderr)
        );
        assert!(
            String::from_utf8_lossy(&server_side.stdout).contains(&owner_uid),
            "{}",
            String::from_utf8_lossy(&server_side.stdout)
        );
    }

    // The move's Bundles, in their order, as Fleet's agent installs them: a dry run, then the
    // install (helm 4 into namespace move4, helm 3 into move3, each a copy of `default`).
    for (helm, ns) in [
        (common::render::helm_bin(), "move4"),
        (helm3_bin(), "move3"),
    ] {
        let namespaces: Api<Namespace> = Api::all(h.client.clone());
        let object: Namespace = serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap();
        namespaces
            .create(&PostParams::default(), &object)
            .await
            .expect("namespace");
        for (i, bundle) in move_bundles(true).iter().enumerate() {
            let templates: Vec<(String, String)> = bundle_templates(bundle)
                .into_iter()
                .map(|(n, c)| {
                    (
                        n,
                        c.replace("namespace: default", &format!("namespace: {ns}")),
                    )
                })
                .collect();
            for dry_run in ["--dry-run=server", "--dry-run=client", ""] {
                let mut args = vec![
                    "install".to_string(),
                    format!("move-{i}"),
                    "--namespace".into(),
                    ns.into(),
                    "--kubeconfig".into(),
                    kube.clone(),
                ];
                if !dry_run.is_empty() {
                    args.push(dry_run.into());
                }
                let out = run(helm.clone(), templates.clone(), args)
                    .await
                    .expect("helm");
                assert!(
                    out.status.success(),
                    "{} {dry_run} bundle {i}: {}",
                    helm.display(),
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        }
        for want in wanted_copies(true) {
            let api_version = want["apiVersion"].as_str().unwrap();
            let kind = want["kind"].as_str().unwrap();
            let plural = format!("{}s", kind.to_lowercase()).replace("classs", "classes");
            let ar = resource(api_version, kind, &plural);
            let api: Api<DynamicObject> = Api::namespaced_with(h.client.clone(), ns, &ar);
            let name = want["metadata"]["name"].as_str().unwrap();
            let live = api
                .get(name)
                .await
                .unwrap_or_else(|e| panic!("{kind} {name}: {e}"));
            let live = serde_json::to_value(&live).unwrap();
            assert_eq!(live["spec"], want["spec"], "{kind} {name}");
            assert!(live["metadata"].get("ownerReferences").is_none());
            assert_eq!(
                live["metadata"]["annotations"][caapf::model::move_plan::MOVE_COPY_ANNOTATION],
                "default/c1"
            );
        }
    }
}

/// Go's text/template built-in functions (`text/template/funcs.go` `builtins`), defined in every
/// parse.
const GO_BUILTINS: [&str; 19] = [
    "and", "call", "html", "index", "slice", "js", "len", "not", "or", "print", "printf",
    "println", "urlquery", "eq", "ge", "gt", "le", "lt", "ne",
];

/// Words text/template reads as keywords, not functions.
const GO_KEYWORDS: [&str; 13] = [
    "if", "else", "end", "range", "with", "define", "template", "block", "break", "continue",
    "nil", "true", "false",
];

/// What text/template's parse says of `text` with only `lookup` (and the built-ins) defined:
/// `Err` for a parse error, else whether an action calls `lookup`. The lexer's rules
/// (`text/template/parse/lex.go`): actions between `{{` and `}}`, trim markers `{{- ` and ` -}}`,
/// a comment `/* */` as a whole action, strings with escapes, raw strings in backquotes (which may
/// hold `}}`), and identifiers that must be defined functions unless they follow `.` or `$`.
fn parse_with_only_lookup(text: &str) -> Result<bool, String> {
    let mut calls_lookup = false;
    let mut depth = 0i32;
    let mut rest = text;
    while let Some(start) = rest.find("{{") {
        let mut action = &rest[start + 2..];
        if let Some(trimmed) = action.strip_prefix("- ") {
            action = trimmed;
        }
        let trimmed = action.trim_start();
        if let Some(comment) = trimmed.strip_prefix("/*") {
            let end = comment.find("*/").ok_or("unclosed comment")?;
            let after = comment[end + 2..].trim_start();
            let after = after.strip_prefix('-').map_or(after, str::trim_start);
            rest = after
                .strip_prefix("}}")
                .ok_or("comment ends before the action")?;
            continue;
        }
        // Scan tokens up to the closing delimiter.
        let chars: Vec<char> = action.chars().collect();
        let mut i = 0;
        let mut words: Vec<(String, bool)> = Vec::new();
        let mut closed = None;
        while i < chars.len() {
            let c = chars[i];
            if c == '}' && chars.get(i + 1) == Some(&'}') {
                closed = Some(i + 2);
                break;
            }
            if c == '-' && chars.get(i + 1) == Some(&'}') && chars.get(i + 2) == Some(&'}') {
                closed = Some(i + 3);
                break;
            }
            match c {
                '"' => {
                    i += 1;
                    while i < chars.len() && chars[i] != '"' {
                        if chars[i] == '\\' {
                            i += 1;
                        }
                        if chars[i] == '\n' {
                            return Err("unterminated quoted string".into());
                        }
                        i += 1;
                    }
                    if i >= chars.len() {
                        return Err("unterminated quoted string".into());
                    }
                    i += 1;
                }
                '`' => {
                    i += 1;
                    while i < chars.len() && chars[i] != '`' {
                        i += 1;
                    }
                    if i >= chars.len() {
                        return Err("unterminated raw quoted string".into());
                    }
                    i += 1;
                }
                c if c.is_alphabetic() || c == '_' => {
                    let after_dot_or_var = i > 0
                        && (chars[i - 1] == '.'
                            || chars[i - 1] == '$'
                            || chars[i - 1].is_alphanumeric());
                    let begin = i;
                    while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                        i += 1;
                    }
                    let word: String = chars[begin..i].iter().collect();
                    words.push((word, after_dot_or_var));
                }
                _ => i += 1,
            }
        }
        let Some(closed) = closed else {
            return Err("unclosed action".into());
        };
        for (n, (word, field)) in words.iter().enumerate() {
            if *field {
                continue;
            }
            match word.as_str() {
                "if" | "range" | "with" | "define" | "block" if n == 0 => depth += 1,
                "end" if n == 0 => {
                    depth -= 1;
                    if depth < 0 {
                        return Err("unexpected {{end}}".into());
                    }
                }
                w if GO_KEYWORDS.contains(&w) => {}
                "lookup" => calls_lookup = true,
                w if GO_BUILTINS.contains(&w) => {}
                w => return Err(format!("function {w:?} not defined")),
            }
        }
        let consumed: usize = chars[..closed].iter().map(|c| c.len_utf8()).sum();
        rest = &action[consumed..];
    }
    if depth != 0 {
        return Err("unexpected EOF".into());
    }
    Ok(calls_lookup)
}

/// Fleet's `hasLookupFunction` over a chart's templates: a template that does not parse is
/// skipped; one that parses and calls `lookup` is enough.
fn fleet_detects_lookup(templates: &[String]) -> bool {
    templates
        .iter()
        .any(|t| parse_with_only_lookup(t).unwrap_or(false))
}

/// Fleet's detection rule (rancher/fleet v0.14.1-v0.16.1 `internal/helmdeployer/lookup.go`),
/// mirrored and pinned by `tests/fixtures/fleet/has-lookup-function.yaml`; then the move's
/// Bundles: nothing for any supported Fleet to detect or look up, so every version renders them
/// client-side and gets the objects verbatim.
#[test]
fn fleet_detects_no_lookup_in_the_move_bundles() {
    let fixture: Value = serde_yaml::from_str(
        &std::fs::read_to_string(
            common::render::root().join("tests/fixtures/fleet/has-lookup-function.yaml"),
        )
        .expect("fixture"),
    )
    .expect("fixture YAML");
    for case in fixture["cases"].as_array().expect("cases") {
        let templates: Vec<String> = case["templates"]
            .as_array()
            .expect("templates")
            .iter()
            .map(|t| t.as_str().expect("template").to_string())
            .collect();
        assert_eq!(
            fleet_detects_lookup(&templates),
            case["detected"].as_bool().expect("detected"),
            "{}",
            case["name"]
        );
    }
    // The move's own Bundles, for a kubeadm Cluster with a ClusterClass whose patches hold Go
    // templates: every template parses, none calls lookup.
    let bundles = move_bundles(true);
    let mut templates = 0;
    for bundle in &bundles {
        for resource in bundle["spec"]["resources"].as_array().expect("resources") {
            let content = resource["content"].as_str().expect("content");
            assert_eq!(
                parse_with_only_lookup(content),
                Ok(false),
                "{}: {content}",
                resource["name"]
            );
            templates += 1;
        }
    }
    assert_eq!(templates, 4, "class, Cluster, control plane, Machine");
}

/// The Bundles the move publishes for a kubeadm Cluster (a ClusterClass with Go template text in
/// its patches, a KubeadmControlPlane and a Machine it owns, the Cluster's CA Secret).
fn move_bundles(target_paused: bool) -> Vec<Value> {
    use caapf::model::move_graph::move_graph;
    use caapf::model::move_plan::{PlanInput, ProviderPlan, bundles};
    use caapf::model::move_types::{MoveTypes, TypeRule};
    let mut types = MoveTypes::core();
    for (group, kind, plural, hierarchy) in [
        ("cluster.x-k8s.io", "Cluster", "clusters", true),
        ("cluster.x-k8s.io", "ClusterClass", "clusterclasses", true),
        ("cluster.x-k8s.io", "Machine", "machines", false),
        (
            "controlplane.cluster.x-k8s.io",
            "KubeadmControlPlane",
            "kubeadmcontrolplanes",
            false,
        ),
    ] {
        types.insert(TypeRule {
            group: group.into(),
            version: "v1beta2".into(),
            kind: kind.into(),
            plural: plural.into(),
            namespaced: true,
            force_move: hierarchy,
            force_move_hierarchy: hierarchy,
        });
    }
    let objects: Vec<DynamicObject> = [
        json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "ClusterClass",
            "metadata": {"name": "quick-start", "namespace": "default", "uid": "u-cc"},
            "spec": {
                "controlPlane": {"templateRef": {"apiVersion": "controlplane.cluster.x-k8s.io/v1beta2", "kind": "KubeadmControlPlaneTemplate", "name": "quick-start-cp"}},
                "infrastructure": {"templateRef": {"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "DockerClusterTemplate", "name": "quick-start"}},
                "patches": [{"name": "p", "definitions": [{"selector": {"apiVersion": "controlplane.cluster.x-k8s.io/v1beta2", "kind": "KubeadmControlPlaneTemplate", "matchResources": {"controlPlane": true}},
                "jsonPatches": [{"op": "add", "path": "/spec/template/spec/kubeadmConfigSpec/files", "valueFrom": {"template": "- path: /etc/{{ .builtin.cluster.name }}\n  content: \"{{ printf \\\"%s\\\" .x }} }} {{\""}}]}]}]}}),
        json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
            "metadata": {"name": "c1", "namespace": "default", "uid": "u-c1"},
            "spec": {"topology": {"classRef": {"name": "quick-start"}, "version": "v1.33.0"},
                "controlPlaneRef": {"apiGroup": "controlplane.cluster.x-k8s.io", "kind": "KubeadmControlPlane", "name": "c1-cp"}}}),
        json!({"apiVersion": "controlplane.cluster.x-k8s.io/v1beta2", "kind": "KubeadmControlPlane",
            "metadata": {"name": "c1-cp", "namespace": "default", "uid": "u-kcp",
                "ownerReferences": [{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "name": "c1", "uid": "u-c1", "controller": true, "blockOwnerDeletion": true}]},
            "spec": {"replicas": 1, "version": "v1.33.0"}}),
        json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
            "metadata": {"name": "c1-cp-0", "namespace": "default", "uid": "u-m0",
                "labels": {"cluster.x-k8s.io/cluster-name": "c1"},
                "ownerReferences": [{"apiVersion": "controlplane.cluster.x-k8s.io/v1beta2", "kind": "KubeadmControlPlane", "name": "c1-cp", "uid": "u-kcp", "controller": true, "blockOwnerDeletion": true}]},
            "spec": {"clusterName": "c1", "bootstrap": {"dataSecretName": "c1-cp-0"},
                "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "DockerMachine", "name": "c1-cp-0"}}}),
        json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "c1-ca", "namespace": "default", "uid": "u-ca",
                "labels": {"cluster.x-k8s.io/cluster-name": "c1"},
                "ownerReferences": [{"apiVersion": "controlplane.cluster.x-k8s.io/v1beta2", "kind": "KubeadmControlPlane", "name": "c1-cp", "uid": "u-kcp", "controller": true}]},
            "type": "kubernetes.io/tls", "data": {"tls.key": "LS0tLS1CRUdJTiBQUklWQVRFIEtFWS0tLS0t"}}),
    ]
    .into_iter()
    .map(|o| serde_json::from_value(o).expect("object"))
    .collect();
    let graph = move_graph("default", "c1", &objects, &types).expect("graph");
    bundles(&PlanInput {
        cluster_namespace: "default",
        cluster_name: "c1",
        fleet_cluster_name: "c1",
        graph: &graph,
        providers: &ProviderPlan::default(),
        target_paused,
        keep_on_target: &Default::default(),
    })
    .expect("bundles")
}
