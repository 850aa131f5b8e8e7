//! The Kubernetes clients the manager uses, both with a `User-Agent` naming this provider (API
//! server audit logs and request metrics show who called):
//!
//! - the **controllers' client**, with a client-side token-bucket rate limit
//!   (`--kube-api-qps`, `--kube-api-burst`), as client-go's `QPS`/`Burst` ([`TokenBucket`], the
//!   `governor` crate's rate limiter; requests wait for their turn, they never fail for it);
//! - the **priority client**, for the leader election Lease and the Runtime SDK hooks, with no
//!   client-side limit: a Lease renewal or a hook answer must never wait behind thousands of
//!   queued import requests (a late renewal loses the Lease; CAPI waits for the hook). Its load
//!   is bounded by its callers (a Lease request every retry period; hooks at the rate CAPI calls
//!   them). controller-runtime likewise gives leader election clients of its own
//!   (`pkg/leaderelection/leader_election.go`, v0.24.1: `NewResourceLock` calls
//!   `NewForConfig`, and each clientset gets a token bucket of its own).
//!
//! Both retry a request the API server turned away with `429 Too Many Requests` (API Priority
//! and Fairness) or a 5xx carrying `Retry-After`, after the delay the server asks for, up to 10
//! times — what client-go does (`rest/with_retry.go` `checkWait`, `rest/request.go`
//! `MaxRetries` default 10, client-go v0.36.3).

pub mod refusals;
pub mod workload;

use std::future::Future;
use std::num::NonZeroU32;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use governor::clock::{Clock, FakeRelativeClock};
use governor::middleware::NoOpMiddleware;
use governor::nanos::Nanos;
use governor::state::{InMemoryState, NotKeyed};
use governor::{Quota, RateLimiter};
use http::{HeaderMap, HeaderName, HeaderValue, Request, Response, StatusCode};
use kube::Client;
use kube::client::{Body, ClientBuilder};
use tokio::time::{Instant, Sleep};
use tower::buffer::BufferLayer;
use tower::retry::{Policy, RetryLayer};
use tower::{Layer, Service};

use crate::cli::ManagerFlags;
use crate::{Error, Result};

/// `User-Agent` of every request the manager makes: `caapf/<version>`, followed by
/// ` (<pod name>)` when env `POD_NAME` is set (the Deployment sets it), so the API server's
/// audit log (and the sandbox's request log) tells the replicas apart.
pub fn user_agent() -> String {
    user_agent_for(std::env::var("POD_NAME").ok().as_deref())
}

/// The `User-Agent` for a pod name; characters a pod name cannot hold are dropped (a header
/// value must stay valid whatever the environment says).
pub fn user_agent_for(pod: Option<&str>) -> String {
    let version = format!("caapf/{}", env!("CARGO_PKG_VERSION"));
    let pod: String = pod
        .unwrap_or_default()
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '.')
        .collect();
    if pod.is_empty() {
        version
    } else {
        format!("{version} ({pod})")
    }
}

/// The manager's two clients ((see [`retry_after_header`])he module documentation).
#[derive(Clone)]
pub struct Clients {
    /// The controllers' client, rate-limited by `--kube-api-qps`/`--kube-api-burst`.
    pub controllers: Client,
    /// The Lease and the Runtime SDK hooks: no client-side limit.
    pub priority: Client,
}

impl Clients {
    /// One client for everything (tests that build their own).
    pub fn single(client: Client) -> Self {
        Self {
            controllers: client.clone(),
            priority: client,
        }
    }
}

/// Builds the manager's clients from `config`.
pub fn build_clients(config: kube::Config, flags: &ManagerFlags) -> Result<Clients> {
    Ok(Clients {
        controllers: build(config.clone(), flags)?,
        priority: build_with_limit(config, RateLimitLayer::unlimited())?,
    })
}

/// Builds the controllers' client from `config`: user agent and, when `--kube-api-qps` is
/// positive, the rate limit.
pub fn build(config: kube::Config, flags: &ManagerFlags) -> Result<Client> {
    build_with_limit(
        config,
        RateLimitLayer::from_flags(flags.kube_api_qps, flags.kube_api_burst),
    )
}

fn build_with_limit(mut config: kube::Config, limit: RateLimitLayer) -> Result<Client> {
    let url = config.cluster_url.to_string();
    let agent = HeaderValue::from_str(&user_agent())
        .map_err(|err| Error::KubeConfig(format!("user agent: {err}")))?;
    config
        .headers
        .push((HeaderName::from_static("user-agent"), agent));
    let builder = ClientBuilder::try_from(config)
        .map_err(|err| Error::KubeConfig(format!("building a client for {url}: {err}")))?;
    // Retries go through the token bucket again, as client-go's do.
    Ok(builder
        .with_layer(&limit)
        .with_layer(&BufferLayer::new(1024))
        .with_layer(&RetryLayer::new(RetryAfter::default()))
        .build())
}

