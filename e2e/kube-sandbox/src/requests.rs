//! Request accounting: every API request is recorded, for tests (`Sandbox::requests`) and for
//! the Prometheus `apiserver_request_total` counter.

use std::collections::{BTreeMap, VecDeque};
use std::fmt::Write;
use std::sync::Mutex;

/// The verbs as the real API server labels them in `apiserver_request_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Verb {
    /// GET of one object.
    Get,
    /// GET of a collection.
    List,
    /// Watch.
    Watch,
    /// Create.
    Post,
    /// Replace.
    Put,
    /// JSON/merge/strategic patch.
    Patch,
    /// Server-side apply.
    Apply,
    /// Delete one object.
    Delete,
    /// Delete a collection.
    DeleteCollection,
}

impl Verb {
    /// The metric label.
    pub fn as_str(&self) -> &'static str {
        match self {
            Verb::Get => "GET",
            Verb::List => "LIST",
            Verb::Watch => "WATCH",
            Verb::Post => "POST",
            Verb::Put => "PUT",
            Verb::Patch => "PATCH",
            Verb::Apply => "APPLY",
            Verb::Delete => "DELETE",
            Verb::DeleteCollection => "DELETECOLLECTION",
        }
    }

    /// The RBAC verb of the request (`create` for POST, `update` for PUT, `patch` for both
    /// patches and server-side apply).
    pub fn rbac_verb(&self) -> &'static str {
        match self {
            Verb::Get => "get",
            Verb::List => "list",
            Verb::Watch => "watch",
            Verb::Post => "create",
            Verb::Put => "update",
            Verb::Patch | Verb::Apply => "patch",
            Verb::Delete => "delete",
            Verb::DeleteCollection => "deletecollection",
        }
    }

    /// Whether the verb changes state.
    pub fn is_write(&self) -> bool {
        !self.is_read()
    }

    /// GET, LIST or WATCH.
    pub fn is_read(&self) -> bool {
        matches!(self, Verb::Get | Verb::List | Verb::Watch)
    }
}

/// One recorded API request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestRecord {
    /// Verb.
    pub verb: Verb,
    /// API group ("" for core).
    pub group: String,
    /// API version.
    pub version: String,
    /// Resource plural.
    pub resource: String,
    /// Subresource ("" or "status").
    pub subresource: String,
    /// Namespace ("" for cluster-scoped or all namespaces).
    pub namespace: String,
    /// Object name ("" for collections).
    pub name: String,
    /// HTTP status code of the response.
    pub code: u16,
    /// `dryRun=All`.
    pub dry_run: bool,
    /// The `User-Agent` header ("" when absent): tells a controller's requests from a test's.
    pub user_agent: String,
    /// The authenticated user name (after impersonation): the admin of credential-less
    /// requests is `kube-sandbox:admin`, a ServiceAccount `system:serviceaccount:NS:NAME`.
    pub user: String,
}

/// Label set of one `apiserver_request_total` series.
type SeriesKey = (Verb, String, String, String, String, u16);

/// The request log: the most recent requests (bounded) and cumulative counters.
#[derive(Debug, Default)]
pub struct RequestLog {
    inner: Mutex<LogInner>,
}

#[derive(Debug, Default)]
struct LogInner {
    records: VecDeque<RequestRecord>,
    counts: BTreeMap<SeriesKey, u64>,
}

/// How many records are kept for `all()`/`count()`; the Prometheus counters are not bounded.
pub const MAX_RECORDS: usize = 1_000_000;

impl RequestLog {
    fn lock(&self) -> std::sync::MutexGuard<'_, LogInner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Appends a record.
    pub fn push(&self, r: RequestRecord) {
        let mut l = self.lock();
        *l.counts
            .entry((
                r.verb,
                r.group.clone(),
                r.version.clone(),
                r.resource.clone(),
                r.subresource.clone(),
                r.code,
            ))
            .or_default() += 1;
        if l.records.len() == MAX_RECORDS {
            l.records.pop_front();
        }
        l.records.push_back(r);
    }

    /// A copy of the retained records, oldest first.
    pub fn all(&self) -> Vec<RequestRecord> {
        self.lock().records.iter().cloned().collect()
    }

    /// Counts the retained records matching a predicate.
    pub fn count(&self, f: impl Fn(&RequestRecord) -> bool) -> usize {
        self.lock().records.iter().filter(|r| f(r)).count()
    }

    /// Forgets all records (the Prometheus counters restart from zero too).
    pub fn reset(&self) {
        let mut l = self.lock();
        l.records.clear();
        l.counts.clear();
    }

    /// Prometheus text exposition of `apiserver_request_total`.
    pub fn metrics_text(&self) -> String {
        let mut out = String::from(
            "# HELP apiserver_request_total Counter of apiserver requests broken out for each verb, group, version, resource, subresource and HTTP response code.\n# TYPE apiserver_request_total counter\n",
        );
        for ((verb, g, v, res, sub, code), n) in &self.lock().counts {
            let _ = writeln!(
                out,
                "apiserver_request_total{{code=\"{code}\",group=\"{g}\",resource=\"{res}\",subresource=\"{sub}\",verb=\"{}\",version=\"{v}\"}} {n}",
                verb.as_str()
            );
        }
        out
    }
}
