//! The Kubernetes client the manager uses: a `User-Agent` naming this provider (API server audit
//! logs and request metrics show who called) and a client-side token-bucket rate limit
//! (`--kube-api-qps`, `--kube-api-burst`), as client-go's `QPS`/`Burst`.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use http::{HeaderName, HeaderValue};
use kube::Client;
use kube::client::ClientBuilder;
use tokio::time::{Instant, Sleep};
use tower::{Layer, Service};

use crate::cli::ManagerFlags;
use crate::{Error, Result};

/// `User-Agent` of every request the manager makes (`caapf/<version>`).
pub fn user_agent() -> String {
    format!("caapf/{}", env!("CARGO_PKG_VERSION"))
}

/// Builds the manager's client from `config`: user agent and, when `--kube-api-qps` is
/// positive, the rate limit.
pub fn build(mut config: kube::Config, flags: &ManagerFlags) -> Result<Client> {
    let url = config.cluster_url.to_string();
    let agent = HeaderValue::from_str(&user_agent())
        .map_err(|err| Error::KubeConfig(format!("user agent: {err}")))?;
    config
        .headers
        .push((HeaderName::from_static("user-agent"), agent));
    let builder = ClientBuilder::try_from(config)
        .map_err(|err| Error::KubeConfig(format!("building a client for {url}: {err}")))?;
    let layer = RateLimitLayer::from_flags(flags.kube_api_qps, flags.kube_api_burst);
    Ok(builder.with_layer(&layer).build())
}

/// A token bucket: holds up to `capacity` tokens, refilled at `rate` per second; a request
/// takes one. client-go's `NewTokenBucketRateLimiter(qps, burst)`.
#[derive(Clone, Debug)]
pub struct TokenBucket {
    capacity: f64,
    rate: f64,
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    /// A full bucket. `burst` below 1 is taken as 1; `qps` must be positive.
    pub fn new(qps: f64, burst: u32, now: Instant) -> Self {
        let capacity = f64::from(burst.max(1));
        Self {
            capacity,
            rate: qps,
            tokens: capacity,
            last: now,
        }
    }

    fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.rate).min(self.capacity);
        self.last = now;
    }

    /// Takes a token at `now`, or says how long to wait until one is available.
    pub fn try_take(&mut self, now: Instant) -> Result<(), Duration> {
        self.refill(now);
        // The epsilon absorbs floating-point error after waiting exactly the advised time.
        if self.tokens >= 1.0 - 1e-9 {
            self.tokens = (self.tokens - 1.0).max(0.0);
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - self.tokens) / self.rate))
        }
    }
}

/// Tower layer applying a [`TokenBucket`] before every request; `None` bucket: no limit.
#[derive(Clone, Debug)]
pub struct RateLimitLayer {
    limit: Option<(f64, u32)>,
}

impl RateLimitLayer {
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
    use super::*;
    use std::convert::Infallible;
    use tower::ServiceExt;

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
