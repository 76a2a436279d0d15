//! Live updates: one follower per server reads the event stream and every
//! open page hears of each event at once, as Server-Sent Events.
//!
//! The follower is a `watch` over every thread (no agent), run in a loop
//! on a thread of its own through the same code as `inbox watch`
//! (`inbox_host_native::run::execute`): on SQLite it sleeps on the database's change
//! watcher, on PostgreSQL on the listening connection, and wakes when any
//! process commits. It is one per server however many pages are open, so
//! twenty idle boards cost what one does. What it reads goes out on a
//! broadcast channel; each page's stream (`GET /api/events`) forwards it,
//! each event with its id as the SSE `id:`. A page that reconnects sends
//! the last id it saw (`Last-Event-ID`), and its stream first sends what
//! happened after it (read with a `watch` that does not wait), so nothing
//! is missed across a reconnect. An event says only which thread, run and
//! task changed, and how: the page fetches what it shows through the API.
//! At most [`MAX_STREAMS`] streams are open at once; one more is refused
//! with 503 and the JSON error shape, and a stream whose client has gone
//! gives its place back as soon as the connection is seen closed (at the
//! latest at the next keep-alive). This module must never decide what an
//! event means.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse as _, Response as HttpResponse};
use axum::routing::get;
use futures_util::stream::{self, Stream, StreamExt as _};
use inbox_engine::model::{Event, EventId};
use inbox_engine::wire::{WatchOutput, WatchRequest};
use inbox_engine::{Output, Request, Response};
use inbox_host_native::Global;
use tokio::sync::{Semaphore, broadcast};

use crate::Board;
use crate::error::BoardError;

/// How long one wait of the follower lasts before it looks again: long,
/// since a commit wakes it at once.
const FOLLOW_SECONDS: u64 = 300;

/// At most this many events per wait (the engine's largest page).
const PAGE: u32 = 1000;

/// Events kept for a page that is slow to take them; one that falls
/// further behind is told to reload everything (`resync`).
const BACKLOG: usize = 1024;

/// After a failed wait (a restarting PostgreSQL, a busy file), the
/// follower tries again after this long.
const RETRY: Duration = Duration::from_secs(1);

/// A comment on an idle stream this often, so proxies and browsers keep
/// it open.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// The most event streams open at once: each is an open page, and a
/// person has a few; the limit keeps a client that opens streams in a
/// loop from taking the server's descriptors and memory.
pub(crate) const MAX_STREAMS: usize = 64;

/// One event as the pages hear it.
#[derive(Clone, Debug)]
struct Change {
    id: EventId,
    data: String,
}

/// The follower's side the handlers see.
pub(crate) struct Live {
    sender: broadcast::Sender<Change>,
    /// The newest event the follower has read.
    head: Arc<AtomicU64>,
    /// A place for each open stream.
    streams: Arc<Semaphore>,
}

impl Live {
    /// Starts the follower from the newest event now. The look runs on a
    /// blocking thread, as every store call of the server does: the
    /// PostgreSQL client blocks on a runtime of its own, which it may not
    /// start inside this one.
    pub(crate) async fn start(global: Arc<Global>) -> Live {
        let (sender, _) = broadcast::channel(BACKLOG);
        let first = Arc::clone(&global);
        let start = tokio::task::spawn_blocking(move || look(&first, None))
            .await
            .ok()
            .flatten()
            .map_or(0, |out| out.next_event_id);
        let head = Arc::new(AtomicU64::new(start));
        let follower = Follower {
            global,
            sender: sender.clone(),
            head: Arc::clone(&head),
        };
        let started = std::thread::Builder::new()
            .name("board-follower".into())
            .spawn(move || follower.run());
        if let Err(error) = started {
            inbox_host_native::hosted::log(&format!(
                "warning: cannot start the event follower ({error}); pages will not update live"
            ));
        }
        Live {
            sender,
            head,
            streams: Arc::new(Semaphore::new(MAX_STREAMS)),
        }
    }

    fn head(&self) -> EventId {
        self.head.load(Ordering::Acquire)
    }
}

/// The one loop that follows the event stream.
struct Follower {
    global: Arc<Global>,
    sender: broadcast::Sender<Change>,
    head: Arc<AtomicU64>,
}

impl Follower {
    fn run(self) {
        let mut cursor = self.head.load(Ordering::Acquire);
        let mut failing = false;
        loop {
            match wait(&self.global, cursor) {
                Ok(out) => {
                    for event in &out.events {
                        // No page listening is not an error.
                        let _ = self.sender.send(change(event));
                    }
                    cursor = out.next_event_id.max(cursor);
                    self.head.store(cursor, Ordering::Release);
                    failing = false;
                }
                Err(response) => {
                    // Said once per outage, not once a second.
                    if !std::mem::replace(&mut failing, true) {
                        inbox_host_native::hosted::log(&format!(
                            "inbox serve: following events failed, retrying every second: {}",
                            response.to_json()
                        ));
                    }
                    std::thread::sleep(RETRY);
                }
            }
        }
    }
}

