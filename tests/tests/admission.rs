//! Admission against a real agent under attack over loopback: floods of connections that
//! never authenticate (from the host's own address and others), what such a connection
//! can make the agent hold, and an agent that is busy for real.

use pincer::env::{ClientError, Deadlines, EnvSpec, Environment};
use pincer_shared::identity::Token;
use pincer_shared::limits::MAX_HELLO;
use pincer_shared::transport::{Link, quic};
use pincer_tests::{Sandbox, bin};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use tokio::time::Instant;

/// A `pincer-agent` listening on a loopback port, without a desktop, logging with its
/// default filter to a file; killed on drop.
struct BareAgent {
    child: Child,
    spec: EnvSpec,
    log: PathBuf,
    dir: tempfile::TempDir,
}

impl BareAgent {
    fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let ready = dir.path().join("ready.json");
        let log = dir.path().join("agent.log");
        let token_file = dir.path().join("token");
        let child = Command::new(bin("pincer-agent"))
            .args(["--listen", "127.0.0.1:0", "--name", "flooded"])
            .arg("--state-dir")
            .arg(dir.path().join("state"))
            .arg("--token-file")
            .arg(&token_file)
            .arg("--ready-file")
            .arg(&ready)
            .env_remove("DISPLAY")
            .env_remove("PINCER_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let started = std::time::Instant::now();
        let ready: serde_json::Value = loop {
            if let Ok(text) = std::fs::read_to_string(&ready)
                && let Ok(v) = serde_json::from_str(&text)
            {
                break v;
            }
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "the agent never got ready"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        let spec = EnvSpec {
            name: "flooded".into(),
            addr: ready["addr"].as_str().unwrap().parse().unwrap(),
            transport: pincer::env::Transport::Udp,
            fingerprint: Some(ready["fingerprint"].as_str().unwrap().parse().unwrap()),
            token: Token::load(&token_file).unwrap(),
        };
        Self {
            child,
            spec,
            log,
            dir,
        }
    }

    /// Resident memory, KiB.
    fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap()
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap()
    }
}

impl Drop for BareAgent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A connection from `ep` to the agent, once TLS is done; `Err` says whether the agent
/// turned it away for load.
async fn tls(ep: &quinn::Endpoint, spec: &EnvSpec) -> Result<quinn::Connection, bool> {
    let pin = quic::ServerPin::Pinned(spec.fingerprint.unwrap());
    let (cfg, seen) = quic::client_config(spec.addr, pin, None).unwrap();
    match tokio::time::timeout(
        Duration::from_secs(5),
        quic::connect(ep, spec.addr, cfg, &seen, pin),
    )
    .await
    {
        Ok(Ok(c)) => Ok(c),
        Ok(Err(e)) => Err(e.busy().is_some()),
        Err(_) => Err(false),
    }
}

/// What a flooding connection does after TLS.
#[derive(Debug, Clone, Copy)]
enum Flood {
    /// Nothing.
    Silent,
    /// Opens a stream and starts a hello that never ends.
    Partial,
    /// Sends a frame that is not a hello.
    Junk,
}

