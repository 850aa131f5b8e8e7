//! CustomResourceDefinitions: registration, status, versions, pruning, structural checks,
//! deletion, and the preloaded CRD sets.

use crate::common::*;
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube_sandbox::{CrdSet, Sandbox, SandboxOptions};
use serde_json::{Value, json};

#[tokio::test]
async fn crd_registers_a_resource() {
    let s = bare().await;
    let c = s.client();
    assert_status(
        &get(&c, "/apis/example.com/v1/namespaces/default/widgets").await,
        404,
        "NotFound",
    );
    install_widgets(&c).await;
    let crd = get(
        &c,
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.com",
    )
    .await
    .json();
    let conds = crd["status"]["conditions"].as_array().unwrap();
    for t in ["Established", "NamesAccepted"] {
        assert!(
            conds
                .iter()
                .any(|c| c["type"] == t && c["status"] == "True"),
            "{t}: {conds:?}"
        );
    }
    assert_eq!(crd["status"]["acceptedNames"]["kind"], "Widget");
    assert_eq!(crd["status"]["storedVersions"], json!(["v1"]));
    let rl = get(&c, "/apis/example.com/v1").await.json();
    let w = rl["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "widgets")
        .unwrap();
    assert_eq!(w["shortNames"], json!(["wd"]));
    assert_eq!(w["categories"], json!(["all", "examples"]));
    assert_eq!(w["singularName"], "widget");
    assert!(
        rl["resources"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["name"] == "widgets/status")
    );
    let group = get(&c, "/apis/example.com").await.json();
    assert_eq!(group["preferredVersion"]["version"], "v1");
    // Both versions serve the same objects; apiVersion follows the request.
    let api = widgets(&c, "default");
    api.create(&PostParams::default(), &widget("a", json!({"size": 1})))
        .await
        .unwrap();
    let old = get(&c, "/apis/example.com/v1beta1/namespaces/default/widgets/a")
        .await
        .json();
    assert_eq!(old["apiVersion"], "example.com/v1beta1");
    assert_eq!(old["spec"]["size"], 1);
    let r = post(
        &c,
        "/apis/example.com/v1beta1/namespaces/default/widgets",
        json!({"apiVersion": "example.com/v1beta1", "kind": "Widget", "metadata": {"name": "b"}}),
    )
    .await;
    assert_eq!(r.code, 201);
    let list = api.list(&ListParams::default()).await.unwrap();
    assert_eq!(list.items.len(), 2);
    assert!(
        list.items
            .iter()
            .all(|w| w.types.as_ref().unwrap().api_version == "example.com/v1")
    );
}

#[tokio::test]
async fn unknown_fields_are_pruned() {
    let s = bare().await;
    let c = s.client();
    install_widgets(&c).await;
    let r = post(&c, "/apis/example.com/v1/namespaces/default/widgets", json!({
        "apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": "p"},
        "unknownTop": 1,
        "spec": {"size": 1, "bogus": true,
                 "free": {"anything": {"goes": [1, 2]}},
                 "labelsMap": {"a": "b"},
                 "template": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": {"k": "v"}}}
    })).await.json();
    assert!(r.get("unknownTop").is_none());
    assert!(r["spec"].get("bogus").is_none());
    assert_eq!(r["spec"]["free"]["anything"]["goes"], json!([1, 2]));
    assert_eq!(r["spec"]["labelsMap"], json!({"a": "b"}));
    assert_eq!(r["spec"]["template"]["metadata"]["name"], "x");
    assert_eq!(r["spec"]["template"]["kind"], "ConfigMap");
    // Pruning applies to updates and status writes too.
    let v = patch(
        &c,
        "/apis/example.com/v1/namespaces/default/widgets/p/status",
        "application/merge-patch+json",
        json!({"status": {"phase": "x", "notInSchema": 1}}),
    )
    .await
    .json();
    assert_eq!(v["status"], json!({"phase": "x"}));
}

#[tokio::test]
async fn non_structural_crds_are_rejected() {
    let s = bare().await;
    let c = s.client();
    let path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
    let mut crd = widget_crd();
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"] =
        json!({"properties": {"a": {"type": "string"}}});
    let v = assert_status(&post(&c, path, crd).await, 422, "Invalid");
    assert_eq!(
        v["details"]["causes"][0]["field"],
        "spec.versions[0].schema.openAPIV3Schema.properties[spec].type"
    );
    assert!(v["message"].as_str().unwrap().contains(
        "CustomResourceDefinition.apiextensions.k8s.io \"widgets.example.com\" is invalid"
    ));
    let mut crd = widget_crd();
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["args"] =
        json!({"type": "array"});
    assert_status(&post(&c, path, crd).await, 422, "Invalid");
    let mut crd = widget_crd();
    crd["metadata"]["name"] = json!("wrong.example.com");
    assert_status(&post(&c, path, crd).await, 422, "Invalid");
    let mut crd = widget_crd();
    crd["spec"]["versions"][1]["storage"] = json!(true);
    assert_status(&post(&c, path, crd).await, 422, "Invalid");
    // None of these registered anything.
    assert_status(
        &get(&c, "/apis/example.com/v1/widgets").await,
        404,
        "NotFound",
    );
}

#[tokio::test]
async fn deleting_a_crd_removes_resource_and_objects() {
    let s = bare().await;
    let c = s.client();
    install_widgets(&c).await;
    let api = widgets(&c, "default");
    api.create(&PostParams::default(), &widget("gone", json!({})))
        .await
        .unwrap();
    let mut w = WatchStream::open(
        &c,
        "/apis/example.com/v1/widgets?watch=true&resourceVersion=0",
        &[],
    )
    .await;
    w.until(|e| e["type"] == "ADDED").await;
    assert_eq!(
        delete(
            &c,
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.com"
        )
        .await
        .code,
        200
    );
    let ev = w.until(|e| e["type"] == "DELETED").await;
    assert_eq!(ev["object"]["metadata"]["name"], "gone");
    assert_status(
        &get(&c, "/apis/example.com/v1/namespaces/default/widgets/gone").await,
        404,
        "NotFound",
    );
    assert_status(&get(&c, "/apis/example.com/v1").await, 404, "NotFound");
    assert!(
        !get(&c, "/apis").await.json()["groups"]
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g["name"] == "example.com")
    );
    // Recreating starts empty.
    install_widgets(&c).await;
    assert!(
        api.list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
}

#[tokio::test]
async fn crd_updates_change_serving() {
    let s = bare().await;
    let c = s.client();
    install_widgets(&c).await;
    let path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.com";
    let v = patch(
        &c,
        path,
        "application/merge-patch+json",
        json!({"spec": {"names": {"shortNames": ["wdg"]}}}),
    )
    .await;
    assert_eq!(v.code, 200);
    let rl = get(&c, "/apis/example.com/v1").await.json();
    let w = rl["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "widgets")
        .unwrap();
    assert_eq!(w["shortNames"], json!(["wdg"]));
}

fn ar(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

#[tokio::test]
async fn preloaded_crd_sets() {
    let s = Sandbox::start().await;
    let c = s.client();
    // CAPI Cluster at v1beta2 (generated schema: unknown fields pruned) and v1beta1.
    let clusters: Api<DynamicObject> = Api::namespaced_with(
        c.clone(),
        "default",
        &ar("cluster.x-k8s.io", "v1beta2", "Cluster", "clusters"),
    );
    let cl: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "metadata": {"name": "c1"},
        "spec": {"paused": false, "notACapiField": 1, "topology": {"classRef": {"name": "quick-start"}, "version": "v1.31.0"}}
    })).unwrap();
    let created = clusters.create(&PostParams::default(), &cl).await.unwrap();
    assert!(
        created.data["spec"].get("notACapiField").is_none(),
        "{}",
        created.data
    );
    assert_eq!(
        created.data["spec"]["topology"]["classRef"]["name"],
        "quick-start"
    );
    let v1b1 = get(
        &c,
        "/apis/cluster.x-k8s.io/v1beta1/namespaces/default/clusters/c1",
    )
    .await
    .json();
    assert_eq!(v1b1["apiVersion"], "cluster.x-k8s.io/v1beta1");
    let status = patch(
        &c,
        "/apis/cluster.x-k8s.io/v1beta2/namespaces/default/clusters/c1/status",
        "application/merge-patch+json",
        json!({"status": {"initialization": {"controlPlaneInitialized": true}}}),
    )
    .await;
    assert_eq!(
        status.code,
        200,
        "{}",
        String::from_utf8_lossy(&status.body)
    );
    assert_eq!(
        status.json()["status"]["initialization"]["controlPlaneInitialized"],
        true
    );
    for (g, v, plural) in [
        ("cluster.x-k8s.io", "v1beta2", "clusterclasses"),
        ("cluster.x-k8s.io", "v1beta1", "clusterclasses"),
        ("cluster.x-k8s.io", "v1beta2", "machines"),
        ("cluster.x-k8s.io", "v1beta2", "machinedeployments"),
        ("cluster.x-k8s.io", "v1beta2", "machinepools"),
        (
            "controlplane.cluster.x-k8s.io",
            "v1beta1",
            "kubeadmcontrolplanes",
        ),
        (
            "controlplane.cluster.x-k8s.io",
            "v1beta2",
            "rke2controlplanetemplates",
        ),
        (
            "bootstrap.cluster.x-k8s.io",
            "v1beta2",
            "kubeadmconfigtemplates",
        ),
        ("bootstrap.cluster.x-k8s.io", "v1beta1", "rke2configs"),
        (
            "infrastructure.cluster.x-k8s.io",
            "v1beta2",
            "dockermachinetemplates",
        ),
        ("fleet.cattle.io", "v1alpha1", "clusters"),
        ("fleet.cattle.io", "v1alpha1", "clustergroups"),
        ("fleet.cattle.io", "v1alpha1", "clusterregistrationtokens"),
        ("fleet.cattle.io", "v1alpha1", "bundlenamespacemappings"),
        ("fleet.cattle.io", "v1alpha1", "bundles"),
        ("fleet.cattle.io", "v1alpha1", "gitrepos"),
        ("fleet.cattle.io", "v1alpha1", "helmops"),
        ("fleet.cattle.io", "v1alpha1", "bundledeployments"),
        ("fleet.cattle.io", "v1alpha1", "clusterregistrations"),
    ] {
        let r = get(&c, &format!("/apis/{g}/{v}/namespaces/default/{plural}")).await;
        assert_eq!(r.code, 200, "{g}/{v} {plural}");
    }
    assert_eq!(
        get(
            &c,
            "/apis/runtime.cluster.x-k8s.io/v1beta2/extensionconfigs"
        )
        .await
        .code,
        200,
        "cluster-scoped"
    );
    // BundleNamespaceMapping keeps its top-level selectors.
    let r = post(&c, "/apis/fleet.cattle.io/v1alpha1/namespaces/default/bundlenamespacemappings", json!({
        "apiVersion": "fleet.cattle.io/v1alpha1", "kind": "BundleNamespaceMapping", "metadata": {"name": "m"},
        "bundleSelector": {"matchLabels": {"a": "b"}}, "namespaceSelector": {"matchLabels": {"c": "d"}}, "spec": {"dropped": 1}
    })).await.json();
    assert_eq!(r["bundleSelector"]["matchLabels"]["a"], "b");
    assert!(r.get("spec").is_none());
    // The provider set: every CRD in config/crd/bases is served.
    let provider = CrdSet::Provider.crds();
    assert_eq!(
        provider.len(),
        count_provider_crds(),
        "every YAML CRD under config/crd/bases is embedded"
    );
    for crd in provider {
        let group = crd["spec"]["group"].as_str().unwrap();
        let plural = crd["spec"]["names"]["plural"].as_str().unwrap();
        let version = crd["spec"]["versions"][0]["name"].as_str().unwrap();
        let scoped = if crd["spec"]["scope"] == "Namespaced" {
            "namespaces/default/"
        } else {
            ""
        };
        assert_eq!(
            get(&c, &format!("/apis/{group}/{version}/{scoped}{plural}"))
                .await
                .code,
            200,
            "{plural}.{group}"
        );
    }
}

