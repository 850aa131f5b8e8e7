//! A real OCI registry on 127.0.0.1: the CNCF Distribution registry (`docker-registry`, which
//! `make tools` installs through `hack/install-registry.sh`) as a child process, with its
//! storage in a temporary directory, optionally serving TLS with a certificate the test makes
//! and asking for basic auth (htpasswd). Charts are pushed with the real `helm push`.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{helm, package_agent_chart, packaged_charts};

/// The user the registry accepts when it asks for basic auth.
pub const USER: &str = "caapf";
/// That user's password.
pub const PASSWORD: &str = "caapf-test-password";
/// bcrypt of [`PASSWORD`] (the only hash the registry's htpasswd accepts), cost 4 so that the
/// registry's check is fast; made with `python3 -c 'import crypt;
/// print(crypt.crypt("caapf-test-password", crypt.mksalt(crypt.METHOD_BLOWFISH, rounds=16)))'`.
/// A test that logs in proves it.
const PASSWORD_BCRYPT: &str = "$2b$04$Dcjx6wu8RWLFjHBUMVorsON7Do0oJmte9XemJYOdCqO6I/qXdiRzq";

/// The registry binary: `REGISTRY_BIN`, else Debian's `/usr/bin/docker-registry`. Fails (does not
/// skip) when missing.
pub fn registry_bin() -> PathBuf {
    let path = std::env::var_os("REGISTRY_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/docker-registry"));
    assert!(
        path.is_file(),
        "docker-registry not found at {}: run hack/install-registry.sh (or `make tools`), or set REGISTRY_BIN",
        path.display()
    );
    path
}

/// How the registry serves.
#[derive(Clone, Default)]
pub struct RegistryOptions {
    /// Serve HTTPS with this certificate and key (PEM), signed by `ca` (PEM).
    pub tls: Option<Tls>,
    /// Ask for basic auth ([`USER`], [`PASSWORD`]).
    pub basic_auth: bool,
}

/// A serving certificate and the CA that signed it, as PEM.
#[derive(Clone)]
pub struct Tls {
    pub cert: String,
    pub key: String,
    pub ca: String,
}

/// A running registry; stopped (killed) when dropped.
pub struct Registry {
    dir: tempfile::TempDir,
    addr: SocketAddr,
    options: RegistryOptions,
    child: Option<Child>,
}

impl Registry {
    /// Starts a registry on a free port of 127.0.0.1 and waits until it accepts connections.
    pub fn start(options: RegistryOptions) -> Registry {
        // A port the kernel says is free; another process may take it before the registry
        // binds it: then the registry exits and another port is tried.
        let mut last_log = String::new();
        for _ in 0..5 {
            let addr = TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .expect("free port");
            let mut registry = Registry {
                dir: tempfile::tempdir().expect("tempdir"),
                addr,
                options: options.clone(),
                child: None,
            };
            if registry.spawn() {
                return registry;
            }
            last_log = registry.log();
        }
        panic!("docker-registry did not start on a free port in 5 tries: {last_log}");
    }

    fn config(&self) -> PathBuf {
        let root = self.dir.path();
        let mut yaml = format!(
            "version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: true\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: {}\n",
            root.join("data").display(),
            self.addr
        );
        if let Some(tls) = &self.options.tls {
            std::fs::write(root.join("tls.crt"), &tls.cert).expect("cert");
            std::fs::write(root.join("tls.key"), &tls.key).expect("key");
            yaml.push_str(&format!(
                "  tls:\n    certificate: {}\n    key: {}\n",
                root.join("tls.crt").display(),
                root.join("tls.key").display()
            ));
        }
        if self.options.basic_auth {
            std::fs::write(root.join("htpasswd"), format!("{USER}:{PASSWORD_BCRYPT}\n"))
                .expect("htpasswd");
            yaml.push_str(&format!(
                "auth:\n  htpasswd:\n    realm: caapf-test\n    path: {}\n",
                root.join("htpasswd").display()
            ));
        }
        let path = root.join("config.yml");
        std::fs::write(&path, yaml).expect("config");
        path
    }

    /// Starts the process and waits for its port; `false` when it exited first (port taken).
    fn spawn(&mut self) -> bool {
        let config = self.config();
        let log = std::fs::File::create(self.dir.path().join("registry.log")).expect("log");
        let mut child = Command::new(registry_bin())
            .arg("serve")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("starting docker-registry");
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if TcpStream::connect_timeout(&self.addr, Duration::from_millis(200)).is_ok() {
                self.child = Some(child);
                return true;
            }
            if let Ok(Some(_)) = child.try_wait() {
                return false;
            }
            assert!(
                Instant::now() < deadline,
                "docker-registry did not listen on {} within 20 s: {}",
                self.addr,
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The registry's own log (errors only).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("registry.log")).unwrap_or_default()
    }

    /// Stops the registry (the port then refuses connections).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again on the same port, with the same storage.
    pub fn restart(&mut self) {
        self.stop();
        assert!(
            self.spawn(),
            "docker-registry did not start again: {}",
            self.log()
        );
    }

    /// `host:port`.
    pub fn host(&self) -> String {
        self.addr.to_string()
    }

    /// The repository the charts are pushed to: `oci://127.0.0.1:<port>/charts`.
    pub fn url(&self) -> String {
        format!("oci://{}/charts", self.addr)
    }

    /// A registry configuration (`config.json`) with `user` and `password` for this registry.
    pub fn config_json(&self, user: &str, password: &str) -> String {
        use base64::Engine;
        let auth = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        serde_json::json!({"auths": {self.host(): {"auth": auth}}}).to_string()
    }

    /// `helm push` of a chart archive, with the flags this registry needs.
    pub fn push(&self, archive: &Path) {
        let home = self.dir.path().join("helm-home");
        let mut args = vec![
            "push".to_string(),
            archive.display().to_string(),
            self.url(),
        ];
        match &self.options.tls {
            None => args.push("--plain-http".to_string()),
            Some(tls) => {
                let ca = self.dir.path().join("ca.crt");
                std::fs::write(&ca, &tls.ca).expect("ca");
                args.extend(["--ca-file".to_string(), ca.display().to_string()]);
            }
        }
        if self.options.basic_auth {
            args.extend([
                "--username".to_string(),
                USER.to_string(),
                "--password".to_string(),
                PASSWORD.to_string(),
            ]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        helm(&home, None, &args);
    }

    /// Pushes the test charts `fleet-crd` and `fleet` at `version` (one of
    /// [`super::CHART_VERSIONS`]).
    pub fn push_fleet(&self, version: &str) {
        for name in ["fleet-crd", "fleet"] {
            self.push(
                &packaged_charts()
                    .join("packages")
                    .join(format!("{name}-{version}.tgz")),
            );
        }
    }

    /// Pushes the test double of Fleet's `fleet-agent` chart at `version`.
    pub fn push_agent(&self, version: &str) {
        self.push(&package_agent_chart(version));
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        self.stop();
    }
}
