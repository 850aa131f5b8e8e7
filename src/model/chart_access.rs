//! How helm reaches a chart repository (pure): the credentials and CA Secrets the spec names,
//! whether an `oci://` registry is used over plain HTTP, what is wrong with a Secret's
//! content, and what a failure means for the user.
//!
//! The Secrets' contents never appear in a message: messages name the field, the Secret and
//! the key, and say what is wrong.

use k8s_openapi::api::core::v1::{Secret, SecretReference};

use crate::api::{ChartTlsConfig, RegistryCredentials};

/// The key of a credentials Secret holding the registry configuration when `key` is not set
/// (cluster-api-addon-provider-helm's `DefaultOCIKey`).
pub const DEFAULT_CREDENTIALS_KEY: &str = "config.json";

/// The key of a CA Secret holding the PEM CA (as in cluster-api-addon-provider-helm).
pub const CA_KEY: &str = "ca.crt";

/// One key of one Secret, and the spec field that names it (for messages).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SecretKeyRef {
    /// Where the reference is written, e.g. `spec.install.credentials`.
    pub field: &'static str,
    pub namespace: String,
    pub name: String,
    pub key: String,
}

impl SecretKeyRef {
    /// `namespace/name`.
    pub fn secret(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// TLS settings of a repository.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TlsAccess {
    /// The CA to verify the repository with (helm `--ca-file`).
    pub ca: Option<SecretKeyRef>,
    /// helm `--insecure-skip-tls-verify`.
    pub insecure_skip_tls_verify: bool,
    /// `insecurePlainHTTP`: plain HTTP on any host.
    pub insecure_plain_http: bool,
}

/// Everything helm needs besides the repository URL to fetch charts from it.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ChartAccess {
    /// A registry configuration (`config.json`) for an `oci://` registry.
    pub credentials: Option<SecretKeyRef>,
    /// Set when the spec has a `tlsConfig` (even an empty one).
    pub tls: Option<TlsAccess>,
    /// Where credentials would be set for this repository (for hints).
    pub credentials_field: &'static str,
    /// Where TLS settings would be set for this repository (for hints).
    pub tls_field: &'static str,
}

/// Field paths of `spec.install`'s settings.
pub const INSTALL_CREDENTIALS: &str = "spec.install.credentials";
pub const INSTALL_TLS: &str = "spec.install.tlsConfig";
/// Field paths of the agent chart's own settings.
pub const AGENT_CREDENTIALS: &str = "spec.runtimeExtension.agentChartCredentials";
pub const AGENT_TLS: &str = "spec.runtimeExtension.agentChartTLSConfig";

impl ChartAccess {
    /// The settings written at `credentials_field` and `tls_field`. References without a name
    /// or a namespace are left out (validation reports them).
    pub fn from_spec(
        credentials: Option<&RegistryCredentials>,
        tls: Option<&ChartTlsConfig>,
        credentials_field: &'static str,
        tls_field: &'static str,
    ) -> Self {
        let tls_ca_field = if tls_field == INSTALL_TLS {
            "spec.install.tlsConfig.caSecret"
        } else {
            "spec.runtimeExtension.agentChartTLSConfig.caSecret"
        };
        ChartAccess {
            credentials: credentials.and_then(|c| {
                secret_key_ref(
                    credentials_field,
                    c.secret.as_ref(),
                    c.key.as_deref().unwrap_or(DEFAULT_CREDENTIALS_KEY),
                )
            }),
            tls: tls.map(|t| TlsAccess {
                ca: secret_key_ref(tls_ca_field, t.ca_secret.as_ref(), CA_KEY),
                insecure_skip_tls_verify: t.insecure_skip_tls_verify == Some(true),
                insecure_plain_http: t.insecure_plain_http == Some(true),
            }),
            credentials_field,
            tls_field,
        }
    }

    /// The CA reference, if any.
    pub fn ca(&self) -> Option<&SecretKeyRef> {
        self.tls.as_ref().and_then(|t| t.ca.as_ref())
    }

    /// Whether helm is told not to verify certificates.
    pub fn insecure_skip_tls_verify(&self) -> bool {
        self.tls
            .as_ref()
            .is_some_and(|t| t.insecure_skip_tls_verify)
    }

    /// The Secrets to read, in order (credentials first).
    pub fn secrets(&self) -> Vec<&SecretKeyRef> {
        self.credentials.iter().chain(self.ca()).collect()
    }
}

