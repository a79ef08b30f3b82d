//! The checkpoint functions added for CRAB's templates, judged against real state on real
//! local desktops through the evaluator: documents written by real LibreOffice
//! (`document_contains`, `spreadsheet_row`, `clipboard_in_document`), images and the GNOME
//! wallpaper set with real `gsettings` (`image_brighter`, `image_not_brighter`,
//! `wallpaper_is`), each with cases the state makes pass and cases it makes fail; then
//! CRAB templates from `templates/crab.toml`, composed and linked as the importer does,
//! failing before the work and passing after it.

use pincer::compose::{self, Catalogue, Part};
use pincer::env::Environment;
use pincer::eval::functions::{Library, Reads};
use pincer::eval::graph::{Envs, Evaluator, Graph};
use pincer::eval::{AgentEvent, AgentLog};
use pincer_shared::Platform;
use pincer_shared::action::Action;
use pincer_shared::setup::ExecRequest;
use pincer_tests::Sandbox;
use pincer_tests::cases::{self, Case, fail, pass, uncovered};
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Judges `cases` on the `desktop` role with an empty agent log (see [`cases::judge`]).
async fn judge(envs: &Envs, cases: &[Case]) {
    cases::judge(envs, Some("desktop"), cases, &AgentLog::default()).await;
}

/// The desktop as the only environment, in the `desktop` role.
fn envs(env: Environment) -> Envs {
    cases::envs(vec![("desktop", env)])
}