fn count_provider_crds() -> usize {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config/crd/bases");
    let Ok(rd) = std::fs::read_dir(dir) else {
        return 0;
    };
    rd.filter_map(|e| e.ok())
        .filter(|e| e.path().extension().is_some_and(|x| x == "yaml"))
        .map(|e| {
            std::fs::read_to_string(e.path())
                .unwrap_or_default()
                .matches("kind: CustomResourceDefinition")
                .count()
        })
        .sum()
}

#[tokio::test]
async fn crd_sets_are_selectable() {
    let s = Sandbox::start_with(SandboxOptions {
        crds: vec![CrdSet::Fleet],
        ..Default::default()
    })
    .await
    .unwrap();
    let c = s.client();
    let groups: Vec<Value> = get(&c, "/apis").await.json()["groups"]
        .as_array()
        .unwrap()
        .clone();
    assert!(groups.iter().any(|g| g["name"] == "fleet.cattle.io"));
    assert!(!groups.iter().any(|g| g["name"] == "cluster.x-k8s.io"));
    // Established is what `kubectl wait --for condition=established` and helm look at.
    let crds = get(
        &c,
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
    )
    .await
    .json();
    for crd in crds["items"].as_array().unwrap() {
        assert!(
            crd["status"]["conditions"]
                .as_array()
                .unwrap()
                .iter()
                .any(|c| c["type"] == "Established" && c["status"] == "True")
        );
    }
}