fn secret_key_ref(
    field: &'static str,
    secret: Option<&SecretReference>,
    key: &str,
) -> Option<SecretKeyRef> {
    let secret = secret?;
    let name = secret.name.as_deref().filter(|n| !n.is_empty())?;
    let namespace = secret.namespace.as_deref().filter(|n| !n.is_empty())?;
    Some(SecretKeyRef {
        field,
        namespace: namespace.to_string(),
        name: name.to_string(),
        key: key.to_string(),
    })
}

/// The host of a repository URL (`oci://host:port/path`, `http://[::1]:8080/`), brackets kept
/// around an IPv6 address; `None` without a scheme.
pub fn repository_host(url: &str) -> Option<String> {
    let (_, rest) = url.trim().split_once("://")?;
    let authority = rest.split('/').next().unwrap_or_default();
    // User information (`user:password@`) is not part of the host.
    let host_port = authority.rsplit('@').next().unwrap_or_default();
    let host = if let Some(v6) = host_port.strip_prefix('[') {
        format!("[{}]", v6.split(']').next().unwrap_or_default())
    } else {
        host_port.split(':').next().unwrap_or_default().to_string()
    };
    Some(host)
}

/// Hosts where plain HTTP is accepted: `http://` repositories and `oci://` registries without
/// TLS settings. Nothing on them crosses a network.
pub fn is_loopback_host(host: &str) -> bool {
    matches!(host, "127.0.0.1" | "localhost" | "[::1]")
}

/// Whether `repository` is an `oci://` registry.
pub fn is_oci(repository: &str) -> bool {
    repository.trim().starts_with("oci://")
}

/// Whether helm fetches from `repository` over plain HTTP (`--plain-http`): an `oci://`
/// registry whose `tlsConfig.insecurePlainHTTP` is true (any host, as Fleet v0.16.1
/// `internal/bundlereader/auth.go` `basicHTTP`), or on a loopback address for which the spec
/// has no `tlsConfig`. A certificate for
/// 127.0.0.1, localhost or ::1 can only come from a CA of one's own, so a loopback registry
/// serving HTTPS needs a `tlsConfig` (its CA, or no verification) anyway: its presence is what
/// says the registry serves HTTPS. Elsewhere a registry is always reached over HTTPS.
pub fn plain_http(repository: &str, access: &ChartAccess) -> bool {
    is_oci(repository)
        && match &access.tls {
            Some(tls) => tls.insecure_plain_http,
            None => repository_host(repository).is_some_and(|h| is_loopback_host(&h)),
        }
}

/// The value of `reference` in `secret` (`None`: the Secret does not exist), or what is
/// missing.
pub fn secret_value(secret: Option<&Secret>, reference: &SecretKeyRef) -> Result<Vec<u8>, String> {
    let Some(secret) = secret else {
        return Err(format!(
            "{}: Secret {} not found",
            reference.field,
            reference.secret()
        ));
    };
    let value = secret
        .data
        .as_ref()
        .and_then(|data| data.get(&reference.key))
        .map(|bytes| bytes.0.clone())
        .or_else(|| {
            secret
                .string_data
                .as_ref()
                .and_then(|data| data.get(&reference.key))
                .map(|text| text.as_bytes().to_vec())
        });
    match value {
        Some(bytes) if !bytes.is_empty() => Ok(bytes),
        _ => Err(format!(
            "{}: Secret {} has no key {:?}",
            reference.field,
            reference.secret(),
            reference.key
        )),
    }
}

/// The user and password of an `https://` repository: keys `username` and `password` of the
/// Secret `reference` names (a `kubernetes.io/basic-auth` Secret, as Fleet v0.16.1
/// `internal/bundlereader/auth.go` reads `helmSecretName`).
pub fn basic_auth(
    secret: Option<&Secret>,
    reference: &SecretKeyRef,
) -> Result<(String, String), String> {
    let value = |key: &str| {
        let key_ref = SecretKeyRef {
            key: key.to_string(),
            ..reference.clone()
        };
        String::from_utf8(secret_value(secret, &key_ref)?).map_err(|_| {
            format!(
                "{}: key {key:?} of Secret {} is not UTF-8",
                reference.field,
                reference.secret()
            )
        })
    };
    Ok((value("username")?, value("password")?))
}

