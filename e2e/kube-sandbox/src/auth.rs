//! Authentication and the authorization front end: bearer tokens the sandbox issues (for
//! ServiceAccounts through the TokenRequest subresource `serviceaccounts/token`, or for any
//! user through the library), the admin identity of credential-less requests, impersonation,
//! the RBAC policy cache, and the `authorization.k8s.io` reviews (`SelfSubjectAccessReview`,
//! `SubjectAccessReview`) that `kubectl auth can-i` uses.
//!
//! A request without an `Authorization` header is the admin ([`admin`], in `system:masters`),
//! so tests, kubectl and helm keep working without credentials; a request with an unknown
//! bearer token gets the real 401 `Status`. ServiceAccount tokens stop working when their
//! ServiceAccount is deleted (or replaced by one with another uid), as bound tokens do.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::http::HeaderMap;
use serde_json::{Value, json};

use crate::error::ApiError;
use crate::rbac::{Action, Policy, SYSTEM_AUTHENTICATED, SYSTEM_MASTERS, UserInfo};
use crate::store::State;

/// Name of the admin identity of credential-less requests.
pub const ADMIN_USER: &str = "kube-sandbox:admin";

/// The admin identity: in `system:masters`, allowed everything.
pub fn admin() -> UserInfo {
    UserInfo {
        name: ADMIN_USER.to_string(),
        groups: vec![SYSTEM_MASTERS.to_string(), SYSTEM_AUTHENTICATED.to_string()],
    }
}

/// What a token stands for.
#[derive(Debug, Clone)]
enum Identity {
    /// A user issued through the library.
    User(UserInfo),
    /// A ServiceAccount, valid while the ServiceAccount with this uid exists.
    ServiceAccount {
        namespace: String,
        name: String,
        uid: String,
    },
}

/// Issued tokens and the cached RBAC policy.
#[derive(Default)]
pub struct Auth {
    tokens: Mutex<HashMap<String, Identity>>,
    policy: Mutex<Option<(u64, Arc<Policy>)>>,
}

fn new_token() -> String {
    use rand::Rng;
    let mut rng = rand::rng();
    (0..40)
        .map(|_| {
            let n = rng.random_range(0..62u8);
            (match n {
                0..=9 => b'0' + n,
                10..=35 => b'a' + n - 10,
                _ => b'A' + n - 36,
            }) as char
        })
        .collect()
}

/// The 401 a real server answers to bad credentials.
pub fn unauthorized() -> ApiError {
    ApiError::new(401, "Unauthorized", "Unauthorized")
}

impl Auth {
    /// Issues a token for a user.
    pub fn issue_user_token(&self, user: UserInfo) -> String {
        let t = new_token();
        self.lock_tokens().insert(t.clone(), Identity::User(user));
        t
    }

    /// Accepts `token` for a user from now on (a token chosen by the caller, e.g. one that
    /// must survive a restart).
    pub fn register_user_token(&self, token: &str, user: UserInfo) {
        self.lock_tokens()
            .insert(token.to_string(), Identity::User(user));
    }

    /// Issues a token for an existing ServiceAccount (404 when it does not exist).
    pub fn issue_service_account_token(
        &self,
        st: &State,
        namespace: &str,
        name: &str,
    ) -> Result<String, ApiError> {
        let uid = service_account_uid(st, namespace, name)
            .ok_or_else(|| ApiError::not_found("", "serviceaccounts", name))?;
        let t = new_token();
        self.lock_tokens().insert(
            t.clone(),
            Identity::ServiceAccount {
                namespace: namespace.to_string(),
                name: name.to_string(),
                uid,
            },
        );
        Ok(t)
    }

