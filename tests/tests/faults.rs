//! Task runs through a bad network: a user-space relay (`pincer_tests::relay`, as this
//! machine's kernel has no netem) between `pincer run` and a real desktop's agent on
//! loopback, dropping, delaying, reordering, duplicating and rate-limiting QUIC's
//! datagrams, or blacking the link out (both ways or one) in the middle of a task. Every
//! run must finish, with its one record, scored as the agent did (the oracle passes),
//! never as an infrastructure failure; so must a run whose datagrams start coming from
//! another port mid-task (a NAT rebinding), one whose TCP tunnel goes silent without a FIN
//! or is reset, and a cross-environment task with both desktops behind faulty links. A
//! task whose agent is SIGKILLed and restarted mid-task is never scored as the agent's
//! failure: it rides the restart out, or is recorded as an environment error and run once
//! more. A host run SIGKILLed mid-task resumes with every task run recorded once. A run
//! whose run directory's disk fills up (its records or a trajectory) stops, saying so and
//! how to go on, and `--resume` finishes it with every task run recorded once.
//!
//! The `fault_matrix*` tests (ignored here) are `./run.sh bench`'s longer matrix: many
//! task runs per fault, the whole suite, fresh connections, each printed as a table.

use pincer_tests::relay::{Faults, LocalAddress, TcpFault, TcpRelay, UdpRelay, Way};
use pincer_tests::{Sandbox, results};
use serde_json::Value;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// A one-desktop task of the bundled suite whose oracle types into a terminal.
const TASK: &str = "terminal-count-lines";

/// Runs [`TASK`] with the oracle on the environment `env`: its records and how long it took.
fn run(sb: &Sandbox, env: &str) -> (Vec<Value>, Duration) {
    run_n(sb, env, 1)
}

/// Runs [`TASK`] `n` times with the oracle on the environment `env`, one after the other
/// in one run: its records and how long it took.
fn run_n(sb: &Sandbox, env: &str, n: u32) -> (Vec<Value>, Duration) {
    let out = sb.path().join(format!("run-{env}"));
    let t = Instant::now();
    sb.pincer_ok(&[
        "run",
        "--tasks",
        "demo",
        "--task",
        TASK,
        "--repeat",
        &n.to_string(),
        "--set",
        &format!("desktop={env}"),
        "--agent",
        "oracle",
        "--no-report",
        "--out",
        out.to_str().unwrap(),
    ]);
    (results(&out), t.elapsed())
}

/// A desktop's agent as registered, which a test reaches again through a relay.
struct Agent {
    addr: std::net::SocketAddr,
    token: String,
    fingerprint: String,
}

impl Agent {
    /// The agent of the desktop `name`.
    fn of(sb: &Sandbox, name: &str) -> Self {
        let entry = sb.registry().load().unwrap().envs[name].clone();
        Self {
            addr: entry.addr.unwrap().parse().unwrap(),
            token: entry.token_file.to_str().unwrap().to_owned(),
            fingerprint: entry.fingerprint.unwrap(),
        }
    }

    /// Registers the environment `name`: this agent, reached at `via` over `transport`.
    fn add_via(&self, sb: &Sandbox, name: &str, via: std::net::SocketAddr, transport: &str) {
        sb.pincer_ok(&[
            "env",
            "add",
            name,
            &via.to_string(),
            "--token-file",
            &self.token,
            "--fingerprint",
            &self.fingerprint,
            "--transport",
            transport,
        ]);
    }
}

