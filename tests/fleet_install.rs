//! Fleet installation with the real helm binary against the sandbox API server, from a chart
//! repository served on 127.0.0.1 (test charts `fleet-crd` and `fleet`, versions 0.1.0,
//! 0.2.0 and the pre-release 0.3.0-rc.1).

use crate::fleet_common;

use std::time::{Duration, Instant};

use caapf::api::FleetAddonConfig;
use fleet_common::{ChartRepo, Env, Options, RepoMode, assert_condition, condition};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

const NS: &str = "cattle-fleet-system";

/// The two releases, `fleet` and `fleet-crd`, both deployed from the charts of `version`, at
/// their revisions.
fn deployed(
    version: &str,
    fleet_revision: &str,
    crd_revision: &str,
) -> [(String, String, String, String); 2] {
    let release = |name: &str, revision: &str| {
        (
            name.to_string(),
            format!("{name}-{version}"),
            revision.to_string(),
            "deployed".to_string(),
        )
    };
    [
        release("fleet", fleet_revision),
        release("fleet-crd", crd_revision),
    ]
}

/// `status.installedVersion`.
fn installed_version(object: &FleetAddonConfig) -> Option<&str> {
    object.status.as_ref()?.installed_version.as_deref()
}

async fn fleet_env(env: &Env) -> (Vec<Value>, String, String) {
    let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), NS);
    let cm = cms
        .get("fleet-env")
        .await
        .expect("fleet-env rendered by the chart");
    let data = cm.data.unwrap_or_default();
    let extra_env: Vec<Value> = serde_json::from_str(&data["extraEnv"]).expect("extraEnv is JSON");
    (
        extra_env,
        data["bootstrap"].clone(),
        data["version"].clone(),
    )
}

