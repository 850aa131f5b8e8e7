//! Charts with the structure of Fleet's real ones (`rancher/fleet` `charts/fleet-crd` and
//! `charts/fleet`): several CRDs in `fleet-crd`; ServiceAccounts, ClusterRoles and bindings, the
//! `fleet-controller` and `gitjob` Deployments, the `fleet-controller` ConfigMap with a JSON
//! `config`, a Role and RoleBinding, a Service, a post-install hook Job and a CronJob in `fleet`:
//! every kind Fleet's chart renders by default. Small doubles written here, not Fleet's. Used by `fleet_real_chart.rs`
//! and by `rbac.rs` (helm installing them as the manager's ServiceAccount).

use std::path::Path;

use kube_sandbox::CrdSet;

/// The version of both charts.
pub const VERSION: &str = "0.13.4";

fn write(dir: &Path, rel: &str, text: &str) {
    let path = dir.join(rel);
    std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    std::fs::write(path, text).expect("write");
}

/// `fleet-crd`: the Fleet CRDs (the sandbox's copies of Fleet's schemas), one file per CRD as
/// in Fleet's chart.
pub fn fleet_crd_chart(root: &Path) -> std::path::PathBuf {
    let chart = root.join("src/fleet-crd");
    write(
        &chart,
        "Chart.yaml",
        &format!(
            "apiVersion: v2\nname: fleet-crd\nversion: {VERSION}\nappVersion: \"{VERSION}\"\n"
        ),
    );
    write(&chart, "values.yaml", "");
    let crds = CrdSet::Fleet.crds();
    assert!(crds.len() > 3, "several CRDs");
    for crd in crds {
        let name = crd["metadata"]["name"].as_str().expect("name").to_string();
        write(
            &chart,
            &format!("templates/{name}.yaml"),
            &serde_yaml::to_string(&crd).expect("yaml"),
        );
    }
    super::package_chart(&chart, &root.join("packages"))
}

/// `fleet`: the controller and gitjob Deployments with their ServiceAccounts and RBAC, and the
/// `fleet-controller` ConfigMap whose `config` key holds JSON, as Fleet's chart renders them.
pub fn fleet_chart(root: &Path) -> std::path::PathBuf {
    let chart = root.join("src/fleet");
    write(
        &chart,
        "Chart.yaml",
        &format!("apiVersion: v2\nname: fleet\nversion: {VERSION}\nappVersion: \"{VERSION}\"\n"),
    );
    write(
        &chart,
        "values.yaml",
        "apiServerURL: \"\"\napiServerCA: \"\"\nbootstrap:\n  enabled: true\nextraEnv: []\nreplicas: 1\n",
    );
    write(
        &chart,
        "templates/configmap.yaml",
        r#"apiVersion: v1
kind: ConfigMap
metadata:
  name: fleet-controller
data:
  config: |
    {
      "apiServerURL": {{ .Values.apiServerURL | quote }},
      "apiServerCA": {{ b64enc .Values.apiServerCA | quote }},
      "agentCheckinInterval": "15m",
      "bootstrap": {"namespace": "fleet-local", "agentNamespace": "cattle-fleet-local-system"}
    }
"#,
    );
    for (name, image) in [
        ("fleet-controller", "rancher/fleet"),
        ("gitjob", "rancher/fleet"),
    ] {
        write(
            &chart,
            &format!("templates/{name}.yaml"),
            &format!(
                r#"apiVersion: v1
kind: ServiceAccount
metadata:
  name: {name}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: {name}
rules:
- apiGroups: ["fleet.cattle.io"]
  resources: ["*"]
  verbs: ["*"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: {name}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: {name}
subjects:
- kind: ServiceAccount
  name: {name}
  namespace: {{{{ .Release.Namespace }}}}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {name}
spec:
  replicas: {{{{ .Values.replicas }}}}
  selector:
    matchLabels: {{app: {name}}}
  template:
    metadata:
      labels: {{app: {name}}}
    spec:
      serviceAccountName: {name}
      containers:
      - name: {name}
        image: {image}:v{{{{ .Chart.AppVersion }}}}
        env:
        {{{{- range .Values.extraEnv }}}}
        - name: {{{{ .name }}}}
          value: {{{{ .value | quote }}}}
        {{{{- end }}}}
"#
            ),
        );
    }
    // The other kinds Fleet's chart renders by default (rancher/fleet charts/fleet/templates,
    // v0.13-v0.14): the controller's Role and RoleBinding for leader election (rbac.yaml), the
    // metrics Service (service.yaml), the post-install hook Job that cleans up registrations
    // (job_cleanup_clusterregistrations.yaml: `helm.sh/hook: post-install, post-upgrade`,
    // deleted by helm when it succeeded) and the daily CronJob that removes finished gitjob
    // Jobs (job_cleanup_gitrepojobs.yaml, `migrations.gitrepoJobsCleanup: true`).
    write(
        &chart,
        "templates/extra.yaml",
        r#"apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: fleet-controller
rules:
- apiGroups: [""]
  resources: ["configmaps"]
  verbs: ["*"]
- apiGroups: ["coordination.k8s.io"]
  resources: ["leases"]
  verbs: ["*"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: fleet-controller
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: fleet-controller
subjects:
- kind: ServiceAccount
  name: fleet-controller
---
apiVersion: v1
kind: Service
metadata:
  name: monitoring-fleet-controller
spec:
  type: ClusterIP
  ports:
  - {port: 8080, targetPort: 8080, protocol: TCP, name: metrics}
  selector:
    app: fleet-controller
---
apiVersion: batch/v1
kind: CronJob
metadata:
  name: fleet-cleanup-gitrepo-jobs
spec:
  schedule: "@daily"
  concurrencyPolicy: Forbid
  jobTemplate:
    spec:
      template:
        spec:
          serviceAccountName: gitjob
          restartPolicy: Never
          containers:
          - name: cleanup
            image: rancher/fleet:v{{ .Chart.AppVersion }}
            args: [fleet, gitjob, cleanup]
---
apiVersion: batch/v1
kind: Job
metadata:
  name: fleet-cleanup-clusterregistrations
  annotations:
    "helm.sh/hook": post-install, post-upgrade
    "helm.sh/hook-delete-policy": hook-succeeded, before-hook-creation
spec:
  template:
    spec:
      serviceAccountName: fleet-controller
      restartPolicy: Never
      containers:
      - name: cleanup
        image: rancher/fleet:v{{ .Chart.AppVersion }}
        args: [fleet, cleanup, clusterregistration]
"#,
    );
    super::package_chart(&chart, &root.join("packages"))
}

/// A chart repository serving both charts at [`VERSION`] (keep `charts` alive while it is used).
pub async fn repository(charts: &Path) -> super::ChartRepo {
    let repo = super::ChartRepo::start(&[]).await;
    repo.add_package(&fleet_crd_chart(charts));
    repo.add_package(&fleet_chart(charts));
    repo
}
