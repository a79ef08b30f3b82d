//! The contract every pincer side speaks: typed requests in four privilege classes, the
//! replies, the common UI-tree model, a sans-IO codec and handshake, and the QUIC transport
//! that carries them.
//!
//! The core ([`codec`], [`handshake`], the message types) does no I/O and is tested without
//! sockets. [`transport`] is the thin async layer over quinn that both the guest agent and
//! the host use.

pub mod action;
pub mod android;
pub mod codec;
pub mod gnome_extension;
pub mod handshake;
pub mod identity;
pub mod key;
pub mod limits;
pub mod message;
pub mod observe;
pub mod pixels;
pub mod platform;
pub mod probe;
pub mod service;
pub mod setup;
pub mod tool;
pub mod transport;
pub mod tree;
pub mod version;

pub use action::Action;
pub use message::{Request, RequestClass, Response, WireError};
pub use platform::Platform;
pub use version::{ALPN, ProtocolVersion};
