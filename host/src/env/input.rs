//! Input-event streams from a guest: what a person (or anything else) does on its desktop,
//! button presses and releases with the pointer's position and keys, each stamped with the
//! guest's clock (the clock of video frames and pings), in batches as they happen.
//! Dropping the stream stops the guest's reports.

use super::{ClientError, Environment, Failure, Session, request};
use pincer_shared::codec;
use pincer_shared::limits::{MAX_INPUT_BATCH, MAX_RESPONSE_HEADER};
use pincer_shared::observe::{InputEvent, InputRequest};
use pincer_shared::transport::RecvHalf;
use pincer_shared::transport::stream::read_header;
use pincer_shared::{Request, Response};
use std::sync::Arc;
use std::time::Instant;

/// An input stream being received.
pub struct InputStream {
    env: String,
    /// Keeps the connection the stream lives on.
    _session: Arc<Session>,
    recv: RecvHalf,
}

impl std::fmt::Debug for InputStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InputStream")
            .field("env", &self.env)
            .finish_non_exhaustive()
    }
}

impl InputStream {
    /// The next batch of events, waiting as long as nothing happens; `None` once the guest
    /// ended the stream (the requested time is up).
    pub async fn next(&mut self) -> Result<Option<Vec<InputEvent>>, ClientError> {
        let header = match read_header(&mut self.recv, MAX_RESPONSE_HEADER).await {
            Ok(Some(h)) => h,
            Ok(None) => return Ok(None),
            Err(e) => return Err(lost(&self.env, e.to_string())),
        };
        let frame =
            codec::decode_response(&header).map_err(|e| protocol(&self.env, e.to_string()))?;
        batch(&self.env, frame.msg).map(Some)
    }
}

/// The events of a reply, or the guest's error.
fn batch(env: &str, msg: Response) -> Result<Vec<InputEvent>, ClientError> {
    match msg {
        Response::InputEvents(events) if events.len() <= MAX_INPUT_BATCH => Ok(events),
        Response::InputEvents(events) => Err(protocol(
            env,
            format!(
                "a batch of {} input events exceeds the most a batch holds, {MAX_INPUT_BATCH}",
                events.len()
            ),
        )),
        Response::Error(source) => Err(ClientError::Guest {
            env: env.into(),
            source,
        }),
        other => Err(protocol(
            env,
            format!("unexpected reply to input: {other:?}"),
        )),
    }
}

impl Environment {
    /// Starts reporting the guest's input for `duration_ms`, once the guest says it listens
    /// (within the call deadline). Refusals (a guest that cannot read its input, every
    /// stream taken) come back as [`ClientError::Guest`].
    pub async fn input_events(&self, duration_ms: u64) -> Result<InputStream, ClientError> {
        let deadline = self.deadlines.call;
        let req = Request::Input(InputRequest { duration_ms });
        let run = async {
            let session = self.session(Instant::now() + deadline).await?;
            let (frame, recv) = match request(&session.link, &req, None).await {
                Ok(r) => r,
                Err(Failure::Transport(e)) => return Err(lost(&self.name, e.to_string())),
                Err(Failure::Codec(message)) => return Err(protocol(&self.name, message)),
            };
            batch(&self.name, frame.msg)?;
            Ok(InputStream {
                env: self.name.clone(),
                _session: session,
                recv,
            })
        };
        tokio::time::timeout(deadline, run)
            .await
            .unwrap_or_else(|_| {
                Err(ClientError::Timeout {
                    env: self.name.clone(),
                    what: "input",
                    after: deadline,
                })
            })
    }
}

fn lost(env: &str, reason: String) -> ClientError {
    ClientError::ConnectionLost {
        env: env.into(),
        what: "input",
        reason,
    }
}

fn protocol(env: &str, message: String) -> ClientError {
    ClientError::Protocol {
        env: env.into(),
        message,
    }
}
