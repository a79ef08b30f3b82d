//! The HTML report of a run the size of a real one (12 task runs, up to 15 steps each,
//! desktop- and phone-sized screenshots, model traffic) stays a few megabytes, and renders
//! in headless Chromium: the summary and the trajectory viewer both draw something.

use pincer::agent::{Exchange, Usage};
use pincer::eval::graph::NodeProgress;
use pincer::metrics::Termination;
use pincer::rundir::record::{ImageRef, JsonlWriter, StepRecord, TaskRecord, Timing};
use pincer::task::PlatformClass;
use serde_json::json;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// An RGB canvas for screenshot-like test images.
struct Canvas {
    w: u32,
    h: u32,
    px: Vec<u8>,
    seed: u64,
}

impl Canvas {
    fn new(w: u32, h: u32, bg: [u8; 3], seed: u64) -> Self {
        Self {
            w,
            h,
            px: bg.repeat((w * h) as usize),
            seed,
        }
    }

    fn rand(&mut self, n: u32) -> u32 {
        self.seed = self
            .seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((self.seed >> 33) % u64::from(n.max(1))) as u32
    }

    fn fill(&mut self, x: u32, y: u32, w: u32, h: u32, c: [u8; 3]) {
        for yy in y..(y + h).min(self.h) {
            for xx in x..(x + w).min(self.w) {
                let i = ((yy * self.w + xx) * 3) as usize;
                self.px[i..i + 3].copy_from_slice(&c);
            }
        }
    }

    fn outline(&mut self, x: u32, y: u32, w: u32, h: u32, c: [u8; 3]) {
        self.fill(x, y, w, 2, c);
        self.fill(x, y + h.saturating_sub(2), w, 2, c);
        self.fill(x, y, 2, h, c);
        self.fill(x + w.saturating_sub(2), y, 2, h, c);
    }

    /// Lines of word-like dark runs, as text looks to a compressor.
    fn text(&mut self, x: u32, y: u32, width: u32, lines: u32, c: [u8; 3]) {
        for l in 0..lines {
            let mut cx = x;
            while cx < x + width {
                let word = 12 + self.rand(48);
                self.fill(cx, y + l * 18, word.min(x + width - cx), 9, c);
                cx += word + 6;
            }
        }
    }

    fn png(&self) -> Vec<u8> {
        let mut out = Vec::new();
        let mut enc = png::Encoder::new(&mut out, self.w, self.h);
        enc.set_color(png::ColorType::Rgb);
        enc.set_depth(png::BitDepth::Eight);
        let mut w = enc.write_header().unwrap();
        w.write_image_data(&self.px).unwrap();
        w.finish().unwrap();
        out
    }
}

/// A desktop with a text-editor-like window and set-of-marks boxes.
fn desktop_shot(seed: u64) -> Vec<u8> {
    let mut c = Canvas::new(1280, 800, [46, 52, 64], seed);
    c.fill(0, 0, 1280, 28, [30, 30, 30]);
    c.fill(120, 70, 1040, 660, [250, 250, 250]);
    c.fill(120, 70, 1040, 36, [222, 222, 226]);
    c.text(140, 82, 300, 1, [60, 60, 60]);
    c.fill(120, 106, 1040, 40, [240, 240, 243]);
    c.text(160, 180, 900, 24, [40, 40, 40]);
    let colours = [[230, 57, 70], [29, 53, 87], [42, 157, 143], [233, 196, 106]];
    for k in 0..14 {
        let (x, y) = (130 + c.rand(950), 110 + c.rand(560));
        let col = colours[(k % 4) as usize];
        let (w, h) = (60 + c.rand(140), 24 + c.rand(30));
        c.outline(x, y, w, h, col);
        c.fill(x, y.saturating_sub(14), 22, 14, col);
    }
    c.png()
}

/// A phone home screen with app icons.
fn phone_shot(seed: u64) -> Vec<u8> {
    let mut c = Canvas::new(540, 1200, [18, 70, 110], seed);
    c.fill(0, 0, 540, 36, [10, 10, 10]);
    for row in 0..5 {
        for col in 0..4 {
            let shade = [0, 1, 2].map(|_| 80 + c.rand(150) as u8);
            c.fill(40 + col * 125, 200 + row * 170, 90, 90, shade);
            c.text(45 + col * 125, 300 + row * 170, 80, 1, [240, 240, 240]);
        }
    }
    c.png()
}

