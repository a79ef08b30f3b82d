//! Blocking work off the async threads: [`Sub`] runs a blocking capability (an X11 client, a
//! device tool) one request at a time, and [`in_thread`] runs file-system work. Either way a
//! panic becomes an `Internal` error for its request, never a dead guest.

use pincer_shared::WireError;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// How long a request waits for a subsystem that is busy with another request. X11 calls
/// have no timeout of their own, so a hung X server would otherwise pile up a blocked
/// thread per request.
const SUBSYSTEM_WAIT: Duration = Duration::from_secs(30);

/// A blocking subsystem: used by one request at a time, on a blocking thread.
#[derive(Debug)]
pub(crate) struct Sub<S> {
    state: Arc<Mutex<S>>,
    /// Whose turn it is. The blocking work holds the turn until it returns, so a caller that
    /// stops waiting neither lets a second thread block behind a hung call nor loses the
    /// work.
    gate: Arc<tokio::sync::Mutex<()>>,
    name: &'static str,
}

impl<S> Clone for Sub<S> {
    /// The same subsystem, for another task: the turns are shared.
    fn clone(&self) -> Self {
        Self {
            state: self.state.clone(),
            gate: self.gate.clone(),
            name: self.name,
        }
    }
}

impl<S: Send + 'static> Sub<S> {
    pub(crate) fn new(name: &'static str, state: S) -> Self {
        Self {
            state: Arc::new(Mutex::new(state)),
            gate: Arc::new(tokio::sync::Mutex::new(())),
            name,
        }
    }

    /// Runs `f` on a blocking thread with the subsystem to itself. A panic in a subsystem
    /// becomes an `Internal` error for this request; the lock is recovered so later
    /// requests work. Dropping the returned future does not stop `f` once it started.
    pub(crate) async fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut S) -> Result<T, WireError> + Send + 'static,
    ) -> Result<T, WireError> {
        let turn = tokio::time::timeout(SUBSYSTEM_WAIT, self.gate.clone().lock_owned())
            .await
            .map_err(|_| WireError::Busy {
                message: format!(
                    "the {} has been busy for {} s (is the display server hung?)",
                    self.name,
                    SUBSYSTEM_WAIT.as_secs()
                ),
            })?;
        let state = self.state.clone();
        tokio::task::spawn_blocking(move || {
            let _turn = turn;
            f(&mut state.lock().unwrap_or_else(PoisonError::into_inner))
        })
        .await
        .map_err(|e| WireError::Internal {
            message: format!("{} worker failed: {e}", self.name),
        })?
    }
}

/// Runs blocking file-system work off the async threads.
pub(crate) async fn in_thread<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, WireError> + Send + 'static,
) -> Result<T, WireError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| WireError::Internal {
            message: format!("worker thread failed: {e}"),
        })?
}