#[tokio::test]
async fn free_form_fields_survive_pruning_in_preloaded_crds() {
    let s = Sandbox::start_with(SandboxOptions {
        crds: vec![CrdSet::Capi, CrdSet::Fleet],
        ..Default::default()
    })
    .await
    .unwrap();
    let c = s.client();
    // CAPI topology variables carry arbitrary JSON values.
    let r = post(&c, "/apis/cluster.x-k8s.io/v1beta2/namespaces/default/clusters", json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "metadata": {"name": "vars"},
        "spec": {"topology": {"classRef": {"name": "cc"}, "version": "v1.31.0",
                 "variables": [{"name": "cni", "value": {"kind": "calico", "opts": [1, 2, {"x": true}]}}]}}
    })).await;
    assert_eq!(r.code, 201, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(
        r.json()["spec"]["topology"]["variables"][0]["value"]["opts"][2]["x"],
        true
    );
    // Fleet Cluster templateValues are free-form too.
    let r = post(&c, "/apis/fleet.cattle.io/v1alpha1/namespaces/default/clusters", json!({
        "apiVersion": "fleet.cattle.io/v1alpha1", "kind": "Cluster", "metadata": {"name": "fc"},
        "spec": {"kubeConfigSecret": "vars-kubeconfig", "templateValues": {"Cluster": {"metadata": {"labels": {"a": "b"}}, "nested": [1, {"deep": "yes"}]}}}
    })).await;
    assert_eq!(r.code, 201, "{}", String::from_utf8_lossy(&r.body));
    let v = r.json();
    assert_eq!(v["spec"]["kubeConfigSecret"], "vars-kubeconfig");
    assert_eq!(
        v["spec"]["templateValues"]["Cluster"]["nested"][1]["deep"],
        "yes"
    );
    // ClusterRegistrationToken status is a subresource.
    let r = post(&c, "/apis/fleet.cattle.io/v1alpha1/namespaces/default/clusterregistrationtokens", json!({
        "apiVersion": "fleet.cattle.io/v1alpha1", "kind": "ClusterRegistrationToken", "metadata": {"name": "t"}, "spec": {"ttl": "1h"}
    })).await;
    assert_eq!(r.code, 201);
    let st = patch(
        &c,
        "/apis/fleet.cattle.io/v1alpha1/namespaces/default/clusterregistrationtokens/t/status",
        "application/merge-patch+json",
        json!({"status": {"secretName": "t-secret"}}),
    )
    .await
    .json();
    assert_eq!(st["status"]["secretName"], "t-secret");
}

