//! The helm runner with scripted stand-ins for the helm binary: timeouts kill the process,
//! exit codes are checked, stderr is scrubbed, values never reach the command line, helm 3 and
//! helm 4 get their own flags, and only one helm runs at a time.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use caapf::Error;
use caapf::helm::argv::{ChartSource, Operation};
use caapf::helm::{Helm, HelmSettings, Release};
use caapf::metrics::Metrics;

/// Writes an executable shell script standing in for helm. `$LOG` is a file next to it.
fn fake_helm(dir: &Path, body: &str) -> PathBuf {
    let path = dir.join("helm");
    let log = dir.join("log");
    std::fs::write(
        &path,
        format!("#!/bin/sh\nLOG='{}'\n{body}\n", log.display()),
    )
    .expect("script");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    path
}

fn runner(binary: &Path, home: &Path, timeout: Duration) -> Helm {
    Helm::new(
        HelmSettings {
            binary: binary.display().to_string(),
            kubeconfig: Some(home.join("kubeconfig")),
            home: Some(home.join("helm-home")),
            timeout,
        },
        Arc::new(Metrics::new()),
    )
    .expect("runner")
}

fn log(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("log")).unwrap_or_default()
}

/// Whether a process is gone (or a zombie waiting to be reaped).
fn gone(pid: &str) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z')),
    }
}

#[tokio::test]
async fn a_hanging_helm_is_killed_after_the_timeout() {
    let dir = tempfile::tempdir().expect("tempdir");
    let script = fake_helm(dir.path(), "echo $$ > \"$LOG\"\nexec sleep 60");
    let helm = runner(&script, dir.path(), Duration::from_millis(500));
    let started = Instant::now();
    let err = helm
        .list("cattle-fleet-system", &["fleet"])
        .await
        .expect_err("must time out");
    assert!(matches!(err, Error::Timeout { .. }), "{err}");
    assert_eq!(err.to_string(), "helm list timed out after 500ms");
    assert!(started.elapsed() < Duration::from_secs(10));
    let pid = log(dir.path()).trim().to_string();
    assert!(!pid.is_empty());
    let deadline = Instant::now() + Duration::from_secs(10);
    while !gone(&pid) {
        assert!(Instant::now() < deadline, "helm (pid {pid}) still running");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn exit_codes_are_checked_and_stderr_scrubbed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let script = fake_helm(
        dir.path(),
        "echo 'level=WARN msg=\"noise\"' >&2\necho 'Error: INSTALLATION FAILED: Get \"https://admin:hunter2@charts.example.com/index.yaml\": token=abc123' >&2\nexit 1",
    );
    let helm = runner(&script, dir.path(), Duration::from_secs(10));
    let err = helm
        .list("cattle-fleet-system", &["fleet"])
        .await
        .expect_err("exit 1 is a failure");
    let message = err.to_string();
    assert_eq!(
        message,
        "helm list: INSTALLATION FAILED: Get \"https://<redacted>@charts.example.com/index.yaml\": token=<redacted>"
    );

    // A failure without stderr still says what happened.
    let script = fake_helm(dir.path(), "exit 3");
    let helm = runner(&script, dir.path(), Duration::from_secs(10));
    let err = helm.list("ns", &["fleet"]).await.expect_err("exit 3");
    assert!(err.to_string().contains("exit status: 3"), "{err}");

    // A binary that does not exist.
    let helm = runner(
        Path::new("/nonexistent/helm"),
        dir.path(),
        Duration::from_secs(10),
    );
    let err = helm
        .list("ns", &["fleet"])
        .await
        .expect_err("missing binary");
    assert!(
        err.to_string()
            .contains("cannot run helm binary \"/nonexistent/helm\""),
        "{err}"
    );
}

/// A helm stand-in that reports a version, records every argv, and copies the values file it
/// is given (with its permissions).
fn recording_helm(dir: &Path, version: &str) -> PathBuf {
    fake_helm(
        dir,
        &format!(
            r#"echo "$@" >> "$LOG"
if [ "$1" = version ]; then printf '{version}'; exit 0; fi
echo "KUBECONFIG=$KUBECONFIG HELM_CACHE_HOME=$HELM_CACHE_HOME" >> "$LOG"
prev=""
for arg in "$@"; do
  if [ "$prev" = "--values" ]; then
    cp "$arg" "$LOG.values"
    stat -c '%a' "$arg" > "$LOG.mode"
    stat -c '%a' "$(dirname "$arg")" > "$LOG.dirmode"
    echo "$arg" > "$LOG.path"
  fi
  prev="$arg"
done
exit 0"#
        ),
    )
}

#[tokio::test]
async fn values_go_through_a_private_file_never_the_command_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let script = recording_helm(dir.path(), "v3.17.0");
    let helm = runner(&script, dir.path(), Duration::from_secs(10));
    let values: serde_json::Map<String, serde_json::Value> = serde_json::from_str(
        r#"{"apiServerCA": "-----BEGIN CERTIFICATE-----\nTOPSECRET\n-----END CERTIFICATE-----\n", "apiServerURL": "https://10.0.0.1:6443"}"#,
    )
    .expect("values");
    let source = ChartSource::parse("https://charts.example.com/");
    let release = Release {
        name: "fleet",
        chart: "fleet",
        source: &source,
        namespace: "cattle-fleet-system",
    };
    helm.deploy(Operation::Install, &release, "0.13.1", Some(&values))
        .await
        .expect("install");
    let recorded = log(dir.path());
    assert!(!recorded.contains("TOPSECRET"), "{recorded}");
    assert!(!recorded.contains("10.0.0.1"), "{recorded}");
    assert!(
        recorded.contains(&format!(
            "KUBECONFIG={} HELM_CACHE_HOME={}",
            dir.path().join("kubeconfig").display(),
            dir.path().join("helm-home/cache").display()
        )),
        "{recorded}"
    );
    let read = |suffix: &str| {
        std::fs::read_to_string(dir.path().join(format!("log{suffix}")))
            .unwrap_or_else(|e| panic!("log{suffix}: {e}"))
    };
    let copied: serde_json::Value = serde_json::from_str(&read(".values")).expect("json");
    assert_eq!(serde_json::Value::Object(values), copied);
    assert_eq!(read(".mode").trim(), "600");
    assert_eq!(read(".dirmode").trim(), "700");
    let path = read(".path");
    assert!(
        !Path::new(path.trim()).exists(),
        "values file removed after helm ran"
    );
}

