//! The service against real desktops: a private Xvfb and D-Bus session per test, real GTK
//! apps and LibreOffice, and the timings of walks (ignored tests, run by hand).

use super::bus::{CALL_TIMEOUT, CONNECT_TIMEOUT};
use super::walk::{ERROR_ATTR, NOTE_ATTR};
use super::*;
use crate::testutil::{DbusSession, Xvfb, wait_for};
use pincer_shared::observe::{Rect, TreeScope};
use pincer_shared::tree::UiNode;
use std::process::Command;
use std::time::Duration;

const SCREEN: Rect = Rect {
    x: 0,
    y: 0,
    width: 1920,
    height: 1080,
};

/// A private desktop with its own session bus, and an `A11y` pointed at it.
struct Desk {
    a11y: A11y,
    rt: tokio::runtime::Runtime,
    bus: DbusSession,
    x: Xvfb,
}

impl Desk {
    fn start() -> Self {
        let x = Xvfb::start(SCREEN.width, SCREEN.height);
        let bus = DbusSession::start(&x.display);
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let a11y = A11y {
            env: Some(env_of(&bus)),
            ..A11y::new(Some(x.display.clone()))
        };
        Self { a11y, rt, bus, x }
    }

    fn envs(&self) -> Vec<(String, String)> {
        self.bus.envs(&self.x.display)
    }

    fn launch(&self, argv: &[&str]) -> crate::testutil::App {
        crate::testutil::App::start(argv, &self.envs())
    }

    fn tree(&mut self, req: &TreeRequest, pid: Option<u32>) -> Result<UiTree, WireError> {
        self.rt.block_on(self.a11y.tree(req, pid))
    }

    /// Walks until `ready` holds (apps take a moment to show up on the bus).
    fn wait(
        &mut self,
        req: &TreeRequest,
        pid: Option<u32>,
        ready: impl Fn(&UiTree) -> bool,
    ) -> UiTree {
        self.wait_up_to(Duration::from_secs(30), req, pid, ready)
    }

    fn wait_up_to(
        &mut self,
        limit: Duration,
        req: &TreeRequest,
        pid: Option<u32>,
        ready: impl Fn(&UiTree) -> bool,
    ) -> UiTree {
        wait_for(limit, || {
            let tree = self.tree(req, pid).ok()?;
            ready(&tree).then_some(tree)
        })
        .unwrap_or_else(|| panic!("no tree satisfying the condition for {req:?}"))
    }
}

fn env_of(bus: &DbusSession) -> SessionEnv {
    SessionEnv {
        a11y_bus: None,
        session_bus: Some(bus.address.clone()),
        runtime_dir: Some(bus.runtime_dir.path().display().to_string()),
    }
}

fn req(scope: TreeScope, showing_only: bool) -> TreeRequest {
    TreeRequest {
        scope,
        showing_only,
        ..Default::default()
    }
}

fn app(name: &str) -> TreeScope {
    TreeScope::App(name.into())
}

/// The nodes from `root` down to the first node satisfying `pred`.
fn path_to<'a>(root: &'a UiNode, pred: &dyn Fn(&UiNode) -> bool) -> Option<Vec<&'a UiNode>> {
    if pred(root) {
        return Some(vec![root]);
    }
    root.children.iter().find_map(|c| {
        let mut path = path_to(c, pred)?;
        path.insert(0, root);
        Some(path)
    })
}

fn inside(inner: Rect, outer: Rect) -> bool {
    inner.intersect(&outer) == Some(inner)
}

fn has_button(name: &'static str) -> impl Fn(&UiTree) -> bool {
    move |t| {
        t.root
            .find(|n| n.role == "push button" && n.name == name)
            .is_some()
    }
}

