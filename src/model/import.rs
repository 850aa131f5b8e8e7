//! What to do with one CAPI Cluster: the decision table of the Cluster controller, and the
//! writes each decision plans for what the controller observed ([`plan`]).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use fleet_api_rs::fleet_cluster::Cluster as FleetCluster;
use fleet_api_rs::fleet_cluster_registration_token::ClusterRegistrationToken;
use k8s_openapi::api::core::v1::{ObjectReference, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::events::EventType;
use serde_json::Value;

use crate::Result;
use crate::api::{AgentSettings, CapiCluster};
use crate::model::agent_bootstrap::FLEET_AGENT_VARIABLE;
use crate::model::agent_manifest::TokenValues;
use crate::model::agent_settings::{Carrier, INVALID_REASON, LayerProblem};
use crate::model::capi::{ClusterView, StringMap};
use crate::model::config::{ClusterImport, EffectiveConfig};
use crate::model::fleet::{
    FleetClusterWrite, Registration, TEMPLATE_VALUES, client_id, desired_fleet_cluster,
    desired_registration_token, fleet_cluster_write, is_agent_initiated, is_registration_stub,
    prepared_by_runtime_extension, random_client_id, registration_stub,
};
use crate::model::plan::{Change, Next, ObjectId, Plan, Write};
use crate::model::registration_token::{Renewal, extension_patch, renewal};
use crate::model::selection::ClusterFacts;
use crate::model::turtles::{self, Conflict};
use crate::model::{rollout, teardown, upgrade_steps};
use crate::names;

/// The decision for one Cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// `spec.paused` or the paused annotation: touch nothing. `selected` tells whether it would
    /// be selected (its namespace-level objects are kept).
    Paused { selected: bool },
    /// `spec.cluster` has problems: keep everything as it is until they are fixed.
    Hold,
    /// Being deleted while carrying our finalizer: remove what we created, then the finalizer.
    Cleanup,
    /// Being deleted while carrying our finalizer, and its Fleet workloads are removed first
    /// (`spec.runtimeExtension.beforeClusterDelete`, [`crate::model::teardown::holds_cleanup`]):
    /// keep the Fleet Cluster (drained once BeforeClusterDelete started the removal) and our
    /// finalizer until Cluster API lets the deletion proceed, the operator skips, or `deadline`.
    /// Its namespace keeps what the Cluster used (workspace annotation, cross-namespace group
    /// and mapping): a BundleNamespaceMapping deleted first would take the class namespace's
    /// bundles out of the Fleet Cluster's scope before Fleet removed their BundleDeployments
    /// (rancher/fleet v0.16.1 `bundle_controller.go` does not watch mappings).
    Teardown {
        deadline: k8s_openapi::jiff::Timestamp,
    },
    /// Being deleted without our finalizer, or not selected and never managed: nothing to do.
    Ignore,
    /// Was managed (carries our finalizer) but is no longer selected, or import was disabled:
    /// remove the finalizer, and delete the Fleet Cluster if the deselect policy says so.
    Release { delete_fleet_cluster: bool },
    /// Selected, manager-initiated, control plane not initialized yet: ensure the finalizer and
    /// wait for the status change.
    Wait,
    /// Selected: keep the Fleet objects.
    Import { agent_initiated: bool },
    /// Its definition was moved into the workload cluster itself (move state `Moved`,
    /// docs/self-managed.md): the workload cluster manages itself, this management cluster
    /// writes nothing for it. Its Fleet Cluster is **kept** (the agent keeps delivering
    /// add-ons, the move Bundles stay reported) and no longer owned by the source Cluster, so
    /// deleting the source copy leaves it alone; a deleted source only loses our finalizer.
    Moved,
    /// Rancher deploys a Fleet agent of its own to it ([`ClusterView::rancher_fleet`]): left to
    /// Rancher, our finalizer released, reported.
    Turtles,
}

impl Decision {
    /// Selected by the configuration (and not being deleted).
    pub fn is_selected(&self) -> bool {
        matches!(
            self,
            Decision::Paused { selected: true }
                | Decision::Wait
                | Decision::Import { .. }
                | Decision::Moved
        )
    }

