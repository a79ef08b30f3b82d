//! The handshake, without I/O. The host opens the first stream and sends a [`ClientHello`]:
//! the protocol versions it speaks, its name and a proof that it holds the guest's token.
//! The guest answers with a [`ServerHello`]: accepted with its description, or a typed
//! rejection. Until it accepts, the guest answers every other stream `Unauthenticated`.
//!
//! These messages are frozen across protocol versions (plain integers, strings and lists),
//! so any two builds can at least tell each other why they cannot talk.

use crate::codec::{self, CodecError};
use crate::identity::Token;
use crate::observe::ScreenInfo;
use crate::platform::{Platform, UnknownPlatform};
use crate::version::ProtocolVersion;
use serde::{Deserialize, Serialize};

/// The host's opening message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientHello {
    /// Protocol version numbers the host speaks.
    pub versions: Vec<u16>,
    /// The host's name, for the guest's log.
    pub host: String,
    /// HMAC-SHA256 of the session's exported keying material under the token.
    pub proof: Vec<u8>,
}

/// What a guest tells the host about itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GuestInfo {
    /// The version both sides will speak.
    pub version: u16,
    /// The guest's name.
    pub name: String,
    /// The platform it runs on. On the wire its name, as when this was a string, so hosts
    /// of any build can read it and name a platform they do not know.
    #[serde(with = "crate::platform::as_name")]
    pub platform: Platform,
    /// OS description ("Debian GNU/Linux 12 (bookworm)").
    pub os: String,
    /// The guest agent's own version.
    pub agent_version: String,
    /// Screen geometry at connect time; the last geometry the guest read if its display was
    /// too busy to answer at once (all zeros if it never could).
    pub screen: ScreenInfo,
    /// Capabilities (see [`capability`](crate::message::capability)).
    pub capabilities: Vec<String>,
    /// Whether setup and command probes are disabled.
    pub read_only: bool,
    /// Process id of the agent (for resource monitoring through probes).
    pub pid: u32,
}

impl GuestInfo {
    /// Whether the guest lists this capability.
    pub fn has(&self, capability: &str) -> bool {
        self.capabilities.iter().any(|c| c == capability)
    }
}

/// The guest's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ServerHello {
    /// The host may send requests.
    Accepted(GuestInfo),
    /// The guest will not talk to this host.
    Rejected(Rejection),
}

/// Why a guest refused a host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Rejection {
    /// No protocol version in common.
    VersionMismatch {
        /// The versions the guest speaks.
        guest_supports: Vec<u16>,
    },
    /// The token proof did not verify.
    AuthFailed,
}

/// Why a handshake failed, as the host sees it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HandshakeError {
    /// No version in common.
    #[error(
        "protocol version mismatch: this host speaks {ours:?}, the guest speaks {theirs:?}; upgrade the older side"
    )]
    VersionMismatch {
        /// Versions this side speaks.
        ours: Vec<u16>,
        /// Versions the peer speaks.
        theirs: Vec<u16>,
    },
    /// The guest refused the token.
    #[error(
        "authentication failed: the guest refused the token; check that host and guest use the same token file"
    )]
    AuthFailed,
    /// The guest accepted a version this host did not offer.
    #[error("the guest chose protocol version {0}, which this host did not offer")]
    BadVersion(u16),
    /// The guest runs on a platform this build does not know (a newer guest).
    #[error(
        "the guest says it runs on a platform this host does not know: {0}; upgrade pincer on this host"
    )]
    UnknownPlatform(UnknownPlatform),
    /// The answer is not a [`ServerHello`].
    #[error("bad handshake reply: {0}")]
    Malformed(CodecError),
}

/// Builds the host's hello for a session whose exported keying material is `exporter`.
pub fn client_hello(token: &Token, host: &str, exporter: &[u8]) -> ClientHello {
    ClientHello {
        versions: ProtocolVersion::ALL.iter().map(|v| v.number()).collect(),
        host: host.to_owned(),
        proof: token.proof(exporter),
    }
}

