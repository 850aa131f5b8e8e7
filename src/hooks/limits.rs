//! What bounds the extension's memory and time under abusive clients (docs/runtime-extension.md,
//! "Limits"): a byte budget shared by every request being read or handled, the body reader that
//! charges it (size, budget and read-time limits), the estimate of what decoding a body into JSON
//! values costs (charged too: an array of zeros takes about 30 times its size once decoded), and
//! an I/O wrapper that records when a connection last moved a byte so idle connections can be
//! closed.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use futures::StreamExt;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Bytes of request bodies held in memory at once, across every connection. A body charges the
/// budget as its bytes arrive and gives them back when its answer is sent; a body that does not
/// fit in what is left is refused at once (a Failure answer CAPI retries), never queued, so two
/// large bodies cannot wait on each other.
#[derive(Clone, Debug)]
pub struct BodyBudget {
    permits: Arc<Semaphore>,
    total: usize,
}

impl BodyBudget {
    /// A budget of `total` bytes.
    pub fn new(total: usize) -> Self {
        let total = total.min(Semaphore::MAX_PERMITS);
        BodyBudget {
            permits: Arc::new(Semaphore::new(total)),
            total,
        }
    }

    /// Adds `wanted` bytes to the charge `held`, at once or not at all ([`BodyError::Busy`]).
    fn charge(
        &self,
        wanted: u32,
        held: &mut Option<OwnedSemaphorePermit>,
    ) -> Result<(), BodyError> {
        let permit = self
            .permits
            .clone()
            .try_acquire_many_owned(wanted)
            .map_err(|_| BodyError::Busy { budget: self.total })?;
        match held.as_mut() {
            Some(held) => held.merge(permit),
            None => *held = Some(permit),
        }
        Ok(())
    }
}

/// A body held in memory and the part of the budget it holds (released on drop).
#[derive(Debug)]
pub struct ChargedBody {
    pub bytes: Bytes,
    charge: Option<OwnedSemaphorePermit>,
}

impl ChargedBody {
    /// Charges what decoding the body will take ([`decode_cost`]) on top of its bytes, before
    /// it is decoded.
    pub fn charge_decoding(&mut self, budget: &BodyBudget) -> Result<(), BodyError> {
        let extra = decode_cost(&self.bytes).saturating_sub(self.bytes.len());
        if extra == 0 {
            return Ok(());
        }
        let estimate = extra + self.bytes.len();
        match u32::try_from(extra) {
            Ok(wanted) if estimate <= budget.total => budget.charge(wanted, &mut self.charge),
            _ => Err(BodyError::TooCostly {
                estimate,
                budget: budget.total,
            }),
        }
    }
}

/// Bytes charged per JSON value when estimating a decoded body: a `serde_json::Value` is 32
/// bytes, and the vectors and maps holding values grow by doubling (up to twice that), plus a
/// map entry's key.
pub const DECODED_BYTES_PER_VALUE: usize = 64;

/// An upper estimate of the memory a JSON body takes once decoded into `serde_json::Value`s:
/// its bytes (string contents are copied) plus [`DECODED_BYTES_PER_VALUE`] for every value,
/// counted as the structural characters `[`, `{`, `,` and `:` outside strings, plus one. A
/// linear scan, no allocation; for bytes that are not JSON it is still an upper bound of what
/// the parser allocates before it fails.
pub fn decode_cost(bytes: &[u8]) -> usize {
    let mut values = 1usize;
    let mut in_string = false;
    let mut escaped = false;
    for &byte in bytes {
        if in_string {
            if escaped {
                escaped = false;
            } else if byte == b'\\' {
                escaped = true;
            } else if byte == b'"' {
                in_string = false;
            }
            continue;
        }
        match byte {
            b'"' => in_string = true,
            b'[' | b'{' | b',' | b':' => values += 1,
            _ => {}
        }
    }
    bytes
        .len()
        .saturating_add(values.saturating_mul(DECODED_BYTES_PER_VALUE))
}