    /// Has (or is about to have) a Fleet Cluster.
    pub fn is_imported(&self) -> bool {
        matches!(self, Decision::Import { .. })
    }

    /// Deletes the Fleet Cluster when there is one: a cache that shows none is confirmed with
    /// the API server first (it may not have seen one created moments ago, and a deletion
    /// decided from it would leave that Fleet Cluster orphaned).
    pub fn confirms_fleet_cluster(&self) -> bool {
        matches!(
            self,
            Decision::Cleanup
                | Decision::Release {
                    delete_fleet_cluster: true
                }
        )
    }
}

/// Decides for one Cluster. `namespace_labels` are the labels of its namespace (empty when
/// unknown); `live` is its Fleet Cluster's metadata, when one exists (the decision reads nothing
/// else of it, so deciding needs no decode of the cached spec and status); `now` places a
/// deleting Cluster's teardown deadline.
pub fn import_decision(
    cluster: &ClusterView,
    config: &EffectiveConfig,
    namespace_labels: &StringMap,
    live: Option<&ObjectMeta>,
    now: k8s_openapi::jiff::Timestamp,
) -> Decision {
    // Before anything else: a moved Cluster stays paused, and the decisions below (Paused,
    // Cleanup, Release) would act on what is now the workload cluster's own Fleet Cluster.
    if crate::model::move_state::is_moved(&cluster.annotations) {
        return Decision::Moved;
    }
    let import = config.cluster.as_ref();
    let selected = import.is_some_and(|import| {
        import.selection.selects(ClusterFacts {
            labels: &cluster.labels,
            namespace: &cluster.namespace,
            namespace_labels,
        })
    });
    if cluster.paused {
        return Decision::Paused {
            selected: selected && !cluster.deleting,
        };
    }
    if (selected || cluster.has_finalizer()) && cluster.rancher_fleet {
        return Decision::Turtles;
    }
    // Deletion is never held, not even by an invalid configuration, unless the Cluster's
    // workloads are removed first (opt-in, with a deadline).
    if cluster.deleting {
        if !cluster.has_finalizer() {
            return Decision::Ignore;
        }
        return match crate::model::teardown::holds_cleanup(
            cluster,
            &config.runtime_extension.teardown,
            live,
            now,
        ) {
            Some(deadline) => Decision::Teardown { deadline },
            None => Decision::Cleanup,
        };
    }
    if config.problems_under("spec.cluster").next().is_some() {
        return Decision::Hold;
    }
    let Some(import) = import.filter(|_| selected) else {
        return if cluster.has_finalizer() {
            Decision::Release {
                delete_fleet_cluster: import.is_some_and(|i| i.delete_deselected),
            }
        } else {
            Decision::Ignore
        };
    };
    let agent_initiated = is_agent_initiated(import, cluster, live);
    if !agent_initiated && !cluster.control_plane_initialized {
        return Decision::Wait;
    }
    Decision::Import { agent_initiated }
}

/// What a Cluster counts as in `status.clusters` and the cluster gauges while selection is
/// frozen ([`Decision::Hold`]: `spec.cluster` has problems and nothing is imported or released):
/// what exists, not what a selection would say. A Cluster carrying our finalizer is managed; it
/// counts as imported when its Fleet Cluster exists, as waiting otherwise. Any other decision is
/// returned as it is.
pub fn counted_as(
    decision: Decision,
    cluster: &ClusterView,
    live: Option<&FleetCluster>,
) -> Decision {
    if decision != Decision::Hold {
        return decision;
    }
    match (cluster.has_finalizer(), live) {
        (false, _) => Decision::Ignore,
        (true, None) => Decision::Wait,
        (true, Some(live)) => Decision::Import {
            agent_initiated: live
                .spec
                .client_id
                .as_deref()
                .is_some_and(|id| !id.is_empty()),
        },
    }
}

