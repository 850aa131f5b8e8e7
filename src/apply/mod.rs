//! The one writer: every write of the provider to the API server (controllers, hooks, leader
//! election; status subresources and Events included) goes through this module, and no other
//! module names the write parameters of `kube` (`tests/structure.rs` checks it). Server-side
//! apply after comparing with the cached live object, apply of a status, create-only,
//! create-or-adopt, delete, finalizer patches, guarded read-modify-write, the Lease's create and
//! replace, and Events. Each answers the races the API server has once, here: "create, adopt on
//! 409", "delete, 404 is fine", "retry on a stale resourceVersion". Errors are
//! [`crate::Error`]; callers turn them into their own answer (a reconcile error, a hook's
//! "retry") in one place each.
//!
//! A writer whose caches must show its own writes before it decides again (the import
//! controllers) hands each write to [`expectations::Expect::record`], which records what the
//! write left ([`expectations`]).

pub mod expectations;

use std::fmt::Debug;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::core::Resource;
use kube::runtime::events::{Event, EventType, Recorder};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::apply::expectations::LeavesVersion;
use crate::model::diff::{apply_would_change, owned_fields};
use crate::names;
use crate::{Error, Result};

/// What a write did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Unchanged,
    Created,
    Updated,
}

/// What a write did, and the resourceVersion it left (`None` when nothing was written): our
/// cache shows the write once it holds another resourceVersion than before
/// (see [`crate::apply::expectations`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Written {
    pub outcome: Outcome,
    pub resource_version: Option<String>,
}

impl LeavesVersion for Written {
    fn left_version(&self) -> Option<&str> {
        self.resource_version.as_deref()
    }
}

impl Written {
    const UNCHANGED: Written = Written {
        outcome: Outcome::Unchanged,
        resource_version: None,
    };

    fn of<K: Resource>(outcome: Outcome, object: &K) -> Self {
        Written {
            outcome,
            resource_version: object.meta().resource_version.clone(),
        }
    }
}

/// Server-side applies `desired` (forced: Fleet's controllers co-own some fields of these
/// objects) unless it would not change `live`.
pub async fn apply_if_changed<K>(
    api: &Api<K>,
    desired: &K,
    live: Option<&K>,
    manager: &str,
) -> Result<Written>
where
    K: Resource + Serialize + DeserializeOwned + Clone + Debug,
{
    apply_if_changed_as(api, desired, live, manager, |_| {}).await
}

/// [`apply_if_changed`] for objects whose cache keeps a different form than the API server
/// sends (a subtree as a digest, see [`crate::model::diff::digest_subtree`]): `comparable`
/// brings both sides to the cached form before the no-op check; the apply sends `desired`.
pub async fn apply_if_changed_as<K>(
    api: &Api<K>,
    desired: &K,
    live: Option<&K>,
    manager: &str,
    comparable: impl Fn(&mut Value),
) -> Result<Written>
where
    K: Resource + Serialize + DeserializeOwned + Clone + Debug,
{
    let name = desired
        .meta()
        .name
        .clone()
        .ok_or_else(|| Error::Serialization("desired object has no name".into()))?;
    let desired_json = serde_json::to_value(desired)?;
    if let Some(live) = live {
        let mut live_json = serde_json::to_value(live)?;
        comparable(&mut live_json);
        let mut compared = desired_json.clone();
        comparable(&mut compared);
        if !apply_would_change(
            &compared,
            &live_json,
            owned_fields(&live_json, manager).as_deref(),
        ) {
            return Ok(Written::UNCHANGED);
        }
    }
    let applied = api
        .patch(
            &name,
            &PatchParams::apply(manager).force(),
            &Patch::Apply(&desired_json),
        )
        .await?;
    let outcome = if live.is_some() {
        Outcome::Updated
    } else {
        Outcome::Created
    };
    Ok(Written::of(outcome, &applied))
}

/// Server-side applies `body` (forced) to `name`, without a comparison: for writers that
/// decided from the live object themselves.
pub async fn apply_json<K>(api: &Api<K>, name: &str, body: &Value, manager: &str) -> Result<K>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    Ok(api
        .patch(
            name,
            &PatchParams::apply(manager).force(),
            &Patch::Apply(body),
        )
        .await?)
}

/// Server-side applies `body` (forced) to the status subresource of `name`: the fields
/// `manager` owns there and nothing else.
pub async fn apply_status<K>(api: &Api<K>, name: &str, body: &Value, manager: &str) -> Result<K>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    Ok(api
        .patch_status(
            name,
            &PatchParams::apply(manager).force(),
            &Patch::Apply(body),
        )
        .await?)
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