#[tokio::test]
async fn custom_resources_are_validated_with_ratcheting() {
    let s = kube_sandbox::Sandbox::start_with(SandboxOptions {
        crds: vec![],
        validate_custom_resources: true,
        ..Default::default()
    })
    .await
    .unwrap();
    let c = s.client();
    install_widgets(&c).await;
    let path = "/apis/example.com/v1/namespaces/default/widgets";
    let r = post(&c, path, json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "bad"}, "spec": {"size": "three"}})).await;
    let v = assert_status(&r, 422, "Invalid");
    assert_eq!(
        v["message"],
        "Widget.example.com \"bad\" is invalid: spec.size: Invalid value: \"three\": spec.size in body must be of type integer: \"string\""
    );
    assert_eq!(v["details"]["causes"][0]["field"], "spec.size");
    // Apply and status writes are validated too.
    let r = raw(
        &c,
        "PATCH",
        &format!("{path}/bad?fieldManager=x"),
        &[("content-type", "application/apply-patch+yaml")],
        "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: bad}\nspec: {tags: [1]}\n",
    )
    .await;
    assert_status(&r, 422, "Invalid");
    post(&c, path, json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"size": 1, "color": "green"}})).await;
    let r = patch(
        &c,
        &format!("{path}/w/status"),
        "application/merge-patch+json",
        json!({"status": {"observed": "x"}}),
    )
    .await;
    assert_status(&r, 422, "Invalid");
    // Tighten the schema: the existing value is allowed to stay (ratcheting), a new bad one is not.
    let crd = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.com";
    let r = patch(&c, crd, "application/json-patch+json", json!([{"op": "add", "path": "/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/color/enum", "value": ["red", "blue"]}])).await;
    assert_eq!(r.code, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(
        patch(
            &c,
            &format!("{path}/w"),
            "application/merge-patch+json",
            json!({"spec": {"size": 2}})
        )
        .await
        .code,
        200
    );
    let r = patch(
        &c,
        &format!("{path}/w"),
        "application/merge-patch+json",
        json!({"spec": {"color": "pink"}}),
    )
    .await;
    let v = assert_status(&r, 422, "Invalid");
    assert!(
        v["message"]
            .as_str()
            .unwrap()
            .contains("Unsupported value: \"pink\": supported values: \"red\", \"blue\""),
        "{v}"
    );
    // With the option off (it is on by default), nothing is validated.
    let lax = kube_sandbox::Sandbox::start_with(SandboxOptions {
        crds: vec![],
        validate_custom_resources: false,
        ..Default::default()
    })
    .await
    .unwrap();
    install_widgets(&lax.client()).await;
    let r = post(&lax.client(), path, json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "bad"}, "spec": {"size": "three"}})).await;
    assert_eq!(r.code, 201);
}

