//! Inferring the management cluster's API server URL and reading CA certificates (pure).
//!
//! `inferLocal` takes the URL from the `default/kubernetes` Service's endpoints. Fixes of CAAPF
//! (research §13.20): the URL always has a scheme and a port (`https://<ip>:<port>`, IPv6 in
//! brackets), whether or not the port is named; EndpointSlices (`discovery.k8s.io/v1`) are
//! preferred over the deprecated core `Endpoints`. When the control plane has several addresses
//! the smallest is taken, so the URL does not flap with the order the API server lists them.

use std::net::IpAddr;

use base64::Engine;
use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference, Secret};
use k8s_openapi::api::discovery::v1::EndpointSlice;

/// Namespace and name of the Service whose endpoints are the API server.
pub const KUBERNETES_SERVICE_NAMESPACE: &str = "default";
/// Name of the API server Service (and of its core `Endpoints`).
pub const KUBERNETES_SERVICE: &str = "kubernetes";
/// Label EndpointSlices carry with their Service's name.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
/// ConfigMap every namespace gets with the cluster CA (`ca.crt`).
pub const ROOT_CA_CONFIG_MAP: &str = "kube-root-ca.crt";
/// Key of a CA certificate in a ConfigMap or Secret.
pub const CA_KEY: &str = "ca.crt";

/// The field that names a custom CA.
pub const CA_REF_FIELD: &str = "spec.config.server.custom.apiServerCaConfigRef";

/// Where a custom CA is read from: a ConfigMap (the default) or a Secret, by namespace and name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CaReference {
    pub secret: bool,
    pub namespace: String,
    pub name: String,
}

impl CaReference {
    /// `namespace/name`, for messages.
    pub fn full_name(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// The CA reference of `spec.config.server.custom`: `kind: Secret` reads a Secret, any other
/// kind a ConfigMap; name and namespace are required (the message names the field).
pub fn ca_reference(reference: &ObjectReference) -> Result<CaReference, String> {
    let namespace = reference.namespace.clone().unwrap_or_default();
    let name = reference.name.clone().unwrap_or_default();
    if namespace.is_empty() || name.is_empty() {
        return Err(format!("{CA_REF_FIELD}: name and namespace are required"));
    }
    Ok(CaReference {
        secret: reference.kind.as_deref() == Some("Secret"),
        namespace,
        name,
    })
}

/// `https://<host>:<port>`, with an IPv6 address in brackets.
pub fn https_url(host: &str, port: i32) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("https://[{host}]:{port}")
    } else {
        format!("https://{host}:{port}")
    }
}

/// The port to use among `(name, number)` pairs: the one named `https`, else the first.
fn pick_port<'a>(ports: impl Iterator<Item = (Option<&'a str>, Option<i32>)>) -> Option<i32> {
    let ports: Vec<(Option<&str>, i32)> = ports
        .filter_map(|(name, port)| port.map(|p| (name, p)))
        .collect();
    ports
        .iter()
        .find(|(name, _)| *name == Some("https"))
        .or(ports.first())
        .map(|(_, port)| *port)
}

/// The smallest address (by IP, then text), so the choice is stable.
fn pick_address<'a>(addresses: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    addresses
        .filter(|a| !a.is_empty())
        .min_by_key(|a| (a.parse::<IpAddr>().ok(), a.to_string()))
}

/// The URL from the `kubernetes` Service's EndpointSlices: ready (or not-known-unready)
/// endpoints only; IPv4 slices before IPv6 ones; `None` if no slice has an address and a port.
pub fn url_from_endpoint_slices(slices: &[EndpointSlice]) -> Option<String> {
    let mut ordered: Vec<&EndpointSlice> = slices
        .iter()
        .filter(|s| matches!(s.address_type.as_str(), "IPv4" | "IPv6"))
        .collect();
    ordered.sort_by_key(|s| (s.address_type != "IPv4", s.metadata.name.clone()));
    ordered.into_iter().find_map(|slice| {
        let port = pick_port(
            slice
                .ports
                .iter()
                .flatten()
                .map(|p| (p.name.as_deref(), p.port)),
        )?;
        let address = pick_address(
            slice
                .endpoints
                .iter()
                .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) != Some(false))
                .flat_map(|e| e.addresses.iter().map(String::as_str)),
        )?;
        Some(https_url(address, port))
    })
}

