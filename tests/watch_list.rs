//! How the manager's watches list what exists (`src/controllers/watch_list.rs`): a streaming
//! list where the API server serves one (kube-apiserver with its WatchList gate on), pages of a
//! consistent list where it refuses (the gate off, as in kube-apiserver 1.33), never a
//! `resourceVersion=0` list that a real server would answer whole.

use crate::common;

use common::{Harness, eventually, from_manager};
use kube_sandbox::{RequestRecord, SandboxOptions, Verb};
use serde_json::json;

fn cluster(name: &str) -> serde_json::Value {
    json!({"metadata": {"name": name}, "spec": {}})
}

fn capi_clusters(r: &RequestRecord) -> bool {
    from_manager(r) && r.group == "cluster.x-k8s.io" && r.resource == "clusters"
}

fn fleet_clusters(r: &RequestRecord) -> bool {
    from_manager(r) && r.group == "fleet.cattle.io" && r.resource == "clusters"
}

/// Which recorded requests are about one kind of object.
type Matches = fn(&RequestRecord) -> bool;

/// The manager's requests for each kind of Cluster it watches.
const WATCHED: [(&str, Matches); 2] = [
    ("CAPI Clusters", capi_clusters),
    ("Fleet Clusters", fleet_clusters),
];

async fn import(h: &Harness, name: &str) {
    h.initialized_cluster("team-a", cluster(name)).await;
    eventually("the Fleet Cluster", || h.fleet_cluster("team-a", name)).await;
}

/// A Cluster created before the manager starts, imported once it has.
async fn start_after_a_cluster(h: &mut Harness) {
    h.namespace("team-a", json!({})).await;
    h.initialized_cluster("team-a", cluster("before-start"))
        .await;
    h.start().await;
    eventually(
        "the Fleet Cluster of a Cluster that existed before the start",
        || h.fleet_cluster("team-a", "before-start"),
    )
    .await;
}

#[tokio::test]
async fn streaming_lists_where_the_server_serves_them() {
    let mut h = Harness::new().await;
    start_after_a_cluster(&mut h).await;
    import(&h, "after-start").await;

    let requests = h.sandbox.requests().all();
    for (what, matches) in WATCHED {
        let lists = requests
            .iter()
            .filter(|r| matches(r) && r.verb == Verb::List)
            .count();
        assert_eq!(
            lists, 0,
            "{what}: the initial list came from a streaming watch"
        );
        assert!(
            requests
                .iter()
                .any(|r| matches(r) && r.verb == Verb::Watch && r.code == 200),
            "{what}: watched"
        );
    }
}

#[tokio::test]
async fn paged_lists_where_the_server_refuses_streaming_lists() {
    let mut h = Harness::with_options(SandboxOptions {
        validate_custom_resources: true,
        watch_list: false,
        ..SandboxOptions::default()
    })
    .await;
    start_after_a_cluster(&mut h).await;

    let refused = |requests: &[RequestRecord]| {
        requests
            .iter()
            .filter(|r| from_manager(r) && r.verb == Verb::Watch && r.code == 422)
            .count()
    };
    let requests = h.sandbox.requests().all();
    for (what, matches) in WATCHED {
        let refusals = requests
            .iter()
            .filter(|r| matches(r) && r.verb == Verb::Watch && r.code == 422)
            .count();
        assert_eq!(refusals, 1, "{what}: one streaming attempt, refused");
        assert!(
            requests
                .iter()
                .any(|r| matches(r) && r.verb == Verb::List && r.code == 200),
            "{what}: listed instead"
        );
    }
    let refused_at_start = refused(&requests);

    // Reconnects and a relist after the history is gone list again; nothing tries streaming.
    h.sandbox.compact_history();
    h.sandbox.close_watches();
    import(&h, "after-relist").await;
    assert_eq!(refused(&h.sandbox.requests().all()), refused_at_start);
}