/// Publishes an Event about `regarding` through `recorder`. Failures are logged, not returned:
/// an Event is never worth failing a reconcile (e.g. the namespace is terminating).
pub async fn event(
    recorder: &Recorder,
    regarding: &ObjectReference,
    type_: EventType,
    reason: &str,
    action: &str,
    note: String,
) {
    let event = Event {
        type_,
        reason: reason.to_string(),
        note: Some(note),
        action: action.to_string(),
        secondary: None,
    };
    if let Err(err) = recorder.publish(&event, regarding).await {
        tracing::debug!(%err, reason, object = ?regarding.name, "event not published");
    }
}

/// Creates `desired` when `live` is absent; never updates (CAAPF's `patchResource: false`).
pub async fn create_if_missing<K>(api: &Api<K>, desired: &K, live: Option<&K>) -> Result<Written>
where
    K: Resource + Serialize + DeserializeOwned + Clone + Debug,
{
    if live.is_some() {
        return Ok(Written::UNCHANGED);
    }
    match api.create(&PostParams::default(), desired).await {
        Ok(created) => Ok(Written::of(Outcome::Created, &created)),
        // Our cache was behind: it exists, which is all create-only wants.
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(Written::UNCHANGED),
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
pub async fn merge_patch<K>(api: &Api<K>, name: &str, patch: &Value, manager: &str) -> Result<K>
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
/// whether it wrote.
pub async fn merge_patch_guarded<K>(
    api: &Api<K>,
    name: &str,
    manager: &str,
    change: impl Fn(Option<&K>) -> Result<Option<Value>>,
) -> Result<bool>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    for attempt in 1..=CONFLICT_ATTEMPTS {
        let current = api.get_opt(name).await?;
        let Some(mut patch) = change(current.as_ref())? else {
            return Ok(false);
        };
        if let (Some(object), Some(map)) = (current.as_ref(), patch.as_object_mut()) {
            let metadata = map.entry("metadata").or_insert_with(|| json!({}));
            metadata["resourceVersion"] = json!(object.meta().resource_version);
        }
        match merge_patch(api, name, &patch, manager).await {
            Ok(_) => return Ok(true),
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
pub async fn delete_if_exists<K>(api: &Api<K>, name: &str) -> Result<bool>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    match api.delete(name, &DeleteParams::background()).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(false),
        Err(err) => Err(err.into()),
    }
}

/// Adds our finalizer, guarded by the object's resourceVersion. The cached object may be behind
/// our own last write: when the guard fails, the object is read again and the patch retried.
/// Returns the resourceVersion the patch left (`None`: nothing patched).
pub async fn add_finalizer<K>(api: &Api<K>, object: &K) -> Result<Option<String>>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    with_fresh_retry(api, object, |current| {
        if current
            .meta()
            .finalizers
            .iter()
            .flatten()
            .any(|f| f == names::FINALIZER)
        {
            return None;
        }
        let mut ops = vec![test_resource_version(current)];
        match &current.meta().finalizers {
            Some(list) if !list.is_empty() => ops.push(json!({
                "op": "add", "path": "/metadata/finalizers/-", "value": names::FINALIZER
            })),
            _ => ops.push(json!({
                "op": "add", "path": "/metadata/finalizers", "value": [names::FINALIZER]
            })),
        }
        Some(ops)
    })
    .await
}

/// Removes our finalizer (a no-op when it is not there), guarded by the resourceVersion and
/// retried on a fresh read like [`add_finalizer`].
pub async fn remove_finalizer<K>(api: &Api<K>, object: &K) -> Result<Option<String>>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    with_fresh_retry(api, object, |current| {
        let index = current
            .meta()
            .finalizers
            .iter()
            .flatten()
            .position(|f| f == names::FINALIZER)?;
        Some(vec![
            test_resource_version(current),
            json!({"op": "remove", "path": format!("/metadata/finalizers/{index}")}),
        ])
    })
    .await
}

/// Applies the JSON patch `ops(object)` computes (`None`: nothing to do); when its
/// resourceVersion guard fails (our view was stale), reads the object again and retries, a few
/// times. A vanished object needs no patch. Returns the resourceVersion the patch left.
async fn with_fresh_retry<K>(
    api: &Api<K>,
    object: &K,
    ops: impl Fn(&K) -> Option<Vec<Value>>,
) -> Result<Option<String>>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    const ATTEMPTS: usize = 4;
    let name = object.meta().name.clone().unwrap_or_default();
    let mut current = object.clone();
    for attempt in 1..=ATTEMPTS {
        let Some(patch) = ops(&current) else {
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

fn test_resource_version<K: Resource>(object: &K) -> Value {
    json!({
        "op": "test",
        "path": "/metadata/resourceVersion",
        "value": object.meta().resource_version.clone().unwrap_or_default()
    })
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
