//! Input-event streams, for recording what a person does: the platform's
//! [`InputLog`](crate::platform::InputLog) is drained into one shared buffer
//! ([`Fanout`]), each event stamped on the guest's clock and numbered, so every stream gets
//! every event from the moment it started. A stream's producer looks every
//! [`POLL`] and hands what came to the stream's writer ([`Events`]) as one batch, after an
//! empty first batch that says it listens; a host that stops reading is cut off after
//! [`STALL`], as video streams are.

use crate::platform::InputLog;
use crate::reply::reply;
use crate::subsystem::Sub;
use pincer_shared::limits::{MAX_INPUT_BATCH, MAX_RESPONSE_HEADER};
use pincer_shared::observe::{InputEvent, InputRequest};
use pincer_shared::transport::stream::{finish, write_header};
use pincer_shared::transport::{SendHalf, TransportError};
use pincer_shared::{Response, WireError};
use std::collections::VecDeque;
use std::fmt;
use std::time::{Duration, Instant};
use tokio::sync::{OwnedSemaphorePermit, mpsc};

/// How often a stream looks for new events: the precision of their timestamps.
const POLL: Duration = Duration::from_millis(10);

/// Longest one batch may wait to be taken by the host before the stream is ended.
const STALL: Duration = Duration::from_secs(10);

/// Events kept for streams that have not taken them yet; older ones are dropped (a stream
/// that falls this far behind has stalled anyway).
const KEPT: usize = 4 * MAX_INPUT_BATCH;

/// The platform's input log and the events read from it, numbered, shared by every stream.
#[derive(Debug)]
pub(crate) struct Fanout<L> {
    log: L,
    kept: VecDeque<(u64, InputEvent)>,
    /// The number the next event gets.
    next: u64,
}

impl<L: InputLog> Fanout<L> {
    pub(crate) fn new(log: L) -> Self {
        Self {
            log,
            kept: VecDeque::new(),
            next: 0,
        }
    }

    /// Reads what the platform has, stamping each event with the guest's clock.
    fn drain(&mut self, started: Instant) -> Result<(), WireError> {
        let kinds = self.log.drain()?;
        let guest_us = started.elapsed().as_micros() as u64;
        for kind in kinds {
            self.kept
                .push_back((self.next, InputEvent { guest_us, kind }));
            self.next += 1;
        }
        while self.kept.len() > KEPT {
            self.kept.pop_front();
        }
        Ok(())
    }

    /// The events numbered `from` on (at most a batch), and the number to ask from next.
    pub(crate) fn since(
        &mut self,
        from: u64,
        started: Instant,
    ) -> Result<(Vec<InputEvent>, u64), WireError> {
        self.drain(started)?;
        let batch: Vec<InputEvent> = self
            .kept
            .iter()
            .filter(|(n, _)| *n >= from)
            .take(MAX_INPUT_BATCH)
            .map(|(_, e)| e.clone())
            .collect();
        let next = self
            .kept
            .iter()
            .filter(|(n, _)| *n >= from)
            .nth(batch.len())
            .map_or(self.next, |(n, _)| *n);
        Ok((batch, next))
    }

    /// Starts watching (the first drain does) and returns the number of the next event:
    /// a stream reports what happens from now on.
    pub(crate) fn now(&mut self, started: Instant) -> Result<u64, WireError> {
        self.drain(started)?;
        Ok(self.next)
    }
}

/// One batch, or why the stream stopped.
type Item = Result<Vec<InputEvent>, WireError>;

/// The batches of one input stream, as they come; the reply to an input request.
pub struct Events {
    rx: mpsc::Receiver<Item>,
}

impl fmt::Debug for Events {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Events").finish_non_exhaustive()
    }
}

impl Events {
    /// Starts reporting what `req` (validated) asks for from `fanout`; `slot` is this
    /// stream's place among the guest's input streams, held until the producer ends.
    pub(crate) fn start<L: InputLog>(
        req: InputRequest,
        fanout: Sub<Fanout<L>>,
        started: Instant,
        slot: OwnedSemaphorePermit,
    ) -> Self {
        let (tx, rx) = mpsc::channel(1);
        tokio::spawn(async move {
            let _slot = slot;
            produce(req, fanout, started, tx).await;
        });
        Self { rx }
    }

