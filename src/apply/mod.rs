//! The one writer: every write of the provider to the API server (controllers, hooks, leader
//! election; status subresources and Events included) goes through this module, and no other
//! module names the write parameters of `kube` (`tests/structure.rs` checks it). The model's
//! plans ([`crate::model::plan`]) are carried out by the one runner ([`runner::Target::run`]),
//! which records what each write left for the caches to show ([`expectations`]), with the verbs
//! below (only the Lease and Events call them from outside). Each answers the races the API
//! server has once, here: "create, adopt on 409", "delete, 404 is fine", "retry on a stale
//! resourceVersion". Errors are
//! [`crate::Error`]; callers turn them into their own answer (a reconcile error, a hook's
//! "retry") in one place each.

pub mod expectations;
pub mod runner;

use std::fmt::Debug;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::core::Resource;
use kube::runtime::events::{Event, EventType, Recorder};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::model::plan::finalizer_patch;
use crate::{Error, Result};

pub use runner::Target;

/// Server-side applies `body` (forced) to `name` ([`Write::Apply`]), or (`status`) to its
/// status subresource: the fields `manager` owns there and nothing else.
async fn apply_json<K>(
    api: &Api<K>,
    name: &str,
    body: &Value,
    manager: &str,
    status: bool,
) -> Result<K>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let (params, patch) = (PatchParams::apply(manager).force(), Patch::Apply(body));
    Ok(match status {
        true => api.patch_status(name, &params, &patch).await?,
        false => api.patch(name, &params, &patch).await?,
    })
}

/// Creates `object` (no field manager, no retry): for objects one writer alone creates, such as
/// the leader Lease.
pub async fn create<K>(api: &Api<K>, object: &K) -> Result<K>
where
    K: Resource + Serialize + DeserializeOwned + Clone + Debug,
{
    Ok(api.create(&PostParams::default(), object).await?)
}

/// Replaces `name` with `object`, guarded by the resourceVersion `object` carries (a 409 when
/// someone wrote since).
pub async fn replace<K>(api: &Api<K>, name: &str, object: &K) -> Result<K>
where
    K: Resource + Serialize + DeserializeOwned + Clone + Debug,
{
    Ok(api.replace(name, &PostParams::default(), object).await?)
}

/// Publishes an Event about `regarding` through `recorder`; whether it was. Failures are logged,
/// not returned: an Event is never worth failing a reconcile (e.g. the namespace is terminating).
pub async fn event(
    recorder: &Recorder,
    regarding: &ObjectReference,
    type_: EventType,
    reason: &str,
    action: &str,
    note: String,
) -> bool {
    let event = Event {
        type_,
        reason: reason.to_string(),
        note: Some(note),
        action: action.to_string(),
        secondary: None,
    };
    let published = recorder.publish(&event, regarding).await;
    if let Err(err) = &published {
        tracing::debug!(%err, reason, object = ?regarding.name, "event not published");
    }
    published.is_ok()
}

/// Creates `desired` unless it exists; never updates (CAAPF's `patchResource: false`). Returns
/// the resourceVersion it left (`None`: it existed).
async fn create_if_missing<K>(api: &Api<K>, desired: &K) -> Result<Option<String>>
where
    K: Resource + Serialize + DeserializeOwned + Clone + Debug,
{
    match api.create(&PostParams::default(), desired).await {
        Ok(created) => Ok(created.meta().resource_version.clone()),
        // Our cache was behind: it exists, which is all create-only wants.
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(None),
        Err(err) => Err(err.into()),
    }
}

/// What [`create_or_get`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CreateOrGet<K> {
    /// We created it: the object as the API server answered the create.
    Created(K),
    /// Someone else had created it (409): theirs, as read after the conflict.
    Existing(K),
    /// It existed at the create (409) but was gone by the read that followed.
    Vanished,
}

impl<K> CreateOrGet<K> {
    /// The object, created or found (`None` when it vanished).
    pub fn into_object(self) -> Option<K> {
        match self {
            CreateOrGet::Created(object) | CreateOrGet::Existing(object) => Some(object),
            CreateOrGet::Vanished => None,
        }
    }

    /// Whether this call created it.
    pub fn created(&self) -> bool {
        matches!(self, CreateOrGet::Created(_))
    }
}

