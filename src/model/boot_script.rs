//! The boot script the bootstrap Secret holds (the file GeneratePatches adds to control-plane
//! machines, [`crate::model::agent_patch`]): the agent's objects ([`crate::model::agent_manifest::finish`])
//! in a POSIX shell script that creates them with `kubectl create`, plain and gzipped; and the
//! way back, to rewrite the registration values it carries when the token is replaced.

use std::collections::BTreeMap;

use base64::Engine;
use serde_json::{Map, Value, json};

use crate::model::agent_manifest::{AGENT_BOOTSTRAP_SECRET, TokenValues};
use crate::model::agent_patch::{SCRIPT_GZIP_KEY, SCRIPT_KEY};

/// The bootstrap Secret's data: the boot script ([`boot_script`]) plain ([`SCRIPT_KEY`], for
/// Ignition) and as `base64(gzip(script))` text ([`SCRIPT_GZIP_KEY`], for cloud-init's
/// `encoding: gzip+base64`). The same objects always give the same data.
pub fn bootstrap_files(objects: &[Value]) -> Result<BTreeMap<String, String>, String> {
    let namespace = objects
        .first()
        .filter(|o| o["kind"] == "Namespace")
        .and_then(|o| o["metadata"]["name"].as_str())
        .ok_or("the agent objects do not start with their Namespace")?;
    let script = boot_script(namespace, &to_yaml_stream(&compact(objects))?)?;
    let packed = base64::engine::general_purpose::STANDARD.encode(gzip(script.as_bytes()));
    Ok(BTreeMap::from([
        (SCRIPT_KEY.to_string(), script),
        (SCRIPT_GZIP_KEY.to_string(), packed),
    ]))
}

/// The objects as the boot script carries them, without what only costs user data: the
/// registration Secret's values as `stringData` (plain text, which the API server stores as
/// `data`; base64 of base64-like tokens and certificates gzips poorly) and the agent
/// ConfigMap's JSON written compactly.
fn compact(objects: &[Value]) -> Vec<Value> {
    objects
        .iter()
        .map(|object| {
            let mut object = object.clone();
            if object["kind"] == "Secret"
                && let Some(Value::Object(data)) =
                    object.as_object_mut().and_then(|o| o.remove("data"))
            {
                let mut plain = Map::new();
                let mut binary = Map::new();
                for (key, value) in data {
                    let text = value
                        .as_str()
                        .and_then(|v| base64::engine::general_purpose::STANDARD.decode(v).ok())
                        .and_then(|bytes| String::from_utf8(bytes).ok());
                    match text {
                        Some(text) => plain.insert(key, json!(text)),
                        None => binary.insert(key, value),
                    };
                }
                if !binary.is_empty() {
                    object["data"] = Value::Object(binary);
                }
                if !plain.is_empty() {
                    object["stringData"] = Value::Object(plain);
                }
            }
            if object["kind"] == "ConfigMap"
                && let Some(config) = object["data"]["config"].as_str()
                && let Ok(parsed) = serde_json::from_str::<Value>(config)
            {
                object["data"]["config"] = json!(parsed.to_string());
            }
            object
        })
        .collect()
}

/// The line that ends the objects inside the boot script (a here-document delimiter; no line of
/// a YAML stream can be it).
const MANIFEST_END: &str = "CAAPF";

/// The boot script of a control-plane machine (POSIX `sh`; `$@` is the distribution's `kubectl`
/// with the admin kubeconfig): unless the agent registered already, creates `manifest`'s objects
/// with `kubectl create` until they all exist, at most 60 tries 5 s apart; always exits 0. Terse
/// on purpose: every byte of it is in the user data of every control-plane machine.
///
/// - **Registered means: Secret `fleet-agent` exists in the agent namespace.** Fleet's agent keeps
///   its credential there and deletes `fleet-agent-bootstrap` once registered (rancher/fleet
///   v0.12.0–v0.16.1 `internal/cmd/agent/register/register.go` `tryRegister`), so a machine that
///   joins later must not create anything: it would bring back the registration Secret.
///   `--ignore-not-found` tells "absent" (empty output, exit 0) from "cannot tell" (non-zero:
///   the API server is not answering yet; try again).
/// - **Until then, this machine's registration Secret replaces an earlier one**: its first
///   answered try deletes `fleet-agent-bootstrap`, which `create` then brings back with the
///   values this script carries, so a token replaced after the first machine booted reaches the
///   cluster with the next machine (the agent retries its registration with whatever Secret is
///   there). Once the agent registered, nothing is deleted (it deletes that Secret itself).
/// - `kubectl create`, never `apply`: once Fleet manages the agent (its bundle takes over these
///   objects), a machine must not put the bootstrap version back. Objects that exist are left
///   alone; the loop ends as soon as every object exists (`kubectl get -f`). Unlike a manifest in
///   RKE2's auto-deploy directory or a helm-controller `HelmChart`, nothing re-applies it later.
pub fn boot_script(namespace: &str, manifest: &str) -> Result<String, String> {
    if manifest.lines().any(|line| line == MANIFEST_END) {
        return Err(format!("the agent objects contain a line {MANIFEST_END}"));
    }
    let manifest = manifest.trim_end_matches('\n');
    Ok(format!(
        r#"#!/bin/sh
# caapf: Fleet agent bootstrap. $@: kubectl
n={namespace}
m(){{ cat<<'{MANIFEST_END}'
{manifest}
{MANIFEST_END}
}}
for i in $(seq 60);do
if r=$("$@" -n $n get secret fleet-agent --ignore-not-found -o name 2>/dev/null);then
[ "$r" ]&&exit
[ "$d" ]||"$@" -n $n delete secret fleet-agent-bootstrap --ignore-not-found >/dev/null 2>&1&&d=1
m|"$@" get -f - >/dev/null 2>&1&&exit
m|"$@" create -f - >/dev/null 2>&1
fi
sleep 5
done
echo caapf: the Fleet agent objects were not created>&2
"#
    ))
}

