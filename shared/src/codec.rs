//! The frame codec, without I/O. A frame is a little-endian `u32` header length, the header
//! (postcard: the bulk-body length as a varint, then the message), then the bulk body as raw
//! bytes. Every length is checked against a limit before anything is allocated.
//!
//! A message from a newer peer (an enum variant this build does not know, at any depth) is
//! told apart from garbage (see [`variants`]), so guests can answer it `Unsupported`.

#[cfg(test)]
mod golden;
mod variants;

use crate::limits;
use crate::message::{Request, Response, WireError};
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
    /// The message holds a kind (an enum variant, at any depth) newer than this build.
    #[error(
        "unknown {kind} kind {index} (this build knows {known}): the peer speaks a newer protocol; upgrade the older side"
    )]
    UnknownKind {
        /// Which enum: "Request", "Probe", "Action", "Setup", ...
        kind: &'static str,
        /// The variant index received.
        index: u32,
        /// How many variants this build knows.
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

/// Decodes a request header. An unknown kind anywhere in the request (the request itself, a
/// probe in a batch, an action, a setup step) is reported as such, so the guest can answer
/// `Unsupported` rather than `Malformed`; a body is only accepted on requests that carry
/// one.
pub fn decode_request(header: &[u8]) -> Result<Frame<Request>, CodecError> {
    let (body_len, rest) = take_body_len(header, limits::MAX_UPLOAD)?;
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
    let mut de = postcard::Deserializer::from_bytes(bytes);
    let msg = variants::deserialize::<T, _>(&mut de).map_err(|(e, unknown)| match unknown {
        Some(u) => CodecError::UnknownKind {
            kind: u.kind,
            index: u.index,
            known: u.known,
        },
        None => CodecError::Malformed(e.to_string()),
    })?;
    let rest = de
        .finalize()
        .map_err(|e| CodecError::Malformed(e.to_string()))?;
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
    use crate::observe::{ImageFormat, Rect, ScreenshotRequest, TreeRequest, TreeScope};
    use crate::probe::Probe;
    use crate::setup::{ExecRequest, Setup, WindowOp};
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
            Request::Batch([Probe::Processes, Probe::Stat { path: "/x".into() }].into()),
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

    /// The header of `req` with the encoding of `part` (which must end it) replaced by
    /// `with`: how a newer peer's request or a corrupted one looks.
    fn patched(req: &Request, part: &(impl Serialize + std::fmt::Debug), with: &[u8]) -> Vec<u8> {
        let bytes = encode(req, 0, limits::MAX_REQUEST_HEADER).unwrap()[PREFIX_LEN..].to_vec();
        let tail = postcard::to_stdvec(part).unwrap();
        assert!(bytes.ends_with(&tail), "{part:?} does not end the request");
        let mut out = bytes[..bytes.len() - tail.len()].to_vec();
        out.extend_from_slice(with);
        out
    }

    /// The kind and index of the unknown variant that stops decoding `header`.
    fn unknown(header: &[u8]) -> (&'static str, u32) {
        match decode_request(header) {
            Err(CodecError::UnknownKind { kind, index, known }) => {
                assert!(index >= known, "{kind} {index} is known ({known})");
                (kind, index)
            }
            other => panic!("expected an unknown kind, got {other:?}"),
        }
    }

    #[test]
    fn unknown_kinds_are_reported_at_any_depth() {
        // The request itself: body length 0, then variant index 200.
        assert_eq!(unknown(&[0, 200, 1]), ("Request", 200));

        // A newer probe inside a batch, after a known one; 300 takes two varint bytes.
        let clip = Probe::Clipboard;
        let batch = Request::Batch([Probe::Processes, clip.clone()].into());
        assert_eq!(
            unknown(&patched(&batch, &clip, &[0xac, 0x02])),
            ("Probe", 300)
        );

        // A newer action, a newer gesture inside a known action, a newer setup step and a
        // newer window operation, each with a payload the guest cannot read.
        let action = Action::SystemKey(SystemKey::Back);
        let req = Request::Action(action.clone());
        assert_eq!(
            unknown(&patched(&req, &action, &[40, 7, 7])),
            ("Action", 40)
        );
        let tap = Gesture::Tap {
            at: Point::new(1, 2),
        };
        let req = Request::Action(Action::Touch(tap));
        assert_eq!(unknown(&patched(&req, &tap, &[9])), ("Gesture", 9));
        let step = Setup::MakeDir { path: "/x".into() };
        let req = Request::Setup(step.clone());
        assert_eq!(
            unknown(&patched(&req, &step, &[77, 1, b'x'])),
            ("Setup", 77)
        );
        let op = WindowOp::Close;
        let req = Request::Setup(Setup::Window { id: 5, op });
        assert_eq!(unknown(&patched(&req, &op, &[50])), ("WindowOp", 50));

        // What the guest answers names the kind and says what to do.
        let err = decode_request(&patched(&batch, &clip, &[60])).unwrap_err();
        match WireError::from(err) {
            WireError::Unsupported { what } => {
                assert!(
                    what.contains("Probe kind 60") && what.contains("upgrade"),
                    "{what}"
                );
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn garbage_is_malformed_not_unknown() {
        let malformed = |header: &[u8]| {
            let got = decode_request(header);
            assert!(matches!(got, Err(CodecError::Malformed(_))), "{got:?}");
        };
        // A variant index that is no valid varint at all.
        malformed(&[0, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]);
        // A batch announcing more probes than follow.
        let batch = Request::Batch([Probe::Processes].into());
        let mut bytes =
            encode(&batch, 0, limits::MAX_REQUEST_HEADER).unwrap()[PREFIX_LEN..].to_vec();
        bytes.truncate(bytes.len() - 1);
        malformed(&bytes);
        // A bool that is neither 0 nor 1, after a known step.
        let req = Request::Setup(Setup::Remove {
            path: "/x".into(),
            recursive: true,
        });
        malformed(&patched(&req, &true, &[7]));
        // A path that is not UTF-8.
        let req = Request::Probe(Probe::Stat { path: "ab".into() });
        malformed(&patched(&req, &"ab", &[2, 0xff, 0xfe]));
        // An option tag that is neither None nor Some.
        let region: Option<Rect> = None;
        let max_size: Option<(u32, u32)> = None;
        let req = Request::Screenshot(ScreenshotRequest {
            format: ImageFormat::Png,
            region,
            max_size,
        });
        malformed(&patched(&req, &(region, max_size), &[0, 5]));
        assert!(matches!(
            WireError::from(CodecError::Malformed("x".into())),
            WireError::Malformed { .. }
        ));
    }

    #[test]
    fn unknown_kinds_in_responses_are_reported_too() {
        // A newer guest's reply kind: the host can say so instead of "malformed".
        let mut header = postcard::to_stdvec(&0u64).unwrap();
        header.extend_from_slice(&[90, 1, 2]);
        assert!(matches!(
            decode_response(&header),
            Err(CodecError::UnknownKind {
                kind: "Response",
                index: 90,
                ..
            })
        ));
        // So is a newer error kind (as `Denied` is to hosts of the first release).
        let error = postcard::to_stdvec(&Response::Error(WireError::Unauthenticated)).unwrap()[0];
        let header = [0, error, 40, 1, b'x'];
        assert!(matches!(
            decode_response(&header),
            Err(CodecError::UnknownKind {
                kind: "WireError",
                index: 40,
                ..
            })
        ));
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

    fn arb_rect() -> impl Strategy<Value = Rect> {
        (any::<i32>(), any::<i32>(), any::<u32>(), any::<u32>())
            .prop_map(|(x, y, w, h)| Rect::new(x, y, w, h))
    }

    fn arb_button() -> impl Strategy<Value = MouseButton> {
        prop::sample::select(vec![
            MouseButton::Left,
            MouseButton::Middle,
            MouseButton::Right,
        ])
    }

    fn arb_key() -> impl Strategy<Value = Key> {
        prop_oneof![
            any::<char>().prop_map(Key::Char),
            any::<u8>().prop_map(|n| Key::Named(NamedKey::F(n))),
            prop::sample::select(vec![
                NamedKey::Shift,
                NamedKey::Control,
                NamedKey::Return,
                NamedKey::ScrollLock,
            ])
            .prop_map(Key::Named),
        ]
    }

    fn arb_gesture() -> impl Strategy<Value = Gesture> {
        prop_oneof![
            arb_point().prop_map(|at| Gesture::Tap { at }),
            (arb_point(), any::<u32>())
                .prop_map(|(at, duration_ms)| Gesture::LongPress { at, duration_ms }),
            (arb_point(), arb_point(), any::<u32>()).prop_map(|(from, to, duration_ms)| {
                Gesture::Swipe {
                    from,
                    to,
                    duration_ms,
                }
            }),
            (arb_point(), any::<u32>(), any::<u32>(), any::<u32>()).prop_map(|(c, s, e, d)| {
                Gesture::Pinch {
                    center: c,
                    start_distance: s,
                    end_distance: e,
                    duration_ms: d,
                }
            }),
        ]
    }

    fn arb_action() -> impl Strategy<Value = Action> {
        prop_oneof![
            arb_point().prop_map(|to| Action::MouseMove { to }),
            (proptest::option::of(arb_point()), arb_button(), any::<u8>())
                .prop_map(|(at, button, count)| Action::Click { at, button, count }),
            arb_button().prop_map(|button| Action::MouseDown { button }),
            arb_button().prop_map(|button| Action::MouseUp { button }),
            (arb_point(), arb_point(), arb_button(), any::<u32>()).prop_map(
                |(from, to, button, duration_ms)| Action::Drag {
                    from,
                    to,
                    button,
                    duration_ms
                }
            ),
            (
                proptest::option::of(arb_point()),
                any::<i32>(),
                any::<i32>()
            )
                .prop_map(|(at, dx, dy)| Action::Scroll { at, dx, dy }),
            arb_key().prop_map(|key| Action::KeyPress { key }),
            arb_key().prop_map(|key| Action::KeyDown { key }),
            arb_key().prop_map(|key| Action::KeyUp { key }),
            proptest::collection::vec(arb_key(), 0..6).prop_map(|keys| Action::Hotkey { keys }),
            ".*".prop_map(|text| Action::TypeText { text }),
            arb_gesture().prop_map(Action::Touch),
            prop::sample::select(vec![SystemKey::Home, SystemKey::Back, SystemKey::Search])
                .prop_map(Action::SystemKey),
        ]
    }

    fn arb_screenshot() -> impl Strategy<Value = ScreenshotRequest> {
        let format = prop_oneof![
            Just(ImageFormat::Png),
            any::<u8>().prop_map(|quality| ImageFormat::Jpeg { quality }),
            proptest::option::of(any::<i8>()).prop_map(|zstd| ImageFormat::Raw { zstd }),
        ];
        (
            format,
            proptest::option::of(arb_rect()),
            proptest::option::of((any::<u32>(), any::<u32>())),
        )
            .prop_map(|(format, region, max_size)| ScreenshotRequest {
                format,
                region,
                max_size,
            })
    }

    fn arb_tree() -> impl Strategy<Value = TreeRequest> {
        let scope = prop_oneof![
            Just(TreeScope::Desktop),
            Just(TreeScope::ActiveApp),
            ".*".prop_map(TreeScope::App),
        ];
        (
            scope,
            any::<bool>(),
            any::<bool>(),
            proptest::option::of(any::<u32>()),
            proptest::option::of(any::<u32>()),
            any::<bool>(),
        )
            .prop_map(
                |(scope, showing_only, visible_only, max_depth, max_nodes, attributes)| {
                    TreeRequest {
                        scope,
                        showing_only,
                        visible_only,
                        max_depth,
                        max_nodes,
                        attributes,
                    }
                },
            )
    }

    fn arb_probe() -> impl Strategy<Value = Probe> {
        prop_oneof![
            ".*".prop_map(|path| Probe::Stat { path }),
            (".*", any::<u64>()).prop_map(|(path, max_len)| Probe::ReadFile { path, max_len }),
            ".*".prop_map(|path| Probe::ListDir { path }),
            Just(Probe::Processes),
            Just(Probe::ActiveWindow),
            Just(Probe::Windows),
            Just(Probe::Clipboard),
            (
                proptest::collection::vec(".*", 0..4),
                any::<u64>(),
                any::<u64>()
            )
                .prop_map(|(argv, timeout_ms, max_output)| Probe::Command {
                    argv,
                    timeout_ms,
                    max_output
                }),
            ".*".prop_map(|name| Probe::EnvVar { name }),
            arb_tree().prop_map(Probe::UiTree),
            (".*", ".*").prop_map(|(schema, key)| Probe::Setting { schema, key }),
        ]
    }

    fn arb_setup() -> impl Strategy<Value = Setup> {
        let env = proptest::collection::vec((".*", ".*"), 0..3);
        let op = prop_oneof![
            Just(WindowOp::Activate),
            Just(WindowOp::Maximize),
            Just(WindowOp::Restore),
            Just(WindowOp::Minimize),
            Just(WindowOp::Close),
            arb_rect().prop_map(WindowOp::Geometry),
        ];
        prop_oneof![
            (".*", any::<u32>(), any::<bool>(), any::<bool>()).prop_map(
                |(path, mode, create_dirs, append)| Setup::WriteFile {
                    path,
                    mode,
                    create_dirs,
                    append
                }
            ),
            (".*", any::<bool>()).prop_map(|(path, recursive)| Setup::Remove { path, recursive }),
            ".*".prop_map(|path| Setup::MakeDir { path }),
            (
                proptest::collection::vec(".*", 0..4),
                proptest::option::of(".*"),
                env.clone(),
                proptest::collection::vec(any::<u8>(), 0..64),
                any::<u64>(),
                any::<u64>(),
            )
                .prop_map(|(argv, cwd, env, stdin, timeout_ms, max_output)| {
                    Setup::Exec(ExecRequest {
                        argv,
                        cwd,
                        env,
                        stdin,
                        timeout_ms,
                        max_output,
                    })
                }),
            (
                proptest::collection::vec(".*", 0..4),
                proptest::option::of(".*"),
                env
            )
                .prop_map(|(argv, cwd, env)| Setup::Launch { argv, cwd, env }),
            ".*".prop_map(|text| Setup::SetClipboard { text }),
            (any::<u64>(), op).prop_map(|(id, op)| Setup::Window { id, op }),
        ]
    }

    fn arb_request() -> impl Strategy<Value = Request> {
        prop_oneof![
            Just(Request::Ping),
            arb_action().prop_map(Request::Action),
            arb_screenshot().prop_map(Request::Screenshot),
            arb_tree().prop_map(Request::UiTree),
            Just(Request::ScreenInfo),
            Just(Request::Cursor),
            arb_probe().prop_map(Request::Probe),
            proptest::collection::vec(arb_probe(), 0..8).prop_map(|v| Request::Batch(v.into())),
            (".*", any::<u64>(), proptest::option::of(any::<u64>())).prop_map(
                |(path, offset, max_len)| Request::ReadFile {
                    path,
                    offset,
                    max_len
                }
            ),
            arb_setup().prop_map(Request::Setup),
            (arb_screenshot(), any::<u32>(), any::<u64>()).prop_map(
                |(shot, max_fps, duration_ms)| Request::Video(crate::observe::VideoRequest {
                    max_fps,
                    format: shot.format,
                    max_size: shot.max_size,
                    duration_ms,
                })
            ),
            any::<u64>().prop_map(|duration_ms| Request::Input(crate::observe::InputRequest {
                duration_ms
            })),
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