/// Whether a decision waits because the Cluster's namespace is terminating: nothing new is
/// created in a namespace being deleted (a real API server answers 403 "because it is being
/// terminated", and the namespace controller deletes the Cluster next, which brings
/// [`Decision::Cleanup`]). Releases and cleanups only remove things, so they go on.
pub fn waits_for_terminating_namespace(decision: &Decision, namespace_terminating: bool) -> bool {
    namespace_terminating && matches!(decision, Decision::Import { .. } | Decision::Wait)
}

/// How soon to look again for the values of a registration token Fleet has not issued yet (its
/// status change brings the Cluster back too; this covers a missed order of events).
pub const TOKEN_ISSUE_RETRY: Duration = Duration::from_secs(10);

/// What the Cluster controller observed of one Cluster: what [`plan`] decides its writes from.
pub struct Observed {
    pub view: ClusterView,
    pub decision: Decision,
    /// The CAPI Cluster's resourceVersion as cached (it guards our finalizer patch).
    pub cluster_version: Option<String>,
    /// What its Events are about.
    pub regarding: ObjectReference,
    pub fleet_name: String,
    /// Its Fleet Cluster: cached; when the cache has none and the decision deletes it, as the
    /// API server has it ([`Decision::confirms_fleet_cluster`]).
    pub fleet: Option<Arc<FleetCluster>>,
    /// Its registration token's metadata, as cached.
    pub token: Option<ObjectMeta>,
    /// What an import reads besides ([`Decision::Import`] only).
    pub import: Option<ImportInputs>,
    pub now: Timestamp,
    /// The periodic resync (`--sync-period`).
    pub resync: Duration,
    /// What the conflicts with Rancher Turtles are decided from (with the view's condition).
    pub conflicts: turtles::Seen,
}

/// What an import reads besides the Cluster and its Fleet Cluster.
pub struct ImportInputs {
    /// The Cluster's Fleet agent settings, or what holds it.
    pub agent: std::result::Result<AgentSettings, Held>,
    /// Its `templateValues` (empty when the agent settings are invalid: nothing is written).
    pub template_values: BTreeMap<String, Value>,
    /// The referenced objects that cannot be read, each reported once (a Warning Event).
    pub unreadable: Vec<String>,
    /// The versions a Cluster without a topology runs ([`upgrade_steps::machine_versions`]).
    pub machines: Option<upgrade_steps::VersionView>,
    /// Where its bootstrap Secret stands with the current registration token.
    pub bootstrap: Bootstrap,
    /// What its rollout hold depends on: its own facts, and the waves of every class.
    pub rollout: crate::model::rollout::Facts,
    pub gates: crate::model::rollout::Gates,
}

/// Invalid agent settings hold a Cluster: its Fleet Cluster is left as it is (or uncreated), its
/// agent keeps running as it does until they are fixed, and Warning Events say why.
pub struct Held {
    pub problems: Vec<LayerProblem>,
    /// The ClusterClasses carrying some of the problems (from the cache).
    pub classes: Vec<ObjectReference>,
}

/// Where the bootstrap Secret of the runtime extension stands with the Cluster's current
/// registration token.
#[derive(Clone, Debug, PartialEq)]
pub enum Bootstrap {
    /// Nothing to rewrite: no Secret (yet), one of an earlier release (it keeps its content),
    /// or one holding the current token's values.
    Current,
    /// Rendered from a token that was replaced, whose successor Fleet has not issued yet.
    NotIssued,
    /// Rendered from a token that was replaced: rewrite it with the values of the token `uid`.
    Replace {
        values: Box<TokenValues>,
        token_uid: String,
    },
}

/// Whether the Cluster may have a bootstrap Secret: its class uses this extension's `fleetAgent`
/// variable (Cluster API writes it into every Cluster of such a class; a control-plane override
/// may enable what the Cluster-level value disables), or the runtime extension prepared its
/// Fleet Cluster. Other agent-initiated Clusters cost no read.
pub fn may_have_bootstrap(view: &ClusterView, live: Option<&FleetCluster>) -> bool {
    view.variables.contains_key(FLEET_AGENT_VARIABLE)
        || prepared_by_runtime_extension(live.map(|l| &l.metadata))
}