#[test]
fn zenity_entry_buttons_and_text_are_read() {
    let mut desk = Desk::start();
    let zenity = desk.launch(&[
        "zenity",
        "--entry",
        "--text",
        "Name?",
        "--entry-text",
        "hello pincer",
    ]);
    let req = req(app("zenity"), true);
    let tree = desk.wait(&req, None, has_button("OK"));
    let root = &tree.root;
    assert_eq!(root.role, "application");
    assert_eq!(root.name, "zenity");
    assert_eq!(root.attributes.get("pid"), Some(&zenity.pid().to_string()));
    assert!(
        root.attributes.contains_key("toolkit"),
        "{:?}",
        root.attributes
    );
    assert_eq!(tree.node_count as usize, root.count());
    assert!(!tree.truncated);
    assert!(tree.walk_us > 0);

    let entry = root
        .find(|n| n.text.as_deref() == Some("hello pincer"))
        .expect("the entry's text");
    assert_eq!(entry.role, "text");
    assert!(entry.has_state("editable"), "{:?}", entry.states);
    assert!(entry.has_state("showing"));

    for name in ["OK", "Cancel"] {
        let path = path_to(root, &|n| n.role == "push button" && n.name == name)
            .unwrap_or_else(|| panic!("{name} button in {}", root.to_xml()));
        let button = path[path.len() - 1];
        let window = path[1];
        let b = button.bounds.expect("button bounds");
        let w = window.bounds.expect("window bounds");
        assert!(b.width > 10 && b.height > 10, "{name}: {b:?}");
        assert!(inside(b, SCREEN), "{name} {b:?} off screen");
        assert!(inside(b, w), "{name} {b:?} outside its window {w:?}");
        assert!(
            button.actions.iter().any(|a| a == "click"),
            "{:?}",
            button.actions
        );
        assert!(button.has_state("sensitive"));
    }

    // Without attributes: the same nodes, and none of GTK's attributes or the toolkit.
    let bare = desk
        .tree(
            &TreeRequest {
                attributes: false,
                ..req.clone()
            },
            None,
        )
        .expect("tree without attributes");
    assert_eq!(bare.node_count, tree.node_count);
    assert!(!bare.root.attributes.contains_key("toolkit"));
    let with: usize = root.walk().map(|(_, n)| n.attributes.len()).sum();
    let without: usize = bare
        .root
        .walk()
        .map(|(_, n)| n.attributes.keys().filter(|k| *k != "pid").count())
        .sum();
    assert!(with > 0, "GTK nodes carry attributes");
    assert_eq!(without, 0, "{}", bare.root.to_xml());
    drop(zenity);
}

#[test]
fn filters_shrink_the_tree_and_limits_truncate_it() {
    let mut desk = Desk::start();
    let _factory = desk.launch(&["gtk3-widget-factory"]);
    let scope = app("widget-factory");
    let full = desk.wait(&req(scope.clone(), false), None, |t| t.node_count > 100);
    let showing = desk
        .tree(&req(scope.clone(), true), None)
        .expect("showing tree");
    let visible = desk
        .tree(
            &TreeRequest {
                visible_only: true,
                ..req(scope.clone(), false)
            },
            None,
        )
        .expect("visible tree");
    eprintln!(
        "gtk3-widget-factory: {} nodes, {} showing, {} on screen",
        full.node_count, showing.node_count, visible.node_count
    );
    for t in [&full, &showing, &visible] {
        assert_eq!(t.node_count as usize, t.root.count());
        assert!(!t.truncated);
    }
    // Pages 2 and 3 are not showing: a large part of the tree.
    assert!(
        showing.node_count * 3 / 2 < full.node_count,
        "{} vs {}",
        showing.node_count,
        full.node_count
    );
    assert!(showing.node_count > 100);
    for (depth, n) in showing.root.walk().filter(|(d, _)| *d > 0) {
        assert!(n.has_state("showing"), "{n:?} at {depth}");
    }
    assert!(visible.node_count < full.node_count);
    for (_, n) in visible.root.walk().skip(1) {
        if let Some(b) = n.bounds {
            assert!(b.intersect(&SCREEN).is_some(), "{n:?}");
        }
    }

    let shallow = desk
        .tree(
            &TreeRequest {
                max_depth: Some(3),
                ..req(scope.clone(), true)
            },
            None,
        )
        .expect("depth-limited tree");
    assert!(shallow.truncated);
    assert!(shallow.root.walk().all(|(d, _)| d <= 3));
    assert!(shallow.root.walk().any(|(d, _)| d == 3));
    assert!(shallow.node_count < showing.node_count);

    let few = desk
        .tree(
            &TreeRequest {
                max_nodes: Some(25),
                ..req(scope, true)
            },
            None,
        )
        .expect("node-limited tree");
    assert!(few.truncated);
    assert!(
        few.node_count <= 25 && few.node_count >= 20,
        "{}",
        few.node_count
    );
    assert_eq!(few.node_count as usize, few.root.count());
}

