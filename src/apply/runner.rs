//! The one runner: carries out a [`Plan`] of the model against a [`Target`] (a client, its
//! Event recorder, and the expectations its writes record), write by write in order, and stops
//! at the first error. Each write that changed its object records what it left for the caches
//! to show ([`Expectations`]), so no caller records by hand. Errors are [`crate::Error`], mapped
//! once here from the client's; a caller turns them into its own answer in one place (a
//! controller's backoff, a hook's "retry").

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DynamicObject};
use kube::runtime::events::Recorder;
use kube::{Client, Resource};
use serde_json::Value;

use crate::apply::expectations::{Expectations, Key};
use crate::apply::{
    CreateOrGet, apply_json, create_if_missing, create_or_get, delete_if_exists, event, finalizer,
    merge_patch, merge_patch_guarded,
};
use crate::model::hook_plan::{HookOutcome, api_retry};
use crate::model::plan::{Next, ObjectId, Plan, Write};
use crate::{Error, Result};

/// Where a plan is carried out.
#[derive(Clone, Copy)]
pub struct Target<'a> {
    pub client: &'a Client,
    pub recorder: &'a Recorder,
    /// What the writes record for the caches to show (`None`: a writer that does not wait for
    /// its caches).
    pub expectations: Option<&'a Expectations>,
}

/// What one write did.
struct Done {
    object: ObjectId,
    verb: &'static str,
    /// Whether it changed the object.
    changed: bool,
    /// The resourceVersion it left (`None`: nothing written, or deleted).
    left: Option<String>,
}