/// Runs a shell command on the guest (in its home) and insists it succeeds.
async fn sh(env: &Environment, script: &str) -> String {
    let mut req = ExecRequest::new(["sh", "-c", script]);
    req.timeout_ms = 180_000;
    let out = env
        .exec(req)
        .await
        .unwrap_or_else(|e| panic!("{script}: {e}"));
    assert!(
        out.status.success(),
        "{script}: {}: {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Converts a file in `~/docs` with headless LibreOffice into `out`, in a profile of its
/// own (so a LibreOffice the desktop runs does not take the request over). A fresh profile's
/// first start sometimes exits 255 without converting, so a missing result is retried.
async fn soffice(env: &Environment, args: &str, out: &str) {
    let script = format!(
        "cd ~/docs && soffice -env:UserInstallation=file://$HOME/.lo-convert --headless --norestore {args}"
    );
    let mut last = String::new();
    for _ in 0..3 {
        let mut req = ExecRequest::new(["sh", "-c", &script]);
        req.timeout_ms = 180_000;
        let o = env
            .exec(req)
            .await
            .unwrap_or_else(|e| panic!("{script}: {e}"));
        let made = env
            .exec(ExecRequest::new(["test", "-s", &format!("~/docs/{out}")]))
            .await
            .unwrap();
        if made.status.success() {
            return;
        }
        last = format!("{}: {}", o.status, String::from_utf8_lossy(&o.stderr));
    }
    panic!("LibreOffice did not write {out}: {script}: {last}");
}

// ---------------------------------------------------------------------------------------
// Documents
// ---------------------------------------------------------------------------------------

const NOTES: &str = "Shopping list\nmilk & honey\n  two  spaces\nlast line\n";

const ODT: &str = "~/docs/notes.odt";
const DOCX: &str = "~/docs/notes.docx";
const ODS: &str = "~/docs/countries.ods";

/// Cases while `~/docs` holds LibreOffice's ODT, DOCX and PDF of [`NOTES`], its ODS of two
/// countries, and the clipboard holds [`NOTES`].
fn document_cases() -> Vec<Case> {
    let (odt, docx, ods) = (ODT, DOCX, ODS);
    vec![
        pass(
            "document_contains",
            json!({"path": odt, "text": "milk & honey"}),
            &["OpenDocument text", odt],
        ),
        pass(
            "document_contains",
            json!({"path": odt, "text": "MILK & HONEY", "ignore_case": true}),
            &[odt],
        ),
        fail(
            "document_contains",
            json!({"path": odt, "text": "MILK & HONEY"}),
            &["Shopping list", "MILK & HONEY"],
        ),
        pass(
            "document_contains",
            json!({"path": docx, "text": "last line"}),
            &["DOCX", docx],
        ),
        fail(
            "document_contains",
            json!({"path": docx, "text": "first line"}),
            &["DOCX", "first line"],
        ),
        pass(
            "document_contains",
            json!({"path": ods, "text": "Tokyo"}),
            &["spreadsheet", ods],
        ),
        fail(
            "document_contains",
            json!({"path": "~/docs/notes.pdf", "text": "milk"}),
            &["PDF"],
        ),
        fail(
            "document_contains",
            json!({"path": "~/docs/missing.odt", "text": "milk"}),
            &["does not exist"],
        ),
        pass(
            "document_text",
            json!({"path": odt, "text": {"regex": "milk & honey"}}),
            &["OpenDocument text", odt],
        ),
        fail(
            "document_text",
            json!({"path": docx, "text": {"equals": "last line"}}),
            &["DOCX", "equal to 'last line'"],
        ),
        pass(
            "spreadsheet_row",
            json!({"path": ods, "cells": ["japan"], "ignore_case": true}),
            &["row 2 of sheet 'countries' in ~/docs/countries.ods starts with 'Japan'"],
        ),
        pass(
            "spreadsheet_row",
            json!({"path": ods, "cells": ["Canada", "Ottawa", "40097761"]}),
            &["row 1"],
        ),
        fail(
            "spreadsheet_row",
            json!({"path": ods, "cells": ["japan"]}),
            &[
                "no row of sheet 'countries' in ~/docs/countries.ods starts with 'japan' (2 rows; the first: 'Canada', 'Ottawa'",
            ],
        ),
        fail(
            "spreadsheet_row",
            json!({"path": ods, "cells": ["Ottawa"]}),
            &["no row"],
        ),
        fail(
            "spreadsheet_row",
            json!({"path": ods, "cells": ["Canada"], "sheet": "Data"}),
            &["spreadsheet ~/docs/countries.ods has no sheet 'Data' (sheets: 'countries')"],
        ),
        fail(
            "spreadsheet_row",
            json!({"path": odt, "cells": ["Shopping list"]}),
            &["file ~/docs/notes.odt is an OpenDocument text, not a spreadsheet"],
        ),
        pass(
            "document_type",
            json!({"path": odt, "kind": "odt"}),
            &["file ~/docs/notes.odt is an OpenDocument text"],
        ),
        pass(
            "document_type",
            json!({"path": docx, "kind": "docx"}),
            &["file ~/docs/notes.docx is a DOCX document"],
        ),
        pass(
            "document_type",
            json!({"path": ods, "kind": "ods"}),
            &["file ~/docs/countries.ods is an OpenDocument spreadsheet"],
        ),
        fail(
            "document_type",
            json!({"path": docx, "kind": "odt"}),
            &["file ~/docs/notes.docx is a DOCX document, expected an OpenDocument text"],
        ),
        fail(
            "document_type",
            json!({"path": "~/docs/notes.txt", "kind": "odt"}),
            &["file ~/docs/notes.txt is a text file, expected an OpenDocument text"],
        ),
        fail(
            "document_type",
            json!({"path": "~/docs/notes.pdf", "kind": "text"}),
            &["file ~/docs/notes.pdf is not a text file: it is a PDF file"],
        ),
        pass(
            "spreadsheet_cell",
            json!({"path": ods, "cell": "C2", "value": 124516650}),
            &["cell C2 of sheet 'countries' holds 124516650"],
        ),
        pass(
            "spreadsheet_cell",
            json!({"path": ods, "cell": "b2", "text": {"equals": "Tokyo"}}),
            &["cell B2", "holds the text 'Tokyo'"],
        ),
        fail(
            "spreadsheet_cell",
            json!({"path": ods, "cell": "B1", "value": 1}),
            &["holds the text 'Ottawa', expected the number 1"],
        ),
        fail(
            "spreadsheet_cell",
            json!({"path": ods, "cell": "C1", "value": 40097761, "text": {"equals": "40,097,761"}}),
            &["holds 40097761", "expected text"],
        ),
        fail(
            "spreadsheet_cell",
            json!({"path": odt, "cell": "A1", "text": {"contains": "x"}}),
            &["not a spreadsheet"],
        ),
        pass(
            "clipboard_in_document",
            json!({"path": odt}),
            &["all 4 clipboard lines", "OpenDocument text"],
        ),
        pass(
            "clipboard_in_document",
            json!({"path": "~/docs/notes.txt"}),
            &["text file"],
        ),
        pass("clipboard_in_document", json!({"path": docx}), &["DOCX"]),
        fail(
            "clipboard_in_document",
            json!({"path": "~/docs/shuffled.txt"}),
            &["line 1", "milk & honey", "Shopping list"],
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn documents_written_by_libreoffice_are_read() {
    let sb = Sandbox::new();
    let d = sb.desktop("crab-docs", "1024x768", &[]);
    let env = d.connect().await;
    env.make_dir("~/docs").await.unwrap();
    env.write_file("~/docs/notes.txt", NOTES.as_bytes(), 0o644)
        .await
        .unwrap();
    env.write_file(
        "~/docs/shuffled.txt",
        b"milk & honey\nShopping list\n  two  spaces\nlast line\n",
        0o644,
    )
    .await
    .unwrap();
    env.write_file(
        "~/docs/countries.csv",
        "Canada,Ottawa,40097761\nJapan,Tokyo,124516650\n".as_bytes(),
        0o644,
    )
    .await
    .unwrap();
    // Real LibreOffice writes the documents: Writer imports the text (a paragraph per
    // line), Calc the CSV.
    soffice(&env, "--convert-to odt notes.txt", "notes.odt").await;
    soffice(
        &env,
        r#"--convert-to "docx:MS Word 2007 XML" notes.txt"#,
        "notes.docx",
    )
    .await;
    soffice(&env, "--convert-to pdf notes.txt", "notes.pdf").await;
    soffice(&env, "--convert-to ods countries.csv", "countries.ods").await;
    env.set_clipboard(NOTES).await.unwrap();
    let envs = envs(env);

    judge(&envs, &document_cases()).await;

    // More clipboard lines than the document has paragraphs: CRAB's zip() would pass.
    let env = &envs.0["desktop"];
    env.set_clipboard(&format!("{NOTES}one more\n"))
        .await
        .unwrap();
    judge(
        &envs,
        &[fail(
            "clipboard_in_document",
            json!({"path": ODT}),
            &["line 5 'one more' is missing"],
        )],
    )
    .await;
    env.set_clipboard("\n\n").await.unwrap();
    judge(
        &envs,
        &[fail(
            "clipboard_in_document",
            json!({"path": ODT}),
            &["only empty lines"],
        )],
    )
    .await;
}

// ---------------------------------------------------------------------------------------
// Images and the wallpaper
// ---------------------------------------------------------------------------------------

/// A PNG of one grey level (with a darker stripe, so it is not flat).
fn grey_png(level: u8) -> Vec<u8> {
    let (w, h) = (64u32, 48u32);
    let mut px = Vec::with_capacity((w * h * 3) as usize);
    for _y in 0..h {
        for x in 0..w {
            let v = if x < 8 { level / 2 } else { level };
            px.extend_from_slice(&[v, v, v]);
        }
    }
    let mut out = Vec::new();
    {
        let mut enc = png::Encoder::new(&mut out, w, h);
        enc.set_color(png::ColorType::Rgb);
        enc.set_depth(png::BitDepth::Eight);
        let mut w = enc.write_header().unwrap();
        w.write_image_data(&px).unwrap();
    }
    out
}

async fn set_wallpaper(env: &Environment, uri: &str) {
    let mut req = ExecRequest::new([
        "gsettings",
        "set",
        "org.gnome.desktop.background",
        "picture-uri",
        uri,
    ]);
    req.timeout_ms = 20_000;
    let out = env.exec(req).await.unwrap();
    assert!(
        out.status.success(),
        "gsettings set: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Cases while `~/Pictures` holds grey PNGs `base` (100), `bright` (160), `dark` (40),
/// `same` (a copy of `base`) and a half-written one.
fn brightness_cases() -> Vec<Case> {
    // `after` in ~/Pictures compared with base.png by `check`.
    let against_base = |check: &'static str, after: &str, ok: bool, says: &[&str]| {
        let args = json!({"before": "~/Pictures/base.png", "after": format!("~/Pictures/{after}")});
        if ok {
            pass(check, args, says)
        } else {
            fail(check, args, says)
        }
    };
    let brighter =
        |after: &str, ok: bool, says: &[&str]| against_base("image_brighter", after, ok, says);
    let not_brighter =
        |after: &str, ok: bool, says: &[&str]| against_base("image_not_brighter", after, ok, says);
    vec![
        brighter("bright.png", true, &["brightness", "brighter"]),
        brighter(
            "dark.png",
            false,
            &["expected ~/Pictures/dark.png to be brighter"],
        ),
        brighter("same.png", false, &["expected"]),
        brighter(
            "half-written.png",
            false,
            &["not an image pincer can decode"],
        ),
        brighter("missing.png", false, &["does not exist"]),
        not_brighter("dark.png", true, &["not brighter"]),
        not_brighter("same.png", true, &["not brighter"]),
        not_brighter("bright.png", false, &["darker or the same"]),
        // Unlike `not image_brighter`, a half-written image does not pass.
        not_brighter(
            "half-written.png",
            false,
            &["not an image pincer can decode"],
        ),
        not_brighter("missing.png", false, &["does not exist"]),
    ]
}

/// Cases while the wallpaper is `~/Pictures/My Beach.png` (a copy of `base.png`), given the
/// guest's home directory.
fn wallpaper_cases(home: &str) -> Vec<Case> {
    let beach = "~/Pictures/My Beach.png";
    vec![
        pass(
            "wallpaper_is",
            json!({"path": beach}),
            &["the wallpaper is ~/Pictures/My Beach.png"],
        ),
        pass(
            "wallpaper_is",
            json!({"path": format!("{home}/Pictures/My Beach.png")}),
            &["the wallpaper is"],
        ),
        // Same bytes, other file: a copy counts, as in CRAB.
        pass(
            "wallpaper_is",
            json!({"path": "~/Pictures/base.png"}),
            &["byte-identical copy"],
        ),
        fail(
            "wallpaper_is",
            json!({"path": "~/Pictures/other.png"}),
            &["different picture"],
        ),
        fail(
            "wallpaper_is",
            json!({"path": "~/Pictures/missing.png"}),
            &["does not exist"],
        ),
    ]
}

/// The functions added for CRAB's templates that run on Linux (documents.rs, media.rs).
const CRAB_LINUX_FUNCTIONS: &[&str] = &[
    "crab_clipboard_in_file",
    "crab_files_copied",
    "crab_process_open",
    "document_contains",
    "document_text",
    "clipboard_in_document",
    "document_type",
    "spreadsheet_cell",
    "spreadsheet_row",
    "image_brighter",
    "image_not_brighter",
    "wallpaper_is",
];

#[test]
fn every_crab_linux_function_has_a_passing_and_a_failing_case() {
    let all = [
        document_cases(),
        brightness_cases(),
        wallpaper_cases("/home/u"),
        compat_cases(),
        submitted_cases(),
        last_typed_cases(),
    ]
    .concat();
    let lib = Library::standard();
    let submitted = lib
        .get("crab_submitted")
        .expect("crab_submitted is in the library");
    assert!(matches!(submitted.reads, Reads::Agent));
    assert!(uncovered(&all, ["crab_submitted", "crab_last_typed"]).is_empty());
    for name in CRAB_LINUX_FUNCTIONS {
        let def = lib
            .get(name)
            .unwrap_or_else(|| panic!("{name} is not in the library"));
        assert!(
            matches!(def.reads, Reads::Env(p) if p.contains(&Platform::Linux)),
            "{name} does not run on Linux"
        );
    }
    let missing = uncovered(&all, CRAB_LINUX_FUNCTIONS.iter().copied());
    assert!(missing.is_empty(), "{}", missing.join("\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn image_brightness_and_the_wallpaper_are_judged() {
    let sb = Sandbox::new();
    let d = sb.desktop("crab-media", "1024x768", &[]);
    let env = d.connect().await;
    env.make_dir("~/Pictures").await.unwrap();
    for (name, level) in [("base", 100), ("bright", 160), ("dark", 40), ("other", 200)] {
        env.write_file(&format!("~/Pictures/{name}.png"), &grey_png(level), 0o644)
            .await
            .unwrap();
    }
    let mut cut = grey_png(100);
    cut.truncate(cut.len() / 2);
    env.write_file("~/Pictures/half-written.png", &cut, 0o644)
        .await
        .unwrap();
    // A copy made by the guest's own tools, and one where GNOME's wallpaper portal puts it,
    // under a name with a space (percent-encoded in the URI).
    sh(
        &env,
        "cp ~/Pictures/base.png ~/Pictures/same.png && mkdir -p ~/.local/share/backgrounds && cp ~/Pictures/base.png ~/.local/share/backgrounds/'my base.png' && cp ~/Pictures/base.png ~/Pictures/'My Beach.png'",
    )
    .await;
    let home = sh(&env, "printf %s \"$HOME\"").await;
    let envs = envs(env);
    let env = &envs.0["desktop"];

    judge(&envs, &brightness_cases()).await;

    let beach = "~/Pictures/My Beach.png";
    set_wallpaper(env, &format!("file://{home}/Pictures/My%20Beach.png")).await;
    judge(&envs, &wallpaper_cases(&home)).await;

    // The portal's copy is the wallpaper now.
    set_wallpaper(
        env,
        &format!("file://{home}/.local/share/backgrounds/my%20base.png"),
    )
    .await;
    judge(
        &envs,
        &[
            pass(
                "wallpaper_is",
                json!({"path": beach}),
                &["byte-identical copy", "my base.png"],
            ),
            fail(
                "wallpaper_is",
                json!({"path": "~/Pictures/dark.png"}),
                &["different picture"],
            ),
        ],
    )
    .await;

    set_wallpaper(env, "https://example.invalid/beach.png").await;
    judge(
        &envs,
        &[fail(
            "wallpaper_is",
            json!({"path": beach}),
            &["not a local file"],
        )],
    )
    .await;
    set_wallpaper(env, &format!("file://{home}/Pictures/gone.png")).await;
    judge(
        &envs,
        &[fail(
            "wallpaper_is",
            json!({"path": beach}),
            &["cannot be read"],
        )],
    )
    .await;
}

// ---------------------------------------------------------------------------------------
// CRAB templates on a real desktop
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn composed_crab_templates_pass_only_after_the_work() {
    let cat = Catalogue::bundled().expect("bundled templates");
    let copy = cat.get("217ababc-ccc7-4b9f-af07-c239d92848fe").unwrap();
    let wallpaper = cat.get("a207ef38-b3b2-4c6c-a1e3-75c38162f5ba").unwrap();
    let submit = cat.get("1c3bedc3-ea5a-453c-a15b-223d72ab756d").unwrap();
    let values = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    };
    // Copy the PNGs to ~/wallpapers, set one as the wallpaper, then answer "done".
    let parts = [
        Part {
            template: copy,
            values: values(&[
                ("file_extension", "png"),
                ("source_dir", "~/Pictures"),
                ("target_dir", "~/wallpapers"),
            ]),
        },
        Part {
            template: wallpaper,
            values: values(&[("photo_path", "~/wallpapers/sea.png")]),
        },
        Part {
            template: submit,
            values: values(&[("content", "done")]),
        },
    ];
    // Linked as CRAB links sub-tasks, whatever their types (the copy outputs a message,
    // the wallpaper takes a photo path), as the importer does.
    let task = compose::compose_lenient("crab-e2e", &parts, &[(0, 1), (1, 2)], None).unwrap();
    let ids: Vec<&str> = task.checkpoints.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(
        ids,
        ["s0.target-dir", "s0.copied", "s1.wallpaper", "s2.submitted"]
    );
    let graph = Arc::new(Graph::build(&task, &Library::standard()).unwrap());

    let sb = Sandbox::new();
    let d = sb.desktop("crab-e2e", "1024x768", &[]);
    let env = d.connect().await;
    env.make_dir("~/Pictures").await.unwrap();
    env.write_file("~/Pictures/sea.png", &grey_png(90), 0o644)
        .await
        .unwrap();
    env.write_file("~/Pictures/sky.png", &grey_png(180), 0o644)
        .await
        .unwrap();
    env.write_file("~/Pictures/notes.txt", b"not a png", 0o644)
        .await
        .unwrap();
    let home = sh(&env, "printf %s \"$HOME\"").await;
    let envs = envs(env);
    let env = &envs.0["desktop"];
    let mut log = AgentLog::default();

    let mut ev = Evaluator::new(graph);
    assert!(
        ev.initial_check(&envs, &log).await.unwrap().is_empty(),
        "nothing passes before the agent acts"
    );

    // Half the copy: the directory exists, one PNG is missing.
    sh(
        env,
        "mkdir ~/wallpapers && cp ~/Pictures/sea.png ~/wallpapers/",
    )
    .await;
    let r = ev.step(1, &envs, &log).await.unwrap();
    assert_eq!(r.passed, ["s0.target-dir"]);
    ev.finish(&envs, &log).await.unwrap();
    let copied = ev
        .progress()
        .into_iter()
        .find(|p| p.id == "s0.copied")
        .unwrap();
    assert!(
        copied
            .feedback
            .as_deref()
            .unwrap_or_default()
            .contains("sky.png"),
        "{copied:?}"
    );

    sh(env, "cp ~/Pictures/sky.png ~/wallpapers/").await;
    let r = ev.step(2, &envs, &log).await.unwrap();
    assert_eq!(r.passed, ["s0.copied"]);
    assert!(!ev.is_success());

    set_wallpaper(env, &format!("file://{home}/Pictures/sea.png")).await;
    log.events.push(AgentEvent::Answer {
        text: "all done".into(),
    });
    let r = ev.step(3, &envs, &log).await.unwrap();
    // The wallpaper is a byte-identical copy of ~/wallpapers/sea.png; the answer, checked
    // in the same cascade, holds "done".
    assert_eq!(r.passed, ["s1.wallpaper", "s2.submitted"]);
    assert!(ev.is_success());
    assert!((ev.completion_ratio() - 1.0).abs() < 1e-9);
}

/// CRAB's own predicates (`--compat crab`) on the state `crab_functions_judge_real_state`
/// makes: `~/cs/src` holds a.py and b.txt, `~/cs/same` a.py, `~/cs/more` a.py and old.py;
/// `~/cs/paste.txt` reads "alpha one\nbeta two", `~/cs/other.txt` "gamma", `~/cs/paste.odt`
/// holds the paragraphs "alpha" and "beta" under a heading "Title"; xclip owns the
/// clipboard with "alpha\nbeta".
fn compat_cases() -> Vec<Case> {
    let copied =
        |target: &str| json!({"source_dir": "~/cs/src", "target_dir": target, "extension": "py"});
    vec![
        pass(
            "crab_files_copied",
            copied("~/cs/same"),
            &["~/cs/same", "(1)"],
        ),
        fail(
            "crab_files_copied",
            copied("~/cs/more"),
            &["only there [old.py]"],
        ),
        pass(
            "crab_clipboard_in_file",
            json!({"path": "~/cs/paste.txt"}),
            &["first 2 clipboard lines"],
        ),
        fail(
            "crab_clipboard_in_file",
            json!({"path": "~/cs/other.txt"}),
            &["'gamma'", "'alpha'"],
        ),
        pass(
            "crab_clipboard_in_file",
            json!({"path": "~/cs/paste.odt", "odt": true}),
            &["~/cs/paste.odt"],
        ),
        pass("crab_process_open", json!({"name": "XCLIP"}), &["'xclip'"]),
        fail(
            "crab_process_open",
            json!({"name": "no-such-program"}),
            &["'no-such-program'"],
        ),
    ]
}

/// CRAB's submit check against an agent that submitted "It is 1 hour behind.".
fn submitted_cases() -> Vec<Case> {
    vec![
        pass(
            "crab_submitted",
            json!({"text": "1 hour behind"}),
            &["'It is 1 hour behind.'"],
        ),
        fail(
            "crab_submitted",
            json!({"text": "1 HOUR"}),
            &["'It is 1 hour behind.'", "'1 HOUR'"],
        ),
    ]
}

/// An agent that typed on the phone, then clicked on the desktop.
fn typed_then_clicked() -> AgentLog {
    AgentLog {
        events: vec![
            AgentEvent::Action {
                env: "phone".into(),
                action: Action::TypeText {
                    text: "Rename to SYDNEY".into(),
                },
            },
            AgentEvent::Action {
                env: "desktop".into(),
                action: Action::click(10, 10),
            },
        ],
    }
}

/// CRAB's Android typing check against [`typed_then_clicked`]: each environment's own last
/// action counts.
fn last_typed_cases() -> Vec<Case> {
    vec![
        pass(
            "crab_last_typed",
            json!({"text": "sydney", "env": "phone"}),
            &["the last action on phone typed 'Rename to SYDNEY'"],
        ),
        fail(
            "crab_last_typed",
            json!({"text": "Perth", "env": "phone"}),
            &["which does not contain 'Perth'"],
        ),
        fail(
            "crab_last_typed",
            json!({"text": "Sydney", "env": "desktop"}),
            &["the last action on desktop was not typing"],
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crab_functions_judge_real_state() {
    let sb = Sandbox::new();
    let d = sb.desktop("crab-compat", "800x600", &[]);
    let env = d.connect().await;
    sh(
        &env,
        r#"mkdir -p ~/cs/src ~/cs/same ~/cs/more && echo a > ~/cs/src/a.py && echo b > ~/cs/src/b.txt \
        && cp ~/cs/src/a.py ~/cs/same/ && cp ~/cs/src/a.py ~/cs/more/ && echo old > ~/cs/more/old.py \
        && printf 'alpha one\nbeta two' > ~/cs/paste.txt && printf gamma > ~/cs/other.txt \
        && python3 -c 'import sys, zipfile
z = zipfile.ZipFile(sys.argv[1], "w")
z.writestr("mimetype", "application/vnd.oasis.opendocument.text")
z.writestr("content.xml", "<office:document-content xmlns:office=\"urn:oasis:names:tc:opendocument:xmlns:office:1.0\" xmlns:text=\"urn:oasis:names:tc:opendocument:xmlns:text:1.0\"><office:body><office:text><text:h>Title</text:h><text:p>alpha</text:p><text:p>beta</text:p></office:text></office:body></office:document-content>")
z.close()' ~/cs/paste.odt"#,
    )
    .await;
    env.launch(
        vec![
            "sh".into(),
            "-c".into(),
            "printf 'alpha\nbeta' | exec xclip -selection clipboard -quiet".into(),
        ],
        vec![],
    )
    .await
    .unwrap();
    // xclip owns the clipboard once it answers with the text.
    for _ in 0..150 {
        let out = env
            .exec(ExecRequest::new(["xclip", "-o", "-selection", "clipboard"]))
            .await
            .unwrap();
        if out.stdout == b"alpha\nbeta" {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let envs = envs(env);
    judge(&envs, &compat_cases()).await;
    let answered = AgentLog {
        events: vec![AgentEvent::Answer {
            text: "It is 1 hour behind.".into(),
        }],
    };
    cases::judge(&Envs::default(), None, &submitted_cases(), &answered).await;
    cases::judge_log(&last_typed_cases(), &typed_then_clicked()).await;
}