#[test]
fn scopes_select_applications() {
    let mut desk = Desk::start();
    let zenity = desk.launch(&["zenity", "--question", "--text", "Proceed?"]);
    let factory = desk.launch(&["gtk3-widget-factory"]);
    let desktop = desk.wait(&req(TreeScope::Desktop, true), None, |t| {
        t.root.children.len() >= 2 && has_button("Yes")(t)
    });
    assert_eq!(desktop.root.role, "desktop frame");
    assert_eq!(desktop.root.bounds, Some(SCREEN));
    let apps: Vec<_> = desktop
        .root
        .children
        .iter()
        .map(|a| a.name.as_str())
        .collect();
    assert!(apps.contains(&"zenity"), "{apps:?}");
    assert!(
        apps.iter().any(|a| a.contains("widget-factory")),
        "{apps:?}"
    );
    assert!(
        desktop
            .root
            .children
            .iter()
            .all(|a| a.role == "application")
    );

    let only = desk.tree(&req(app("ZENITY"), true), None).expect("zenity");
    assert_eq!(only.root.role, "application");
    assert_eq!(only.root.name, "zenity");
    let in_desktop = desktop.root.children.iter().find(|a| a.name == "zenity");
    assert_eq!(only.root.count(), in_desktop.expect("zenity").count());
    assert!(only.node_count * 4 < desktop.node_count);

    let active = desk
        .tree(&req(TreeScope::ActiveApp, true), Some(factory.pid()))
        .expect("active app");
    assert!(
        active.root.name.contains("widget-factory"),
        "{}",
        active.root.name
    );
    assert_eq!(
        active.root.attributes.get("pid"),
        Some(&factory.pid().to_string())
    );
    let active = desk
        .tree(&req(TreeScope::ActiveApp, true), Some(zenity.pid()))
        .expect("active app");
    assert_eq!(active.root.name, "zenity");

    for (scope, pid) in [
        (TreeScope::ActiveApp, Some(1)),
        (TreeScope::ActiveApp, None),
        (app("no-such-app"), None),
    ] {
        let none = desk.tree(&req(scope, true), pid).expect("empty tree");
        assert_eq!(none.root.role, "desktop frame");
        assert!(none.root.children.is_empty());
        assert!(none.root.attributes.contains_key(NOTE_ATTR));
    }
}

/// Signature of a tree for comparing walks: role, name and states of every node, in order.
fn shape(root: &UiNode) -> Vec<String> {
    root.walk()
        .map(|(d, n)| {
            format!(
                "{d} {} {:?} {:?} {}",
                n.role,
                n.name,
                n.states,
                n.children.len()
            )
        })
        .collect()
}

#[test]
fn cache_and_live_walks_agree() {
    let mut desk = Desk::start();
    let _factory = desk.launch(&["gtk3-widget-factory"]);
    let req = req(app("widget-factory"), false);
    let _ = desk.wait(&req, None, |t| t.node_count > 100);
    let cached = desk.tree(&req, None).expect("cached walk");
    desk.a11y.use_cache = false;
    let live = desk.tree(&req, None).expect("live walk");
    let (a, b) = (shape(&cached.root), shape(&live.root));
    let first_diff = a.iter().zip(&b).position(|(x, y)| x != y);
    assert!(
        a == b,
        "cache and live walks differ at {first_diff:?}: {:?} vs {:?}",
        first_diff.map(|i| &a[i]),
        first_diff.map(|i| &b[i])
    );
    assert_eq!(cached.root, live.root);
}

#[test]
fn gtk4_apps_show_their_windows_and_widgets() {
    let mut desk = Desk::start();
    let _factory = desk.launch(&["gtk4-widget-factory"]);
    let _files = desk.launch(&["nautilus", "--new-window"]);
    // GTK4 caches its application root with no children: the walk stopped there.
    let factory = req(app("widget-factory"), false);
    let tree = desk.wait(&factory, None, |t| t.node_count > 100);
    let frame = tree.root.find(|n| n.role == "frame").expect("a window");
    assert!(frame.name.contains("Widget Factory"), "{}", frame.name);
    assert!(tree.root.find(|n| n.role == "push button").is_some());
    // GTK 4.8 marks only windows `showing`: the default, showing-only tree went no further
    // than the window. Its widgets are `visible`, which stands for it.
    let showing = desk.tree(&req(app("widget-factory"), true), None).unwrap();
    assert!(showing.node_count > 50, "{}", showing.node_count);
    assert!(showing.root.find(|n| n.role == "push button").is_some());
    let files = req(app("nautilus"), false);
    let _ = desk.wait(&files, None, |t| t.node_count > 20);
    let cached = desk.tree(&files, None).expect("cached walk");
    desk.a11y.use_cache = false;
    let live = desk.tree(&files, None).expect("live walk");
    // GTK4's cache names each GtkStackPage as a parent where its `GetChildren` skips
    // them, so the walks differ in those panels; what a user reads and clicks is the same.
    let leaves = |t: &UiTree| {
        t.root
            .walk()
            .filter(|(_, n)| n.children.is_empty())
            .map(|(_, n)| format!("{} {:?}", n.role, n.name))
            .collect::<Vec<_>>()
    };
    assert_eq!(leaves(&cached), leaves(&live));
    assert!(leaves(&cached).contains(&"label \"Other Locations\"".to_owned()));
}