/// The URL from the core `Endpoints default/kubernetes`, as a fallback.
pub fn url_from_endpoints(endpoints: &k8s_openapi::api::core::v1::Endpoints) -> Option<String> {
    endpoints.subsets.iter().flatten().find_map(|subset| {
        let port = pick_port(
            subset
                .ports
                .iter()
                .flatten()
                .map(|p| (p.name.as_deref(), Some(p.port))),
        )?;
        let address = pick_address(subset.addresses.iter().flatten().map(|a| a.ip.as_str()))?;
        Some(https_url(address, port))
    })
}

/// The inferred URL: EndpointSlices first, core Endpoints otherwise.
pub fn infer_url(
    slices: &[EndpointSlice],
    endpoints: Option<&k8s_openapi::api::core::v1::Endpoints>,
) -> Result<String, String> {
    url_from_endpoint_slices(slices)
        .or_else(|| endpoints.and_then(url_from_endpoints))
        .ok_or_else(|| {
            format!(
                "cannot infer the API server URL: the {KUBERNETES_SERVICE_NAMESPACE}/{KUBERNETES_SERVICE} Service has no ready endpoint with an address and a port (EndpointSlices labelled {SERVICE_NAME_LABEL}={KUBERNETES_SERVICE}, or Endpoints {KUBERNETES_SERVICE_NAMESPACE}/{KUBERNETES_SERVICE})"
            )
        })
}

/// The PEM text under `key` of a ConfigMap (`data`, or `binaryData` as UTF-8).
pub fn ca_from_config_map(config_map: &ConfigMap, key: &str) -> Result<String, String> {
    if let Some(text) = config_map.data.as_ref().and_then(|d| d.get(key)) {
        return non_empty_pem(text.clone(), key);
    }
    if let Some(bytes) = config_map.binary_data.as_ref().and_then(|d| d.get(key)) {
        let text = String::from_utf8(bytes.0.clone())
            .map_err(|_| format!("key {key:?} is not UTF-8 PEM text"))?;
        return non_empty_pem(text, key);
    }
    Err(format!("has no key {key:?}"))
}

/// The PEM text under `key` of a Secret (`data`, decoded; or `stringData`).
pub fn ca_from_secret(secret: &Secret, key: &str) -> Result<String, String> {
    if let Some(bytes) = secret.data.as_ref().and_then(|d| d.get(key)) {
        let text = String::from_utf8(bytes.0.clone())
            .map_err(|_| format!("key {key:?} is not UTF-8 PEM text"))?;
        return non_empty_pem(text, key);
    }
    if let Some(text) = secret.string_data.as_ref().and_then(|d| d.get(key)) {
        return non_empty_pem(text.clone(), key);
    }
    Err(format!("has no key {key:?}"))
}

fn non_empty_pem(text: String, key: &str) -> Result<String, String> {
    if text.trim().is_empty() {
        return Err(format!("key {key:?} is empty"));
    }
    if !text.contains("-----BEGIN") {
        return Err(format!("key {key:?} is not a PEM certificate"));
    }
    Ok(text)
}

/// Base64 of the PEM text, as Fleet's `fleet-controller` ConfigMap stores `apiServerCA`.
pub fn encode_ca(pem: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(pem.as_bytes())
}

#[cfg(test)]
mod tests {
    use k8s_openapi::ByteString;
    use serde_json::json;

    use super::*;

    fn slice(value: serde_json::Value) -> EndpointSlice {
        serde_json::from_value(value).unwrap_or_else(|e| panic!("test slice: {e}"))
    }

    fn endpoints(value: serde_json::Value) -> k8s_openapi::api::core::v1::Endpoints {
        serde_json::from_value(value).unwrap_or_else(|e| panic!("test endpoints: {e}"))
    }

    #[test]
    fn urls() {
        assert_eq!(https_url("10.0.0.1", 6443), "https://10.0.0.1:6443");
        assert_eq!(https_url("fd00::1", 443), "https://[fd00::1]:443");
        assert_eq!(https_url("[fd00::1]", 443), "https://[fd00::1]:443");
        assert_eq!(
            https_url("api.example.com", 443),
            "https://api.example.com:443"
        );
    }

