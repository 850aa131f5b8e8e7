//! The `caapf` binary as users and the CAPI Operator run it.

use std::path::Path;
use std::process::{Command, Output};

fn caapf(args: &[&str], kubeconfig: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_caapf"))
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .env_remove("RUST_LOG")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .output()
        .expect("caapf runs")
}

/// A kubeconfig whose server refuses connections (port 1 on loopback).
fn unreachable_kubeconfig(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("kubeconfig");
    std::fs::write(
        &path,
        r#"apiVersion: v1
kind: Config
clusters:
- name: nowhere
  cluster: {server: "http://127.0.0.1:1"}
contexts:
- name: nowhere
  context: {cluster: nowhere, user: nobody}
current-context: nowhere
users:
- name: nobody
  user: {}
"#,
    )
    .expect("write kubeconfig");
    path
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

#[test]
fn accepts_every_operator_flag_and_fails_clearly_without_a_cluster() {
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = unreachable_kubeconfig(dir.path());
    // The flags the CAPI Operator renders onto the manager container, in both forms, plus one
    // it might add in a later release.
    let args = [
        "--leader-elect=false",
        "--leader-elect-lease-duration",
        "15s",
        "--leader-elect-renew-deadline=10s",
        "--leader-elect-retry-period",
        "2s",
        "--metrics-bind-addr=:8080",
        "--diagnostics-address",
        ":8443",
        "--insecure-diagnostics",
        "--health-addr=:9440",
        "--webhook-port",
        "9443",
        "--webhook-cert-dir=/tmp/k8s-webhook-server/serving-certs",
        "--sync-period",
        "10m",
        "--namespace=",
        "--profiler-address",
        "localhost:6060",
        "--v=2",
        "--feature-gates",
        "MachinePool=true",
        "--kube-api-qps=20",
        "--kube-api-burst",
        "30",
        "--some-future-operator-flag=x",
    ];
    let output = caapf(&args, &kubeconfig);
    let all = text(&output);
    assert_eq!(output.status.code(), Some(1), "{all}");
    assert!(!all.contains("unexpected argument"), "{all}");
    assert!(all.contains("127.0.0.1:1"), "names the server: {all}");
    assert!(all.contains("not reachable"), "{all}");
    assert!(
        all.contains("ignoring unknown flag") && all.contains("--some-future-operator-flag=x"),
        "{all}"
    );
    assert!(!all.contains("panicked"), "{all}");
}

#[test]
fn run_subcommand_and_json_logs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = unreachable_kubeconfig(dir.path());
    let output = caapf(&["run", "--log-format=json"], &kubeconfig);
    assert_eq!(output.status.code(), Some(1), "{}", text(&output));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout
        .lines()
        .find(|l| l.contains("manager stopped"))
        .unwrap_or_else(|| panic!("no JSON error line in {stdout}"));
    let json: serde_json::Value = serde_json::from_str(line).expect("log lines are JSON");
    assert_eq!(json["level"], "ERROR");
}

#[test]
fn invalid_flag_value_is_a_usage_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = unreachable_kubeconfig(dir.path());
    let output = caapf(&["--sync-period=often"], &kubeconfig);
    assert_eq!(output.status.code(), Some(2));
    assert!(text(&output).contains("not a duration"));
}

#[test]
fn crd_subcommand_prints_the_checked_in_manifest() {
    let dir = tempfile::tempdir().expect("tempdir");
    let output = caapf(&["crd"], &unreachable_kubeconfig(dir.path()));
    assert!(output.status.success());
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join(caapf::api::CRD_MANIFEST_PATH);
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        std::fs::read_to_string(manifest).expect("manifest")
    );
}

/// Against an API server without Cluster API's `v1beta2` (Cluster API v1.10 and earlier), the
/// manager stops at start-up naming the missing API and the release it needs.
#[tokio::test]
async fn a_management_cluster_without_cluster_api_v1beta2_fails_at_start_up() {
    use kube_sandbox::{CrdSet, Sandbox, SandboxOptions};
    let sandbox = Sandbox::start_with(SandboxOptions {
        crds: vec![CrdSet::Fleet, CrdSet::Provider],
        ..SandboxOptions::default()
    })
    .await
    .expect("sandbox");
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = dir.path().join("kubeconfig");
    sandbox.write_kubeconfig(&kubeconfig).expect("kubeconfig");
    let output = tokio::task::spawn_blocking(move || {
        caapf(
            &["--health-probe-bind-address=0", "--metrics-bind-address=0"],
            &kubeconfig,
        )
    })
    .await
    .expect("caapf ran");
    let all = text(&output);
    assert_eq!(output.status.code(), Some(1), "{all}");
    assert!(
        all.contains("does not serve cluster.x-k8s.io/v1beta2") && all.contains("v1.11 or later"),
        "{all}"
    );
}

/// `--kubeconfig` chooses the management cluster, as in controller-runtime managers: with
/// `KUBECONFIG` pointing at an unreachable server, the manager reaches the sandbox named by the
/// flag (and stops there, the sandbox serving no Cluster API v1beta2).
#[tokio::test]
async fn the_kubeconfig_flag_wins_over_the_environment() {
    use kube_sandbox::{CrdSet, Sandbox, SandboxOptions};
    let sandbox = Sandbox::start_with(SandboxOptions {
        crds: vec![CrdSet::Fleet, CrdSet::Provider],
        ..SandboxOptions::default()
    })
    .await
    .expect("sandbox");
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = dir.path().join("sandbox-kubeconfig");
    sandbox.write_kubeconfig(&kubeconfig).expect("kubeconfig");
    let unreachable = unreachable_kubeconfig(dir.path());
    let flag = format!("--kubeconfig={}", kubeconfig.display());
    let output = tokio::task::spawn_blocking(move || {
        caapf(
            &[
                "--health-probe-bind-address=0",
                "--metrics-bind-address=0",
                flag.as_str(),
            ],
            &unreachable,
        )
    })
    .await
    .expect("caapf ran");
    let all = text(&output);
    assert_eq!(output.status.code(), Some(1), "{all}");
    assert!(
        all.contains("does not serve cluster.x-k8s.io/v1beta2"),
        "it reached the sandbox: {all}"
    );
    assert!(!all.contains("ignored"), "the flag is not ignored: {all}");
}

