//! Video streams from a real desktop: frames only after the screen changed (X DAMAGE), on
//! the clock input is timed against, MP4 files ffprobe reads, typed refusals of garbage,
//! and a host that never reads its stream hurting no one.

use pincer::env::{ClientError, Environment, VideoStream};
use pincer_shared::WireError;
use pincer_shared::action::{Action, MouseButton, Point};
use pincer_shared::limits::MAX_VIDEO_STREAMS;
use pincer_shared::observe::{ImageFormat, ScreenshotRequest, VideoRequest};
use pincer_tests::{Sandbox, eventually};
use std::time::{Duration, Instant};

fn video(max_fps: u32, duration_ms: u64) -> VideoRequest {
    VideoRequest {
        max_fps,
        format: ImageFormat::Jpeg { quality: 70 },
        max_size: None,
        duration_ms,
    }
}

/// The next frame within `within`: `None` if none came (the screen stayed still).
async fn frame_within(
    stream: &mut VideoStream,
    within: Duration,
) -> Option<pincer::env::VideoFrame> {
    match tokio::time::timeout(within, stream.next()).await {
        Ok(frame) => Some(
            frame
                .expect("the stream goes on")
                .expect("the stream is not over"),
        ),
        Err(_) => None,
    }
}

/// Right-clicks the empty desktop, which opens the window manager's root menu: a real
/// input action that draws. Returns the guest's clock just before and just after it.
async fn open_root_menu(env: &Environment) -> (u64, u64) {
    let (before, _) = env.guest_clock().await.unwrap();
    env.act(Action::Click {
        at: Some(Point::new(200, 200)),
        button: MouseButton::Right,
        count: 1,
    })
    .await
    .unwrap();
    let (after, _) = env.guest_clock().await.unwrap();
    (before, after)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frames_come_only_after_the_screen_changes_stamped_on_the_input_clock() {
    let sb = Sandbox::new();
    let d = sb.desktop("video-still", "1280x800", &[]);
    let env = d.connect().await;
    // Let the desktop settle (the window manager draws the root once).
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut stream = env.video(video(30, 20_000)).await.unwrap();
    let first = frame_within(&mut stream, Duration::from_secs(1))
        .await
        .expect("a frame when the stream starts");
    assert_eq!((first.shot.meta.width, first.shot.meta.height), (1280, 800));
    // Nothing changes: nothing comes.
    let still = frame_within(&mut stream, Duration::from_secs(2)).await;
    assert!(
        still.is_none(),
        "a frame came from a still screen: {:?}",
        still.map(|f| f.guest_us - first.guest_us)
    );
    let (before, after) = open_root_menu(&env).await;
    let changed = frame_within(&mut stream, Duration::from_secs(3))
        .await
        .expect("a frame after the menu opened");
    // The grab that shows the menu began after the click was sent and within a few frame
    // periods of its end (generous: the machine may be loaded).
    assert!(
        changed.guest_us >= before && changed.guest_us <= after + 1_000_000,
        "frame at {} µs, click between {before} and {after} µs",
        changed.guest_us
    );
    println!(
        "click between {before} and {after} µs, frame at {} µs ({} µs after the click returned)",
        changed.guest_us,
        changed.guest_us as i64 - after as i64
    );
    assert_ne!(changed.shot.bytes, first.shot.bytes, "the menu shows");
    // Closing it draws again; then all is still once more.
    let escape = "Escape".parse().unwrap();
    env.act(Action::KeyPress { key: escape }).await.unwrap();
    frame_within(&mut stream, Duration::from_secs(3))
        .await
        .expect("a frame after the menu closed");
    // Frames the close caused may trail by a tick; after that, silence.
    while frame_within(&mut stream, Duration::from_millis(500))
        .await
        .is_some()
    {}
    assert!(
        frame_within(&mut stream, Duration::from_secs(2))
            .await
            .is_none(),
        "frames kept coming from a still screen"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_video_parameters_get_typed_errors() {
    let sb = Sandbox::new();
    let d = sb.desktop("video-garbage", "640x480", &[]);
    let env = d.connect().await;
    for (req, names) in [
        (video(0, 1000), "0 frames per second"),
        (video(1000, 1000), "1000 frames per second"),
        (video(5, 0), "0 ms"),
        (
            VideoRequest {
                format: ImageFormat::Png,
                ..video(5, 1000)
            },
            "JPEG or raw",
        ),
        (
            VideoRequest {
                format: ImageFormat::Jpeg { quality: 0 },
                ..video(5, 1000)
            },
            "JPEG quality 0",
        ),
        (
            VideoRequest {
                max_size: Some((0, 0)),
                ..video(5, 1000)
            },
            "zero edge",
        ),
    ] {
        match env.video(req).await {
            Err(ClientError::Guest {
                source: WireError::InvalidArgument { message },
                ..
            }) => assert!(message.contains(names), "{message}"),
            other => panic!("{req:?}: {other:?}"),
        }
    }
    // The connection serves on.
    env.ping().await.unwrap();
}

/// Starts a program on the desktop that repaints the whole root window every `period_s`
/// seconds, in turn red and blue.
async fn repaint_every(env: &Environment, period_s: &str) {
    let script = format!(
        "while :; do xsetroot -solid red; sleep {period_s}; xsetroot -solid blue; sleep {period_s}; done"
    );
    env.launch(vec!["sh".into(), "-c".into(), script], vec![])
        .await
        .unwrap();
}

/// What ffprobe says of a video file: frames decoded, width, height, seconds.
fn ffprobe(path: &std::path::Path) -> (u64, u64, u64, f64) {
    let out = std::process::Command::new("ffprobe")
        .args(["-v", "error", "-count_frames", "-select_streams", "v:0"])
        .args([
            "-show_entries",
            "stream=nb_read_frames,width,height,codec_name",
        ])
        .args(["-show_entries", "format=duration", "-of", "json"])
        .arg(path)
        .output()
        .expect("run ffprobe");
    assert!(
        out.status.success(),
        "ffprobe: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let stream = &v["streams"][0];
    assert_eq!(stream["codec_name"], "h264", "{v}");
    let number = |x: &serde_json::Value| -> f64 {
        x.as_str()
            .map(|s| s.parse().unwrap())
            .or_else(|| x.as_f64())
            .unwrap_or_else(|| panic!("not a number in {v}"))
    };
    (
        number(&stream["nb_read_frames"]) as u64,
        number(&stream["width"]) as u64,
        number(&stream["height"]) as u64,
        number(&v["format"]["duration"]),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pincer_video_writes_an_mp4_of_what_changed() {
    let sb = Sandbox::new();
    let d = sb.desktop("video-mp4", "800x600", &[]);
    let env = d.connect().await;
    // Four changes a second, recorded at up to 10 frames a second for 4 s: about 16
    // frames, far from the 40 a fixed rate would give.
    repaint_every(&env, "0.25").await;
    let out = sb.path().join("screen.mp4");
    let said = sb.pincer_ok(&[
        "video",
        "--env",
        &d.name,
        "-o",
        out.to_str().unwrap(),
        "--seconds",
        "4",
        "--fps",
        "10",
    ]);
    let frames: u64 = said
        .split(": ")
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no frame count in {said:?}"));
    assert!((8..=30).contains(&frames), "{frames} frames: {said}");
    let (decoded, width, height, seconds) = ffprobe(&out);
    println!("{said}ffprobe: {decoded} frames, {width}x{height}, {seconds} s");
    assert_eq!((width, height), (800, 600));
    // The last frame is listed twice for the muxer to take its duration.
    assert!(
        decoded == frames || decoded == frames + 1,
        "ffprobe decoded {decoded} frames, the guest sent {frames}"
    );
    assert!((3.5..=4.6).contains(&seconds), "{seconds} s long");
    assert!(
        !sb.path().join("screen.mp4.frames").exists(),
        "the frames' directory is removed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_that_never_reads_its_streams_hurts_no_one() {
    let sb = Sandbox::new();
    let d = sb.desktop("video-greedy", "1280x800", &[]);
    let greedy = d.connect().await;
    let other = d.connect().await;
    repaint_every(&other, "0.05").await;
    // One host takes every place with streams of raw frames (4 MB each) it never reads.
    let raw = VideoRequest {
        format: ImageFormat::Raw { zstd: None },
        ..video(30, 600_000)
    };
    let mut held = Vec::new();
    for _ in 0..MAX_VIDEO_STREAMS {
        held.push(greedy.video(raw).await.unwrap());
    }
    // Another is told the guest is busy, in so many words...
    match other.video(video(5, 1000)).await {
        Err(ClientError::Guest {
            source: WireError::Busy { message },
            ..
        }) => assert!(message.contains("video streams"), "{message}"),
        other => panic!("a fifth stream: {other:?}"),
    }
    // ...while its screenshots and pings are served as ever.
    for _ in 0..10 {
        let t = Instant::now();
        let shot = other
            .screenshot(ScreenshotRequest {
                format: ImageFormat::Jpeg { quality: 70 },
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(shot.meta.width, 1280);
        other.ping().await.unwrap();
        assert!(
            t.elapsed() < Duration::from_secs(3),
            "took {:?}",
            t.elapsed()
        );
    }
    // The streams nobody reads are cut off once their frames wait too long, and their
    // places serve others.
    let mut fresh = eventually(Duration::from_secs(40), || async {
        other.video(video(10, 3000)).await.ok()
    })
    .await
    .expect("a place frees up once the unread streams are cut off");
    let mut frames = 0;
    while let Some(_frame) = fresh.next().await.unwrap() {
        frames += 1;
    }
    assert!(frames >= 5, "{frames} frames in 3 s of a repainting screen");
    drop(held);
}

/// A suite of one terminal task whose oracle types a command that finishes the task two
/// seconds later, waiting meanwhile in two steps of 1.5 s: the last step is observed 1.5 s
/// after the typing, time enough for the terminal to show it even on a loaded machine.
fn typed_then_waited(dir: &std::path::Path) -> std::path::PathBuf {
    let tasks = dir.join("suite");
    std::fs::create_dir_all(&tasks).unwrap();
    let kill = serde_json::json!({"do": "exec", "argv": ["pkill", "-s", "0", "-x", "xfce4-terminal"], "check": false});
    let t = serde_json::json!({
        "id": "t0",
        "instruction": "Write done into ~/out.txt using the terminal.",
        "envs": {"desktop": {"platform": "linux"}},
        "setup": {"desktop": [
            {"do": "remove", "path": "~/out.txt"},
            kill,
            {"do": "launch", "argv": ["xfce4-terminal", "--disable-server"]},
            {"do": "wait_window", "title_contains": "Terminal"}
        ]},
        "teardown": {"desktop": [kill]},
        "checkpoints": [
            {"id": "written", "env": "desktop", "check": "file_contains", "args": {"path": "~/out.txt", "text": "done"}}
        ],
        "oracle": [
            {"do": "type", "text": "sleep 2; echo done > ~/out.txt\n", "target": {"role": "terminal"}},
            {"do": "sleep", "ms": 1500},
            {"do": "sleep", "ms": 1500}
        ]
    });
    std::fs::write(tasks.join("t0.json"), t.to_string()).unwrap();
    tasks
}

#[test]
fn runs_with_video_keep_each_roles_screen_in_the_trajectory() {
    let sb = Sandbox::new();
    let tasks = typed_then_waited(sb.path());
    let out = sb.path().join("out");
    sb.pincer_ok(&[
        "run",
        "--tasks",
        tasks.to_str().unwrap(),
        "--agent",
        "oracle",
        "--out",
        out.to_str().unwrap(),
        "--size",
        "800x600",
        "--video",
        "10",
    ]);
    let results = std::fs::read_to_string(out.join("results.jsonl")).unwrap();
    assert!(results.contains("\"success\""), "{results}");
    let file = out.join("tasks/t0__r0/video-desktop.mp4");
    let (frames, width, height, seconds) = ffprobe(&file);
    println!(
        "{}: {frames} frames, {width}x{height}, {seconds} s",
        file.display()
    );
    assert_eq!((width, height), (800, 600));
    // A frame at the start and at least one after the typing (ffprobe counts the last
    // frame twice), over the oracle's three seconds of waiting.
    assert!(frames >= 3, "{frames} frames");
    assert!(seconds >= 2.5, "{seconds} s");
    assert!(!out.join("tasks/t0__r0/video-desktop.mp4.frames").exists());
    // Each step says where the video was when its actions went out: later each step, and
    // within the video.
    let at: Vec<f64> = std::fs::read_to_string(out.join("tasks/t0__r0/steps.jsonl"))
        .unwrap()
        .lines()
        .map(|l| {
            let step: serde_json::Value = serde_json::from_str(l).unwrap();
            assert_eq!(step["video_ms"][0][0], "desktop", "{step}");
            step["video_ms"][0][1].as_f64().unwrap()
        })
        .collect();
    println!("steps at {at:?} ms into the video");
    assert!(at.len() >= 2, "{at:?}");
    assert!(at.windows(2).all(|w| w[0] < w[1]), "{at:?}");
    assert!(
        at[0] >= 0.0 && at[at.len() - 1] <= seconds * 1000.0,
        "{at:?} in {seconds} s"
    );
}

#[test]
fn agents_asked_to_see_video_get_the_last_moments_of_each_screen() {
    let sb = Sandbox::new();
    let tasks = typed_then_waited(sb.path());
    let out = sb.path().join("out");
    sb.pincer_ok(&[
        "run",
        "--tasks",
        tasks.to_str().unwrap(),
        "--agent",
        "oracle",
        "--out",
        out.to_str().unwrap(),
        "--size",
        "800x600",
        "--observe",
        "marks,video=2s@5fps",
        "--max-size",
        "400x300",
    ]);
    let results = std::fs::read_to_string(out.join("results.jsonl")).unwrap();
    assert!(results.contains("\"success\""), "{results}");
    let traj = out.join("tasks/t0__r0");
    let steps: Vec<serde_json::Value> = std::fs::read_to_string(traj.join("steps.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let stills = |step: &serde_json::Value| -> Vec<String> {
        step["images"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|i| i["kind"].as_str().unwrap().starts_with("video-"))
            .map(|i| i["file"].as_str().unwrap().to_owned())
            .collect()
    };
    // Every step shows at least the screen as it is; a frame that stayed on screen for
    // several samples is shown once, so never more than the 10 samples.
    for step in &steps {
        let files = stills(step);
        assert!((1..=10).contains(&files.len()), "{step}");
        for f in files {
            let png = std::fs::read(traj.join(&f)).unwrap();
            let decoder = png::Decoder::new(std::io::Cursor::new(png));
            let info = decoder.read_info().unwrap();
            let (w, h) = (info.info().width, info.info().height);
            assert_eq!((w, h), (400, 300), "{f} fitted to --max-size");
        }
    }
    // The last step, observed 1.5 s after the command was typed, sees the last 2 s: the
    // screen before the typing and after it.
    let last = steps.last().unwrap();
    assert!(stills(last).len() >= 2, "{last}");
}
