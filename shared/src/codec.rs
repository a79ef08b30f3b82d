//! The frame codec, without I/O. A frame is a little-endian `u32` header length, the header
//! (postcard: the bulk-body length as a varint, then the message), then the bulk body as raw
//! bytes. Every length is checked against a limit before anything is allocated.

use crate::limits;
use crate::message::{REQUEST_KINDS, Request, Response, WireError};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// Bytes in the header-length prefix.
pub const PREFIX_LEN: usize = 4;

/// A decoded header: the message and the length of the bulk body that follows it.
#[derive(Debug, Clone, PartialEq)]
pub struct Frame<T> {
    /// The message.
    pub msg: T,
    /// Bytes of raw body after the header.
    pub body_len: u64,
}

/// Why bytes could not be turned into a frame, or a frame into bytes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CodecError {
    /// A length exceeded its limit.
    #[error("{what} of {got} bytes exceeds the limit of {limit}")]
    TooLarge {
        /// What was too large.
        what: &'static str,
        /// The limit.
        limit: u64,
        /// The length announced.
        got: u64,
    },
    /// The message kind is newer than this build.
    #[error(
        "unknown request kind {kind} (this guest knows {known}); is the host newer than the guest?"
    )]
    UnknownKind {
        /// The variant index received.
        kind: u32,
        /// How many kinds this build knows.
        known: u32,
    },
    /// The bytes are not a valid message.
    #[error("malformed frame: {0}")]
    Malformed(String),
}

impl From<CodecError> for WireError {
    fn from(e: CodecError) -> Self {
        match e {
            CodecError::TooLarge { what, limit, got } => Self::TooLarge {
                what: what.to_owned(),
                limit,
                got,
            },
            CodecError::UnknownKind { .. } => Self::Unsupported {
                what: e.to_string(),
            },
            CodecError::Malformed(reason) => Self::Malformed { reason },
        }
    }
}

/// Encodes a header with its length prefix. `body_len` announces the raw bytes the caller
/// sends after it.
pub fn encode<T: Serialize>(msg: &T, body_len: u64, limit: u32) -> Result<Vec<u8>, CodecError> {
    let mut out = vec![0u8; PREFIX_LEN];
    out = postcard::to_extend(&body_len, out).map_err(|e| CodecError::Malformed(e.to_string()))?;
    out = postcard::to_extend(msg, out).map_err(|e| CodecError::Malformed(e.to_string()))?;
    let len = out.len() - PREFIX_LEN;
    if len > limit as usize {
        return Err(CodecError::TooLarge {
            what: "header",
            limit: limit.into(),
            got: len as u64,
        });
    }
    out[..PREFIX_LEN].copy_from_slice(&(len as u32).to_le_bytes());
    Ok(out)
}

/// Reads the header length from its prefix and checks it against `limit`.
pub fn header_len(prefix: [u8; PREFIX_LEN], limit: u32) -> Result<usize, CodecError> {
    let len = u32::from_le_bytes(prefix);
    if len > limit {
        return Err(CodecError::TooLarge {
            what: "header",
            limit: limit.into(),
            got: len.into(),
        });
    }
    if len == 0 {
        return Err(CodecError::Malformed("empty header".into()));
    }
    Ok(len as usize)
}

/// Decodes a header (without its prefix) as any message type.
pub fn decode<T: DeserializeOwned>(header: &[u8], body_limit: u64) -> Result<Frame<T>, CodecError> {
    let (body_len, rest) = take_body_len(header, body_limit)?;
    let msg = take_all(rest)?;
    Ok(Frame { msg, body_len })
}

/// Decodes a request header. An unknown request kind is reported as such, so the guest can
/// answer `Unsupported` rather than `Malformed`; a body is only accepted on requests that
/// carry one.
pub fn decode_request(header: &[u8]) -> Result<Frame<Request>, CodecError> {
    let (body_len, rest) = take_body_len(header, limits::MAX_UPLOAD)?;
    let (kind, _) = postcard::take_from_bytes::<u32>(rest)
        .map_err(|e| CodecError::Malformed(format!("request kind: {e}")))?;
    if kind >= REQUEST_KINDS {
        return Err(CodecError::UnknownKind {
            kind,
            known: REQUEST_KINDS,
        });
    }
    let msg: Request = take_all(rest)?;
    if body_len > 0 && !msg.has_body() {
        return Err(CodecError::Malformed(format!(
            "{} request carries a {body_len}-byte body it does not take",
            msg.kind_name()
        )));
    }
    Ok(Frame { msg, body_len })
}

