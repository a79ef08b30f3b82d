//! Reports of a small synthetic run directory: a success with screenshots, a step-limit run
//! whose trajectory is gone, an environment failure with a missing screenshot, and an
//! aborted attempt replaced on resume.

use super::*;
use crate::agent::{Exchange, Usage};
use crate::eval::graph::NodeProgress;
use crate::metrics::Termination;
use crate::rundir::record::{ImageRef, JsonlWriter, StepRecord, TaskRecord, Timing};
use crate::task::PlatformClass;
use base64::Engine;
use serde_json::json;

/// A tiny opaque PNG, written with the png crate as the runner writes screenshots.
fn tiny_png(path: &Path, w: u32, h: u32, shade: u8) {
    let mut rgb = Vec::with_capacity((w * h * 3) as usize);
    for y in 0..h {
        for x in 0..w {
            rgb.extend_from_slice(&[shade, (x * 255 / w) as u8, (y * 255 / h) as u8]);
        }
    }
    let mut out = Vec::new();
    let mut enc = png::Encoder::new(&mut out, w, h);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    let mut wr = enc.write_header().unwrap();
    wr.write_image_data(&rgb).unwrap();
    wr.finish().unwrap();
    std::fs::write(path, out).unwrap();
}

fn record(
    task: &str,
    repeat: u32,
    class: PlatformClass,
    t: Termination,
    passed: usize,
    total: usize,
) -> TaskRecord {
    TaskRecord {
        task: task.into(),
        repeat,
        seed: 7 + u64::from(repeat),
        agent: "test-agent".into(),
        class,
        instruction: "Write <b>\"hello\"</b> & save".into(),
        termination: t,
        detail: None,
        passed,
        // The end of a run whose environment failed is not checked.
        final_passed: (t != Termination::EnvironmentError).then_some(passed),
        total,
        actions: 0,
        usage: Usage::default(),
        wall_ms: 0,
        harness_ms_p50: 35.0,
        env_set: "s0".into(),
        progress: vec![],
        trajectory: format!("tasks/{task}__r{repeat}"),
        started_ms: 1_709_301_909_000,
        final_images: Vec::new(),
        retried: vec![],
        score: None,
        compat: None,
        tool_calls: 0,
    }
}

fn node(id: &str, passed_at: Option<u32>) -> NodeProgress {
    NodeProgress {
        id: id.into(),
        passed_at,
        passed_ms: passed_at.map(|s| u64::from(s) * 1000),
        checks: 2,
        feedback: Some(format!("feedback of {id}")),
        held_at_end: passed_at.map(|_| true),
        score: None,
        final_only: false,
    }
}

fn step(n: u32, action: serde_json::Value, passed: &[&str], images: Vec<ImageRef>) -> StepRecord {
    StepRecord {
        step: n,
        images,
        elements: vec![(
            "desktop".into(),
            "[1] button \"OK\"\n[2] text \"name\"".into(),
        )],
        thought: None,
        actions: vec![action],
        results: vec!["ok".into()],
        invalid: None,
        exchanges: vec![],
        usage: Usage {
            prompt: 300,
            completion: 100,
        },
        evaluation: vec![],
        passed: passed.iter().map(|s| (*s).to_owned()).collect(),
        video_ms: Vec::new(),
        timing: Timing {
            observe_ms: 10.0,
            act_ms: 20.0,
            evaluate_ms: 5.0,
            agent_ms: 900.0,
        },
    }
}

fn image(role: &str, kind: &str, n: u32) -> ImageRef {
    ImageRef {
        role: role.into(),
        kind: kind.into(),
        file: format!("step-{n:03}-{role}-{kind}.png"),
    }
}

