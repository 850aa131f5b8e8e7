//! The runtime extension's HTTPS from a client's side, for every test that talks to it: a test
//! CA and serving certificates written as a mounted Secret is, the extension served in-process
//! on 127.0.0.1, and a client trusting the CA that POSTs a body (without a Content-Type header,
//! as CAPI sends it) over HTTP/2 or HTTP/1.1, as negotiated by ALPN, and reads status and body.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use caapf::context::ConfigSender;
use caapf::hooks::hook_context::HookContext;
use caapf::hooks::server::{self, ServerOptions};
use caapf::model::config::EffectiveConfig;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

/// The path of the Discovery hook.
pub const DISCOVERY: &str = "/hooks.runtime.cluster.x-k8s.io/v1alpha1/discovery";

/// A DiscoveryRequest body.
pub fn discovery_request() -> Vec<u8> {
    serde_json::to_vec(&json!({"apiVersion": "hooks.runtime.cluster.x-k8s.io/v1alpha1", "kind": "DiscoveryRequest"}))
        .expect("json")
}

/// A test CA that signs serving certificates.
pub struct Ca {
    issuer: Issuer<'static, KeyPair>,
    /// The CA certificate, the one root a client trusts.
    pub der: CertificateDer<'static>,
}

/// A serving certificate and its key, as PEM, and the certificate as the client sees it.
pub struct Serving {
    pub cert: String,
    pub key: String,
    pub der: CertificateDer<'static>,
}

impl Ca {
    pub fn new() -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, "caapf test CA");
        let key = KeyPair::generate().expect("key");
        let cert = params.self_signed(&key).expect("CA");
        Ca {
            der: cert.der().clone(),
            issuer: Issuer::new(params, key),
        }
    }

    /// A serving certificate for `localhost`, 127.0.0.1 and the webhook Service's name, with
    /// `common_name` as its CN (so that two are told apart).
    pub fn serving(&self, common_name: &str) -> Serving {
        let mut params = CertificateParams::new(vec![
            "localhost".to_string(),
            "127.0.0.1".to_string(),
            "caapf-webhook-service.caapf-system.svc".to_string(),
        ])
        .expect("params");
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        let key = KeyPair::generate().expect("key");
        let cert = params.signed_by(&key, &self.issuer).expect("sign");
        Serving {
            cert: cert.pem(),
            key: key.serialize_pem(),
            der: cert.der().clone(),
        }
    }

    /// A new serving certificate installed in `dir` (created if missing) as `tls.crt` and
    /// `tls.key`; returns it as the client sees it.
    pub fn install_serving(&self, dir: &Path, common_name: &str) -> CertificateDer<'static> {
        let serving = self.serving(common_name);
        std::fs::create_dir_all(dir).expect("cert dir");
        install(dir, &serving.cert, &serving.key);
        serving.der
    }

    /// A client trusting this CA (and nothing else) that offers `alpn`.
    pub fn connector(&self, alpn: &[&[u8]]) -> TlsConnector {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.der.clone()).expect("root");
        let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        TlsConnector::from(Arc::new(config))
    }
}

/// Writes the pair the way the kubelet updates a mounted Secret: new files, then renamed over.
pub fn install(dir: &Path, cert: &str, key: &str) {
    for (name, content) in [("tls.crt", cert), ("tls.key", key)] {
        let tmp = dir.join(format!(".{name}.tmp"));
        std::fs::write(&tmp, content).expect("write");
        std::fs::rename(&tmp, dir.join(name)).expect("rename");
    }
}

/// A TLS connection to `addr`: to the name `localhost` (`sni: true`), or by IP address, for
/// which rustls sends no SNI (`sni: false`).
pub async fn tls(
    addr: SocketAddr,
    connector: &TlsConnector,
    sni: bool,
) -> std::io::Result<TlsStream<TcpStream>> {
    let tcp = TcpStream::connect(addr).await?;
    // As Go's net package (Cluster API's client) does by default.
    tcp.set_nodelay(true)?;
    let name = if sni {
        ServerName::try_from("localhost").expect("name")
    } else {
        ServerName::IpAddress(addr.ip().into())
    };
    connector.connect(name, tcp).await
}

/// An HTTP connection over TLS: HTTP/2 when the server chose `h2`, else HTTP/1.1. Clones share
/// the connection (HTTP/2 streams, or HTTP/1.1 requests one after the other).
#[derive(Clone)]
pub struct Connection {
    sender: Sender,
    /// The protocol the server chose by ALPN.
    pub alpn: Option<Vec<u8>>,
    /// The certificate the server presented.
    pub peer: CertificateDer<'static>,
}

#[derive(Clone)]
enum Sender {
    Http1(Arc<tokio::sync::Mutex<http1::SendRequest<Full<Bytes>>>>),
    Http2(http2::SendRequest<Full<Bytes>>),
}

/// An HTTP answer: its status code and body.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub body: Bytes,
}

impl Reply {
    /// The body as JSON.
    pub fn json(&self) -> Result<Value, String> {
        serde_json::from_slice(&self.body).map_err(|e| format!("not JSON ({e}): {:?}", self.body))
    }
}

