//! The launch guard (`run::launch::Environments`) as library callers use it: what it
//! started ends when it is stopped or merely dropped, and a kept desktop outlives it. Its
//! own test binary: it points the library at the sandbox through the process's
//! environment (`PINCER_STATE_DIR`, `PINCER_EXE`), which no other test here shares.

use pincer::env::registry::Registry;
use pincer::run::launch::{Environments, Signals, Source};
use pincer_shared::Platform;
use pincer_tests::{DesktopFootprint, Sandbox, bin};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

fn footprint(sb: &Sandbox, name: &str) -> DesktopFootprint {
    let p = sb
        .path()
        .join("state/desktops")
        .join(name)
        .join("desktop.json");
    DesktopFootprint::of(&serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap())
}

fn registered(reg: &Registry) -> Vec<String> {
    reg.load().unwrap().envs.keys().cloned().collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_launch_started_ends_with_its_guard_and_a_kept_desktop_stays() {
    let sb = Sandbox::new();
    // SAFETY (of the process's environment): this binary's only test sets it before any
    // thread of its own reads it.
    unsafe {
        std::env::set_var("PINCER_STATE_DIR", sb.path().join("state"));
        std::env::set_var("PINCER_EXE", bin("pincer"));
    }
    let reg = sb.registry();
    let roles: BTreeMap<String, Platform> = [
        ("desktop".to_owned(), Platform::Linux),
        ("desktop2".to_owned(), Platform::Linux),
    ]
    .into();
    let quiet = |_: &str| {};
    let flag = Arc::new(AtomicBool::new(false));

    // Dropped without `stop` (an error path, a forgetful caller): both desktops go.
    let envs = Environments::start(
        &reg,
        &Source::Local {
            count: 1,
            size: (800, 600),
            session: pincer::run::launch::DesktopSession::X11,
        },
        &roles,
        false,
        Signals::Caller(flag.clone()),
        &quiet,
    )
    .await
    .expect("two local desktops");
    assert_eq!(envs.sets.len(), 1);
    assert_eq!(
        envs.sets[0].envs.keys().cloned().collect::<Vec<_>>(),
        ["desktop", "desktop2"]
    );
    let states = envs.desktops();
    assert_eq!(states.len(), 2);
    let prints: Vec<DesktopFootprint> = states.iter().map(|s| footprint(&sb, &s.name)).collect();
    assert_eq!(registered(&reg).len(), 2);
    drop(envs);
    for f in &prints {
        let left = f.wait_gone(Duration::from_secs(20));
        assert!(left.is_empty(), "{} left {left:?}", f.name);
    }
    assert!(registered(&reg).is_empty(), "{:?}", registered(&reg));

    // `demo`'s desktop: named, and with `keep` it outlives the guard; without, it does not.
    let one: BTreeMap<String, Platform> = [("desktop".to_owned(), Platform::Linux)].into();
    for keep in [true, false] {
        let envs = Environments::start(
            &reg,
            &Source::Desktop {
                name: "kept".into(),
                size: (800, 600),
                keep,
            },
            &one,
            false,
            Signals::Caller(flag.clone()),
            &quiet,
        )
        .await
        .expect("the named desktop");
        assert_eq!(envs.desktops().len(), 1);
        let f = footprint(&sb, "kept");
        envs.stop().await;
        std::thread::sleep(Duration::from_secs(1));
        let left = f.left();
        if keep {
            assert_eq!(left.len(), f.processes.len() + 2, "kept: {left:?}");
            assert_eq!(registered(&reg), ["kept"]);
        } else {
            // The kept one from the first round was stopped by this round's start.
            let left = f.wait_gone(Duration::from_secs(20));
            assert!(left.is_empty(), "not kept, yet {left:?}");
            assert!(registered(&reg).is_empty());
        }
    }
}