#[test]
fn tasks_finish_and_score_through_loss_delay_reordering_a_blackout_and_a_nat_rebinding() {
    let sb = Sandbox::new();
    let _desktop = sb.desktop("fault-desk", "1024x768", &[]);
    let agent = Agent::of(&sb, "fault-desk");
    let (clean, clean_took) = run(&sb, "fault-desk");
    assert_eq!(clean.len(), 1, "{clean:?}");
    assert_eq!(clean[0]["termination"], "success", "{clean:?}");

    let cases = [
        (
            // 5 % of datagrams lost each way, 1 % sent twice, 2–12 ms of delay (so
            // reordered).
            "lossy",
            Faults {
                loss: 0.05,
                delay: Duration::from_millis(2),
                jitter: Duration::from_millis(10),
                duplicate: 0.01,
                seed: 7,
                ..Faults::default()
            },
        ),
        (
            // A long path: 40–80 ms each way, reordered.
            "slow",
            Faults {
                delay: Duration::from_millis(40),
                jitter: Duration::from_millis(40),
                seed: 11,
                ..Faults::default()
            },
        ),
        (
            // Nothing passes for 8 s from 0.3 s after the run's first datagram, in the
            // middle of its task (QUIC's idle timeout is 20 s).
            "blackout",
            Faults {
                blackout: Some((Duration::from_millis(300), Duration::from_secs(8))),
                ..Faults::default()
            },
        ),
        (
            // The host's datagrams come from a new port 0.3 s into the run, as after a NAT
            // rebinding: the agent (QUIC's server) must follow the host to it.
            "rebinding",
            Faults {
                rebind: Some(Duration::from_millis(300)),
                ..Faults::default()
            },
        ),
        (
            // 50 kB/s each way (a congested mobile link), with a router's 200 ms queue.
            "narrow",
            Faults {
                rate: Some(50_000),
                ..Faults::default()
            },
        ),
        (
            // For 3 s from 0.3 s in, the guest's datagrams are lost and the host's arrive:
            // requests are done, their replies do not come back until the link heals.
            "one-way",
            Faults {
                blackout: Some((Duration::from_millis(300), Duration::from_secs(3))),
                blackout_way: Way::ToHost,
                ..Faults::default()
            },
        ),
    ];
    for (name, faults) in cases {
        let relay = UdpRelay::start(agent.addr, faults);
        agent.add_via(&sb, name, relay.addr(), "udp");
        let (records, took) = run(&sb, name);
        let c = relay.counts();
        println!(
            "{name}: {:.1} s (clean {:.1} s); datagrams {} seen, {} lost, {} blacked out, {} duplicated, {} from the rebound port, {} dropped from a full queue",
            took.as_secs_f64(),
            clean_took.as_secs_f64(),
            c.seen.load(Ordering::Relaxed),
            c.lost.load(Ordering::Relaxed),
            c.blacked_out.load(Ordering::Relaxed),
            c.duplicated.load(Ordering::Relaxed),
            c.rebound.load(Ordering::Relaxed),
            c.queue_full.load(Ordering::Relaxed),
        );
        // No record lost, none written twice, and the agent's success scored as one.
        assert_eq!(records.len(), 1, "{name}: {records:?}");
        assert_eq!(records[0]["task"], TASK, "{name}: {records:?}");
        assert_eq!(records[0]["termination"], "success", "{name}: {records:?}");
        let hit = match name {
            "lossy" => c.lost.load(Ordering::Relaxed),
            "slow" | "narrow" => c.seen.load(Ordering::Relaxed),
            "rebinding" => c.rebound.load(Ordering::Relaxed),
            _ => c.blacked_out.load(Ordering::Relaxed),
        };
        assert!(hit > 0, "{name}: the fault never struck");
        if name == "rebinding" {
            // The guest heard the host from both ports: the port changed under the run.
            assert!(c.to_guest.load(Ordering::Relaxed) > 0, "{name}: {c:?}");
        }
        if name == "blackout" {
            assert!(took >= Duration::from_secs(8), "{name}: {took:?}");
        }
    }
}

#[test]
fn a_cross_environment_task_finishes_with_both_desktops_behind_loss_and_one_blacked_out() {
    let sb = Sandbox::new();
    let _one = sb.desktop("cross-one", "1024x768", &[]);
    let _two = sb.desktop("cross-two", "1024x768", &[]);
    let lossy = Faults {
        loss: 0.05,
        delay: Duration::from_millis(2),
        jitter: Duration::from_millis(10),
        seed: 23,
        ..Faults::default()
    };
    // The first desktop loses 5 %; the second also goes dark for 3 s, 0.5 s into the run.
    let relays = [
        UdpRelay::start(Agent::of(&sb, "cross-one").addr, lossy.clone()),
        UdpRelay::start(
            Agent::of(&sb, "cross-two").addr,
            Faults {
                blackout: Some((Duration::from_millis(500), Duration::from_secs(3))),
                ..lossy
            },
        ),
    ];
    Agent::of(&sb, "cross-one").add_via(&sb, "far-one", relays[0].addr(), "udp");
    Agent::of(&sb, "cross-two").add_via(&sb, "far-two", relays[1].addr(), "udp");
    let out = sb.path().join("run");
    let t = Instant::now();
    sb.pincer_ok(&[
        "run",
        "--tasks",
        "demo",
        "--task",
        "cross-copy-access-code",
        "--set",
        "desktop=far-one,desktop2=far-two",
        "--agent",
        "oracle",
        "--no-report",
        "--out",
        out.to_str().unwrap(),
    ]);
    let records = results(&out);
    println!(
        "cross-copy-access-code across two faulty links: {:.1} s; {} + {} datagrams lost, {} blacked out",
        t.elapsed().as_secs_f64(),
        relays[0].counts().lost.load(Ordering::Relaxed),
        relays[1].counts().lost.load(Ordering::Relaxed),
        relays[1].counts().blacked_out.load(Ordering::Relaxed),
    );
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0]["termination"], "success", "{records:?}");
    assert!(
        relays[1].counts().blacked_out.load(Ordering::Relaxed) > 0,
        "no blackout"
    );
}

