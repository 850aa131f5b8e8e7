//! Errors as the Kubernetes API reports them: a `metav1.Status` with a code and a reason.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// One `details.causes[]` entry of a Status.
#[derive(Debug, Clone, PartialEq)]
pub struct Cause {
    /// `reason` (for example `FieldValueInvalid` or `FieldManagerConflict`).
    pub reason: String,
    /// Human-readable message.
    pub message: String,
    /// The field path the cause is about.
    pub field: String,
}

/// An API error, rendered as a `metav1.Status` body.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{code} {reason}: {message}")]
pub struct ApiError {
    /// HTTP status code.
    pub code: u16,
    /// `reason` (`NotFound`, `AlreadyExists`, `Conflict`, `Invalid`, ...).
    pub reason: String,
    /// Human-readable message, worded like the real API server's.
    pub message: String,
    /// `details` (boxed: errors travel through many `Result`s).
    pub details: Box<Details>,
}

/// `details` of a Status.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Details {
    /// `details.name`.
    pub name: Option<String>,
    /// `details.group`.
    pub group: Option<String>,
    /// `details.kind` (the resource plural, as the real server fills it).
    pub kind: Option<String>,
    /// `details.causes`.
    pub causes: Vec<Cause>,
    /// `Retry-After` header value in seconds (429 from fault injection).
    pub retry_after: Option<u64>,
}

/// Result alias for API operations.
pub type ApiResult<T> = Result<T, ApiError>;

impl ApiError {
    /// A bare error with a code, reason and message.
    pub fn new(code: u16, reason: &str, message: impl Into<String>) -> Self {
        ApiError {
            code,
            reason: reason.to_string(),
            message: message.into(),
            details: Box::default(),
        }
    }

    /// Adds `details{name, group, kind}`.
    pub fn with_details(mut self, group: &str, kind: &str, name: &str) -> Self {
        self.details.group = Some(group.to_string());
        self.details.kind = Some(kind.to_string());
        self.details.name = Some(name.to_string());
        self
    }

    /// 404 for a named object: `configmaps "foo" not found`.
    pub fn not_found(group: &str, plural: &str, name: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("{} \"{name}\" not found", qualified(group, plural)),
        )
        .with_details(group, plural, name)
    }

    /// 409 AlreadyExists.
    pub fn already_exists(group: &str, plural: &str, name: &str) -> Self {
        Self::new(
            409,
            "AlreadyExists",
            format!("{} \"{name}\" already exists", qualified(group, plural)),
        )
        .with_details(group, plural, name)
    }

    /// 409 Conflict on a stale resourceVersion.
    pub fn conflict(group: &str, plural: &str, name: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": the object has been modified; please apply your changes to the latest version and try again",
                qualified(group, plural)
            ),
        )
        .with_details(group, plural, name)
    }

    /// 422 Invalid with field causes, worded as `Kind.group "name" is invalid: field: message`.
    pub fn invalid(group: &str, kind: &str, name: &str, causes: Vec<Cause>) -> Self {
        let detail = causes
            .iter()
            .map(|c| {
                if c.field.is_empty() {
                    c.message.clone()
                } else {
                    format!("{}: {}", c.field, c.message)
                }
            })
            .collect::<Vec<_>>()
            .join(", ");
        let gk = if group.is_empty() {
            kind.to_string()
        } else {
            format!("{kind}.{group}")
        };
        let mut e = Self::new(
            422,
            "Invalid",
            format!("{gk} \"{name}\" is invalid: {detail}"),
        )
        .with_details(group, kind, name);
        e.details.causes = causes;
        e
    }

    /// 422 Invalid with one `FieldValueInvalid` cause.
    pub fn invalid_field(group: &str, kind: &str, name: &str, field: &str, msg: &str) -> Self {
        Self::invalid(
            group,
            kind,
            name,
            vec![Cause {
                reason: "FieldValueInvalid".into(),
                message: msg.to_string(),
                field: field.to_string(),
            }],
        )
    }

    /// 400 BadRequest.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    /// 405 MethodNotAllowed.
    pub fn method_not_allowed() -> Self {
        Self::new(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        )
    }

    /// 410 Expired for a resourceVersion older than the retained history.
    pub fn gone(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    /// 415 UnsupportedMediaType.
    pub fn unsupported_media_type(ct: &str) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml (got {ct:?})"
            ),
        )
    }

    /// 500 InternalError.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "InternalError", message)
    }

    /// The `metav1.Status` body.
    pub fn status_json(&self) -> Value {
        let mut details = serde_json::Map::new();
        if let Some(n) = &self.details.name {
            details.insert("name".into(), json!(n));
        }
        if let Some(g) = &self.details.group {
            details.insert("group".into(), json!(g));
        }
        if let Some(k) = &self.details.kind {
            details.insert("kind".into(), json!(k));
        }
        if !self.details.causes.is_empty() {
            details.insert(
                "causes".into(),
                Value::Array(
                    self.details
                        .causes
                        .iter()
                        .map(
                            |c| json!({"reason": c.reason, "message": c.message, "field": c.field}),
                        )
                        .collect(),
                ),
            );
        }
        if let Some(r) = self.details.retry_after {
            details.insert("retryAfterSeconds".into(), json!(r));
        }
        let mut s = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if !details.is_empty() {
            s["details"] = Value::Object(details);
        }
        s
    }
}

/// `plural` for the core group, `plural.group` otherwise, as the real server names resources
/// in messages.
pub fn qualified(group: &str, plural: &str) -> String {
    if group.is_empty() {
        plural.to_string()
    } else {
        format!("{plural}.{group}")
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let code = StatusCode::from_u16(self.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = serde_json::to_vec(&self.status_json()).unwrap_or_default();
        let mut resp = (
            code,
            [(axum::http::header::CONTENT_TYPE, "application/json")],
            body,
        )
            .into_response();
        if let Some(r) = self.details.retry_after
            && let Ok(v) = axum::http::HeaderValue::from_str(&r.to_string())
        {
            resp.headers_mut()
                .insert(axum::http::header::RETRY_AFTER, v);
        }
        resp
    }
}