struct Spec {
    id: &'static str,
    class: PlatformClass,
    end: Termination,
    steps: u32,
    /// Checkpoint ids and their prerequisites.
    graph: &'static [(&'static str, &'static [&'static str])],
}

const TASKS: &[Spec] = &[
    Spec {
        id: "gedit-write-note",
        class: PlatformClass::SingleDesktop,
        end: Termination::Success,
        steps: 6,
        graph: &[
            ("app_open", &[]),
            ("text_typed", &["app_open"]),
            ("file_saved", &["text_typed"]),
        ],
    },
    Spec {
        id: "calc-sum-column",
        class: PlatformClass::SingleDesktop,
        end: Termination::Success,
        steps: 9,
        graph: &[
            ("calc_open", &[]),
            ("values_entered", &["calc_open"]),
            ("formula", &["values_entered"]),
            ("saved_xlsx", &["formula"]),
        ],
    },
    Spec {
        id: "files-rename-report",
        class: PlatformClass::SingleDesktop,
        end: Termination::StepLimit,
        steps: 15,
        graph: &[("files_open", &[]), ("renamed", &["files_open"])],
    },
    Spec {
        id: "settings-dark-mode",
        class: PlatformClass::SingleDesktop,
        end: Termination::Success,
        steps: 4,
        graph: &[("settings_open", &[]), ("dark_theme", &["settings_open"])],
    },
    Spec {
        id: "zenity-entry-name",
        class: PlatformClass::SingleDesktop,
        end: Termination::FalseCompletion,
        steps: 5,
        graph: &[("dialog", &[]), ("answered", &["dialog"])],
    },
    Spec {
        id: "terminal-make-dir",
        class: PlatformClass::SingleDesktop,
        end: Termination::Success,
        steps: 7,
        graph: &[
            ("terminal", &[]),
            ("dir_exists", &["terminal"]),
            ("file_inside", &["dir_exists"]),
        ],
    },
    Spec {
        id: "editor-find-replace",
        class: PlatformClass::SingleDesktop,
        end: Termination::InvalidAction,
        steps: 8,
        graph: &[
            ("open", &[]),
            ("replaced", &["open"]),
            ("saved", &["replaced"]),
        ],
    },
    Spec {
        id: "android-set-alarm",
        class: PlatformClass::Android,
        end: Termination::Success,
        steps: 8,
        graph: &[("clock_open", &[]), ("alarm_set", &["clock_open"])],
    },
    Spec {
        id: "android-add-contact",
        class: PlatformClass::Android,
        end: Termination::StepLimit,
        steps: 15,
        graph: &[
            ("contacts", &[]),
            ("name", &["contacts"]),
            ("phone", &["contacts"]),
            ("saved", &["name", "phone"]),
        ],
    },
    Spec {
        id: "cross-copy-otp",
        class: PlatformClass::CrossEnvironment,
        end: Termination::Success,
        steps: 11,
        graph: &[
            ("sms_open", &[]),
            ("browser_open", &[]),
            ("code_read", &["sms_open"]),
            ("code_typed", &["code_read", "browser_open"]),
            ("signed_in", &["code_typed"]),
        ],
    },
    Spec {
        id: "cross-share-photo",
        class: PlatformClass::CrossEnvironment,
        end: Termination::EnvironmentError,
        steps: 3,
        graph: &[
            ("gallery", &[]),
            ("shared", &["gallery"]),
            ("received", &["shared"]),
        ],
    },
    Spec {
        id: "cross-calendar-sync",
        class: PlatformClass::CrossEnvironment,
        end: Termination::AgentError,
        steps: 2,
        graph: &[("event_made", &[]), ("event_synced", &["event_made"])],
    },
];