/// Which task run a record is of.
fn task_run(r: &Value) -> (String, u64) {
    (
        r["task"].as_str().unwrap().to_owned(),
        r["repeat"].as_u64().unwrap(),
    )
}

/// A row of the fault matrix: what became of `n` task runs under one fault.
struct Row {
    fault: &'static str,
    n: u32,
    records: Vec<Value>,
    took: Duration,
}

impl Row {
    /// The final record of each task run (a task run that lost its environment is run
    /// once more: the later record counts).
    fn finals(&self) -> std::collections::BTreeMap<(String, u64), &Value> {
        self.records.iter().map(|r| (task_run(r), r)).collect()
    }

    /// Task runs recorded more than once other than as an environment error and its
    /// second try.
    fn twice(&self) -> usize {
        let mut per = std::collections::BTreeMap::<(String, u64), usize>::new();
        for r in &self.records {
            if r["termination"] != "environment-error" {
                *per.entry(task_run(r)).or_default() += 1;
            }
        }
        per.values().filter(|&&c| c > 1).count()
    }

    /// Final records that blame the agent: for the oracle, any that is neither a success
    /// nor an infrastructure fault.
    fn blamed(&self) -> usize {
        const INFRA: [&str; 4] = [
            "environment-error",
            "evaluator-error",
            "broken-setup",
            "aborted",
        ];
        self.finals()
            .values()
            .filter(|r| {
                r["termination"] != "success" && !INFRA.iter().any(|t| r["termination"] == *t)
            })
            .count()
    }

    fn walls(&self) -> Vec<f64> {
        let mut w: Vec<f64> = self
            .records
            .iter()
            .map(|r| r["wall_ms"].as_f64().unwrap() / 1000.0)
            .collect();
        w.sort_by(f64::total_cmp);
        w
    }

    fn print(&self, clean_p50: f64) {
        let w = self.walls();
        let p50 = w[w.len() / 2];
        let retried = self
            .records
            .iter()
            .filter(|r| r["termination"] == "environment-error")
            .count();
        println!(
            "| {} | {}/{} | {} | {} | {} | {} | {:.2} s (+{:.2} s) | {:.2} s | {:.1} s |",
            self.fault,
            self.finals()
                .values()
                .filter(|r| r["termination"] == "success")
                .count(),
            self.n,
            self.n as usize - self.finals().len(),
            self.twice(),
            self.blamed(),
            retried,
            p50,
            (p50 - clean_p50).max(0.0),
            w[w.len() - 1],
            self.took.as_secs_f64(),
        );
    }
}