/// Decodes a response header.
pub fn decode_response(header: &[u8]) -> Result<Frame<Response>, CodecError> {
    decode(header, limits::MAX_DOWNLOAD)
}

fn take_body_len(header: &[u8], limit: u64) -> Result<(u64, &[u8]), CodecError> {
    let (body_len, rest) = postcard::take_from_bytes::<u64>(header)
        .map_err(|e| CodecError::Malformed(format!("body length: {e}")))?;
    if body_len > limit {
        return Err(CodecError::TooLarge {
            what: "body",
            limit,
            got: body_len,
        });
    }
    Ok((body_len, rest))
}

fn take_all<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, CodecError> {
    let (msg, rest) =
        postcard::take_from_bytes::<T>(bytes).map_err(|e| CodecError::Malformed(e.to_string()))?;
    if !rest.is_empty() {
        return Err(CodecError::Malformed(format!(
            "{} trailing bytes after the message",
            rest.len()
        )));
    }
    Ok(msg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::action::{Action, Gesture, MouseButton, Point, SystemKey};
    use crate::key::{Key, NamedKey};
    use crate::observe::{ImageFormat, Rect, ScreenshotRequest, TreeRequest};
    use crate::probe::Probe;
    use crate::setup::{ExecRequest, Setup};
    use proptest::prelude::*;

    fn roundtrip(req: Request, body: u64) {
        let bytes = encode(&req, body, limits::MAX_REQUEST_HEADER).unwrap();
        let n = header_len(bytes[..4].try_into().unwrap(), limits::MAX_REQUEST_HEADER).unwrap();
        assert_eq!(n, bytes.len() - 4);
        let frame = decode_request(&bytes[4..]).unwrap();
        assert_eq!(frame.msg, req);
        assert_eq!(frame.body_len, body);
    }

    #[test]
    fn requests_round_trip() {
        roundtrip(Request::Ping, 0);
        roundtrip(Request::Action(Action::click(3, 4)), 0);
        roundtrip(
            Request::Action(Action::Hotkey {
                keys: vec![Key::Named(NamedKey::Control), Key::Char('s')],
            }),
            0,
        );
        roundtrip(
            Request::Action(Action::Touch(Gesture::Swipe {
                from: Point::new(1, 2),
                to: Point::new(3, 4),
                duration_ms: 300,
            })),
            0,
        );
        roundtrip(Request::Action(Action::SystemKey(SystemKey::Back)), 0);
        roundtrip(
            Request::Screenshot(ScreenshotRequest {
                format: ImageFormat::Jpeg { quality: 80 },
                region: Some(Rect::new(1, 2, 3, 4)),
                max_size: Some((640, 480)),
            }),
            0,
        );
        roundtrip(Request::UiTree(TreeRequest::default()), 0);
        roundtrip(
            Request::Batch(vec![Probe::Processes, Probe::Stat { path: "/x".into() }]),
            0,
        );
        roundtrip(
            Request::Setup(Setup::WriteFile {
                path: "/tmp/a".into(),
                mode: 0o644,
                create_dirs: true,
                append: false,
            }),
            12,
        );
        roundtrip(
            Request::Setup(Setup::Exec(ExecRequest::new(["echo", "hi"]))),
            0,
        );
    }

    #[test]
    fn unknown_kind_is_reported_as_unknown() {
        // body length 0, then variant index 200.
        let header = [0u8, 200, 1];
        let err = decode_request(&header).unwrap_err();
        assert!(
            matches!(err, CodecError::UnknownKind { kind: 200, .. }),
            "{err:?}"
        );
        assert!(matches!(
            WireError::from(err),
            WireError::Unsupported { .. }
        ));
    }

    #[test]
    fn every_known_kind_decodes() {
        // The highest known index must decode as something other than "unknown kind",
        // which guards REQUEST_KINDS against drift when a variant is added.
        let last = Request::Setup(Setup::MakeDir { path: "/x".into() });
        let bytes = encode(&last, 0, limits::MAX_REQUEST_HEADER).unwrap();
        assert_eq!(bytes[5] as u32, REQUEST_KINDS - 1);
        assert!(decode_request(&bytes[4..]).is_ok());
    }

    #[test]
    fn limits_are_enforced() {
        assert!(matches!(
            header_len(
                (limits::MAX_REQUEST_HEADER + 1).to_le_bytes(),
                limits::MAX_REQUEST_HEADER
            ),
            Err(CodecError::TooLarge { .. })
        ));
        assert!(matches!(
            header_len([0; 4], limits::MAX_REQUEST_HEADER),
            Err(CodecError::Malformed(_))
        ));
        let big = Request::Action(Action::TypeText {
            text: "x".repeat(2 * 1024 * 1024),
        });
        assert!(matches!(
            encode(&big, 0, limits::MAX_REQUEST_HEADER),
            Err(CodecError::TooLarge { .. })
        ));
        let mut header = postcard::to_stdvec(&(limits::MAX_UPLOAD + 1)).unwrap();
        header.extend(postcard::to_stdvec(&Request::Ping).unwrap());
        assert!(matches!(
            decode_request(&header),
            Err(CodecError::TooLarge { .. })
        ));
    }

    #[test]
    fn body_only_where_expected_and_no_trailing_bytes() {
        let mut header = postcard::to_stdvec(&5u64).unwrap();
        header.extend(postcard::to_stdvec(&Request::Ping).unwrap());
        assert!(matches!(
            decode_request(&header),
            Err(CodecError::Malformed(_))
        ));
        let mut header = postcard::to_stdvec(&0u64).unwrap();
        header.extend(postcard::to_stdvec(&Request::Ping).unwrap());
        header.push(0);
        assert!(matches!(
            decode_request(&header),
            Err(CodecError::Malformed(_))
        ));
    }

    #[test]
    fn response_round_trips() {
        let resp = Response::Error(WireError::NotFound {
            path: "/nope".into(),
        });
        let bytes = encode(&resp, 0, limits::MAX_RESPONSE_HEADER).unwrap();
        assert_eq!(decode_response(&bytes[4..]).unwrap().msg, resp);
    }

    fn arb_point() -> impl Strategy<Value = Point> {
        (any::<i32>(), any::<i32>()).prop_map(|(x, y)| Point::new(x, y))
    }

    fn arb_request() -> impl Strategy<Value = Request> {
        prop_oneof![
            Just(Request::Ping),
            (proptest::option::of(arb_point()), 1u8..=3).prop_map(|(at, count)| {
                Request::Action(Action::Click {
                    at,
                    button: MouseButton::Right,
                    count,
                })
            }),
            ".*".prop_map(|text| Request::Action(Action::TypeText { text })),
            ".*".prop_map(|path| Request::Probe(Probe::Stat { path })),
            (".*", any::<u64>(), proptest::option::of(any::<u64>())).prop_map(
                |(path, offset, max_len)| Request::ReadFile {
                    path,
                    offset,
                    max_len
                }
            ),
            proptest::collection::vec(".*".prop_map(|p| Probe::ListDir { path: p }), 0..8)
                .prop_map(Request::Batch),
        ]
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = decode_request(&bytes);
            let _ = decode_response(&bytes);
            let _ = decode::<crate::handshake::ClientHello>(&bytes, 0);
            let _ = decode::<crate::handshake::ServerHello>(&bytes, 0);
            if bytes.len() >= 4 {
                let _ = header_len(bytes[..4].try_into().unwrap(), limits::MAX_REQUEST_HEADER);
            }
        }

        #[test]
        fn arbitrary_requests_round_trip(req in arb_request()) {
            let bytes = encode(&req, 0, limits::MAX_REQUEST_HEADER).unwrap();
            prop_assert_eq!(decode_request(&bytes[4..]).unwrap().msg, req);
        }

        #[test]
        fn mutated_frames_never_panic(req in arb_request(), flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..8)) {
            let mut bytes = encode(&req, 0, limits::MAX_REQUEST_HEADER).unwrap();
            for (i, b) in flips {
                let n = bytes.len();
                bytes[i % n] ^= b;
            }
            let _ = decode_request(&bytes[4..]);
        }
    }
}
