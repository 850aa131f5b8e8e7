//! What cannot run here (no container engine, no Tilt) is checked statically: the Dockerfile
//! agrees with the binary's defaults and pins the helm the tests run; tilt-provider.yaml follows CAPI's Tilt
//! contract for a non-Go provider; the Tiltfile builds the image the manifests name and its
//! variable substitution renders config/default as clusterctl would.

use crate::common;

use std::collections::BTreeSet;
use std::process::Command;

use caapf::cli::ManagerFlags;
use common::render::{documents, find, kustomize_text, root};
use serde_json::Value;

fn read(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Dockerfile instructions with continuation lines joined.
fn instructions(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with('#') || (trimmed.is_empty() && current.is_empty()) {
            continue;
        }
        if let Some(head) = trimmed.strip_suffix('\\') {
            current.push_str(head);
            current.push(' ');
        } else {
            current.push_str(trimmed);
            if !current.trim().is_empty() {
                out.push(current.trim().to_string());
            }
            current.clear();
        }
    }
    out
}

fn port(address: &str) -> u16 {
    caapf::probes::parse_bind_address(address)
        .expect("address")
        .expect("enabled")
        .port()
}

fn default_image_repository() -> String {
    let patch = documents(&read("config/default/manager_image_patch.yaml"));
    let image = patch[0]["spec"]["template"]["spec"]["containers"][0]["image"]
        .as_str()
        .expect("image")
        .to_string();
    // ${CAAPF_IMAGE:=<repository>:<tag>}
    let reference = image
        .trim_start_matches("${CAAPF_IMAGE:=")
        .trim_end_matches('}');
    reference
        .rsplit_once(':')
        .map(|(repository, _)| repository.to_string())
        .expect("tagged reference")
}

