//! Authentication and RBAC authorization through the API: ServiceAccount tokens from the
//! TokenRequest subresource, Roles, ClusterRoles (aggregated too), bindings to users, groups
//! and ServiceAccounts, `resourceNames`, subresources, non-resource URLs, the real 403 and 401
//! `Status`, impersonation, `SelfSubjectAccessReview` and `kubectl auth can-i`.

use std::time::Duration;

use crate::common::*;
use kube::Client;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::{Value, json};

const SA_USER: &str = "system:serviceaccount:team:bot";

fn rbac(kind: &str, ns: &str, name: &str, extra: Value) -> Value {
    let mut o = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind,
                       "metadata": {"name": name}});
    if !ns.is_empty() {
        o["metadata"]["namespace"] = json!(ns);
    }
    for (k, v) in extra.as_object().unwrap() {
        o[k] = v.clone();
    }
    o
}

fn rbac_path(plural: &str, ns: &str) -> String {
    if ns.is_empty() {
        format!("/apis/rbac.authorization.k8s.io/v1/{plural}")
    } else {
        format!("/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/{plural}")
    }
}

async fn create(admin: &Client, path: &str, body: Value) {
    let r = post(admin, path, body).await;
    assert_eq!(r.code, 201, "{}", String::from_utf8_lossy(&r.body));
}

/// A sandbox with namespace `team`, ServiceAccount `team/bot`, and a client authenticating with
/// a token from the TokenRequest subresource.
async fn with_bot() -> (kube_sandbox::Sandbox, Client, Client) {
    let s = bare().await;
    let admin = s.client();
    create_ns(&admin, "team").await;
    create(
        &admin,
        "/api/v1/namespaces/team/serviceaccounts",
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "bot"}}),
    )
    .await;
    let r = post(
        &admin,
        "/api/v1/namespaces/team/serviceaccounts/bot/token",
        json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
               "spec": {"audiences": ["https://kubernetes.default.svc"]}}),
    )
    .await;
    assert_eq!(r.code, 201, "{}", String::from_utf8_lossy(&r.body));
    let v = r.json();
    assert_eq!(v["kind"], "TokenRequest");
    let token = v["status"]["token"].as_str().unwrap().to_string();
    assert!(v["status"]["expirationTimestamp"].is_string(), "{v}");
    let bot = s.client_with_token(&token);
    (s, admin, bot)
}