/// The guest's decision on a hello: the reply to send, and the version to speak if the
/// host was accepted. `info.version` is filled in here.
pub fn accept(
    hello: &ClientHello,
    token: &Token,
    exporter: &[u8],
    mut info: GuestInfo,
) -> (ServerHello, Option<ProtocolVersion>) {
    // Check the proof first so an unauthenticated peer learns nothing about versions.
    if !token.verify(exporter, &hello.proof) {
        return (ServerHello::Rejected(Rejection::AuthFailed), None);
    }
    let Some(version) = ProtocolVersion::negotiate(&hello.versions) else {
        return (
            ServerHello::Rejected(Rejection::VersionMismatch {
                guest_supports: ProtocolVersion::ALL.iter().map(|v| v.number()).collect(),
            }),
            None,
        );
    };
    info.version = version.number();
    (ServerHello::Accepted(info), Some(version))
}

/// The host's reading of the guest's answer as it arrived: a header without its length
/// prefix.
pub fn read_reply(header: &[u8]) -> Result<(GuestInfo, ProtocolVersion), HandshakeError> {
    match codec::decode::<ServerHello>(header, 0) {
        Ok(frame) => finish(frame.msg),
        Err(e) => Err(unknown_platform(header).unwrap_or(HandshakeError::Malformed(e))),
    }
}

/// Whether `header` is an accepted answer that failed to decode only because its platform
/// is one this build does not know. postcard drops the message of the platform's decoding
/// error, so the answer's first fields are read again with the platform as a plain string.
fn unknown_platform(header: &[u8]) -> Option<HandshakeError> {
    /// The start of [`ServerHello::Accepted`]: the fields of [`GuestInfo`] up to its
    /// platform, in their order (the golden-bytes tests pin it).
    #[derive(Deserialize)]
    enum AcceptedStart {
        Accepted {
            _version: u16,
            _name: String,
            platform: String,
        },
    }
    let (_body_len, AcceptedStart::Accepted { platform, .. }) =
        postcard::take_from_bytes::<(u64, AcceptedStart)>(header)
            .ok()?
            .0;
    let unknown = platform.parse::<Platform>().err()?;
    Some(HandshakeError::UnknownPlatform(unknown))
}