/// Checks that `bytes` is a registry configuration helm reads: a JSON object whose `auths`
/// is an object. Says what is wrong without showing the content.
pub fn check_registry_config(bytes: &[u8], reference: &SecretKeyRef) -> Result<(), String> {
    let wrong = |what: &str| {
        format!(
            "{}: key {:?} of Secret {} {what} (expected a registry config.json: {{\"auths\": {{\"<host>:<port>\": {{\"auth\": \"<base64 of user:password>\"}}}}}}, as `helm registry login` writes it)",
            reference.field,
            reference.key,
            reference.secret()
        )
    };
    let value: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|_| wrong("is not JSON"))?;
    match value.get("auths") {
        Some(serde_json::Value::Object(_)) => Ok(()),
        _ => Err(wrong("has no \"auths\" object")),
    }
}

/// Checks that `bytes` holds at least one PEM certificate.
pub fn check_ca(bytes: &[u8], reference: &SecretKeyRef) -> Result<(), String> {
    let text = String::from_utf8_lossy(bytes);
    if text.contains("-----BEGIN CERTIFICATE-----") {
        Ok(())
    } else {
        Err(format!(
            "{}: key {:?} of Secret {} holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
            reference.field,
            reference.key,
            reference.secret()
        ))
    }
}

/// What a failed fetch from `repository` means and what to change, from helm's (scrubbed)
/// message; `None` when helm's own words say it.
pub fn hint(message: &str, repository: &str, access: &ChartAccess) -> Option<String> {
    let lower = message.to_ascii_lowercase();
    // Words, not a bare "401": a port number may hold those digits.
    let refused = [
        "status code 401",
        "401 unauthorized",
        "unauthorized",
        "authentication required",
    ]
    .iter()
    .any(|p| lower.contains(p));
    let no_credentials = [
        "basic credential not found",
        "credential required",
        "no basic auth credentials",
    ]
    .iter()
    .any(|p| lower.contains(p));
    if refused || no_credentials {
        return Some(match &access.credentials {
            Some(credentials) if is_oci(repository) => format!(
                "the registry refused the credentials of {} (Secret {}, key {:?}): check the user and password for this registry's host in it",
                credentials.field,
                credentials.secret(),
                credentials.key
            ),
            _ if is_oci(repository) => format!(
                "the registry needs credentials: set {} to a Secret holding a registry config.json",
                access.credentials_field
            ),
            Some(credentials) => format!(
                "the repository refused the user and password of {} (Secret {}, keys \"username\" and \"password\")",
                credentials.field,
                credentials.secret()
            ),
            None => format!(
                "the repository needs credentials: set {} to a kubernetes.io/basic-auth Secret (keys username and password)",
                access.credentials_field
            ),
        });
    }
    let untrusted = [
        "x509:",
        "certificate signed by unknown authority",
        "failed to verify certificate",
    ]
    .iter()
    .any(|p| lower.contains(p));
    if untrusted {
        return Some(match access.ca() {
            Some(ca) => format!(
                "the repository's certificate is not trusted with the CA of {} (Secret {}): check that it is the CA that signed the repository's certificate, for the name in the URL",
                ca.field,
                ca.secret()
            ),
            None => format!(
                "the repository's certificate is not signed by a CA the provider trusts: set {}.caSecret to a Secret holding that CA as ca.crt",
                access.tls_field
            ),
        });
    }
    if lower.contains("server gave http response to https client") {
        return Some(format!(
            "the registry serves plain HTTP: serve it over HTTPS, or set {}.insecurePlainHTTP: true",
            access.tls_field
        ));
    }
    if plain_http(repository, access)
        && (lower.contains("400 bad request") || lower.contains("400: bad request"))
    {
        return Some(format!(
            "a registry on a loopback address is reached over plain HTTP unless {} is set: set it (with the registry's CA) when the registry serves HTTPS",
            access.tls_field
        ));
    }
    None
}