fn env_entry(name: &str, value: &str) -> Value {
    json!({"name": name, "value": value})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn installs_latest_and_applies_value_changes_at_the_same_version() {
    let repo = ChartRepo::start(&["0.1.0", "0.2.0", "0.3.0-rc.1"]).await;
    let env = Env::start(Options::default()).await;
    let spec = |helm_ops: bool| {
        json!({
            "install": {
                "followLatest": true,
                "repository": repo.url(),
                "values": {"extraEnv": [{"name": "HTTP_PROXY", "value": "http://proxy:3128"}], "replicas": 2},
            },
            "config": {"featureGates": {"experimentalOciStorage": true, "experimentalHelmOps": helm_ops}},
        })
    };
    let generation = env.set_spec(spec(false)).await;
    let object = env.wait_ready(generation, "True").await;

    // The latest stable chart, not the pre-release; both releases; chart versions.
    let status = object.status.as_ref().expect("status");
    assert_eq!(status.installed_version.as_deref(), Some("0.2.0"));
    assert_eq!(env.releases(), deployed("0.2.0", "1", "1"));
    for type_ in [
        "ConfigValid",
        "RepoAdd",
        "RepoUpdate",
        "Installed",
        "FlagsUpdate",
    ] {
        let c = assert_condition(&object, type_, "True");
        assert_eq!(c.observed_generation, Some(generation), "{type_}");
        assert_eq!(c.reason, type_);
    }
    assert!(
        assert_condition(&object, "RepoUpdate", "True")
            .message
            .contains("fleet 0.2.0")
    );

    // Each gate from its own flag, merged after the user's entries; bootstrap off by default.
    let (extra_env, bootstrap, version) = fleet_env(&env).await;
    assert_eq!(
        extra_env,
        [
            env_entry("HTTP_PROXY", "http://proxy:3128"),
            env_entry("EXPERIMENTAL_OCI_STORAGE", "true"),
            env_entry("EXPERIMENTAL_HELM_OPS", "false"),
        ]
    );
    assert_eq!((bootstrap.as_str(), version.as_str()), ("false", "0.2.0"));

    // kubectl wait works on the condition.
    let out = std::process::Command::new("kubectl")
        .args([
            "wait",
            "--for=condition=Ready",
            "fleetaddonconfig/fleet-addon-config",
            "--timeout=30s",
        ])
        .env("KUBECONFIG", env.kubeconfig())
        .env("HOME", env.dir.path())
        .output()
        .expect("running kubectl");
    assert!(
        out.status.success(),
        "kubectl wait: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Another controller owns a condition of its own (server-side apply, its field manager).
    let api = env.api();
    api.patch_status(
        "fleet-addon-config",
        &PatchParams::apply("other-controller-test").force(),
        &Patch::Apply(json!({
            "apiVersion": "addons.cluster.x-k8s.io/v1alpha1",
            "kind": "FleetAddonConfig",
            "metadata": {"name": "fleet-addon-config"},
            "status": {"conditions": [{
                "type": "OtherReady", "status": "True", "reason": "OtherReady", "message": "theirs",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            }]},
        })),
    )
    .await
    .expect("other controller's status");

    // No self-triggered work: with nothing changing, no status write and no helm run.
    // (An observation window: the property is that nothing happens in it.)
    env.sandbox.requests().reset();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let all = env.sandbox.requests().all();
    let busy: Vec<_> = all
        .iter()
        .filter(|r| {
            (r.resource == "fleetaddonconfigs" && r.verb.is_write())
                || (r.resource == "secrets" && r.namespace == NS)
        })
        .collect();
    assert!(busy.is_empty(), "work while nothing changed: {busy:?}");

    // Toggling one gate upgrades `fleet` to the same version with the new env; fleet-crd is
    // left alone.
    let ready_since = assert_condition(&object, "Ready", "True")
        .last_transition_time
        .clone();
    let generation = env.set_spec(spec(true)).await;
    let object = env.wait_ready(generation, "True").await;
    let (extra_env, _, version) = fleet_env(&env).await;
    assert_eq!(
        extra_env,
        [
            env_entry("HTTP_PROXY", "http://proxy:3128"),
            env_entry("EXPERIMENTAL_OCI_STORAGE", "true"),
            env_entry("EXPERIMENTAL_HELM_OPS", "true"),
        ]
    );
    assert_eq!(version, "0.2.0");
    assert_eq!(env.releases(), deployed("0.2.0", "2", "1"));
    let ready = assert_condition(&object, "Ready", "True");
    assert_eq!(
        ready.last_transition_time, ready_since,
        "Ready did not transition"
    );
    assert_eq!(
        condition(&object, "OtherReady").map(|c| c.message.as_str()),
        Some("theirs"),
        "another manager's condition survives our writes"
    );
    assert!(
        object
            .status
            .as_ref()
            .and_then(|s| s.clusters.as_ref())
            .is_some(),
        "the import controller's status.clusters is kept"
    );
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pinned_versions_install_once_and_upgrade_when_the_pin_moves() {
    let repo = ChartRepo::start(&["0.1.0", "0.2.0"]).await;
    let env = Env::start(Options::default()).await;

    // A problem in spec.cluster is reported, and does not stop the installation.
    let generation = env
        .set_spec(json!({
            "install": {"version": "0.1.0", "repository": repo.url()},
            "config": {"bootstrapLocalCluster": true},
            "cluster": {"namespaceRegexes": ["ok-.*", "foo("]},
        }))
        .await;
    let object = env.wait_ready(generation, "False").await;
    let valid = assert_condition(&object, "ConfigValid", "False");
    assert!(
        valid
            .message
            .contains("spec.cluster.namespaceRegexes[1]: invalid regex \"foo(\""),
        "{valid:?}"
    );
    assert_eq!(
        assert_condition(&object, "Ready", "False").reason,
        "ConfigInvalid"
    );
    let object = env
        .wait_for("installed", Duration::from_secs(60), |o| {
            condition(o, "Installed").is_some_and(|c| c.status == "True")
        })
        .await;
    assert_eq!(installed_version(&object), Some("0.1.0"));
    assert_eq!(env.releases(), deployed("0.1.0", "1", "1"));
    assert_eq!(fleet_env(&env).await.1, "true", "bootstrap.enabled");

    // followLatest: false installs once and never moves, even with 0.2.0 available.
    let generation = env
        .set_spec(json!({"install": {"followLatest": false, "repository": repo.url()}, "config": {"bootstrapLocalCluster": true}}))
        .await;
    let object = env.wait_ready(generation, "True").await;
    assert_eq!(installed_version(&object), Some("0.1.0"));
    assert_eq!(env.releases(), deployed("0.1.0", "1", "1"));

    // Moving the pin (with a leading v) upgrades both.
    let generation = env
        .set_spec(json!({"install": {"version": "v0.2.0", "repository": repo.url()}, "config": {"bootstrapLocalCluster": true}}))
        .await;
    let object = env.wait_ready(generation, "True").await;
    assert_eq!(installed_version(&object), Some("0.2.0"));
    assert_eq!(env.releases(), deployed("0.2.0", "2", "2"));

    // Every helm change was recorded as an Event on the FleetAddonConfig.
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(env.client.clone(), "default");
    let reasons: Vec<String> = events
        .list(&Default::default())
        .await
        .expect("events")
        .items
        .into_iter()
        .filter(|e| {
            e.regarding.as_ref().and_then(|r| r.kind.as_deref()) == Some("FleetAddonConfig")
        })
        .filter_map(|e| e.reason)
        .collect();
    assert!(reasons.iter().any(|r| r == "FleetInstalled"), "{reasons:?}");

    // Removing spec.install leaves Fleet installed; the install conditions and version go.
    let generation = env
        .set_spec(json!({"config": {"bootstrapLocalCluster": true}}))
        .await;
    let object = env.wait_ready(generation, "True").await;
    let status = object.status.as_ref().expect("status");
    assert_eq!(status.installed_version, None);
    for gone in ["RepoAdd", "RepoUpdate", "Installed", "FlagsUpdate"] {
        assert!(condition(&object, gone).is_none(), "{gone}");
    }
    assert_eq!(env.releases(), deployed("0.2.0", "2", "2"));
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follow_latest_upgrades_when_a_new_chart_appears() {
    let repo = ChartRepo::start(&["0.1.0"]).await;
    let env = Env::start(Options {
        sync_period: Duration::from_secs(1),
        ..Options::default()
    })
    .await;
    let generation = env
        .set_spec(json!({"install": {"followLatest": true, "repository": repo.url()}}))
        .await;
    let object = env.wait_ready(generation, "True").await;
    assert_eq!(installed_version(&object), Some("0.1.0"));
    repo.add_version("0.2.0");
    env.wait_for("upgrade to 0.2.0", Duration::from_secs(60), |o| {
        installed_version(o) == Some("0.2.0")
    })
    .await;
    assert_eq!(env.releases(), deployed("0.2.0", "2", "2"));
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_are_reported_and_recovered() {
    let repo = ChartRepo::start(&["0.1.0"]).await;
    let env = Env::start(Options {
        helm_timeout: Duration::from_secs(3),
        ..Options::default()
    })
    .await;
    let spec = |version: &str, marker: u32| json!({"install": {"version": version, "repository": repo.url(), "values": {"marker": marker}}});

    // A version the repository does not have.
    let generation = env.set_spec(spec("9.9.9", 0)).await;
    let object = env.wait_ready(generation, "False").await;
    let ready = assert_condition(&object, "Ready", "False");
    assert_eq!(ready.reason, "RepoUpdateFailed");
    assert_condition(&object, "RepoAdd", "True");
    let update = assert_condition(&object, "RepoUpdate", "False");
    assert!(update.message.contains("\"9.9.9\" not found"), "{update:?}");
    assert!(env.releases().is_empty());

    // Fixed by the user: installed at once.
    let generation = env.set_spec(spec("0.1.0", 0)).await;
    env.wait_ready(generation, "True").await;

    // The repository goes down: reported, retried with backoff, recovered without any change.
    repo.set_mode(RepoMode::Down);
    let generation = env.set_spec(spec("0.1.0", 1)).await;
    let object = env.wait_ready(generation, "False").await;
    let failed_at = Instant::now();
    let fetches = repo.index_fetches();
    assert_eq!(
        assert_condition(&object, "Ready", "False").reason,
        "RepoAddFailed"
    );
    let add = assert_condition(&object, "RepoAdd", "False");
    assert!(add.message.contains("cannot be reached"), "{add:?}");
    repo.set_mode(RepoMode::Up);
    env.wait_ready(generation, "True").await;
    let recovered_after = failed_at.elapsed();
    assert!(
        recovered_after >= Duration::from_secs(2),
        "retried after {recovered_after:?}: expected a backoff of about 5s"
    );
    // One fetch for the retry (plus at most one for an in-flight attempt).
    assert!(
        repo.index_fetches() - fetches <= 3,
        "fetches: {}",
        repo.index_fetches() - fetches
    );

    // A hanging repository: helm is killed after --helm-timeout and that is reported.
    repo.set_mode(RepoMode::Hang);
    let generation = env.set_spec(spec("0.1.0", 2)).await;
    let object = env.wait_ready(generation, "False").await;
    let ready = assert_condition(&object, "Ready", "False");
    assert!(ready.message.contains("timed out after 3s"), "{ready:?}");
    repo.set_mode(RepoMode::Up);
    env.wait_ready(generation, "True").await;
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_3_installs_and_helm_4_upgrades_what_it_left() {
    let repo = ChartRepo::start(&["0.1.0", "0.2.0"]).await;
    let mut env = Env::start(Options {
        helm_binary: fleet_common::helm3_bin(),
        ..Options::default()
    })
    .await;
    let spec = |version: &str| {
        json!({
            "install": {"version": version, "repository": repo.url()},
            "config": {"featureGates": {"experimentalOciStorage": false}},
        })
    };
    let generation = env.set_spec(spec("0.1.0")).await;
    env.wait_ready(generation, "True").await;
    assert_eq!(env.releases(), deployed("0.1.0", "1", "1"));
    let (extra_env, _, _) = fleet_env(&env).await;
    assert_eq!(
        extra_env,
        [
            env_entry("EXPERIMENTAL_OCI_STORAGE", "false"),
            env_entry("EXPERIMENTAL_HELM_OPS", "true"),
        ]
    );

    // CAAPF patched fleet-controller with server-side apply: its field manager owns
    // data.config, which the fleet chart renders too.
    let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), NS);
    cms.patch(
        "fleet-controller",
        &PatchParams::apply("addon-provider-fleet").force(),
        &Patch::Apply(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "fleet-controller", "namespace": NS},
            "data": {"config": "{\"apiServerURL\": \"https://caapf-was-here:6443\"}"},
        })),
    )
    .await
    .expect("CAAPF-style apply");

    // The provider now runs helm 4: it upgrades a release last written client-side by helm 3,
    // and takes data.config over from the other field manager.
    env.restart_manager(Options::default()).await;
    let generation = env.set_spec(spec("0.2.0")).await;
    let object = env.wait_ready(generation, "True").await;
    assert_eq!(installed_version(&object), Some("0.2.0"));
    assert_eq!(env.releases(), deployed("0.2.0", "2", "2"));
    let cm = cms.get("fleet-controller").await.expect("cm");
    let config = &cm.data.expect("data")["config"];
    assert!(!config.contains("caapf-was-here"), "{config}");
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_lets_a_running_helm_command_finish() {
    // A helm stand-in whose install takes a while and says when it started and finished.
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("log");
    let script = dir.path().join("helm");
    std::fs::write(
        &script,
        format!(
            r#"#!/bin/sh
case "$1" in
  version) printf v4.1.4 ;;
  show) printf 'name: %s\nversion: 0.1.0\n' "$3" ;;
  list) echo '[]' ;;
  install) echo "started $2" >> '{log}'; sleep 2; echo "finished $2" >> '{log}' ;;
esac
"#,
            log = log.display()
        ),
    )
    .expect("script");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");

    let env = Env::start(Options {
        helm_binary: script,
        ..Options::default()
    })
    .await;
    env.set_spec(
        json!({"install": {"followLatest": true, "repository": "https://charts.example.com/"}}),
    )
    .await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while !std::fs::read_to_string(&log)
        .unwrap_or_default()
        .contains("started fleet-crd")
    {
        assert!(Instant::now() < deadline, "install never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let stopping = Instant::now();
    env.stop().await;
    let log = std::fs::read_to_string(&log).expect("log");
    assert!(log.contains("finished fleet-crd"), "helm was killed: {log}");
    assert!(
        !log.contains("started fleet\n"),
        "no new helm command after shutdown: {log}"
    );
    assert!(stopping.elapsed() < Duration::from_secs(20));
}
