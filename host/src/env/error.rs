//! Errors of the host client, each saying what failed, for which environment, and what a
//! person can do about it.

use pincer_shared::WireError;
use pincer_shared::handshake::HandshakeError;
use pincer_shared::identity::Fingerprint;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Why a call on an environment failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// Nothing answered at the address.
    #[error("no agent at {addr} (env '{env}'): is `pincer-agent` running there? ({reason})")]
    Unreachable {
        /// Environment name.
        env: String,
        /// Address dialled.
        addr: SocketAddr,
        /// What the transport said.
        reason: String,
    },
    /// The agent is running but turned the connection away for load until the deadline:
    /// connections that never authenticate keep it busy, or it serves as many hosts as it
    /// may.
    #[error(
        "env '{env}': the agent at {addr} is running but busy ({reason}); it stayed busy until the connect deadline: its log names the addresses keeping it busy"
    )]
    Busy {
        /// Environment name.
        env: String,
        /// Address dialled.
        addr: SocketAddr,
        /// What the agent said.
        reason: String,
    },
    /// A guest that dials in did not arrive in time.
    #[error(
        "no guest '{env}' dialled in to {listen} within {waited:?}: start it with `pincer-agent --connect THIS_HOST:{port} --name {env} --token-file {token} --host-fingerprint {host_fingerprint}` (with a copy of {token}), or check that it runs and reaches this machine over UDP",
        port = .listen.port(),
        token = .token_file.display()
    )]
    NotDialledIn {
        /// Environment name.
        env: String,
        /// Where this host listened.
        listen: SocketAddr,
        /// How long it waited.
        waited: Duration,
        /// The token file the guest needs a copy of.
        token_file: PathBuf,
        /// The certificate this host presents, for the guest to pin (boxed: it would make
        /// every `ClientError` larger).
        host_fingerprint: Box<Fingerprint>,
    },
    /// This host could not listen for a guest that dials in.
    #[error(
        "env '{env}': cannot listen on {addr} for its guest to dial in ({reason}); is `pincer env listen` or another pincer command already listening there? Stop it, or give the guest another port"
    )]
    Listen {
        /// Environment name.
        env: String,
        /// The address.
        addr: SocketAddr,
        /// What failed.
        reason: String,
    },
    /// The guest presented another certificate than the pinned one.
    #[error(
        "certificate fingerprint mismatch for env '{env}': expected {expected}, got {got}; if the guest was reinstalled, update the envs file (`pincer env add {env} ... --fingerprint {got}`)"
    )]
    FingerprintMismatch {
        /// Environment name.
        env: String,
        /// Pinned fingerprint.
        expected: Fingerprint,
        /// Presented fingerprint.
        got: Fingerprint,
    },
    /// The handshake failed (token or version).
    #[error("env '{env}': {source}")]
    Handshake {
        /// Environment name.
        env: String,
        /// What went wrong.
        #[source]
        source: HandshakeError,
    },
    /// The guest answered with an error.
    #[error("env '{env}': {source}")]
    Guest {
        /// Environment name.
        env: String,
        /// The guest's error.
        #[source]
        source: WireError,
    },
    /// The call did not finish before its deadline.
    #[error("env '{env}': {what} timed out after {after:?}")]
    Timeout {
        /// Environment name.
        env: String,
        /// The request.
        what: &'static str,
        /// The deadline.
        after: Duration,
    },
    /// The connection broke during a call that is not safe to repeat.
    #[error(
        "env '{env}': connection lost during {what}: {reason}; the request may or may not have taken effect"
    )]
    ConnectionLost {
        /// Environment name.
        env: String,
        /// The request.
        what: &'static str,
        /// What the transport said.
        reason: String,
    },
    /// The guest sent something that does not fit the protocol.
    #[error("env '{env}': protocol error: {message}")]
    Protocol {
        /// Environment name.
        env: String,
        /// What was wrong.
        message: String,
    },
    /// A local problem (bad address, endpoint setup, token file).
    #[error("env '{env}': {message}")]
    Local {
        /// Environment name.
        env: String,
        /// What was wrong.
        message: String,
    },
}

impl ClientError {
    /// The guest's typed error, if this is one.
    pub fn wire(&self) -> Option<&WireError> {
        match self {
            Self::Guest { source, .. } => Some(source),
            _ => None,
        }
    }

    /// Whether the environment itself (not the request) is at fault: unreachable, lost,
    /// timed out. The runner scores these as environment errors, never as agent failures.
    pub fn is_environment_failure(&self) -> bool {
        matches!(
            self,
            Self::Unreachable { .. }
                | Self::Busy { .. }
                | Self::NotDialledIn { .. }
                | Self::Listen { .. }
                | Self::ConnectionLost { .. }
                | Self::Timeout { .. }
                | Self::Handshake { .. }
                | Self::FingerprintMismatch { .. }
                | Self::Protocol { .. }
                | Self::Local { .. }
        ) || matches!(
            self.wire(),
            Some(
                WireError::Display { .. }
                    | WireError::Accessibility { .. }
                    | WireError::Internal { .. }
            )
        )
    }
}