#[test]
fn a_hung_app_is_skipped_not_waited_for() {
    let mut desk = Desk::start();
    let zenity = desk.launch(&["zenity", "--question", "--text", "Proceed?"]);
    let _factory = desk.launch(&["gtk3-widget-factory"]);
    let req = req(TreeScope::Desktop, true);
    let _ = desk.wait(&req, None, |t| {
        t.root.children.len() >= 2 && has_button("Yes")(t)
    });
    // A stopped process keeps its bus connection but answers nothing: a hang.
    let pid = i32::try_from(zenity.pid()).expect("pid");
    // SAFETY: plain syscall on our own child.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    let started = Instant::now();
    let tree = desk.tree(&req, None);
    let took = started.elapsed();
    // SAFETY: as above.
    unsafe { libc::kill(pid, libc::SIGCONT) };
    let tree = tree.expect("tree despite the hung app");
    assert!(took < CALL_TIMEOUT * 3, "took {took:?}");
    assert!(tree.truncated);
    let hung = tree
        .root
        .children
        .iter()
        .find(|a| a.attributes.contains_key(ERROR_ATTR))
        .expect("the hung app is marked");
    assert_eq!(hung.attributes.get("pid"), Some(&zenity.pid().to_string()));
    let factory = tree
        .root
        .children
        .iter()
        .find(|a| a.name.contains("widget-factory"));
    let factory = factory.expect("the other app is walked");
    assert!(!factory.attributes.contains_key(ERROR_ATTR));
    assert!(factory.count() > 100);
    // Once it runs again, it is walked again.
    let _ = desk.wait(&req, None, has_button("Yes"));
}

#[test]
fn an_unreachable_bus_is_an_error_and_a_new_session_works() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let nowhere = tempfile::tempdir().expect("tempdir");
    let x = Xvfb::start(SCREEN.width, SCREEN.height);
    let mut a11y = A11y {
        env: Some(SessionEnv {
            session_bus: Some(format!("unix:path={}/bus", nowhere.path().display())),
            runtime_dir: Some(nowhere.path().display().to_string()),
            ..Default::default()
        }),
        ..A11y::new(Some(x.display.clone()))
    };
    // The server runs walks on a multi-threaded runtime.
    fn send<T: Send>(t: T) -> T {
        t
    }
    let err = rt
        .block_on(send(a11y.tree(&TreeRequest::default(), None)))
        .expect_err("no bus");
    let WireError::Accessibility { message } = err else {
        panic!("wrong error: {err:?}");
    };
    assert!(message.contains("DBUS_SESSION_BUS_ADDRESS"), "{message}");

    let req = req(app("zenity"), true);
    let walk_until_ok = |a11y: &mut A11y| {
        wait_for(Duration::from_secs(30), || {
            let t = rt.block_on(a11y.tree(&req, None)).ok()?;
            has_button("Yes")(&t).then_some(t)
        })
        .expect("zenity's tree")
    };
    let first = DbusSession::start(&x.display);
    let zenity = crate::testutil::App::start(&["zenity", "--question"], &first.envs(&x.display));
    a11y.env = Some(env_of(&first));
    walk_until_ok(&mut a11y);
    assert!(a11y.conn.is_some());

    // An agent without the session bus still finds the AT-SPI bus's socket, the one
    // at-spi-bus-launcher made for the agent's display: on another display there is none.
    let without_session = SessionEnv {
        session_bus: Some(format!("unix:path={}/bus", nowhere.path().display())),
        ..env_of(&first)
    };
    let mut fallback = A11y {
        env: Some(without_session.clone()),
        ..A11y::new(Some(x.display.clone()))
    };
    walk_until_ok(&mut fallback);
    drop(fallback);
    let other = Xvfb::start(640, 480);
    let mut elsewhere = A11y {
        env: Some(without_session),
        ..A11y::new(Some(other.display.clone()))
    };
    let err = rt
        .block_on(elsewhere.tree(&req, None))
        .expect_err("no AT-SPI bus for the other display");
    assert!(matches!(err, WireError::Accessibility { .. }), "{err:?}");

    // The session ends (its bus, the AT-SPI bus and the registry with it).
    drop(zenity);
    drop(first);
    let started = Instant::now();
    let err = rt
        .block_on(a11y.tree(&req, None))
        .expect_err("the session is gone");
    assert!(matches!(err, WireError::Accessibility { .. }), "{err:?}");
    assert!(started.elapsed() < CONNECT_TIMEOUT * 3);

    let second = DbusSession::start(&x.display);
    let _zenity = crate::testutil::App::start(&["zenity", "--question"], &second.envs(&x.display));
    a11y.env = Some(env_of(&second));
    walk_until_ok(&mut a11y);
}

