//! Wire types of the Cluster API Runtime SDK (`hooks.runtime.cluster.x-k8s.io/v1alpha1`),
//! written by hand from CAPI's Go types (`api/runtime/hooks/v1alpha1`, research A.3–A.6).
//!
//! Requests are decoded tolerantly: unknown fields are ignored, `apiVersion`/`kind` may be absent,
//! the embedded Cluster and the templates stay raw JSON (see [`super::cluster`]). Responses always
//! carry `apiVersion`, `kind` and `status`; retry responses always carry `retryAfterSeconds`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::model::hook_plan::HookOutcome;

/// API version of every request and response.
pub const API_VERSION: &str = "hooks.runtime.cluster.x-k8s.io/v1alpha1";

/// The hooks this extension knows; how each is served is its row in
/// [`crate::hooks::handlers::HOOKS`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Hook {
    Discovery,
    BeforeClusterCreate,
    AfterControlPlaneInitialized,
    BeforeClusterUpgrade,
    BeforeControlPlaneUpgrade,
    AfterControlPlaneUpgrade,
    BeforeWorkersUpgrade,
    AfterWorkersUpgrade,
    AfterClusterUpgrade,
    BeforeClusterDelete,
    GeneratePatches,
    DiscoverVariables,
}

impl Hook {
    /// The hook name as CAPI spells it (`BeforeClusterCreate`); also the metric label.
    pub fn name(self) -> &'static str {
        match self {
            Hook::Discovery => "Discovery",
            Hook::BeforeClusterCreate => "BeforeClusterCreate",
            Hook::AfterControlPlaneInitialized => "AfterControlPlaneInitialized",
            Hook::BeforeClusterUpgrade => "BeforeClusterUpgrade",
            Hook::BeforeControlPlaneUpgrade => "BeforeControlPlaneUpgrade",
            Hook::AfterControlPlaneUpgrade => "AfterControlPlaneUpgrade",
            Hook::BeforeWorkersUpgrade => "BeforeWorkersUpgrade",
            Hook::AfterWorkersUpgrade => "AfterWorkersUpgrade",
            Hook::AfterClusterUpgrade => "AfterClusterUpgrade",
            Hook::BeforeClusterDelete => "BeforeClusterDelete",
            Hook::GeneratePatches => "GeneratePatches",
            Hook::DiscoverVariables => "DiscoverVariables",
        }
    }

    /// `kind` of the request.
    pub fn request_kind(self) -> String {
        format!("{}Request", self.name())
    }

    /// `kind` of the response.
    pub fn response_kind(self) -> String {
        format!("{}Response", self.name())
    }

    /// Whether the response carries `retryAfterSeconds` (`CommonRetryResponse`,
    /// cluster-api v1.12 `api/runtime/hooks/v1alpha1/lifecyclehooks_types.go`). AfterClusterUpgrade
    /// is blocking from v1.12; v1.11 decodes its response without `retryAfterSeconds`, and Go's
    /// JSON decoder ignores the extra field (`internal/runtime/client/client.go` `httpCall`).
    pub fn retries(self) -> bool {
        matches!(
            self,
            Hook::BeforeClusterCreate
                | Hook::BeforeClusterUpgrade
                | Hook::BeforeControlPlaneUpgrade
                | Hook::AfterControlPlaneUpgrade
                | Hook::BeforeWorkersUpgrade
                | Hook::AfterWorkersUpgrade
                | Hook::AfterClusterUpgrade
                | Hook::BeforeClusterDelete
        )
    }
}

/// `status` of a response. Anything but `Success` is a failure for CAPI.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ResponseStatus {
    Success,
    Failure,
}

/// The part every request has. `apiVersion`/`kind` are optional on purpose (tolerant decoding);
/// a present `kind` must match the hook.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct RequestMeta {
    pub api_version: Option<String>,
    pub kind: Option<String>,
}

