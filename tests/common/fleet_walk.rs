//! Fleet for one HelmOp, played for tests: its partition walk from the pinned model
//! (`caapf::model::rollout::walk`, rancher/fleet v0.16.1 `internal/cmd/controller/target/`) over
//! the Fleet Clusters' labels and `spec.paused` (and the HelmOp's, which its Bundle copies), the
//! agents applying what was promoted, and each Fleet Cluster's `status.summary` as Fleet
//! computes it from its one BundleDeployment (`internal/cmd/controller/summary/summary.go`
//! `GetDeploymentState`).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use caapf::model::rollout::walk::{self, Deployment, Strategy, Target};
use caapf::names;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::core::GroupVersionKind;
use serde_json::{Value, json};

use super::Harness;

pub fn helmops() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("fleet.cattle.io", "v1alpha1", "HelmOp"),
        "helmops",
    )
}

/// Fleet's summary state of the cluster's one BundleDeployment (`GetDeploymentState`).
pub fn state(d: &Deployment) -> &'static str {
    if d.applied != d.deployment {
        "WaitApplied"
    } else if !d.ready {
        "NotReady"
    } else if d.deployment != d.staged {
        "OutOfSync"
    } else {
        "Ready"
    }
}

/// Fleet for the guide's HelmOp: one BundleDeployment per cluster.
pub struct Fleet {
    pub namespace: String,
    /// The HelmOp whose Bundle this is (its `spec.paused` is the Bundle's).
    pub helmop: String,
    pub strategy: Strategy,
    pub names: Vec<String>,
    pub targets: Vec<Target>,
    /// The Bundle's deployment ID now (the chart version).
    pub id: String,
    /// Clusters whose agent fails to make the current version ready.
    pub fails: BTreeSet<String>,
    pub written: Vec<Option<Value>>,
}

impl Fleet {
    /// The HelmOp `namespace/helmop` over the Fleet Clusters `names`, each with `id` applied and
    /// ready.
    pub async fn new(
        h: &Harness,
        (namespace, helmop): (&str, &str),
        strategy: Strategy,
        names: Vec<String>,
        id: &str,
    ) -> Fleet {
        let deployment = Deployment {
            deployment: id.into(),
            staged: id.into(),
            applied: id.into(),
            ready: true,
        };
        let mut fleet = Fleet {
            namespace: namespace.into(),
            helmop: helmop.into(),
            strategy,
            targets: (names.iter())
                .map(|name| Target {
                    name: name.clone(),
                    deployment: Some(deployment.clone()),
                    ..Target::default()
                })
                .collect(),
            written: vec![None; names.len()],
            names,
            id: id.into(),
            fails: BTreeSet::new(),
        };
        fleet.write(h).await;
        fleet
    }

    pub fn index(&self, name: &str) -> usize {
        self.names
            .iter()
            .position(|n| n == name)
            .expect("a cluster")
    }

    /// The wave of `name`, as its Fleet Cluster's label says.
    pub fn wave(&self, name: &str) -> &str {
        let labels = &self.targets[self.index(name)].labels;
        labels
            .get(names::ROLLOUT_WAVE_LABEL)
            .map_or("", String::as_str)
    }

    /// Whether every cluster of `waves` runs the current version, ready.
    pub fn waves_updated(&self, waves: &[&str]) -> bool {
        let mut of = self.names.iter().filter(|n| waves.contains(&self.wave(n)));
        of.all(|n| self.updated(n))
    }

    pub fn hold(&self, name: &str) -> Option<&str> {
        let labels = &self.targets[self.index(name)].labels;
        labels.get(names::ROLLOUT_HOLD_LABEL).map(String::as_str)
    }

    pub fn deployment(&self, name: &str) -> &Deployment {
        self.targets[self.index(name)]
            .deployment
            .as_ref()
            .expect("deployed")
    }

    /// Whether `name` runs the current version, ready.
    pub fn updated(&self, name: &str) -> bool {
        let d = self.deployment(name);
        d.applied == self.id && d.ready
    }