#[tokio::test]
async fn a_service_account_gets_what_its_roles_grant_and_the_real_403_otherwise() {
    let (s, admin, bot) = with_bot().await;
    create_cm(&admin, "team", "settings", json!({})).await;

    let r = get(&bot, "/api/v1/namespaces/team/configmaps").await;
    let v = assert_status(&r, 403, "Forbidden");
    assert_eq!(
        v["message"],
        format!(
            "configmaps is forbidden: User \"{SA_USER}\" cannot list resource \"configmaps\" in API group \"\" in the namespace \"team\""
        )
    );
    assert_eq!(v["details"], json!({"group": "", "kind": "configmaps"}));

    create(
        &admin,
        &rbac_path("roles", "team"),
        rbac(
            "Role",
            "team",
            "reader",
            json!({"rules": [
                {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch"]},
                {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"], "resourceNames": ["allowed"]}
            ]}),
        ),
    )
    .await;
    create(
        &admin,
        &rbac_path("rolebindings", "team"),
        rbac(
            "RoleBinding",
            "team",
            "bot-reader",
            json!({"roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "reader"},
                   "subjects": [{"kind": "ServiceAccount", "name": "bot", "namespace": "team"}]}),
        ),
    )
    .await;

    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(bot.clone(), "team");
    let names: Vec<String> = cms
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|c| c.metadata.name)
        .collect();
    assert!(names.contains(&"settings".to_string()), "{names:?}");
    cms.get("settings").await.unwrap();
    // A Role grants nothing outside its namespace, and nothing it does not name.
    let r = get(&bot, "/api/v1/namespaces/default/configmaps").await;
    assert_status(&r, 403, "Forbidden");
    let r = delete(&bot, "/api/v1/namespaces/team/configmaps/settings").await;
    let v = assert_status(&r, 403, "Forbidden");
    assert_eq!(
        v["message"],
        format!(
            "configmaps \"settings\" is forbidden: User \"{SA_USER}\" cannot delete resource \"configmaps\" in API group \"\" in the namespace \"team\""
        )
    );
    assert_eq!(
        v["details"],
        json!({"name": "settings", "group": "", "kind": "configmaps"})
    );
    // resourceNames: the named Secret only (404 proves the request passed authorization).
    assert_eq!(
        get(&bot, "/api/v1/namespaces/team/secrets/allowed")
            .await
            .code,
        404
    );
    assert_status(
        &get(&bot, "/api/v1/namespaces/team/secrets/other").await,
        403,
        "Forbidden",
    );

    // The request log names who sent each request.
    let users: Vec<(u16, String)> = s
        .requests()
        .all()
        .into_iter()
        .filter(|r| r.resource == "configmaps" && r.namespace == "default")
        .map(|r| (r.code, r.user))
        .collect();
    assert_eq!(users, vec![(403, SA_USER.to_string())]);
    assert!(
        s.requests()
            .all()
            .iter()
            .any(|r| r.user == kube_sandbox::auth::ADMIN_USER && r.resource == "roles")
    );
    s.shutdown().await;
}

#[tokio::test]
async fn subresources_groups_aggregation_and_missing_roles() {
    let (s, admin, bot) = with_bot().await;
    install_widgets(&admin).await;
    widgets(&admin, "team")
        .create(&Default::default(), &widget("w1", json!({"size": 1})))
        .await
        .unwrap();
    let status_patch = || {
        raw(
            &bot,
            "PATCH",
            "/apis/example.com/v1/namespaces/team/widgets/w1/status",
            &[("content-type", "application/merge-patch+json")],
            serde_json::to_vec(&json!({"status": {"ready": true}})).unwrap(),
        )
    };

    // A binding to a ClusterRole that does not exist: the reason names it.
    create(
        &admin,
        &rbac_path("clusterrolebindings", ""),
        rbac(
            "ClusterRoleBinding",
            "",
            "widgets",
            json!({"roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "widget-editor"},
                   "subjects": [{"kind": "Group", "name": "system:serviceaccounts:team"}]}),
        ),
    )
    .await;
    let v = assert_status(&status_patch().await, 403, "Forbidden");
    assert_eq!(
        v["message"],
        format!(
            "widgets.example.com \"w1\" is forbidden: User \"{SA_USER}\" cannot patch resource \"widgets/status\" in API group \"example.com\" in the namespace \"team\": RBAC: clusterrole.rbac.authorization.k8s.io \"widget-editor\" not found"
        )
    );

    // An aggregated ClusterRole: empty until a labelled ClusterRole matches its selector.
    create(
        &admin,
        &rbac_path("clusterroles", ""),
        rbac(
            "ClusterRole",
            "",
            "widget-editor",
            json!({"aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"example.com/aggregate-to-editor": "true"}}]}}),
        ),
    )
    .await;
    assert_status(&status_patch().await, 403, "Forbidden");
    create(
        &admin,
        &rbac_path("clusterroles", ""),
        rbac(
            "ClusterRole",
            "",
            "widget-objects",
            json!({"metadata": {"name": "widget-objects", "labels": {"example.com/aggregate-to-editor": "true"}},
                   "rules": [{"apiGroups": ["example.com"], "resources": ["widgets"], "verbs": ["*"]}]}),
        ),
    )
    .await;
    // `widgets` does not grant `widgets/status`.
    assert_status(&status_patch().await, 403, "Forbidden");
    let wapi = widgets(&bot, "team");
    wapi.get("w1").await.unwrap();
    create(
        &admin,
        &rbac_path("clusterroles", ""),
        rbac(
            "ClusterRole",
            "",
            "widget-status",
            json!({"metadata": {"name": "widget-status", "labels": {"example.com/aggregate-to-editor": "true"}},
                   "rules": [{"apiGroups": ["example.com"], "resources": ["widgets/status"], "verbs": ["patch"]}]}),
        ),
    )
    .await;
    let r = status_patch().await;
    assert_eq!(r.code, 200, "{}", String::from_utf8_lossy(&r.body));

    // Taking the label away takes the rules away.
    let crs: Api<k8s_openapi::api::rbac::v1::ClusterRole> = Api::all(admin.clone());
    crs.patch(
        "widget-status",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"example.com/aggregate-to-editor": null}}})),
    )
    .await
    .unwrap();
    assert_status(&status_patch().await, 403, "Forbidden");
    s.shutdown().await;
}