/// Writes the synthetic run directory.
fn synthetic_run(dir: &Path) {
    std::fs::write(
        dir.join("run.json"),
        serde_json::to_string(&json!({
            "agent": "test-agent",
            "tasks": ["write-file", "cross-copy"],
            "repeat": 2,
            "seed": 7,
            "sets": [["s0", ["desktop", "phone"]]],
            "observation": {"screenshot": true, "marks": true, "tree_text": false, "max_size": null},
        }))
        .unwrap(),
    )
    .unwrap();
    std::fs::write(
        dir.join("tasks.json"),
        serde_json::to_string(&json!([{
            "id": "write-file",
            "instruction": "x",
            "envs": {"desktop": {"platform": "linux"}},
            "checkpoints": [
                {"id": "a", "env": "desktop", "check": "file_exists", "args": {"path": "/tmp/x"}},
                {"id": "b", "env": "desktop", "check": "file_contains", "after": ["a"]}
            ]
        }]))
        .unwrap(),
    )
    .unwrap();

    let mut w = JsonlWriter::append(&dir.join("results.jsonl")).unwrap();
    // An attempt the resumed run replaced.
    w.write(&record(
        "cross-copy",
        0,
        PlatformClass::CrossEnvironment,
        Termination::Aborted,
        0,
        3,
    ))
    .unwrap();

    let mut ok = record(
        "write-file",
        0,
        PlatformClass::SingleDesktop,
        Termination::Success,
        2,
        2,
    );
    ok.actions = 3;
    ok.tool_calls = 1;
    ok.usage = Usage {
        prompt: 1000,
        completion: 200,
    };
    ok.wall_ms = 10_000;
    ok.progress = vec![node("a", Some(1)), node("b", Some(3))];
    w.write(&ok).unwrap();

    let mut limit = record(
        "write-file",
        1,
        PlatformClass::SingleDesktop,
        Termination::StepLimit,
        1,
        2,
    );
    limit.actions = 15;
    limit.usage = Usage {
        prompt: 3000,
        completion: 600,
    };
    limit.wall_ms = 30_000;
    limit.detail = Some("15 actions".into());
    limit.progress = vec![node("a", Some(4)), node("b", None)];
    w.write(&limit).unwrap();

    let mut env = record(
        "cross-copy",
        0,
        PlatformClass::CrossEnvironment,
        Termination::EnvironmentError,
        0,
        3,
    );
    env.actions = 1;
    env.wall_ms = 4_000;
    env.detail = Some("environment 'phone' failed: connection lost".into());
    env.progress = vec![node("c1", None), node("c2", None), node("c3", None)];
    w.write(&env).unwrap();

    // The successful run's trajectory: three steps, screenshots on disk.
    let traj = dir.join("tasks/write-file__r0");
    std::fs::create_dir_all(&traj).unwrap();
    tiny_png(&traj.join("step-001-desktop-screenshot.png"), 64, 40, 10);
    for n in 1..=3 {
        tiny_png(
            &traj.join(format!("step-{n:03}-desktop-marks.png")),
            64,
            40,
            60 * n as u8,
        );
    }
    let click = json!({"action": "click", "env": "desktop", "target": {"element": 7}});
    let mut s1 = step(
        1,
        click.clone(),
        &["a"],
        vec![
            image("desktop", "screenshot", 1),
            image("desktop", "marks", 1),
        ],
    );
    s1.exchanges = vec![Exchange {
        who: "agent".into(),
        request: json!({"messages": [{"role": "user", "content": "click OK"}]}),
        response: json!({"content": "</pre><script>alert(2)</script>"}),
        ms: 900,
        usage: Usage {
            prompt: 4200,
            completion: 120,
        },
    }];
    let mut s2 = step(
        2,
        json!({"action": "type", "env": "desktop", "text": "hello", "target": null}),
        &[],
        vec![image("desktop", "marks", 2)],
    );
    s2.thought = Some("I will type now. <script>alert(\"pwned\")</script>".into());
    let s3 = step(
        3,
        json!({"action": "hotkey", "env": "desktop", "keys": ["ctrl", "s"]}),
        &["b"],
        vec![image("desktop", "marks", 3)],
    );
    let mut sw = JsonlWriter::append(&traj.join("steps.jsonl")).unwrap();
    for s in [&s1, &s2, &s3] {
        sw.write(s).unwrap();
    }

    // The environment failure: one step whose screenshot never reached the disk.
    let traj = dir.join("tasks/cross-copy__r0");
    std::fs::create_dir_all(&traj).unwrap();
    let mut sw = JsonlWriter::append(&traj.join("steps.jsonl")).unwrap();
    let mut s = step(
        1,
        json!({"action": "tap", "env": "phone", "target": {"x": 1, "y": 2}}),
        &[],
        vec![image("phone", "marks", 1)],
    );
    s.results = vec!["error: connection lost".into()];
    sw.write(&s).unwrap();
}

