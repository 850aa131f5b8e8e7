//! Fleet's partition walk, as rancher/fleet v0.16.1 runs it for one Bundle
//! (`internal/cmd/controller/target/`: `partition.go` `UpdatePartitions`, `rollout.go`
//! `manualPartition`, `status.go` `limit`, `upToDate`, `isUnavailable`, `builder.go` `Targets`):
//! what the rollout strategy
//! we print does to the clusters we label, so the lint and the guide test play the same rules
//! Fleet plays. Manual partitions only (the strategy we print always has them).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::core::{Selector, SelectorExt};

/// `rolloutStrategy` of a Bundle, fleet.yaml or HelmOp (the fields the walk reads).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Strategy {
    pub max_unavailable: Option<IntOrString>,
    pub max_unavailable_partitions: Option<IntOrString>,
    /// `maxNew`: BundleDeployments created per walk (default 50, `target.go` `DefaultMaxNew`).
    pub max_new: Option<i64>,
    pub partitions: Vec<PartitionDef>,
}

/// One entry of `rolloutStrategy.partitions` (by `clusterSelector`).
#[derive(Clone, Debug, PartialEq)]
pub struct PartitionDef {
    pub name: String,
    pub selector: LabelSelector,
    pub max_unavailable: Option<IntOrString>,
}

/// A BundleDeployment: `spec.deploymentID`, `spec.stagedDeploymentID`,
/// `status.appliedDeploymentID`, `status.ready`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Deployment {
    pub deployment: String,
    pub staged: String,
    pub applied: String,
    pub ready: bool,
}

impl Deployment {
    /// `status.go` `isUnavailable`.
    pub fn unavailable(&self) -> bool {
        self.applied != self.deployment || !self.ready
    }

    /// Staged but not promoted: what Fleet reports as `OutOfSync`
    /// (`summary.go` `GetDeploymentState`, once applied and ready).
    pub fn out_of_sync(&self) -> bool {
        self.deployment != self.staged
    }
}

/// A cluster the Bundle targets: its Fleet Cluster's name and labels, `spec.paused`, its
/// BundleDeployment (none yet: `None`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Target {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub paused: bool,
    pub deployment: Option<Deployment>,
}

impl Target {
    /// `status.go` `upToDate` for the Bundle's deployment `id`.
    fn up_to_date(&self, id: &str) -> bool {
        self.deployment
            .as_ref()
            .is_some_and(|d| d.staged == id && d.deployment == id && d.applied == id)
    }
}

/// `status.partitions[]` of the Bundle: what the walk reports per partition.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PartitionStatus {
    pub name: String,
    pub count: usize,
    pub max_unavailable: usize,
    pub unavailable: usize,
}

/// `status.go` `limit`: the first set value of `values` for `count` items (default `100%`). An
/// integer is capped at `count` (negative: 0); a percentage rounds down with a minimum of 1
/// (`"0%"` is 1); no items is 1.
pub fn limit(count: usize, values: &[Option<&IntOrString>]) -> Result<usize, String> {
    if count == 0 {
        return Ok(1);
    }
    let hundred = IntOrString::String("100%".into());
    let value = values.iter().flatten().next().copied().unwrap_or(&hundred);
    let text = match value {
        IntOrString::Int(i) => return Ok((*i).clamp(0, count as i32) as usize),
        IntOrString::String(text) => text,
    };
    // intstr's IntValue of a string: the number it parses as (uncapped), else 0.
    if let Ok(i) = text.parse::<i32>()
        && i > 0
    {
        return Ok(i as usize);
    }
    let percent: f64 = text
        .strip_suffix('%')
        .ok_or_else(|| format!("invalid maxUnavailable {text:?}: an integer or a percentage"))?
        .parse()
        .map_err(|_| format!("invalid maxUnavailable {text:?}"))?;
    let i = (count as f64 * percent) as usize / 100;
    Ok(if percent <= 0.0 || i == 0 {
        1
    } else {
        i.min(count)
    })
}