/// helm's message with its [`hint`] appended, if there is one.
pub fn explain(message: &str, repository: &str, access: &ChartAccess) -> String {
    match hint(message, repository, access) {
        Some(hint) => format!("{message} ({hint})"),
        None => message.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;
    use std::collections::BTreeMap;

    fn reference(field: &'static str, key: &str) -> SecretKeyRef {
        SecretKeyRef {
            field,
            namespace: "caapf-system".to_string(),
            name: "registry".to_string(),
            key: key.to_string(),
        }
    }

    fn access(credentials: bool, tls: Option<(bool, bool)>) -> ChartAccess {
        ChartAccess {
            credentials: credentials.then(|| reference(INSTALL_CREDENTIALS, "config.json")),
            tls: tls.map(|(ca, insecure)| TlsAccess {
                ca: ca.then(|| reference("spec.install.tlsConfig.caSecret", CA_KEY)),
                insecure_skip_tls_verify: insecure,
                insecure_plain_http: false,
            }),
            credentials_field: INSTALL_CREDENTIALS,
            tls_field: INSTALL_TLS,
        }
    }

    #[test]
    fn from_spec_defaults_the_key_and_drops_incomplete_references() {
        let secret = |name: Option<&str>, namespace: Option<&str>| SecretReference {
            name: name.map(str::to_string),
            namespace: namespace.map(str::to_string),
        };
        let credentials = RegistryCredentials {
            secret: Some(secret(Some("registry"), Some("caapf-system"))),
            key: None,
        };
        let tls = ChartTlsConfig {
            ca_secret: Some(secret(Some("registry"), Some("caapf-system"))),
            insecure_skip_tls_verify: None,
            insecure_plain_http: None,
        };
        let got = ChartAccess::from_spec(
            Some(&credentials),
            Some(&tls),
            INSTALL_CREDENTIALS,
            INSTALL_TLS,
        );
        assert_eq!(got, access(true, Some((true, false))));
        assert_eq!(got.secrets().len(), 2);

        let with_key = RegistryCredentials {
            key: Some(".dockerconfigjson".to_string()),
            ..credentials.clone()
        };
        let got = ChartAccess::from_spec(Some(&with_key), None, AGENT_CREDENTIALS, AGENT_TLS);
        assert_eq!(
            got.credentials.map(|c| (c.field, c.key)),
            Some((AGENT_CREDENTIALS, ".dockerconfigjson".to_string()))
        );
        assert_eq!(got.tls, None);

        for incomplete in [
            secret(None, Some("ns")),
            secret(Some("n"), None),
            secret(Some(""), Some("ns")),
        ] {
            let credentials = RegistryCredentials {
                secret: Some(incomplete),
                key: None,
            };
            let got =
                ChartAccess::from_spec(Some(&credentials), None, INSTALL_CREDENTIALS, INSTALL_TLS);
            assert_eq!(got.credentials, None);
        }
        let empty_tls = ChartAccess::from_spec(
            None,
            Some(&ChartTlsConfig::default()),
            INSTALL_CREDENTIALS,
            INSTALL_TLS,
        );
        assert_eq!(empty_tls.tls, Some(TlsAccess::default()));
    }

    #[test]
    fn plain_http_only_for_oci_on_loopback_without_tls_settings() {
        let rows = [
            ("oci://127.0.0.1:5055/charts", None, true),
            ("oci://localhost:5000/charts", None, true),
            ("oci://[::1]:5000/charts", None, true),
            ("oci://localhost/charts", None, true),
            ("oci://127.0.0.1:5055/charts", Some((true, false)), false),
            ("oci://127.0.0.1:5055/charts", Some((false, true)), false),
            ("oci://127.0.0.1:5055/charts", Some((false, false)), false),
            ("oci://registry.example.com/charts", None, false),
            ("oci://127.0.0.1.example.com/charts", None, false),
            ("oci://localhost.example.com:5000/charts", None, false),
            ("oci://10.0.0.1:5000/charts", None, false),
            ("http://127.0.0.1:8080/", None, false),
            ("https://localhost/charts", None, false),
        ];
        let opt_in = ChartAccess {
            tls: Some(TlsAccess {
                insecure_plain_http: true,
                ..TlsAccess::default()
            }),
            ..access(false, None)
        };
        // The opt-in reaches a registry inside the cluster; never a chart repository (its URL
        // says http://).
        assert!(plain_http(
            "oci://registry.kube-system.svc:5000/charts",
            &opt_in
        ));
        assert!(!plain_http("https://charts.example.com/", &opt_in));
        for (repository, tls, want) in rows {
            assert_eq!(
                plain_http(repository, &access(false, tls)),
                want,
                "{repository} {tls:?}"
            );
        }
    }

    #[test]
    fn hosts() {
        let rows = [
            ("oci://127.0.0.1:5055/charts", Some("127.0.0.1")),
            ("oci://[::1]:5000/x", Some("[::1]")),
            (
                "https://user:pw@charts.example.com/",
                Some("charts.example.com"),
            ),
            ("http://localhost", Some("localhost")),
            ("charts.example.com", None),
        ];
        for (url, want) in rows {
            assert_eq!(repository_host(url).as_deref(), want, "{url}");
        }
    }

    #[test]
    fn secret_values_and_what_is_missing() {
        let reference = reference(INSTALL_CREDENTIALS, "config.json");
        assert_eq!(
            secret_value(None, &reference),
            Err("spec.install.credentials: Secret caapf-system/registry not found".to_string())
        );
        let mut secret = Secret::default();
        assert_eq!(
            secret_value(Some(&secret), &reference),
            Err(
                "spec.install.credentials: Secret caapf-system/registry has no key \"config.json\""
                    .to_string()
            )
        );
        secret.data = Some(BTreeMap::from([(
            "config.json".to_string(),
            ByteString(Vec::new()),
        )]));
        assert!(secret_value(Some(&secret), &reference).is_err(), "empty");
        secret.data = Some(BTreeMap::from([(
            "config.json".to_string(),
            ByteString(b"{}".to_vec()),
        )]));
        assert_eq!(secret_value(Some(&secret), &reference), Ok(b"{}".to_vec()));
        // stringData, as a client may send it (the API server folds it into data).
        let secret = Secret {
            string_data: Some(BTreeMap::from([(
                "config.json".to_string(),
                "{}".to_string(),
            )])),
            ..Secret::default()
        };
        assert_eq!(secret_value(Some(&secret), &reference), Ok(b"{}".to_vec()));
    }

    #[test]
    fn basic_auth_from_a_basic_auth_secret() {
        let reference = reference(INSTALL_CREDENTIALS, "config.json");
        let secret = |pairs: &[(&str, &[u8])]| Secret {
            type_: Some("kubernetes.io/basic-auth".to_string()),
            data: Some(
                pairs
                    .iter()
                    .map(|(k, v)| (k.to_string(), ByteString(v.to_vec())))
                    .collect(),
            ),
            ..Secret::default()
        };
        assert_eq!(
            basic_auth(
                Some(&secret(&[("username", b"fleet"), ("password", b"hunter2")])),
                &reference
            ),
            Ok(("fleet".to_string(), "hunter2".to_string()))
        );
        for (bad, want) in [
            (
                secret(&[("username", b"fleet")]),
                "spec.install.credentials: Secret caapf-system/registry has no key \"password\"",
            ),
            (
                secret(&[("username", b"fleet"), ("password", b"\xffhunter2")]),
                "spec.install.credentials: key \"password\" of Secret caapf-system/registry is not UTF-8",
            ),
        ] {
            assert_eq!(basic_auth(Some(&bad), &reference), Err(want.to_string()));
        }
    }

    #[test]
    fn contents_are_checked_without_being_shown() {
        let credentials = reference(INSTALL_CREDENTIALS, "config.json");
        assert!(
            check_registry_config(
                br#"{"auths": {"127.0.0.1:5000": {"auth": "eDp5"}}}"#,
                &credentials
            )
            .is_ok()
        );
        for (bad, why) in [
            (&b"user:hunter2"[..], "is not JSON"),
            (
                &br#"{"credsStore": "hunter2"}"#[..],
                "has no \"auths\" object",
            ),
            (&br#"{"auths": "hunter2"}"#[..], "has no \"auths\" object"),
        ] {
            let err = check_registry_config(bad, &credentials).expect_err("refused");
            assert!(err.contains(why), "{err}");
            assert!(
                err.starts_with(
                    "spec.install.credentials: key \"config.json\" of Secret caapf-system/registry"
                ),
                "{err}"
            );
            assert!(!err.contains("hunter2"), "{err}");
        }
        let ca = reference("spec.install.tlsConfig.caSecret", CA_KEY);
        assert!(
            check_ca(
                b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
                &ca
            )
            .is_ok()
        );
        let err = check_ca(b"hunter2", &ca).expect_err("refused");
        assert!(
            err.contains("holds no PEM certificate") && !err.contains("hunter2"),
            "{err}"
        );
    }

    #[test]
    fn hints_for_what_users_meet() {
        let oci = "oci://registry.example.com/charts";
        let local = "oci://127.0.0.1:5055/charts";
        let rows: Vec<(&str, &str, ChartAccess, Option<&str>)> = vec![
            (
                "GET \"https://registry.example.com/v2/charts/fleet/tags/list\": response status code 401: unauthorized: authentication required",
                oci,
                access(true, None),
                Some(
                    "the registry refused the credentials of spec.install.credentials (Secret caapf-system/registry, key \"config.json\")",
                ),
            ),
            (
                "GET \"https://registry.example.com/v2/charts/fleet/tags/list\": basic credential not found",
                oci,
                access(false, None),
                Some("the registry needs credentials: set spec.install.credentials"),
            ),
            (
                "GET \"https://r/v2/charts/fleet/tags/list\": credential required for basic auth",
                oci,
                access(false, None),
                Some("the registry needs credentials"),
            ),
            (
                "looks like \"https://charts.example.com/\" is not a valid chart repository or cannot be reached: failed to fetch https://charts.example.com/index.yaml : 401 Unauthorized",
                "https://charts.example.com/",
                access(false, None),
                Some("set spec.install.credentials to a kubernetes.io/basic-auth Secret"),
            ),
            (
                "looks like \"https://charts.example.com/\" is not a valid chart repository or cannot be reached: failed to fetch https://charts.example.com/index.yaml : 401 Unauthorized",
                "https://charts.example.com/",
                access(true, None),
                Some(
                    "the repository refused the user and password of spec.install.credentials (Secret caapf-system/registry, keys \"username\" and \"password\")",
                ),
            ),
            (
                "Get \"https://registry.example.com/v2/\": tls: failed to verify certificate: x509: certificate signed by unknown authority",
                oci,
                access(false, None),
                Some("set spec.install.tlsConfig.caSecret to a Secret holding that CA as ca.crt"),
            ),
            (
                "tls: failed to verify certificate: x509: certificate signed by unknown authority",
                oci,
                access(false, Some((true, false))),
                Some(
                    "not trusted with the CA of spec.install.tlsConfig.caSecret (Secret caapf-system/registry)",
                ),
            ),
            (
                "Get \"https://127.0.0.1:5055/v2/charts/fleet/tags/list\": http: server gave HTTP response to HTTPS client",
                "oci://registry.example.com:5055/charts",
                access(false, None),
                Some("the registry serves plain HTTP"),
            ),
            (
                "GET \"http://127.0.0.1:5057/v2/charts/fleet/tags/list\": response status code 400: Bad Request",
                local,
                access(false, None),
                Some("reached over plain HTTP unless spec.install.tlsConfig is set"),
            ),
            // A port holding "401" is not an answer 401.
            (
                "failed to perform \"FetchReference\" on source: GET \"http://127.0.0.1:46401/v2/charts/fleet-crd/manifests/0.1.0\": response status code 400: Bad Request",
                local,
                access(false, None),
                Some("reached over plain HTTP unless spec.install.tlsConfig is set"),
            ),
            (
                "Get \"http://127.0.0.1:40133/v2/\": dial tcp 127.0.0.1:40133: connect: connection refused",
                "oci://127.0.0.1:40133/charts",
                access(false, None),
                None,
            ),
            (
                "failed to perform \"FetchReference\" on source: 127.0.0.1:5055/charts/fleet:9.9.9: not found",
                local,
                access(false, None),
                None,
            ),
            (
                "Get \"http://127.0.0.1:5056/v2/charts/fleet/tags/list\": dial tcp 127.0.0.1:5056: connect: connection refused",
                local,
                access(false, None),
                None,
            ),
        ];
        for (message, repository, access, want) in rows {
            let got = hint(message, repository, &access);
            match want {
                None => assert_eq!(got, None, "{message}"),
                Some(part) => assert!(
                    got.as_deref().is_some_and(|g| g.contains(part)),
                    "{message}: {got:?} lacks {part:?}"
                ),
            }
        }
        assert_eq!(explain("boom", local, &access(false, None)), "boom");
        assert!(
            explain("401 unauthorized", local, &access(false, None))
                .starts_with("401 unauthorized (the registry needs credentials")
        );
    }
}