fn stats(mut us: Vec<u64>) -> String {
    us.sort_unstable();
    let at = |q: f64| us[((us.len() - 1) as f64 * q).round() as usize] as f64 / 1000.0;
    format!(
        "min {:.1} ms, p50 {:.1} ms, p95 {:.1} ms",
        at(0.0),
        at(0.5),
        at(0.95)
    )
}

/// CPU time used so far by process `pid`, in ms (0 when it is gone).
fn cpu_ms(pid: u32) -> u64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0;
    };
    let Some(close) = stat.rfind(')') else {
        return 0;
    };
    let fields: Vec<&str> = stat[close + 2..].split(' ').collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // utime and stime, in clock ticks of 10 ms.
    (ticks(11) + ticks(12)) * 10
}

/// Times `runs` walks of `req`, with the cache and without, and the CPU the agent and
/// the walked `apps` spent per walk.
fn measure(desk: &mut Desk, what: &str, req: &TreeRequest, apps: &[u32], runs: usize) {
    let agent = std::process::id();
    let cpu = |pids: &[u32]| pids.iter().map(|p| cpu_ms(*p)).sum::<u64>();
    for use_cache in [true, false] {
        desk.a11y.use_cache = use_cache;
        let mut times = Vec::new();
        let mut nodes = 0;
        let (agent_before, apps_before) = (cpu(&[agent]), cpu(apps));
        for _ in 0..runs {
            let started = Instant::now();
            let tree = desk.tree(req, None).expect("tree");
            times.push(u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX));
            nodes = tree.node_count;
        }
        let runs = runs as u64;
        eprintln!(
            "{what:<40} {} {nodes:>5} nodes: {}; CPU per walk: agent {} ms, app {} ms",
            if use_cache { "cache" } else { "live " },
            stats(times),
            (cpu(&[agent]) - agent_before) / runs,
            (cpu(apps) - apps_before) / runs,
        );
    }
    desk.a11y.use_cache = true;
}

/// Timings of GTK apps. Run with
/// `cargo test --release -p pincer-agent measure_gtk -- --ignored --nocapture`.
#[test]
#[ignore = "measurement"]
fn measure_gtk() {
    let mut desk = Desk::start();
    let factory = desk.launch(&["gtk3-widget-factory"]);
    let mut argv = vec!["zenity", "--list", "--column=Name", "--column=Value"];
    let rows: Vec<String> = (0..40)
        .flat_map(|i| [format!("row {i}"), format!("{}", i * 7)])
        .collect();
    argv.extend(rows.iter().map(String::as_str));
    let list = desk.launch(&argv);
    let _ = desk.wait(&req(app("zenity"), true), None, |t| t.node_count > 50);
    let _ = desk.wait(&req(app("widget-factory"), true), None, |t| {
        t.node_count > 100
    });
    let (factory, list) = (factory.pid(), list.pid());
    let cases = [
        (
            "widget-factory, showing",
            req(app("widget-factory"), true),
            vec![factory],
        ),
        (
            "widget-factory, everything",
            req(app("widget-factory"), false),
            vec![factory],
        ),
        (
            "zenity --list (40 rows), showing",
            req(app("zenity"), true),
            vec![list],
        ),
        (
            "desktop (both apps), showing",
            req(TreeScope::Desktop, true),
            vec![factory, list],
        ),
    ];
    for (what, req, apps) in cases {
        measure(&mut desk, what, &req, &apps, 30);
    }
}

