//! The connection layer against real agents: authentication, pinning, misbehaving peers,
//! read-only guests, agent restarts, guests that dial in, and clean teardown.

use pincer::env::{ClientError, Deadlines, EnvSpec, Environment};
use pincer_shared::codec;
use pincer_shared::handshake::{self, HandshakeError, ServerHello};
use pincer_shared::identity::{Fingerprint, Token};
use pincer_shared::limits::{MAX_HELLO, MAX_RESPONSE_HEADER};
use pincer_shared::probe::Probe;
use pincer_shared::setup::ExecRequest;
use pincer_shared::transport::stream::{finish, read_body, read_header, write_header};
use pincer_shared::transport::{Link, quic};
use pincer_shared::{Request, RequestClass, Response, WireError};
use pincer_tests::{ProcessEntry, Sandbox, bin, eventually, processes};
use std::process::{Command, Stdio};
use std::time::Duration;
use tokio::io::AsyncWriteExt;

/// Opens a raw, authenticated QUIC connection to a desktop's agent.
async fn raw_link(spec: &EnvSpec) -> Link {
    let pin = quic::ServerPin::Pinned(spec.fingerprint.unwrap());
    let (cfg, seen) = quic::client_config(spec.addr, pin, None).unwrap();
    let ep = quic::client_endpoint(spec.addr).unwrap();
    let conn = quic::connect(&ep, spec.addr, cfg, &seen, pin)
        .await
        .unwrap();
    let link = Link::Quic(conn);
    let hello = handshake::client_hello(&spec.token, "raw-test", &link.exporter().unwrap());
    let (mut s, mut r) = link.open().await.unwrap();
    write_header(&mut s, &hello, 0, MAX_HELLO).await.unwrap();
    finish(&mut s).await.unwrap();
    let h = read_header(&mut r, MAX_HELLO).await.unwrap().unwrap();
    let reply: ServerHello = codec::decode(&h, 0).unwrap().msg;
    assert!(matches!(reply, ServerHello::Accepted(_)), "{reply:?}");
    // Keep the endpoint alive with the connection.
    std::mem::forget(ep);
    link
}

/// Sends raw bytes on a new stream and decodes the reply.
async fn raw_exchange(link: &Link, bytes: &[u8]) -> Response {
    let (mut s, mut r) = link.open().await.unwrap();
    s.write_all(bytes).await.unwrap();
    finish(&mut s).await.unwrap();
    let h = read_header(&mut r, MAX_RESPONSE_HEADER)
        .await
        .unwrap()
        .unwrap();
    let f = codec::decode_response(&h).unwrap();
    let _ = read_body(&mut r, f.body_len).await.unwrap();
    f.msg
}