/// Why a body was not read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BodyError {
    /// Larger than the per-request limit.
    #[error("the request body is too large (at most {limit} bytes are accepted)")]
    TooLarge { limit: usize },
    /// The shared budget is spent by other requests.
    #[error(
        "the extension is busy: request bodies already hold its {budget}-byte budget; retry later"
    )]
    Busy { budget: usize },
    /// The whole body did not arrive in time.
    #[error("the request body did not arrive within {limit:?}")]
    Slow { limit: Duration },
    /// Decoding it would take more than the whole budget.
    #[error(
        "decoding the request body would take about {estimate} bytes, more than the extension's {budget}-byte budget"
    )]
    TooCostly { estimate: usize, budget: usize },
    /// The connection failed while reading.
    #[error("the request body could not be read: {0}")]
    Read(String),
}

/// Reads `body` whole, within `max_bytes`, the shared `budget` and `timeout`.
pub async fn read_body(
    body: Body,
    max_bytes: usize,
    budget: &BodyBudget,
    timeout: Duration,
) -> Result<ChargedBody, BodyError> {
    let read = async {
        let mut stream = body.into_data_stream();
        let mut buffer: Vec<u8> = Vec::new();
        let mut charge: Option<OwnedSemaphorePermit> = None;
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|err| BodyError::Read(err.to_string()))?;
            if buffer.len() + chunk.len() > max_bytes {
                return Err(BodyError::TooLarge { limit: max_bytes });
            }
            if chunk.is_empty() {
                continue;
            }
            let wanted =
                u32::try_from(chunk.len()).map_err(|_| BodyError::TooLarge { limit: max_bytes })?;
            budget.charge(wanted, &mut charge)?;
            buffer.extend_from_slice(&chunk);
        }
        Ok(ChargedBody {
            bytes: Bytes::from(buffer),
            charge,
        })
    };
    tokio::time::timeout(timeout, read)
        .await
        .unwrap_or(Err(BodyError::Slow { limit: timeout }))
}

/// When a connection last read or wrote a byte, shared between its I/O and its supervisor.
#[derive(Clone, Debug)]
pub struct Activity {
    started: Instant,
    last_millis: Arc<AtomicU64>,
}

impl Default for Activity {
    fn default() -> Self {
        Activity {
            started: Instant::now(),
            last_millis: Arc::new(AtomicU64::new(0)),
        }
    }
}

impl Activity {
    fn touch(&self) {
        let now = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_millis.store(now, Ordering::Relaxed);
    }

    /// How long no byte moved.
    pub fn idle_for(&self) -> Duration {
        let last = Duration::from_millis(self.last_millis.load(Ordering::Relaxed));
        self.started.elapsed().saturating_sub(last)
    }
}

/// An I/O stream that records its [`Activity`].
pub struct Tracked<T> {
    inner: T,
    activity: Activity,
}

