//! Rendering the provider's manifests as the release does: `kustomize build` (or kubectl's
//! built-in kustomize) and `helm template`, parsed into JSON values.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// The repository root.
pub fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Parses a multi-document YAML stream, skipping empty documents.
pub fn documents(text: &str) -> Vec<Value> {
    serde_yaml::Deserializer::from_str(text)
        .map(|doc| <Value as serde::Deserialize>::deserialize(doc).expect("valid YAML"))
        .filter(|doc| !doc.is_null())
        .collect()
}

fn run(mut command: Command, what: &str) -> String {
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot run {command:?}: {e}"));
    assert!(
        output.status.success(),
        "{what} failed:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("UTF-8 output")
}

/// `kustomize build <dir>` (relative to the root); kubectl's built-in kustomize when no
/// `kustomize` binary is installed.
pub fn kustomize_text(dir: &str) -> String {
    let path = root().join(dir);
    let command = if Command::new("kustomize").arg("version").output().is_ok() {
        let mut c = Command::new("kustomize");
        c.arg("build").arg(&path);
        c
    } else {
        let mut c = Command::new("kubectl");
        c.arg("kustomize").arg(&path);
        c
    };
    run(
        command,
        &format!("kustomize build {dir} (needs kustomize or kubectl)"),
    )
}

pub fn kustomize(dir: &str) -> Vec<Value> {
    documents(&kustomize_text(dir))
}

/// The helm binary: `HELM_BIN`, else `<repo>/bin/helm` (`hack/install-helm.sh`).
pub fn helm_bin() -> PathBuf {
    let path = std::env::var_os("HELM_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("bin/helm"));
    assert!(
        path.is_file(),
        "helm not found at {}: run hack/install-helm.sh (or set HELM_BIN)",
        path.display()
    );
    path
}

/// Runs helm with `args`, in a private HOME so no user configuration leaks in.
pub fn helm(args: &[&str]) -> String {
    let home = tempfile::tempdir().expect("tempdir");
    let mut command = Command::new(helm_bin());
    command
        .args(args)
        .env("HOME", home.path())
        .env("HELM_CACHE_HOME", home.path().join("cache"))
        .env("HELM_CONFIG_HOME", home.path().join("config"))
        .env("HELM_DATA_HOME", home.path().join("data"))
        .env_remove("KUBECONFIG");
    run(command, &format!("helm {}", args.join(" ")))
}

/// The object of `kind` named `name` (any namespace).
pub fn find<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name} among the rendered objects"))
}

/// Replaces every `${NAME:=default}` by its default, as clusterctl does with no value set.
pub fn substitute_defaults(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            out.push_str(&rest[start..]);
            return out;
        };
        let body = &after[..end];
        out.push_str(body.split_once(":=").map_or("", |(_, default)| default));
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    out
}