impl Target<'_> {
    /// Carries out `plan`'s writes in order, stopping at the first error; then what to do next.
    pub async fn run(&self, plan: Plan) -> Result<Next> {
        Ok(self.run_reporting(plan).await?.0)
    }

    /// [`Self::run`], and the reasons of the Events it published (a failed publish is not).
    pub async fn run_reporting(&self, plan: Plan) -> Result<(Next, Vec<&'static str>)> {
        let mut published = vec![];
        for write in plan.writes {
            published.extend(self.write(write).await?);
        }
        Ok((plan.then, published))
    }

    /// [`Self::run`] for a hook: an error is its answer, a retry naming the write that failed
    /// ([`api_retry`]).
    pub async fn answer(&self, plan: Plan) -> std::result::Result<Next, HookOutcome> {
        for write in plan.writes {
            let named = write.describe().map(|(what, object)| {
                let namespace = object.namespace.clone().unwrap_or_default();
                (what, namespace, object.name.clone())
            });
            if let Err(err) = self.write(write).await {
                let (what, ns, name) = named.unwrap_or_default();
                return Err(api_retry(&what, &ns, &name, &err));
            }
        }
        Ok(plan.then)
    }

    /// One write; the reason of the Event it published.
    async fn write(&self, write: Write) -> Result<Option<&'static str>> {
        let done = match write {
            Write::Event {
                regarding,
                type_,
                reason,
                action,
                note,
            } => {
                let published = event(self.recorder, &regarding, type_, reason, action, note).await;
                return Ok(published.then_some(reason));
            }
            Write::Apply {
                object,
                body,
                manager,
            } => {
                let applied =
                    apply_json(&self.api(&object), &object.name, &body, manager, false).await?;
                Done::changed(object, "apply", &applied)
            }
            Write::ApplyStatus {
                object,
                body,
                manager,
            } => match apply_json(&self.api(&object), &object.name, &body, manager, true).await {
                Ok(applied) => Done::changed(object, "status apply", &applied),
                // Gone since observed: nothing to report on.
                Err(Error::Kube(kube::Error::Api(status)))
                    if status.code == 404 && object.seen.is_some() =>
                {
                    Done::unchanged(object, "status apply")
                }
                Err(err) => return Err(err),
            },
            Write::Create { object, body } => {
                let desired: DynamicObject = serde_json::from_value(body)?;
                let left = create_if_missing(&self.api(&object), &desired).await?;
                Done::left(object, "create", left)
            }
            Write::CreateOrGet {
                object,
                body,
                manager,
            } => {
                let desired: DynamicObject = serde_json::from_value(body)?;
                let done = match create_or_get(&self.api(&object), &desired, manager).await? {
                    CreateOrGet::Created(created) => Done::changed(object, "create", &created),
                    CreateOrGet::Existing(_) => Done::unchanged(object, "create"),
                    // Neither ours nor theirs exists: the plan's premise is gone, try again.
                    CreateOrGet::Vanished => {
                        let namespace = object.namespace.as_deref().unwrap_or_default();
                        let name = format!("{namespace}/{}", object.name);
                        return Err(Error::missing(
                            "object",
                            name,
                            "deleted while we created it",
                        ));
                    }
                };
                // Its answer is the next observation's: its watch event must come through.
                let key = self.record(&done);
                if let (Some(expectations), Some(key)) = (self.expectations, key) {
                    expectations.await_echo(&key);
                }
                return Ok(None);
            }
            Write::MergePatch {
                object,
                patch,
                manager,
            } => {
                let patched =
                    merge_patch(&self.api(&object), &object.name, &patch, manager).await?;
                Done::changed(object, "merge patch", &patched)
            }
            Write::Modify {
                object,
                change,
                manager,
            } => {
                let modify = |current: Option<&DynamicObject>| match current {
                    Some(current) => change.patch(&serde_json::to_value(current)?),
                    None => change.absent(&object).map(|()| None),
                };
                let api = self.api(&object);
                match merge_patch_guarded(&api, &object.name, manager, modify).await? {
                    Some(patched) => Done::changed(object, "guarded merge patch", &patched),
                    None => Done::unchanged(object, "guarded merge patch"),
                }
            }
            Write::Finalizer {
                object,
                add,
                finalizers,
            } => {
                let observed = DynamicObject {
                    types: None,
                    metadata: ObjectMeta {
                        name: Some(object.name.clone()),
                        namespace: object.namespace.clone(),
                        resource_version: object.seen.clone(),
                        finalizers: Some(finalizers),
                        ..ObjectMeta::default()
                    },
                    data: Value::Null,
                };
                let left = finalizer(&self.api(&object), &observed, add).await?;
                Done::left(object, "finalizer patch", left)
            }
            Write::Delete { object, live_check } => {
                let api = self.api(&object);
                let exists = !live_check || api.get_metadata_opt(&object.name).await?.is_some();
                let deleted = exists && delete_if_exists(&api, &object.name).await?;
                Done {
                    changed: deleted,
                    ..Done::unchanged(object, "delete")
                }
            }
        };
        self.record(&done);
        Ok(None)
    }

    /// Logs a write that changed its object and records what it left; returns its key.
    fn record(&self, done: &Done) -> Option<Key> {
        let Done {
            object,
            verb,
            changed,
            left,
        } = done;
        if !changed {
            return None;
        }
        let (kind, namespace, name) = (&object.resource.kind, &object.namespace, &object.name);
        if matches!(*verb, "finalizer patch" | "status apply") {
            tracing::debug!(%kind, ?namespace, %name, verb, "written");
        } else {
            tracing::info!(%kind, ?namespace, %name, verb, "written");
        }
        let key = Key::of(object, *verb == "status apply");
        if let (Some(expectations), Some(left)) = (self.expectations, left) {
            expectations.wrote(key.clone(), object.seen.as_deref(), Some(left));
        }
        Some(key)
    }

    fn api(&self, object: &ObjectId) -> Api<DynamicObject> {
        let client = self.client.clone();
        match &object.namespace {
            Some(namespace) => Api::namespaced_with(client, namespace, &object.resource),
            None => Api::all_with(client, &object.resource),
        }
    }
}

impl Done {
    fn left(object: ObjectId, verb: &'static str, left: Option<String>) -> Self {
        Done {
            object,
            verb,
            changed: left.is_some(),
            left,
        }
    }

    fn changed(object: ObjectId, verb: &'static str, written: &DynamicObject) -> Self {
        Done::left(object, verb, written.meta().resource_version.clone())
    }

    fn unchanged(object: ObjectId, verb: &'static str) -> Self {
        Done::left(object, verb, None)
    }
}