fn report() -> (tempfile::TempDir, String, String) {
    let dir = tempfile::tempdir().unwrap();
    synthetic_run(dir.path());
    let paths = write(dir.path()).unwrap();
    let md = std::fs::read_to_string(&paths.markdown).unwrap();
    let html = std::fs::read_to_string(&paths.html).unwrap();
    (dir, md, html)
}

/// The Markdown row whose first cell is `first`.
fn md_row<'a>(md: &'a str, first: &str) -> Vec<&'a str> {
    let line = md
        .lines()
        .find(|l| l.starts_with(&format!("| {first} |")))
        .unwrap_or_else(|| panic!("no row {first} in\n{md}"));
    line.trim_matches('|').split(" | ").map(str::trim).collect()
}

#[test]
fn markdown_has_the_numbers() {
    let (_dir, md, _) = report();
    assert!(md.contains("- **agent**: test-agent"), "{md}");
    assert!(
        md.contains("3 task runs, 2 per task, base seed 7; 1 earlier record(s) replaced"),
        "{md}"
    );
    assert!(md.contains("2024-03-01 14:05:09 UTC"), "{md}");
    assert!(md.contains("s0 (desktop, phone)"), "{md}");

    // single-desktop: a success (CR 1, 3 actions, 1200 tokens) and a step limit (CR 0.5,
    // 15 actions, 3600 tokens) over seeds 0 and 1.
    let sd = md_row(&md, "single-desktop");
    assert_eq!(
        sd[1..10],
        [
            "2", "2", "50.0%", "75.0%", "75.0%", "0.1833", "0.4861", "9.0", "20.0 s"
        ],
        "{md}"
    );
    assert_eq!(sd[10], "50.0% ± 70.7 (2 seeds)");
    assert_eq!(sd[11], "75.0% ± 35.4 (2 seeds)");
    // The environment failure is reported, never scored.
    let cross = md_row(&md, "cross-environment");
    assert_eq!(cross[1..5], ["1", "0", "—", "—"], "{md}");
    let all = md_row(&md, "**all**");
    assert_eq!(all[1..5], ["3", "2", "50.0%", "75.0%"], "{md}");

    assert_eq!(md_row(&md, "success")[1..3], ["1", "33.3%"]);
    assert_eq!(md_row(&md, "environment-error")[3], "no: infrastructure");
    assert!(
        !md.contains("| aborted |"),
        "the replaced attempt is not counted:\n{md}"
    );

    // Tool calls are told apart from GUI actions per task run.
    let task = md_row(&md, "write-file");
    assert_eq!(
        task,
        [
            "write-file",
            "0",
            "single-desktop",
            "success",
            "2/2",
            "2/2",
            "—",
            "3 (1 tool)",
            "1.2k",
            "10.0 s",
            ""
        ]
    );
    let cross = md_row(&md, "cross-copy");
    assert_eq!(cross[3..8], ["environment-error", "0/3", "—", "—", "1"]);
    assert!(cross[10].starts_with("environment 'phone' failed"));

    // Observing and evaluating are overhead; carrying out the input is not.
    let harness = md_row(&md, "**harness overhead (observe + evaluate)**");
    assert_eq!(harness[1..], ["15.0", "15.0", "15.0", "15.0"]);
    assert!(
        md.contains("4 steps measured. Median of the per-task-run medians: 35.0 ms."),
        "{md}"
    );
    // Model text never reaches the Markdown as raw HTML.
    assert!(!md.contains("<b>"));
}