const ROLLOUT_CONFIG: &str = r#"apiVersion: addons.cluster.x-k8s.io/v1alpha1
kind: FleetAddonConfig
metadata: {name: fleet-addon-config}
spec:
  cluster:
    rollout: {waveVariable: wave, waves: [canary, early, late], soak: 30m}
"#;

/// Runs `caapf rollout-strategy -f` on `config` (no server: the kubeconfig's refuses).
fn rollout_strategy_of(dir: &Path, config: &str) -> Output {
    let file = dir.join("config.yaml");
    std::fs::write(&file, config).expect("write config");
    let file = file.display().to_string();
    caapf(
        &["rollout-strategy", "-f", &file],
        &unreachable_kubeconfig(dir),
    )
}

/// `caapf rollout-strategy -f`: the printed YAML is a `rolloutStrategy` Fleet's walk plays with
/// the canary wave first; no rollout or an invalid one fails naming the field.
#[test]
fn rollout_strategy_prints_the_waves_from_a_file() {
    use caapf::model::rollout::walk::{Deployment, Strategy, Target, walk};
    let dir = tempfile::tempdir().expect("tempdir");
    let out = rollout_strategy_of(dir.path(), ROLLOUT_CONFIG);
    assert!(out.status.success(), "{}", text(&out));
    let yaml: serde_json::Value = serde_yaml::from_slice(&out.stdout).expect("the output is YAML");
    let strategy = Strategy::from_json(&yaml["rolloutStrategy"]).expect("a rolloutStrategy");
    let names: Vec<&str> = strategy.partitions.iter().map(|p| &*p.name).collect();
    assert_eq!(names, ["canary", "early", "late", "other", "held"]);
    let wave = caapf::names::ROLLOUT_WAVE_LABEL;
    let mut targets: Vec<Target> = ["late", "canary", "early", "canary", "early", "late"]
        .iter()
        .map(|w| Target {
            labels: [(wave.to_string(), w.to_string())].into(),
            deployment: Some(Deployment {
                deployment: "v1".into(),
                staged: "v1".into(),
                applied: "v1".into(),
                ready: true,
            }),
            ..Target::default()
        })
        .collect();
    let status = walk(&strategy, &mut targets, "v2").expect("walk");
    let promoted: Vec<bool> = (targets.iter())
        .map(|t| t.deployment.as_ref().is_some_and(|d| d.deployment == "v2"))
        .collect();
    assert_eq!(promoted, [false, true, false, false, false, false]);
    assert_eq!((status[0].count, status[0].max_unavailable), (2, 1));

    for (config, want) in [
        (
            ROLLOUT_CONFIG.replace(
                "    rollout: {waveVariable: wave, waves: [canary, early, late], soak: 30m}\n",
                "    {}\n",
            ),
            "spec.cluster.rollout is not set",
        ),
        (
            ROLLOUT_CONFIG.replace("early, late", "Early, late"),
            "spec.cluster.rollout.waves[1]: ",
        ),
    ] {
        let out = rollout_strategy_of(dir.path(), &config);
        assert_eq!(out.status.code(), Some(1), "{}", text(&out));
        assert!(out.stdout.is_empty());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(want), "{want}: {stderr}");
    }
}

/// `caapf rollout-strategy` reads the cluster of the current kubeconfig: none there fails naming
/// `spec.cluster.rollout`; once there, it prints what `-f` prints for the same object.
#[tokio::test]
async fn rollout_strategy_reads_the_cluster_of_the_kubeconfig() {
    use kube_sandbox::{CrdSet, Sandbox, SandboxOptions};
    let sandbox = Sandbox::start_with(SandboxOptions {
        crds: vec![CrdSet::Fleet, CrdSet::Provider],
        ..SandboxOptions::default()
    })
    .await
    .expect("sandbox");
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = dir.path().join("sandbox-kubeconfig");
    sandbox.write_kubeconfig(&kubeconfig).expect("kubeconfig");
    let run = |kubeconfig: std::path::PathBuf| {
        tokio::task::spawn_blocking(move || caapf(&["rollout-strategy"], &kubeconfig))
    };
    let out = run(kubeconfig.clone()).await.expect("caapf ran");
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("no FleetAddonConfig: spec.cluster.rollout is not set"),
        "{stderr}"
    );

    let config: caapf::api::FleetAddonConfig = serde_yaml::from_str(ROLLOUT_CONFIG).unwrap();
    let api = kube::Api::<caapf::api::FleetAddonConfig>::all(sandbox.client());
    api.create(&Default::default(), &config)
        .await
        .expect("create");
    let out = run(kubeconfig).await.expect("caapf ran");
    assert!(out.status.success(), "{}", text(&out));
    let from_file = rollout_strategy_of(dir.path(), ROLLOUT_CONFIG);
    assert_eq!(out.stdout, from_file.stdout);
}
