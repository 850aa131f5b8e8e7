//! Fleet installed and upgraded from a real OCI registry: the CNCF Distribution registry
//! (`docker-registry`) on 127.0.0.1, the test charts pushed with the real `helm push`, the
//! provider running the real helm 4 (and helm 3) against the sandbox API server.
//!
//! - a plain-HTTP registry on a loopback address works as an `http://` repository there does
//!   (helm needs `--plain-http`), with helm 4 and helm 3;
//! - a private registry (TLS with a CA the test makes, basic auth) works with the credentials
//!   and the CA from Secrets (`spec.install.credentials`, `spec.install.tlsConfig`), and what a
//!   user meets on the way (no CA, no credentials, a missing Secret, wrong credentials, an
//!   unknown version, the registry down) is reported on the FleetAddonConfig's conditions with
//!   what to change, never with a secret, and recovered from;
//! - helm 3 with basic auth over plain HTTP on loopback (helm 3 cannot reach a TLS registry on
//!   a loopback address: its registry client sends the manifest requests there over HTTP
//!   whatever the flags, as measured with helm 3.17.2).

use crate::common;
use crate::fleet_common;

use std::path::Path;
use std::time::Duration;

use caapf::api::FleetAddonConfig;
use fleet_common::registry::{PASSWORD, Registry, RegistryOptions, Tls, USER};
use fleet_common::{Env, Options, assert_condition, condition};
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

/// Where the test keeps the registry's Secrets.
const AUTH_NS: &str = "registry-auth";

/// `fleet` and `fleet-crd` deployed from the charts of `version`, at their revisions.
fn deployed(env: &Env, version: &str, revision: &str) {
    let want: Vec<(String, String, String, String)> = ["fleet", "fleet-crd"]
        .iter()
        .map(|name| {
            (
                name.to_string(),
                format!("{name}-{version}"),
                revision.to_string(),
                "deployed".to_string(),
            )
        })
        .collect();
    assert_eq!(env.releases(), want);
}

fn installed_version(object: &FleetAddonConfig) -> Option<&str> {
    object.status.as_ref()?.installed_version.as_deref()
}

/// Creates or updates Secret `name` in [`AUTH_NS`] with `data` (key → text).
async fn put_secret(env: &Env, name: &str, data: &[(&str, &str)]) {
    let namespaces: Api<Namespace> = Api::all(env.client.clone());
    if namespaces.get_opt(AUTH_NS).await.expect("get").is_none() {
        namespaces
            .create(
                &Default::default(),
                &serde_json::from_value(json!({"metadata": {"name": AUTH_NS}})).expect("ns"),
            )
            .await
            .expect("namespace");
    }
    let string_data: serde_json::Map<String, Value> = data
        .iter()
        .map(|(k, v)| (k.to_string(), json!(v)))
        .collect();
    let secrets: Api<Secret> = Api::namespaced(env.client.clone(), AUTH_NS);
    secrets
        .patch(
            name,
            &PatchParams::apply("oci-registry-test").force(),
            &Patch::Apply(json!({
                "apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": name, "namespace": AUTH_NS},
                "stringData": string_data,
            })),
        )
        .await
        .expect("secret");
}

/// Waits for `type_` to have `status` for `generation`, returning its message.
async fn condition_for(env: &Env, generation: i64, type_: &str, status: &str) -> String {
    let object = env
        .wait_for(
            &format!("{type_}={status} for generation {generation}"),
            Duration::from_secs(60),
            |o| {
                condition(o, type_).is_some_and(|c| {
                    c.status == status && c.observed_generation == Some(generation)
                })
            },
        )
        .await;
    assert_condition(&object, type_, status).message.clone()
}

/// No condition message holds the password or its encodings, and the helm home holds no file
/// with them once a reconcile is over.
fn assert_no_secret_left(env: &Env, object: &FleetAddonConfig) {
    use base64::Engine;
    let encoded = base64::engine::general_purpose::STANDARD.encode(format!("{USER}:{PASSWORD}"));
    let wrong = base64::engine::general_purpose::STANDARD.encode(format!("{USER}:wrong-password"));
    let secrets = [PASSWORD, "wrong-password", encoded.as_str(), wrong.as_str()];
    for c in &object.status.as_ref().expect("status").conditions {
        for secret in secrets {
            assert!(
                !c.message.contains(secret),
                "{} leaks: {}",
                c.type_,
                c.message
            );
        }
    }
    fn files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                files(&path, out);
            } else {
                out.push(path);
            }
        }
    }
    let mut all = Vec::new();
    files(&env.dir.path().join("helm-home"), &mut all);
    for file in all {
        let text = String::from_utf8_lossy(&std::fs::read(&file).unwrap_or_default()).into_owned();
        for secret in secrets {
            assert!(!text.contains(secret), "{} holds a secret", file.display());
        }
    }
}