    fn lock_tokens(&self) -> std::sync::MutexGuard<'_, HashMap<String, Identity>> {
        self.tokens.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Who sent a request: the bearer token's identity, the admin when there is none, then
    /// impersonation (`Impersonate-User`, `Impersonate-Group`), which needs the `impersonate`
    /// verb as on a real server.
    pub fn authenticate(
        &self,
        headers: &HeaderMap,
        store: &crate::store::Store,
    ) -> Result<UserInfo, ApiError> {
        let bearer = headers
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim);
        let user = match bearer {
            None => admin(),
            Some(token) => {
                let id = self.lock_tokens().get(token).cloned();
                match id {
                    None => return Err(unauthorized()),
                    Some(Identity::User(u)) => u,
                    Some(Identity::ServiceAccount {
                        namespace,
                        name,
                        uid,
                    }) => {
                        let current = service_account_uid(&store.lock(), &namespace, &name);
                        if current.as_deref() != Some(uid.as_str()) {
                            return Err(unauthorized());
                        }
                        UserInfo::service_account(&namespace, &name)
                    }
                }
            }
        };
        let Some(as_user) = headers
            .get("impersonate-user")
            .and_then(|v| v.to_str().ok())
            .filter(|v| !v.is_empty())
        else {
            return Ok(user);
        };
        let groups: Vec<&str> = headers
            .get_all("impersonate-group")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .collect();
        let policy = self.policy(store);
        let check = |resource: &str, name: &str| -> Result<(), ApiError> {
            let action = Action::Resource {
                verb: "impersonate".into(),
                group: String::new(),
                resource: resource.into(),
                subresource: String::new(),
                namespace: String::new(),
                name: name.into(),
            };
            let d = policy.authorize(&user, &action);
            if d.allowed {
                Ok(())
            } else {
                Err(forbidden(&user, &action, &d.reason))
            }
        };
        check("users", as_user)?;
        for g in &groups {
            check("groups", g)?;
        }
        let sa = as_user
            .strip_prefix(crate::rbac::SERVICEACCOUNT_PREFIX)
            .and_then(|rest| rest.split_once(':'));
        Ok(match sa {
            Some((ns, name)) if groups.is_empty() => UserInfo::service_account(ns, name),
            _ => UserInfo::user(as_user, &groups),
        })
    }

    /// The RBAC policy of the store's current RBAC objects (rebuilt only after they changed).
    pub fn policy(&self, store: &crate::store::Store) -> Arc<Policy> {
        let st = store.lock();
        let mut cached = self.policy.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((generation, p)) = cached.as_ref()
            && *generation == st.rbac_generation
        {
            return p.clone();
        }
        let bucket = |plural: &str| {
            st.bucket(&("rbac.authorization.k8s.io".to_string(), plural.to_string()))
                .map(|b| b.values().cloned().collect::<Vec<_>>())
                .unwrap_or_default()
        };
        let (crs, roles, crbs, rbs) = (
            bucket("clusterroles"),
            bucket("roles"),
            bucket("clusterrolebindings"),
            bucket("rolebindings"),
        );
        let p = Arc::new(Policy::build(
            crs.iter().map(|v| &**v),
            roles.iter().map(|v| &**v),
            crbs.iter().map(|v| &**v),
            rbs.iter().map(|v| &**v),
        ));
        *cached = Some((st.rbac_generation, p.clone()));
        p
    }

    /// Authorizes an action; the 403 to answer when denied.
    pub fn authorize(
        &self,
        store: &crate::store::Store,
        user: &UserInfo,
        action: &Action,
    ) -> Result<(), ApiError> {
        if user.is_master() {
            return Ok(());
        }
        let d = self.policy(store).authorize(user, action);
        if d.allowed {
            Ok(())
        } else {
            Err(forbidden(user, action, &d.reason))
        }
    }
}

fn service_account_uid(st: &State, namespace: &str, name: &str) -> Option<String> {
    st.get(
        &(String::new(), "serviceaccounts".to_string()),
        namespace,
        name,
    )
    .and_then(|sa| {
        sa.get("metadata")
            .and_then(|m| m.get("uid"))
            .and_then(Value::as_str)
            .map(str::to_string)
    })
}

/// The real 403 `Status` of a denied action.
pub fn forbidden(user: &UserInfo, action: &Action, reason: &str) -> ApiError {
    let message = crate::rbac::forbidden_message(user, action, reason);
    let mut e = ApiError::new(403, "Forbidden", message);
    if let Action::Resource {
        group,
        resource,
        name,
        ..
    } = action
    {
        e.details.group = Some(group.clone());
        e.details.kind = Some(resource.clone());
        if !name.is_empty() {
            e.details.name = Some(name.clone());
        }
    }
    e
}

/// The answer to a TokenRequest (`POST .../serviceaccounts/NAME/token`): the request with its
/// status filled in.
pub fn token_request_response(request: &Value, token: &str) -> Value {
    let seconds = request
        .pointer("/spec/expirationSeconds")
        .and_then(Value::as_i64)
        .unwrap_or(3600);
    let expiry = jiff::Timestamp::now()
        .checked_add(jiff::SignedDuration::from_secs(seconds))
        .unwrap_or_else(|_| jiff::Timestamp::now());
    let mut out = request.clone();
    if !out.is_object() {
        out = json!({});
    }
    out["apiVersion"] = json!("authentication.k8s.io/v1");
    out["kind"] = json!("TokenRequest");
    if out.get("spec").is_none() {
        out["spec"] = json!({});
    }
    out["spec"]["expirationSeconds"] = json!(seconds);
    out["status"] = json!({
        "token": token,
        "expirationTimestamp": expiry.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
    });
    out
}