#[test]
fn dockerfile_matches_the_binary_and_pins_helm() {
    let text = read("Dockerfile");
    let steps = instructions(&text);
    let final_stage: Vec<&String> = steps
        .iter()
        .rev()
        .take_while(|s| !s.starts_with("FROM "))
        .collect();
    let find_in_final = |keyword: &str| -> Vec<&str> {
        final_stage
            .iter()
            .filter_map(|s| s.strip_prefix(keyword))
            .map(str::trim)
            .collect()
    };

    // EXPOSE equals the flag defaults.
    let defaults = ManagerFlags::default();
    let exposed: BTreeSet<u16> = find_in_final("EXPOSE ")
        .iter()
        .flat_map(|s| s.split_whitespace())
        .map(|p| p.trim_end_matches("/tcp").parse().expect("port"))
        .collect();
    let expected: BTreeSet<u16> = [
        port(&defaults.metrics_bind_address),
        port(&defaults.health_probe_bind_address),
        defaults.webhook_port,
    ]
    .into();
    assert_eq!(exposed, expected, "EXPOSE must list the flag defaults");

    // A numeric, non-root USER in the final stage.
    let user = find_in_final("USER ");
    assert_eq!(user.len(), 1, "one USER in the final stage");
    let uid: u32 = user[0]
        .split(':')
        .next()
        .and_then(|u| u.parse().ok())
        .expect("numeric UID");
    assert_ne!(uid, 0, "non-root");
    // The Deployment runs as the same user.
    let objects = documents(&kustomize_text("config/default"));
    let deployment = find(&objects, "Deployment", "caapf-controller-manager");
    assert_eq!(
        deployment["spec"]["template"]["spec"]["containers"][0]["securityContext"]["runAsUser"],
        Value::from(uid)
    );

    assert_eq!(find_in_final("ENTRYPOINT "), [r#"["/caapf"]"#]);
    assert!(
        final_stage
            .iter()
            .any(|s| s.starts_with("COPY --from=builder") && s.ends_with(" /caapf")),
        "the built binary is /caapf"
    );

    // helm: a pinned version and a sha256 per architecture, verified before use.
    let arg = |name: &str| -> String {
        steps
            .iter()
            .find_map(|s| s.strip_prefix(&format!("ARG {name}=")))
            .unwrap_or_else(|| panic!("no ARG {name}=..."))
            .trim()
            .to_string()
    };
    let version = arg("HELM_VERSION");
    let parts: Vec<&str> = version.trim_start_matches('v').split('.').collect();
    assert!(
        version.starts_with('v')
            && parts.len() == 3
            && parts.iter().all(|p| p.parse::<u32>().is_ok()),
        "HELM_VERSION {version} is an exact release"
    );
    for arch in ["AMD64", "ARM64"] {
        let sum = arg(&format!("HELM_SHA256_{arch}"));
        assert!(
            sum.len() == 64 && sum.chars().all(|c| c.is_ascii_hexdigit()),
            "HELM_SHA256_{arch} is a sha256"
        );
    }
    let download = steps
        .iter()
        .find(|s| s.contains("get.helm.sh/helm-${HELM_VERSION}"))
        .expect("helm is downloaded by version");
    assert!(download.contains("sha256sum -c"), "and checked: {download}");

    // The binary is built from the lock file; helm and HOME under the writable /tmp.
    assert!(
        steps
            .iter()
            .any(|s| s.contains("cargo build --release --locked"))
    );
    let env = find_in_final("ENV ").join(" ");
    for variable in [
        "HOME=/tmp/helm",
        "HELM_CACHE_HOME=/tmp/",
        "HELM_CONFIG_HOME=/tmp/",
        "HELM_DATA_HOME=/tmp/",
    ] {
        assert!(env.contains(variable), "ENV {variable}");
    }
    let ignore = read(".dockerignore");
    assert!(
        ignore.lines().any(|l| l.trim() == "/target"),
        ".dockerignore excludes target/"
    );
}

/// The Dockerfile's `ARG HELM_VERSION` is the one place helm's version is pinned: the helm the
/// tests run by default (`./bin/helm`, installed by `hack/install-helm.sh`, shipped by
/// `make image`) must be that version, and both scripts read it from the Dockerfile instead of
/// naming a version of their own.
#[test]
fn the_image_helm_is_the_helm_the_tests_run() {
    let steps = instructions(&read("Dockerfile"));
    let pinned = steps
        .iter()
        .find_map(|s| s.strip_prefix("ARG HELM_VERSION="))
        .expect("ARG HELM_VERSION")
        .trim()
        .to_string();
    let helm = root().join("bin/helm");
    assert!(
        helm.is_file(),
        "{} is missing: run hack/install-helm.sh (or `make tools`)",
        helm.display()
    );
    let out = Command::new(&helm)
        .args(["version", "--template", "{{.Version}}"])
        .output()
        .expect("running bin/helm");
    assert!(out.status.success(), "bin/helm version failed");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        pinned,
        "bin/helm (hack/install-helm.sh) and the Dockerfile's ARG HELM_VERSION differ"
    );
    for script in ["hack/install-helm.sh", "hack/build-image.sh"] {
        let text = read(script);
        assert!(
            text.contains("s/^ARG HELM_VERSION=//p"),
            "{script} reads the version from the Dockerfile"
        );
        assert!(
            !text.contains(&format!("HELM_VERSION={pinned}")),
            "{script} names the version itself"
        );
    }
}

#[test]
fn tilt_provider_follows_the_capi_contract() {
    let providers: Value = serde_yaml::from_str(&read("tilt-provider.yaml")).expect("YAML");
    let providers = providers.as_array().expect("a list of providers");
    assert_eq!(providers.len(), 1);
    let provider = &providers[0];
    assert_eq!(
        provider["name"], "fleet",
        "addon-<name> is the provider label"
    );
    let config = provider["config"].as_object().expect("config");
    assert!(
        !config.contains_key("image"),
        "no image: CAPI's Tiltfile would build it with go build"
    );
    assert!(config["label"].as_str().is_some_and(|l| !l.is_empty()));
    let folder = config["kustomize_folder"]
        .as_str()
        .expect("kustomize_folder");
    assert!(root().join(folder).join("kustomization.yaml").is_file());
    for resource in config["additional_resources"]
        .as_array()
        .expect("resources")
    {
        let path = resource.as_str().expect("path");
        let objects = documents(&read(path));
        assert!(!objects.is_empty(), "{path} holds objects");
        assert!(
            !read(path).contains("${"),
            "{path} is applied without substitution"
        );
    }
    assert!(
        config["resource_deps"]
            .as_array()
            .expect("resource_deps")
            .iter()
            .any(|d| d == "capi_controller"),
        "the ExtensionConfig needs CAPI's controller"
    );
    // tilt-prepare derives the provider from the Namespace label; the Deployment carries it too.
    let objects = documents(&kustomize_text(folder));
    for kind in ["Namespace", "Deployment"] {
        let object = objects.iter().find(|o| o["kind"] == kind).expect(kind);
        assert_eq!(
            object["metadata"]["labels"]["cluster.x-k8s.io/provider"],
            format!("addon-{}", provider["name"].as_str().expect("name"))
        );
    }
}

#[test]
fn tiltfile_builds_the_deployed_image_and_substitutes_like_clusterctl() {
    let tiltfile = read("Tiltfile");
    let repository = default_image_repository();
    assert!(
        tiltfile.contains(&format!("IMAGE = \"{repository}\"")),
        "the Tiltfile builds {repository}"
    );
    assert!(tiltfile.contains("docker_build("));
    assert!(tiltfile.contains("dockerfile = \"Dockerfile\""));
    assert!(tiltfile.contains("kustomize(\"config/default\")"));
    assert!(tiltfile.contains("kustomize(\"config/extensionconfig\")"));

    // Run the Tiltfile's `substitute` (Starlark that is also Python) on the rendered manifests.
    let start = tiltfile.find("def substitute(").expect("substitute()");
    let end = tiltfile[start..]
        .find("\n\n")
        .map(|e| start + e)
        .expect("end of substitute()");
    let function = &tiltfile[start..end];
    let dir = tempfile::tempdir().expect("tempdir");
    let manifests = dir.path().join("rendered.yaml");
    std::fs::write(&manifests, kustomize_text("config/default")).expect("write");
    let script = format!(
        "import os, sys\ndef fail(message):\n    raise SystemExit(message)\n{function}\nsys.stdout.write(substitute(open(sys.argv[1]).read()))\n"
    );
    let output = Command::new("python3")
        .arg("-c")
        .arg(&script)
        .arg(&manifests)
        .env("CAAPF_LOG_LEVEL", "4")
        .env_remove("CAAPF_IMAGE")
        .output()
        .expect("python3 runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8(output.stdout).expect("utf-8");
    assert!(!text.contains("${"), "every variable substituted");
    let objects = documents(&text);
    let container = &find(&objects, "Deployment", "caapf-controller-manager")["spec"]["template"]["spec"]
        ["containers"][0];
    assert_eq!(
        container["image"],
        format!("{repository}:dev"),
        "the default image, which docker_build replaces"
    );
    let args: Vec<&str> = container["args"]
        .as_array()
        .expect("args")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(args.contains(&"--v=4"), "from the environment: {args:?}");
    assert!(args.contains(&"--sync-period=10m"), "defaults: {args:?}");
}

/// GitHub's anchor for a heading: lower case, spaces to `-`, punctuation dropped.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

#[test]
fn documentation_links_resolve() {
    let mut files = vec![root().join("README.md")];
    for entry in std::fs::read_dir(root().join("docs")).expect("docs") {
        let path = entry.expect("entry").path();
        if path.extension().is_some_and(|e| e == "md") {
            files.push(path);
        }
    }
    let mut broken = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).expect("read");
        let dir = file.parent().expect("dir");
        let mut rest = text.as_str();
        while let Some(start) = rest.find("](") {
            rest = &rest[start + 2..];
            let Some(end) = rest.find(')') else { break };
            let target = &rest[..end];
            rest = &rest[end..];
            if target.starts_with("http") || target.starts_with('<') || target.contains(' ') {
                continue;
            }
            let (path, fragment) = target.split_once('#').unwrap_or((target, ""));
            let linked = if path.is_empty() {
                file.clone()
            } else {
                dir.join(path)
            };
            if !linked.exists() {
                broken.push(format!("{}: {target} (no such file)", file.display()));
                continue;
            }
            if !fragment.is_empty() && linked.extension().is_some_and(|e| e == "md") {
                let content = std::fs::read_to_string(&linked).expect("read");
                let found = content
                    .lines()
                    .filter_map(|l| l.strip_prefix('#'))
                    .map(|h| anchor(h.trim_start_matches('#')))
                    .any(|a| a == fragment);
                if !found {
                    broken.push(format!("{}: {target} (no such heading)", file.display()));
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links: {broken:#?}");
}

/// The YAML blocks of a Markdown file.
fn yaml_blocks(markdown: &str) -> Vec<Vec<Value>> {
    let mut blocks = Vec::new();
    let mut rest = markdown;
    while let Some(start) = rest.find("```yaml\n") {
        let body = &rest[start + "```yaml\n".len()..];
        let end = body.find("```").expect("closed block");
        blocks.push(documents(&body[..end]));
        rest = &body[end..];
    }
    blocks
}

#[test]
fn installation_examples_are_valid() {
    let blocks = yaml_blocks(&read("docs/installation.md"));
    let label = kustomize_text("config/default")
        .lines()
        .find_map(|l| l.trim().strip_prefix("cluster.x-k8s.io/provider: "))
        .expect("provider label")
        .to_string();

    // clusterctl.yaml: an AddonProvider whose name gives our provider label.
    let clusterctl = blocks
        .iter()
        .flatten()
        .find(|d| d.get("providers").is_some())
        .expect("a clusterctl.yaml example");
    let provider = &clusterctl["providers"][0];
    assert_eq!(provider["type"], "AddonProvider");
    assert_eq!(
        format!("addon-{}", provider["name"].as_str().expect("name")),
        label
    );
    assert!(
        provider["url"]
            .as_str()
            .is_some_and(|u| u.ends_with("/addon-components.yaml"))
    );

    // The CAPI Operator's AddonProvider, with a variables Secret in the same namespace.
    let objects: Vec<&Value> = blocks.iter().flatten().collect();
    let addon = objects
        .iter()
        .find(|d| d["kind"] == "AddonProvider")
        .expect("an AddonProvider example");
    assert_eq!(addon["apiVersion"], "operator.cluster.x-k8s.io/v1alpha2");
    assert_eq!(
        format!(
            "addon-{}",
            addon["metadata"]["name"].as_str().expect("name")
        ),
        label
    );
    let secret = objects
        .iter()
        .find(|d| {
            d["kind"] == "Secret" && d["metadata"]["name"] == addon["spec"]["configSecret"]["name"]
        })
        .expect("the configSecret");
    assert_eq!(
        secret["metadata"]["namespace"],
        addon["metadata"]["namespace"]
    );
    for (key, _) in secret["stringData"].as_object().expect("stringData") {
        assert!(
            key.starts_with("CAAPF_"),
            "{key} is not one of our variables"
        );
        assert!(
            kustomize_text("config/default").contains(&format!("${{{key}:=")),
            "{key} is not used by the manifests"
        );
    }
}