/// How often a request is retried when the server asks to wait (client-go's default
/// `maxRetries`).
pub const MAX_RETRIES: u32 = 10;

/// Retries a request the server turned away with a `Retry-After` (see [`retry_after_header`]), after
/// the delay it asks for, up to [`MAX_RETRIES`] times. A request whose body cannot be replayed
/// (a stream) is not retried.
#[derive(Clone, Debug, Default)]
pub struct RetryAfter {
    attempts: u32,
}

impl<Res, E> Policy<Request<Body>, Response<Res>, E> for RetryAfter {
    type Future = Sleep;

    fn retry(
        &mut self,
        _request: &mut Request<Body>,
        result: &mut std::result::Result<Response<Res>, E>,
    ) -> Option<Sleep> {
        let response = result.as_ref().ok()?;
        let wait = retry_after_header(response.status(), response.headers())?;
        if self.attempts >= MAX_RETRIES {
            return None;
        }
        self.attempts += 1;
        tracing::debug!(status = %response.status(), ?wait, attempt = self.attempts, "the API server asked to retry later");
        Some(tokio::time::sleep(wait))
    }

    fn clone_request(&mut self, request: &Request<Body>) -> Option<Request<Body>> {
        let body = request.body().try_clone()?;
        let mut copy = Request::builder()
            .method(request.method().clone())
            .uri(request.uri().clone())
            .version(request.version())
            .body(body)
            .ok()?;
        *copy.headers_mut() = request.headers().clone();
        *copy.extensions_mut() = request.extensions().clone();
        Some(copy)
    }
}

/// How long the server asks to wait before a retry: `429 Too Many Requests` (API Priority and
/// Fairness rejecting a request) or any 5xx, with a `Retry-After` header in whole seconds —
/// client-go's `checkWait` (`rest/with_retry.go`, v0.36.3). `None`: not to be retried.
pub fn retry_after_header(status: StatusCode, headers: &HeaderMap) -> Option<Duration> {
    if status != StatusCode::TOO_MANY_REQUESTS && !status.is_server_error() {
        return None;
    }
    let seconds: u64 = headers
        .get(http::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()?;
    Some(Duration::from_secs(seconds))
}

/// client-go's `NewTokenBucketRateLimiter(qps, burst)`: `burst` requests at once, then one every
/// `1/qps`; idle time refills up to `burst`, not beyond. The arithmetic is the `governor` crate's
/// (GCRA, which admits exactly what a token bucket of that size and rate admits), on a clock we
/// move to the time we are given, so that the tower service below waits with tokio's timer
/// (and tests run on tokio's paused clock). A refused request takes nothing.
pub struct TokenBucket {
    limiter: RateLimiter<NotKeyed, InMemoryState, FakeRelativeClock, NoOpMiddleware<Nanos>>,
    /// Shared with `limiter`: moved forward to the `now` of each call.
    clock: FakeRelativeClock,
    origin: Instant,
}

/// The longest interval between two requests a positive `--kube-api-qps` can ask for (governor
/// counts time in nanoseconds in a `u64`, about 584 years).
const LONGEST_PERIOD: Duration = Duration::from_secs(365 * 24 * 3600);

impl TokenBucket {
    /// A full bucket. `burst` below 1 is taken as 1; `qps` must be positive (a rate above one
    /// request per nanosecond is taken as that).
    pub fn new(qps: f64, burst: u32, now: Instant) -> Self {
        let period = Duration::try_from_secs_f64(1.0 / qps)
            .unwrap_or(LONGEST_PERIOD)
            .clamp(Duration::from_nanos(1), LONGEST_PERIOD);
        let burst = NonZeroU32::new(burst).unwrap_or(NonZeroU32::MIN);
        let quota = Quota::with_period(period)
            .unwrap_or_else(|| Quota::per_second(NonZeroU32::MAX))
            .allow_burst(burst);
        let clock = FakeRelativeClock::default();
        Self {
            limiter: RateLimiter::direct_with_clock(quota, clock.clone()),
            clock,
            origin: now,
        }
    }

    /// Takes a token at `now`, or says how long to wait until one is available.
    pub fn try_take(&mut self, now: Instant) -> Result<(), Duration> {
        let at = now.saturating_duration_since(self.origin);
        let current = Duration::from(self.clock.now());
        if at > current {
            self.clock.advance(at - current);
        }
        self.limiter
            .check()
            .map_err(|not_until| not_until.wait_time_from(self.clock.now()))
    }
}

/// Tower layer applying a [`TokenBucket`] before every request; `None` bucket: no limit.
#[derive(Clone, Debug)]
pub struct RateLimitLayer {
    limit: Option<(f64, u32)>,
}

impl RateLimitLayer {
    /// No limit.
    pub fn unlimited() -> Self {
        Self { limit: None }
    }

    /// `qps <= 0` disables the limit (as client-go does for a negative QPS).
    pub fn from_flags(qps: f32, burst: u32) -> Self {
        let qps = f64::from(qps);
        Self {
            limit: (qps.is_finite() && qps > 0.0).then_some((qps, burst)),
        }
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimit<S>;

    fn layer(&self, inner: S) -> RateLimit<S> {
        RateLimit {
            inner,
            bucket: self
                .limit
                .map(|(qps, burst)| TokenBucket::new(qps, burst, Instant::now())),
            taken: false,
            sleep: None,
        }
    }
}

/// The service [`RateLimitLayer`] makes. It waits in `poll_ready`, so callers queue in order
/// (kube's client puts a buffer in front of it) and a request starts only with a token.
pub struct RateLimit<S> {
    inner: S,
    bucket: Option<TokenBucket>,
    /// A token is reserved for the next `call`.
    taken: bool,
    sleep: Option<Pin<Box<Sleep>>>,
}

impl<S, R> Service<R> for RateLimit<S>
where
    S: Service<R>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        if let Some(bucket) = self.bucket.as_mut()
            && !self.taken
        {
            loop {
                if let Some(sleep) = self.sleep.as_mut() {
                    if sleep.as_mut().poll(cx).is_pending() {
                        return Poll::Pending;
                    }
                    self.sleep = None;
                }
                match bucket.try_take(Instant::now()) {
                    Ok(()) => {
                        self.taken = true;
                        break;
                    }
                    Err(wait) => self.sleep = Some(Box::pin(tokio::time::sleep(wait))),
                }
            }
        }
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: R) -> Self::Future {
        self.taken = false;
        self.inner.call(request)
    }
}