/// Makes connections of `kind` from `ip`, `at_once` at a time, each held until the agent
/// drops it or `until`, until `max` were made or `until`; how many the agent turned away
/// for load (pushed out for newer ones, or refused).
async fn flood(
    ip: [u8; 4],
    spec: EnvSpec,
    kind: Flood,
    at_once: usize,
    max: usize,
    until: Instant,
) -> usize {
    let ep = quinn::Endpoint::client((ip, 0).into()).unwrap();
    let mut running = tokio::task::JoinSet::new();
    let (mut made, mut turned_away) = (0, 0);
    loop {
        while running.len() < at_once && made < max && Instant::now() < until {
            made += 1;
            let (ep, spec) = (ep.clone(), spec.clone());
            running.spawn(async move {
                let conn = match tls(&ep, &spec).await {
                    Ok(c) => c,
                    Err(busy) => return busy,
                };
                // Held until the connection ends.
                let mut _stream = None;
                match kind {
                    Flood::Silent => {}
                    Flood::Partial => {
                        if let Ok((mut s, r)) = conn.open_bi().await {
                            let _ = s.write_all(&MAX_HELLO.to_le_bytes()).await;
                            let _ = s.write_all(&[1; 100]).await;
                            _stream = Some((s, r));
                        }
                    }
                    Flood::Junk => {
                        if let Ok((mut s, r)) = conn.open_bi().await {
                            let _ = s.write_all(&[3, 0, 0, 0, 0xff, 0xff, 0xff]).await;
                            let _ = s.finish();
                            _stream = Some((s, r));
                        }
                    }
                }
                let link = Link::Quic(conn);
                let _ = tokio::time::timeout_at(until, link.closed()).await;
                let busy = link.busy().is_some();
                link.close(0, "flood over");
                busy
            });
        }
        match running.join_next().await {
            Some(done) => turned_away += usize::from(done.unwrap()),
            None => return turned_away,
        }
    }
}