    /// The clusters the current version was promoted to.
    pub fn promoted(&self) -> BTreeSet<String> {
        let names = self.names.iter();
        names
            .filter(|n| self.deployment(n).deployment == self.id)
            .cloned()
            .collect()
    }

    /// One walk of Fleet's Bundle controller over the clusters as they are labelled and paused
    /// now, then the agents, then the Fleet Clusters' summaries.
    pub async fn pass(&mut self, h: &Harness) {
        let helmop =
            Api::<DynamicObject>::namespaced_with(h.client.clone(), &self.namespace, &helmops())
                .get(&self.helmop)
                .await
                .expect("HelmOp");
        let bundle_paused = helmop.data["spec"]["paused"] == json!(true);
        for (i, name) in self.names.iter().enumerate() {
            let live = h
                .fleet_cluster(&self.namespace, name)
                .await
                .expect("Fleet Cluster");
            self.targets[i].labels = live.metadata.labels.unwrap_or_default();
            self.targets[i].paused = bundle_paused || live.spec.paused == Some(true);
        }
        walk::walk(&self.strategy, &mut self.targets, &self.id).expect("walk");
        // A cluster fails the current version only; its agent still runs the one before.
        let fails = |i: usize| {
            let current = self.targets[i].deployment.as_ref();
            self.fails.contains(&self.names[i]) && current.is_some_and(|d| d.deployment == self.id)
        };
        let fails: Vec<bool> = (0..self.names.len()).map(fails).collect();
        walk::agents_apply(&mut self.targets, |i| fails[i]);
        self.write(h).await;
    }

    /// Writes each Fleet Cluster's status whose summary changed.
    pub async fn write(&mut self, h: &Harness) {
        let now = k8s_openapi::jiff::Timestamp::now()
            .strftime("%Y-%m-%dT%H:%M:%SZ")
            .to_string();
        for i in 0..self.names.len() {
            let d = self.targets[i].deployment.clone().unwrap_or_default();
            let state = state(&d);
            let ready = i64::from(state == "Ready");
            let mut summary = json!({"desiredReady": 1, "ready": ready});
            if state != "Ready" {
                let key = format!("{}{}", state[..1].to_lowercase(), &state[1..]);
                summary[key] = json!(1);
                summary["nonReadyResources"] =
                    json!([{"name": "metrics-server", "bundleState": state}]);
            }
            if self.written[i].as_ref() == Some(&summary) {
                continue;
            }
            let name = &self.names[i];
            let status = json!({
                "namespace": format!("cluster-{}-{name}-0123456789ab", self.namespace),
                "agent": {"lastSeen": now, "namespace": "cattle-fleet-system"},
                "summary": summary,
                "display": {"readyBundles": format!("{ready}/1")},
                "readyHelmOps": ready, "desiredReadyHelmOps": 1,
            });
            h.play_fleet_status(&self.namespace, name, status).await;
            self.written[i] = Some(summary);
        }
    }

    /// Plays Fleet until `done`, asserting after every walk that the current version was
    /// promoted only to clusters of `allowed` waves.
    pub async fn play_until(
        &mut self,
        h: &Harness,
        what: &str,
        allowed: &[&str],
        done: impl Fn(&Fleet) -> bool,
    ) {
        let deadline = Instant::now() + super::TIMEOUT;
        loop {
            self.pass(h).await;
            for name in self.promoted() {
                assert!(
                    allowed.contains(&self.wave(&name)),
                    "{what}: {name} got {} (only {allowed:?} may)",
                    self.id
                );
            }
            if done(self) {
                return;
            }
            assert!(Instant::now() < deadline, "timed out playing Fleet: {what}");
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// Fleet walks again (a Bundle or Cluster change): nothing more is promoted.
    pub async fn stays(&mut self, h: &Harness, what: &str) {
        let before = self.promoted();
        for _ in 0..5 {
            self.pass(h).await;
        }
        assert_eq!(self.promoted(), before, "{what}");
    }
}