/// A CRD exercising CEL rules (plain and transition), `pattern`, `format` and `default`s.
fn gadget_crd() -> Value {
    let schema = json!({"type": "object", "properties": {"spec": {"type": "object",
    "x-kubernetes-validations": [
        {"rule": "has(self.url) != has(self.path)", "message": "exactly one of url or path"},
        {"rule": "!has(oldSelf.owner) || self.owner == oldSelf.owner", "message": "owner is immutable",
         "fieldPath": ".owner", "reason": "FieldValueForbidden"}
    ],
    "properties": {
        "url": {"type": "string"},
        "path": {"type": "string", "pattern": "^/[a-z/]*$"},
        "owner": {"type": "string"},
        "since": {"type": "string", "format": "date-time"},
        "replicas": {"type": "integer", "default": 1},
        "tuning": {"type": "object", "default": {}, "properties": {
            "mode": {"type": "string", "default": "fast"}}}
    }}}});
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "gadgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
            "names": {"kind": "Gadget", "plural": "gadgets", "singular": "gadget", "listKind": "GadgetList"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                          "schema": {"openAPIV3Schema": schema}}]}})
}

#[tokio::test]
async fn cel_rules_patterns_formats_and_defaults() {
    let s = bare().await;
    let c = s.client();
    let r = post(
        &c,
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        gadget_crd(),
    )
    .await;
    assert_eq!(r.code, 201, "{}", String::from_utf8_lossy(&r.body));
    let path = "/apis/example.com/v1/namespaces/default/gadgets";
    eventually(
        std::time::Duration::from_secs(5),
        "gadgets served",
        || async { (get(&c, path).await.code == 200).then_some(()) },
    )
    .await;
    let gadget = |name: &str, spec: Value| json!({"apiVersion": "example.com/v1", "kind": "Gadget", "metadata": {"name": name}, "spec": spec});
    let cases = [
        (
            json!({"url": "x", "path": "/a"}),
            "spec: Invalid value: \"object\": exactly one of url or path",
        ),
        (
            json!({}),
            "spec: Invalid value: \"object\": exactly one of url or path",
        ),
        (
            json!({"path": "no-slash"}),
            "spec.path: Invalid value: \"no-slash\": spec.path in body should match '^/[a-z/]*$'",
        ),
        (
            json!({"url": "x", "since": "yesterday"}),
            "spec.since: Invalid value: \"yesterday\": spec.since in body must be of type date-time: \"yesterday\"",
        ),
    ];
    for (spec, want) in cases {
        let r = post(&c, path, gadget("bad", spec.clone())).await;
        let v = assert_status(&r, 422, "Invalid");
        assert_eq!(
            v["message"],
            format!("Gadget.example.com \"bad\" is invalid: {want}"),
            "{spec}"
        );
    }
    // Defaults, nested ones inside a defaulted object too.
    let r = post(
        &c,
        path,
        gadget(
            "g",
            json!({"url": "x", "owner": "a", "since": "2026-01-02T03:04:05Z"}),
        ),
    )
    .await;
    assert_eq!(r.code, 201, "{}", String::from_utf8_lossy(&r.body));
    let v = r.json();
    assert_eq!(v["spec"]["replicas"], 1);
    assert_eq!(v["spec"]["tuning"], json!({"mode": "fast"}));
    // A transition rule: owner may not change.
    let r = patch(
        &c,
        &format!("{path}/g"),
        "application/merge-patch+json",
        json!({"spec": {"owner": "b"}}),
    )
    .await;
    let v = assert_status(&r, 422, "Invalid");
    assert_eq!(v["details"]["causes"][0]["field"], "spec.owner");
    assert_eq!(v["details"]["causes"][0]["reason"], "FieldValueForbidden");
    assert_eq!(
        v["details"]["causes"][0]["message"],
        "Forbidden: owner is immutable"
    );
    let r = patch(
        &c,
        &format!("{path}/g"),
        "application/merge-patch+json",
        json!({"spec": {"replicas": 3}}),
    )
    .await;
    assert_eq!(r.code, 200, "{}", String::from_utf8_lossy(&r.body));
}