/// The writes for one observed Cluster, in order, and when to look at it again.
pub fn plan(observed: &Observed, config: &EffectiveConfig) -> Result<Plan> {
    let o = observed;
    let mut plan = match &o.decision {
        Decision::Paused { .. } | Decision::Hold | Decision::Ignore => Plan::default(),
        Decision::Moved => Plan::of(o.moved(), Next::AwaitChange),
        Decision::Cleanup => Plan::of(o.cleanup(), Next::AwaitChange),
        Decision::Teardown { deadline } => o.teardown(config, *deadline),
        Decision::Release {
            delete_fleet_cluster,
        } => Plan::of(o.release(*delete_fleet_cluster), Next::AwaitChange),
        Decision::Wait => Plan::of(o.finalizer(true).into_iter().collect(), Next::AwaitChange),
        Decision::Turtles => Plan::of(o.finalizer(false).into_iter().collect(), Next::AwaitChange),
        Decision::Import { agent_initiated } => match (config.cluster.as_ref(), &o.import) {
            (Some(import), Some(inputs)) => o.import(import, inputs, *agent_initiated)?,
            _ => Plan::default(),
        },
    };
    // After our finalizer's patch, which the status write's new resourceVersion would fail.
    let at = plan
        .writes
        .iter()
        .position(|w| matches!(w, Write::Finalizer { .. }));
    let at = at.map_or(0, |i| i + 1);
    // The conflict's Event last: sent once every write before it is done, so a failed run
    // sends it on its retry (the controller keeps what it observed only then), not twice.
    let (events, conditions): (Vec<Write>, Vec<Write>) =
        (o.conflict().into_iter()).partition(|w| matches!(w, Write::Event { .. }));
    let settings = &config.runtime_extension.teardown;
    let ids = (o.cluster_id(), &o.regarding, o.fleet_name.as_str());
    let interrupted = teardown::interrupted_report(&o.view, settings, ids, o.now);
    plan.writes
        .splice(at..at, conditions.into_iter().chain(interrupted));
    plan.writes.extend(events);
    Ok(plan)
}

impl Observed {
    /// The conflict condition, and a Warning Event when a conflict is new: our finalizer removed
    /// by someone else, or the Fleet Cluster found under Turtles' `fleet-integration`.
    fn conflict(&self) -> Vec<Write> {
        let seen = &self.conflicts;
        let removals = seen.finalizer.removals;
        let conflict = match self.decision {
            Decision::Turtles => Some(Conflict::RancherFleetAgent),
            Decision::Wait | Decision::Import { .. } if removals > 0 => {
                Some(Conflict::FinalizerRemoved { removals })
            }
            Decision::Wait | Decision::Import { .. } | Decision::Release { .. } => None,
            Decision::Ignore if !self.view.deleting => None,
            _ => return vec![],
        };
        let condition = self.view.conflict.as_ref();
        let (cluster, generation) = (self.cluster_id(), self.view.generation);
        let write = turtles::condition_write(cluster, conflict, condition, generation, self.now);
        let live_reason = condition
            .and_then(|c| c.get("reason"))
            .and_then(Value::as_str);
        let new = conflict.filter(|c| match c {
            Conflict::FinalizerRemoved { .. } => seen.removed_now,
            Conflict::RancherFleetAgent => live_reason != Some(c.reason()),
        });
        let event = new.map(|c| {
            Write::event(
                &self.regarding,
                EventType::Warning,
                c.reason(),
                "Importing",
                c.message(),
            )
        });
        write.into_iter().chain(event).collect()
    }

    /// Moved into itself: the Fleet Cluster now serves the self-managed cluster. Keep it, and
    /// keep the garbage collector from deleting it with the source copy.
    fn moved(&self) -> Vec<Write> {
        let owned = (self.fleet.as_deref()).is_some_and(|live| self.view.owns(&live.metadata));
        let disown = owned.then(|| Write::Modify {
            object: self.fleet_id(),
            change: Change::Disown {
                uid: self.view.uid.clone(),
            },
            manager: names::FIELD_MANAGER,
        });
        let release = self.finalizer(false).filter(|_| self.view.deleting);
        disown.into_iter().chain(release).collect()
    }

