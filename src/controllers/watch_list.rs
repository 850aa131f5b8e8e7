//! The watches that may see thousands of objects (the import's shared caches, the referenced
//! objects, the move Bundles) list through [`events`]: a streaming list where the server serves
//! one, pages of a consistent list where it does not ([`crate::model::watch`] says why and
//! decides). The small watches keep kube-runtime's default, a consistent list in pages.

use futures::stream::{self, BoxStream, StreamExt};
use kube::runtime::watcher::{self, Event};

use crate::model::watch::{InitialList, refuses_streaming_lists};

type Events<K> = BoxStream<'static, watcher::Result<Event<K>>>;

/// The events of the watch `start` opens with `config`, first as a streaming list; if the
/// server refuses that, from then on as a consistent list in pages of `config`'s page size.
/// `config` must not ask for `any_semantic()` (the server would ignore the page size).
pub fn events<K, S>(
    kind: String,
    config: watcher::Config,
    start: impl Fn(watcher::Config) -> S + Send + 'static,
) -> Events<K>
where
    K: Send + 'static,
    S: futures::Stream<Item = watcher::Result<Event<K>>> + Send + 'static,
{
    let streaming = start(config.clone().streaming_lists()).boxed();
    let state = State {
        stream: streaming,
        streaming: true,
        listed: false,
        initial: InitialList::default(),
        pending: None,
    };
    stream::unfold(
        (state, config, start, kind),
        |(mut state, config, start, kind)| async move {
            if let Some(item) = state.pending.take() {
                return Some((item, (state, config, start, kind)));
            }
            loop {
                let item = state.stream.next().await?;
                if !state.streaming {
                    return Some((item, (state, config, start, kind)));
                }
                if matches!(item, Ok(Event::InitDone)) {
                    state.listed = true;
                }
                if let Err(err) = &item
                    && !state.listed
                    && refuses_streaming_lists(err)
                {
                    tracing::info!(%kind, %err, "the API server does not serve streaming lists; listing in pages");
                    state.stream = start(config.clone()).boxed();
                    state.streaming = false;
                    continue;
                }
                if state.initial.needs_init(&item) {
                    state.pending = Some(item);
                    return Some((Ok(Event::Init), (state, config, start, kind)));
                }
                return Some((item, (state, config, start, kind)));
            }
        },
    )
    .boxed()
}

struct State<K> {
    stream: Events<K>,
    /// Still trying streaming lists (until the server refuses one).
    streaming: bool,
    /// A streaming list completed: the server serves them, later errors are not refusals.
    listed: bool,
    initial: InitialList,
    /// An event held back behind the synthetic `Init` emitted before it.
    pending: Option<watcher::Result<Event<K>>>,
}
