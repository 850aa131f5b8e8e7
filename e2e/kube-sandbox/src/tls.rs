//! HTTPS on the API port ([`crate::SandboxOptions::tls`]).
//!
//! Why it exists: client-go reads the credentials of a kubeconfig user (token, client
//! certificate, auth provider, exec plugin) only when the transport is TLS. In
//! `k8s.io/client-go` `tools/clientcmd/client_config.go`, `DirectClientConfig.ClientConfig`:
//! "only try to read the auth information if we are secure", `if
//! restclient.IsConfigTransportTLS(*clientConfig) { ... getUserIdentificationPartialConfig ...
//! }`. Over plain HTTP kubectl and helm send no `Authorization` header and are the sandbox's
//! admin; over HTTPS they send the kubeconfig's bearer token and are authorized as its owner.
//!
//! Over TLS, client-go also wants some credential: with none in the kubeconfig it prompts for a
//! username and password (`getUserIdentificationPartialConfig`: `if !canIdentifyUser(...) &&
//! (fallbackReader != nil)`, then `NewPromptingAuthLoader(...).Prompt()`), and kubectl fails
//! with `EOF` when stdin is not a terminal. So over TLS the admin's kubeconfig carries a bearer
//! token for the admin ([`TlsMaterial::admin_token`]), as a real cluster's admin kubeconfig
//! carries a client certificate; a request without `Authorization` is still the admin.
//!
//! At start a fresh CA and a serving certificate signed by it (SANs `127.0.0.1`, `::1`,
//! `localhost` and the listen address) are generated in memory; kubeconfigs carry the CA as
//! `certificate-authority-data`, and [`crate::Sandbox::client`] trusts it. Nothing is written to
//! disk and the CA key never leaves the process.

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

/// A client that opens a connection and never finishes the handshake is dropped after this.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The generated CA and the server's TLS configuration.
pub struct TlsMaterial {
    ca_pem: String,
    ca_der: Vec<u8>,
    server: Arc<rustls::ServerConfig>,
    admin_token: String,
}

impl std::fmt::Debug for TlsMaterial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsMaterial").finish_non_exhaustive()
    }
}

impl TlsMaterial {
    /// A new CA, and a serving certificate it signs for loopback and `listen` (when it is a
    /// specific address).
    pub fn generate(listen: IpAddr) -> Result<TlsMaterial, String> {
        let err = |what: &str, e: rcgen::Error| format!("{what}: {e}");
        let mut ca_params =
            CertificateParams::new(Vec::<String>::new()).map_err(|e| err("CA parameters", e))?;
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "kube-sandbox CA");
        let ca_key = KeyPair::generate().map_err(|e| err("CA key", e))?;
        let ca = ca_params
            .self_signed(&ca_key)
            .map_err(|e| err("CA certificate", e))?;
        let issuer = Issuer::new(ca_params, ca_key);

        let mut names = vec![
            "127.0.0.1".to_string(),
            "::1".to_string(),
            "localhost".to_string(),
        ];
        if !listen.is_unspecified() && !names.contains(&listen.to_string()) {
            names.push(listen.to_string());
        }
        let mut params = CertificateParams::new(names).map_err(|e| err("parameters", e))?;
        params
            .distinguished_name
            .push(DnType::CommonName, "kube-apiserver");
        let key = KeyPair::generate().map_err(|e| err("key", e))?;
        let cert = params
            .signed_by(&key, &issuer)
            .map_err(|e| err("serving certificate", e))?;

        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut server = rustls::ServerConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
            .map_err(|e| format!("TLS versions: {e}"))?
            .with_no_client_auth()
            .with_single_cert(
                vec![cert.der().clone(), ca.der().clone()],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
            )
            .map_err(|e| format!("TLS configuration: {e}"))?;
        // As a real API server: HTTP/2 when the client offers it (client-go does), else 1.1.
        server.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(TlsMaterial {
            ca_pem: ca.pem(),
            ca_der: ca.der().to_vec(),
            server: Arc::new(server),
            admin_token: format!("kube-sandbox-admin-{}", crate::util::new_uid()),
        })
    }

    /// The CA certificate (PEM) clients trust.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// The bearer token of the admin (`system:masters`) in kubeconfigs without another token.
    pub fn admin_token(&self) -> &str {
        &self.admin_token
    }

    /// The CA certificate (DER).
    pub fn ca_der(&self) -> CertificateDer<'static> {
        CertificateDer::from(self.ca_der.clone())
    }
}

type Handshake = Pin<Box<dyn Future<Output = Option<(TlsStream<TcpStream>, SocketAddr)>> + Send>>;

/// An [`axum::serve::Listener`] that accepts TCP connections and hands out those whose TLS
/// handshake succeeded. Handshakes run concurrently while the server waits for the next
/// connection (axum polls `accept` continuously), so a slow client does not hold up others; the
/// TCP listener is owned here and closed when the server drops it.
pub struct TlsListener {
    tcp: TcpListener,
    acceptor: TlsAcceptor,
    pending: FuturesUnordered<Handshake>,
}

impl TlsListener {
    /// Serves TLS with `material` on an already bound listener.
    pub fn new(tcp: TcpListener, material: &TlsMaterial) -> TlsListener {
        TlsListener {
            tcp,
            acceptor: TlsAcceptor::from(material.server.clone()),
            pending: FuturesUnordered::new(),
        }
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            tokio::select! {
                accepted = self.tcp.accept() => match accepted {
                    Ok((stream, peer)) => {
                        // client-go's dialer sets TCP_NODELAY too; small HTTP/2 frames must not
                        // wait for Nagle's algorithm.
                        let _ = stream.set_nodelay(true);
                        let acceptor = self.acceptor.clone();
                        self.pending.push(Box::pin(async move {
                            match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                                Ok(Ok(tls)) => Some((tls, peer)),
                                Ok(Err(e)) => {
                                    tracing::debug!(%peer, error = %e, "TLS handshake failed");
                                    None
                                }
                                Err(_) => {
                                    tracing::debug!(%peer, "TLS handshake timed out");
                                    None
                                }
                            }
                        }));
                    }
                    Err(e) => {
                        // E.g. out of file descriptors: pause instead of spinning.
                        tracing::warn!(error = %e, "accepting a connection");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                },
                Some(done) = self.pending.next(), if !self.pending.is_empty() => {
                    if let Some(connection) = done {
                        return connection;
                    }
                }
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.tcp.local_addr()
    }
}