    /// Deleted: remove what we created, then our finalizer. Nothing here waits, so deletion is
    /// never held. The Fleet Cluster is left to the garbage collector when the CAPI Cluster owns
    /// it; the namespace controller takes care of shared objects once the Cluster is gone.
    fn cleanup(&self) -> Vec<Write> {
        let fleet = (self.fleet.as_deref()).filter(|live| !self.view.owns(&live.metadata));
        let delete_fleet = fleet.map(|_| Write::Delete {
            object: self.fleet_id(),
            live_check: false,
        });
        let writes = delete_fleet.into_iter().chain([self.delete_token()]);
        writes.chain(self.finalizer(false)).collect()
    }

    /// Deleted, its Fleet workloads removed first (docs/lifecycle.md): the Fleet Cluster and our
    /// finalizer stay, so Fleet does not delete the cluster's namespace and abandon the
    /// workloads; once BeforeClusterDelete started the removal (the teardown label), the labels
    /// bundles select the cluster by come off, so Fleet removes their BundleDeployments and the
    /// agent uninstalls them. A Fleet Cluster whose agent never registered has nothing to
    /// remove: cleaned up at once. Looks again at the deadline; Cluster API's `ok-to-delete`,
    /// the skip annotation or the deadline end it (then the decision is [`Decision::Cleanup`]).
    fn teardown(&self, config: &EffectiveConfig, deadline: Timestamp) -> Plan {
        let left = Duration::try_from(deadline.duration_since(self.now)).unwrap_or_default();
        let until_deadline = Next::After(left.max(Duration::from_secs(1)));
        // The decision saw the Fleet Cluster's metadata: no object means it did not decode
        // (logged by the cache). Keep it rather than clean up and abandon its workloads.
        let Some(live) = self.fleet.as_deref() else {
            return Plan::of(vec![], until_deadline);
        };
        if !teardown::is_registered(live) {
            return Plan::of(self.cleanup(), Next::AwaitChange);
        }
        let labels = teardown::labels_of(live);
        let keys = teardown::started(&labels)
            .then(|| teardown::selection_label_keys(&self.view, config.cluster.as_ref(), live));
        let drain = keys.and_then(|keys| teardown::drain_patch(&keys, &labels));
        let writes = drain.map(|patch| Write::MergePatch {
            object: self.fleet_id(),
            patch,
            manager: names::FIELD_MANAGER,
        });
        Plan::of(writes.into_iter().collect(), until_deadline)
    }

    /// No longer selected: delete the Fleet Cluster when the decision says so, then let go.
    fn release(&self, delete_fleet_cluster: bool) -> Vec<Write> {
        let mut writes = vec![];
        if delete_fleet_cluster && self.fleet.is_some() {
            let note = format!(
                "No longer selected: deleted Fleet Cluster `{}`",
                self.fleet_name
            );
            writes.extend([
                Write::Delete {
                    object: self.fleet_id(),
                    live_check: false,
                },
                self.delete_token(),
                Write::event(
                    &self.regarding,
                    EventType::Normal,
                    "Deselected",
                    "Deleting",
                    note,
                ),
            ]);
        }
        writes.extend(self.finalizer(false));
        writes
    }