    #[test]
    fn from_endpoint_slices() {
        let rows: Vec<(&str, Vec<serde_json::Value>, Option<&str>)> = vec![
            (
                "named https port",
                vec![
                    json!({"metadata": {"name": "kubernetes"}, "addressType": "IPv4",
                    "endpoints": [{"addresses": ["172.18.0.2"], "conditions": {"ready": true}}],
                    "ports": [{"name": "https", "port": 6443, "protocol": "TCP"}]}),
                ],
                Some("https://172.18.0.2:6443"),
            ),
            (
                "unnamed port still gives scheme and port (CAAPF gave just the host)",
                vec![
                    json!({"metadata": {"name": "kubernetes"}, "addressType": "IPv4",
                    "endpoints": [{"addresses": ["10.0.0.1"]}],
                    "ports": [{"port": 443}]}),
                ],
                Some("https://10.0.0.1:443"),
            ),
            (
                "https port preferred over others",
                vec![
                    json!({"metadata": {"name": "kubernetes"}, "addressType": "IPv4",
                    "endpoints": [{"addresses": ["10.0.0.1"]}],
                    "ports": [{"name": "metrics", "port": 8080}, {"name": "https", "port": 6443}]}),
                ],
                Some("https://10.0.0.1:6443"),
            ),
            (
                "IPv6 in brackets",
                vec![
                    json!({"metadata": {"name": "kubernetes"}, "addressType": "IPv6",
                    "endpoints": [{"addresses": ["fd00:10::2"]}],
                    "ports": [{"name": "https", "port": 6443}]}),
                ],
                Some("https://[fd00:10::2]:6443"),
            ),
            (
                "dual stack: IPv4 first",
                vec![
                    json!({"metadata": {"name": "kubernetes-a"}, "addressType": "IPv6",
                        "endpoints": [{"addresses": ["fd00::2"]}], "ports": [{"name": "https", "port": 6443}]}),
                    json!({"metadata": {"name": "kubernetes-b"}, "addressType": "IPv4",
                        "endpoints": [{"addresses": ["10.0.0.2"]}], "ports": [{"name": "https", "port": 6443}]}),
                ],
                Some("https://10.0.0.2:6443"),
            ),
            (
                "several control-plane addresses: the smallest, whatever the order",
                vec![
                    json!({"metadata": {"name": "kubernetes"}, "addressType": "IPv4",
                    "endpoints": [{"addresses": ["10.0.0.10"]}, {"addresses": ["10.0.0.9"]}, {"addresses": ["10.0.0.11"]}],
                    "ports": [{"name": "https", "port": 6443}]}),
                ],
                Some("https://10.0.0.9:6443"),
            ),
            (
                "not-ready endpoints skipped",
                vec![
                    json!({"metadata": {"name": "kubernetes"}, "addressType": "IPv4",
                    "endpoints": [{"addresses": ["10.0.0.1"], "conditions": {"ready": false}}, {"addresses": ["10.0.0.5"]}],
                    "ports": [{"name": "https", "port": 6443}]}),
                ],
                Some("https://10.0.0.5:6443"),
            ),
            (
                "no ports",
                vec![
                    json!({"metadata": {"name": "kubernetes"}, "addressType": "IPv4",
                    "endpoints": [{"addresses": ["10.0.0.1"]}]}),
                ],
                None,
            ),
            (
                "no endpoints",
                vec![
                    json!({"metadata": {"name": "kubernetes"}, "addressType": "IPv4",
                    "endpoints": [], "ports": [{"name": "https", "port": 6443}]}),
                ],
                None,
            ),
            (
                "FQDN slices ignored",
                vec![
                    json!({"metadata": {"name": "kubernetes"}, "addressType": "FQDN",
                    "endpoints": [{"addresses": ["api.example.com"]}], "ports": [{"port": 443}]}),
                ],
                None,
            ),
            ("none", vec![], None),
        ];
        for (name, slices, want) in rows {
            let slices: Vec<EndpointSlice> = slices.into_iter().map(slice).collect();
            assert_eq!(url_from_endpoint_slices(&slices).as_deref(), want, "{name}");
        }
    }

    #[test]
    fn from_core_endpoints() {
        let rows = [
            (
                json!({"metadata": {"name": "kubernetes"}, "subsets": [{"addresses": [{"ip": "172.18.0.2"}], "ports": [{"name": "https", "port": 6443, "protocol": "TCP"}]}]}),
                Some("https://172.18.0.2:6443"),
            ),
            (
                json!({"metadata": {"name": "kubernetes"}, "subsets": [{"addresses": [{"ip": "10.0.0.1", "hostname": "cp-1"}], "ports": [{"port": 443}]}]}),
                Some("https://10.0.0.1:443"),
            ),
            (
                json!({"metadata": {"name": "kubernetes"}, "subsets": [{"addresses": [{"ip": "fd00::1"}], "ports": [{"port": 6443}]}]}),
                Some("https://[fd00::1]:6443"),
            ),
            (
                json!({"metadata": {"name": "kubernetes"}, "subsets": [{"notReadyAddresses": [{"ip": "10.0.0.1"}], "ports": [{"port": 6443}]}]}),
                None,
            ),
            (json!({"metadata": {"name": "kubernetes"}}), None),
        ];
        for (input, want) in rows {
            assert_eq!(
                url_from_endpoints(&endpoints(input.clone())).as_deref(),
                want,
                "{input}"
            );
        }
    }