/// Evaluates a `SelfSubjectAccessReview` (for `user`) or a `SubjectAccessReview` (for the user
/// in its spec) and returns it with `status` filled in.
pub fn access_review(
    policy: &Policy,
    user: &UserInfo,
    review: &Value,
    self_review: bool,
) -> Result<Value, ApiError> {
    let kind = if self_review {
        "SelfSubjectAccessReview"
    } else {
        "SubjectAccessReview"
    };
    let spec = review.get("spec").cloned().unwrap_or_else(|| json!({}));
    let subject = if self_review {
        user.clone()
    } else {
        let name = spec.get("user").and_then(Value::as_str).unwrap_or("");
        let groups: Vec<String> = spec
            .get("groups")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|g| g.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        if name.is_empty() && groups.is_empty() {
            return Err(ApiError::invalid_field(
                "authorization.k8s.io",
                kind,
                "",
                "spec.user",
                "Invalid value: \"\": at least one of user or group must be specified",
            ));
        }
        UserInfo {
            name: name.to_string(),
            groups,
        }
    };
    let s = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    let action = if let Some(ra) = spec.get("resourceAttributes") {
        Action::Resource {
            verb: s(ra, "verb"),
            group: s(ra, "group"),
            resource: s(ra, "resource"),
            subresource: s(ra, "subresource"),
            namespace: s(ra, "namespace"),
            name: s(ra, "name"),
        }
    } else if let Some(nra) = spec.get("nonResourceAttributes") {
        Action::NonResource {
            verb: s(nra, "verb"),
            path: s(nra, "path"),
        }
    } else {
        return Err(ApiError::invalid_field(
            "authorization.k8s.io",
            kind,
            "",
            "spec.resourceAttributes",
            "Required value: exactly one of nonResourceAttributes or resourceAttributes must be specified",
        ));
    };
    let d = policy.authorize(&subject, &action);
    let mut out = review.clone();
    out["apiVersion"] = json!("authorization.k8s.io/v1");
    out["kind"] = json!(kind);
    if out.get("metadata").is_none() {
        out["metadata"] = json!({});
    }
    let mut status = json!({"allowed": d.allowed});
    if !d.reason.is_empty() {
        status["reason"] = json!(d.reason);
    }
    out["status"] = status;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reviews() {
        let p = Policy::build(
            &[
                json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                     "metadata": {"name": "r"},
                     "rules": [{"verbs": ["list"], "apiGroups": ["cluster.x-k8s.io"], "resources": ["clusters"]}]}),
            ],
            &[],
            &[
                json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                     "metadata": {"name": "b"},
                     "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "r"},
                     "subjects": [{"kind": "Group", "name": "devs"}]}),
            ],
            &[],
        );
        let user = UserInfo::user("alice", &["devs"]);
        let review = |ra: Value| json!({"spec": {"resourceAttributes": ra}});
        let out = access_review(
            &p,
            &user,
            &review(json!({"verb": "list", "group": "cluster.x-k8s.io", "resource": "clusters"})),
            true,
        )
        .unwrap();
        assert_eq!(out["status"]["allowed"], true);
        assert_eq!(out["kind"], "SelfSubjectAccessReview");
        let out = access_review(
            &p,
            &user,
            &review(json!({"verb": "delete", "group": "cluster.x-k8s.io", "resource": "clusters"})),
            true,
        )
        .unwrap();
        assert_eq!(out["status"]["allowed"], false);
        // SubjectAccessReview asks about the user in the spec, not the caller.
        let out = access_review(
            &p,
            &admin(),
            &json!({"spec": {"user": "bob", "resourceAttributes":
                {"verb": "list", "group": "cluster.x-k8s.io", "resource": "clusters"}}}),
            false,
        )
        .unwrap();
        assert_eq!(out["status"]["allowed"], false);
        assert!(access_review(&p, &user, &json!({"spec": {}}), true).is_err());
    }

    #[test]
    fn token_response_shape() {
        let out = token_request_response(
            &json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                    "spec": {"audiences": ["x"], "expirationSeconds": 600}}),
            "tok",
        );
        assert_eq!(out["status"]["token"], "tok");
        assert_eq!(out["spec"]["expirationSeconds"], 600);
        assert!(
            out["status"]["expirationTimestamp"]
                .as_str()
                .is_some_and(|t| t.ends_with('Z'))
        );
    }
}