impl<T> Tracked<T> {
    /// Wraps `inner`; the activity starts now.
    pub fn new(inner: T, activity: Activity) -> Self {
        activity.touch();
        Tracked { inner, activity }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Tracked<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let result = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.touch();
        }
        result
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Tracked<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let result = Pin::new(&mut self.inner).poll_write(cx, data);
        if matches!(result, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        result
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let result = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(result, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        result
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl BodyBudget {
        /// Bytes not charged to any body right now.
        pub fn available(&self) -> usize {
            self.permits.available_permits()
        }
    }

    fn chunked(chunks: &[&'static [u8]]) -> Body {
        let stream = futures::stream::iter(
            chunks
                .iter()
                .map(|c| Ok::<_, std::io::Error>(Bytes::from_static(c)))
                .collect::<Vec<_>>(),
        );
        Body::from_stream(stream)
    }

    #[tokio::test]
    async fn bodies_within_the_limits_are_read_and_charged_until_dropped() {
        let budget = BodyBudget::new(10);
        let body = read_body(
            chunked(&[b"abc", b"def"]),
            8,
            &budget,
            Duration::from_secs(5),
        )
        .await
        .expect("read");
        assert_eq!(&body.bytes[..], b"abcdef");
        assert_eq!(budget.available(), 4);
        drop(body);
        assert_eq!(budget.available(), 10);
    }

    #[tokio::test]
    async fn limits() {
        let timeout = Duration::from_secs(5);
        // (name, chunks, per-request limit, budget, error)
        type Case = (&'static str, Vec<&'static [u8]>, usize, usize, BodyError);
        let cases: Vec<Case> = vec![
            (
                "over the per-request limit",
                vec![b"abcd", b"efgh"],
                6,
                100,
                BodyError::TooLarge { limit: 6 },
            ),
            (
                "over the shared budget",
                vec![b"abcd", b"efgh"],
                100,
                6,
                BodyError::Busy { budget: 6 },
            ),
        ];
        for (name, chunks, max, total, expected) in cases {
            let budget = BodyBudget::new(total);
            let got = read_body(chunked(&chunks), max, &budget, timeout).await;
            assert_eq!(got.err(), Some(expected), "{name}");
            assert_eq!(budget.available(), total, "{name}: the charge is returned");
        }
    }

    #[tokio::test]
    async fn a_budget_held_by_one_body_refuses_the_next_at_once() {
        let budget = BodyBudget::new(8);
        let held = read_body(chunked(&[b"12345678"]), 8, &budget, Duration::from_secs(5))
            .await
            .expect("first");
        let second = read_body(chunked(&[b"x"]), 8, &budget, Duration::from_secs(5)).await;
        assert_eq!(second.err(), Some(BodyError::Busy { budget: 8 }));
        drop(held);
        assert!(
            read_body(chunked(&[b"x"]), 8, &budget, Duration::from_secs(5))
                .await
                .is_ok()
        );
    }

    #[test]
    fn decode_costs() {
        let per = DECODED_BYTES_PER_VALUE;
        let cases: &[(&str, &[u8], usize)] = &[
            ("empty", b"", per),
            ("a number", b"7777", 4 + per),
            ("an array of zeros", b"[0,0,0]", 7 + 4 * per),
            ("an object", br#"{"a":1,"b":2}"#, 13 + 5 * per),
            (
                "structural characters inside strings do not count",
                br#"["a,b:[{", "c\"]"]"#,
                18 + 3 * per,
            ),
            ("garbage", &[0xff, b',', b','], 3 + 3 * per),
        ];
        for (name, body, expected) in cases {
            assert_eq!(decode_cost(body), *expected, "{name}");
        }
    }

    #[tokio::test]
    async fn decoding_is_charged_and_refused_when_it_does_not_fit() {
        let body: &'static [u8] = b"[0,0,0,0,0,0,0,0,0,0]";
        let cost = decode_cost(body);
        let budget = BodyBudget::new(cost);
        let mut read = read_body(chunked(&[body]), 100, &budget, Duration::from_secs(5))
            .await
            .expect("read");
        read.charge_decoding(&budget).expect("fits exactly");
        assert_eq!(budget.available(), 0);
        drop(read);
        assert_eq!(budget.available(), cost);

        let small = BodyBudget::new(cost - 1);
        let mut read = read_body(chunked(&[body]), 100, &small, Duration::from_secs(5))
            .await
            .expect("read");
        assert_eq!(
            read.charge_decoding(&small).err(),
            Some(BodyError::TooCostly {
                estimate: cost,
                budget: cost - 1
            })
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_that_does_not_arrive_in_time_is_cut() {
        let budget = BodyBudget::new(100);
        let stream = futures::stream::iter([Ok::<_, std::io::Error>(Bytes::from_static(b"a"))])
            .chain(futures::stream::pending());
        let got = read_body(
            Body::from_stream(stream),
            100,
            &budget,
            Duration::from_secs(3),
        )
        .await;
        assert_eq!(
            got.err(),
            Some(BodyError::Slow {
                limit: Duration::from_secs(3)
            })
        );
        assert_eq!(budget.available(), 100);
    }
}