/// The bootstrap Secret's files of `script` (a boot script [`bootstrap_files`] wrote) with the
/// registration values of another token: Secret `fleet-agent-bootstrap` gets its token, token
/// name, API server URL and CA and namespaces (the keys of rancher/fleet
/// `charts/fleet-agent/templates/secret.yaml`, v0.12.0–v0.16.1); nothing else changes.
pub fn with_token_values(
    script: &str,
    values: &TokenValues,
) -> Result<BTreeMap<String, String>, String> {
    let mut objects = script_objects(script)?;
    let secret = objects
        .iter_mut()
        .find(|o| o["kind"] == "Secret" && o["metadata"]["name"] == AGENT_BOOTSTRAP_SECRET)
        .ok_or_else(|| format!("the boot script carries no Secret {AGENT_BOOTSTRAP_SECRET}"))?;
    for (key, value) in [
        ("token", Some(&values.token)),
        ("tokenName", values.token_name.as_ref()),
        ("apiServerURL", Some(&values.api_server_url)),
        ("apiServerCA", Some(&values.api_server_ca)),
        ("clusterNamespace", Some(&values.cluster_namespace)),
        (
            "systemRegistrationNamespace",
            Some(&values.system_registration_namespace),
        ),
    ] {
        if let Some(value) = value {
            if let Some(data) = secret["data"].as_object_mut() {
                data.remove(key);
            }
            secret["stringData"][key] = json!(value);
        }
    }
    bootstrap_files(&objects)
}

/// The objects a boot script carries (what [`bootstrap_files`] wrote), for rewriting them.
pub fn script_objects(script: &str) -> Result<Vec<Value>, String> {
    let start = format!("<<'{MANIFEST_END}'\n");
    let manifest = script
        .split_once(&start)
        .and_then(|(_, rest)| rest.split_once(&format!("\n{MANIFEST_END}\n")))
        .map(|(manifest, _)| manifest)
        .ok_or("not a boot script of this provider")?;
    let mut objects = Vec::new();
    for document in serde_yaml::Deserializer::from_str(manifest) {
        let object = <Value as serde::Deserialize>::deserialize(document)
            .map_err(|err| format!("the boot script's objects are not YAML: {err}"))?;
        if !object.is_null() {
            objects.push(object);
        }
    }
    Ok(objects)
}

fn to_yaml_stream(objects: &[Value]) -> Result<String, String> {
    let mut out = String::new();
    for object in objects {
        if !out.is_empty() {
            out.push_str("---\n");
        }
        out.push_str(&serde_yaml::to_string(object).map_err(|err| err.to_string())?);
    }
    Ok(out)
}

/// gzip (RFC 1952) of `data` at the best compression, deterministic (no name, modification time
/// 0, operating system "unknown"): what cloud-init's `gzip+base64` gunzips.
fn gzip(data: &[u8]) -> Vec<u8> {
    let mut out = vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 2, 255];
    out.extend(miniz_oxide::deflate::compress_to_vec(data, 10));
    out.extend(crc32(data).to_le_bytes());
    out.extend((data.len() as u32).to_le_bytes());
    out
}

