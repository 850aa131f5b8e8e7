//! Watch streams: replay from a resourceVersion (or synthetic ADDED events for the current
//! state), live events filtered by namespace and selectors, bookmarks, streaming lists, 410
//! Gone, timeouts, and closing slow or all watchers.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{StatusCode, header};
use axum::response::Response;
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc};

use crate::error::{ApiError, ApiResult};
use crate::registry::{GroupResource, ResourceDef};
use crate::render::{Format, Include, metadata_of, object, table};
use crate::selectors::{FieldSelector, LabelSelector};
use crate::store::{Event, EventType, Store};
use crate::util::namespace_of;

/// What a watch request asked for.
pub struct WatchSpec {
    /// The resource.
    pub def: Arc<ResourceDef>,
    /// Requested version.
    pub version: String,
    /// Namespace filter (`None` = all namespaces).
    pub namespace: Option<String>,
    /// `labelSelector`.
    pub labels: LabelSelector,
    /// `fieldSelector`.
    pub fields: FieldSelector,
    /// `resourceVersion`.
    pub resource_version: Option<String>,
    /// `sendInitialEvents=true`.
    pub send_initial_events: bool,
    /// `allowWatchBookmarks=true`.
    pub bookmarks: bool,
    /// `timeoutSeconds`.
    pub timeout: Option<Duration>,
    /// Response format.
    pub format: Format,
    /// Interval of periodic bookmarks.
    pub bookmark_interval: Duration,
    /// How long a live event waits for a full watcher before the watch is closed.
    pub slow_watcher_budget: Duration,
    /// Counts the watches closed for not reading in time.
    pub slow_watchers_closed: Arc<std::sync::atomic::AtomicU64>,
}

impl WatchSpec {
    fn in_scope(&self, obj: &Value) -> bool {
        self.namespace
            .as_deref()
            .is_none_or(|ns| namespace_of(obj) == ns)
            && (self.labels.is_empty() || self.labels.matches(obj))
            && (self.fields.is_empty() || self.fields.matches(obj))
    }

    fn render(&self, obj: &Value) -> Value {
        match self.format {
            Format::Full => object(obj, &self.def, &self.version),
            Format::Metadata => metadata_of(obj),
            Format::Table(inc) => table(
                std::slice::from_ref(obj),
                &self.def,
                &self.version,
                if inc == Include::None {
                    Include::Metadata
                } else {
                    inc
                },
                None,
                true,
            ),
        }
    }

    fn line(&self, etype: &str, obj: &Value) -> Bytes {
        let mut v = if self.format == Format::Full {
            #[derive(serde::Serialize)]
            struct Line<'a> {
                #[serde(rename = "type")]
                etype: &'a str,
                object: crate::render::AtVersion<'a>,
            }
            let av = self.def.api_version(&self.version);
            serde_json::to_vec(&Line {
                etype,
                object: crate::render::AtVersion {
                    obj,
                    api_version: &av,
                    kind: &self.def.kind,
                },
            })
        } else {
            serde_json::to_vec(&json!({"type": etype, "object": self.render(obj)}))
        }
        .unwrap_or_default();
        v.push(b'\n');
        Bytes::from(v)
    }

    fn bookmark(&self, rv: u64, initial_end: bool) -> Bytes {
        let mut meta = json!({"resourceVersion": rv.to_string()});
        if initial_end {
            meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        let obj = match self.format {
            Format::Metadata => {
                json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": meta})
            }
            _ => {
                json!({"kind": self.def.kind, "apiVersion": self.def.api_version(&self.version), "metadata": meta})
            }
        };
        let mut v =
            serde_json::to_vec(&json!({"type": "BOOKMARK", "object": obj})).unwrap_or_default();
        v.push(b'\n');
        Bytes::from(v)
    }

    /// The event a watcher of this spec sees for a change, if any: objects entering the
    /// selection are ADDED, leaving it DELETED.
    fn translate(&self, ev: &Event) -> Option<(&'static str, Arc<Value>)> {
        match ev.etype {
            EventType::Added => self
                .in_scope(&ev.object)
                .then(|| ("ADDED", ev.object.clone())),
            EventType::Modified => {
                let was = ev.old.as_ref().is_some_and(|o| self.in_scope(o));
                let now = self.in_scope(&ev.object);
                match (was, now) {
                    (true, true) => Some(("MODIFIED", ev.object.clone())),
                    (false, true) => Some(("ADDED", ev.object.clone())),
                    (true, false) => Some(("DELETED", ev.object.clone())),
                    (false, false) => None,
                }
            }
            EventType::Deleted => {
                let was = ev.old.as_ref().map(|o| self.in_scope(o)).unwrap_or(false)
                    || self.in_scope(&ev.object);
                was.then(|| ("DELETED", ev.object.clone()))
            }
        }
    }
}