fn roles(class: PlatformClass) -> &'static [&'static str] {
    match class {
        PlatformClass::SingleDesktop => &["desktop"],
        PlatformClass::Android => &["phone"],
        PlatformClass::CrossEnvironment => &["desktop", "phone"],
    }
}

/// Writes a run directory like `pincer run` leaves: run.json, tasks.json, results.jsonl and
/// one trajectory per task run.
fn write_run(dir: &Path) {
    let desktop: Vec<Vec<u8>> = (0..4).map(desktop_shot).collect();
    let phone: Vec<Vec<u8>> = (0..2).map(phone_shot).collect();
    let ids: Vec<&str> = TASKS.iter().map(|t| t.id).collect();
    let run_json = json!({
        "agent": "openai:gpt-4o (single)",
        "tasks": ids,
        "repeat": 1,
        "seed": 0,
        "sets": [["s0", ["desktop", "phone"]], ["s1", ["desktop", "phone"]]],
        "observation": {"screenshot": false, "marks": true, "tree_text": false, "max_size": [1280, 800]},
    });
    std::fs::write(dir.join("run.json"), run_json.to_string()).unwrap();
    let tasks: Vec<serde_json::Value> = TASKS
        .iter()
        .map(|t| {
            json!({
                "id": t.id,
                "instruction": format!("Task {}: do the thing.", t.id),
                "envs": roles(t.class).iter().map(|r| (r.to_string(), json!({"platform": if *r == "phone" { "android" } else { "linux" }}))).collect::<serde_json::Map<_, _>>(),
                "checkpoints": t.graph.iter().map(|(id, after)| json!({"id": id, "env": roles(t.class)[0], "check": "window_exists", "after": after})).collect::<Vec<_>>(),
            })
        })
        .collect();
    std::fs::write(
        dir.join("tasks.json"),
        serde_json::to_string(&tasks).unwrap(),
    )
    .unwrap();

    let system_prompt = "You operate a computer through tools. ".repeat(120);
    let mut results = JsonlWriter::append(&dir.join("results.jsonl")).unwrap();
    let start = 1_760_000_000_000u64;
    for (ti, t) in TASKS.iter().enumerate() {
        let traj_rel = format!("tasks/{}__r0", t.id);
        let traj = dir.join(&traj_rel);
        std::fs::create_dir_all(&traj).unwrap();
        let mut steps = JsonlWriter::append(&traj.join("steps.jsonl")).unwrap();
        let n = t.graph.len();
        let success = t.end == Termination::Success;
        let passing = if success { n } else { n / 2 };
        // Checkpoint k passes at a step spread over the run.
        let pass_step = |k: usize| ((k as u32 + 1) * t.steps / (n as u32 + 1)).max(1);
        let mut usage = Usage::default();
        for s in 1..=t.steps {
            let mut images = Vec::new();
            for role in roles(t.class) {
                let file = format!("step-{s:03}-{role}-marks.png");
                let bytes = if *role == "phone" {
                    &phone[(s as usize) % 2]
                } else {
                    &desktop[(s as usize + ti) % 4]
                };
                std::fs::write(traj.join(&file), bytes).unwrap();
                images.push(ImageRef {
                    role: (*role).into(),
                    kind: "marks".into(),
                    file,
                });
            }
            let passed: Vec<String> = (0..passing)
                .filter(|k| pass_step(*k) == s)
                .map(|k| t.graph[k].0.to_owned())
                .collect();
            let step_usage = Usage {
                prompt: 2400 + u64::from(s) * 350,
                completion: 120,
            };
            usage.add(step_usage);
            let action =
                json!({"action": "click", "env": roles(t.class)[0], "target": {"element": 3 + s}});
            let rec = StepRecord {
                step: s,
                images,
                elements: vec![(
                    roles(t.class)[0].into(),
                    (1..40)
                        .map(|e| {
                            format!(
                                "[{e}] push button \"Button {e}\" at ({}, {})",
                                e * 20,
                                e * 11
                            )
                        })
                        .collect::<Vec<_>>()
                        .join("\n"),
                )],
                thought: Some(format!(
                    "Step {s}: the window shows the editor; I click element {} to continue. <script>alert('x')</script>",
                    3 + s
                )),
                actions: vec![action.clone()],
                results: vec!["ok".into()],
                invalid: None,
                exchanges: vec![Exchange {
                    who: "agent".into(),
                    request: json!({"model": "gpt-4o", "messages": [{"role": "system", "content": system_prompt}, {"role": "user", "content": [{"type": "text", "text": format!("Step {s}. Checkpoints so far: {passed:?}")}, {"type": "image_url", "image_url": {"url": format!("<image step-{s:03}-marks.png>")}}]}]}),
                    response: json!({"choices": [{"message": {"tool_calls": [{"function": {"name": "click", "arguments": action.to_string()}}]}}]}),
                    ms: 1800 + u64::from(s) * 40,
                    usage: step_usage,
                }],
                usage: step_usage,
                evaluation: vec![],
                passed,
                video_ms: Vec::new(),
                timing: Timing {
                    observe_ms: 140.0 + f64::from(s),
                    act_ms: 60.0,
                    evaluate_ms: 25.0,
                    agent_ms: 1900.0,
                },
            };
            steps.write(&rec).unwrap();
        }
        let rec = TaskRecord {
            task: t.id.into(),
            repeat: 0,
            seed: 0,
            agent: "openai:gpt-4o (single)".into(),
            class: t.class,
            instruction: format!("Task {}: do the thing, then save.", t.id),
            termination: t.end,
            detail: (!success).then(|| format!("{} after {} steps", t.end, t.steps)),
            passed: passing,
            final_passed: Some(passing),
            score: None,
            compat: None,
            total: n,
            actions: t.steps,
            usage,
            wall_ms: u64::from(t.steps) * 2300,
            harness_ms_p50: 226.0,
            env_set: format!("s{}", ti % 2),
            progress: t
                .graph
                .iter()
                .enumerate()
                .map(|(k, (id, _))| NodeProgress {
                    id: (*id).into(),
                    passed_at: (k < passing).then(|| pass_step(k)),
                    passed_ms: (k < passing).then(|| u64::from(pass_step(k)) * 2100),
                    checks: 3,
                    feedback: Some(if k < passing {
                        "ok".into()
                    } else {
                        "not yet: no such window".into()
                    }),
                    held_at_end: (k < passing).then_some(true),
                    score: None,
                    final_only: false,
                })
                .collect(),
            trajectory: traj_rel,
            started_ms: start + ti as u64 * 40_000,
            final_images: Vec::new(),
            retried: vec![],
            tool_calls: 0,
        };
        results.write(&rec).unwrap();
    }
}