#[tokio::test]
async fn non_resource_urls_discovery_and_tokens() {
    let (s, admin, bot) = with_bot().await;
    // The bootstrap roles let every authenticated identity discover the API.
    assert_eq!(get(&bot, "/version").await.code, 200);
    assert_eq!(get(&bot, "/apis").await.code, 200);
    assert_eq!(get(&bot, "/api/v1").await.code, 200);
    let v = assert_status(&get(&bot, "/metrics").await, 403, "Forbidden");
    assert_eq!(
        v["message"],
        format!("forbidden: User \"{SA_USER}\" cannot get path \"/metrics\"")
    );
    create(
        &admin,
        &rbac_path("clusterroles", ""),
        rbac(
            "ClusterRole",
            "",
            "metrics",
            json!({"rules": [{"nonResourceURLs": ["/metrics", "/metrics/*"], "verbs": ["get"]}]}),
        ),
    )
    .await;
    create(
        &admin,
        &rbac_path("clusterrolebindings", ""),
        rbac(
            "ClusterRoleBinding",
            "",
            "metrics",
            json!({"roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "metrics"},
                   "subjects": [{"kind": "User", "name": SA_USER}]}),
        ),
    )
    .await;
    assert_eq!(get(&bot, "/metrics").await.code, 200);

    // An unknown token is a 401; a token outlives nothing: deleting the ServiceAccount ends it.
    let stranger = s.client_with_token("not-a-token");
    assert_status(&get(&stranger, "/version").await, 401, "Unauthorized");
    assert_eq!(
        delete(&admin, "/api/v1/namespaces/team/serviceaccounts/bot")
            .await
            .code,
        200
    );
    assert_status(&get(&bot, "/version").await, 401, "Unauthorized");
    // No token for a ServiceAccount that does not exist.
    assert_status(
        &post(
            &admin,
            "/api/v1/namespaces/team/serviceaccounts/bot/token",
            json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}}),
        )
        .await,
        404,
        "NotFound",
    );
    assert!(s.service_account_token("team", "bot").is_err());
    s.shutdown().await;
}

#[tokio::test]
async fn access_reviews_impersonation_and_kubectl_auth_can_i() {
    let (s, admin, bot) = with_bot().await;
    create(
        &admin,
        &rbac_path("roles", "team"),
        rbac(
            "Role",
            "team",
            "lister",
            json!({"rules": [{"apiGroups": ["cluster.x-k8s.io"], "resources": ["clusters"], "verbs": ["list"]}]}),
        ),
    )
    .await;
    create(
        &admin,
        &rbac_path("rolebindings", "team"),
        rbac(
            "RoleBinding",
            "team",
            "lister",
            json!({"roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "lister"},
                   "subjects": [{"kind": "Group", "name": "system:serviceaccounts"}]}),
        ),
    )
    .await;
    let review = |verb: &str, ns: &str| {
        json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
               "spec": {"resourceAttributes": {"verb": verb, "group": "cluster.x-k8s.io",
                                               "resource": "clusters", "namespace": ns}}})
    };
    let ssar = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews";
    let r = post(&bot, ssar, review("list", "team")).await;
    assert_eq!(r.code, 201, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.json()["status"]["allowed"], true);
    let r = post(&bot, ssar, review("list", "default")).await;
    assert_eq!(r.json()["status"]["allowed"], false);
    let r = post(&bot, ssar, review("delete", "team")).await;
    assert_eq!(r.json()["status"]["allowed"], false);

    // The admin impersonates the ServiceAccount (`kubectl --as`).
    let as_bot = [("Impersonate-User", SA_USER)];
    let r = raw(
        &admin,
        "GET",
        "/apis/rbac.authorization.k8s.io/v1/namespaces/team/roles",
        &as_bot,
        Vec::new(),
    )
    .await;
    assert_status(&r, 403, "Forbidden");
    // A ServiceAccount may not impersonate anyone without the `impersonate` verb.
    let r = raw(
        &bot,
        "GET",
        "/version",
        &[("Impersonate-User", "admin")],
        Vec::new(),
    )
    .await;
    let v = assert_status(&r, 403, "Forbidden");
    assert_eq!(
        v["message"],
        format!(
            "users \"admin\" is forbidden: User \"{SA_USER}\" cannot impersonate resource \"users\" in API group \"\" at the cluster scope"
        )
    );

    // `kubectl auth can-i` posts a protobuf SelfSubjectAccessReview. client-go sends no
    // credentials over plain HTTP (`tools/clientcmd/client_config.go`: "only try to read the
    // auth information if we are secure"), so kubectl is the admin here, whatever the
    // kubeconfig says; the ServiceAccount's view is asked above through the kube client.
    let dir = tempfile::tempdir().unwrap();
    let kc = dir.path().join("kubeconfig");
    s.write_kubeconfig(&kc).unwrap();
    let out = tokio::time::timeout(
        Duration::from_secs(60),
        tokio::process::Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&kc)
            .args(["auth", "can-i", "delete", "clusterroles", "-n", "team"])
            .output(),
    )
    .await
    .expect("kubectl finished")
    .expect("running kubectl");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "yes",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        s.requests()
            .count(|r| r.resource == "selfsubjectaccessreviews"
                && r.code == 201
                && r.user == kube_sandbox::auth::ADMIN_USER
                && r.user_agent.starts_with("kubectl")),
        1
    );
    s.shutdown().await;
}