/// A lifecycle hook request: the Cluster (raw, v1beta1 or v1beta2 shape) and, for upgrades, the
/// versions (cluster-api v1.11/v1.12 `api/runtime/hooks/v1alpha1/lifecyclehooks_types.go`:
/// `fromKubernetesVersion`/`toKubernetesVersion` of BeforeClusterUpgrade and, from v1.12,
/// BeforeControlPlaneUpgrade and BeforeWorkersUpgrade; `kubernetesVersion` of the After hooks;
/// from v1.12 the remaining steps `controlPlaneUpgrades`/`workersUpgrades`, omitted when empty).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct LifecycleRequest {
    pub settings: BTreeMap<String, String>,
    pub cluster: Value,
    pub from_kubernetes_version: Option<String>,
    pub to_kubernetes_version: Option<String>,
    pub kubernetes_version: Option<String>,
    pub control_plane_upgrades: Vec<UpgradeStepInfo>,
    pub workers_upgrades: Vec<UpgradeStepInfo>,
}

/// One remaining step of an upgrade plan (`UpgradeStepInfo`, cluster-api v1.12).
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct UpgradeStepInfo {
    #[serde(default)]
    pub version: String,
}

/// A variable in GeneratePatches requests: `value` is any JSON.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Variable {
    pub name: String,
    #[serde(default)]
    pub value: Value,
}

/// Where a template will be referenced from.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HolderReference {
    pub api_version: String,
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub field_path: String,
}

/// One template to patch.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GeneratePatchesRequestItem {
    pub uid: String,
    #[serde(default)]
    pub holder_reference: HolderReference,
    #[serde(default)]
    pub object: Value,
    #[serde(default)]
    pub variables: Vec<Variable>,
}

/// GeneratePatches request.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct GeneratePatchesRequest {
    pub settings: BTreeMap<String, String>,
    pub variables: Vec<Variable>,
    pub items: Vec<GeneratePatchesRequestItem>,
}

/// Patch formats CAPI applies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum PatchType {
    /// RFC 6902.
    #[serde(rename = "JSONPatch")]
    JsonPatch,
    /// RFC 7386.
    #[serde(rename = "JSONMergePatch")]
    JsonMergePatch,
}

/// One patch: `patch` is the patch document, base64 (standard alphabet, padded) as Go encodes
/// `[]byte`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GeneratePatchesResponseItem {
    pub uid: String,
    pub patch_type: PatchType,
    pub patch: String,
}

/// A variable definition returned by DiscoverVariables, valid for both the v1beta1 type
/// (`required` is a required field, always serialized) and the v1beta2 type.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterClassVariable {
    pub name: String,
    pub required: bool,
    pub schema: VariableSchema,
}

/// `schema` of a variable definition.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct VariableSchema {
    #[serde(rename = "openAPIV3Schema")]
    pub open_api_v3_schema: Value,
}

/// `failurePolicy` of a handler.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum FailurePolicy {
    /// Transport errors (timeouts, connection errors, non-200) count as Success. An explicit
    /// `Failure` answer is never ignored.
    Ignore,
    /// Transport errors fail the reconcile (CAPI retries).
    Fail,
}

/// `requestHook` of a handler.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupVersionHook {
    pub api_version: String,
    pub hook: String,
}

/// One handler advertised by discovery.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExtensionHandler {
    pub name: String,
    pub request_hook: GroupVersionHook,
    pub timeout_seconds: i32,
    pub failure_policy: FailurePolicy,
}

/// The body of every response: the common fields plus the hook-specific ones.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Response {
    pub api_version: String,
    pub kind: String,
    pub status: ResponseStatus,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    #[serde(flatten)]
    pub body: ResponseBody,
}

/// Hook-specific response fields.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ResponseBody {
    /// Blocking lifecycle hooks: `retryAfterSeconds`, always serialized (0 = proceed).
    Retry {
        #[serde(rename = "retryAfterSeconds")]
        retry_after_seconds: i32,
    },
    /// GeneratePatches.
    Patches {
        items: Vec<GeneratePatchesResponseItem>,
    },
    /// DiscoverVariables.
    Variables {
        variables: Vec<ClusterClassVariable>,
    },
    /// Discovery.
    Handlers { handlers: Vec<ExtensionHandler> },
    /// Hooks with only the common fields (AfterControlPlaneInitialized).
    Empty {},
}