#[tokio::test]
async fn helm_3_and_helm_4_get_their_own_flags() {
    for (version, install_flags, upgrade_flags) in [
        ("v3.17.0", "--atomic", "--reset-values"),
        (
            "v4.1.4",
            "--rollback-on-failure",
            "--rollback-on-failure --server-side=true --force-conflicts",
        ),
    ] {
        let dir = tempfile::tempdir().expect("tempdir");
        let script = recording_helm(dir.path(), version);
        let helm = runner(&script, dir.path(), Duration::from_secs(10));
        let source = ChartSource::parse("oci://registry.example.com/charts");
        let release = Release {
            name: "fleet-crd",
            chart: "fleet-crd",
            source: &source,
            namespace: "ns",
        };
        for operation in [Operation::Install, Operation::Upgrade] {
            helm.deploy(operation, &release, "0.2.0", None)
                .await
                .expect("deploy");
        }
        let recorded = log(dir.path());
        let lines: Vec<&str> = recorded
            .lines()
            .filter(|l| !l.starts_with("KUBECONFIG"))
            .collect();
        // The version is asked once and remembered.
        assert_eq!(
            lines.iter().filter(|l| l.starts_with("version")).count(),
            1,
            "{recorded}"
        );
        let install = lines
            .iter()
            .find(|l| l.starts_with("install"))
            .expect("install");
        let upgrade = lines
            .iter()
            .find(|l| l.starts_with("upgrade"))
            .expect("upgrade");
        assert!(install.starts_with("install fleet-crd oci://registry.example.com/charts/fleet-crd --namespace ns --version 0.2.0 --create-namespace --wait --timeout"), "{install}");
        assert!(install.ends_with(install_flags), "{version}: {install}");
        assert!(upgrade.contains(upgrade_flags), "{version}: {upgrade}");
        assert!(!install.contains("--values"), "no values for fleet-crd");
        if version.starts_with("v3") {
            assert!(
                !upgrade.contains("--force-conflicts")
                    && !upgrade.contains("--rollback-on-failure")
            );
        } else {
            assert!(!install.contains("--force-conflicts") && !upgrade.contains("--atomic"));
        }
    }
}

#[tokio::test]
async fn one_helm_at_a_time_in_the_process() {
    let dir = tempfile::tempdir().expect("tempdir");
    let lock = dir.path().join("running");
    let script = fake_helm(
        dir.path(),
        &format!(
            "if ! mkdir '{lock}' 2>/dev/null; then echo overlap >> \"$LOG\"; fi\nsleep 0.2\nrmdir '{lock}'\necho done >> \"$LOG\"\necho '[]'",
            lock = lock.display()
        ),
    );
    // Two runners, as two controllers would have: the lock is process-wide.
    let a = runner(&script, dir.path(), Duration::from_secs(10));
    let b = runner(&script, dir.path(), Duration::from_secs(10));
    let (r1, r2, r3, r4) = tokio::join!(
        a.list("ns", &["fleet"]),
        b.list("ns", &["fleet"]),
        a.list("ns", &["fleet"]),
        b.list("ns", &["fleet"]),
    );
    for r in [r1, r2, r3, r4] {
        assert!(r.expect("list").is_empty());
    }
    let recorded = log(dir.path());
    assert_eq!(recorded.lines().filter(|l| *l == "done").count(), 4);
    assert!(!recorded.contains("overlap"), "{recorded}");
}
