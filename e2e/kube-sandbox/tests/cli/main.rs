//! The `kube-sandbox` binary with real `kubectl` and `helm`.
//!
//! Each test spawns the binary built by cargo, waits for its listening line, points an
//! isolated KUBECONFIG/HOME/XDG/HELM_* environment at it and kills it at the end. helm comes
//! from `HELM_BIN` or `<workspace>/bin/helm` (install it with `hack/install-helm.sh`).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;

struct Server {
    child: Child,
    url: String,
    dir: tempfile::TempDir,
}

impl Server {
    fn start(extra: &[&str]) -> Server {
        let dir = tempfile::tempdir().unwrap();
        Server::start_in(dir, extra)
    }

    fn start_in(dir: tempfile::TempDir, extra: &[&str]) -> Server {
        let kc = dir.path().join("kubeconfig");
        let mut child = Command::new(env!("CARGO_BIN_EXE_kube-sandbox"))
            .args(["--addr", "127.0.0.1:0", "--kubeconfig"])
            .arg(&kc)
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawning kube-sandbox");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        let line = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("kube-sandbox did not print its listening line within 30s");
        let url = line
            .strip_prefix("kube-sandbox listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .to_string();
        let scheme = if extra.contains(&"--tls") {
            "https"
        } else {
            "http"
        };
        assert!(url.starts_with(&format!("{scheme}://127.0.0.1:")), "{url}");
        Server { child, url, dir }
    }

    fn kubeconfig(&self) -> PathBuf {
        self.dir.path().join("kubeconfig")
    }

    fn env(&self, cmd: &mut Command) {
        let home = self.dir.path().join("home");
        std::fs::create_dir_all(&home).unwrap();
        cmd.env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("KUBECONFIG", self.kubeconfig())
            .env("HOME", &home)
            .env("XDG_CACHE_HOME", home.join("cache"))
            .env("XDG_CONFIG_HOME", home.join("config"))
            .env("XDG_DATA_HOME", home.join("data"))
            .env("HELM_CACHE_HOME", home.join("helm-cache"))
            .env("HELM_CONFIG_HOME", home.join("helm-config"))
            .env("HELM_DATA_HOME", home.join("helm-data"));
    }

    fn kubectl_cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new("kubectl");
        self.env(&mut c);
        c.args(args);
        c
    }

    fn kubectl(&self, args: &[&str]) -> String {
        ok(
            self.kubectl_cmd(args).output().expect("running kubectl"),
            "kubectl",
            args,
        )
    }

    fn kubectl_fails(&self, args: &[&str]) -> String {
        let out = self.kubectl_cmd(args).output().expect("running kubectl");
        assert!(!out.status.success(), "kubectl {args:?} should fail");
        String::from_utf8_lossy(&out.stderr).into_owned()
    }

    fn helm(&self, args: &[&str]) -> String {
        let mut c = Command::new(helm_bin());
        self.env(&mut c);
        c.args(args);
        ok(c.output().expect("running helm"), "helm", args)
    }