impl Response {
    /// Encodes a lifecycle outcome for `hook`. A retry for a hook that cannot retry is a failure
    /// (a programming error surfaced, not hidden).
    pub fn lifecycle(hook: Hook, outcome: HookOutcome) -> Self {
        let (status, message, retry) = match outcome {
            HookOutcome::Success { message } => (ResponseStatus::Success, message, 0),
            HookOutcome::Retry {
                after_seconds,
                message,
            } if hook.retries() => (ResponseStatus::Success, message, after_seconds),
            HookOutcome::Retry { message, .. } => (ResponseStatus::Failure, message, 0),
            HookOutcome::Failure { message } => (ResponseStatus::Failure, message, 0),
        };
        Response::of(Some(hook), status, message, retry)
    }

    /// A failure answer for `hook` (or a generic one when the hook is unknown).
    pub fn failure(hook: Option<Hook>, message: impl Into<String>) -> Self {
        Response::of(hook, ResponseStatus::Failure, message.into(), 0)
    }

    /// A successful answer with a hook-specific body.
    pub fn success(hook: Hook, body: ResponseBody) -> Self {
        Response {
            body,
            ..Response::of(Some(hook), ResponseStatus::Success, String::new(), 0)
        }
    }

    /// The answer of `hook` (a generic one when the hook is unknown) with the body its Go type
    /// decodes: `retryAfterSeconds` for the hooks that retry, the empty list of the hooks that
    /// return lists (so failures still decode in Go), else none.
    fn of(hook: Option<Hook>, status: ResponseStatus, message: String, retry: i32) -> Self {
        let body = match hook {
            Some(hook) if hook.retries() => ResponseBody::Retry {
                retry_after_seconds: retry,
            },
            Some(Hook::GeneratePatches) => ResponseBody::Patches { items: Vec::new() },
            Some(Hook::DiscoverVariables) => ResponseBody::Variables {
                variables: Vec::new(),
            },
            Some(Hook::Discovery) => ResponseBody::Handlers {
                handlers: Vec::new(),
            },
            _ => ResponseBody::Empty {},
        };
        Response {
            api_version: API_VERSION.to_string(),
            kind: hook.map_or_else(|| "Response".to_string(), Hook::response_kind),
            status,
            message,
            body,
        }
    }

    /// The metric label of this answer: `Success`, `Retry` or `Failure`.
    pub fn label(&self) -> &'static str {
        match (&self.status, &self.body) {
            (ResponseStatus::Failure, _) => "Failure",
            (
                ResponseStatus::Success,
                ResponseBody::Retry {
                    retry_after_seconds,
                },
            ) if *retry_after_seconds > 0 => "Retry",
            (ResponseStatus::Success, _) => "Success",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn retry_responses_always_carry_retry_after_seconds() {
        let response = Response::lifecycle(Hook::BeforeClusterDelete, HookOutcome::ok());
        assert_eq!(
            serde_json::to_value(&response).unwrap_or_default(),
            json!({
                "apiVersion": API_VERSION,
                "kind": "BeforeClusterDeleteResponse",
                "status": "Success",
                "retryAfterSeconds": 0
            })
        );
        let plain = Response::lifecycle(Hook::AfterControlPlaneInitialized, HookOutcome::ok());
        assert_eq!(
            serde_json::to_value(&plain).unwrap_or_default(),
            json!({
                "apiVersion": API_VERSION,
                "kind": "AfterControlPlaneInitializedResponse",
                "status": "Success"
            })
        );
    }

    #[test]
    fn a_retry_is_a_failure_for_hooks_that_cannot_retry() {
        let response = Response::lifecycle(
            Hook::AfterControlPlaneInitialized,
            HookOutcome::retry(5, "later"),
        );
        assert_eq!(response.status, ResponseStatus::Failure);
        assert_eq!(response.label(), "Failure");
        let response =
            Response::lifecycle(Hook::BeforeClusterCreate, HookOutcome::retry(5, "later"));
        assert_eq!(response.label(), "Retry");
    }
}