#[tokio::test]
async fn an_apply_that_creates_needs_create_too() {
    let (s, admin, bot) = with_bot().await;
    let grant = |verbs: Value| {
        rbac(
            "Role",
            "team",
            "cm",
            json!({"rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": verbs}]}),
        )
    };
    create(&admin, &rbac_path("roles", "team"), grant(json!(["patch"]))).await;
    create(
        &admin,
        &rbac_path("rolebindings", "team"),
        rbac(
            "RoleBinding",
            "team",
            "cm",
            json!({"roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "cm"},
                   "subjects": [{"kind": "ServiceAccount", "name": "bot", "namespace": "team"}]}),
        ),
    )
    .await;
    let apply = |name: &str| {
        let path = format!("/api/v1/namespaces/team/configmaps/{name}?fieldManager=bot");
        let body = serde_json::to_vec(&json!({"apiVersion": "v1", "kind": "ConfigMap",
                                             "metadata": {"name": name}, "data": {"k": "v"}}))
        .unwrap();
        let bot = bot.clone();
        async move {
            raw(
                &bot,
                "PATCH",
                &path,
                &[("content-type", "application/apply-patch+yaml")],
                body,
            )
            .await
        }
    };
    let v = assert_status(&apply("new").await, 403, "Forbidden");
    assert_eq!(
        v["message"],
        format!(
            "configmaps \"new\" is forbidden: User \"{SA_USER}\" cannot create resource \"configmaps\" in API group \"\" in the namespace \"team\""
        )
    );
    // An existing object only needs patch.
    create_cm(&admin, "team", "existing", json!({})).await;
    assert_eq!(apply("existing").await.code, 200);
    let roles: Api<k8s_openapi::api::rbac::v1::Role> = Api::namespaced(admin.clone(), "team");
    roles
        .patch(
            "cm",
            &PatchParams::default(),
            &Patch::Merge(grant(json!(["patch", "create"]))),
        )
        .await
        .unwrap();
    assert_eq!(apply("new").await.code, 201);
    s.shutdown().await;
}

/// Runs kubectl with `kubeconfig` and `args`; returns (exit success, stdout, stderr).
async fn kubectl(kubeconfig: &std::path::Path, args: &[&str]) -> (bool, String, String) {
    let out = tokio::time::timeout(
        Duration::from_secs(60),
        tokio::process::Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(args)
            .output(),
    )
    .await
    .expect("kubectl finished")
    .expect("running kubectl");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).trim().to_string(),
        String::from_utf8_lossy(&out.stderr).trim().to_string(),
    )
}