/// An ERROR watch event carrying a 410 Status.
pub fn gone_line(rv: &str, oldest: u64) -> Bytes {
    let e = ApiError::gone(format!("too old resource version: {rv} ({oldest})"));
    let mut v = serde_json::to_vec(&json!({"type": "ERROR", "object": e.status_json()}))
        .unwrap_or_default();
    v.push(b'\n');
    Bytes::from(v)
}

/// Starts a watch and returns the streaming response; every chunk reaches the client `delay`
/// after it was produced (fault injection: a lagging watch).
pub fn start(
    store: Arc<Store>,
    spec: WatchSpec,
    mut close: tokio::sync::watch::Receiver<u64>,
    mut bookmark_now: tokio::sync::watch::Receiver<u64>,
    delay: Duration,
) -> ApiResult<Response> {
    let gr: GroupResource = (spec.def.group.clone(), spec.def.plural.clone());
    let (stamped_tx, rx) = mpsc::channel::<(tokio::time::Instant, Bytes)>(16);
    let tx = Stamping(stamped_tx);
    // The initial events are chosen under the store lock and rendered after it is released.
    let mut initial: Vec<(&'static str, Arc<Value>)> = Vec::new();
    let (mut sub, start_rv, initial_end) = {
        let st = store.lock();
        let synthetic = spec.send_initial_events
            || matches!(
                spec.resource_version.as_deref(),
                None | Some("") | Some("0")
            );
        if synthetic {
            if let Some(b) = st.bucket(&gr) {
                for obj in b.values() {
                    if spec.in_scope(obj) {
                        initial.push(("ADDED", obj.clone()));
                    }
                }
            }
        } else {
            let rv_s = spec.resource_version.clone().unwrap_or_default();
            let rv: u64 = rv_s.parse().map_err(|_| {
                ApiError::invalid_field(
                    "meta.k8s.io",
                    "ListOptions",
                    "",
                    "resourceVersion",
                    &format!("Invalid value: \"{rv_s}\": must be a valid resource version"),
                )
            })?;
            if rv < st.compacted_rv {
                let line = gone_line(&rv_s, st.compacted_rv);
                drop(st);
                return Ok(stream_response(futures::stream::iter(vec![Ok::<
                    _,
                    Infallible,
                >(
                    line
                )])));
            }
            for ev in st.history.iter().filter(|e| e.rv > rv && e.gr == gr) {
                if let Some(event) = spec.translate(ev) {
                    initial.push(event);
                }
            }
        }
        (store.subscribe(), st.rv, spec.send_initial_events)
    };
    let store2 = store.clone();
    // A delayed watch (fault injection: a slow network) is not a slow reader: its chunks wait
    // in the delivery queue, so it is never closed for them.
    let budget = if delay.is_zero() {
        spec.slow_watcher_budget
    } else {
        Duration::ZERO
    };
    tokio::spawn(async move {
        // Initial events go out in chunks of up to 64 KiB rather than one chunk per event:
        // streaming lists of thousands of objects are much faster that way.
        let mut chunk: Vec<u8> = Vec::new();
        for (etype, obj) in initial {
            chunk.extend_from_slice(&spec.line(etype, &obj));
            if chunk.len() >= 64 * 1024
                && tx
                    .send(Bytes::from(std::mem::take(&mut chunk)))
                    .await
                    .is_err()
            {
                return;
            }
        }
        if !chunk.is_empty() && tx.send(Bytes::from(chunk)).await.is_err() {
            return;
        }
        if initial_end && tx.send(spec.bookmark(start_rv, true)).await.is_err() {
            return;
        }
        let mut last = start_rv;
        let deadline = spec.timeout.map(|t| tokio::time::Instant::now() + t);
        let mut tick = tokio::time::interval_at(
            tokio::time::Instant::now() + spec.bookmark_interval,
            spec.bookmark_interval,
        );
        loop {
            tokio::select! {
                r = sub.recv() => match r {
                    Ok(ev) => {
                        if ev.rv <= last {
                            continue;
                        }
                        last = ev.rv;
                        if ev.gr != gr {
                            continue;
                        }
                        if let Some((t, obj)) = spec.translate(&ev)
                            && !tx.send_within(spec.line(t, &obj), budget, &spec.slow_watchers_closed).await
                        {
                            return;
                        }
                    }
                    // Fell too far behind (or the server is going away): close, as a real
                    // server closes slow watchers; the client resumes from its last rv.
                    Err(broadcast::error::RecvError::Lagged(_)) => {
                        spec.slow_watchers_closed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        return;
                    }
                    Err(broadcast::error::RecvError::Closed) => return,
                },
                _ = close.changed() => return,
                _ = async {
                    match deadline {
                        Some(d) => tokio::time::sleep_until(d).await,
                        None => std::future::pending().await,
                    }
                } => return,
                _ = tick.tick(), if spec.bookmarks => {
                    last = bookmark_rv(&store2, &sub, last);
                    if !tx.send_within(spec.bookmark(last, false), budget, &spec.slow_watchers_closed).await {
                        return;
                    }
                }
                Ok(()) = bookmark_now.changed(), if spec.bookmarks => {
                    last = bookmark_rv(&store2, &sub, last);
                    if !tx.send_within(spec.bookmark(last, false), budget, &spec.slow_watchers_closed).await {
                        return;
                    }
                }
            }
        }
    });
    let stream = futures::stream::unfold(rx, move |mut rx| async move {
        let (at, bytes) = rx.recv().await?;
        if !delay.is_zero() {
            tokio::time::sleep_until(at + delay).await;
        }
        Some((Ok::<_, Infallible>(bytes), rx))
    });
    Ok(stream_response(stream))
}

/// Sends chunks with the time they were produced (so a delay does not add up over a burst).
struct Stamping(mpsc::Sender<(tokio::time::Instant, Bytes)>);

impl Stamping {
    async fn send(&self, bytes: Bytes) -> Result<(), mpsc::error::SendError<Bytes>> {
        self.0
            .send((tokio::time::Instant::now(), bytes))
            .await
            .map_err(|err| mpsc::error::SendError(err.0.1))
    }

    /// A live event: at once if the watcher's buffer has room, else within `budget`; `false`
    /// closes the watch (a watcher that does not read is closed, as kube-apiserver's watch
    /// cache closes it: `cache_watcher.go` `add`). A zero budget never closes.
    async fn send_within(
        &self,
        bytes: Bytes,
        budget: Duration,
        slow_closes: &std::sync::atomic::AtomicU64,
    ) -> bool {
        let item = (tokio::time::Instant::now(), bytes);
        match self.0.try_send(item) {
            Ok(()) => true,
            Err(mpsc::error::TrySendError::Closed(_)) => false,
            Err(mpsc::error::TrySendError::Full(item)) if budget.is_zero() => {
                self.0.send(item).await.is_ok()
            }
            Err(mpsc::error::TrySendError::Full(item)) => {
                match tokio::time::timeout(budget, self.0.send(item)).await {
                    Ok(sent) => sent.is_ok(),
                    Err(_) => {
                        slow_closes.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        false
                    }
                }
            }
        }
    }
}

/// The resourceVersion a bookmark may carry: everything up to the current counter has been
/// delivered when the watcher's queue is empty (events are broadcast before the counter
/// moves); otherwise the last delivered event's.
fn bookmark_rv(store: &Store, sub: &broadcast::Receiver<Arc<Event>>, last: u64) -> u64 {
    let cur = store.current_rv();
    if sub.is_empty() { cur.max(last) } else { last }
}

fn stream_response<S>(s: S) -> Response
where
    S: futures::Stream<Item = Result<Bytes, Infallible>> + Send + 'static,
{
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::CACHE_CONTROL, "no-cache, private")
        .body(Body::from_stream(s))
        .unwrap_or_else(|_| Response::new(Body::empty()))
}