/// Starts LibreOffice Calc on a 300x26 sheet of values (cell (r, c) holds r*26+c), its
/// window filling the screen as on a benchmark VM, and waits for the sheet's cells.
fn calc(desk: &mut Desk, dir: &std::path::Path) -> (crate::testutil::App, UiTree) {
    let csv = dir.join("values.csv");
    let rows: Vec<String> = (0..300)
        .map(|row| {
            let cells: Vec<String> = (0..26).map(|col| (row * 26 + col).to_string()).collect();
            cells.join(",")
        })
        .collect();
    std::fs::write(&csv, rows.join("\n") + "\n").expect("csv");
    open_in_calc(desk, dir, &csv)
}

/// Converts `doc` to ODS with a headless Calc (which also sets up the profile in `dir`:
/// a bare `soffice.bin` on a fresh profile exits to be restarted), opens the result in
/// Calc, full screen, and waits for its grid's cells.
fn open_in_calc(
    desk: &mut Desk,
    dir: &std::path::Path,
    doc: &std::path::Path,
) -> (crate::testutil::App, UiTree) {
    let profile = format!("-env:UserInstallation=file://{}/profile", dir.display());
    let status = Command::new("soffice")
        .args([
            profile.as_str(),
            "--headless",
            "--convert-to",
            "ods",
            "--outdir",
        ])
        .arg(dir)
        .arg(doc)
        .envs(desk.envs())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .expect("LibreOffice is installed");
    let ods = doc.with_extension("ods");
    assert!(status.success() && ods.exists(), "conversion failed");
    // soffice.bin itself, not the soffice script and oosplash, so that drop kills it.
    let calc = desk.launch(&[
        "/usr/lib/libreoffice/program/soffice.bin",
        profile.as_str(),
        "--norestore",
        "--nologo",
        "--calc",
        ods.to_str().expect("utf-8 path"),
    ]);
    // `--sync` waits forever: bounded, so that a Calc that never shows fails the test.
    let status = Command::new("timeout")
        .args([
            "120",
            "xdotool",
            "search",
            "--sync",
            "--onlyvisible",
            "--name",
            "LibreOffice Calc",
        ])
        .args([
            "windowmove",
            "%1",
            "0",
            "0",
            "windowsize",
            "%1",
            "1920",
            "1080",
        ])
        .envs(desk.envs())
        .status()
        .expect("xdotool is installed");
    assert!(status.success(), "no Calc window within 120 s");
    let req = req(app("soffice"), true);
    let tree = desk.wait_up_to(Duration::from_secs(120), &req, None, |t| {
        let table = t.root.find(|n| n.role == "table");
        table.is_some_and(|t| t.children.len() > 1000)
    });
    (calc, tree)
}

/// A merged title over columns A-C must not widen column A's cells: boxes of a grid's
/// cells come from its rows and columns only where the first and last rows agree.
#[test]
fn merged_cells_do_not_misplace_a_column() {
    let mut desk = Desk::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let rows: String = (0..60)
        .map(|r| {
            let cells: String = (0..8)
                .map(|c| {
                    format!(
                        "<table:table-cell office:value-type=\"float\" office:value=\"{0}\"><text:p>{0}</text:p></table:table-cell>",
                        r * 8 + c
                    )
                })
                .collect();
            format!("<table:table-row>{cells}</table:table-row>")
        })
        .collect();
    let doc = format!(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<office:document xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0" xmlns:table="urn:oasis:names:tc:opendocument:xmlns:table:1.0" xmlns:text="urn:oasis:names:tc:opendocument:xmlns:text:1.0" office:version="1.2" office:mimetype="application/vnd.oasis.opendocument.spreadsheet">
<office:body><office:spreadsheet><table:table table:name="Sheet1">
<table:table-row><table:table-cell table:number-columns-spanned="3" office:value-type="string"><text:p>Title</text:p></table:table-cell><table:covered-table-cell/><table:covered-table-cell/></table:table-row>
{rows}
</table:table></office:spreadsheet></office:body></office:document>"#
    );
    let fods = dir.path().join("merged.fods");
    std::fs::write(&fods, doc).expect("fods");
    let (_calc, tree) = open_in_calc(&mut desk, dir.path(), &fods);
    let table = tree.root.find(|n| n.role == "table").expect("the grid");
    let cell = |name: &str| {
        table
            .children
            .iter()
            .find(|c| c.name == name)
            .and_then(|c| c.bounds)
            .unwrap_or_else(|| panic!("{name} with bounds"))
    };
    let (a1, a2, b2, c2, a3) = (cell("A1"), cell("A2"), cell("B2"), cell("C2"), cell("A3"));
    // The merged title spans three columns; the cells below it are one column wide.
    assert!(a1.width >= 3 * a2.width - 3, "A1 {a1:?} A2 {a2:?}");
    assert_eq!(a2.x, a3.x);
    assert_eq!(a2.width, a3.width);
    assert_eq!(
        i64::from(a2.x) + i64::from(a2.width),
        i64::from(b2.x),
        "A2 {a2:?} ends where B2 {b2:?} starts"
    );
    assert_eq!(i64::from(b2.x) + i64::from(b2.width), i64::from(c2.x));
    assert_eq!(
        table
            .children
            .iter()
            .find(|c| c.name == "B2")
            .and_then(|c| c.text.as_deref()),
        Some("1")
    );
}