/// One run of Fleet's walk for a Bundle whose deployment is now `id` (`UpdatePartitions`):
/// partitions in order, each taking every target its selector matches in the order of their
/// names (`builder.go:173` sorts them; a target may be in several partitions, one matched by
/// none is never staged); new BundleDeployments for the first `maxNew` targets (`partition.go:21`:
/// 50 unset, none at most 0); every target of a partition staged, and promoted while neither the
/// Bundle's nor the partition's `maxUnavailable` is reached (an unavailable one always); the walk
/// stops once more than `maxUnavailablePartitions` partitions are unavailable (more targets not
/// up to date or unavailable than its `maxUnavailable`). Returns `status.partitions`.
pub fn walk(
    strategy: &Strategy,
    targets: &mut [Target],
    id: &str,
) -> Result<Vec<PartitionStatus>, String> {
    let count = |ts: &[Target], idx: &[usize]| {
        idx.iter()
            .filter(|&&i| {
                ts[i]
                    .deployment
                    .as_ref()
                    .is_some_and(Deployment::unavailable)
            })
            .count()
    };
    let mut all: Vec<usize> = (0..targets.len()).collect();
    all.sort_by(|&a, &b| targets[a].name.cmp(&targets[b].name));
    let mut bundle_unavailable = count(targets, &all);
    let bundle_max = limit(targets.len(), &[strategy.max_unavailable.as_ref()])?;
    let mut partitions = Vec::new();
    for def in &strategy.partitions {
        let selector = Selector::try_from(def.selector.clone()).map_err(|e| e.to_string())?;
        let members: Vec<usize> = all
            .iter()
            .copied()
            .filter(|&i| selector.matches(&targets[i].labels))
            .collect();
        let max = [
            def.max_unavailable.as_ref(),
            strategy.max_unavailable.as_ref(),
        ];
        let status = PartitionStatus {
            name: def.name.clone(),
            count: members.len(),
            max_unavailable: limit(members.len(), &max)?,
            unavailable: count(targets, &members),
        };
        partitions.push((members, status));
    }
    let max_partitions = limit(
        partitions.len(),
        &[
            strategy.max_unavailable_partitions.as_ref(),
            Some(&IntOrString::Int(0)),
        ],
    )?;
    let (mut created, mut unavailable_partitions) = (0, 0);
    for (members, status) in &mut partitions {
        for &i in members.iter() {
            let target = &mut targets[i];
            if target.deployment.is_none() && created < strategy.max_new.unwrap_or(50) {
                created += 1;
                target.deployment = Some(Deployment::default());
            }
            if let Some(d) = target.deployment.as_mut() {
                d.staged = id.to_string();
            }
        }
        for &i in members.iter() {
            let target = &mut targets[i];
            let Some(d) = target.deployment.as_mut().filter(|_| !target.paused) else {
                continue;
            };
            let unavailable = d.unavailable();
            if !d.staged.is_empty()
                && d.out_of_sync()
                && (bundle_unavailable < bundle_max || unavailable)
                && (status.unavailable < status.max_unavailable || unavailable)
            {
                if !unavailable {
                    bundle_unavailable += 1;
                    status.unavailable += 1;
                }
                d.deployment = d.staged.clone();
            }
        }
        let stale = |&&i: &&usize| {
            !targets[i].up_to_date(id)
                || targets[i]
                    .deployment
                    .as_ref()
                    .is_some_and(Deployment::unavailable)
        };
        status.unavailable = members.iter().filter(stale).count();
        if status.unavailable > status.max_unavailable {
            unavailable_partitions += 1;
        }
        if unavailable_partitions > max_partitions {
            break;
        }
    }
    Ok(partitions.into_iter().map(|(_, s)| s).collect())
}

/// The agent applying what it was given: every promoted deployment is applied, ready unless
/// `fails` says the cluster (by index) fails it.
pub fn agents_apply(targets: &mut [Target], fails: impl Fn(usize) -> bool) {
    for (i, target) in targets.iter_mut().enumerate() {
        if let Some(d) = target
            .deployment
            .as_mut()
            .filter(|d| !d.deployment.is_empty())
        {
            d.applied = d.deployment.clone();
            d.ready = !fails(i);
        }
    }
}

impl Strategy {
    /// A `rolloutStrategy` as JSON (a Bundle's `spec.rolloutStrategy`, fleet.yaml's, a HelmOp's;
    /// rancher/fleet v0.16.1 `bundle_types.go` `RolloutStrategy`, `Partition`). A partition
    /// that selects by `clusterName`, `clusterGroup` or `clusterGroupSelector`, or by nothing
    /// (Fleet's matcher then matches no cluster), is not modelled: an error.
    pub fn from_json(value: &serde_json::Value) -> Result<Self, String> {
        let int_or_string = |v: &serde_json::Value, field: &str| {
            let v = v.get(field).filter(|v| !v.is_null());
            v.map(|v| serde_json::from_value::<IntOrString>(v.clone()))
                .transpose()
                .map_err(|e| format!("{field}: {e}"))
        };
        let parts = value.get("partitions").and_then(|p| p.as_array());
        let partitions = parts.into_iter().flatten().map(|p| {
            let name = p.get("name").and_then(|n| n.as_str()).unwrap_or_default();
            let by_other = ["clusterName", "clusterGroup", "clusterGroupSelector"];
            let selector = p.get("clusterSelector").filter(|s| !s.is_null());
            let Some(selector) = selector.filter(|_| by_other.iter().all(|f| p.get(f).is_none()))
            else {
                return Err(format!(
                    "partition {name:?}: only a clusterSelector is modelled"
                ));
            };
            Ok(PartitionDef {
                name: name.to_string(),
                selector: serde_json::from_value(selector.clone())
                    .map_err(|e| format!("partition {name:?}: clusterSelector: {e}"))?,
                max_unavailable: int_or_string(p, "maxUnavailable")?,
            })
        });
        Ok(Strategy {
            max_unavailable: int_or_string(value, "maxUnavailable")?,
            max_unavailable_partitions: int_or_string(value, "maxUnavailablePartitions")?,
            max_new: value.get("maxNew").and_then(serde_json::Value::as_i64),
            partitions: partitions.collect::<Result<_, _>>()?,
        })
    }
}
