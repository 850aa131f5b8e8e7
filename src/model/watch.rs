//! How a watch learns what already exists before it follows changes.
//!
//! A real kube-apiserver serves a `resourceVersion=0` list from its watch cache and ignores
//! `limit` there (apiserver `pkg/storage/cacher/cacher.go`, `computeListLimit`: "the limit is
//! ignored for requests that set RV == 0"): kube-runtime's `any_semantic()` list would bring all
//! 10,000 Fleet Clusters, managed fields and `templateValues` included, in one response, and the
//! manager would hold all of them decoded at once. So the watches ask for a streaming list
//! (`sendInitialEvents=true`, KEP-3157: the objects arrive one by one as watch events, then a
//! bookmark marks the end), and where the server refuses it (the `WatchList` feature gate: on by
//! default in kube-apiserver 1.32 and from 1.34, off in 1.33 and before; `pkg/features/
//! kube_features.go`) they fall back to a consistent list in pages (no resourceVersion, so
//! `limit` is honoured), as client-go's reflector falls back to a LIST when a watch-list fails.

use kube::runtime::watcher::{Error, Event};

/// Whether an error of a streaming-list watch that has not completed a list yet means the
/// server does not serve streaming lists. A server without the gate answers 422 Invalid
/// ("sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled",
/// apimachinery `pkg/apis/meta/internalversion/validation/validation.go`,
/// `validateWatchOptions`); a 400 is the same refusal from a server that rejects the parameter
/// outright. kube-client does not check a watch response's HTTP status: it reads the Status body
/// as the stream's first item (`Client::request_events`, kube-client 3.1), which kube-runtime
/// reports as `WatchFailed`; a refused connection upgrade would be `WatchStartFailed`. Anything
/// else (no connection, 403, 5xx) is retried as it is.
pub fn refuses_streaming_lists(error: &Error) -> bool {
    match error {
        Error::WatchStartFailed(kube::Error::Api(status))
        | Error::WatchFailed(kube::Error::Api(status)) => matches!(status.code, 400 | 422),
        _ => false,
    }
}

/// Where a streaming watch is in its initial list. kube-runtime's streaming list sends no
/// `Init` before its first object (its paginated list does), but the cache writer and the
/// fan-out use `Init` to start a fresh list: without it, objects from an attempt that failed
/// half-way would stay in the new list.
#[derive(Debug, Default)]
pub struct InitialList {
    listing: bool,
}

impl InitialList {
    /// Whether `item` must be preceded by a synthetic `Init`.
    pub fn needs_init<K>(&mut self, item: &Result<Event<K>, Error>) -> bool {
        match item {
            Ok(Event::Init) => {
                self.listing = true;
                false
            }
            Ok(Event::InitApply(_)) => !std::mem::replace(&mut self.listing, true),
            Ok(Event::InitDone) => !std::mem::replace(&mut self.listing, false),
            Ok(Event::Apply(_) | Event::Delete(_)) => false,
            // The watcher starts its list over: the next object begins a new one.
            Err(Error::WatchStartFailed(_)) => {
                self.listing = false;
                false
            }
            Err(Error::WatchError(status)) if status.code == 410 => {
                self.listing = false;
                false
            }
            Err(_) => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::Status;

    fn api_error(code: u16, reason: &str) -> kube::Error {
        kube::Error::Api(Box::new(Status::failure("refused", reason).with_code(code)))
    }

    #[test]
    fn which_failures_mean_no_streaming_lists() {
        let cases = [
            (Error::WatchStartFailed(api_error(422, "Invalid")), true),
            (Error::WatchStartFailed(api_error(400, "BadRequest")), true),
            (Error::WatchStartFailed(api_error(403, "Forbidden")), false),
            (
                Error::WatchStartFailed(api_error(500, "InternalError")),
                false,
            ),
            (
                Error::WatchStartFailed(api_error(429, "TooManyRequests")),
                false,
            ),
            // How kube-client delivers the refusal: the Status body as the stream's first item.
            (Error::WatchFailed(api_error(422, "Invalid")), true),
            (Error::WatchFailed(api_error(403, "Forbidden")), false),
            // A failed list is not a refused watch.
            (Error::InitialListFailed(api_error(422, "Invalid")), false),
            (Error::NoResourceVersion, false),
        ];
        for (error, refused) in cases {
            assert_eq!(refuses_streaming_lists(&error), refused, "{error}");
        }
    }

    type Item = Result<Event<&'static str>, Error>;

    fn inits(items: Vec<Item>) -> Vec<bool> {
        let mut list = InitialList::default();
        items.iter().map(|item| list.needs_init(item)).collect()
    }

    fn gone() -> Item {
        Err(Error::WatchError(Box::new(
            Status::failure("too old", "Expired").with_code(410),
        )))
    }

    #[test]
    fn a_streaming_list_gets_one_init_per_attempt() {
        use Event::*;
        let cases: Vec<(&str, Vec<Item>, Vec<bool>)> = vec![
            (
                "objects, end, then changes",
                vec![
                    Ok(InitApply("a")),
                    Ok(InitApply("b")),
                    Ok(InitDone),
                    Ok(Apply("a")),
                    Ok(Delete("b")),
                ],
                vec![true, false, false, false, false],
            ),
            (
                "an empty list",
                vec![Ok(InitDone), Ok(Apply("a"))],
                vec![true, false],
            ),
            (
                "a paginated list brings its own Init",
                vec![Ok(Init), Ok(InitApply("a")), Ok(InitDone)],
                vec![false, false, false],
            ),
            (
                "410 half-way: the list starts over",
                vec![Ok(InitApply("a")), gone(), Ok(InitApply("b")), Ok(InitDone)],
                vec![true, false, true, false],
            ),
            (
                "a failed start: the next attempt is new",
                vec![
                    Ok(InitApply("a")),
                    Err(Error::WatchStartFailed(api_error(500, "InternalError"))),
                    Ok(InitApply("a")),
                    Ok(InitDone),
                ],
                vec![true, false, true, false],
            ),
            (
                "a transient stream error inside the same list",
                vec![
                    Ok(InitApply("a")),
                    Err(Error::NoResourceVersion),
                    Ok(InitApply("b")),
                    Ok(InitDone),
                ],
                vec![true, false, false, false],
            ),
            (
                "a relist after a desync",
                vec![
                    Ok(InitApply("a")),
                    Ok(InitDone),
                    gone(),
                    Ok(InitApply("a")),
                    Ok(InitDone),
                ],
                vec![true, false, false, true, false],
            ),
        ];
        for (name, items, expected) in cases {
            assert_eq!(inits(items), expected, "{name}");
        }
    }
}