#[test]
fn calc_grid_gives_the_cells_on_screen() {
    let mut desk = Desk::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let (calc, tree) = calc(&mut desk, dir.path());
    assert_eq!(
        tree.root.attributes.get("pid"),
        Some(&calc.pid().to_string())
    );
    assert!(!tree.truncated);
    assert!(
        tree.root
            .find(|n| n.attributes.contains_key(ERROR_ATTR))
            .is_none()
    );
    let table = tree.root.find(|n| n.role == "table").expect("the grid");
    let area = table.bounds.expect("grid bounds");
    let note = &table.attributes[NOTE_ATTR];
    assert!(
        note.starts_with(&format!(
            "only the {} cells on screen",
            table.children.len()
        )),
        "{note}"
    );
    assert!(
        table
            .children
            .iter()
            .all(|c| c.role == "table cell" && c.has_state("showing"))
    );
    for cell in &table.children {
        let b = cell.bounds.expect("cell bounds");
        assert!(
            b.intersect(&area).is_some(),
            "{} {b:?} outside {area:?}",
            cell.name
        );
    }
    // Rows then columns, from A1: B2 is row 1, column 1.
    let cell = |name: &str| table.children.iter().find(|c| c.name == name);
    assert_eq!(table.children[0].name, "A1");
    let b2 = cell("B2").expect("B2");
    assert_eq!(b2.text.as_deref(), Some("27"));
    assert_eq!(b2.value, Some(27.0));
    assert_eq!(cell("Z3").and_then(|c| c.text.as_deref()), Some("77"));
    assert_eq!(cell("AA3").and_then(|c| c.text.as_deref()), Some(""));
    let few = desk
        .tree(
            &TreeRequest {
                max_nodes: Some(300),
                ..req(app("soffice"), true)
            },
            None,
        )
        .expect("node-limited tree");
    assert!(few.truncated);
    assert!(
        few.node_count <= 300 && few.node_count >= 295,
        "{} nodes: {:?}",
        few.node_count,
        few.root.attributes
    );
    // Calc is still responsive: nothing made it enumerate its 2^31 cells.
    let everything = desk.tree(&req(app("soffice"), false), None).expect("tree");
    assert!(everything.node_count > tree.node_count);
    assert!(
        everything
            .root
            .find(|n| n.attributes.contains_key(ERROR_ATTR))
            .is_none()
    );
    eprintln!(
        "calc: {} nodes showing ({} cells), {} in all, {} of at most 300",
        tree.node_count,
        table.children.len(),
        everything.node_count,
        few.node_count
    );
}

/// Timings of LibreOffice Calc. Run with
/// `cargo test --release -p pincer-agent measure_calc -- --ignored --nocapture`.
#[test]
#[ignore = "measurement"]
fn measure_calc() {
    let mut desk = Desk::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let (calc, _) = calc(&mut desk, dir.path());
    let pid = [calc.pid()];
    let scope = app("soffice");
    measure(
        &mut desk,
        "calc 300x26, showing",
        &req(scope.clone(), true),
        &pid,
        20,
    );
    measure(
        &mut desk,
        "calc 300x26, everything",
        &req(scope, false),
        &pid,
        10,
    );
}