    /// Selected: our finalizer, the Fleet Cluster (a stub first when agent-initiated), and the
    /// registration token of an agent-initiated Cluster, kept valid until it registered.
    fn import(
        &self,
        import: &ClusterImport,
        inputs: &ImportInputs,
        agent_initiated: bool,
    ) -> Result<Plan> {
        let mut writes: Vec<Write> = self.finalizer(true).into_iter().collect();
        let agent = match &inputs.agent {
            Ok(agent) => agent,
            Err(held) => {
                writes.extend(self.held(held));
                return Ok(Plan::of(writes, Next::After(self.resync)));
            }
        };
        writes.extend(inputs.unreadable.iter().map(|problem| {
            let note = format!("{problem}; templateValues are set without it");
            let reason = "TemplateValuesIncomplete";
            Write::event(
                &self.regarding,
                EventType::Warning,
                reason,
                "Creating",
                note,
            )
        }));
        let live = self.fleet.as_deref();
        if agent_initiated && live.is_none() {
            // The first version of an agent-initiated Fleet Cluster is a stub: its name and a
            // fresh client ID. Our cache may not have seen one created a moment ago (by us or
            // by the runtime extension), so the API server decides: a conflict means someone
            // else's client ID stands, which the next observation reads.
            let stub = registration_stub(&self.view, import, &random_client_id());
            writes.push(Write::CreateOrGet {
                object: self.fleet_id(),
                body: serde_json::to_value(stub)?,
                manager: names::REGISTRATION_FIELD_MANAGER,
            });
            return Ok(Plan::of(writes, Next::Echo));
        }
        let registration = if agent_initiated {
            Registration::AgentInitiated {
                client_id: client_id(live, random_client_id),
            }
        } else {
            Registration::ManagerInitiated
        };
        let values = Some(inputs.template_values.clone());
        let mut desired = desired_fleet_cluster(&self.view, import, agent, &registration, values);
        if agent_initiated && may_have_bootstrap(&self.view, live) {
            crate::model::fleet::default_boot_host_network(&mut desired.spec);
        }
        let held = match (agent_initiated, live) {
            (true, Some(live)) => {
                crate::model::fleet::hold_stranding_changes(&mut desired.spec, live)
            }
            _ => vec![],
        };
        if !held.is_empty() {
            let annotations = desired
                .metadata
                .annotations
                .get_or_insert_with(Default::default);
            annotations.insert(
                names::HELD_AGENT_SETTINGS_ANNOTATION.into(),
                held.join("; "),
            );
        }
        writes.extend(held.into_iter().map(|note| {
            let reason = crate::model::fleet::AGENT_SETTING_HELD_REASON;
            Write::event(
                &self.regarding,
                EventType::Warning,
                reason,
                "Importing",
                note,
            )
        }));
        upgrade_steps::show(&mut desired, &self.view, live, inputs.machines.as_ref());
        let shown = rollout::show(
            &mut desired,
            &self.view,
            &import.variable_labels,
            import.rollout.as_ref(),
            &inputs.rollout,
            &inputs.gates,
            self.now,
        );
        let (object, manager) = (self.fleet_id(), names::FIELD_MANAGER);
        let write = match fleet_cluster_write(import.patch_resource, live) {
            // The cache keeps templateValues as a digest.
            FleetClusterWrite::Apply => {
                Write::apply_if_changed(object, &desired, live, manager, Some(TEMPLATE_VALUES))?
            }
            FleetClusterWrite::CreateOnly if live.is_none() => Some(Write::Create {
                object,
                body: serde_json::to_value(&desired)?,
            }),
            FleetClusterWrite::CreateOnly => None,
        };
        // An update changes what a user may rely on: say so where they look. Creating (and
        // completing our own registration stub) is what every selected Cluster gets: a log line
        // and the imported count in the FleetAddonConfig status, not an Event per Cluster.
        let updated = write.is_some() && live.is_some_and(|live| !is_own_stub(live));
        if write.is_some() {
            writes.extend(self.rollout_events(live, &shown));
        }
        writes.extend(write);
        if updated {
            let note = format!(
                "Updated `fleet.cattle.io/v1alpha1/Cluster` object `{}` in `{}`",
                self.fleet_name, self.view.namespace
            );
            let regarding = &self.regarding;
            writes.push(Write::event(
                regarding,
                EventType::Normal,
                "Updated",
                "Updating",
                note,
            ));
        }
        let token_check = match agent_initiated {
            true => self.keep_token(import, inputs, live, &mut writes)?,
            false => None,
        };
        let then = token_check.map_or(self.resync, |check| check.min(self.resync));
        let soak = shown.held.and_then(|h| h.until).map(|until| {
            let left = until.duration_since(self.now);
            Duration::try_from(left).unwrap_or_default() + Duration::from_secs(1)
        });
        let then = soak.map_or(then, |soak| soak.min(then));
        Ok(Plan::of(writes, Next::After(then)))
    }