/// A `watch` over every thread after `after`, waiting up to `seconds`.
fn watch_call(after: Option<EventId>, seconds: u64) -> inbox_engine::Call {
    Request::Watch(WatchRequest {
        agent: None,
        status: Vec::new(),
        kinds: Vec::new(),
        after_event: after,
        timeout_seconds: Some(seconds),
        limit: Some(PAGE),
    })
    .into()
}

/// Blocks until events after `after` exist (or the wait times out).
fn wait(global: &Global, after: EventId) -> Result<WatchOutput, Box<Response>> {
    let call = watch_call(Some(after), FOLLOW_SECONDS);
    match inbox_host_native::run::execute(global, call, None) {
        Some(Response::Success(Output::Watch(out))) => Ok(out),
        Some(other) => Err(Box::new(other)),
        None => Err(Box::new(Response::failure(
            Some("watch".into()),
            inbox_engine::EngineError::Internal {
                message: "the wait stopped".into(),
            },
        ))),
    }
}

/// The events after `after` now (or, without it, the newest id), without
/// waiting.
fn look(global: &Global, after: Option<EventId>) -> Option<WatchOutput> {
    match inbox_host_native::run::execute(global, watch_call(after, 0), None) {
        Some(Response::Success(Output::Watch(out))) => Some(out),
        _ => None,
    }
}

/// What a page hears of an event: which thread, run and task, what
/// happened and the status it left; the page fetches the rest.
fn change(event: &Event) -> Change {
    let data = serde_json::json!({
        "event_id": event.event_id,
        "thread_id": event.thread_id,
        "run_id": event.run_id,
        "task_id": event.task_id,
        "event_type": event.event_type,
        "status": event.status,
    });
    Change {
        id: event.event_id,
        data: data.to_string(),
    }
}

/// The live routes.
pub(crate) fn routes() -> Router<Arc<Board>> {
    Router::new().route("/api/events", get(events))
}

/// `GET /api/events`: the event stream for one page, if a place is free.
async fn events(State(board): State<Arc<Board>>, headers: HeaderMap) -> HttpResponse {
    let Ok(place) = Arc::clone(&board.live.streams).try_acquire_owned() else {
        return BoardError::TooManyStreams { limit: MAX_STREAMS }.answer(None);
    };
    // The place goes with the stream, and comes back when it is dropped.
    let stream = stream_for(&board, &headers).await.map(move |event| {
        let _held = &place;
        event
    });
    Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
        .into_response()
}

/// The events one page hears: what it missed, then each as it happens.
async fn stream_for(
    board: &Arc<Board>,
    headers: &HeaderMap,
) -> impl Stream<Item = Result<SseEvent, Infallible>> + use<> {
    // Subscribe before reading the head: an event between the two is
    // then heard (and skipped if already sent), never lost.
    let receiver = board.live.sender.subscribe();
    let head = board.live.head();
    let last = headers
        .get("last-event-id")
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.trim().parse::<EventId>().ok());
    let (first, sent) = match last {
        None => (vec![marker("hello", head)], head),
        Some(last) if last < head => catch_up(board, last, head).await,
        Some(last) => (Vec::new(), last),
    };
    let following = stream::unfold((receiver, sent), |(mut receiver, sent)| async move {
        loop {
            match receiver.recv().await {
                Ok(change) if change.id > sent => {
                    let event = SseEvent::default()
                        .id(change.id.to_string())
                        .data(change.data);
                    return Some((Ok(event), (receiver, change.id)));
                }
                Ok(_) => {}
                // Fell behind the backlog: reload everything, from here.
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    let event = Ok(marker("resync", sent));
                    return Some((event, (receiver, sent)));
                }
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    });
    let first = stream::iter(first.into_iter().map(Ok));
    first.chain(following)
}

/// What a page that saw `last` missed, up to `head`: each event, or, when
/// more happened than one look returns, `resync`. Returns the events and
/// the newest id they cover.
async fn catch_up(board: &Arc<Board>, last: EventId, head: EventId) -> (Vec<SseEvent>, EventId) {
    let global = Arc::clone(&board.global);
    let looked = tokio::task::spawn_blocking(move || look(&global, Some(last))).await;
    match looked {
        Ok(Some(out)) if out.events.len() < PAGE as usize => {
            let sent = out.next_event_id.max(last);
            let events = out
                .events
                .iter()
                .map(change)
                .map(|change| {
                    SseEvent::default()
                        .id(change.id.to_string())
                        .data(change.data)
                })
                .collect();
            (events, sent)
        }
        _ => (vec![marker("resync", head)], head),
    }
}

/// An event that carries no change: `hello` (the stream's start, and the
/// id to resume from) or `resync` (reload everything).
fn marker(name: &str, id: EventId) -> SseEvent {
    SseEvent::default()
        .event(name)
        .id(id.to_string())
        .data(serde_json::json!({ "event_id": id }).to_string())
}