impl Connection {
    /// Connects to `addr` through `connector` (to the name `localhost`) and starts HTTP on it.
    pub async fn open(addr: SocketAddr, connector: &TlsConnector) -> Result<Connection, String> {
        let tls = tls(addr, connector, true)
            .await
            .map_err(|e| format!("TLS: {e}"))?;
        let (_, session) = tls.get_ref();
        let alpn = session.alpn_protocol().map(<[u8]>::to_vec);
        let peer = session
            .peer_certificates()
            .and_then(|certs| certs.first().cloned())
            .ok_or("no peer certificate")?
            .into_owned();
        let io = TokioIo::new(tls);
        let sender = if alpn.as_deref() == Some(b"h2") {
            let (sender, conn) = http2::handshake(TokioExecutor::new(), io)
                .await
                .map_err(|e| format!("h2 handshake: {e}"))?;
            tokio::spawn(conn);
            Sender::Http2(sender)
        } else {
            let (sender, conn) = http1::handshake(io)
                .await
                .map_err(|e| format!("http1 handshake: {e}"))?;
            tokio::spawn(conn);
            Sender::Http1(Arc::new(tokio::sync::Mutex::new(sender)))
        };
        Ok(Connection { sender, alpn, peer })
    }

    /// POSTs `body` to `path` (no Content-Type header, as CAPI sends it) and reads the answer.
    pub async fn post(&self, path: &str, body: impl Into<Bytes>) -> Result<Reply, String> {
        let request = hyper::Request::post(path)
            .header("host", "localhost")
            .body(Full::new(body.into()))
            .map_err(|e| e.to_string())?;
        let response = match &self.sender {
            Sender::Http2(sender) => sender.clone().send_request(request).await,
            Sender::Http1(sender) => {
                let mut sender = sender.lock().await;
                sender.ready().await.map_err(|e| e.to_string())?;
                sender.send_request(request).await
            }
        }
        .map_err(|e| format!("request: {e}"))?;
        let status = response.status().as_u16();
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|e| format!("body: {e}"))?
            .to_bytes();
        Ok(Reply { status, body })
    }
}

/// An answer of the extension over a fresh connection.
pub struct Answer {
    pub status: u16,
    pub body: Value,
    pub alpn: Option<Vec<u8>>,
    pub peer: CertificateDer<'static>,
}

/// One POST over a fresh connection trusting `ca` and offering `alpn`; panics unless the
/// answer is JSON.
pub async fn post(addr: SocketAddr, ca: &Ca, alpn: &[&[u8]], path: &str, body: Vec<u8>) -> Answer {
    let connection = Connection::open(addr, &ca.connector(alpn))
        .await
        .unwrap_or_else(|e| panic!("connecting: {e}"));
    let reply = connection
        .post(path, body)
        .await
        .unwrap_or_else(|e| panic!("{path}: {e}"));
    Answer {
        status: reply.status,
        body: reply.json().unwrap_or_else(|e| panic!("{path}: {e}")),
        alpn: connection.alpn,
        peer: connection.peer,
    }
}

/// A client for an API server at `url`.
pub fn client_for(url: &str) -> kube::Client {
    kube::Client::try_from(kube::Config::new(url.parse().expect("url"))).expect("client")
}

/// An API server address never contacted by the tests that use it (discovery and topology
/// hooks do no I/O).
pub const UNUSED_API_SERVER: &str = "http://127.0.0.1:9";

/// The extension served in-process on 127.0.0.1, with its certificate directory; shut down when
/// dropped.
pub struct Server {
    pub addr: SocketAddr,
    pub ctx: Arc<HookContext>,
    _config: ConfigSender,
    _dir: tempfile::TempDir,
    pub dir: PathBuf,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.ctx.base.shutdown.cancel();
    }
}

impl Server {
    /// Serves with `options`, the API server at `api_url` and `config`; with a serving
    /// certificate (CN `serving-1`) from `ca` installed first, none without.
    pub async fn start(
        ca: Option<&Ca>,
        options: ServerOptions,
        api_url: &str,
        config: EffectiveConfig,
    ) -> Server {
        let dir = tempfile::tempdir().expect("tempdir");
        if let Some(ca) = ca {
            ca.install_serving(dir.path(), "serving-1");
        }
        let (ctx, tx) = super::hook_context(client_for(api_url), config);
        let addr = server::serve(
            ctx.clone(),
            SocketAddr::from(([127, 0, 0, 1], 0)),
            dir.path(),
            options,
        )
        .await
        .expect("serve");
        Server {
            addr,
            ctx,
            _config: tx,
            dir: dir.path().to_path_buf(),
            _dir: dir,
        }
    }

    /// Serves with `options`, the default configuration and an API server never contacted.
    pub async fn with_options(ca: Option<&Ca>, options: ServerOptions) -> Server {
        Server::start(ca, options, UNUSED_API_SERVER, EffectiveConfig::default()).await
    }
}