    /// The registration token of an agent-initiated Cluster whose agent has not registered
    /// yet: created when missing (Fleet deletes expired tokens), extended before it expires
    /// ([`crate::model::registration_token`]), and the bootstrap Secret's registration values
    /// following a token that was replaced. Returns when to look again (`None`: nothing to
    /// keep, or the new token's watch event brings the Cluster back).
    fn keep_token(
        &self,
        import: &ClusterImport,
        inputs: &ImportInputs,
        live: Option<&FleetCluster>,
        writes: &mut Vec<Write>,
    ) -> Result<Option<Duration>> {
        if live.is_some_and(teardown::is_registered) {
            return Ok(None);
        }
        let Some(token) = &self.token else {
            let desired = desired_registration_token(&self.view, import, self.now);
            let body = serde_json::to_value(desired)?;
            writes.push(Write::Create {
                object: self.token_id(),
                body,
            });
            return Ok(None);
        };
        let ttl = crate::api::duration::parse_duration(&import.registration_token_ttl)
            .unwrap_or(Duration::from_secs(24 * 3600));
        let created = token.creation_timestamp.as_ref().map_or(self.now, |t| t.0);
        let annotations = token.annotations.as_ref();
        let recorded =
            annotations.and_then(|a| a.get(names::REGISTRATION_TOKEN_EXPIRES_ANNOTATION));
        let next = match renewal(created, recorded.map(String::as_str), ttl, self.now) {
            Renewal::Wait(wait) => wait,
            Renewal::Extend {
                ttl,
                expires,
                recheck,
            } => {
                writes.push(Write::MergePatch {
                    object: self.token_id(),
                    patch: extension_patch(&ttl, expires),
                    manager: names::FIELD_MANAGER,
                });
                recheck
            }
        };
        Ok(Some(match &inputs.bootstrap {
            Bootstrap::Current => next,
            Bootstrap::NotIssued => next.min(TOKEN_ISSUE_RETRY),
            Bootstrap::Replace { values, token_uid } => {
                let name = names::bootstrap_secret_name(&self.view.name);
                let note = format!(
                    "The ClusterRegistrationToken was replaced before the Cluster registered: bootstrap Secret `{name}` now holds the new token (machines created from now on register with it)"
                );
                writes.extend([
                    Write::Modify {
                        object: ObjectId::of::<Secret>(Some(&self.view.namespace), &name, None),
                        change: Change::TokenValues {
                            values: values.clone(),
                            token_uid: token_uid.clone(),
                        },
                        manager: names::FIELD_MANAGER,
                    },
                    Write::event(
                        &self.regarding,
                        EventType::Normal,
                        "BootstrapTokenReplaced",
                        "Updating",
                        note,
                    ),
                ]);
                next
            }
        }))
    }

    /// The Events of a Fleet Cluster write that changes what waves show: values that make no
    /// label, and a hold that starts, changes or ends.
    fn rollout_events(&self, live: Option<&FleetCluster>, shown: &rollout::Shown) -> Vec<Write> {
        // The hold is the action: kube-runtime's Recorder folds Events of one type, reason,
        // action and object into a series that keeps its first note (kube-runtime 3.1.0
        // `events.rs` `EventKey`), so each hold gets its own.
        let event = |type_, reason, action, note: String| {
            Write::event(&self.regarding, type_, reason, action, note)
        };
        let mut events: Vec<Write> = shown
            .problems
            .iter()
            .map(|p| {
                event(
                    EventType::Warning,
                    "RolloutLabelInvalid",
                    "Labelling",
                    p.clone(),
                )
            })
            .collect();
        let labels = live.and_then(|l| l.metadata.labels.as_ref());
        let was = labels.and_then(|l| l.get(names::ROLLOUT_HOLD_LABEL));
        match (&shown.held, was) {
            (Some(held), was) if was.map(String::as_str) != Some(held.hold.as_str()) => {
                let note = format!("{}: {}", held.hold.as_str(), held.message);
                events.push(event(
                    EventType::Normal,
                    "RolloutHeld",
                    held.hold.as_str(),
                    note,
                ));
            }
            (None, Some(was)) => {
                let note = format!("the {was} hold ended: Fleet may roll out to this cluster");
                let hold = rollout::Hold::ALL.into_iter().find(|h| h.as_str() == was);
                let action = hold.map_or("Labelling", rollout::Hold::as_str);
                events.push(event(EventType::Normal, "RolloutReleased", action, note));
            }
            _ => {}
        }
        events
    }

