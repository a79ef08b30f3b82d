//! Grounding items from a live UI tree: for each visible, named element whose centre hit-tests
//! back to it, the screenshot, an instruction naming it ("Click the 'OK' button in the
//! 'Save' dialog.") and its box, in AgentStudio's GroundUI JSONL format, with a review page
//! that draws every box on its screenshot.
//!
//! The hit test is the tree's: the deepest element at the point (the last one in the tree
//! among equals, as toolkits paint later children over earlier ones) must be the element or
//! lie inside it with nothing named in between, and the point must lie in one top-level
//! window only (the tree says nothing of how windows stack). Two elements with the same role
//! and name are told apart by a named ancestor only one of them has, or left out.

use super::{DatasetError, GROUND_FILE, IMAGES_DIR, REVIEW_FILE, write_jsonl};
use crate::env::Environment;
use crate::report::escape::esc;
use crate::task::{Task, steps};
use pincer_shared::Platform;
use pincer_shared::action::Point;
use pincer_shared::observe::{ImageFormat, Rect, ScreenshotRequest, TreeRequest};
use pincer_shared::tree::{UiNode, UiTree};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Elements narrower or lower than this many pixels are not targets.
pub const MIN_SIDE: u32 = 4;
/// Names longer than this are content (a document's text), not labels.
pub const MAX_NAME_CHARS: usize = 100;
/// Walks of the tree around one screenshot before the screen counts as never settling.
pub const CAPTURE_TRIES: u32 = 8;

/// One grounding item: AgentStudio's GroundUI fields (`image`, `instruction`, `bbox`,
/// `resolution`, `source`, `platform`, `raw_instruction`) and where it came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GroundItem {
    /// Unique in the set; answers name items by it.
    pub id: String,
    /// The screenshot, relative to the set's `images/` directory.
    pub image: String,
    /// What to click.
    pub instruction: String,
    /// The element's box in image pixels: left, top, right, bottom (right and bottom
    /// exclusive: a point is inside when `left <= x < right` and `top <= y < bottom`).
    pub bbox: [i64; 4],
    /// The image's width and height.
    pub resolution: [u32; 2],
    /// Always "pincer".
    pub source: String,
    /// "desktop" or "mobile", as GroundUI names platforms.
    pub platform: String,
    /// The element's named ancestry, outermost first (`frame 'galculator' > toggle button
    /// '1'`).
    pub raw_instruction: String,
    /// The element's role.
    pub role: String,
    /// The element's name.
    pub name: String,
    /// The environment it was captured on.
    pub env: String,
    /// The task whose setup made the screen, if one did.
    pub task: Option<String>,
}

/// An element of a tree that makes an item.
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    /// Role.
    pub role: String,
    /// Name, whitespace collapsed.
    pub name: String,
    /// The part of it on screen, in screen pixels.
    pub bounds: Rect,
    /// The instruction naming it.
    pub instruction: String,
    /// Its named ancestry, outermost first.
    pub path: String,
}

/// The targets of one tree and why the other candidates were left out.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Selection {
    /// The elements that make items.
    pub targets: Vec<Target>,
    /// Visible, named elements considered.
    pub candidates: usize,
    /// Left out: the centre hit-tests to something else (or to two windows).
    pub missed: usize,
    /// Left out: another element with the same role and name, and no ancestor to tell them
    /// apart.
    pub ambiguous: usize,
}

/// A node with what the hit test needs: its parent, depth and the part of it that can be
/// seen (its bounds clipped by the screen and by every ancestor with bounds).
struct Flat<'a> {
    node: &'a UiNode,
    parent: Option<usize>,
    depth: usize,
    clip: Option<Rect>,
    name: String,
}

impl Flat<'_> {
    /// On screen: some of it visible and, for toolkits that report states, showing.
    fn present(&self) -> bool {
        self.clip.is_some() && (self.node.states.is_empty() || self.node.has_state("showing"))
    }
}