fn chromium() -> Option<PathBuf> {
    ["chromium", "chromium-browser", "google-chrome"]
        .iter()
        .find_map(|name| {
            std::env::var_os("PATH").and_then(|paths| {
                std::env::split_paths(&paths)
                    .map(|d| d.join(name))
                    .find(|p| p.is_file())
            })
        })
}

/// Screenshots `url` with headless Chromium into `out`; the error says why there is none.
fn screenshot(chrome: &Path, url: &str, out: &Path) -> Result<(), String> {
    let profile = tempfile::tempdir().unwrap();
    let log_path = profile.path().join("chromium.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let mut child = Command::new(chrome)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(format!("--screenshot={}", out.display()))
        .arg("--window-size=1400,1000")
        .arg(url)
        .stdout(Stdio::null())
        .stderr(log)
        // Its own process group, so a hung browser goes with all its helper processes.
        .process_group(0)
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", chrome.display()))?;
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
            let err = std::fs::read_to_string(&log_path).unwrap_or_default();
            return if out.is_file() {
                Ok(())
            } else {
                Err(format!(
                    "chromium exited with {status} and no screenshot:\n{err}"
                ))
            };
        }
        if Instant::now() > deadline {
            // SAFETY: kill(2) on the process group we created; no memory is involved.
            unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
            let _ = child.wait();
            return Err("chromium took longer than 90 s".into());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Width, height, and the share of pixels that differ from the most common colour.
fn ink(png_path: &Path) -> (u32, u32, f64) {
    let (w, h, px) = pixels(png_path);
    let mut counts = std::collections::HashMap::new();
    for p in &px {
        *counts.entry(*p).or_insert(0usize) += 1;
    }
    let background = counts.values().copied().max().unwrap_or(0);
    (w, h, 1.0 - background as f64 / px.len().max(1) as f64)
}

#[test]
fn a_full_run_report_is_small_and_renders_in_chromium() {
    let dir = tempfile::Builder::new()
        .prefix("pincer-report-")
        .tempdir()
        .unwrap();
    write_run(dir.path());
    let t = Instant::now();
    let paths = pincer::report::write(dir.path()).expect("report");
    eprintln!("report written in {:.1} s", t.elapsed().as_secs_f64());
    let html = std::fs::read_to_string(&paths.html).unwrap();
    // Set PINCER_REPORT_SCREENSHOTS=DIR to keep the page and its screenshots for a look.
    let keep = std::env::var_os("PINCER_REPORT_SCREENSHOTS").map(PathBuf::from);
    if let Some(k) = &keep {
        std::fs::create_dir_all(k).unwrap();
        std::fs::copy(&paths.html, k.join("report.html")).unwrap();
    }
    let images = html.matches("src=\"data:image/jpeg;base64,").count();
    let steps: u32 = TASKS
        .iter()
        .map(|t| t.steps * roles(t.class).len() as u32)
        .sum();
    assert_eq!(images as u32, steps, "one image per role and step");
    eprintln!(
        "report.html: {:.2} MB, {images} screenshots",
        html.len() as f64 / 1e6
    );
    assert!(
        html.len() < 6_000_000,
        "report.html is {} bytes",
        html.len()
    );
    let md = std::fs::read_to_string(&paths.markdown).unwrap();
    assert!(md.contains("| **all** | 12 | 11 | 54.5% |"), "{md}");

    let chrome = chromium().expect(
        "chromium is not installed: `./run.sh deps` (or apt-get install chromium) installs it",
    );
    let url = format!("file://{}", paths.html.display());
    let mut shots = Vec::new();
    for (name, url, min_ink) in [
        ("summary", url.clone(), 0.10),
        ("viewer", format!("{url}#run-9-4"), 0.10),
    ] {
        let shot = dir.path().join(format!("{name}.png"));
        screenshot(&chrome, &url, &shot).unwrap_or_else(|e| panic!("{name}: {e}"));
        if let Some(k) = &keep {
            std::fs::copy(&shot, k.join(format!("{name}.png"))).unwrap();
        }
        let (w, h, share) = ink(&shot);
        eprintln!("{name}: {w}x{h}, {:.0}% of pixels drawn", share * 100.0);
        assert_eq!((w, h), (1400, 1000));
        assert!(
            share > min_ink,
            "{name} looks blank: {:.1}% of pixels differ from the background",
            share * 100.0
        );
        shots.push(shot);
    }
    // The viewer really opened: its page is not the summary page again.
    let changed = differing(&shots[0], &shots[1]);
    eprintln!(
        "viewer vs summary: {:.0}% of pixels differ",
        changed * 100.0
    );
    assert!(
        changed > 0.2,
        "the trajectory viewer did not open: only {:.1}% of pixels differ from the summary",
        changed * 100.0
    );
}

/// Width, height and RGB pixels of a PNG.
fn pixels(png_path: &Path) -> (u32, u32, Vec<[u8; 3]>) {
    let decoder = png::Decoder::new(std::io::BufReader::new(
        std::fs::File::open(png_path).unwrap(),
    ));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buf).unwrap();
    let channels = info.color_type.samples();
    let px = buf[..info.buffer_size()]
        .chunks(channels)
        .map(|p| [p[0], p[1.min(channels - 1)], p[2.min(channels - 1)]])
        .collect();
    (info.width, info.height, px)
}

/// The share of pixels that differ between two screenshots of the same size.
fn differing(a: &Path, b: &Path) -> f64 {
    let ((_, _, a), (_, _, b)) = (pixels(a), pixels(b));
    assert_eq!(a.len(), b.len());
    a.iter().zip(&b).filter(|(x, y)| x != y).count() as f64 / a.len().max(1) as f64
}