/// The host's reading of the guest's answer.
pub fn finish(reply: ServerHello) -> Result<(GuestInfo, ProtocolVersion), HandshakeError> {
    match reply {
        ServerHello::Accepted(info) => {
            let v = ProtocolVersion::from_number(info.version)
                .ok_or(HandshakeError::BadVersion(info.version))?;
            Ok((info, v))
        }
        ServerHello::Rejected(Rejection::AuthFailed) => Err(HandshakeError::AuthFailed),
        ServerHello::Rejected(Rejection::VersionMismatch { guest_supports }) => {
            Err(HandshakeError::VersionMismatch {
                ours: ProtocolVersion::ALL.iter().map(|v| v.number()).collect(),
                theirs: guest_supports,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info() -> GuestInfo {
        GuestInfo {
            version: 0,
            name: "desk".into(),
            platform: Platform::Linux,
            os: "test".into(),
            agent_version: "0".into(),
            screen: ScreenInfo::default(),
            capabilities: vec!["input".into()],
            read_only: false,
            pid: 1,
        }
    }

    /// Runs both sides of the handshake through the codec, as bytes.
    fn run(
        host_token: &Token,
        guest_token: &Token,
        host_ex: &[u8],
        guest_ex: &[u8],
        versions: Option<Vec<u16>>,
    ) -> Result<GuestInfo, HandshakeError> {
        let mut hello = client_hello(host_token, "host", host_ex);
        if let Some(v) = versions {
            hello.versions = v;
        }
        let wire = codec::encode(&hello, 0, crate::limits::MAX_HELLO).unwrap();
        let got: ClientHello = codec::decode(&wire[4..], 0).unwrap().msg;
        let (reply, version) = accept(&got, guest_token, guest_ex, info());
        let wire = codec::encode(&reply, 0, crate::limits::MAX_HELLO).unwrap();
        let out = read_reply(&wire[4..]);
        assert_eq!(out.is_ok(), version.is_some());
        out.map(|(i, _)| i)
    }

    #[test]
    fn matching_token_and_session_is_accepted() {
        let t = Token::generate();
        let info = run(&t, &t, b"ex", b"ex", None).unwrap();
        assert_eq!(info.version, ProtocolVersion::CURRENT.number());
        assert_eq!(info.name, "desk");
    }

    #[test]
    fn wrong_token_is_rejected() {
        let err = run(&Token::generate(), &Token::generate(), b"ex", b"ex", None).unwrap_err();
        assert_eq!(err, HandshakeError::AuthFailed);
    }

    #[test]
    fn proof_from_another_session_is_rejected() {
        let t = Token::generate();
        assert_eq!(
            run(&t, &t, b"one", b"two", None).unwrap_err(),
            HandshakeError::AuthFailed
        );
    }

    #[test]
    fn version_mismatch_is_typed() {
        let t = Token::generate();
        let err = run(&t, &t, b"ex", b"ex", Some(vec![99])).unwrap_err();
        assert!(
            matches!(err, HandshakeError::VersionMismatch { ref theirs, .. }
                if *theirs == ProtocolVersion::ALL.iter().map(|v| v.number()).collect::<Vec<_>>()),
            "{err:?}"
        );
    }

    /// `GuestInfo` and `ServerHello` as they were while the platform was a `String`: what
    /// guests and hosts of earlier builds write and read.
    mod before {
        use crate::observe::ScreenInfo;
        use serde::{Deserialize, Serialize};

        #[derive(Serialize, Deserialize)]
        pub(super) struct GuestInfo {
            pub(super) version: u16,
            pub(super) name: String,
            pub(super) platform: String,
            pub(super) os: String,
            pub(super) agent_version: String,
            pub(super) screen: ScreenInfo,
            pub(super) capabilities: Vec<String>,
            pub(super) read_only: bool,
            pub(super) pid: u32,
        }

        #[derive(Serialize, Deserialize)]
        pub(super) enum ServerHello {
            Accepted(GuestInfo),
        }
    }

    fn before(platform: &str) -> before::ServerHello {
        let i = info();
        before::ServerHello::Accepted(before::GuestInfo {
            version: 3,
            name: i.name,
            platform: platform.into(),
            os: i.os,
            agent_version: i.agent_version,
            screen: i.screen,
            capabilities: i.capabilities,
            read_only: i.read_only,
            pid: i.pid,
        })
    }

    #[test]
    fn the_platform_is_the_same_string_on_the_wire() {
        for p in Platform::ALL {
            let typed = ServerHello::Accepted(GuestInfo {
                version: 3,
                platform: *p,
                ..info()
            });
            let old = postcard::to_stdvec(&before(p.as_str())).unwrap();
            assert_eq!(postcard::to_stdvec(&typed).unwrap(), old, "{p}");
            let wire = codec::encode(&before(p.as_str()), 0, crate::limits::MAX_HELLO).unwrap();
            let (got, _) = read_reply(&wire[4..]).unwrap();
            assert_eq!(got.platform, *p);
        }
    }

    #[test]
    fn a_platform_this_host_does_not_know_is_named() {
        let wire = codec::encode(&before("windows"), 0, crate::limits::MAX_HELLO).unwrap();
        let err = read_reply(&wire[4..]).unwrap_err();
        assert_eq!(
            err,
            HandshakeError::UnknownPlatform(UnknownPlatform {
                name: "windows".into()
            })
        );
        let text = err.to_string();
        assert!(
            text.contains("'windows'")
                && text.contains("linux, android")
                && text.contains("upgrade"),
            "{text}"
        );
        // Garbage stays garbage, and a rejection is still read as one.
        assert!(matches!(
            read_reply(&[0, 0, 9, 9]),
            Err(HandshakeError::Malformed(_))
        ));
        let wire = codec::encode(
            &ServerHello::Rejected(Rejection::AuthFailed),
            0,
            crate::limits::MAX_HELLO,
        )
        .unwrap();
        assert_eq!(read_reply(&wire[4..]), Err(HandshakeError::AuthFailed));
    }
}