    /// A Warning Event on each object carrying a problem: the ClusterClass for its annotation's,
    /// the Cluster for its own; the Cluster's Event names all of them (it is what is held).
    fn held(&self, held: &Held) -> Vec<Write> {
        let all: Vec<String> = held.problems.iter().map(ToString::to_string).collect();
        let note = format!(
            "Fleet agent settings invalid, the Fleet Cluster is left as it is until they are fixed: {}",
            all.join("; ")
        );
        let warning = |regarding, note| {
            Write::event(
                regarding,
                EventType::Warning,
                INVALID_REASON,
                "Importing",
                note,
            )
        };
        let mut events = vec![warning(&self.regarding, note)];
        for class in &held.classes {
            let carried = |carrier: &Carrier| {
                matches!(carrier, Carrier::ClusterClass { namespace, name }
                    if class.namespace.as_ref() == Some(namespace) && class.name.as_ref() == Some(name))
            };
            let carried = held.problems.iter().filter(|p| carried(&p.carrier));
            let errors: Vec<String> = carried.map(|p| p.error.to_string()).collect();
            let note = format!(
                "Fleet agent settings invalid, the Fleet Clusters of this class are left as they are until they are fixed: {}",
                errors.join("; ")
            );
            events.push(warning(class, note));
        }
        events
    }

    /// Adds (`add`) or removes our finalizer, when that changes the Cluster.
    fn finalizer(&self, add: bool) -> Option<Write> {
        let allowed = !add || self.conflicts.finalizer.may_add();
        (self.view.has_finalizer() != add && allowed).then(|| Write::Finalizer {
            object: self.cluster_id(),
            add,
            finalizers: self.view.finalizers.clone(),
        })
    }

    /// Deletes the registration token, if there is one (asking the API server when the cache
    /// has none: it may not have seen a token created moments ago); only tokens of
    /// agent-initiated Clusters exist.
    fn delete_token(&self) -> Write {
        Write::Delete {
            object: self.token_id(),
            live_check: self.token.is_none(),
        }
    }

    /// The CAPI Cluster, guarded by its cached resourceVersion.
    fn cluster_id(&self) -> ObjectId {
        let namespace = Some(self.view.namespace.as_str());
        ObjectId::of::<CapiCluster>(namespace, &self.view.name, self.cluster_version.as_deref())
    }

    fn fleet_id(&self) -> ObjectId {
        let seen = self
            .fleet
            .as_deref()
            .and_then(|l| l.metadata.resource_version.as_deref());
        ObjectId::of::<FleetCluster>(Some(&self.view.namespace), &self.fleet_name, seen)
    }

    fn token_id(&self) -> ObjectId {
        let seen = self
            .token
            .as_ref()
            .and_then(|t| t.resource_version.as_deref());
        let namespace = Some(self.view.namespace.as_str());
        ObjectId::of::<ClusterRegistrationToken>(namespace, &self.view.name, seen)
    }
}

/// Whether `live` is the registration stub the import created ([`registration_stub`]) and no
/// import completed since: completing it is the Fleet Cluster's creation.
fn is_own_stub(live: &FleetCluster) -> bool {
    let mut managers = live.metadata.managed_fields.iter().flatten();
    is_registration_stub(live)
        && managers.any(|e| e.manager.as_deref() == Some(names::REGISTRATION_FIELD_MANAGER))
}

#[cfg(test)]
#[path = "import_tests.rs"]
mod tests;
