//! Golden bytes: the wire format pinned. postcard writes an enum variant as its index and a
//! struct as its fields in order, with no names, so moving a variant or a field changes
//! what peers of other builds read without any other test noticing. Here every variant of
//! every enum that travels has one representative value and the bytes postcard writes for
//! it (the message alone, as it follows the body length in a frame header), written out in
//! hex; the structs travel inside them.
//!
//! Each enum's cases must cover its variants exactly once, counted from its own derived
//! decoder, so a new variant fails [`check`] until it has a case.
//!
//! To add a case: append `(value, "")` to the enum's list, in variant order, with distinct
//! numbers in its fields (so a swap of two fields shows), and run
//! `cargo test -p pincer-shared golden`. The failure prints the bytes the value encodes to;
//! read them against the fields, then paste them in. Bytes of an existing case never
//! change: a peer of an older build reads them.

use super::variants;
use crate::action::{Action, Gesture, MouseButton, Point, SystemKey};
use crate::android::{
    AndroidAnswer, AndroidQuery, AndroidSetup, Battery, ContentValue, Display, ForegroundApp,
    Namespace, Package, Radios,
};
use crate::handshake::{ClientHello, GuestInfo, Rejection, ServerHello};
use crate::key::{Key, NamedKey};
use crate::message::{Request, RequestClass, Response, WireError};
use crate::observe::{
    ImageFormat, InputEvent, InputKind, InputRequest, PixelLayout, Rect, ScreenInfo,
    ScreenshotMeta, ScreenshotRequest, TreeRequest, TreeScope, VideoFrame, VideoRequest,
};
use crate::platform::Platform;
use crate::probe::{
    DirEntry, FileContent, FileKind, FileStat, Probe, ProbeReply, ProcessInfo, WindowInfo,
};
use crate::setup::{ExecOutput, ExecRequest, ExitStatus, Setup, WindowOp};
use crate::tool::{ParamKind, Sandbox, ToolCall, ToolParam, ToolSpec, ToolValue};
use crate::tree::{UiNode, UiTree};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::collections::BTreeMap;
use std::fmt::{Debug, Write as _};