/// Task runs per fault in the bench matrix: `PINCER_FAULT_REPEATS`, default 10.
fn repeats() -> u32 {
    std::env::var("PINCER_FAULT_REPEATS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10)
}

/// Prints a matrix's table under `title` (costs against its first row, the clean one),
/// then asserts what every row must hold: no task run lost, none recorded twice, none
/// blamed on the agent.
fn report(title: &str, rows: &[Row]) {
    let clean = rows[0].walls();
    let clean_p50 = clean[clean.len() / 2];
    println!("\n{title}:\n");
    println!(
        "| fault | succeeded | lost | recorded twice | failures blamed on the agent | environment errors (run again) | task run p50 (cost) | slowest task run | whole run |"
    );
    println!("|---|--:|--:|--:|--:|--:|--:|--:|--:|");
    for row in rows {
        row.print(clean_p50);
    }
    for row in rows {
        assert_eq!(
            row.finals().len() as u32,
            row.n,
            "{}: a task run was lost",
            row.fault
        );
        assert_eq!(row.twice(), 0, "{}: recorded twice", row.fault);
        assert_eq!(row.blamed(), 0, "{}: {:?}", row.fault, row.records);
    }
}

/// The longer matrix of `./run.sh bench`: every fault, `PINCER_FAULT_REPEATS` (default 10)
/// task runs each, in one table. Not in `./run.sh test`: it takes minutes.
#[test]
#[ignore = "the fault matrix of ./run.sh bench (minutes)"]
fn fault_matrix() {
    let n = repeats();
    let sb = Sandbox::new();
    let _desktop = sb.desktop("matrix-desk", "1024x768", &[]);
    let agent = Agent::of(&sb, "matrix-desk");
    let ms = Duration::from_millis;
    let udp = [
        (
            "5 % lost each way, 1 % twice, 2–12 ms",
            Faults {
                loss: 0.05,
                duplicate: 0.01,
                delay: ms(2),
                jitter: ms(10),
                seed: 7,
                ..Faults::default()
            },
        ),
        (
            "40–80 ms each way (reordered)",
            Faults {
                delay: ms(40),
                jitter: ms(40),
                seed: 11,
                ..Faults::default()
            },
        ),
        (
            "5 % lost + 20–60 ms (40 ± 20 ms, reordered)",
            Faults {
                loss: 0.05,
                delay: ms(20),
                jitter: ms(40),
                seed: 13,
                ..Faults::default()
            },
        ),
        (
            "a 10 s blackout 0.3 s in",
            Faults {
                blackout: Some((ms(300), Duration::from_secs(10))),
                ..Faults::default()
            },
        ),
        (
            "a NAT rebinding 0.3 s in",
            Faults {
                rebind: Some(ms(300)),
                ..Faults::default()
            },
        ),
        (
            "50 kB/s each way, a 200 ms queue",
            Faults {
                rate: Some(50_000),
                ..Faults::default()
            },
        ),
        (
            "replies lost for 10 s, 0.3 s in (one way)",
            Faults {
                blackout: Some((ms(300), Duration::from_secs(10))),
                blackout_way: Way::ToHost,
                ..Faults::default()
            },
        ),
    ];
    let mut rows = Vec::new();
    let (records, took) = run_n(&sb, "matrix-desk", n);
    rows.push(Row {
        fault: "none (loopback)",
        n,
        records,
        took,
    });
    for (i, (fault, faults)) in udp.into_iter().enumerate() {
        let relay = UdpRelay::start(agent.addr, faults);
        let name = format!("udp{i}");
        agent.add_via(&sb, &name, relay.addr(), "udp");
        let (records, took) = run_n(&sb, &name, n);
        rows.push(Row {
            fault,
            n,
            records,
            took,
        });
    }
    for (fault, what) in [
        (
            "TCP tunnel: the far end silent (no FIN) 0.5 s in",
            TcpFault::Silence,
        ),
        ("TCP tunnel: reset 0.5 s in", TcpFault::Reset),
    ] {
        let relay = TcpRelay::start(agent.addr, Some((ms(500), what)));
        let name = format!("tcp-{what:?}");
        agent.add_via(&sb, &name, relay.addr(), "tcp");
        let (records, took) = run_n(&sb, &name, n);
        rows.push(Row {
            fault,
            n,
            records,
            took,
        });
    }

    report(
        &format!("{TASK} with the oracle, {n} task runs per fault, one `pincer run` each"),
        &rows,
    );
}

/// The whole bundled suite (16 tasks, the cross-environment ones on two desktops) under
/// each fault, both desktops behind a relay of their own. Part of `./run.sh bench`.
#[test]
#[ignore = "the fault matrix of ./run.sh bench (minutes)"]
fn fault_matrix_suite() {
    let sb = Sandbox::new();
    let _one = sb.desktop("suite-one", "1280x800", &[]);
    let _two = sb.desktop("suite-two", "1280x800", &[]);
    let agents = [Agent::of(&sb, "suite-one"), Agent::of(&sb, "suite-two")];
    let ms = Duration::from_millis;
    let faults: [(&str, Option<Faults>); 4] = [
        ("none (loopback)", None),
        (
            "5 % lost each way, 1 % twice, 2–12 ms",
            Some(Faults {
                loss: 0.05,
                duplicate: 0.01,
                delay: ms(2),
                jitter: ms(10),
                seed: 17,
                ..Faults::default()
            }),
        ),
        (
            "5 % lost + 20–60 ms (40 ± 20 ms, reordered)",
            Some(Faults {
                loss: 0.05,
                delay: ms(20),
                jitter: ms(40),
                seed: 19,
                ..Faults::default()
            }),
        ),
        (
            "a 10 s blackout 0.3 s in",
            Some(Faults {
                blackout: Some((ms(300), Duration::from_secs(10))),
                ..Faults::default()
            }),
        ),
    ];
    let mut rows = Vec::new();
    for (i, (fault, faults)) in faults.into_iter().enumerate() {
        let mut relays = Vec::new();
        let mut names = Vec::new();
        for (k, agent) in agents.iter().enumerate() {
            let name = match &faults {
                None => ["suite-one", "suite-two"][k].to_owned(),
                Some(f) => {
                    let relay = UdpRelay::start(agent.addr, f.clone());
                    let name = format!("suite{i}-{k}");
                    agent.add_via(&sb, &name, relay.addr(), "udp");
                    relays.push(relay);
                    name
                }
            };
            names.push(name);
        }
        let out = sb.path().join(format!("suite-run-{i}"));
        let t = Instant::now();
        sb.pincer_ok(&[
            "run",
            "--tasks",
            "demo",
            "--set",
            &format!("desktop={},desktop2={}", names[0], names[1]),
            "--agent",
            "oracle",
            "--no-report",
            "--out",
            out.to_str().unwrap(),
        ]);
        let records = results(&out);
        rows.push(Row {
            fault,
            n: 16,
            records,
            took: t.elapsed(),
        });
    }
    report(
        "the bundled suite (16 tasks) with the oracle, once per fault, both desktops behind it",
        &rows,
    );
}

/// Fresh connections (a new `pincer env info` process each: QUIC's handshake, then
/// pincer's hello) through loss and delay, `PINCER_FAULT_REPEATS` x 3 per fault: how many
/// fail and how long they take. Part of `./run.sh bench`'s fault matrix.
#[test]
#[ignore = "the fault matrix of ./run.sh bench (minutes)"]
fn fault_matrix_connections() {
    let n = repeats() * 3;
    let sb = Sandbox::new();
    let _desktop = sb.desktop("conn-desk", "1024x768", &[]);
    let agent = Agent::of(&sb, "conn-desk");
    let ms = Duration::from_millis;
    let cases = [
        ("none (loopback)", None),
        (
            "5 % lost each way, 2–12 ms",
            Some(Faults {
                loss: 0.05,
                delay: ms(2),
                jitter: ms(10),
                seed: 3,
                ..Faults::default()
            }),
        ),
        (
            "40–80 ms each way",
            Some(Faults {
                delay: ms(40),
                jitter: ms(40),
                seed: 5,
                ..Faults::default()
            }),
        ),
        (
            "5 % lost + 40–80 ms",
            Some(Faults {
                loss: 0.05,
                delay: ms(40),
                jitter: ms(40),
                seed: 9,
                ..Faults::default()
            }),
        ),
    ];
    // The host guesses a loopback path's round trip at 10 ms and any other's at 100 ms
    // (`quic::initial_rtt`): each fault through a relay on 127.0.0.1 and on an address of
    // the network's kind.
    let network = LocalAddress::add();
    let paths = [
        (
            "loopback",
            std::net::IpAddr::from(std::net::Ipv4Addr::LOCALHOST),
        ),
        ("network (198.18/15 on lo)", network.ip()),
    ];
    let cases: Vec<(&str, &str, Option<Faults>)> = cases
        .into_iter()
        .flat_map(|(fault, faults)| match faults {
            None => vec![(fault, "direct", None)],
            Some(f) => paths
                .iter()
                .map(|(path, _)| (fault, *path, Some(f.clone())))
                .collect(),
        })
        .collect();
    println!("\n{n} fresh connections per fault (`pincer env info`, a new process each):\n");
    println!("| fault | host dials | failed | p50 | p95 | slowest |");
    println!("|---|---|--:|--:|--:|--:|");
    for (i, (fault, path, faults)) in cases.into_iter().enumerate() {
        let (name, _relay) = match faults {
            None => ("conn-desk".to_owned(), None),
            Some(f) => {
                let ip = paths.iter().find(|(p, _)| *p == path).unwrap().1;
                let relay = UdpRelay::start_at(ip, agent.addr, f);
                let name = format!("conn{i}");
                agent.add_via(&sb, &name, relay.addr(), "udp");
                (name, Some(relay))
            }
        };
        let mut took = Vec::new();
        let mut failed = Vec::new();
        for _ in 0..n {
            let t = Instant::now();
            let out = sb.pincer(&["env", "info", "--env", &name]);
            took.push(t.elapsed().as_secs_f64());
            if !out.status.success() {
                failed.push(String::from_utf8_lossy(&out.stderr).trim().to_owned());
            }
        }
        took.sort_by(f64::total_cmp);
        let at = |q: f64| took[((took.len() - 1) as f64 * q).round() as usize];
        println!(
            "| {fault} | {path} | {}/{n} | {:.2} s | {:.2} s | {:.2} s |",
            failed.len(),
            at(0.5),
            at(0.95),
            took[took.len() - 1]
        );
        for f in &failed {
            println!("  failed: {f}");
        }
        // A failure is named, never a hang: every attempt ended within the connect
        // deadline and a call's.
        assert!(took[took.len() - 1] < 30.0, "{fault}: {took:?}");
        if i == 0 {
            assert!(failed.is_empty(), "on plain loopback: {failed:?}");
        }
    }
}

#[test]
fn a_task_finishes_through_a_tcp_tunnel_whose_far_end_goes_silent_or_resets() {
    let sb = Sandbox::new();
    let _desktop = sb.desktop("tunnel-desk", "1024x768", &[]);
    let agent = Agent::of(&sb, "tunnel-desk");
    let clean_relay = TcpRelay::start(agent.addr, None);
    agent.add_via(&sb, "tunnel", clean_relay.addr(), "tcp");
    let (clean, clean_took) = run(&sb, "tunnel");
    assert_eq!(clean.len(), 1, "{clean:?}");
    assert_eq!(clean[0]["termination"], "success", "{clean:?}");
    // 0.5 s into the run the forward's far end vanishes without a FIN: the connection stays
    // open and carries nothing. The host gives it up after SILENT_PEER and dials again.
    // Or the forward is reset: the host's tunnel sees it at once and dials again.
    for (name, fault) in [("silent", TcpFault::Silence), ("reset", TcpFault::Reset)] {
        let relay = TcpRelay::start(agent.addr, Some((Duration::from_millis(500), fault)));
        agent.add_via(&sb, name, relay.addr(), "tcp");
        let (records, took) = run(&sb, name);
        println!(
            "tunnel {name}: {:.1} s (clean {:.1} s); {} connections, {} struck",
            took.as_secs_f64(),
            clean_took.as_secs_f64(),
            relay.accepted.load(Ordering::Relaxed),
            relay.silenced.load(Ordering::Relaxed),
        );
        assert_eq!(records.len(), 1, "{name}: {records:?}");
        assert_eq!(records[0]["termination"], "success", "{name}: {records:?}");
        assert!(
            relay.silenced.load(Ordering::Relaxed) >= 1,
            "{name}: the fault never struck"
        );
        assert!(
            relay.accepted.load(Ordering::Relaxed) > relay.silenced.load(Ordering::Relaxed),
            "{name}: the host dialled again"
        );
    }
}

#[test]
fn a_run_sigkilled_on_a_lossy_link_resumes_with_every_task_run_recorded_once() {
    let sb = Sandbox::new();
    let _desktop = sb.desktop("resume-desk", "1024x768", &[]);
    let agent = Agent::of(&sb, "resume-desk");
    // 5 % lost each way, 2–12 ms of delay (reordered), 1 % duplicated, for both the killed
    // run and its resumption.
    let relay = UdpRelay::start(
        agent.addr,
        Faults {
            loss: 0.05,
            delay: Duration::from_millis(2),
            jitter: Duration::from_millis(10),
            duplicate: 0.01,
            seed: 5,
            ..Faults::default()
        },
    );
    agent.add_via(&sb, "lossy", relay.addr(), "udp");
    let out = sb.path().join("run");
    let args = |resume: bool| {
        let mut a = vec![
            "run",
            "--tasks",
            "demo",
            "--task",
            TASK,
            "--repeat",
            "4",
            "--set",
            "desktop=lossy",
            "--agent",
            "oracle",
            "--no-report",
            "--out",
            out.to_str().unwrap(),
        ];
        if resume {
            a.push("--resume");
        }
        a
    };
    let t = Instant::now();
    let mut killed = sb
        .pincer_command(&args(false))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // SIGKILL the host in the middle of its second task run: no cleanup, no last record.
    while results(&out).is_empty() {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "no task run finished"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    killed.kill().unwrap();
    killed.wait().unwrap();
    let before = results(&out);
    assert!(
        !before.is_empty() && before.len() < 4,
        "killed mid-run: {before:?}"
    );
    let t = Instant::now();
    let resumed = sb.pincer_ok(&args(true));
    let took = t.elapsed();
    let records = results(&out);
    println!(
        "host SIGKILLed after {} of 4 task runs, resumed through 5 % loss: the rest took {:.1} s; {} datagrams lost",
        before.len(),
        took.as_secs_f64(),
        relay.counts().lost.load(Ordering::Relaxed),
    );
    // The records of the killed run stay as written; each task run is recorded once.
    assert_eq!(&records[..before.len()], &before[..], "{resumed}");
    let mut repeats: Vec<u64> = records
        .iter()
        .map(|r| r["repeat"].as_u64().unwrap())
        .collect();
    repeats.sort();
    assert_eq!(repeats, [0, 1, 2, 3], "{records:?}");
    assert!(
        records.iter().all(|r| r["termination"] == "success"),
        "{records:?}"
    );
    assert!(relay.counts().lost.load(Ordering::Relaxed) > 0, "no loss");
}

/// A small tmpfs mounted for a test (it needs root), unmounted when dropped.
struct SmallDisk(std::path::PathBuf);

impl SmallDisk {
    fn mount(at: std::path::PathBuf, size: &str) -> Self {
        std::fs::create_dir_all(&at).unwrap();
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&at)
            .status()
            .unwrap()
            .success();
        assert!(
            ok,
            "mounting a tmpfs on {} (this test needs root)",
            at.display()
        );
        Self(at)
    }

    /// Fills the disk but for `spare` bytes; returns the filler file.
    fn fill(&self, spare: u64) -> std::path::PathBuf {
        let filler = self.0.join("filler");
        let out = std::process::Command::new("df")
            .args(["--output=avail", "-B1"])
            .arg(&self.0)
            .output()
            .unwrap();
        let free: u64 = String::from_utf8_lossy(&out.stdout)
            .lines()
            .nth(1)
            .and_then(|l| l.trim().parse().ok())
            .unwrap();
        std::fs::write(&filler, vec![0u8; free.saturating_sub(spare) as usize]).unwrap();
        filler
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

#[test]
fn a_full_run_directory_stops_the_run_saying_so_and_resume_finishes_it() {
    let sb = Sandbox::new();
    let _desktop = sb.desktop("full-desk", "1024x768", &[]);
    let disk = SmallDisk::mount(sb.path().join("small disk é"), "16m");
    let out = disk.0.join("run");
    let args = |resume: bool| {
        let mut a = vec![
            "run",
            "--tasks",
            "demo",
            "--task",
            TASK,
            "--repeat",
            "3",
            "--set",
            "desktop=full-desk",
            "--agent",
            "oracle",
            "--no-report",
            "--out",
            out.to_str().unwrap(),
        ];
        if resume {
            a.push("--resume");
        }
        a
    };
    // The run directory is made; then the disk fills up, but for a few pages, before the
    // first task run is recorded.
    std::fs::create_dir_all(&out).unwrap();
    let filler = disk.fill(48 * 1024);
    let full = sb.pincer(&args(false));
    let said = String::from_utf8_lossy(&full.stderr);
    assert!(!full.status.success(), "{said}");
    assert!(
        said.contains("No space left on device")
            && said.contains("free space there, then run the same command with --resume"),
        "{said}"
    );
    // Nothing recorded twice, nothing half-recorded counted.
    let before = results(&out);
    assert!(before.len() < 3, "{before:?}");
    std::fs::remove_file(filler).unwrap();
    sb.pincer_ok(&args(true));
    let records = results(&out);
    let mut repeats: Vec<u64> = records
        .iter()
        .map(|r| r["repeat"].as_u64().unwrap())
        .collect();
    repeats.sort();
    assert_eq!(
        repeats,
        [0, 1, 2],
        "each task run recorded once: {records:?}"
    );
    assert!(
        records.iter().all(|r| r["termination"] == "success"),
        "{records:?}"
    );
}

#[test]
fn a_trajectory_that_cannot_be_written_stops_the_run_and_resume_redoes_its_task_run() {
    let sb = Sandbox::new();
    let _desktop = sb.desktop("traj-desk", "1024x768", &[]);
    let out = sb.path().join("run été");
    let args = |resume: bool| {
        let mut a = vec![
            "run",
            "--tasks",
            "demo",
            "--task",
            TASK,
            "--repeat",
            "2",
            "--set",
            "desktop=traj-desk",
            "--agent",
            "oracle",
            "--no-report",
            "--out",
            out.to_str().unwrap(),
        ];
        if resume {
            a.push("--resume");
        }
        a
    };
    // The trajectories' disk is full; results.jsonl's is not (a run directory on one disk
    // and its tasks/ on another, or a disk with room for a line but not a screenshot).
    let disk = SmallDisk::mount(out.join("tasks"), "4m");
    disk.fill(0);
    let stopped = sb.pincer(&args(false));
    let said = String::from_utf8_lossy(&stopped.stderr);
    assert!(!stopped.status.success(), "{said}");
    assert!(
        said.contains("writing the trajectory")
            && said.contains("No space left on device")
            && said.contains("then run the same command with --resume"),
        "{said}"
    );
    // No task run is recorded without its trajectory.
    assert!(results(&out).is_empty(), "{:?}", results(&out));
    drop(disk);
    sb.pincer_ok(&args(true));
    let records = results(&out);
    assert_eq!(records.len(), 2, "{records:?}");
    for r in &records {
        assert_eq!(r["termination"], "success", "{r}");
        let traj = out.join(r["trajectory"].as_str().unwrap());
        let steps = std::fs::read_to_string(traj.join("steps.jsonl")).unwrap();
        assert!(steps.lines().count() >= 1, "{r}");
        for step in steps.lines() {
            let step: Value = serde_json::from_str(step).unwrap();
            let images = step["images"].as_array().unwrap();
            assert!(!images.is_empty(), "what the agent saw: {step}");
            for i in images {
                let f = traj.join(i["file"].as_str().unwrap());
                assert!(std::fs::metadata(&f).unwrap().len() > 0, "{}", f.display());
            }
        }
    }
}

/// The processes of the session `sid` named `comm` (a desktop's processes share its
/// supervisor's session).
fn in_session(sid: u32, comm: &str) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let Some((name, rest)) = stat.split_once(" (").and_then(|(_, r)| r.rsplit_once(')'))
            else {
                return false;
            };
            // state ppid pgrp session ...
            name == comm && rest.split_whitespace().nth(3) == Some(&sid.to_string())
        })
        .collect()
}