/// A plain-HTTP registry on 127.0.0.1, as an air-gapped user runs one: installed from
/// `oci://127.0.0.1:<port>/charts`, then upgraded when a newer chart is pushed (and not to the
/// pre-release pushed with it).
async fn installs_and_upgrades_from_a_plain_registry(helm_binary: std::path::PathBuf) {
    let registry = Registry::start(RegistryOptions::default());
    registry.push_fleet("0.1.0");
    let env = Env::start(Options {
        helm_binary,
        sync_period: Duration::from_secs(1),
        ..Options::default()
    })
    .await;
    let generation = env
        .set_spec(json!({"install": {"followLatest": true, "repository": registry.url()}}))
        .await;
    let object = env.wait_ready(generation, "True").await;
    assert_eq!(installed_version(&object), Some("0.1.0"));
    assert!(
        assert_condition(&object, "RepoAdd", "True")
            .message
            .contains(&registry.url())
    );
    deployed(&env, "0.1.0", "1");

    registry.push_fleet("0.2.0");
    registry.push_fleet("0.3.0-rc.1");
    env.wait_for("upgrade to 0.2.0", Duration::from_secs(60), |o| {
        installed_version(o) == Some("0.2.0")
            && condition(o, "Ready").is_some_and(|c| c.status == "True")
    })
    .await;
    deployed(&env, "0.2.0", "2");

    // Pinned back down: helm pulls the older chart from the registry.
    let generation = env
        .set_spec(json!({"install": {"version": "0.1.0", "repository": registry.url()}}))
        .await;
    let object = env.wait_ready(generation, "True").await;
    assert_eq!(installed_version(&object), Some("0.1.0"));
    deployed(&env, "0.1.0", "3");
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_4_installs_and_upgrades_from_a_plain_http_registry_on_loopback() {
    installs_and_upgrades_from_a_plain_registry(fleet_common::helm_bin()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_3_installs_and_upgrades_from_a_plain_http_registry_on_loopback() {
    installs_and_upgrades_from_a_plain_registry(fleet_common::helm3_bin()).await;
}

/// A private registry: HTTPS with a certificate from the test's CA, basic auth. Every step a
/// user may take on the way, with the condition it gets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_private_registry_with_a_ca_and_credentials_from_secrets() {
    let ca = common::tls::Ca::new();
    let serving = ca.serving("registry");
    let mut registry = Registry::start(RegistryOptions {
        tls: Some(Tls {
            cert: serving.cert,
            key: serving.key,
            ca: ca.pem.clone(),
        }),
        basic_auth: true,
    });
    registry.push_fleet("0.1.0");
    registry.push_fleet("0.2.0");
    let env = Env::start(Options::default()).await;
    let url = registry.url();
    let install = |extra: Value| {
        let mut install = json!({"version": "0.1.0", "repository": url});
        for (k, v) in extra.as_object().expect("object") {
            install[k] = v.clone();
        }
        json!({"install": install})
    };
    let ca_ref = json!({"caSecret": {"name": "registry-ca", "namespace": AUTH_NS}});
    let credentials = json!({"secret": {"name": "registry-pull", "namespace": AUTH_NS}});

    // 1. As for a plain registry: on loopback without tlsConfig, helm speaks plain HTTP to a
    // registry that serves HTTPS.
    let generation = env.set_spec(install(json!({}))).await;
    let message = condition_for(&env, generation, "RepoAdd", "False").await;
    assert!(
        message.contains("400") && message.contains("unless spec.install.tlsConfig is set"),
        "{message}"
    );

    // 2. The CA Secret does not exist yet.
    let generation = env.set_spec(install(json!({"tlsConfig": ca_ref}))).await;
    let message = condition_for(&env, generation, "RepoAdd", "False").await;
    assert!(
        message.contains(
            "spec.install.tlsConfig.caSecret: Secret registry-auth/registry-ca not found"
        ),
        "{message}"
    );

    // 3. The CA is there (and found when it appears), but no credentials.
    put_secret(&env, "registry-ca", &[("ca.crt", &ca.pem)]).await;
    let message = env
        .wait_for("the CA is used", Duration::from_secs(60), |o| {
            condition(o, "RepoAdd").is_some_and(|c| {
                c.observed_generation == Some(generation) && c.message.contains("needs credentials")
            })
        })
        .await;
    let message = &assert_condition(&message, "RepoAdd", "False").message;
    assert!(
        message.contains("the registry needs credentials: set spec.install.credentials"),
        "{message}"
    );

    // 4. Wrong credentials.
    put_secret(
        &env,
        "registry-pull",
        &[("config.json", &registry.config_json(USER, "wrong-password"))],
    )
    .await;
    let generation = env
        .set_spec(install(
            json!({"tlsConfig": ca_ref, "credentials": credentials}),
        ))
        .await;
    let message = condition_for(&env, generation, "RepoAdd", "False").await;
    assert!(
        message.contains("401")
            && message.contains(
                "the registry refused the credentials of spec.install.credentials (Secret registry-auth/registry-pull, key \"config.json\")"
            ),
        "{message}"
    );
    let object = env.api().get("fleet-addon-config").await.expect("get");
    assert_eq!(
        assert_condition(&object, "Ready", "False").reason,
        "RepoAddFailed"
    );
    assert_no_secret_left(&env, &object);
    assert!(env.releases().is_empty());

    // 5. The user fixes the Secret: installed without a spec change.
    put_secret(
        &env,
        "registry-pull",
        &[("config.json", &registry.config_json(USER, PASSWORD))],
    )
    .await;
    let object = env.wait_ready(generation, "True").await;
    assert_eq!(installed_version(&object), Some("0.1.0"));
    deployed(&env, "0.1.0", "1");
    assert_no_secret_left(&env, &object);

    // 6. A version the registry does not have.
    let spec = |version: &str| json!({"install": {"version": version, "repository": url, "tlsConfig": ca_ref, "credentials": credentials}});
    let generation = env.set_spec(spec("9.9.9")).await;
    let message = condition_for(&env, generation, "RepoUpdate", "False").await;
    assert!(
        message.contains("9.9.9") && message.contains("not found"),
        "{message}"
    );
    let object = env.api().get("fleet-addon-config").await.expect("get");
    assert_condition(&object, "RepoAdd", "True");
    assert_eq!(
        assert_condition(&object, "Ready", "False").reason,
        "RepoUpdateFailed"
    );

    // 7. The registry goes down, then comes back.
    registry.stop();
    let generation = env.set_spec(spec("0.2.0")).await;
    let message = condition_for(&env, generation, "RepoAdd", "False").await;
    assert!(message.contains("connection refused"), "{message}");
    registry.restart();
    // 8. Upgraded from the private registry once it is back.
    let object = env.wait_ready(generation, "True").await;
    assert_eq!(installed_version(&object), Some("0.2.0"));
    deployed(&env, "0.2.0", "2");

    // 9. A Secret that is not a registry configuration: said without showing it.
    put_secret(
        &env,
        "registry-pull",
        &[("config.json", "user:wrong-password")],
    )
    .await;
    let generation = env.set_spec(spec("0.1.0")).await;
    let message = condition_for(&env, generation, "RepoAdd", "False").await;
    assert!(
        message.contains("spec.install.credentials: key \"config.json\" of Secret registry-auth/registry-pull is not JSON"),
        "{message}"
    );
    let object = env.api().get("fleet-addon-config").await.expect("get");
    assert_no_secret_left(&env, &object);
    env.stop().await;
}

/// helm 3 with basic auth on a plain-HTTP registry on loopback: the credentials Secret under
/// another key (`.dockerconfigjson`, as in a `kubernetes.io/dockerconfigjson` Secret).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_3_uses_the_credentials_secret() {
    let registry = Registry::start(RegistryOptions {
        tls: None,
        basic_auth: true,
    });
    registry.push_fleet("0.1.0");
    let env = Env::start(Options {
        helm_binary: fleet_common::helm3_bin(),
        ..Options::default()
    })
    .await;
    let spec = json!({"install": {"followLatest": true, "repository": registry.url(),
        "credentials": {"secret": {"name": "pull", "namespace": AUTH_NS}, "key": ".dockerconfigjson"}}});
    put_secret(
        &env,
        "pull",
        &[(
            ".dockerconfigjson",
            &registry.config_json(USER, "wrong-password"),
        )],
    )
    .await;
    let generation = env.set_spec(spec).await;
    let message = condition_for(&env, generation, "RepoAdd", "False").await;
    assert!(
        message.contains("401") && message.contains("refused the credentials"),
        "{message}"
    );
    put_secret(
        &env,
        "pull",
        &[(".dockerconfigjson", &registry.config_json(USER, PASSWORD))],
    )
    .await;
    let object = env.wait_ready(generation, "True").await;
    assert_eq!(installed_version(&object), Some("0.1.0"));
    deployed(&env, "0.1.0", "1");
    assert_no_secret_left(&env, &object);
    env.stop().await;
}

/// An `https://`-style chart repository (served on 127.0.0.1) asking for basic auth: the user
/// and password come from a `kubernetes.io/basic-auth` Secret named by
/// `spec.install.credentials`; helm gets the password on its standard input (`helm repo add
/// --password-stdin` into a private repository config), so no helm process's argv, no log line
/// at trace level, no condition and no Event holds it; a wrong password is reported with the
/// Secret to fix, and a URL with a password is refused naming `spec.install.credentials`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chart_repository_basic_auth_never_reaches_argv_logs_status_or_events() {
    const SECRET_PASSWORD: &str = "repo-pw-7f3a9c";
    const WRONG: &str = "wrong-pw-5d1e2b";
    let repo =
        fleet_common::ChartRepo::start_with_auth(&["0.1.0"], Some((USER, SECRET_PASSWORD))).await;
    // A helm that writes its argv to a file before running the real one.
    let dir = tempfile::tempdir().expect("tempdir");
    let argv_file = dir.path().join("argv");
    let wrapper = dir.path().join("helm");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nprintf '%s\\n' \"$*\" >> '{}'\nexec '{}' \"$@\"\n",
            argv_file.display(),
            fleet_common::helm_bin().display()
        ),
    )
    .expect("wrapper");
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    let env = Env::start(Options {
        helm_binary: wrapper,
        process_args: Some(vec!["--v=5".to_string()]),
        ..Options::default()
    })
    .await;
    put_secret(&env, "charts", &[("username", USER), ("password", WRONG)]).await;
    let spec = |repository: String| {
        json!({"install": {"version": "0.1.0", "repository": repository,
            "credentials": {"secret": {"name": "charts", "namespace": AUTH_NS}}}})
    };

    // A wrong password: the Secret to fix is named.
    let generation = env.set_spec(spec(repo.url())).await;
    let message = condition_for(&env, generation, "RepoAdd", "False").await;
    assert!(
        message.contains(&format!(
            "the repository refused the user and password of spec.install.credentials (Secret {AUTH_NS}/charts"
        )),
        "{message}"
    );
    // Fixed in the Secret: installed.
    put_secret(
        &env,
        "charts",
        &[("username", USER), ("password", SECRET_PASSWORD)],
    )
    .await;
    let object = env.wait_ready(generation, "True").await;
    assert_eq!(installed_version(&object), Some("0.1.0"));
    deployed(&env, "0.1.0", "1");

    // The password in the URL instead: refused, naming the Secret-based field.
    let with_password = repo
        .url()
        .replace("http://", &format!("http://{USER}:{SECRET_PASSWORD}@"));
    let generation = env.set_spec(spec(with_password)).await;
    let object = env.wait_ready(generation, "False").await;
    let ready = assert_condition(&object, "ConfigValid", "False");
    assert!(
        ready
            .message
            .contains("spec.install.repository: user information in the URL is refused")
            && ready
                .message
                .contains("name it in spec.install.credentials"),
        "{ready:?}"
    );

    let argv = std::fs::read_to_string(&argv_file).expect("helm ran");
    assert!(
        argv.contains("repo add caapf") && argv.contains("--password-stdin"),
        "{argv}"
    );
    let status = serde_json::to_string(&object.status).expect("status");
    let mut events = String::new();
    for path in ["/api/v1/events", "/apis/events.k8s.io/v1/events"] {
        events += &env
            .client
            .request_text(http::Request::get(path).body(Vec::new()).expect("request"))
            .await
            .expect("events");
    }
    let log = env.log();
    assert!(
        log.contains("running helm"),
        "trace log without helm's argv"
    );
    for (what, text) in [
        ("argv", &argv),
        ("status", &status),
        ("Events", &events),
        ("log", &log),
    ] {
        for secret in [SECRET_PASSWORD, WRONG] {
            assert!(!text.contains(secret), "{what} holds a password: {text}");
        }
    }
    assert_no_secret_left(&env, &object);
    env.stop().await;
}

/// A plain-HTTP registry that is not on loopback for the provider (a registry Service inside
/// the cluster, `oci://registry.kube-system.svc:5000`) needs the explicit opt-in
/// `tlsConfig.insecurePlainHTTP`: a `tlsConfig` alone says the registry serves HTTPS (refused
/// by this plain registry, with the opt-in named), the opt-in installs with helm `--plain-http`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn insecure_plain_http_is_an_explicit_opt_in() {
    let registry = Registry::start(RegistryOptions::default());
    registry.push_fleet("0.1.0");
    let env = Env::start(Options::default()).await;
    let spec = |tls: Value| json!({"install": {"version": "0.1.0", "repository": registry.url(), "tlsConfig": tls}});
    let generation = env.set_spec(spec(json!({}))).await;
    let message = condition_for(&env, generation, "RepoAdd", "False").await;
    assert!(
        message.contains("set spec.install.tlsConfig.insecurePlainHTTP: true"),
        "{message}"
    );
    let generation = env.set_spec(spec(json!({"insecurePlainHTTP": true}))).await;
    let object = env.wait_ready(generation, "True").await;
    assert_eq!(installed_version(&object), Some("0.1.0"));
    deployed(&env, "0.1.0", "1");
    env.stop().await;
}