fn flatten(root: &UiNode, screen: Rect) -> Vec<Flat<'_>> {
    let mut out = Vec::new();
    // (node, parent, depth, the region its children are confined to)
    let mut stack = vec![(root, None, 0usize, Some(screen))];
    while let Some((node, parent, depth, region)) = stack.pop() {
        let own = node.bounds.filter(|b| b.area() > 0);
        let (clip, inner) = match own {
            Some(b) => {
                let c = region.and_then(|r| b.intersect(&r));
                (c, c)
            }
            None => (None, region),
        };
        let index = out.len();
        out.push(Flat {
            node,
            parent,
            depth,
            clip,
            name: node.name.split_whitespace().collect::<Vec<_>>().join(" "),
        });
        for child in node.children.iter().rev() {
            stack.push((child, Some(index), depth + 1, inner));
        }
    }
    out
}

/// The element the tree puts at `p`: the deepest present one containing it, the last in
/// tree order among equals.
fn hit(flat: &[Flat<'_>], p: Point) -> Option<usize> {
    let mut best: Option<usize> = None;
    for (i, f) in flat.iter().enumerate() {
        if f.present()
            && f.clip.is_some_and(|c| c.contains(p))
            && best.is_none_or(|b| f.depth >= flat[b].depth)
        {
            best = Some(i);
        }
    }
    best
}

/// Whether a click at `target`'s centre lands on it: the element hit is the target, or lies
/// inside it with nothing named differently in between, and one top-level window (two
/// levels below the root: the desktop's applications' windows) holds the point.
fn hits_back(flat: &[Flat<'_>], target: usize, p: Point) -> bool {
    let windows = flat
        .iter()
        .filter(|f| f.depth == 2 && f.present() && f.clip.is_some_and(|c| c.contains(p)))
        .count();
    if windows > 1 {
        return false;
    }
    let Some(mut at) = hit(flat, p) else {
        return false;
    };
    while at != target {
        let f = &flat[at];
        if !f.name.is_empty() && f.name != flat[target].name {
            return false;
        }
        match f.parent {
            Some(up) => at = up,
            None => return false,
        }
    }
    true
}

/// What a role is called in an instruction.
fn noun(role: &str) -> &str {
    match role {
        "push button" => "button",
        "text" | "entry" => "text field",
        "password text" => "password field",
        "page tab" => "tab",
        "table cell" => "cell",
        "frame" => "window",
        other => other,
    }
}

/// The named ancestors of `i` (the root left out), nearest first, as (role, name).
fn ancestry(flat: &[Flat<'_>], i: usize) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut at = flat[i].parent;
    while let Some(a) = at {
        let f = &flat[a];
        if f.parent.is_some() && !f.name.is_empty() {
            out.push((f.node.role.clone(), f.name.clone()));
        }
        at = f.parent;
    }
    out
}

/// Picks the targets of a tree over a screen of this size.
pub fn targets(root: &UiNode, screen: Rect) -> Selection {
    let flat = flatten(root, screen);
    let candidates: Vec<usize> = (0..flat.len())
        .filter(|&i| {
            let f = &flat[i];
            let Some(c) = f.clip else { return false };
            f.present()
                && f.parent.is_some()
                && f.node.role != "application"
                && !f.name.is_empty()
                && f.name.chars().count() <= MAX_NAME_CHARS
                && c.width >= MIN_SIDE
                && c.height >= MIN_SIDE
                // Whole windows and panes are places, not things to click.
                && c.area() * 2 <= screen.area()
        })
        .collect();
    let mut groups: BTreeMap<(&str, &str), Vec<usize>> = BTreeMap::new();
    for &i in &candidates {
        groups
            .entry((flat[i].node.role.as_str(), flat[i].name.as_str()))
            .or_default()
            .push(i);
    }
    let mut sel = Selection {
        candidates: candidates.len(),
        ..Selection::default()
    };
    for &i in &candidates {
        let f = &flat[i];
        let Some(clip) = f.clip else { continue };
        let group = &groups[&(f.node.role.as_str(), f.name.as_str())];
        let chain = ancestry(&flat, i);
        let mut instruction = format!("Click the '{}' {}", f.name, noun(&f.node.role));
        if group.len() > 1 {
            let others: Vec<Vec<(String, String)>> = group
                .iter()
                .filter(|&&o| o != i)
                .map(|&o| ancestry(&flat, o))
                .collect();
            let Some((role, name)) = chain.iter().find(|a| others.iter().all(|o| !o.contains(a)))
            else {
                sel.ambiguous += 1;
                continue;
            };
            let _ = write!(instruction, " in the '{name}' {}", noun(role));
        }
        if !hits_back(&flat, i, clip.center()) {
            sel.missed += 1;
            continue;
        }
        instruction.push('.');
        let mut path: Vec<String> = chain
            .iter()
            .rev()
            .map(|(r, n)| format!("{r} '{n}'"))
            .collect();
        path.push(format!("{} '{}'", f.node.role, f.name));
        sel.targets.push(Target {
            role: f.node.role.clone(),
            name: f.name.clone(),
            bounds: clip,
            instruction,
            path: path.join(" > "),
        });
    }
    sel
}

/// A screenshot and the tree that describes it.
#[derive(Debug, Clone)]
pub struct Capture {
    /// The PNG.
    pub png: Vec<u8>,
    /// Its width and height.
    pub size: (u32, u32),
    /// The screen area it shows, in screen pixels.
    pub screen: Rect,
    /// The UI tree, walked before and after the screenshot with the same result.
    pub tree: UiTree,
}

/// What of a tree must not change between two walks for a screenshot between them to show
/// it: every element's role, name, box and whether it is showing.
fn shape(tree: &UiTree) -> Vec<(&str, &str, Option<Rect>, bool)> {
    tree.root
        .walk()
        .map(|(_, n)| {
            (
                n.role.as_str(),
                n.name.as_str(),
                n.bounds,
                n.has_state("showing"),
            )
        })
        .collect()
}

/// Takes a screenshot between two walks of the tree that agree, so that the tree describes
/// the picture; tries again while the screen changes.
pub async fn capture(env: &Environment) -> Result<Capture, DatasetError> {
    let failed = |source| DatasetError::Env {
        env: env.name().to_owned(),
        source: Box::new(source),
    };
    let tree_req = TreeRequest {
        visible_only: true,
        attributes: false,
        ..TreeRequest::default()
    };
    let shot_req = ScreenshotRequest {
        format: ImageFormat::Png,
        region: None,
        max_size: None,
    };
    let mut before = env.tree(tree_req.clone()).await.map_err(failed)?;
    for _ in 0..CAPTURE_TRIES {
        let shot = env.screenshot(shot_req).await.map_err(failed)?;
        let after = env.tree(tree_req.clone()).await.map_err(failed)?;
        if shape(&before) == shape(&after) {
            return Ok(Capture {
                png: shot.bytes,
                size: (shot.meta.width, shot.meta.height),
                screen: shot.meta.source,
                tree: after,
            });
        }
        before = after;
    }
    Err(DatasetError::Unsettled(
        env.name().to_owned(),
        CAPTURE_TRIES,
    ))
}

/// Whether an environment is a phone (its items say "mobile").
fn is_mobile(env: &Environment) -> bool {
    env.info().is_some_and(|i| i.platform == Platform::Android)
}

/// Adds the items of an environment's screen as it is; returns how many.
pub async fn screen(env: &Environment, w: &mut Writer) -> Result<usize, DatasetError> {
    let c = capture(env).await?;
    w.add(&c, env.name(), None, is_mobile(env))
}

/// Tasks whose screen could not be made, and why.
pub type Skipped = Vec<(String, String)>;

/// For each task that needs one environment of `env`'s platform: its setup on `env`, the
/// items of the screen it made, its teardown. Other tasks, and tasks whose setup fails, are
/// skipped and named.
pub async fn from_tasks(
    env: &Environment,
    tasks: &[Task],
    w: &mut Writer,
    progress: &mut (dyn FnMut(&str, usize) + Send),
) -> Result<Skipped, DatasetError> {
    let mut skipped = Vec::new();
    for task in tasks {
        let [(role, need)] = task.envs.iter().collect::<Vec<_>>()[..] else {
            skipped.push((task.id.clone(), "needs more than one environment".into()));
            continue;
        };
        if let Some(info) = env.info()
            && info.platform != need.platform
        {
            skipped.push((
                task.id.clone(),
                format!(
                    "its environment is {}, and '{}' is {}",
                    need.platform,
                    env.name(),
                    info.platform
                ),
            ));
            continue;
        }
        let none = Vec::new();
        let setup = task.setup.get(role).unwrap_or(&none);
        if let Err((i, e)) = steps::run_all(env, setup, None, &mut |_| {}).await {
            skipped.push((task.id.clone(), format!("setup step {i}: {e}")));
        } else {
            let made = match capture(env).await {
                Ok(c) => w.add(&c, env.name(), Some(&task.id), is_mobile(env))?,
                Err(e @ DatasetError::Unsettled(..)) => {
                    skipped.push((task.id.clone(), e.to_string()));
                    0
                }
                Err(e) => return Err(e),
            };
            progress(&task.id, made);
        }
        let teardown = task.teardown.get(role).unwrap_or(&none);
        if let Err((i, e)) = steps::run_all(env, teardown, None, &mut |_| {}).await {
            skipped.push((task.id.clone(), format!("teardown step {i}: {e}")));
        }
    }
    Ok(skipped)
}

/// A box in screen pixels as an item's box in image pixels.
fn image_box(b: Rect, screen: Rect, size: (u32, u32)) -> [i64; 4] {
    let sx = f64::from(size.0) / f64::from(screen.width.max(1));
    let sy = f64::from(size.1) / f64::from(screen.height.max(1));
    let x0 = f64::from(b.x - screen.x) * sx;
    let y0 = f64::from(b.y - screen.y) * sy;
    let x1 = x0 + f64::from(b.width) * sx;
    let y1 = y0 + f64::from(b.height) * sy;
    // Shrunk to whole pixels inside the element, so every pixel of the box is on it.
    [
        x0.ceil() as i64,
        y0.ceil() as i64,
        x1.floor() as i64,
        y1.floor() as i64,
    ]
}

/// A grounding set being written: images as they are captured, the metadata and the review
/// page at the end.
#[derive(Debug)]
pub struct Writer {
    out: PathBuf,
    images: PathBuf,
    items: Vec<GroundItem>,
    /// Screenshots written.
    pub screens: usize,
    /// Candidates left out, summed over every capture.
    pub missed: usize,
    /// Ambiguous candidates left out, summed over every capture.
    pub ambiguous: usize,
}

impl Writer {
    /// Starts a set in `out` (new or empty of datasets).
    pub fn new(out: &Path) -> Result<Self, DatasetError> {
        let images = super::prepare(out, GROUND_FILE)?;
        Ok(Self {
            out: out.to_owned(),
            images,
            items: Vec::new(),
            screens: 0,
            missed: 0,
            ambiguous: 0,
        })
    }

    /// Adds the items of one capture; returns how many it made. `label` names the image
    /// (the environment, or the task whose setup made the screen).
    pub fn add(
        &mut self,
        capture: &Capture,
        env: &str,
        task: Option<&str>,
        mobile: bool,
    ) -> Result<usize, DatasetError> {
        let sel = targets(&capture.tree.root, capture.screen);
        self.missed += sel.missed;
        self.ambiguous += sel.ambiguous;
        if sel.targets.is_empty() {
            return Ok(0);
        }
        let label = crate::task::sanitize(task.unwrap_or(env));
        let image = format!("{:04}-{label}.png", self.screens);
        let path = self.images.join(&image);
        std::fs::write(&path, &capture.png).map_err(DatasetError::io(&path))?;
        self.screens += 1;
        for t in &sel.targets {
            self.items.push(GroundItem {
                id: format!("g{:05}", self.items.len()),
                image: image.clone(),
                instruction: t.instruction.clone(),
                bbox: image_box(t.bounds, capture.screen, capture.size),
                resolution: [capture.size.0, capture.size.1],
                source: "pincer".into(),
                platform: if mobile { "mobile" } else { "desktop" }.into(),
                raw_instruction: t.path.clone(),
                role: t.role.clone(),
                name: t.name.clone(),
                env: env.to_owned(),
                task: task.map(str::to_owned),
            });
        }
        Ok(sel.targets.len())
    }

    /// Writes the metadata and the review page; returns the items.
    pub fn finish(self) -> Result<Vec<GroundItem>, DatasetError> {
        write_jsonl(&self.out.join(GROUND_FILE), &self.items)?;
        let review = self.out.join(REVIEW_FILE);
        std::fs::write(&review, review_page(&self.items)).map_err(DatasetError::io(&review))?;
        Ok(self.items)
    }
}

/// The review page: each screenshot with its items' boxes drawn over it (in percent of the
/// image, so they stay in place at any width) and numbered, and the instructions listed
/// below. Images by relative path, nothing else fetched.
pub fn review_page(items: &[GroundItem]) -> String {
    let mut by_image: BTreeMap<&str, Vec<&GroundItem>> = BTreeMap::new();
    for it in items {
        by_image.entry(&it.image).or_default().push(it);
    }
    let mut out = String::from(
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>pincer grounding set</title>\n<style>\
body{font-family:sans-serif;margin:1em}figure{margin:0 0 2em}\
.shot{position:relative;display:inline-block;max-width:100%}.shot img{display:block;max-width:100%}\
.box{position:absolute;border:2px solid #e6194b;box-sizing:border-box}\
.box span{position:absolute;top:-1.2em;left:-2px;background:#e6194b;color:#fff;font-size:11px;padding:0 2px}\
li{font-size:14px}</style></head><body>\n",
    );
    let _ = writeln!(
        out,
        "<h1>Grounding set</h1><p>{} items on {} screenshots. Boxes are drawn where each item's box lies; check that each one covers what its instruction names.</p>",
        items.len(),
        by_image.len()
    );
    for (image, its) in by_image {
        let _ = write!(
            out,
            "<figure><figcaption>{}</figcaption><div class=\"shot\"><img src=\"{}/{}\" alt=\"\">",
            esc(image),
            IMAGES_DIR,
            esc(image)
        );
        for it in &its {
            let [w, h] = it.resolution.map(|v| f64::from(v.max(1)));
            let [l, t, r, b] = it.bbox.map(|v| v as f64);
            let _ = write!(
                out,
                "<div class=\"box\" id=\"{id}\" title=\"{title}\" style=\"left:{:.3}%;top:{:.3}%;width:{:.3}%;height:{:.3}%\"><span>{id}</span></div>",
                l / w * 100.0,
                t / h * 100.0,
                (r - l) / w * 100.0,
                (b - t) / h * 100.0,
                id = esc(&it.id),
                title = esc(&it.instruction),
            );
        }
        out.push_str("</div><ul>");
        for it in &its {
            let _ = write!(
                out,
                "<li><b>{}</b> {} <small>[{}, {}, {}, {}] {}</small></li>",
                esc(&it.id),
                esc(&it.instruction),
                it.bbox[0],
                it.bbox[1],
                it.bbox[2],
                it.bbox[3],
                esc(&it.raw_instruction)
            );
        }
        out.push_str("</ul></figure>\n");
    }
    out.push_str("</body></html>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(role: &str, name: &str, b: Rect, children: Vec<UiNode>) -> UiNode {
        UiNode {
            role: role.into(),
            name: name.into(),
            bounds: Some(b),
            states: vec!["showing".into()],
            children,
            ..Default::default()
        }
    }

    fn desktop(windows: Vec<UiNode>) -> UiNode {
        UiNode {
            role: "desktop frame".into(),
            name: "main".into(),
            children: vec![UiNode {
                role: "application".into(),
                name: "app".into(),
                children: windows,
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    const SCREEN: Rect = Rect {
        x: 0,
        y: 0,
        width: 800,
        height: 600,
    };

    fn instructions(sel: &Selection) -> Vec<&str> {
        sel.targets.iter().map(|t| t.instruction.as_str()).collect()
    }

    #[test]
    fn same_named_elements_are_told_apart_by_an_ancestor_or_left_out() {
        let ok = |x| node("push button", "OK", Rect::new(x, 500, 60, 30), vec![]);
        let root = desktop(vec![
            node(
                "dialog",
                "Save",
                Rect::new(0, 400, 200, 150),
                vec![node(
                    "filler",
                    "",
                    Rect::new(0, 400, 200, 150),
                    vec![ok(10)],
                )],
            ),
            node(
                "dialog",
                "Open",
                Rect::new(300, 400, 200, 150),
                vec![ok(310)],
            ),
            // Two "Cancel" buttons in one window with nothing named between: ambiguous.
            node(
                "dialog",
                "Print",
                Rect::new(550, 0, 240, 300),
                vec![
                    node("push button", "Cancel", Rect::new(560, 10, 60, 30), vec![]),
                    node("push button", "Cancel", Rect::new(560, 100, 60, 30), vec![]),
                ],
            ),
        ]);
        let sel = targets(&root, SCREEN);
        assert_eq!(
            instructions(&sel),
            vec![
                "Click the 'Save' dialog.",
                "Click the 'OK' button in the 'Save' dialog.",
                "Click the 'Open' dialog.",
                "Click the 'OK' button in the 'Open' dialog.",
                "Click the 'Print' dialog."
            ],
            "the dialogs' centres hit nothing named inside them, so they are targets too"
        );
        assert_eq!(sel.ambiguous, 2);
        assert_eq!(
            sel.targets[1].path,
            "application 'app' > dialog 'Save' > push button 'OK'"
        );
        assert_eq!(sel.targets[1].bounds, Rect::new(10, 500, 60, 30));
    }

    #[test]
    fn elements_whose_centre_lands_elsewhere_are_left_out() {
        let root = desktop(vec![node(
            "frame",
            "Calc",
            Rect::new(0, 0, 300, 300),
            vec![
                // Its centre (150, 150) is on the "5" key drawn over it.
                node(
                    "panel",
                    "Keys",
                    Rect::new(0, 0, 300, 300),
                    vec![node(
                        "push button",
                        "5",
                        Rect::new(140, 140, 20, 20),
                        vec![],
                    )],
                ),
                // A label inside a button with its name: a click there is on the button.
                node(
                    "push button",
                    "Clear",
                    Rect::new(10, 10, 60, 30),
                    vec![node("label", "Clear", Rect::new(20, 15, 40, 20), vec![])],
                ),
                // Scrolled out of its viewport: clipped to nothing.
                node(
                    "viewport",
                    "",
                    Rect::new(0, 250, 300, 50),
                    vec![node(
                        "list item",
                        "Hidden",
                        Rect::new(0, 320, 300, 20),
                        vec![],
                    )],
                ),
            ],
        )]);
        let sel = targets(&root, SCREEN);
        assert_eq!(
            instructions(&sel),
            vec![
                "Click the '5' button.",
                "Click the 'Clear' button.",
                "Click the 'Clear' label."
            ],
        );
        // The frame and the panel are centred on the "5".
        assert_eq!(sel.missed, 2);
        assert_eq!(sel.candidates, 5);
    }

    #[test]
    fn points_in_two_windows_are_left_out_and_hidden_nodes_never_hit() {
        let mut hidden = node("push button", "Ghost", Rect::new(100, 100, 50, 50), vec![]);
        hidden.states = vec!["visible".into()];
        let root = desktop(vec![
            node(
                "frame",
                "Back",
                Rect::new(0, 0, 400, 400),
                vec![node(
                    "push button",
                    "Under",
                    Rect::new(350, 350, 40, 40),
                    vec![],
                )],
            ),
            node(
                "frame",
                "Front",
                Rect::new(300, 300, 300, 250),
                vec![
                    hidden,
                    node("push button", "Far", Rect::new(500, 500, 40, 40), vec![]),
                ],
            ),
        ]);
        let sel = targets(&root, SCREEN);
        assert_eq!(
            instructions(&sel),
            vec![
                "Click the 'Back' window.",
                "Click the 'Front' window.",
                "Click the 'Far' button."
            ]
        );
        assert_eq!(sel.missed, 1, "'Under' lies in both windows");
    }

    #[test]
    fn boxes_scale_to_the_image_and_shrink_to_whole_pixels() {
        let screen = Rect::new(0, 0, 1920, 1080);
        assert_eq!(
            image_box(Rect::new(10, 20, 30, 40), screen, (1920, 1080)),
            [10, 20, 40, 60]
        );
        assert_eq!(
            image_box(Rect::new(11, 21, 30, 41), screen, (960, 540)),
            [6, 11, 20, 31]
        );
    }

    #[test]
    fn the_review_page_draws_each_box_and_escapes_names() {
        let item = GroundItem {
            id: "g00003".into(),
            image: "0000-a<b>.png".into(),
            instruction: "Click the '<b>' button.".into(),
            bbox: [100, 50, 300, 150],
            resolution: [1000, 500],
            source: "pincer".into(),
            platform: "desktop".into(),
            raw_instruction: "push button '<b>'".into(),
            role: "push button".into(),
            name: "<b>".into(),
            env: "d".into(),
            task: None,
        };
        let page = review_page(&[item]);
        assert!(
            page.contains("src=\"images/0000-a&lt;b&gt;.png\""),
            "{page}"
        );
        assert!(
            page.contains("left:10.000%;top:10.000%;width:20.000%;height:20.000%"),
            "{page}"
        );
        assert!(!page.contains("'<b>'"));
        assert!(!page.contains("http"), "nothing fetched: {page}");
    }
}
