//! The serving certificate of the extension: `tls.crt` and `tls.key` in `--webhook-cert-dir`,
//! reloaded without a restart when they change (cert-manager rotates them; the kubelet swaps the
//! mounted Secret's files atomically).
//!
//! Before every TLS handshake the server checks whether the files changed (two `stat` calls:
//! size, modification time and inode of each file) and loads them when they did; a background
//! task does the same periodically so readiness follows the files without traffic. Both run
//! [`CertStore::refresh`] on tokio's blocking pool (`spawn_blocking`, see `server.rs`): it does
//! file-system calls and must not stall an async worker. The rustls resolver only reads the
//! pair already loaded. A new pair that does not load
//! (unparsable, or key and certificate that do not match) keeps the previous one and is logged
//! once.

use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::SystemTime;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use crate::probes::Readiness;

/// File name of the certificate chain (PEM).
pub const CERT_FILE: &str = "tls.crt";
/// File name of the private key (PEM).
pub const KEY_FILE: &str = "tls.key";

/// What identifies one version of the files.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Fingerprint {
    cert: (u64, Option<SystemTime>, u64),
    key: (u64, Option<SystemTime>, u64),
}

#[derive(Default)]
struct State {
    current: Option<Arc<CertifiedKey>>,
    /// Files behind `current`.
    loaded: Option<Fingerprint>,
    /// Files that failed to load (not retried until they change).
    failed: Option<Fingerprint>,
    /// Whether "missing" was already logged.
    missing_logged: bool,
}

/// Result of looking at the files.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refresh {
    /// The files are those already served.
    Unchanged,
    /// A new pair is served.
    Loaded,
    /// One of the files does not exist (or cannot be read).
    Missing(String),
    /// The files changed but do not form a valid pair; the previous pair (if any) is served.
    Invalid(String),
}

/// Loads and serves the certificate pair; a rustls [`ResolvesServerCert`].
pub struct CertStore {
    dir: PathBuf,
    provider: Arc<CryptoProvider>,
    state: RwLock<State>,
    /// Readiness check following whether a pair is served.
    readiness: Option<(Readiness, &'static str)>,
}

impl std::fmt::Debug for CertStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertStore")
            .field("dir", &self.dir)
            .field("loaded", &self.is_loaded())
            .finish()
    }
}

impl CertStore {
    /// A store for `dir`; nothing is loaded until [`CertStore::refresh`].
    pub fn new(dir: impl Into<PathBuf>, provider: Arc<CryptoProvider>) -> Self {
        CertStore {
            dir: dir.into(),
            provider,
            state: RwLock::new(State::default()),
            readiness: None,
        }
    }

    /// Keeps the readiness check `name` equal to [`CertStore::is_loaded`] (registered now, not
    /// ready until a pair loads).
    pub fn with_readiness(mut self, readiness: Readiness, name: &'static str) -> Self {
        readiness.register(name);
        self.readiness = Some((readiness, name));
        self
    }

    /// Whether a valid pair is being served.
    pub fn is_loaded(&self) -> bool {
        self.read().current.is_some()
    }

    /// Loads the files if they changed since the last look. Blocking (file-system calls): call
    /// it from a blocking thread.
    pub fn refresh(&self) -> Refresh {
        let result = self.refresh_files();
        if let Some((readiness, name)) = &self.readiness {
            readiness.set(name, self.is_loaded());
        }
        result
    }

    fn refresh_files(&self) -> Refresh {
        let fingerprint = match self.fingerprint() {
            Ok(fingerprint) => fingerprint,
            Err(reason) => {
                let mut state = self.write();
                if !state.missing_logged {
                    state.missing_logged = true;
                    tracing::warn!(dir = %self.dir.display(), %reason, "runtime extension certificate not available yet; retrying");
                }
                return Refresh::Missing(reason);
            }
        };
        {
            let state = self.read();
            if state.loaded == Some(fingerprint) {
                return Refresh::Unchanged;
            }
            if state.failed == Some(fingerprint) {
                return Refresh::Invalid("unchanged since the last failure".to_string());
            }
        }
        match self.load() {
            Ok(key) => {
                let mut state = self.write();
                state.current = Some(Arc::new(key));
                state.loaded = Some(fingerprint);
                state.failed = None;
                state.missing_logged = false;
                tracing::info!(dir = %self.dir.display(), "runtime extension certificate loaded");
                Refresh::Loaded
            }
            Err(reason) => {
                let mut state = self.write();
                state.failed = Some(fingerprint);
                tracing::warn!(
                    dir = %self.dir.display(),
                    %reason,
                    serving_previous = state.current.is_some(),
                    "runtime extension certificate files changed but do not load; keeping the previous certificate"
                );
                Refresh::Invalid(reason)
            }
        }
    }

    fn fingerprint(&self) -> Result<Fingerprint, String> {
        let stat = |name: &str| -> Result<(u64, Option<SystemTime>, u64), String> {
            let path = self.dir.join(name);
            let meta =
                std::fs::metadata(&path).map_err(|err| format!("{}: {err}", path.display()))?;
            Ok((meta.len(), meta.modified().ok(), meta.ino()))
        };
        Ok(Fingerprint {
            cert: stat(CERT_FILE)?,
            key: stat(KEY_FILE)?,
        })
    }

    fn load(&self) -> Result<CertifiedKey, String> {
        let cert_path = self.dir.join(CERT_FILE);
        let key_path = self.dir.join(KEY_FILE);
        let cert_pem =
            std::fs::read(&cert_path).map_err(|err| format!("{}: {err}", cert_path.display()))?;
        let key_pem =
            std::fs::read(&key_path).map_err(|err| format!("{}: {err}", key_path.display()))?;
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&cert_pem)
            .collect::<Result<_, _>>()
            .map_err(|err| format!("{}: {err}", cert_path.display()))?;
        if certs.is_empty() {
            return Err(format!("{}: no certificate", cert_path.display()));
        }
        let key = PrivateKeyDer::from_pem_slice(&key_pem)
            .map_err(|err| format!("{}: {err}", key_path.display()))?;
        let certified = CertifiedKey::from_der(certs, key, &self.provider)
            .map_err(|err| format!("{} and {}: {err}", cert_path.display(), key_path.display()))?;
        Ok(certified)
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, State> {
        self.state.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, State> {
        self.state.write().unwrap_or_else(|p| p.into_inner())
    }
}

impl ResolvesServerCert for CertStore {
    /// The pair loaded by the last [`CertStore::refresh`]; no I/O (this runs inside the
    /// handshake, on an async worker). The server refreshes before each handshake.
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.read().current.clone()
    }
}