#[test]
fn html_has_tables_images_and_escapes() {
    let (_dir, _, html) = report();
    for needle in [
        "· 4.3k tokens (4.2k in, 120 out)</summary>",
        "<h2>By platform class</h2>",
        "<h2>By termination</h2>",
        "<h2>Harness overhead per step</h2>",
        "id=\"tab-tasks\"",
        "<a href=\"#run-0\">write-file</a>",
        "50.0%",
    ] {
        assert!(html.contains(needle), "no {needle}");
    }
    // Self-contained: nothing to fetch.
    for remote in ["http://", "https://", "<link", "src=\"//", "@import"] {
        let hits: Vec<_> = html
            .match_indices(remote)
            .filter(|(i, _)| !html[*i..].starts_with("http://www.w3.org/2000/svg"))
            .collect();
        assert!(hits.is_empty(), "{remote} in the page");
    }

    // Every embedded image is a JPEG that decodes: the two of step 1 and one each of steps 2, 3.
    let urls: Vec<&str> = html
        .split("src=\"data:image/jpeg;base64,")
        .skip(1)
        .map(|s| &s[..s.find('"').unwrap()])
        .collect();
    assert_eq!(urls.len(), 4);
    for u in urls {
        let bytes = base64::engine::general_purpose::STANDARD.decode(u).unwrap();
        let img = crate::picture::decode(&bytes).unwrap();
        assert_eq!((img.width, img.height), (64, 40));
    }
    // Missing things are shown as missing.
    assert!(
        html.contains("phone · set-of-marks screenshot: cannot open"),
        "missing image"
    );
    assert!(
        html.contains("no steps were recorded"),
        "missing trajectory"
    );
    assert!(
        html.contains("not in tasks.json"),
        "missing task definition"
    );

    // Model output and task text are escaped; the only script is the page's own.
    assert_eq!(html.matches("<script").count(), 1);
    assert!(html.contains("&lt;script&gt;alert(&quot;pwned&quot;)&lt;/script&gt;"));
    assert!(html.contains("&lt;/pre&gt;&lt;script&gt;alert(2)"));
    assert!(html.contains("Write &lt;b&gt;&quot;hello&quot;&lt;/b&gt; &amp; save"));
    assert!(
        html.contains("click element 7 on desktop"),
        "actions are described"
    );
}

/// The view of step `i` of task run `run`.
fn view(html: &str, run: usize, i: usize) -> &str {
    let section = &html[html.find(&format!("id=\"traj-{run}\"")).unwrap()..];
    let start = section
        .find(&format!(
            "<article class=\"step{}\" data-i=\"{i}\">",
            if i == 0 { " active" } else { "" }
        ))
        .unwrap();
    let view = &section[start..];
    &view[..view.find("</article>").unwrap()]
}

/// The class and fill of a node in a drawing.
fn node_colour(view: &str, id: &str) -> (String, String) {
    let at = view
        .find(&format!("data-node=\"{id}\""))
        .unwrap_or_else(|| panic!("no node {id}"));
    let class_start = view[..at].rfind("class=\"node ").unwrap() + "class=\"node ".len();
    let class = view[class_start..at]
        .trim_end()
        .trim_end_matches('"')
        .to_owned();
    let fill = &view[at..][view[at..].find("fill=\"").unwrap() + 6..];
    (class, fill[..fill.find('"').unwrap()].to_owned())
}

#[test]
fn checkpoints_light_up_step_by_step() {
    let (_dir, _, html) = report();
    let green = "#16a34a".to_owned();
    let pale = "#dcfce7".to_owned();
    let amber = "#fef3c7".to_owned();
    let grey = "#f1f5f9".to_owned();
    // Step 1 passes a; b becomes ready.
    let v = view(&html, 0, 0);
    assert_eq!(node_colour(v, "a"), ("just-passed".into(), green.clone()));
    assert_eq!(node_colour(v, "b"), ("ready".into(), amber));
    assert!(v.contains("✓ a"));
    // Step 2 passes nothing.
    let v = view(&html, 0, 1);
    assert_eq!(node_colour(v, "a"), ("passed".into(), pale.clone()));
    // Step 3 passes b; the end shows both passed.
    assert_eq!(
        node_colour(view(&html, 0, 2), "b"),
        ("just-passed".into(), green)
    );
    let end = view(&html, 0, 3);
    assert_eq!(node_colour(end, "b"), ("passed".into(), pale));
    // The edge a -> b is drawn.
    assert_eq!(end.matches("class=\"edge\"").count(), 1);
    // Without its task definition, a graph still shows its checkpoints, waiting.
    let v = view(&html, 2, 0);
    assert_eq!(node_colour(v, "c2"), ("ready".into(), "#fef3c7".into()));
    // The step-limit run has no trajectory: only its end, where a passed.
    let end = view(&html, 1, 0);
    assert_eq!(node_colour(end, "a").0, "passed");
    assert_eq!(node_colour(end, "b"), ("ready".into(), "#fef3c7".into()));
    assert!(!end.contains(&grey), "no waiting node in {end}");
}