    #[test]
    fn slices_preferred_over_endpoints() {
        let slices = vec![slice(
            json!({"metadata": {"name": "kubernetes"}, "addressType": "IPv4",
            "endpoints": [{"addresses": ["10.0.0.2"]}], "ports": [{"name": "https", "port": 6443}]}),
        )];
        let core = endpoints(
            json!({"metadata": {"name": "kubernetes"}, "subsets": [{"addresses": [{"ip": "10.9.9.9"}], "ports": [{"port": 443}]}]}),
        );
        assert_eq!(
            infer_url(&slices, Some(&core)).as_deref(),
            Ok("https://10.0.0.2:6443")
        );
        assert_eq!(
            infer_url(&[], Some(&core)).as_deref(),
            Ok("https://10.9.9.9:443")
        );
        let err = infer_url(&[], None).unwrap_err();
        assert!(err.contains("default/kubernetes"), "{err}");
    }

    #[test]
    fn ca_sources() {
        let pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
        let cm: ConfigMap = serde_json::from_value(
            json!({"metadata": {"name": "kube-root-ca.crt"}, "data": {"ca.crt": pem}}),
        )
        .expect("cm");
        assert_eq!(ca_from_config_map(&cm, CA_KEY).as_deref(), Ok(pem));
        let cm: ConfigMap = serde_json::from_value(
            json!({"metadata": {"name": "x"}, "binaryData": {"ca.crt": encode_ca(pem)}}),
        )
        .expect("cm");
        assert_eq!(ca_from_config_map(&cm, CA_KEY).as_deref(), Ok(pem));
        let cm: ConfigMap =
            serde_json::from_value(json!({"metadata": {"name": "x"}, "data": {"other": pem}}))
                .expect("cm");
        assert_eq!(
            ca_from_config_map(&cm, CA_KEY),
            Err("has no key \"ca.crt\"".to_string())
        );
        let cm: ConfigMap = serde_json::from_value(
            json!({"metadata": {"name": "x"}, "data": {"ca.crt": "not a cert"}}),
        )
        .expect("cm");
        assert!(
            ca_from_config_map(&cm, CA_KEY)
                .unwrap_err()
                .contains("not a PEM")
        );

        let secret = Secret {
            data: Some([("ca.crt".to_string(), ByteString(pem.as_bytes().to_vec()))].into()),
            ..Default::default()
        };
        assert_eq!(ca_from_secret(&secret, CA_KEY).as_deref(), Ok(pem));
        let secret = Secret {
            data: Some([("ca.crt".to_string(), ByteString(vec![0xff, 0xfe]))].into()),
            ..Default::default()
        };
        assert!(
            ca_from_secret(&secret, CA_KEY)
                .unwrap_err()
                .contains("UTF-8")
        );
        assert!(ca_from_secret(&Secret::default(), CA_KEY).is_err());
        assert_eq!(
            encode_ca(pem),
            "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUIKLS0tLS1FTkQgQ0VSVElGSUNBVEUtLS0tLQo="
        );
    }

    #[test]
    fn ca_references() {
        let reference =
            |kind: Option<&str>, namespace: Option<&str>, name: Option<&str>| ObjectReference {
                kind: kind.map(str::to_string),
                namespace: namespace.map(str::to_string),
                name: name.map(str::to_string),
                ..Default::default()
            };
        let want = |secret| {
            Ok(CaReference {
                secret,
                namespace: "ns".into(),
                name: "ca".into(),
            })
        };
        let missing = Err(
            "spec.config.server.custom.apiServerCaConfigRef: name and namespace are required"
                .to_string(),
        );
        for (input, expected) in [
            (reference(None, Some("ns"), Some("ca")), want(false)),
            (
                reference(Some("ConfigMap"), Some("ns"), Some("ca")),
                want(false),
            ),
            (
                reference(Some("Secret"), Some("ns"), Some("ca")),
                want(true),
            ),
            (reference(Some("Secret"), None, Some("ca")), missing.clone()),
            (reference(None, Some("ns"), Some("")), missing.clone()),
        ] {
            assert_eq!(ca_reference(&input), expected, "{input:?}");
        }
        assert_eq!(
            ca_reference(&reference(None, Some("ns"), Some("ca")))
                .map(|r| r.full_name())
                .as_deref(),
            Ok("ns/ca")
        );
    }
}