fn frame(header: &[u8]) -> Vec<u8> {
    let mut v = (header.len() as u32).to_le_bytes().to_vec();
    v.extend_from_slice(header);
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_peers_are_refused_while_good_connections_keep_working() {
    let sb = Sandbox::new();
    let _d = sb.desktop("auth", "800x600", &["--no-wm"]);
    let spec = sb.registry().spec(Some("auth")).unwrap();
    let good = Environment::connect(spec.clone(), Deadlines::default())
        .await
        .unwrap();
    good.ping().await.unwrap();

    // Wrong token: a typed handshake error.
    let mut wrong = spec.clone();
    wrong.token = Token::generate();
    match Environment::connect(wrong, Deadlines::default()).await {
        Err(ClientError::Handshake {
            source: HandshakeError::AuthFailed,
            ..
        }) => {}
        other => panic!("wrong token was not refused: {other:?}"),
    }

    // A certificate other than the pinned one: refused with both fingerprints.
    let mut unpinned = spec.clone();
    let bogus = Fingerprint::of(b"some other certificate");
    unpinned.fingerprint = Some(bogus);
    match Environment::connect(unpinned, Deadlines::default()).await {
        Err(e @ ClientError::FingerprintMismatch { .. }) => {
            let msg = e.to_string();
            assert!(
                msg.contains(&bogus.to_string())
                    && msg.contains(&spec.fingerprint.unwrap().to_string()),
                "{msg}"
            );
            assert!(msg.contains("env 'auth'"), "{msg}");
        }
        other => panic!("unpinned certificate was accepted: {other:?}"),
    }

    // Malformed and unknown frames on an authenticated connection get typed answers and
    // the connection stays usable.
    let link = raw_link(&spec).await;
    let garbage = raw_exchange(&link, &frame(&[0, 3, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff])).await;
    assert!(
        matches!(garbage, Response::Error(WireError::Malformed { .. })),
        "{garbage:?}"
    );
    let unknown = raw_exchange(&link, &frame(&[0, 250, 1])).await;
    assert!(
        matches!(unknown, Response::Error(WireError::Unsupported { .. })),
        "{unknown:?}"
    );
    let huge = raw_exchange(&link, &(64u32 * 1024 * 1024).to_le_bytes()).await;
    assert!(
        matches!(huge, Response::Error(WireError::TooLarge { .. })),
        "{huge:?}"
    );
    let ping = codec::encode(&Request::Ping, 0, 1024).unwrap();
    assert!(matches!(
        raw_exchange(&link, &ping).await,
        Response::Pong { .. }
    ));
    // A stream that is reset halfway does not hurt either.
    let (mut s, _r) = link.open().await.unwrap();
    s.write_all(&[9, 0, 0]).await.unwrap();
    drop(s);
    assert!(matches!(
        raw_exchange(&link, &ping).await,
        Response::Pong { .. }
    ));

    good.ping()
        .await
        .expect("the good connection survived all of it");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_before_the_handshake_are_refused() {
    let sb = Sandbox::new();
    let _d = sb.desktop("preauth", "800x600", &["--no-wm"]);
    let spec = sb.registry().spec(Some("preauth")).unwrap();
    let pin = quic::ServerPin::Pinned(spec.fingerprint.unwrap());
    let (cfg, seen) = quic::client_config(spec.addr, pin, None).unwrap();
    let ep = quic::client_endpoint(spec.addr).unwrap();
    let link = Link::Quic(
        quic::connect(&ep, spec.addr, cfg, &seen, pin)
            .await
            .unwrap(),
    );
    let (mut s, mut r) = link.open().await.unwrap();
    write_header(&mut s, &Request::Probe(Probe::Processes), 0, 1024)
        .await
        .unwrap();
    finish(&mut s).await.unwrap();
    let h = read_header(&mut r, MAX_RESPONSE_HEADER)
        .await
        .unwrap()
        .unwrap();
    let f = codec::decode_response(&h).unwrap();
    assert_eq!(f.msg, Response::Error(WireError::Unauthenticated));
    let reason = tokio::time::timeout(Duration::from_secs(5), link.closed())
        .await
        .unwrap();
    assert!(reason.contains("handshake"), "{reason}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_guests_refuse_setup_but_serve_the_rest() {
    let sb = Sandbox::new();
    let d = sb.desktop("ro", "800x600", &["--no-wm", "--read-only"]);
    let env = d.connect().await;
    assert!(env.info().unwrap().read_only);
    let forbidden = |r: Result<_, ClientError>| {
        matches!(
            r.err().and_then(|e| e.wire().cloned()),
            Some(WireError::Forbidden {
                class: RequestClass::Setup,
                ..
            })
        )
    };
    assert!(forbidden(
        env.exec(ExecRequest::new(["true"])).await.map(|_| ())
    ));
    assert!(forbidden(env.write_file("/tmp/ro-test", b"x", 0o644).await));
    assert!(forbidden(
        env.probe(Probe::Command {
            argv: vec!["true".into()],
            timeout_ms: 1000,
            max_output: 10
        })
        .await
        .map(|_| ())
    ));
    assert!(forbidden(
        env.launch(vec!["true".into()], vec![]).await.map(|_| ())
    ));
    assert!(!std::path::Path::new("/tmp/ro-test").exists());
    env.screen_info().await.unwrap();

    // Files: the home directory, but not where secrets live, and nothing outside it.
    let home = d.state()["env"]["HOME"].as_str().unwrap().to_owned();
    std::fs::write(format!("{home}/notes.txt"), "hello").unwrap();
    std::fs::create_dir_all(format!("{home}/.ssh")).unwrap();
    std::fs::write(format!("{home}/.ssh/id_ed25519"), "private").unwrap();
    assert_eq!(env.read_file("~/notes.txt").await.unwrap().1, b"hello");
    let refused = |r: Result<_, ClientError>, rule: &str| {
        let e = r.expect_err("refused");
        let msg = e.to_string();
        assert!(
            matches!(e.wire(), Some(WireError::Denied { .. })) && msg.contains(rule),
            "{msg}"
        );
    };
    refused(
        env.read_file("~/.ssh/id_ed25519").await.map(|_| ()),
        "--read-root",
    );
    refused(
        env.probe(Probe::Stat {
            path: "/tmp".into(),
        })
        .await
        .map(|_| ()),
        "outside the read roots",
    );
    refused(
        env.probe(Probe::EnvVar {
            name: "DBUS_SESSION_BUS_ADDRESS".into(),
        })
        .await
        .map(|_| ()),
        "--read-env",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_never_serve_their_keys_and_tokens() {
    let sb = Sandbox::new();
    let d = sb.desktop("keys", "800x600", &["--no-wm"]);
    let env = d.connect().await;
    let dir = sb.path().join("state/desktops/keys");
    for secret in [dir.join("token"), dir.join("agent/key.der")] {
        let e = env
            .read_file(secret.to_str().unwrap())
            .await
            .expect_err("the agent served its own secret");
        assert!(
            e.to_string().contains("never serves it, in any mode"),
            "{e}"
        );
    }
    // Nor those of the host that runs it, or of other desktops.
    let host_token = sb.path().join("state/host/token");
    std::fs::create_dir_all(host_token.parent().unwrap()).unwrap();
    std::fs::write(&host_token, "t").unwrap();
    assert!(matches!(
        env.read_file(host_token.to_str().unwrap())
            .await
            .err()
            .and_then(|e| e.wire().cloned()),
        Some(WireError::Denied { .. })
    ));
    // Files of its own home are served as always.
    env.probe(Probe::Stat { path: "~".into() }).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_host_reconnects_after_the_agent_restarts() {
    let sb = Sandbox::new();
    let d = sb.desktop("restart", "800x600", &["--no-wm"]);
    let env = d.connect().await;
    let pid = env.info().unwrap().pid;
    env.ping().await.unwrap();
    // SAFETY: killing the agent process of our own desktop.
    unsafe {
        libc::kill(pid as i32, libc::SIGKILL);
    }
    // The supervisor restarts it on the same port; the next calls reconnect by themselves.
    let back = eventually(Duration::from_secs(20), || async { env.ping().await.ok() }).await;
    assert!(back.is_some(), "never reconnected");
    let new_pid = env.info().unwrap().pid;
    assert_ne!(new_pid, pid, "still talking to the killed agent?");
    env.probe(Probe::Processes).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_command_works_through_a_tcp_tunnel_to_the_same_agent() {
    let sb = Sandbox::new();
    let d = sb.desktop("direct", "800x600", &["--no-wm"]);
    // A second entry for the desktop's agent, which serves TCP on its UDP port, added the
    // way a user would (`env add` pings through the tunnel before it writes the entry).
    let entry = sb.registry().load().unwrap().envs["direct"].clone();
    let addr = entry.addr.clone().unwrap();
    sb.pincer_ok(&[
        "env",
        "add",
        "tunnelled",
        &addr,
        "--token-file",
        entry.token_file.to_str().unwrap(),
        "--fingerprint",
        entry.fingerprint.as_deref().unwrap(),
        "--transport",
        "tcp",
    ]);
    let envs = std::fs::read_to_string(sb.path().join("envs.toml")).unwrap();
    assert_eq!(envs.matches("transport = \"tcp\"").count(), 1, "{envs}");
    let list = sb.pincer_ok(&["env", "list"]);
    let line = list.lines().find(|l| l.starts_with("tunnelled")).unwrap();
    assert!(
        line.contains(&format!("{addr} over tcp")) && line.contains("up ("),
        "{list}"
    );
    let info = sb.pincer_ok(&["env", "info", "--env", "tunnelled"]);
    assert!(info.contains("over tcp"), "{info}");

    let shot = sb.path().join("tunnelled.png");
    let said = sb.pincer_ok(&[
        "screenshot",
        "--env",
        "tunnelled",
        "-o",
        shot.to_str().unwrap(),
    ]);
    assert!(said.contains("800x600"), "{said}");
    assert_eq!(&std::fs::read(&shot).unwrap()[..8], b"\x89PNG\r\n\x1a\n");
    assert_eq!(
        sb.pincer_ok(&[
            "exec",
            "--env",
            "tunnelled",
            "--",
            "sh",
            "-c",
            "echo through"
        ]),
        "through\n"
    );
    // A few MiB each way: up with put, compared on the guest (the same machine), and down
    // with get.
    let mut x = 0x9e37_79b9_u32;
    let payload: Vec<u8> = (0..(3 << 20) + 12345)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect();
    let local = sb.path().join("payload.bin");
    std::fs::write(&local, &payload).unwrap();
    let remote = format!("/tmp/pincer-tunnel-e2e-{}.bin", std::process::id());
    let local = local.to_str().unwrap();
    sb.pincer_ok(&["file", "put", "--env", "tunnelled", local, &remote]);
    sb.pincer_ok(&["exec", "--env", "tunnelled", "--", "cmp", local, &remote]);
    let back = sb.path().join("back.bin");
    sb.pincer_ok(&[
        "file",
        "get",
        "--env",
        "tunnelled",
        &remote,
        back.to_str().unwrap(),
    ]);
    let _ = std::fs::remove_file(&remote);
    assert!(
        std::fs::read(&back).unwrap() == payload,
        "the file came back changed"
    );

    // The agent restarts (the supervisor brings it back on the same port): the broken
    // tunnel connects again and the environment redials by itself.
    let env = sb
        .registry()
        .connect(Some("tunnelled"), Deadlines::default())
        .await
        .unwrap();
    let pid = env.info().unwrap().pid;
    // SAFETY: killing the agent process of our own desktop.
    unsafe {
        libc::kill(pid as i32, libc::SIGKILL);
    }
    let back = eventually(Duration::from_secs(20), || async { env.ping().await.ok() }).await;
    assert!(back.is_some(), "never reconnected through the tunnel");
    assert_ne!(
        env.info().unwrap().pid,
        pid,
        "still talking to the killed agent?"
    );
    drop(d);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn env_add_refuses_a_platform_that_is_none_or_not_the_agents() {
    let sb = Sandbox::new();
    let d = sb.desktop("desk", "800x600", &["--no-wm"]);
    let entry = sb.registry().load().unwrap().envs["desk"].clone();
    let addr = entry.addr.clone().unwrap();
    let token = entry.token_file.to_str().unwrap().to_owned();
    let fingerprint = entry.fingerprint.clone().unwrap();
    let add = |name: &str, how: &[&str]| {
        let mut args = vec!["env", "add", name, &addr, "--token-file", &token];
        args.extend_from_slice(how);
        sb.pincer(&args)
    };
    let refused = |out: std::process::Output, says: &[&str]| {
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "accepted: {err}");
        assert!(says.iter().all(|s| err.contains(s)), "{err}");
    };

    // A name that is no platform, refused before anything is dialled.
    refused(
        add(
            "typo",
            &["--fingerprint", &fingerprint, "--platform", "andriod"],
        ),
        &["andriod", "linux, android"],
    );
    // A Linux desktop registered as a phone, pinned or trusted on first use: refused with
    // what the agent said and the flag to give.
    let contradicted = ["runs on linux, not android", "--platform linux"];
    refused(
        add(
            "phone",
            &["--fingerprint", &fingerprint, "--platform", "android"],
        ),
        &contradicted,
    );
    refused(
        add("phone", &["--trust", "--platform", "android"]),
        &contradicted,
    );
    let envs = sb.registry().load().unwrap().envs;
    assert!(
        !envs.contains_key("typo") && !envs.contains_key("phone"),
        "{envs:?}"
    );

    // What the agent says is accepted, and written.
    sb.pincer_ok(&[
        "env",
        "add",
        "again",
        &addr,
        "--token-file",
        &token,
        "--trust",
    ]);
    assert_eq!(
        sb.registry().load().unwrap().envs["again"].platform,
        pincer_shared::Platform::Linux
    );
    drop(d);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guests_can_dial_in_and_come_back() {
    let dir = tempfile::tempdir().unwrap();
    let (listener, host_id, token_file) = pincer_tests::dial_in_host(dir.path());
    let port = listener.local_addr().unwrap().port();
    let spawn_agent = || {
        Command::new(bin("pincer-agent"))
            .args([
                "--connect",
                &format!("127.0.0.1:{port}"),
                "--name",
                "dialer",
                "--token-file",
            ])
            .arg(&token_file)
            .arg("--state-dir")
            .arg(dir.path().join("agent"))
            .arg("--host-fingerprint")
            .arg(host_id.fingerprint().to_string())
            .env_remove("DISPLAY")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    };
    let mut agent = spawn_agent();
    let arrival = tokio::time::timeout(Duration::from_secs(20), listener.next())
        .await
        .expect("the guest dials in")
        .unwrap();
    assert!(arrival.newly_trusted);
    let env = arrival.env;
    assert_eq!(env.name(), "dialer");
    env.ping().await.unwrap();
    let first_pid = env.info().unwrap().pid;

    agent.kill().unwrap();
    agent.wait().unwrap();
    let mut agent = spawn_agent();
    let back = eventually(Duration::from_secs(30), || async { env.ping().await.ok() }).await;
    assert!(back.is_some(), "the dial-in guest never came back");
    assert_ne!(env.info().unwrap().pid, first_pid);
    agent.kill().unwrap();
    let _ = agent.wait();
}

/// A `pincer-agent` child process, killed on drop.
struct Agent(std::process::Child);

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A UDP port on loopback that was free a moment ago.
fn free_udp_port() -> u16 {
    std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dial_in_guests_are_reached_by_name_from_every_command() {
    let sb = Sandbox::new();
    // The desktop lends the guest its X display.
    let d = sb.desktop("dx", "640x480", &["--no-wm"]);
    let state = d.state();
    let session: Vec<(String, String)> = ["DISPLAY", "XAUTHORITY", "PINCER_DESKTOP_ID"]
        .iter()
        .map(|k| {
            (
                (*k).to_owned(),
                state["env"][k].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let listen_addr = format!("127.0.0.1:{}", free_udp_port());

    // `env listen --accept-new` pins the first guest and writes it to the envs file.
    let mut listen = sb
        .pincer_command(&[
            "env",
            "listen",
            &listen_addr,
            "--accept-new",
            "--count",
            "1",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(listen.stdout.take().unwrap());
    let mut banner = String::new();
    for _ in 0..2 {
        std::io::BufRead::read_line(&mut out, &mut banner).unwrap();
    }
    // "  pincer-agent --connect HOST:PORT --token-file FILE --host-fingerprint FP"
    let words: Vec<&str> = banner.split_whitespace().collect();
    let after = |flag: &str| words[words.iter().position(|w| *w == flag).unwrap() + 1];
    let (token_file, host_fp) = (after("--token-file"), after("--host-fingerprint"));
    let agent = |name: &str, state_dir: &std::path::Path| {
        Agent(
            Command::new(bin("pincer-agent"))
                .args(["--connect", &listen_addr, "--name", name])
                .args(["--token-file", token_file, "--host-fingerprint", host_fp])
                .arg("--state-dir")
                .arg(state_dir)
                .envs(session.iter().cloned())
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        )
    };
    let dialer_dir = sb.path().join("dialer-agent");
    let dialer = agent("dialer", &dialer_dir);
    let listened = eventually(Duration::from_secs(20), || {
        let exited = listen.try_wait().unwrap();
        async move { exited }
    })
    .await
    .expect("env listen registers the guest and exits");
    let mut printed = String::new();
    std::io::Read::read_to_string(&mut out, &mut printed).unwrap();
    assert!(listened.success(), "{printed}");
    assert!(
        printed.contains("guest 'dialer' registered") && printed.contains("newly trusted"),
        "{printed}"
    );
    let fp = Command::new(bin("pincer-agent"))
        .args(["--print-fingerprint", "--name", "dialer", "--state-dir"])
        .arg(&dialer_dir)
        .output()
        .unwrap();
    let fp = String::from_utf8(fp.stdout).unwrap().trim().to_owned();
    let entry = sb.registry().load().unwrap().envs["dialer"].clone();
    assert_eq!(entry.listen.as_deref(), Some(listen_addr.as_str()));
    assert_eq!(entry.addr, None);
    assert_eq!(entry.fingerprint.as_deref(), Some(fp.as_str()));

    // Every command now reaches the guest by name, each with its own listener, promptly.
    let timed = |args: &[&str]| {
        let started = std::time::Instant::now();
        let out = sb.pincer_ok(args);
        let took = started.elapsed();
        assert!(
            took < Duration::from_secs(5),
            "pincer {args:?} took {took:?}"
        );
        out
    };
    let pong = timed(&["env", "ping", "--env", "dialer", "-c", "2"]);
    assert_eq!(pong.matches("pong from 'dialer'").count(), 2, "{pong}");
    let shot = sb.path().join("dialer.png");
    let said = timed(&[
        "screenshot",
        "--env",
        "dialer",
        "-o",
        shot.to_str().unwrap(),
    ]);
    assert!(said.contains("640x480"), "{said}");
    assert_eq!(&std::fs::read(&shot).unwrap()[..8], b"\x89PNG\r\n\x1a\n");
    let info: serde_json::Value =
        serde_json::from_str(&timed(&["env", "info", "--env", "dialer", "--json"])).unwrap();
    assert_eq!(info["name"], "dialer");
    assert_eq!(info["screen"]["width"], 640);
    let list = timed(&["env", "list"]);
    let line = list.lines().find(|l| l.starts_with("dialer")).unwrap_or("");
    assert!(line.contains("dial-in") && line.contains("up ("), "{list}");

    // An impostor under the pinned name and a stranger are both refused, and the command
    // says how to start the real guest.
    drop(dialer);
    let _impostor = agent("dialer", &sb.path().join("impostor-agent"));
    let _stranger = agent("stranger", &sb.path().join("stranger-agent"));
    let refused = sb.pincer(&["env", "ping", "--env", "dialer"]);
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "{err}");
    assert!(
        err.contains("certificate fingerprint mismatch")
            && err.contains("refusing guest with unpinned certificate"),
        "{err}"
    );
    assert!(
        err.contains(&format!("no guest 'dialer' dialled in to {listen_addr}"))
            && err.contains(&format!(
                "pincer-agent --connect THIS_HOST:{}",
                &listen_addr[10..]
            )),
        "{err}"
    );
    let entry = sb.registry().load().unwrap().envs["dialer"].clone();
    assert_eq!(
        entry.fingerprint.as_deref(),
        Some(fp.as_str()),
        "the pin changed"
    );
}

/// What identifies a desktop's processes, from its state file.
struct DesktopTraits {
    marker: String,
    display: String,
    bus: String,
    dir: String,
    /// Its private runtime directory (a short one, not under `dir`).
    runtime: String,
}

/// Every live process of the machine that belongs to the desktop by a reading of /proc
/// that does not share `desktop down`'s rule (session or marker): the marker, the display
/// or the bus in its environment, or the desktop's directory or runtime directory (Xvfb's
/// auth file, the D-Bus sockets, the AT-SPI bus) in its command line. Each as (pid, comm, command line).
fn belonging_to(d: &DesktopTraits) -> Vec<(u32, String, String)> {
    let wanted_env = [
        format!("PINCER_DESKTOP_ID={}", d.marker),
        format!("DISPLAY={}", d.display),
        format!("DBUS_SESSION_BUS_ADDRESS={}", d.bus),
    ];
    let me = std::process::id();
    // A process older than this test is no part of its desktop, even if it names the same
    // display (a desktop of an earlier, killed run whose X server is gone).
    let test_began = ProcessEntry::read(me).expect("this test's process").started;
    processes()
        .into_iter()
        .filter(|p| p.pid != me && !matches!(p.state, 'Z' | 'X') && p.started >= test_began)
        .filter(|p| {
            p.cmdline.contains(&d.dir)
                || p.cmdline.contains(&d.runtime)
                || p.environ()
                    .iter()
                    .any(|kv| wanted_env.iter().any(|w| kv == w.as_bytes()))
        })
        .map(|p| (p.pid, p.comm, p.cmdline))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn desktop_down_stops_every_process_including_activated_helpers() {
    let sb = Sandbox::new();
    let d = sb.desktop("teardown", "800x600", &[]);
    let env = d.connect().await;
    env.launch(
        vec![
            "zenity".into(),
            "--info".into(),
            "--text".into(),
            "bye".into(),
        ],
        vec![],
    )
    .await
    .unwrap();
    // A tree walk makes D-Bus activate the AT-SPI registry daemon.
    let _ = pincer_tests::wait_for_node(&env, "zenity", |n| n.role == "push button").await;
    let state = d.state();
    let var = |k: &str| state["env"][k].as_str().unwrap().to_owned();
    let traits = DesktopTraits {
        marker: var("PINCER_DESKTOP_ID"),
        display: var("DISPLAY"),
        bus: var("DBUS_SESSION_BUS_ADDRESS"),
        dir: sb
            .path()
            .join("state/desktops/teardown")
            .display()
            .to_string(),
        runtime: var("XDG_RUNTIME_DIR"),
    };
    let before = belonging_to(&traits);
    let named = |comm: &str, with: &str| {
        before
            .iter()
            .any(|(_, c, cmd)| c == comm && cmd.contains(with))
    };
    // The scan sees each part by name, with what makes it this desktop's.
    let auth = format!("{}/Xauthority", traits.runtime);
    let bus_path = traits.bus.trim_start_matches("unix:path=");
    let bus_path = bus_path.split(',').next().unwrap();
    assert!(
        named("Xvfb", &auth),
        "Xvfb with this desktop's auth: {before:?}"
    );
    assert!(
        named("dbus-daemon", bus_path),
        "the session bus at {bus_path}: {before:?}"
    );
    for helper in [
        "openbox",
        "pincer-agent",
        "zenity",
        "at-spi-bus-laun",
        "at-spi2-registr",
    ] {
        assert!(
            named(helper, ""),
            "{helper} not found before down: {before:?}"
        );
    }
    // The AT-SPI bus's own dbus-daemon, started by the launcher, not by the supervisor.
    let buses = before.iter().filter(|(_, c, _)| c == "dbus-daemon").count();
    assert!(buses >= 2, "the accessibility bus is missing: {before:?}");

    let out = sb.pincer_ok(&["desktop", "down", "teardown"]);
    assert!(out.contains("stopped"), "{out}");
    let left = belonging_to(&traits);
    assert!(left.is_empty(), "processes left after down: {left:?}");
    let socket = format!("/tmp/.X11-unix/X{}", traits.display.trim_start_matches(':'));
    assert!(
        !std::path::Path::new(&socket).exists(),
        "{socket} is still there"
    );
    assert!(
        !std::path::Path::new(&traits.runtime).exists(),
        "{} is still there",
        traits.runtime
    );
    assert!(sb.registry().load().unwrap().envs.is_empty());
    std::mem::forget(d);
}