#[tokio::test]
async fn the_provider_crd_rules_hold_through_the_api() {
    let s = kube_sandbox::Sandbox::start_with(SandboxOptions {
        crds: vec![kube_sandbox::CrdSet::Provider],
        ..Default::default()
    })
    .await
    .unwrap();
    let c = s.client();
    let path = "/apis/addons.cluster.x-k8s.io/v1alpha1/fleetaddonconfigs";
    let config = |name: &str, spec: Value| {
        json!({"apiVersion": "addons.cluster.x-k8s.io/v1alpha1", "kind": "FleetAddonConfig",
               "metadata": {"name": name}, "spec": spec})
    };
    let v = assert_status(
        &post(&c, path, config("other-config", json!({}))).await,
        422,
        "Invalid",
    );
    assert_eq!(
        v["message"],
        "FleetAddonConfig.addons.cluster.x-k8s.io \"other-config\" is invalid: <nil>: Invalid value: \"object\": FleetAddonConfig is a singleton: its name must be 'fleet-addon-config'"
    );
    let cases = [
        (
            json!({"install": {"followLatest": true, "version": "0.13.0"}}),
            "spec.install: Invalid value: \"object\": exactly one of followLatest or version must be set",
        ),
        (
            json!({"install": {}}),
            "spec.install: Invalid value: \"object\": exactly one of followLatest or version must be set",
        ),
        (
            json!({"config": {"server": {"inferLocal": true, "custom": {}}}}),
            "spec.config.server: Invalid value: \"object\": exactly one of inferLocal or custom must be set",
        ),
    ];
    for (spec, want) in cases {
        let v = assert_status(
            &post(&c, path, config("fleet-addon-config", spec.clone())).await,
            422,
            "Invalid",
        );
        assert_eq!(
            v["message"],
            format!(
                "FleetAddonConfig.addons.cluster.x-k8s.io \"fleet-addon-config\" is invalid: {want}"
            ),
            "{spec}"
        );
    }
    let r = post(
        &c,
        path,
        config(
            "fleet-addon-config",
            json!({"install": {"followLatest": true}}),
        ),
    )
    .await;
    assert_eq!(r.code, 201, "{}", String::from_utf8_lossy(&r.body));
}

#[tokio::test]
async fn crd_dirs_are_loaded_at_start_and_errors_name_the_file() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("widgets.yaml"),
        format!(
            "# comment\n{}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: skipped}}\n",
            serde_yaml::to_string(&widget_crd()).unwrap()
        ),
    )
    .unwrap();
    let s = Sandbox::start_with(SandboxOptions {
        crds: vec![],
        crd_dirs: vec![dir.path().to_path_buf()],
        ..Default::default()
    })
    .await
    .unwrap();
    assert_eq!(
        get(
            &s.client(),
            "/apis/example.com/v1/namespaces/default/widgets"
        )
        .await
        .code,
        200
    );
    s.shutdown().await;

    std::fs::write(dir.path().join("zz-broken.yaml"), "kind: [unclosed\n").unwrap();
    let err = Sandbox::start_with(SandboxOptions {
        crds: vec![],
        crd_dirs: vec![dir.path().to_path_buf()],
        ..Default::default()
    })
    .await
    .err()
    .expect("a broken file fails the start");
    assert!(err.to_string().contains("zz-broken.yaml"), "{err}");
}