#[cfg(test)]
mod tests {
    impl super::RateLimitLayer {
        /// Whether requests wait for tokens.
        pub(crate) fn limits(&self) -> bool {
            self.limit.is_some()
        }
    }

    #[test]
    fn the_user_agent_names_the_pod() {
        let version = format!("caapf/{}", env!("CARGO_PKG_VERSION"));
        for (pod, want) in [
            (None, version.clone()),
            (Some(""), version.clone()),
            (
                Some("caapf-controller-manager-7d9f-abcde"),
                format!("{version} (caapf-controller-manager-7d9f-abcde)"),
            ),
            (Some("a\r\nb (c)"), format!("{version} (abc)")),
        ] {
            assert_eq!(super::user_agent_for(pod), want, "{pod:?}");
        }
    }

    use super::*;
    use std::convert::Infallible;
    use tower::ServiceExt;

    #[test]
    fn retry_only_when_the_server_says_when() {
        let with = |value: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(
                http::header::RETRY_AFTER,
                HeaderValue::from_str(value).expect("header"),
            );
            headers
        };
        let none = HeaderMap::new();
        let cases: &[(u16, &HeaderMap, Option<u64>)] = &[
            (429, &with("1"), Some(1)),
            (429, &with("0"), Some(0)),
            (503, &with("3"), Some(3)),
            (500, &with("2"), Some(2)),
            (429, &none, None),
            (503, &none, None),
            (409, &with("1"), None),
            (200, &with("1"), None),
            (429, &with("Wed, 21 Oct 2026 07:28:00 GMT"), None),
        ];
        for (code, headers, expected) in cases {
            let status = StatusCode::from_u16(*code).expect("status");
            assert_eq!(
                retry_after_header(status, headers),
                expected.map(Duration::from_secs),
                "{code} {headers:?}"
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn throttled_requests_are_retried_after_the_asked_delay() {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicU32, Ordering};
        // The server turns away the first two attempts with 429, Retry-After: 1.
        let calls = Arc::new(AtomicU32::new(0));
        let seen = calls.clone();
        let server = tower::service_fn(move |_: Request<Body>| {
            let n = seen.fetch_add(1, Ordering::SeqCst);
            async move {
                let mut response = Response::new(());
                if n < 2 {
                    *response.status_mut() = StatusCode::TOO_MANY_REQUESTS;
                    response
                        .headers_mut()
                        .insert(http::header::RETRY_AFTER, HeaderValue::from_static("1"));
                }
                Ok::<_, Infallible>(response)
            }
        });
        let mut service = RetryLayer::new(RetryAfter::default()).layer(server);
        let start = Instant::now();
        let request = Request::new(Body::from(b"{}".to_vec()));
        let response = service
            .ready()
            .await
            .expect("ready")
            .call(request)
            .await
            .expect("call");
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(calls.load(Ordering::SeqCst), 3);
        assert_eq!(start.elapsed(), Duration::from_secs(2));

        // A server that never relents: given up after MAX_RETRIES retries.
        let calls = Arc::new(AtomicU32::new(0));
        let seen = calls.clone();
        let server = tower::service_fn(move |_: Request<Body>| {
            seen.fetch_add(1, Ordering::SeqCst);
            async {
                let mut response = Response::new(());
                *response.status_mut() = StatusCode::TOO_MANY_REQUESTS;
                response
                    .headers_mut()
                    .insert(http::header::RETRY_AFTER, HeaderValue::from_static("0"));
                Ok::<_, Infallible>(response)
            }
        });
        let mut service = RetryLayer::new(RetryAfter::default()).layer(server);
        let response = service
            .ready()
            .await
            .expect("ready")
            .call(Request::new(Body::empty()))
            .await
            .expect("call");
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(calls.load(Ordering::SeqCst), 1 + MAX_RETRIES);
    }

    #[test]
    fn bucket_allows_a_burst_then_the_rate() {
        let t0 = Instant::now();
        let mut bucket = TokenBucket::new(10.0, 3, t0);
        // A full bucket: `burst` requests at once.
        for i in 0..3 {
            assert_eq!(bucket.try_take(t0), Ok(()), "request {i} of the burst");
        }
        // Then one every 1/qps.
        assert_eq!(bucket.try_take(t0), Err(Duration::from_millis(100)));
        let t1 = t0 + Duration::from_millis(50);
        let wait = bucket.try_take(t1).expect_err("half a token");
        assert!((wait.as_secs_f64() - 0.05).abs() < 1e-9, "{wait:?}");
        assert_eq!(bucket.try_take(t0 + Duration::from_millis(100)), Ok(()));
        // Idle time refills up to the burst, not beyond.
        let later = t0 + Duration::from_secs(60);
        for _ in 0..3 {
            assert_eq!(bucket.try_take(later), Ok(()));
        }
        assert!(bucket.try_take(later).is_err());
    }

    #[test]
    fn fractional_qps_spaces_requests_more_than_a_second_apart() {
        let t0 = Instant::now();
        let mut bucket = TokenBucket::new(0.5, 1, t0);
        assert_eq!(bucket.try_take(t0), Ok(()));
        assert_eq!(bucket.try_take(t0), Err(Duration::from_secs(2)));
        let wait = bucket
            .try_take(t0 + Duration::from_millis(500))
            .expect_err("a quarter of the interval");
        assert_eq!(wait, Duration::from_millis(1500));
        assert_eq!(bucket.try_take(t0 + Duration::from_secs(2)), Ok(()));
        // A `now` before the last one (callers racing) changes nothing and waits as long.
        assert_eq!(
            bucket.try_take(t0 + Duration::from_secs(1)),
            Err(Duration::from_secs(2))
        );
    }

    #[test]
    fn zero_burst_still_lets_requests_through() {
        let t0 = Instant::now();
        let mut bucket = TokenBucket::new(5.0, 0, t0);
        assert_eq!(bucket.try_take(t0), Ok(()));
        assert_eq!(bucket.try_take(t0), Err(Duration::from_millis(200)));
    }

    #[test]
    fn non_positive_qps_disables_the_limit() {
        assert!(RateLimitLayer::from_flags(0.0, 30).limit.is_none());
        assert!(RateLimitLayer::from_flags(-1.0, 30).limit.is_none());
        assert!(RateLimitLayer::from_flags(f32::NAN, 30).limit.is_none());
        assert_eq!(RateLimitLayer::from_flags(20.0, 30).limit, Some((20.0, 30)));
    }

    async fn run_requests(layer: RateLimitLayer, n: usize) -> Vec<Duration> {
        let start = Instant::now();
        let mut service = layer.layer(tower::service_fn(|_: ()| async {
            Ok::<_, Infallible>(Instant::now())
        }));
        let mut at = Vec::new();
        for _ in 0..n {
            let done = service
                .ready()
                .await
                .expect("ready")
                .call(())
                .await
                .expect("call");
            at.push(done - start);
        }
        at
    }

    #[tokio::test(start_paused = true)]
    async fn service_waits_for_tokens() {
        // qps 10, burst 2: two at once, then one every 100 ms.
        let at = run_requests(RateLimitLayer::from_flags(10.0, 2), 5).await;
        let ms: Vec<u128> = at.iter().map(Duration::as_millis).collect();
        assert_eq!(ms, [0, 0, 100, 200, 300]);
    }

    #[tokio::test(start_paused = true)]
    async fn unlimited_service_does_not_wait() {
        let at = run_requests(RateLimitLayer::from_flags(0.0, 1), 50).await;
        assert!(at.iter().all(Duration::is_zero));
    }
}
