//! The registration of an agent-initiated Cluster, as the Cluster controller keeps it: the
//! `ClusterRegistrationToken` kept valid until the agent registered, the bootstrap Secret of the
//! runtime extension following a token that was replaced, and the token's removal.

use std::collections::BTreeMap;
use std::time::Duration;

use base64::Engine;
use fleet_api_rs::fleet_cluster::Cluster as FleetCluster;
use fleet_api_rs::fleet_cluster_registration_token::ClusterRegistrationToken;
use k8s_openapi::api::core::v1::{ObjectReference, Secret};
use k8s_openapi::jiff::Timestamp;
use kube::runtime::events::EventType;
use kube::{Api, ResourceExt};
use serde_json::Value;

use crate::apply::expectations::Key;
use crate::apply::{
    Outcome, create_if_missing, delete_if_exists, merge_patch, merge_patch_guarded,
};
use crate::controllers::import::import_context::ImportContext;
use crate::model::agent_bootstrap::FLEET_AGENT_VARIABLE;
use crate::model::agent_manifest::{TokenValues, with_token_values};
use crate::model::agent_patch::{SCRIPT_KEY, SecretFormat};
use crate::model::capi::ClusterView;
use crate::model::config::ClusterImport;
use crate::model::fleet::desired_registration_token;
use crate::model::registration_token::{Renewal, extension_patch, renewal};
use crate::names;
use crate::{Error, Result};

/// How soon to look again for the values of a token Fleet has not issued yet (its status change
/// brings us back too; this covers a missed order of events).
const TOKEN_ISSUE_RETRY: Duration = Duration::from_secs(10);

/// The registration token of an agent-initiated Cluster whose agent has not registered yet
/// (no `status.agent.lastSeen`): created when missing (Fleet deletes expired tokens), extended
/// before it expires ([`crate::model::registration_token`]), and the bootstrap Secret's
/// registration values follow a token that was replaced. `token_key` records the token writes;
/// Events go to `regarding`. Returns when to look again.
pub(super) async fn keep_token(
    ctx: &ImportContext,
    token_key: &Key,
    regarding: &ObjectReference,
    view: &ClusterView,
    import: &ClusterImport,
    live: Option<&FleetCluster>,
) -> Result<Option<Duration>> {
    let registered = live
        .and_then(|c| c.status.as_ref())
        .and_then(|s| s.agent.as_ref())
        .and_then(|a| a.last_seen.as_ref())
        .is_some();
    if registered {
        return Ok(None);
    }
    let tokens: Api<ClusterRegistrationToken> =
        Api::namespaced(ctx.base.controllers.clone(), &view.namespace);
    let Some(token) = ctx.stores.token(&view.namespace, &view.name) else {
        let desired = desired_registration_token(view, import, Timestamp::now());
        let written = ctx
            .expectations
            .on(token_key, None)
            .record(create_if_missing(&tokens, &desired, None))
            .await?;
        if written.outcome == Outcome::Created {
            tracing::info!(cluster = %view.name, namespace = %view.namespace,
                ttl = %import.registration_token_ttl, "ClusterRegistrationToken created");
        }
        // Its watch event brings us back.
        return Ok(None);
    };
    let ttl = crate::api::duration::parse_duration(&import.registration_token_ttl)
        .unwrap_or(Duration::from_secs(24 * 3600));
    let created = token
        .metadata
        .creation_timestamp
        .as_ref()
        .map_or_else(Timestamp::now, |t| t.0);
    let recorded = token
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(names::REGISTRATION_TOKEN_EXPIRES_ANNOTATION))
        .map(String::as_str);
    let next = match renewal(created, recorded, ttl, Timestamp::now()) {
        Renewal::Wait(wait) => wait,
        Renewal::Extend {
            ttl: extended,
            expires,
            recheck,
        } => {
            let patch = extension_patch(&extended, expires);
            ctx.expectations
                .on(token_key, token.metadata.resource_version.as_deref())
                .record(async {
                    merge_patch(&tokens, &view.name, &patch, names::FIELD_MANAGER)
                        .await
                        .map(|t| t.metadata.resource_version)
                })
                .await?;
            tracing::info!(cluster = %view.name, namespace = %view.namespace,
                ttl = %extended, "ClusterRegistrationToken extended: the Cluster has not registered yet");
            recheck
        }
    };
    let token_uid = token.metadata.uid.as_deref().unwrap_or_default();
    if may_have_bootstrap(view, live)
        && let Some(retry) =
            follow_token(ctx, regarding, view, &token.name_any(), token_uid).await?
    {
        return Ok(Some(next.min(retry)));
    }
    Ok(Some(next))
}