fn hex(bytes: &[u8]) -> String {
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// How many variants `T` has, as its derived decoder counts them: a variant index no enum
/// reaches (`u32::MAX`) makes it say.
fn variant_count<T: DeserializeOwned>() -> u32 {
    let beyond = postcard::to_stdvec(&u32::MAX).unwrap();
    let mut de = postcard::Deserializer::from_bytes(&beyond);
    match variants::deserialize::<T, _>(&mut de) {
        Err((_, Some(unknown))) => unknown.known,
        _ => panic!("{} is not an enum", std::any::type_name::<T>()),
    }
}

/// Checks `cases` of enum `T`: each value encodes to its golden bytes and decodes from them,
/// and the cases name every variant once, in order.
fn check<T>(cases: &[(T, &str)])
where
    T: Serialize + DeserializeOwned + PartialEq + Debug,
{
    let name = std::any::type_name::<T>();
    let mut wrong = String::new();
    let mut indices = Vec::new();
    for (i, (value, golden)) in cases.iter().enumerate() {
        let bytes = postcard::to_stdvec(value).unwrap();
        if hex(&bytes) != *golden {
            let _ = writeln!(
                wrong,
                "  case {i}: {value:?}\n    encodes to \"{}\"",
                hex(&bytes)
            );
            continue;
        }
        assert_eq!(
            &postcard::from_bytes::<T>(&bytes).unwrap(),
            value,
            "{name} case {i} does not decode from its golden bytes"
        );
        indices.push(postcard::take_from_bytes::<u32>(&bytes).unwrap().0);
    }
    assert!(
        wrong.is_empty(),
        "{name}: bytes differ from the golden ones (a peer of another build would misread \
         them; if this is a new case, check and paste the bytes):\n{wrong}"
    );
    let known = variant_count::<T>();
    assert_eq!(
        indices,
        (0..known).collect::<Vec<_>>(),
        "{name} has {known} variants: give each one case, in variant order"
    );
}

fn point() -> Point {
    Point::new(3, -4)
}

fn rect() -> Rect {
    Rect::new(-5, 6, 70, 80)
}

fn stat() -> FileStat {
    FileStat {
        path: "/f".into(),
        exists: true,
        kind: Some(FileKind::Symlink),
        target: Some(FileKind::File),
        size: 9,
        mode: 0o644,
        modified_ms: -2,
    }
}

fn meta() -> ScreenshotMeta {
    ScreenshotMeta {
        width: 800,
        height: 600,
        format: ImageFormat::Jpeg { quality: 80 },
        layout: PixelLayout::Rgb8,
        source: rect(),
        grab_us: 11,
        encode_us: 12,
    }
}

fn tree_request() -> TreeRequest {
    TreeRequest {
        scope: TreeScope::App("gedit".into()),
        showing_only: true,
        visible_only: false,
        max_depth: Some(5),
        max_nodes: Some(600),
        attributes: true,
    }
}

fn tree() -> UiTree {
    UiTree {
        root: UiNode {
            role: "frame".into(),
            name: "n".into(),
            description: "d".into(),
            text: Some("t".into()),
            value: Some(0.5),
            states: vec!["showing".into()],
            bounds: Some(rect()),
            actions: vec!["click".into()],
            attributes: [("k".to_owned(), "v".to_owned())].into(),
            children: vec![UiNode {
                role: "label".into(),
                ..Default::default()
            }],
        },
        node_count: 2,
        truncated: true,
        walk_us: 7,
    }
}

fn window() -> WindowInfo {
    WindowInfo {
        id: 21,
        title: "w".into(),
        pid: Some(22),
        process_name: Some("p".into()),
        class: Some("c".into()),
        instance: Some("i".into()),
        bounds: Some(rect()),
    }
}

fn exec_output() -> ExecOutput {
    ExecOutput {
        status: ExitStatus::Exited(3),
        stdout: b"o".to_vec(),
        stderr: b"e".to_vec(),
        truncated: true,
        elapsed_ms: 17,
    }
}

fn tool_call() -> ToolCall {
    ToolCall {
        spec: ToolSpec {
            name: "grep".into(),
            description: "d".into(),
            params: vec![ToolParam {
                name: "q".into(),
                description: "e".into(),
                kind: ParamKind::Integer,
                required: true,
                max_len: Some(8),
                one_of: vec!["1".into()],
                charset: Some("0-9".into()),
                min: Some(1.0),
                max: Some(2.0),
            }],
            argv: vec!["/bin/grep".into(), "{{q}}".into()],
            sandbox: Sandbox {
                read: vec!["/r".into()],
                write: vec!["/w".into()],
                env: [("K".to_owned(), "V".to_owned())].into(),
            },
            timeout_ms: 1000,
        },
        args: [("q".to_owned(), ToolValue::Integer(1))].into(),
    }
}

#[test]
fn requests() {
    check(&[
        (Request::Ping, "00"),
        (Request::Action(Action::click(3, 4)), "01010106080001"),
        (
            Request::Screenshot(ScreenshotRequest {
                format: ImageFormat::Raw { zstd: Some(3) },
                region: Some(rect()),
                max_size: Some((640, 480)),
            }),
            "0202010301090c4650018005e003",
        ),
        (
            Request::UiTree(tree_request()),
            "03020567656469740100010501d80401",
        ),
        (Request::ScreenInfo, "04"),
        (Request::Cursor, "05"),
        (Request::Probe(Probe::Processes), "0603"),
        (
            Request::Batch([Probe::Windows, Probe::Clipboard].into()),
            "07020506",
        ),
        (
            Request::ReadFile {
                path: "/a".into(),
                offset: 7,
                max_len: Some(9),
            },
            "08022f61070109",
        ),
        (
            Request::Setup(Setup::MakeDir { path: "/d".into() }),
            "0902022f64",
        ),
        (
            Request::Video(VideoRequest {
                max_fps: 5,
                format: ImageFormat::Jpeg { quality: 70 },
                max_size: Some((320, 240)),
                duration_ms: 2000,
            }),
            "0a05014601c002f001d00f",
        ),
        (Request::Input(InputRequest { duration_ms: 1500 }), "0bdc0b"),
        (
            Request::Tool(Box::new(tool_call())),
            "0c046772657001640101710165010101080101310103302d3901000000000000f03f01000000000000004002092f62696e2f67726570057b7b717d7d01022f7201022f7701014b0156e8070101710102",
        ),
    ]);
}

#[test]
fn responses() {
    check(&[
        (Response::Pong { guest_us: 300 }, "00ac02"),
        (Response::Done, "01"),
        (Response::Screenshot(meta()), "02a006d804015002090c46500b0c"),
        (
            Response::UiTree(tree()),
            "03056672616d65016e016401017401000000000000e03f010773686f77696e6701090c46500105636c69636b01016b017601056c6162656c000000000000000000020107",
        ),
        (
            Response::ScreenInfo(ScreenInfo {
                width: 1920,
                height: 1080,
                monitors: vec![rect()],
                capture: "shm".into(),
            }),
            "04800fb80801090c46500373686d",
        ),
        (Response::Cursor(point()), "050607"),
        (
            Response::Probe(ProbeReply::EnvVar(Some("x".into()))),
            "0608010178",
        ),
        (
            Response::Batch(vec![
                Ok(ProbeReply::Clipboard(None)),
                Err(WireError::NotFound { path: "/x".into() }),
            ]),
            "07020006000106022f78",
        ),
        (
            Response::File {
                stat: stat(),
                len: 42,
            },
            "08022f66010102010009a403032a",
        ),
        (Response::Exec(exec_output()), "090006016f01650111"),
        (Response::Launched { pid: 4321 }, "0ae121"),
        (Response::Error(WireError::Unauthenticated), "0b03"),
        (
            Response::VideoFrame(VideoFrame {
                guest_us: 99,
                meta: meta(),
            }),
            "0c63a006d804015002090c46500b0c",
        ),
        (
            Response::InputEvents(vec![InputEvent {
                guest_us: 5,
                kind: InputKind::Release {
                    button: 1,
                    x: 2,
                    y: -3,
                },
            }]),
            "0d010501010405",
        ),
    ]);
}

#[test]
fn wire_errors_and_classes() {
    let s = |t: &str| t.to_owned();
    check(&[
        (WireError::Unsupported { what: s("a") }, "000161"),
        (WireError::Malformed { reason: s("b") }, "010162"),
        (
            WireError::TooLarge {
                what: s("c"),
                limit: 10,
                got: 11,
            },
            "0201630a0b",
        ),
        (WireError::Unauthenticated, "03"),
        (
            WireError::Forbidden {
                class: RequestClass::Setup,
                reason: s("d"),
            },
            "04040164",
        ),
        (WireError::InvalidArgument { message: s("e") }, "050165"),
        (WireError::NotFound { path: s("f") }, "060166"),
        (WireError::PermissionDenied { path: s("g") }, "070167"),
        (WireError::Io { message: s("h") }, "080168"),
        (WireError::Display { message: s("i") }, "090169"),
        (WireError::Accessibility { message: s("j") }, "0a016a"),
        (WireError::Input { message: s("k") }, "0b016b"),
        (WireError::Timeout { after_ms: 12 }, "0c0c"),
        (WireError::Busy { message: s("l") }, "0d016c"),
        (WireError::Internal { message: s("m") }, "0e016d"),
        (
            WireError::Denied {
                what: s("n"),
                reason: s("o"),
            },
            "0f016e016f",
        ),
    ]);
    check(&[
        (RequestClass::Control, "00"),
        (RequestClass::Action, "01"),
        (RequestClass::Observe, "02"),
        (RequestClass::Probe, "03"),
        (RequestClass::Setup, "04"),
        (RequestClass::Tool, "05"),
    ]);
}

#[test]
fn probes() {
    check(&[
        (Probe::Stat { path: "/s".into() }, "00022f73"),
        (
            Probe::ReadFile {
                path: "/r".into(),
                max_len: 5,
            },
            "01022f7205",
        ),
        (Probe::ListDir { path: "/l".into() }, "02022f6c"),
        (Probe::Processes, "03"),
        (Probe::ActiveWindow, "04"),
        (Probe::Windows, "05"),
        (Probe::Clipboard, "06"),
        (
            Probe::Command {
                argv: vec!["true".into()],
                timeout_ms: 6,
                max_output: 7,
            },
            "070104747275650607",
        ),
        (
            Probe::EnvVar {
                name: "HOME".into(),
            },
            "0804484f4d45",
        ),
        (
            Probe::UiTree(tree_request()),
            "09020567656469740100010501d80401",
        ),
        (
            Probe::Setting {
                schema: "org.a".into(),
                key: "k".into(),
            },
            "0a056f72672e61016b",
        ),
        (Probe::Android(AndroidQuery::Battery), "0b05"),
    ]);
    check(&[
        (ProbeReply::Stat(stat()), "00022f66010102010009a40303"),
        (
            ProbeReply::File(Some(FileContent {
                path: "/c".into(),
                bytes: b"xy".to_vec(),
                total_size: 8,
            })),
            "0101022f6302787908",
        ),
        (
            ProbeReply::Dir(Some(vec![DirEntry {
                name: "e".into(),
                kind: FileKind::Dir,
                size: 4,
            }])),
            "02010101650104",
        ),
        (
            ProbeReply::Processes(vec![ProcessInfo {
                pid: 31,
                ppid: 1,
                name: "p".into(),
                cmdline: vec!["p".into(), "-x".into()],
                uid: 1000,
            }]),
            "03011f010170020170022d78e807",
        ),
        (
            ProbeReply::ActiveWindow(Some(window())),
            "0401150177011601017001016301016901090c4650",
        ),
        (
            ProbeReply::Windows(vec![window()]),
            "0501150177011601017001016301016901090c4650",
        ),
        (ProbeReply::Clipboard(Some("c".into())), "06010163"),
        (ProbeReply::Command(exec_output()), "070006016f01650111"),
        (ProbeReply::EnvVar(None), "0800"),
        (
            ProbeReply::UiTree(Box::new(tree())),
            "09056672616d65016e016401017401000000000000e03f010773686f77696e6701090c46500105636c69636b01016b017601056c6162656c000000000000000000020107",
        ),
        (ProbeReply::Setting(Some("'v'".into())), "0a0103277627"),
        (
            ProbeReply::Android(AndroidAnswer::Property("p".into())),
            "0b040170",
        ),
    ]);
    check(&[
        (FileKind::File, "00"),
        (FileKind::Dir, "01"),
        (FileKind::Symlink, "02"),
        (FileKind::Other, "03"),
    ]);
}

#[test]
fn setup_steps() {
    check(&[
        (
            Setup::WriteFile {
                path: "/w".into(),
                mode: 0o600,
                create_dirs: true,
                append: false,
            },
            "00022f7780030100",
        ),
        (
            Setup::Remove {
                path: "/r".into(),
                recursive: true,
            },
            "01022f7201",
        ),
        (Setup::MakeDir { path: "/m".into() }, "02022f6d"),
        (
            Setup::Exec(ExecRequest {
                argv: vec!["sh".into()],
                cwd: Some("/c".into()),
                env: vec![("A".into(), "B".into())],
                stdin: b"in".to_vec(),
                timeout_ms: 8,
                max_output: 9,
            }),
            "030102736801022f63010141014202696e0809",
        ),
        (
            Setup::Launch {
                argv: vec!["gedit".into()],
                cwd: None,
                env: vec![("C".into(), "D".into())],
            },
            "0401056765646974000101430144",
        ),
        (Setup::SetClipboard { text: "t".into() }, "050174"),
        (
            Setup::Window {
                id: 77,
                op: WindowOp::Minimize,
            },
            "064d03",
        ),
        (
            Setup::Android(AndroidSetup::ForceStop {
                package: "com.x".into(),
            }),
            "070105636f6d2e78",
        ),
    ]);
    check(&[
        (WindowOp::Activate, "00"),
        (WindowOp::Maximize, "01"),
        (WindowOp::Restore, "02"),
        (WindowOp::Minimize, "03"),
        (WindowOp::Close, "04"),
        (WindowOp::Geometry(rect()), "05090c4650"),
    ]);
    check(&[
        (ExitStatus::Exited(-1), "0001"),
        (ExitStatus::Signaled(9), "0112"),
        (ExitStatus::TimedOut, "02"),
    ]);
}

#[test]
fn actions() {
    check(&[
        (Action::MouseMove { to: point() }, "000607"),
        (
            Action::Click {
                at: Some(point()),
                button: MouseButton::Right,
                count: 2,
            },
            "010106070202",
        ),
        (
            Action::MouseDown {
                button: MouseButton::Middle,
            },
            "0201",
        ),
        (
            Action::MouseUp {
                button: MouseButton::Left,
            },
            "0300",
        ),
        (
            Action::Drag {
                from: point(),
                to: Point::new(5, 6),
                button: MouseButton::Left,
                duration_ms: 300,
            },
            "0406070a0c00ac02",
        ),
        (
            Action::Scroll {
                at: None,
                dx: -1,
                dy: 2,
            },
            "05000104",
        ),
        (
            Action::KeyPress {
                key: Key::Char('a'),
            },
            "06010161",
        ),
        (
            Action::KeyDown {
                key: Key::Named(NamedKey::Shift),
            },
            "070000",
        ),
        (
            Action::KeyUp {
                key: Key::Named(NamedKey::F(4)),
            },
            "08001a04",
        ),
        (
            Action::Hotkey {
                keys: vec![Key::Named(NamedKey::Control), Key::Char('s')],
            },
            "09020001010173",
        ),
        (Action::TypeText { text: "hé".into() }, "0a0368c3a9"),
        (Action::Touch(Gesture::Tap { at: point() }), "0b000607"),
        (Action::SystemKey(SystemKey::Back), "0c01"),
    ]);
    check(&[
        (MouseButton::Left, "00"),
        (MouseButton::Middle, "01"),
        (MouseButton::Right, "02"),
    ]);
    check(&[
        (SystemKey::Home, "00"),
        (SystemKey::Back, "01"),
        (SystemKey::AppSwitch, "02"),
        (SystemKey::Enter, "03"),
        (SystemKey::Delete, "04"),
        (SystemKey::VolumeUp, "05"),
        (SystemKey::VolumeDown, "06"),
        (SystemKey::Power, "07"),
        (SystemKey::Menu, "08"),
        (SystemKey::Search, "09"),
    ]);
    check(&[
        (Gesture::Tap { at: point() }, "000607"),
        (
            Gesture::LongPress {
                at: point(),
                duration_ms: 800,
            },
            "010607a006",
        ),
        (
            Gesture::Swipe {
                from: point(),
                to: Point::new(7, 8),
                duration_ms: 250,
            },
            "0206070e10fa01",
        ),
        (
            Gesture::Pinch {
                center: point(),
                start_distance: 100,
                end_distance: 40,
                duration_ms: 500,
            },
            "0306076428f403",
        ),
    ]);
}

#[test]
fn keys() {
    check(&[
        (Key::Named(NamedKey::Tab), "0007"),
        (Key::Char('€'), "0103e282ac"),
    ]);
    check(&[
        (NamedKey::Shift, "00"),
        (NamedKey::Control, "01"),
        (NamedKey::Alt, "02"),
        (NamedKey::Super, "03"),
        (NamedKey::AltGr, "04"),
        (NamedKey::CapsLock, "05"),
        (NamedKey::Return, "06"),
        (NamedKey::Tab, "07"),
        (NamedKey::Escape, "08"),
        (NamedKey::Backspace, "09"),
        (NamedKey::Delete, "0a"),
        (NamedKey::Insert, "0b"),
        (NamedKey::Home, "0c"),
        (NamedKey::End, "0d"),
        (NamedKey::PageUp, "0e"),
        (NamedKey::PageDown, "0f"),
        (NamedKey::Left, "10"),
        (NamedKey::Right, "11"),
        (NamedKey::Up, "12"),
        (NamedKey::Down, "13"),
        (NamedKey::Space, "14"),
        (NamedKey::PrintScreen, "15"),
        (NamedKey::Menu, "16"),
        (NamedKey::Pause, "17"),
        (NamedKey::NumLock, "18"),
        (NamedKey::ScrollLock, "19"),
        (NamedKey::F(12), "1a0c"),
    ]);
}

#[test]
fn observations() {
    check(&[
        (ImageFormat::Png, "00"),
        (ImageFormat::Jpeg { quality: 90 }, "015a"),
        (ImageFormat::Raw { zstd: Some(-1) }, "0201ff"),
    ]);
    check(&[
        (PixelLayout::Bgrx8, "00"),
        (PixelLayout::Rgba8, "01"),
        (PixelLayout::Rgb8, "02"),
    ]);
    check(&[
        (
            InputKind::Press {
                button: 3,
                x: -1,
                y: 2,
            },
            "00030104",
        ),
        (
            InputKind::Release {
                button: 1,
                x: 4,
                y: 5,
            },
            "0101080a",
        ),
        (
            InputKind::KeyDown {
                key: Some(Key::Char('q')),
                keysym: 0x71,
            },
            "020101017171",
        ),
        (
            InputKind::KeyUp {
                key: None,
                keysym: 0x1008_ff13,
            },
            "030093fea38001",
        ),
    ]);
    check(&[
        (TreeScope::Desktop, "00"),
        (TreeScope::ActiveApp, "01"),
        (TreeScope::App("calc".into()), "020463616c63"),
    ]);
}

#[test]
fn android() {
    check(&[
        (Namespace::System, "00"),
        (Namespace::Secure, "01"),
        (Namespace::Global, "02"),
    ]);
    check(&[
        (
            AndroidQuery::Setting {
                namespace: Namespace::Global,
                key: "k".into(),
            },
            "0002016b",
        ),
        (
            AndroidQuery::Content {
                uri: "content://u".into(),
                projection: vec!["a".into()],
                selection: Some("s".into()),
                sort: None,
            },
            "010b636f6e74656e743a2f2f7501016101017300",
        ),
        (AndroidQuery::Foreground, "02"),
        (AndroidQuery::Packages, "03"),
        (AndroidQuery::Property { name: "p".into() }, "040170"),
        (AndroidQuery::Battery, "05"),
        (AndroidQuery::Radios, "06"),
        (AndroidQuery::Display, "07"),
    ]);
    check(&[
        (AndroidAnswer::Setting(Some("1".into())), "00010131"),
        (
            AndroidAnswer::Rows(vec![BTreeMap::from([
                ("a".to_owned(), Some("b".to_owned())),
                ("c".to_owned(), None),
            ])]),
            "0101020161010162016300",
        ),
        (
            AndroidAnswer::Foreground(Some(ForegroundApp {
                package: "com.a".into(),
                activity: Some(".Main".into()),
            })),
            "020105636f6d2e6101052e4d61696e",
        ),
        (
            AndroidAnswer::Packages(vec![Package {
                name: "com.b".into(),
                version_code: Some(300),
            }]),
            "030105636f6d2e6201ac02",
        ),
        (AndroidAnswer::Property("v".into()), "040176"),
        (
            AndroidAnswer::Battery(Battery {
                level: 50,
                scale: 100,
                plugged: true,
            }),
            "05326401",
        ),
        (
            AndroidAnswer::Radios(Radios {
                wifi: true,
                airplane: false,
            }),
            "060100",
        ),
        (
            AndroidAnswer::Display(Display {
                width: 1080,
                height: 2400,
                density: 420,
                rotation: 1,
            }),
            "07b808e012a40301",
        ),
    ]);
    check(&[
        (ContentValue::Text("t".into()), "000174"),
        (ContentValue::Integer(-7), "010d"),
        (ContentValue::Bool(true), "0201"),
    ]);
    check(&[
        (
            AndroidSetup::StartActivity {
                component: "com.a/.Main".into(),
            },
            "000b636f6d2e612f2e4d61696e",
        ),
        (
            AndroidSetup::ForceStop {
                package: "com.b".into(),
            },
            "0105636f6d2e62",
        ),
        (
            AndroidSetup::ClearData {
                package: "com.c".into(),
            },
            "0205636f6d2e63",
        ),
        (
            AndroidSetup::PutSetting {
                namespace: Namespace::Secure,
                key: "k".into(),
                value: "v".into(),
            },
            "0301016b0176",
        ),
        (
            AndroidSetup::ContentInsert {
                uri: "content://i".into(),
                values: vec![("n".into(), ContentValue::Integer(2))],
            },
            "040b636f6e74656e743a2f2f6901016e0104",
        ),
        (
            AndroidSetup::ContentDelete {
                uri: "content://d".into(),
                selection: None,
            },
            "050b636f6e74656e743a2f2f6400",
        ),
    ]);
}

#[test]
fn tools() {
    check(&[
        (ParamKind::String, "00"),
        (ParamKind::Integer, "01"),
        (ParamKind::Number, "02"),
        (ParamKind::Boolean, "03"),
    ]);
    check(&[
        (ToolValue::String("s".into()), "000173"),
        (ToolValue::Integer(-3), "0105"),
        (ToolValue::Number(0.25), "02000000000000d03f"),
        (ToolValue::Boolean(true), "0301"),
    ]);
}

/// The handshake is frozen across protocol versions: these bytes are what any two builds
/// must still read from each other.
#[test]
fn handshake() {
    let hello = ClientHello {
        versions: vec![1, 2, 3],
        host: "h".into(),
        proof: vec![0xab, 0xcd],
    };
    assert_eq!(
        hex(&postcard::to_stdvec(&hello).unwrap()),
        "03010203016802abcd"
    );
    check(&[
        (
            ServerHello::Accepted(GuestInfo {
                version: 3,
                name: "desk".into(),
                platform: Platform::Android,
                os: "os".into(),
                agent_version: "0.1".into(),
                screen: ScreenInfo {
                    width: 10,
                    height: 20,
                    monitors: vec![],
                    capture: "c".into(),
                },
                capabilities: vec!["input".into()],
                read_only: true,
                pid: 42,
            }),
            "0003046465736b07616e64726f6964026f7303302e310a140001630105696e707574012a",
        ),
        (ServerHello::Rejected(Rejection::AuthFailed), "0101"),
    ]);
    check(&[
        (
            Rejection::VersionMismatch {
                guest_supports: vec![1, 2],
            },
            "00020102",
        ),
        (Rejection::AuthFailed, "01"),
    ]);
}

/// The check itself: a list that leaves a variant out is refused, and the count comes
/// from the enum.
#[test]
fn a_missing_variant_is_caught() {
    assert_eq!(variant_count::<MouseButton>(), 3);
    assert_eq!(variant_count::<Request>(), 13);
    let partial = std::panic::catch_unwind(|| {
        check(&[(MouseButton::Left, "00"), (MouseButton::Middle, "01")]);
    });
    let why = partial.unwrap_err();
    let why = why.downcast_ref::<String>().unwrap();
    assert!(why.contains("has 3 variants"), "{why}");
}