    fn signal(&self, sig: &str) {
        let st = Command::new("kill")
            .args([sig, &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(st.success());
    }

    /// Waits for the process to exit (after a signal), with a timeout.
    fn wait_exit(&mut self, timeout: Duration) -> std::process::ExitStatus {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                return st;
            }
            assert!(
                Instant::now() < deadline,
                "kube-sandbox did not exit within {timeout:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn ok(out: Output, tool: &str, args: &[&str]) -> String {
    assert!(
        out.status.success(),
        "{tool} {args:?} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn helm_bin() -> PathBuf {
    let p = std::env::var_os("HELM_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bin/helm"));
    assert!(
        p.is_file(),
        "helm not found at {}: run hack/install-helm.sh (or set HELM_BIN)",
        p.display()
    );
    p
}

fn write(dir: &Path, rel: &str, content: &str) -> PathBuf {
    let p = dir.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(&p, content).unwrap();
    p
}

const WIDGET_CRD: &str = r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  names: {kind: Widget, plural: widgets, singular: widget, listKind: WidgetList, shortNames: [wd]}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    additionalPrinterColumns:
    - {name: Size, type: integer, jsonPath: .spec.size}
    - {name: Ready, type: string, jsonPath: '.status.conditions[?(@.type=="Ready")].status'}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, properties: {size: {type: integer}}}
          status: {type: object, x-kubernetes-preserve-unknown-fields: true}
"#;

#[test]
fn listening_line_kubeconfig_and_signals() {
    for sig in ["-TERM", "-INT"] {
        let mut s = Server::start(&["--crds", "fleet"]);
        let kc = std::fs::read_to_string(s.kubeconfig()).unwrap();
        assert!(kc.contains(&format!("server: {}", s.url)), "{kc}");
        assert!(kc.contains("current-context: kube-sandbox"));
        let ns = s.kubectl(&["get", "ns", "-o", "name"]);
        assert_eq!(
            ns.lines().collect::<Vec<_>>(),
            vec![
                "namespace/default",
                "namespace/kube-public",
                "namespace/kube-system"
            ]
        );
        let groups = s.kubectl(&["api-versions"]);
        assert!(groups.contains("fleet.cattle.io/v1alpha1"));
        assert!(!groups.contains("cluster.x-k8s.io"), "--crds fleet only");
        s.signal(sig);
        let st = s.wait_exit(Duration::from_secs(10));
        assert!(st.success(), "{sig}: {st:?}");
    }
}

/// `--tls`: HTTPS with a generated CA in the kubeconfig (and the admin's token, without which
/// kubectl would prompt for a password); a ServiceAccount token given to kubectl is used, as
/// client-go sends credentials over TLS only.
#[test]
fn tls_flag_serves_https_and_kubectl_sends_tokens() {
    let s = Server::start(&["--crds", "none", "--tls"]);
    let kc = std::fs::read_to_string(s.kubeconfig()).unwrap();
    assert!(kc.contains("certificate-authority-data: "), "{kc}");
    assert_eq!(
        s.kubectl(&["auth", "can-i", "create", "clusterroles"])
            .trim(),
        "yes"
    );
    s.kubectl(&["create", "serviceaccount", "robot", "-n", "default"]);
    let token = s.kubectl(&["create", "token", "robot", "-n", "default"]);
    let as_robot = |args: &[&str]| {
        let mut all = vec!["--token", token.trim()];
        all.extend_from_slice(args);
        s.kubectl_cmd(&all).output().expect("running kubectl")
    };
    let out = as_robot(&["auth", "can-i", "list", "namespaces"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "no");
    assert!(!out.status.success());
    let out = as_robot(&["get", "namespaces"]);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(
            "User \"system:serviceaccount:default:robot\" cannot list resource \"namespaces\""
        ),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn kubectl_against_the_binary() {
    let s = Server::start(&["--crds", "capi"]);
    let dir = s.dir.path().to_path_buf();
    // create: generators (protobuf bodies) and from a file.
    s.kubectl(&["create", "namespace", "demo"]);
    s.kubectl(&[
        "create",
        "configmap",
        "gen",
        "-n",
        "demo",
        "--from-literal=a=b",
    ]);
    s.kubectl(&[
        "create",
        "secret",
        "generic",
        "sec",
        "-n",
        "demo",
        "--from-literal=p=q",
    ]);
    s.kubectl(&["create", "serviceaccount", "robot", "-n", "demo"]);
    s.kubectl(&[
        "create",
        "deployment",
        "gen-deploy",
        "-n",
        "demo",
        "--image=registry.example/app:1",
        "--replicas=0",
        "--port=8080",
    ]);
    let d: Value = serde_json::from_str(&s.kubectl(&[
        "get",
        "deploy",
        "gen-deploy",
        "-n",
        "demo",
        "-o",
        "json",
    ]))
    .unwrap();
    assert_eq!(d["spec"]["replicas"], 0);
    assert_eq!(
        d["spec"]["template"]["spec"]["containers"][0]["image"],
        "registry.example/app:1"
    );
    assert_eq!(
        d["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"],
        8080
    );
    assert_eq!(d["spec"]["selector"]["matchLabels"]["app"], "gen-deploy");
    s.kubectl(&[
        "create",
        "service",
        "clusterip",
        "gen-svc",
        "-n",
        "demo",
        "--tcp=80:8080",
    ]);
    assert_eq!(
        s.kubectl(&[
            "get",
            "svc",
            "gen-svc",
            "-n",
            "demo",
            "-o",
            "jsonpath={.spec.ports[0].port}/{.spec.ports[0].targetPort}"
        ]),
        "80/8080"
    );
    s.kubectl(&[
        "create",
        "clusterrole",
        "reader",
        "--verb=get,list",
        "--resource=configmaps",
    ]);
    s.kubectl(&[
        "create",
        "clusterrolebinding",
        "reader",
        "--clusterrole=reader",
        "--serviceaccount=demo:robot",
    ]);
    s.kubectl(&[
        "create",
        "role",
        "r",
        "-n",
        "demo",
        "--verb=get",
        "--resource=secrets",
    ]);
    s.kubectl(&[
        "create",
        "rolebinding",
        "r",
        "-n",
        "demo",
        "--role=r",
        "--user=alice",
    ]);
    assert_eq!(
        s.kubectl(&[
            "get",
            "clusterrolebinding",
            "reader",
            "-o",
            "jsonpath={.roleRef.name}/{.subjects[0].name}/{.subjects[0].namespace}"
        ]),
        "reader/robot/demo"
    );
    assert_eq!(
        s.kubectl(&[
            "get",
            "clusterrole",
            "reader",
            "-o",
            "jsonpath={.rules[0].verbs}"
        ]),
        r#"["get","list"]"#
    );
    let f = write(
        &dir,
        "cm.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\n  namespace: demo\ndata:\n  v: \"1\"\n",
    );
    s.kubectl(&["create", "-f", f.to_str().unwrap()]);
    assert!(
        s.kubectl_fails(&["create", "-f", f.to_str().unwrap()])
            .contains("AlreadyExists")
    );
    let got: Value =
        serde_json::from_str(&s.kubectl(&["get", "cm", "app", "-n", "demo", "-o", "json"]))
            .unwrap();
    assert_eq!(got["data"]["v"], "1");
    let table = s.kubectl(&["get", "cm", "-n", "demo"]);
    assert!(table.starts_with("NAME"), "{table}");
    assert!(
        table.contains("gen") && table.contains("kube-root-ca.crt"),
        "{table}"
    );
    // apply, client-side and server-side.
    let a = write(
        &dir,
        "apply.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: applied\n  namespace: demo\ndata:\n  v: \"1\"\n",
    );
    assert!(
        s.kubectl(&["apply", "-f", a.to_str().unwrap()])
            .contains("created")
    );
    assert!(
        s.kubectl(&["apply", "-f", a.to_str().unwrap()])
            .contains("unchanged")
    );
    write(
        &dir,
        "apply.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: applied\n  namespace: demo\ndata:\n  v: \"2\"\n",
    );
    assert!(
        s.kubectl(&["apply", "-f", a.to_str().unwrap()])
            .contains("configured")
    );
    // Moving from client-side to server-side apply takes over the fields without conflicts
    // (the server's last-applied handling), and keeps the annotation in step.
    write(
        &dir,
        "apply.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: applied\n  namespace: demo\ndata:\n  v: \"3\"\n",
    );
    assert!(
        s.kubectl(&["apply", "--server-side", "-f", a.to_str().unwrap()])
            .contains("serverside-applied")
    );
    let last = s.kubectl(&[
        "get",
        "cm",
        "applied",
        "-n",
        "demo",
        "-o",
        "jsonpath={.metadata.annotations.kubectl\\.kubernetes\\.io/last-applied-configuration}",
    ]);
    assert!(last.contains(r#""v":"3""#), "{last}");
    let ssa = write(
        &dir,
        "ssa.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ssa\n  namespace: demo\ndata:\n  v: \"1\"\n",
    );
    assert!(
        s.kubectl(&["apply", "--server-side", "-f", ssa.to_str().unwrap()])
            .contains("serverside-applied")
    );
    let mf = s.kubectl(&[
        "get",
        "cm",
        "ssa",
        "-n",
        "demo",
        "--show-managed-fields",
        "-o",
        "jsonpath={.metadata.managedFields[0].manager}/{.metadata.managedFields[0].operation}",
    ]);
    assert_eq!(mf, "kubectl/Apply");
    // A conflicting server-side apply fails, --force-conflicts wins.
    s.kubectl(&[
        "patch",
        "cm",
        "ssa",
        "-n",
        "demo",
        "--type",
        "merge",
        "-p",
        r#"{"data":{"v":"edited"}}"#,
    ]);
    let err = s.kubectl_fails(&["apply", "--server-side", "-f", ssa.to_str().unwrap()]);
    assert!(err.contains("conflict"), "{err}");
    s.kubectl(&[
        "apply",
        "--server-side",
        "--force-conflicts",
        "-f",
        ssa.to_str().unwrap(),
    ]);
    // label, patch (strategic by default for built-ins).
    s.kubectl(&["label", "cm", "app", "-n", "demo", "tier=web"]);
    s.kubectl(&[
        "patch",
        "cm",
        "app",
        "-n",
        "demo",
        "-p",
        r#"{"data":{"w":"x"}}"#,
    ]);
    let sel = s.kubectl(&[
        "get",
        "cm",
        "-n",
        "demo",
        "-l",
        "tier=web",
        "-o",
        "jsonpath={.items[*].metadata.name}/{.items[*].data.w}",
    ]);
    assert_eq!(sel, "app/x");
    // get -w, stopped after seeing the change.
    let mut watch = s
        .kubectl_cmd(&[
            "get",
            "cm",
            "app",
            "-n",
            "demo",
            "-w",
            "-o",
            "jsonpath={.data.v}{\"\\n\"}",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = mpsc::channel();
    let out = watch.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    assert_eq!(rx.recv_timeout(Duration::from_secs(20)).unwrap(), "1");
    s.kubectl(&[
        "patch",
        "cm",
        "app",
        "-n",
        "demo",
        "--type",
        "merge",
        "-p",
        r#"{"data":{"v":"2"}}"#,
    ]);
    assert_eq!(rx.recv_timeout(Duration::from_secs(20)).unwrap(), "2");
    watch.kill().unwrap();
    watch.wait().unwrap();
    // The default (Table) output of get -w.
    let mut watch = s
        .kubectl_cmd(&["get", "cm", "-n", "demo", "-w"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = mpsc::channel();
    let out = watch.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    assert!(
        rx.recv_timeout(Duration::from_secs(20))
            .unwrap()
            .starts_with("NAME")
    );
    s.kubectl(&["create", "configmap", "watched", "-n", "demo"]);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let line = rx
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .expect("watch row for the new ConfigMap");
        if line.starts_with("watched") {
            break;
        }
    }
    watch.kill().unwrap();
    watch.wait().unwrap();
    // CRDs: wait for established, then wait on a custom condition.
    let crd = write(&dir, "crd.yaml", WIDGET_CRD);
    s.kubectl(&["apply", "-f", crd.to_str().unwrap()]);
    s.kubectl(&[
        "wait",
        "--for",
        "condition=established",
        "crd/widgets.example.com",
        "--timeout=20s",
    ]);
    let w = write(
        &dir,
        "w.yaml",
        "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w1\n  namespace: demo\nspec:\n  size: 3\n",
    );
    s.kubectl(&["apply", "-f", w.to_str().unwrap()]);
    let wait = s
        .kubectl_cmd(&[
            "wait",
            "--for=condition=Ready",
            "widget/w1",
            "-n",
            "demo",
            "--timeout=20s",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    s.kubectl(&[
        "patch",
        "widget",
        "w1",
        "-n",
        "demo",
        "--subresource",
        "status",
        "--type",
        "merge",
        "-p",
        r#"{"status":{"conditions":[{"type":"Ready","status":"True"}]}}"#,
    ]);
    let out = wait.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("condition met"));
    let cols = s.kubectl(&["get", "wd", "-n", "demo"]);
    let header: Vec<&str> = cols.lines().next().unwrap().split_whitespace().collect();
    // Printer columns as declared (no implicit AGE when a CRD declares its own columns).
    assert_eq!(header, vec!["NAME", "SIZE", "READY"]);
    assert!(cols.lines().nth(1).unwrap().starts_with("w1"), "{cols}");
    // A Deployment: client-side apply (strategic merge for built-ins) and rollout status.
    let dep = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  namespace: demo\nspec:\n  replicas: 2\n  selector:\n    matchLabels: {app: web}\n  template:\n    metadata:\n      labels: {app: web}\n    spec:\n      containers:\n      - {name: web, image: nginx:1}\n";
    let d = write(&dir, "dep.yaml", dep);
    s.kubectl(&["apply", "-f", d.to_str().unwrap()]);
    write(&dir, "dep.yaml", &dep.replace("nginx:1", "nginx:2"));
    s.kubectl(&["apply", "-f", d.to_str().unwrap()]);
    assert_eq!(
        s.kubectl(&[
            "get",
            "deploy",
            "web",
            "-n",
            "demo",
            "-o",
            "jsonpath={.spec.template.spec.containers[0].image}/{.metadata.generation}"
        ]),
        "nginx:2/2"
    );
    assert!(
        s.kubectl(&[
            "rollout",
            "status",
            "deploy/web",
            "-n",
            "demo",
            "--timeout=20s"
        ])
        .contains("successfully rolled out")
    );
    // CAPI kinds by short name.
    s.kubectl(&["get", "cl", "-A"]);
    // delete.
    s.kubectl(&["delete", "widget", "w1", "-n", "demo"]);
    assert!(
        s.kubectl_fails(&["get", "widget", "w1", "-n", "demo"])
            .contains("NotFound")
    );
    s.kubectl(&["delete", "ns", "demo", "--wait=true", "--timeout=20s"]);
    assert!(s.kubectl_fails(&["get", "ns", "demo"]).contains("NotFound"));
    // `delete -f` of a namespace and objects in it: the namespace is emptied asynchronously, so
    // the objects are still there to be deleted, as on a real cluster.
    let both = write(
        &dir,
        "both.yaml",
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: pair\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: inside\n  namespace: pair\n",
    );
    s.kubectl(&["create", "-f", both.to_str().unwrap()]);
    let out = s.kubectl(&["delete", "-f", both.to_str().unwrap()]);
    assert!(out.contains("configmap \"inside\" deleted"), "{out}");
}

/// helm 3's `--wait` finds a Deployment's new ReplicaSet (`helm.sh/helm/v3` `pkg/kube/ready.go`):
/// the sandbox's deployment controller creates it (template + `pod-template-hash`, controlled by
/// the Deployment, ready), a new one for a changed template while the old one is scaled to zero,
/// and the garbage collector removes them with the Deployment.
#[test]
fn helm3_waits_for_the_replica_set_of_a_deployment() {
    let helm3 = {
        let p = std::env::var_os("HELM3_BIN")
            .map(PathBuf::from)
            .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bin/helm3"));
        assert!(
            p.is_file(),
            "helm 3 not found at {}: run hack/install-helm.sh (or set HELM3_BIN)",
            p.display()
        );
        p
    };
    let s = Server::start(&["--crds", "none"]);
    let chart = s.dir.path().join("chart");
    write(
        &chart,
        "Chart.yaml",
        "apiVersion: v2\nname: web\nversion: 0.1.0\n",
    );
    write(&chart, "values.yaml", "tag: \"1\"\n");
    write(
        &chart,
        "templates/deployment.yaml",
        r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: 2
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: web
        image: "nginx:{{ .Values.tag }}"
"#,
    );
    let helm = |args: &[&str]| {
        let mut c = Command::new(&helm3);
        s.env(&mut c);
        c.args(args);
        ok(c.output().expect("running helm 3"), "helm3", args)
    };
    let chart = chart.to_str().unwrap();
    helm(&[
        "install",
        "web",
        chart,
        "-n",
        "default",
        "--wait",
        "--timeout",
        "60s",
    ]);
    let sets = |s: &Server| -> Vec<Value> {
        let list: Value = serde_json::from_str(&s.kubectl(&[
            "get",
            "replicasets",
            "-n",
            "default",
            "-o",
            "json",
        ]))
        .unwrap();
        list["items"].as_array().unwrap().clone()
    };
    let first = sets(&s);
    assert_eq!(first.len(), 1, "{first:#?}");
    let rs = &first[0];
    let hash = rs["metadata"]["labels"]["pod-template-hash"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(rs["metadata"]["name"], format!("web-{hash}"));
    assert_eq!(rs["metadata"]["ownerReferences"][0]["kind"], "Deployment");
    assert_eq!(rs["metadata"]["ownerReferences"][0]["controller"], true);
    assert_eq!(
        rs["spec"]["selector"]["matchLabels"]["pod-template-hash"],
        hash.as_str()
    );
    assert_eq!(
        rs["spec"]["template"]["metadata"]["labels"]["pod-template-hash"],
        hash.as_str()
    );
    assert_eq!(rs["status"]["readyReplicas"], 2);

    helm(&[
        "upgrade",
        "web",
        chart,
        "-n",
        "default",
        "--set",
        "tag=2",
        "--wait",
        "--timeout",
        "60s",
    ]);
    let second = sets(&s);
    assert_eq!(second.len(), 2, "{second:#?}");
    let old = second
        .iter()
        .find(|r| r["metadata"]["name"] == rs["metadata"]["name"])
        .unwrap();
    assert_eq!(old["spec"]["replicas"], 0);
    let new = second
        .iter()
        .find(|r| r["metadata"]["name"] != rs["metadata"]["name"])
        .unwrap();
    assert_eq!(
        new["spec"]["template"]["spec"]["containers"][0]["image"],
        "nginx:2"
    );
    assert_eq!(new["status"]["readyReplicas"], 2);

    helm(&[
        "uninstall",
        "web",
        "-n",
        "default",
        "--wait",
        "--timeout",
        "60s",
    ]);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !sets(&s).is_empty() {
        assert!(
            Instant::now() < deadline,
            "ReplicaSets outlived their Deployment"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn helm_against_the_binary() {
    let s = Server::start(&["--crds", "fleet"]);
    let chart = s.dir.path().join("chart");
    write(
        &chart,
        "Chart.yaml",
        "apiVersion: v2\nname: demo\nversion: 0.1.0\nappVersion: \"1.0\"\n",
    );
    write(&chart, "values.yaml", "message: hello\nreplicas: 2\n");
    write(&chart, "crds/widgets.yaml", WIDGET_CRD);
    write(
        &chart,
        "templates/all.yaml",
        r#"apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .Release.Name }}-config
data:
  message: {{ .Values.message | quote }}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ .Release.Name }}-app
spec:
  replicas: {{ .Values.replicas }}
  selector:
    matchLabels: {app: {{ .Release.Name }}}
  template:
    metadata:
      labels: {app: {{ .Release.Name }}}
    spec:
      containers:
      - name: app
        image: registry.example/app:1.0
---
apiVersion: example.com/v1
kind: Widget
metadata:
  name: {{ .Release.Name }}-widget
spec:
  size: 1
---
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: {{ .Release.Name }}-db
spec:
  serviceName: db
  replicas: 1
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}}
    spec: {containers: [{name: db, image: registry.example/db:1}]}
---
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: {{ .Release.Name }}-agent
spec:
  selector: {matchLabels: {app: agent}}
  template:
    metadata: {labels: {app: agent}}
    spec: {containers: [{name: agent, image: registry.example/agent:1}]}
"#,
    );
    // A hook Job: helm waits for it to complete, then deletes it.
    write(
        &chart,
        "templates/hook.yaml",
        r#"apiVersion: batch/v1
kind: Job
metadata:
  name: {{ .Release.Name }}-post-install
  annotations:
    helm.sh/hook: post-install
    helm.sh/hook-delete-policy: hook-succeeded
spec:
  template:
    spec:
      restartPolicy: Never
      containers: [{name: hook, image: registry.example/hook:1}]
"#,
    );
    let chart = chart.to_str().unwrap();
    s.helm(&[
        "install",
        "demo",
        chart,
        "--namespace",
        "default",
        "--wait",
        "--timeout",
        "60s",
    ]);
    let list: Value = serde_json::from_str(&s.helm(&["list", "-o", "json"])).unwrap();
    assert_eq!(list[0]["name"], "demo");
    assert_eq!(list[0]["status"], "deployed");
    assert_eq!(list[0]["revision"], "1");
    let ready = s.kubectl(&[
        "get",
        "deploy",
        "demo-app",
        "-o",
        "jsonpath={.status.readyReplicas}",
    ]);
    assert_eq!(ready, "2");
    s.kubectl(&["get", "widget", "demo-widget"]);
    assert_eq!(
        s.kubectl(&[
            "get",
            "sts",
            "demo-db",
            "-o",
            "jsonpath={.status.readyReplicas}"
        ]),
        "1"
    );
    assert_eq!(
        s.kubectl(&[
            "get",
            "ds",
            "demo-agent",
            "-o",
            "jsonpath={.status.numberReady}"
        ]),
        "1"
    );
    assert!(
        s.kubectl_fails(&["get", "job", "demo-post-install"])
            .contains("NotFound"),
        "hook job deleted after success"
    );
    s.helm(&[
        "upgrade",
        "demo",
        chart,
        "--set",
        "message=bye",
        "--set",
        "replicas=3",
        "--wait",
        "--timeout",
        "60s",
    ]);
    assert_eq!(
        s.kubectl(&["get", "cm", "demo-config", "-o", "jsonpath={.data.message}"]),
        "bye"
    );
    assert_eq!(
        s.kubectl(&[
            "get",
            "deploy",
            "demo-app",
            "-o",
            "jsonpath={.status.availableReplicas}"
        ]),
        "3"
    );
    let list: Value = serde_json::from_str(&s.helm(&["list", "-o", "json"])).unwrap();
    assert_eq!(list[0]["revision"], "2");
    s.helm(&["uninstall", "demo", "--wait", "--timeout", "60s"]);
    let list: Value = serde_json::from_str(&s.helm(&["list", "-o", "json"])).unwrap();
    assert_eq!(list, serde_json::json!([]));
    assert!(
        s.kubectl_fails(&["get", "cm", "demo-config"])
            .contains("NotFound")
    );
    // helm keeps CRDs from crds/ on uninstall, as on a real cluster.
    s.kubectl(&["get", "crd", "widgets.example.com"]);
}

#[test]
fn snapshot_dir_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let snap = dir.path().join("snap");
    let snap_s = snap.to_str().unwrap().to_string();
    let mut s = Server::start(&["--crds", "fleet", "--snapshot-dir", &snap_s]);
    s.kubectl(&["create", "configmap", "kept", "--from-literal=a=b"]);
    s.signal("-TERM");
    assert!(s.wait_exit(Duration::from_secs(10)).success());
    let s2 = Server::start(&["--crds", "fleet", "--snapshot-dir", &snap_s]);
    assert_eq!(
        s2.kubectl(&["get", "cm", "kept", "-o", "jsonpath={.data.a}"]),
        "b"
    );
}

#[test]
fn crd_dir_loads_upstream_style_manifests() {
    let crds = tempfile::tempdir().unwrap();
    let crd = |plural: &str, kind: &str| {
        format!(
            "apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: {plural}.upstream.example.com
spec:
  group: upstream.example.com
  scope: Namespaced
  names: {{kind: {kind}, plural: {plural}, singular: {}, listKind: {kind}List}}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            x-kubernetes-validations:
            - rule: has(self.size)
              message: size is required
            properties:
              size: {{type: integer}}
",
            kind.to_lowercase()
        )
    };
    // Two CRDs and a Namespace in one multi-document file, a third CRD in a List, a file that
    // is not YAML is skipped by its extension.
    write(
        crds.path(),
        "bundle.yaml",
        &format!(
            "{}---\napiVersion: v1\nkind: Namespace\nmetadata: {{name: ignored}}\n---\n{}",
            crd("bolts", "Bolt"),
            crd("nuts", "Nut")
        ),
    );
    let listed: serde_json::Value = serde_yaml::from_str(&crd("gears", "Gear")).unwrap();
    write(
        crds.path(),
        "list.json",
        &serde_json::to_string(
            &serde_json::json!({"apiVersion": "v1", "kind": "List", "items": [listed]}),
        )
        .unwrap(),
    );
    write(crds.path(), "README.md", "not a manifest");
    let s = Server::start(&["--crds", "none", "--crd-dir", crds.path().to_str().unwrap()]);
    let names = s.kubectl(&["get", "crds", "-o", "name"]);
    assert_eq!(
        names.lines().collect::<Vec<_>>(),
        vec![
            "customresourcedefinition.apiextensions.k8s.io/bolts.upstream.example.com",
            "customresourcedefinition.apiextensions.k8s.io/gears.upstream.example.com",
            "customresourcedefinition.apiextensions.k8s.io/nuts.upstream.example.com",
        ]
    );
    s.kubectl_fails(&["get", "ns", "ignored"]);
    let dir = tempfile::tempdir().unwrap();
    let bad = write(
        dir.path(),
        "bad.yaml",
        "apiVersion: upstream.example.com/v1\nkind: Gear\nmetadata: {name: g, namespace: default}\nspec: {}\n",
    );
    let err = s.kubectl_fails(&["create", "-f", bad.to_str().unwrap()]);
    assert!(err.contains("size is required"), "{err}");
}