/// When the token is not the one the Cluster's bootstrap Secret was rendered from (it expired
/// or was deleted, and was created again: a new token value), writes the new token's
/// registration values into the Secret, once Fleet issued them. Returns a short retry while
/// Fleet has not. Only Secrets of this release are rewritten (an earlier release's keep their
/// content). Reads the API server only until the Secret was seen to match the token.
async fn follow_token(
    ctx: &ImportContext,
    regarding: &ObjectReference,
    view: &ClusterView,
    token_name: &str,
    token_uid: &str,
) -> Result<Option<Duration>> {
    let following = &ctx.bootstrap_tokens;
    if token_uid.is_empty() || following.follows(&view.uid, token_uid) {
        return Ok(None);
    }
    let secrets: Api<Secret> = Api::namespaced(ctx.base.controllers.clone(), &view.namespace);
    let name = names::bootstrap_secret_name(&view.name);
    let Some(found) = secrets.get_metadata_opt(&name).await? else {
        // Not prepared yet: BeforeClusterCreate renders it from the current token.
        return Ok(None);
    };
    let annotations = found.metadata.annotations.as_ref();
    let rendered_from = annotations
        .and_then(|a| a.get(names::REGISTRATION_TOKEN_UID_ANNOTATION))
        .map(String::as_str);
    if SecretFormat::of(annotations) != SecretFormat::Script || rendered_from == Some(token_uid) {
        following.followed(&view.uid, token_uid);
        return Ok(None);
    }
    // Fleet issued this token once its status names the values Secret: the same handler call
    // wrote that Secret for this token first (rancher/fleet v0.12-v0.16
    // clusterregistrationtoken/handler.go OnChange; BeforeClusterCreate waits for the same).
    let tokens: Api<ClusterRegistrationToken> =
        Api::namespaced(ctx.base.controllers.clone(), &view.namespace);
    let issued = tokens
        .get_opt(token_name)
        .await?
        .filter(|t| t.metadata.uid.as_deref() == Some(token_uid))
        .and_then(|t| t.status)
        .and_then(|status| status.secret_name)
        .filter(|name| !name.is_empty());
    let values = match issued {
        None => None,
        Some(values_secret) => secrets
            .get_opt(&values_secret)
            .await?
            .and_then(|s| s.data)
            .and_then(|d| d.get("values").cloned())
            .and_then(|v| String::from_utf8(v.0).ok())
            .and_then(|text| TokenValues::parse(&text).ok()),
    };
    let Some(values) = values else {
        tracing::debug!(cluster = %view.name, namespace = %view.namespace,
            "waiting for Fleet to issue the new registration token before rewriting the bootstrap Secret");
        return Ok(Some(TOKEN_ISSUE_RETRY));
    };
    let wrote = merge_patch_guarded(&secrets, &name, names::FIELD_MANAGER, |current| {
        let Some(current) = current else {
            return Ok(None);
        };
        let script = current
            .data
            .as_ref()
            .and_then(|d| d.get(SCRIPT_KEY))
            .and_then(|v| std::str::from_utf8(&v.0).ok())
            .unwrap_or_default();
        let files = with_token_values(script, &values)
            .map_err(|reason| Error::malformed("Secret", name.as_str(), reason))?;
        Ok(Some(refreshed_secret_patch(files, token_uid)))
    })
    .await?;
    if wrote {
        following.followed(&view.uid, token_uid);
        tracing::info!(cluster = %view.name, namespace = %view.namespace,
            "bootstrap Secret rewritten with the new registration token");
        ctx.base
            .event(
                regarding,
                EventType::Normal,
                "BootstrapTokenReplaced",
                "Updating",
                format!(
                    "The ClusterRegistrationToken was replaced before the Cluster registered: bootstrap Secret `{name}` now holds the new token (machines created from now on register with it)"
                ),
            )
            .await;
    }
    Ok(None)
}

/// Deletes the registration token, if there is one (asking the API server when the cache has
/// none: it may not have seen a token created moments ago) — only tokens of agent-initiated
/// Clusters exist.
pub(super) async fn delete_token(view: &ClusterView, ctx: &ImportContext) -> Result<()> {
    let tokens: Api<ClusterRegistrationToken> =
        Api::namespaced(ctx.base.controllers.clone(), &view.namespace);
    if ctx.stores.token(&view.namespace, &view.name).is_some()
        || tokens.get_metadata_opt(&view.name).await?.is_some()
    {
        delete_if_exists(&tokens, &view.name).await?;
    }
    Ok(())
}

/// Whether the Cluster may have a bootstrap Secret: its class uses this extension's `fleetAgent`
/// variable (Cluster API writes it into every Cluster of such a class; a control-plane override
/// may enable what the Cluster-level value disables), or the runtime extension prepared its
/// Fleet Cluster. Other agent-initiated Clusters cost no read.
fn may_have_bootstrap(view: &ClusterView, live: Option<&FleetCluster>) -> bool {
    view.variables.contains_key(FLEET_AGENT_VARIABLE)
        || crate::model::fleet::prepared_by_runtime_extension(live.map(|l| &l.metadata))
}

/// The merge patch rewriting a bootstrap Secret's files, with the token it now follows.
fn refreshed_secret_patch(files: BTreeMap<String, String>, token_uid: &str) -> Value {
    let data: serde_json::Map<String, Value> = files
        .into_iter()
        .map(|(key, text)| {
            (
                key,
                Value::String(base64::engine::general_purpose::STANDARD.encode(text)),
            )
        })
        .collect();
    serde_json::json!({
        "metadata": {"annotations": {names::REGISTRATION_TOKEN_UID_ANNOTATION: token_uid}},
        "data": data,
    })
}