/// Creates `object` with field manager `manager`; when someone else created it first (another
/// replica, another controller), reads and returns theirs: never overwrites. Says which it was,
/// so callers can tell their own creation (an event, an expectation) from an adoption.
pub async fn create_or_get<K>(api: &Api<K>, object: &K, manager: &str) -> Result<CreateOrGet<K>>
where
    K: Resource + Serialize + DeserializeOwned + Clone + Debug,
{
    let params = PostParams {
        field_manager: Some(manager.to_string()),
        ..PostParams::default()
    };
    match api.create(&params, object).await {
        Ok(created) => Ok(CreateOrGet::Created(created)),
        Err(kube::Error::Api(status)) if status.code == 409 => {
            let name = object.meta().name.clone().unwrap_or_default();
            Ok(match api.get_opt(&name).await? {
                Some(existing) => CreateOrGet::Existing(existing),
                None => CreateOrGet::Vanished,
            })
        }
        Err(err) => Err(err.into()),
    }
}

/// Merge-patches `patch` into `name` with field manager `manager` (no resourceVersion guard:
/// for fields only this writer sets).
async fn merge_patch<K>(api: &Api<K>, name: &str, patch: &Value, manager: &str) -> Result<K>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let params = PatchParams {
        field_manager: Some(manager.to_string()),
        ..PatchParams::default()
    };
    Ok(api.patch(name, &params, &Patch::Merge(patch)).await?)
}

/// How often a guarded read-modify-write is tried when someone else wrote in between.
const CONFLICT_ATTEMPTS: usize = 3;

/// Read-modify-write of `name`: reads it (`None` when absent), asks `change` for a JSON merge
/// patch (`None`: nothing to change) and applies it guarded by the resourceVersion read, so a
/// concurrent writer is never overwritten: on a conflict it reads again and retries. Returns
/// the object as patched (`None`: nothing written).
async fn merge_patch_guarded<K>(
    api: &Api<K>,
    name: &str,
    manager: &str,
    change: impl Fn(Option<&K>) -> Result<Option<Value>>,
) -> Result<Option<K>>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    for attempt in 1..=CONFLICT_ATTEMPTS {
        let current = api.get_opt(name).await?;
        let Some(mut patch) = change(current.as_ref())? else {
            return Ok(None);
        };
        if let (Some(object), Some(map)) = (current.as_ref(), patch.as_object_mut()) {
            let metadata = map.entry("metadata").or_insert_with(|| json!({}));
            metadata["resourceVersion"] = json!(object.meta().resource_version);
        }
        match merge_patch(api, name, &patch, manager).await {
            Ok(patched) => return Ok(Some(patched)),
            Err(Error::Kube(kube::Error::Api(status)))
                if status.code == 409 && attempt < CONFLICT_ATTEMPTS =>
            {
                tracing::debug!(object = name, "changed while we wrote it; reading again");
            }
            Err(err) => return Err(err),
        }
    }
    unreachable!("the last attempt returns")
}

/// Deletes `name` (background propagation); `false` when it was already gone.
async fn delete_if_exists<K>(api: &Api<K>, name: &str) -> Result<bool>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    match api.delete(name, &DeleteParams::background()).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(false),
        Err(err) => Err(err.into()),
    }
}

/// Adds (`add`) or removes our finalizer (a no-op when there is nothing to change), guarded by
/// the object's resourceVersion ([`finalizer_patch`]). The object given may be behind our own
/// last write: when the guard fails, the object is read again and the patch retried, a few
/// times. A vanished object needs no patch. Returns the resourceVersion the patch left (`None`:
/// nothing patched).
async fn finalizer<K>(api: &Api<K>, object: &K, add: bool) -> Result<Option<String>>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    const ATTEMPTS: usize = 4;
    let name = object.meta().name.clone().unwrap_or_default();
    let mut current = object.clone();
    for attempt in 1..=ATTEMPTS {
        let meta = current.meta();
        let finalizers = meta.finalizers.as_deref().unwrap_or_default();
        let version = meta.resource_version.as_deref().unwrap_or_default();
        let Some(patch) = finalizer_patch(finalizers, version, add) else {
            return Ok(None);
        };
        match patch_json(api, &name, patch).await {
            Ok(patched) => return Ok(patched.meta().resource_version.clone()),
            Err(Error::Kube(kube::Error::Api(status))) if status.code == 404 => return Ok(None),
            // 422: the `test` of the resourceVersion failed; 409: a conflicting write.
            Err(Error::Kube(kube::Error::Api(status)))
                if (status.code == 422 || status.code == 409) && attempt < ATTEMPTS =>
            {
                match api.get_opt(&name).await? {
                    Some(fresh) => current = fresh,
                    None => return Ok(None),
                }
            }
            Err(err) => return Err(err),
        }
    }
    Ok(None)
}

async fn patch_json<K>(api: &Api<K>, name: &str, ops: Vec<Value>) -> Result<K>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let patch: json_patch::Patch = serde_json::from_value(Value::Array(ops))?;
    Ok(api
        .patch(name, &PatchParams::default(), &Patch::<()>::Json(patch))
        .await?)
}