/// With `tls`, the sandbox serves HTTPS with a CA it generated: the kube client (plain and with
/// a token) trusts it, a watch streams over it, kubeconfigs carry it, and kubectl, which reads
/// a kubeconfig's token only over TLS (`k8s.io/client-go` `tools/clientcmd/client_config.go`,
/// `DirectClientConfig.ClientConfig`: "only try to read the auth information if we are
/// secure"), acts as the ServiceAccount: `auth can-i` answers by its roles and a denied `get`
/// is the real 403.
#[tokio::test]
async fn over_tls_kubectl_acts_as_the_token_s_service_account() {
    let s = kube_sandbox::Sandbox::start_with(kube_sandbox::SandboxOptions {
        crds: vec![kube_sandbox::CrdSet::Capi],
        tls: true,
        ..Default::default()
    })
    .await
    .expect("starting the sandbox");
    assert!(s.url().starts_with("https://127.0.0.1:"), "{}", s.url());
    let ca = s.ca_pem().expect("a CA over TLS").to_string();
    assert!(ca.starts_with("-----BEGIN CERTIFICATE-----"), "{ca}");
    let admin = s.client();
    create_ns(&admin, "team").await;
    create(
        &admin,
        "/api/v1/namespaces/team/serviceaccounts",
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "bot"}}),
    )
    .await;
    let token = s.service_account_token("team", "bot").expect("token");
    create(
        &admin,
        &rbac_path("roles", "team"),
        rbac(
            "Role",
            "team",
            "lister",
            json!({"rules": [{"apiGroups": ["cluster.x-k8s.io"], "resources": ["clusters"], "verbs": ["list", "get"]}]}),
        ),
    )
    .await;
    create(
        &admin,
        &rbac_path("rolebindings", "team"),
        rbac(
            "RoleBinding",
            "team",
            "lister",
            json!({"roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "lister"},
                   "subjects": [{"kind": "ServiceAccount", "name": "bot", "namespace": "team"}]}),
        ),
    )
    .await;

    // The kube client with the token, over TLS; and a watch.
    let bot = s.client_with_token(&token);
    let clusters: Api<kube::api::DynamicObject> = Api::namespaced_with(
        bot.clone(),
        "team",
        &kube::core::ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk(
            "cluster.x-k8s.io",
            "v1beta2",
            "Cluster",
        )),
    );
    assert!(
        clusters
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(bot.clone(), "team");
    let err = cms.list(&ListParams::default()).await.unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 403),
        "{err}"
    );
    let watched: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(admin.clone(), "team");
    let mut events = std::pin::pin!(kube::runtime::watcher(watched, Default::default()));
    use futures::StreamExt;
    let mut saw_root_ca = false;
    while !saw_root_ca {
        let event = tokio::time::timeout(Duration::from_secs(10), events.next())
            .await
            .expect("a watch event over TLS")
            .expect("stream open")
            .expect("no watch error");
        if let kube::runtime::watcher::Event::InitApply(cm) = event {
            saw_root_ca = cm.metadata.name.as_deref() == Some("kube-root-ca.crt");
        }
    }

    // The kubeconfig carries the CA; with the token, kubectl is the ServiceAccount.
    let dir = tempfile::tempdir().unwrap();
    let kc = dir.path().join("kubeconfig");
    s.write_kubeconfig_with_token(&kc, &token).unwrap();
    let text = std::fs::read_to_string(&kc).unwrap();
    use base64::Engine as _;
    assert!(
        text.contains(&format!(
            "certificate-authority-data: {}",
            base64::engine::general_purpose::STANDARD.encode(&ca)
        )),
        "{text}"
    );
    for (args, allowed) in [
        (
            &[
                "auth",
                "can-i",
                "list",
                "clusters.cluster.x-k8s.io",
                "-n",
                "team",
            ][..],
            true,
        ),
        (
            &[
                "auth",
                "can-i",
                "list",
                "clusters.cluster.x-k8s.io",
                "-n",
                "default",
            ][..],
            false,
        ),
        (
            &[
                "auth",
                "can-i",
                "delete",
                "clusters.cluster.x-k8s.io",
                "-n",
                "team",
            ][..],
            false,
        ),
        (&["auth", "can-i", "delete", "clusterroles"][..], false),
    ] {
        let (ok, out, err) = kubectl(&kc, args).await;
        // `auth can-i` exits 1 and prints "no" when the answer is no.
        assert_eq!(
            (ok, out.as_str()),
            (allowed, if allowed { "yes" } else { "no" }),
            "{args:?}: {err}"
        );
    }
    let (ok, _, err) = kubectl(&kc, &["get", "configmaps", "-n", "team"]).await;
    assert!(!ok);
    assert!(
        err.contains("configmaps is forbidden: User \"system:serviceaccount:team:bot\" cannot list resource \"configmaps\" in API group \"\" in the namespace \"team\""),
        "{err}"
    );
    let (ok, out, err) = kubectl(
        &kc,
        &[
            "get",
            "clusters.cluster.x-k8s.io",
            "-n",
            "team",
            "-o",
            "name",
        ],
    )
    .await;
    assert!(ok, "{err}");
    assert_eq!(out, "");
    let kubectl_users: std::collections::BTreeSet<String> = s
        .requests()
        .all()
        .into_iter()
        .filter(|r| r.user_agent.starts_with("kubectl"))
        .map(|r| r.user)
        .collect();
    assert_eq!(kubectl_users, [SA_USER.to_string()].into());

    // Without a token the kubeconfig is the admin's, over TLS too.
    let admin_kc = dir.path().join("admin");
    s.write_kubeconfig(&admin_kc).unwrap();
    let (ok, out, err) = kubectl(&admin_kc, &["auth", "can-i", "delete", "clusterroles"]).await;
    assert_eq!((ok, out.as_str()), (true, "yes"), "{err}");
    s.shutdown().await;
}