#[test]
fn progress_places_nodes_when_steps_do_not_say() {
    let spec = load::GraphSpec {
        id: "t".into(),
        checkpoints: vec![load::NodeSpec {
            id: "a".into(),
            ..Default::default()
        }],
    };
    let layout = graph::Layout::of(&spec);
    let mut rec = record(
        "t",
        0,
        PlatformClass::SingleDesktop,
        Termination::Success,
        1,
        1,
    );
    rec.progress = vec![node("a", Some(2))];
    let wait = json!({"action": "wait", "seconds": 1.0});
    let key = json!({"action": "key", "env": "desktop", "key": "a"});
    let mut s1 = step(1, key.clone(), &[], vec![]);
    s1.actions = vec![wait.clone(), key.clone()];
    s1.results = vec!["ok".into(), "ok".into()];
    let s2 = step(2, wait, &[], vec![]);
    let s3 = step(3, key, &[], vec![]);
    // Actions counted: 1 after step 1 (the wait is free), 1 after step 2, 2 after step 3.
    assert_eq!(
        graph::passed_at_step(&layout, &rec, &[s1.clone(), s2.clone(), s3]),
        vec![Some(Some(2))]
    );
    assert_eq!(
        graph::passed_at_step(&layout, &rec, &[s1, s2]),
        vec![Some(None)]
    );
}

#[test]
fn runs_without_anything_still_report() {
    let dir = tempfile::tempdir().unwrap();
    let err = write(dir.path()).unwrap_err().to_string();
    assert!(err.contains("not a run directory"), "{err}");
    std::fs::write(dir.path().join("results.jsonl"), "").unwrap();
    let paths = write(dir.path()).unwrap();
    let md = std::fs::read_to_string(paths.markdown).unwrap();
    assert!(md.contains("0 task runs"), "{md}");
    let html = std::fs::read_to_string(paths.html).unwrap();
    assert!(html.contains("No task runs recorded."));
}

#[test]
fn graded_runs_get_their_score_by_domain() {
    let dir = tempfile::tempdir().unwrap();
    let mut results = JsonlWriter::append(&dir.path().join("results.jsonl")).unwrap();
    let graded = |task: &str, t: Termination, score: f64| TaskRecord {
        score: Some(score),
        compat: None,
        ..record(task, 0, PlatformClass::SingleDesktop, t, 1, 1)
    };
    for rec in [
        graded("libreoffice_calc/a", Termination::Success, 1.0),
        graded("libreoffice_calc/b", Termination::FalseCompletion, 0.5),
        graded("os/c", Termination::FalseCompletion, 0.0),
        // Left out, as OSWorld leaves out tasks whose evaluation raised.
        graded("os/d", Termination::EvaluatorError, 0.0),
    ] {
        results.write(&rec).unwrap();
    }
    let paths = write(dir.path()).unwrap();
    let md = std::fs::read_to_string(paths.markdown).unwrap();
    let (_, section) = md.split_once("## Score by domain").expect("a score table");
    assert_eq!(
        md_row(section, "libreoffice_calc"),
        ["libreoffice_calc", "2", "0.7500", "50.0%"]
    );
    assert_eq!(md_row(section, "os"), ["os", "1", "0.0000", "0.0%"]);
    assert_eq!(md_row(section, "**all**")[1..], ["3", "0.5000", "33.3%"]);
    // Runs without a graded score have no such table.
    let (_dir, plain, _) = report();
    assert!(!plain.contains("Score by domain"), "{plain}");
}