#[test]
fn a_task_survives_its_agent_killed_and_restarted_mid_task() {
    let sb = Sandbox::new();
    let desktop = sb.desktop("kill-desk", "1024x768", &[]);
    let supervisor = desktop.state()["supervisor_pid"].as_u64().unwrap() as u32;
    let logs = sb.path().join("state/desktops/kill-desk/logs");
    let hosts = || {
        std::fs::read_to_string(logs.join("agent.log"))
            .unwrap_or_default()
            .matches("host authenticated")
            .count()
    };
    let before = hosts();
    let out = sb.path().join("run");
    // Thunar's task: ten actions over about 2.5 s.
    let run = sb
        .pincer_command(&[
            "run",
            "--tasks",
            "demo",
            "--task",
            "files-archive-report",
            "--set",
            "desktop=kill-desk",
            "--agent",
            "oracle",
            "--no-report",
            "--out",
            out.to_str().unwrap(),
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Once the run is connected and its setup under way, SIGKILL the agent; the desktop's
    // supervisor starts it again on the same port, as a service manager would.
    let t = Instant::now();
    while hosts() == before {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "the run never connected"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(500));
    let agents = in_session(supervisor, "pincer-agent");
    assert_eq!(agents.len(), 1, "{agents:?}");
    // SAFETY: kill(2) on a pid of the desktop we started; no memory is involved.
    unsafe {
        libc::kill(agents[0] as i32, libc::SIGKILL);
    }
    let killed_at = t.elapsed();
    let run = run.wait_with_output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
    let records = results(&out);
    let terminations: Vec<&Value> = records.iter().map(|r| &r["termination"]).collect();
    println!(
        "agent killed {:.1} s into the run; it took {:.1} s: {terminations:?}",
        killed_at.as_secs_f64(),
        t.elapsed().as_secs_f64(),
    );
    let supervisor_log = std::fs::read_to_string(logs.join("supervisor.log")).unwrap();
    assert!(
        supervisor_log.contains("pincer-agent exited (signal: 9 (SIGKILL)); restarting"),
        "{supervisor_log}"
    );
    // The agent's work scored as done, never as its failure: the run either rode out the
    // restart, or lost its environment (recorded as that) and was run once more.
    match terminations.as_slice() {
        [only] => assert_eq!(*only, "success", "{said}"),
        [lost, redone] => {
            assert_eq!(*lost, "environment-error", "{said}");
            assert_eq!(*redone, "success", "{said}");
            assert!(said.contains("running it once more"), "{said}");
            // Counted once.
            assert!(said.contains("terminations: success 1\n"), "{said}");
        }
        more => panic!("{more:?}: {said}"),
    }
    drop(desktop);
}