/// CRC-32 (IEEE 802.3, reflected, as gzip's trailer has it).
fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for byte in data {
        crc ^= u32::from(*byte);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::agent_manifest::finish;
    use crate::model::agent_manifest::tests::{RENDERED, input};

    #[test]
    fn bootstrap_files_are_the_boot_script_plain_and_gzip_base64() {
        let mut objects = finish(RENDERED, &input()).expect("finished");
        objects.insert(
            1,
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "fleet-agent-bootstrap", "namespace": "fleet-addon-agent"},
                   "data": {"token": "c2VjcmV0", "binary": "/w=="}}),
        );
        objects.insert(
            1,
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "fleet-agent", "namespace": "fleet-addon-agent"},
                   "data": {"config": "{\n  \"clientID\": \"c\",\n\n  \"agentTLSMode\": \"strict\"\n}"}}),
        );
        let files = bootstrap_files(&objects).expect("files");
        assert_eq!(
            files.keys().collect::<Vec<_>>(),
            [SCRIPT_KEY, SCRIPT_GZIP_KEY]
        );
        let script = &files[SCRIPT_KEY];
        assert!(script.starts_with("#!/bin/sh\n"));
        assert!(script.contains("\nn=fleet-addon-agent\n"));
        assert!(script.contains("\nkind: Namespace\n"));
        // The gzip+base64 text is the script (cloud-init: base64-decode, then gunzip).
        let packed = base64::engine::general_purpose::STANDARD
            .decode(&files[SCRIPT_GZIP_KEY])
            .expect("base64");
        assert_eq!(&packed[..3], &[0x1f, 0x8b, 8]);
        let body = &packed[10..packed.len() - 8];
        let unpacked = miniz_oxide::inflate::decompress_to_vec(body).expect("deflate");
        assert_eq!(unpacked, script.as_bytes());
        assert_eq!(
            packed[packed.len() - 8..packed.len() - 4],
            crc32(script.as_bytes()).to_le_bytes()
        );
        // What it carries: the objects, with the Secret's text values as stringData and the
        // ConfigMap's JSON compact.
        let carried = script_objects(script).expect("objects");
        assert_eq!(carried.len(), objects.len());
        let secret = carried
            .iter()
            .find(|o| o["kind"] == "Secret")
            .expect("Secret");
        assert_eq!(secret["stringData"], json!({"token": "secret"}));
        assert_eq!(secret["data"], json!({"binary": "/w=="}));
        let configmap = carried
            .iter()
            .find(|o| o["kind"] == "ConfigMap")
            .expect("ConfigMap");
        assert_eq!(
            configmap["data"]["config"],
            r#"{"agentTLSMode":"strict","clientID":"c"}"#
        );
        assert_eq!(carried.last(), objects.last());
        assert_eq!(bootstrap_files(&objects), bootstrap_files(&objects));
        assert!(boot_script("ns", "a: 1\nCAAPF\n").is_err());
    }

    /// Another token's values replace the registration Secret's, and nothing else.
    #[test]
    fn token_values_are_replaced_in_the_boot_script() {
        let mut objects = finish(RENDERED, &input()).expect("finished");
        objects.insert(
            1,
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "fleet-agent-bootstrap", "namespace": "fleet-addon-agent"},
                   "data": {"token": "b2xk", "tokenName": "b2xk", "apiServerURL": "aHR0cHM6Ly9vbGQ=", "extra": "a2VwdA=="}}),
        );
        let files = bootstrap_files(&objects).expect("files");
        let fresh = TokenValues::parse(
            "clusterNamespace: team-a\napiServerURL: https://fleet.example.com:6443\napiServerCA: ca\ntoken: new-token\ntokenName: c1\n",
        )
        .expect("values");
        let refreshed = with_token_values(&files[SCRIPT_KEY], &fresh).expect("refreshed");
        let before = script_objects(&files[SCRIPT_KEY]).expect("objects");
        let after = script_objects(&refreshed[SCRIPT_KEY]).expect("objects");
        assert_eq!(before.len(), after.len());
        for (old, new) in before.iter().zip(&after) {
            if old["kind"] != "Secret" {
                assert_eq!(old, new);
            }
        }
        let secret = after
            .iter()
            .find(|o| o["kind"] == "Secret")
            .expect("Secret");
        assert_eq!(
            secret["stringData"],
            json!({"token": "new-token", "tokenName": "c1", "apiServerURL": "https://fleet.example.com:6443",
                   "apiServerCA": "ca", "clusterNamespace": "team-a",
                   "systemRegistrationNamespace": "cattle-fleet-clusters-system", "extra": "kept"})
        );
        // The gzip+base64 copy follows.
        let packed = base64::engine::general_purpose::STANDARD
            .decode(&refreshed[SCRIPT_GZIP_KEY])
            .expect("base64");
        let unpacked =
            miniz_oxide::inflate::decompress_to_vec(&packed[10..packed.len() - 8]).expect("gzip");
        assert_eq!(unpacked, refreshed[SCRIPT_KEY].as_bytes());
        assert!(with_token_values("#!/bin/sh\n", &fresh).is_err());
    }

    /// The check value of the CRC-32 gzip uses (RFC 1952; "123456789" gives 0xCBF43926).
    #[test]
    fn crc32_check_value() {
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
    }
}
