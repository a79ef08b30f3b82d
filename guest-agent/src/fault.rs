//! Why an operation on a connection the agent keeps (to the X server, to mutter's
//! remote-desktop session) failed: the subsystem holding it either drops the connection
//! and makes a new one, or reports the refusal and keeps it.

use pincer_shared::WireError;

/// Why an operation on a kept connection failed.
#[derive(Debug)]
pub(crate) enum Fault {
    /// The connection (or what it reaches) is gone: drop it; a new one may work.
    Gone(String),
    /// The connection is fine, but this request cannot be served.
    Refused(WireError),
}

impl From<WireError> for Fault {
    fn from(e: WireError) -> Self {
        Self::Refused(e)
    }
}