    /// The next batch or error; `None` once the producer ended.
    #[cfg(test)]
    pub(crate) async fn next(&mut self) -> Option<Item> {
        self.rx.recv().await
    }

    /// Writes every batch to `send` as it comes, and ends the stream when the producer
    /// does (with the error as the last reply, if it failed). A batch the host does not
    /// take within [`STALL`] ends the stream.
    pub(crate) async fn send(mut self, send: &mut SendHalf) -> Result<(), TransportError> {
        while let Some(item) = self.rx.recv().await {
            let batch = match item {
                Ok(b) => b,
                Err(e) => return reply(send, Response::Error(e), None).await,
            };
            let header = Response::InputEvents(batch);
            tokio::time::timeout(STALL, write_header(send, &header, 0, MAX_RESPONSE_HEADER))
                .await
                .map_err(|_| {
                    TransportError::Write(format!(
                        "the host took no input events for {} s",
                        STALL.as_secs()
                    ))
                })??;
        }
        finish(send).await
    }
}

/// Looks for events every [`POLL`] and sends each non-empty batch into `tx`, until the
/// request's time is up, the writer is gone or the log fails.
async fn produce<L: InputLog>(
    req: InputRequest,
    fanout: Sub<Fanout<L>>,
    started: Instant,
    tx: mpsc::Sender<Item>,
) {
    let end = tokio::time::Instant::now() + Duration::from_millis(req.duration_ms);
    // The first batch is empty: it tells the host the guest listens (or why it cannot).
    let mut from = match fanout.run(move |f| f.now(started)).await {
        Ok(n) => n,
        Err(e) => {
            let _ = tx.send(Err(e)).await;
            return;
        }
    };
    if tx.send(Ok(Vec::new())).await.is_err() {
        return;
    }
    let mut tick = tokio::time::interval(POLL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    while tokio::time::timeout_at(end, tick.tick()).await.is_ok() {
        let item = fanout.run(move |f| f.since(from, started)).await;
        let item = match item {
            Ok((batch, _)) if batch.is_empty() => continue,
            Ok((batch, next)) => {
                from = next;
                Ok(batch)
            }
            Err(e) => Err(e),
        };
        let failed = item.is_err();
        match tokio::time::timeout_at(end, tx.send(item)).await {
            Ok(Ok(())) if !failed => {}
            _ => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pincer_shared::observe::InputKind;

    /// A log that hands out what a test queued.
    #[derive(Debug, Default)]
    struct Queued(Vec<InputKind>);

    impl InputLog for Queued {
        fn drain(&mut self) -> Result<Vec<InputKind>, WireError> {
            Ok(std::mem::take(&mut self.0))
        }
    }

    fn press(button: u8) -> InputKind {
        InputKind::Press { button, x: 1, y: 2 }
    }

    #[test]
    fn every_reader_gets_every_event_from_when_it_started() {
        let started = Instant::now();
        let mut f = Fanout::new(Queued(vec![press(1)]));
        // What happened before a stream started is not its.
        let a = f.now(started).unwrap();
        f.log.0.push(press(2));
        let (got, a_next) = f.since(a, started).unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].kind, press(2));
        // A second reader that started at the same point reads the same event.
        let (again, _) = f.since(a, started).unwrap();
        assert_eq!(again, got);
        f.log.0.extend([press(3), press(4)]);
        let (more, _) = f.since(a_next, started).unwrap();
        assert_eq!(
            more.iter().map(|e| &e.kind).collect::<Vec<_>>(),
            [&press(3), &press(4)]
        );
    }

    #[test]
    fn a_flood_is_cut_into_batches_and_kept_bounded() {
        let started = Instant::now();
        let mut f = Fanout::new(Queued::default());
        let from = f.now(started).unwrap();
        f.log.0 = (0..KEPT + 10).map(|_| press(1)).collect();
        let (batch, next) = f.since(from, started).unwrap();
        assert_eq!(batch.len(), MAX_INPUT_BATCH);
        assert!(f.kept.len() <= KEPT);
        // The oldest were dropped: the reader goes on from the oldest kept.
        assert!(next > from + MAX_INPUT_BATCH as u64);
        let (rest, _) = f.since(next, started).unwrap();
        assert_eq!(rest.len(), MAX_INPUT_BATCH);
    }
}