/// Connects afresh and pings, as a one-shot command does.
async fn fresh_ping(spec: &EnvSpec, deadlines: &Deadlines) -> Result<Duration, ClientError> {
    let env = Environment::connect(spec.clone(), deadlines.clone()).await?;
    let rtt = env.ping().await;
    env.close();
    rtt
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hosts_get_in_while_unauthenticated_peers_flood() {
    let agent = BareAgent::start();
    let spec = agent.spec.clone();
    // A host's usual deadlines: 3 s to connect, busy retries included.
    let deadlines = Deadlines::default();
    let started = Instant::now();

    // A burst of 200 silent connections from the host's own address, and the host in the
    // middle of it.
    let burst = tokio::spawn(flood(
        [127, 0, 0, 1],
        spec.clone(),
        Flood::Silent,
        200,
        200,
        Instant::now() + Duration::from_secs(8),
    ));
    tokio::time::sleep(Duration::from_millis(20)).await;
    fresh_ping(&spec, &deadlines)
        .await
        .expect("a host gets in during a burst from its own address");

    // A sustained flood of every kind from the host's address and four others, while the
    // host connects afresh again and again.
    let until = Instant::now() + Duration::from_secs(8);
    let kinds = [Flood::Silent, Flood::Partial, Flood::Junk, Flood::Partial];
    let floods: Vec<_> = (1..=4u8)
        .map(|last| {
            let kind = kinds[usize::from(last) - 1];
            tokio::spawn(flood(
                [127, 0, 0, last + 1],
                spec.clone(),
                kind,
                24,
                800,
                until,
            ))
        })
        .chain([tokio::spawn(flood(
            [127, 0, 0, 1],
            spec.clone(),
            Flood::Silent,
            24,
            800,
            until,
        ))])
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    for round in 0..5 {
        fresh_ping(&spec, &deadlines)
            .await
            .unwrap_or_else(|e| panic!("round {round} during the flood: {e}"));
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let mut turned_away = burst.await.unwrap();
    for f in floods {
        turned_away += f.await.unwrap();
    }
    // The flood was real: it kept the pending budget full.
    assert!(
        turned_away >= 64,
        "only {turned_away} connections turned away"
    );

    // The agent said so with its default log filter, in a line a second, not one per
    // connection.
    let log = agent.log();
    let summaries = log
        .lines()
        .filter(|l| l.contains("turned away or failed before authenticating"))
        .count();
    assert!(
        log.contains("pushed out by newer arrivals") && log.contains("most from 127.0.0."),
        "{log}"
    );
    let seconds = started.elapsed().as_secs() as usize;
    assert!(
        (1..=seconds + 2).contains(&summaries),
        "{summaries} summaries in {seconds} s:\n{log}"
    );
    assert!(
        log.lines().count() < summaries + 40,
        "the log grew with the flood:\n{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unauthenticated_connections_cannot_make_the_agent_hold_much() {
    let agent = BareAgent::start();
    let spec = agent.spec.clone();
    // Warm up the agent's allocator and threads with one real host.
    fresh_ping(&spec, &Deadlines::default()).await.unwrap();
    let before = agent.rss_kib();
    let mut held = Vec::new();
    for i in 0..16u8 {
        let ep = quinn::Endpoint::client(([127, 0, 0, 2 + i % 4], 0).into()).unwrap();
        let conn = tls(&ep, &spec).await.expect("TLS completes");
        // A hello that never ends keeps the agent waiting...
        let (mut first, r) = conn.open_bi().await.unwrap();
        first.write_all(&MAX_HELLO.to_le_bytes()).await.unwrap();
        first.write_all(&[0; 1000]).await.unwrap();
        // ...and 10 MiB on every further stream the agent grants.
        let junk = vec![7u8; 10 << 20];
        let mut opened = 0;
        while let Ok(Ok((mut s, r2))) =
            tokio::time::timeout(Duration::from_millis(200), conn.open_bi()).await
        {
            opened += 1;
            let _ = tokio::time::timeout(Duration::from_secs(1), s.write_all(&junk)).await;
            held.push((s, r2));
            if opened == 4 {
                break;
            }
        }
        assert_eq!(opened, 0, "streams opened before the hello");
        held.push((first, r));
        std::mem::forget(ep);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let grew = agent.rss_kib().saturating_sub(before);
    assert!(
        grew < 16 * 1024,
        "16 connections that never authenticated grew the agent by {grew} KiB"
    );
    // The agent still serves hosts.
    fresh_ping(&spec, &Deadlines::default()).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_agent_is_reported_busy_and_dialled_again() {
    let agent = BareAgent::start();
    let spec = agent.spec.clone();
    // Every authenticated place taken (the agent serves 64 hosts at once).
    let mut hosts = Vec::new();
    for _ in 0..64 {
        hosts.push(
            Environment::connect(spec.clone(), Deadlines::default())
                .await
                .unwrap(),
        );
    }
    let short = Deadlines {
        connect: Duration::from_secs(1),
        ..Default::default()
    };
    let t = Instant::now();
    match Environment::connect(spec.clone(), short).await {
        Err(e @ ClientError::Busy { .. }) => {
            let msg = e.to_string();
            assert!(
                msg.contains("is running but busy") && !msg.contains("no agent"),
                "{msg}"
            );
            assert!(e.is_environment_failure());
        }
        other => panic!("expected busy, got {other:?}"),
    }
    let took = t.elapsed();
    assert!(
        took >= Duration::from_millis(500) && took < Duration::from_secs(3),
        "gave up after {took:?}, not at the deadline"
    );

    // A place frees up while a host is dialling: it gets in within its deadline.
    let dialling = tokio::spawn({
        let spec = spec.clone();
        async move { fresh_ping(&spec, &Deadlines::default()).await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    hosts.pop().unwrap().close();
    dialling
        .await
        .unwrap()
        .expect("the host dialled again and got the freed place");
    let log = agent.log();
    assert!(
        log.contains("refused (last: 127.0.0.1") && log.contains("64 connections are already open"),
        "{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_shot_commands_free_their_place_as_they_exit() {
    let agent = BareAgent::start();
    let sb = Sandbox::new();
    let token = agent.dir.path().join("token");
    let fingerprint = agent.spec.fingerprint.unwrap().to_string();
    let addr = agent.spec.addr.to_string();
    sb.pincer_ok(&[
        "env",
        "add",
        "bare",
        &addr,
        "--token-file",
        token.to_str().unwrap(),
        "--fingerprint",
        &fingerprint,
    ]);
    // More commands than the agent has places (64), well within its idle timeout (20 s):
    // each tells the agent it is gone as it exits.
    for i in 0..80 {
        let out = sb.pincer(&["env", "ping", "--env", "bare", "-c", "1"]);
        assert!(
            out.status.success(),
            "ping {i}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let log = agent.log();
    assert!(
        log.matches("closed by peer: host done").count() >= 80,
        "{log}"
    );
}
