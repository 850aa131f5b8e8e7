//! What helm needs to reach a private repository: the registry configuration and CA the spec
//! names in Secrets ([`crate::model::chart_access`]), read when a command needs them and written
//! as files only we can read (mode 0600, in a private directory under helm's home, removed
//! when dropped). helm gets their paths (`--registry-config`, `--ca-file`), never their content;
//! an `https://` repository's password reaches helm on its standard input (`helm repo add
//! --password-stdin` into a private repository config, helm v4.1.4 `pkg/cmd/repo_add.go`).

use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::Api;

use super::argv::{AccessArgs, ChartSource};
use super::{private_dir_builder, write_private};
use crate::model::chart_access::{self, ChartAccess};

/// The contents helm needs, read from the Secrets. `Debug` shows only what is present.
#[derive(Clone, Default)]
pub struct AccessData {
    /// The registry configuration (`config.json`).
    pub registry_config: Option<Vec<u8>>,
    /// The PEM CA.
    pub ca: Option<Vec<u8>>,
    /// The user and password of an `https://` repository.
    pub basic_auth: Option<(String, String)>,
}

impl std::fmt::Debug for AccessData {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AccessData")
            .field(
                "registry_config",
                &self.registry_config.as_ref().map(|_| "<redacted>"),
            )
            .field("ca", &self.ca.as_ref().map(|_| "<redacted>"))
            .field(
                "basic_auth",
                &self.basic_auth.as_ref().map(|_| "<redacted>"),
            )
            .finish()
    }
}

/// Reads the Secrets `access` names (one GET each, only when it names any) and checks their
/// contents. Errors name the field, the Secret and the key, never a value.
pub async fn read(
    client: &Client,
    access: &ChartAccess,
    repository: &str,
) -> Result<AccessData, String> {
    let mut data = AccessData::default();
    if let Some(reference) = access
        .credentials
        .as_ref()
        .filter(|_| !chart_access::is_oci(repository))
    {
        data.basic_auth = Some(chart_access::basic_auth(
            secret(client, reference).await?.as_ref(),
            reference,
        )?);
    } else if let Some(reference) = &access.credentials {
        let bytes = value(client, reference).await?;
        chart_access::check_registry_config(&bytes, reference)?;
        data.registry_config = Some(bytes);
    }
    if let Some(reference) = access.ca() {
        let bytes = value(client, reference).await?;
        chart_access::check_ca(&bytes, reference)?;
        data.ca = Some(bytes);
    }
    Ok(data)
}

async fn value(client: &Client, reference: &chart_access::SecretKeyRef) -> Result<Vec<u8>, String> {
    chart_access::secret_value(secret(client, reference).await?.as_ref(), reference)
}

async fn secret(
    client: &Client,
    reference: &chart_access::SecretKeyRef,
) -> Result<Option<Secret>, String> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &reference.namespace);
    secrets.get_opt(&reference.name).await.map_err(|err| {
        format!(
            "{}: reading Secret {}: {err}",
            reference.field,
            reference.secret()
        )
    })
}

/// The files of an [`AccessData`], in a private directory removed on drop.
pub struct AccessFiles {
    /// `None` when there is nothing to write.
    dir: Option<tempfile::TempDir>,
    registry_config: Option<PathBuf>,
    ca_file: Option<PathBuf>,
    /// Where `helm repo add` writes the repository with its user and password.
    pub(super) repository_config: Option<PathBuf>,
}

impl AccessFiles {
    /// Writes `data` under `parent` (a directory of mode 0700 holding files of mode 0600).
    pub fn write(parent: &Path, data: &AccessData) -> std::io::Result<Self> {
        if data.registry_config.is_none() && data.ca.is_none() && data.basic_auth.is_none() {
            return Ok(Self {
                dir: None,
                registry_config: None,
                ca_file: None,
                repository_config: None,
            });
        }
        std::fs::create_dir_all(parent)?;
        let dir = private_dir_builder("access-").tempdir_in(parent)?;
        let registry_config = match &data.registry_config {
            Some(bytes) => Some(write_private(dir.path(), "config.json", bytes)?),
            None => None,
        };
        let ca_file = match &data.ca {
            Some(bytes) => Some(write_private(dir.path(), "ca.crt", bytes)?),
            None => None,
        };
        let repository_config = data
            .basic_auth
            .is_some()
            .then(|| dir.path().join("repositories.yaml"));
        Ok(Self {
            dir: Some(dir),
            registry_config,
            ca_file,
            repository_config,
        })
    }

    /// The private directory, if anything was written.
    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_ref().map(tempfile::TempDir::path)
    }

    /// `repository` reached with these files and `access`'s other settings (plain HTTP, no
    /// verification).
    pub fn source(&self, repository: &str, access: &ChartAccess) -> ChartSource {
        ChartSource::parse(repository).with_access(AccessArgs {
            plain_http: chart_access::plain_http(repository, access),
            insecure_skip_tls_verify: access.insecure_skip_tls_verify(),
            ca_file: self.ca_file.clone(),
            registry_config: self.registry_config.clone(),
            repository_config: self.repository_config.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::chart_access::{INSTALL_CREDENTIALS, INSTALL_TLS, SecretKeyRef, TlsAccess};

    #[test]
    fn files_are_private_named_by_path_and_removed() {
        let parent = tempfile::tempdir().expect("tempdir");
        let data = AccessData {
            registry_config: Some(br#"{"auths": {}}"#.to_vec()),
            ca: Some(b"-----BEGIN CERTIFICATE-----".to_vec()),
            basic_auth: Some(("fleet".to_string(), "hunter2".to_string())),
        };
        assert!(!format!("{data:?}").contains("auths") && !format!("{data:?}").contains("hunter2"));
        let files = AccessFiles::write(parent.path(), &data).expect("written");
        let dir = files.dir().expect("dir").to_path_buf();
        let access = ChartAccess {
            credentials: Some(SecretKeyRef {
                field: INSTALL_CREDENTIALS,
                namespace: "ns".to_string(),
                name: "r".to_string(),
                key: "config.json".to_string(),
            }),
            tls: Some(TlsAccess::default()),
            credentials_field: INSTALL_CREDENTIALS,
            tls_field: INSTALL_TLS,
        };
        let source = files.source("oci://127.0.0.1:5055/charts", &access);
        let registry_config = source.access.registry_config.clone().expect("config");
        let ca_file = source.access.ca_file.clone().expect("ca");
        // A tlsConfig says the loopback registry serves HTTPS.
        assert!(!source.access.plain_http);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = |p: &Path| std::fs::metadata(p).expect("stat").permissions().mode() & 0o777;
            assert_eq!(mode(&dir), 0o700);
            assert_eq!(mode(&registry_config), 0o600);
            assert_eq!(mode(&ca_file), 0o600);
        }
        assert_eq!(
            std::fs::read(&registry_config).expect("read"),
            br#"{"auths": {}}"#
        );
        drop(files);
        assert!(!dir.exists());

        // Nothing to write: no directory, no flags but plain HTTP on loopback.
        let none = AccessFiles::write(parent.path(), &AccessData::default()).expect("nothing");
        assert!(none.dir().is_none());
        let source = none.source("oci://127.0.0.1:5055/charts", &ChartAccess::default());
        assert!(source.access.plain_http);
        assert_eq!(
            (source.access.ca_file, source.access.registry_config),
            (None, None)
        );
    }
}