/// Privilege-escalation prevention through the API (`k8s.io/kubernetes`
/// `pkg/registry/rbac/*/policybased/storage.go`): a ServiceAccount that may create
/// ClusterRoles and bindings cannot create one granting more than it holds (the real 403),
/// can with `escalate`, and can bind a role it does not hold only with `bind`.
#[tokio::test]
async fn role_writes_cannot_escalate_without_escalate_or_bind() {
    let (s, admin, bot) = with_bot().await;
    let grant = |verbs: Value| {
        rbac(
            "ClusterRole",
            "",
            "writer",
            json!({"rules": [{"apiGroups": ["rbac.authorization.k8s.io"],
                              "resources": ["clusterroles", "clusterrolebindings"], "verbs": verbs}]}),
        )
    };
    create(
        &admin,
        &rbac_path("clusterroles", ""),
        grant(json!(["create"])),
    )
    .await;
    create(
        &admin,
        &rbac_path("clusterrolebindings", ""),
        rbac(
            "ClusterRoleBinding",
            "",
            "writer",
            json!({"roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "writer"},
                   "subjects": [{"kind": "ServiceAccount", "name": "bot", "namespace": "team"}]}),
        ),
    )
    .await;
    let wide = rbac(
        "ClusterRole",
        "",
        "wide",
        json!({"rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]}),
    );
    let r = post(&bot, &rbac_path("clusterroles", ""), wide.clone()).await;
    let v = assert_status(&r, 403, "Forbidden");
    assert_eq!(
        v["message"],
        format!(
            "clusterroles.rbac.authorization.k8s.io \"wide\" is forbidden: user \"{SA_USER}\" (groups=[\"system:serviceaccounts\" \"system:serviceaccounts:team\" \"system:authenticated\"]) is attempting to grant RBAC permissions not currently held:\n{{APIGroups:[\"\"], Resources:[\"secrets\"], Verbs:[\"get\"]}}"
        )
    );
    // A role within its own rights is fine.
    let narrow = rbac(
        "ClusterRole",
        "",
        "narrow",
        json!({"rules": [{"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"], "verbs": ["create"]}]}),
    );
    create(&bot, &rbac_path("clusterroles", ""), narrow).await;

    // With escalate the wide role is allowed; binding it needs bind (or its rights).
    let roles = Api::<k8s_openapi::api::rbac::v1::ClusterRole>::all(admin.clone());
    let patch = |verbs: Value| {
        let roles = roles.clone();
        async move {
            roles
                .patch(
                    "writer",
                    &PatchParams::default(),
                    &Patch::Merge(
                        json!({"rules": [{"apiGroups": ["rbac.authorization.k8s.io"],
                    "resources": ["clusterroles", "clusterrolebindings"], "verbs": verbs}]}),
                    ),
                )
                .await
                .expect("patch the writer role");
        }
    };
    patch(json!(["create", "escalate"])).await;
    create(&bot, &rbac_path("clusterroles", ""), wide).await;
    let binding = rbac(
        "ClusterRoleBinding",
        "",
        "wide",
        json!({"roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "wide"},
               "subjects": [{"kind": "User", "name": "someone"}]}),
    );
    let r = post(&bot, &rbac_path("clusterrolebindings", ""), binding.clone()).await;
    assert_status(&r, 403, "Forbidden");
    patch(json!(["create", "escalate", "bind"])).await;
    create(&bot, &rbac_path("clusterrolebindings", ""), binding).await;
    s.shutdown().await;
}
