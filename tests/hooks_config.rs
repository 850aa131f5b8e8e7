//! The kustomize pieces of the runtime extension agree with each other and with the server:
//! Service, Certificate, ExtensionConfig, manager patch, handler names in the docs.

use std::path::Path;

use caapf::hooks::handlers::{
    Catalog, DISCOVER_VARIABLES, GENERATE_PATCHES, HOOKS, UPGRADE_STEPS_PREFIX,
};
use caapf::hooks::server::{Route, route};
use serde_json::Value;

fn documents(relative: &str) -> Vec<Value> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(relative);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_yaml::Deserializer::from_str(&text)
        .map(|doc| <Value as serde::Deserialize>::deserialize(doc).expect("yaml"))
        .collect()
}

fn one(relative: &str, kind: &str) -> Value {
    documents(relative)
        .into_iter()
        .find(|d| d["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind} in {relative}"))
}

#[test]
fn service_certificate_and_extension_config_agree() {
    let service = one("config/runtime-extension/service.yaml", "Service");
    let certificate = one("config/certmanager/certificate.yaml", "Certificate");
    let extension = one(
        "config/extensionconfig/extensionconfig.yaml",
        "ExtensionConfig",
    );
    let patch = one(
        "config/runtime-extension/manager_webhook_patch.yaml",
        "Deployment",
    );

    let (name, ns) = (
        service["metadata"]["name"].as_str().expect("name"),
        service["metadata"]["namespace"]
            .as_str()
            .expect("namespace"),
    );
    assert!(name.starts_with("caapf-") && ns == "caapf-system");
    // v1beta2: served from Cluster API v1.11 (our minimum), v1alpha1 deprecated from v1.12
    // (cluster-api v1.12.11 `api/runtime/v1alpha1/extensionconfig_types.go`).
    assert_eq!(extension["apiVersion"], "runtime.cluster.x-k8s.io/v1beta2");
    assert_eq!(extension["spec"]["clientConfig"]["service"]["name"], name);
    assert_eq!(
        extension["spec"]["clientConfig"]["service"]["namespace"],
        ns
    );
    assert_eq!(
        extension["spec"]["clientConfig"]["service"]["port"],
        service["spec"]["ports"][0]["port"]
    );
    assert!(extension["spec"]["namespaceSelector"].is_object());

    let dns: Vec<&str> = certificate["spec"]["dnsNames"]
        .as_array()
        .expect("dnsNames")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(
        dns,
        [
            format!("{name}.{ns}.svc"),
            format!("{name}.{ns}.svc.cluster.local")
        ]
    );
    let secret = certificate["spec"]["secretName"]
        .as_str()
        .expect("secretName");
    assert_eq!(
        extension["metadata"]["annotations"]["runtime.cluster.x-k8s.io/inject-ca-from-secret"],
        format!("{ns}/{secret}")
    );

    let container = &patch["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["name"], "manager");
    let port = &container["ports"][0];
    assert_eq!(port["name"], service["spec"]["ports"][0]["targetPort"]);
    assert_eq!(
        port["containerPort"],
        caapf::cli::ManagerFlags::default().webhook_port
    );
    assert_eq!(
        container["volumeMounts"][0]["mountPath"],
        caapf::cli::ManagerFlags::default().webhook_cert_dir
    );
    assert_eq!(
        patch["spec"]["template"]["spec"]["volumes"][0]["secret"]["secretName"],
        secret
    );
}

#[test]
fn the_guide_references_the_served_handlers() {
    let guide = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/runtime-extension.md"),
    )
    .expect("guide");
    let extension = one(
        "config/extensionconfig/extensionconfig.yaml",
        "ExtensionConfig",
    );
    let config_name = extension["metadata"]["name"].as_str().expect("name");
    for field in [
        "generatePatchesExtension",
        "generateExtension",
        "discoverVariablesExtension",
    ] {
        assert!(guide.contains(field), "{field}");
    }
    assert!(guide.contains(&format!("{GENERATE_PATCHES}.{config_name}")));
    assert!(guide.contains(&format!("{DISCOVER_VARIABLES}.{config_name}")));
    for handler in HOOKS.iter().filter_map(|spec| spec.advertised) {
        assert!(
            guide.contains(&format!("`{}`", handler.name)),
            "{}",
            handler.name
        );
    }
}

/// The second ExtensionConfig (Cluster API v1.12+) points at the same server as the first, at the
/// path whose discovery advertises the hooks only v1.12 knows, and names no hook twice.
#[test]
fn the_upgrade_steps_extension_config_reaches_its_own_discovery() {
    let base = one(
        "config/extensionconfig/extensionconfig.yaml",
        "ExtensionConfig",
    );
    let steps = one(
        "config/extensionconfig/upgrade-steps/extensionconfig.yaml",
        "ExtensionConfig",
    );
    let service = &steps["spec"]["clientConfig"]["service"];
    for field in ["name", "namespace", "port"] {
        assert_eq!(
            service[field], base["spec"]["clientConfig"]["service"][field],
            "{field}"
        );
    }
    assert_eq!(steps["apiVersion"], "runtime.cluster.x-k8s.io/v1beta2");
    assert_eq!(base["spec"]["clientConfig"]["service"]["path"], Value::Null);
    assert_eq!(service["path"], UPGRADE_STEPS_PREFIX);
    assert_eq!(
        steps["metadata"]["annotations"],
        base["metadata"]["annotations"]
    );
    assert_ne!(steps["metadata"]["name"], base["metadata"]["name"]);
    // Cluster API calls <service.path>/hooks.runtime.cluster.x-k8s.io/v1alpha1/discovery
    // (`urlForExtension`, cluster-api v1.12.11 internal/runtime/client/client.go).
    let discovery = format!(
        "{}/hooks.runtime.cluster.x-k8s.io/v1alpha1/discovery",
        service["path"].as_str().expect("path")
    );
    assert!(matches!(
        route(&discovery),
        Route::Hook {
            catalog: Catalog::UpgradeSteps,
            ..
        }
    ));
    for spec in HOOKS.iter().filter(|spec| spec.advertised.is_some()) {
        match spec.catalog {
            Catalog::UpgradeSteps => assert!(spec.path().starts_with(UPGRADE_STEPS_PREFIX)),
            Catalog::Base => assert!(!spec.path().starts_with(UPGRADE_STEPS_PREFIX)),
        }
    }
}
