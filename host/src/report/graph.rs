//! The checkpoint graph as inline SVG: a layered drawing of the DAG (layers by longest path
//! from the sources, left to right, order within a layer by the barycenter of the
//! predecessors) with each node coloured by its state at one step of a trajectory.

use super::escape::esc;
use super::load::GraphSpec;
use crate::rundir::record::{StepRecord, TaskRecord};
use std::collections::BTreeMap;
use std::fmt::Write;

const NODE_H: f64 = 42.0;
/// The slot an edge takes where it crosses a layer it skips.
const DUMMY_H: f64 = 10.0;
const ROW_GAP: f64 = 16.0;
const COL_GAP: f64 = 56.0;
const PAD: f64 = 10.0;
/// Average glyph width of the 12 px label font, generous so labels do not overflow.
const CHAR_W: f64 = 7.0;
const MAX_LABEL: usize = 30;

/// A checkpoint's state at one point of a trajectory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NodeState {
    /// Passed at this step.
    JustPassed,
    /// Passed earlier.
    Passed,
    /// Every prerequisite has passed; being checked.
    Ready,
    /// Waiting for prerequisites.
    Waiting,
}

impl NodeState {
    /// The CSS class of the node (also what the tests look for).
    pub(crate) fn class(self) -> &'static str {
        match self {
            Self::JustPassed => "just-passed",
            Self::Passed => "passed",
            Self::Ready => "ready",
            Self::Waiting => "waiting",
        }
    }

    /// Fill, stroke and text colours. Inline, so the drawing needs no stylesheet.
    pub(crate) fn colours(self) -> (&'static str, &'static str, &'static str) {
        match self {
            Self::JustPassed => ("#16a34a", "#14532d", "#ffffff"),
            Self::Passed => ("#dcfce7", "#16a34a", "#14532d"),
            Self::Ready => ("#fef3c7", "#d97706", "#78350f"),
            Self::Waiting => ("#f1f5f9", "#94a3b8", "#334155"),
        }
    }

    fn passed(self) -> bool {
        matches!(self, Self::JustPassed | Self::Passed)
    }
}

/// Node positions of a laid-out graph.
#[derive(Debug, Clone)]
pub(crate) struct Layout {
    nodes: Vec<Placed>,
    edges: Vec<Edge>,
    width: f64,
    height: f64,
}

/// An edge: where it leaves its source, enters and leaves each skipped layer, and enters
/// its target.
#[derive(Debug, Clone)]
struct Edge {
    from: usize,
    points: Vec<(f64, f64)>,
}

#[derive(Debug, Clone)]
struct Placed {
    id: String,
    sub: String,
    after: Vec<usize>,
    x: f64,
    y: f64,
    w: f64,
}

impl Layout {
    /// Lays out a graph. Unknown `after` ids are ignored; nodes on a cycle (a broken task
    /// file) are put after everything else rather than looping.
    pub(crate) fn of(g: &GraphSpec) -> Self {
        let n = g.checkpoints.len();
        let index: BTreeMap<&str, usize> = g
            .checkpoints
            .iter()
            .enumerate()
            .map(|(i, c)| (c.id.as_str(), i))
            .collect();
        let preds: Vec<Vec<usize>> = g
            .checkpoints
            .iter()
            .map(|c| {
                let mut p: Vec<usize> = c
                    .after
                    .iter()
                    .filter_map(|a| index.get(a.as_str()).copied())
                    .collect();
                p.sort_unstable();
                p.dedup();
                p
            })
            .collect();

        // Longest path from the sources, in topological order (Kahn).
        let mut layer = vec![0usize; n];
        let mut indegree: Vec<usize> = preds.iter().map(Vec::len).collect();
        let mut succs = vec![Vec::new(); n];
        for (i, p) in preds.iter().enumerate() {
            for &q in p {
                succs[q].push(i);
            }
        }
        let mut queue: Vec<usize> = (0..n).filter(|&i| indegree[i] == 0).collect();
        let mut seen = vec![false; n];
        while let Some(i) = queue.pop() {
            seen[i] = true;
            for &s in &succs[i] {
                layer[s] = layer[s].max(layer[i] + 1);
                indegree[s] -= 1;
                if indegree[s] == 0 {
                    queue.push(s);
                }
            }
        }
        let after_all = (0..n)
            .filter(|&i| seen[i])
            .map(|i| layer[i] + 1)
            .max()
            .unwrap_or(0);
        for i in 0..n {
            if !seen[i] {
                layer[i] = after_all;
            }
        }

        // Edges that skip layers pass through one dummy vertex per skipped layer, which takes
        // a (thin) slot of its own, so they are routed around the nodes instead of through.
        let mut vlayer = layer.clone();
        let mut vpreds = preds.clone();
        let mut chains: Vec<Vec<usize>> = Vec::new();
        for (i, p) in preds.iter().enumerate() {
            for &q in p {
                let mut chain = vec![q];
                for l in layer[q] + 1..layer[i] {
                    let d = vlayer.len();
                    vlayer.push(l);
                    vpreds.push(vec![chain[chain.len() - 1]]);
                    chain.push(d);
                }
                // For ordering, the node follows the last dummy rather than the source.
                let last = chain[chain.len() - 1];
                if last != q
                    && let Some(slot) = vpreds[i].iter_mut().find(|v| **v == q)
                {
                    *slot = last;
                }
                chain.push(i);
                chains.push(chain);
            }
        }
        let height_of = |v: usize| if v < n { NODE_H } else { DUMMY_H };

        // Order within layers: input order first, then by the mean position of the
        // predecessors (positions relative to the layer's middle, as layers are centred).
        let layers = vlayer.iter().copied().max().map_or(0, |m| m + 1);
        let mut rows: Vec<Vec<usize>> = vec![Vec::new(); layers];
        for (v, &l) in vlayer.iter().enumerate() {
            rows[l].push(v);
        }
        let span = |row: &[usize]| {
            row.iter().map(|&v| height_of(v)).sum::<f64>()
                + (row.len() as f64 - 1.0).max(0.0) * ROW_GAP
        };
        let mut centre = vec![0.0f64; vlayer.len()];
        for row in &mut rows {
            let bary = |v: usize| {
                let p = &vpreds[v];
                if p.is_empty() {
                    f64::MAX
                } else {
                    p.iter().map(|&q| centre[q]).sum::<f64>() / p.len() as f64
                }
            };
            let mut keyed: Vec<(f64, usize)> = row.iter().map(|&v| (bary(v), v)).collect();
            keyed.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
            *row = keyed.into_iter().map(|(_, v)| v).collect();
            let mut y = -span(row) / 2.0;
            for &v in row.iter() {
                centre[v] = y + height_of(v) / 2.0;
                y += height_of(v) + ROW_GAP;
            }
        }

        let label = |c: &super::load::NodeSpec| {
            let sub = match (&c.check, &c.env) {
                (check, _) if check.is_empty() => String::new(),
                (check, Some(env)) => format!("{check} · {env}"),
                (check, None) => check.clone(),
            };
            (c.id.clone(), sub)
        };
        let tallest = rows.iter().map(|r| span(r)).fold(0.0, f64::max);
        let mid = PAD + tallest / 2.0;
        let mut placed: Vec<Option<Placed>> = vec![None; n];
        let mut columns = vec![(0.0, 0.0); layers];
        let mut x = PAD;
        for (l, row) in rows.iter().enumerate() {
            let w = row
                .iter()
                .filter(|&&v| v < n)
                .map(|&i| {
                    let (a, b) = label(&g.checkpoints[i]);
                    a.chars().count().max(b.chars().count()).min(MAX_LABEL)
                })
                .max()
                .map_or(40.0, |c| (c as f64 * CHAR_W + 22.0).max(100.0));
            for &i in row.iter().filter(|&&v| v < n) {
                let (id, sub) = label(&g.checkpoints[i]);
                placed[i] = Some(Placed {
                    id,
                    sub,
                    after: preds[i].clone(),
                    x,
                    y: mid + centre[i] - NODE_H / 2.0,
                    w,
                });
            }
            columns[l] = (x, w);
            x += w + COL_GAP;
        }
        let nodes: Vec<Placed> = placed.into_iter().flatten().collect();
        let edges = chains
            .iter()
            .map(|chain| {
                let (from, to) = (chain[0], chain[chain.len() - 1]);
                let (a, b) = (&nodes[from], &nodes[to]);
                let mut points = vec![(a.x + a.w, a.y + NODE_H / 2.0)];
                for &d in &chain[1..chain.len() - 1] {
                    let (cx, cw) = columns[vlayer[d]];
                    points.push((cx, mid + centre[d]));
                    points.push((cx + cw, mid + centre[d]));
                }
                points.push((b.x - 4.0, b.y + NODE_H / 2.0));
                Edge { from, points }
            })
            .collect();
        Self {
            width: (x - COL_GAP + PAD).max(2.0 * PAD),
            height: (tallest + 2.0 * PAD).max(2.0 * PAD),
            nodes,
            edges,
        }
    }

    /// Node ids, in the order [`Self::svg`] expects states.
    pub(crate) fn ids(&self) -> impl Iterator<Item = &str> {
        self.nodes.iter().map(|n| n.id.as_str())
    }

    /// The states of the nodes given which have passed (`passed[i]`) and which of those
    /// passed just now.
    pub(crate) fn states(&self, passed: &[bool], just: &[bool]) -> Vec<NodeState> {
        self.nodes
            .iter()
            .enumerate()
            .map(|(i, n)| {
                if passed[i] && just[i] {
                    NodeState::JustPassed
                } else if passed[i] {
                    NodeState::Passed
                } else if n.after.iter().all(|&q| passed[q]) {
                    NodeState::Ready
                } else {
                    NodeState::Waiting
                }
            })
            .collect()
    }

    /// The drawing with the given node states (one per node) and hover titles.
    pub(crate) fn svg(&self, states: &[NodeState], titles: &[String]) -> String {
        let mut out = String::new();
        if self.nodes.is_empty() {
            return out;
        }
        let _ = write!(
            out,
            r#"<svg class="cpgraph" xmlns="http://www.w3.org/2000/svg" width="{w:.0}" height="{h:.0}" viewBox="0 0 {w:.0} {h:.0}" role="img" aria-label="checkpoint graph" font-family="system-ui, sans-serif" font-size="12">"#,
            w = self.width,
            h = self.height
        );
        for e in &self.edges {
            let lit = states.get(e.from).is_some_and(|s| s.passed());
            let colour = if lit { "#16a34a" } else { "#94a3b8" };
            let mut d = String::new();
            for (k, pair) in e.points.chunks(2).enumerate() {
                // Each pair is a gap between layers (a curve); between pairs, a straight run
                // across a skipped layer.
                let [(x1, y1), (x2, y2)] = pair else { continue };
                let bend = (x2 - x1).abs() / 2.0;
                let _ = write!(
                    d,
                    "{}{x1:.1} {y1:.1} C{:.1} {y1:.1}, {:.1} {y2:.1}, {x2:.1} {y2:.1} ",
                    if k == 0 { "M" } else { "L" },
                    x1 + bend,
                    x2 - bend
                );
            }
            let Some(&(x2, y2)) = e.points.last() else {
                continue;
            };
            let _ = write!(
                out,
                r#"<path class="edge" d="{}" fill="none" stroke="{colour}" stroke-width="1.5"/><path d="M{x2:.1} {y2:.1} l-7 -4 v8 z" fill="{colour}"/>"#,
                d.trim_end()
            );
        }
        for (i, n) in self.nodes.iter().enumerate() {
            let state = states.get(i).copied().unwrap_or(NodeState::Waiting);
            let (fill, stroke, ink) = state.colours();
            let width = if state == NodeState::JustPassed {
                2.5
            } else {
                1.2
            };
            let title = titles.get(i).map_or(String::new(), |t| esc(t));
            let _ = write!(
                out,
                r#"<g class="node {cls}" data-node="{id}"><title>{title}</title><rect x="{x:.1}" y="{y:.1}" width="{w:.1}" height="{NODE_H}" rx="8" fill="{fill}" stroke="{stroke}" stroke-width="{width}"/>"#,
                cls = state.class(),
                id = esc(&n.id),
                x = n.x,
                y = n.y,
                w = n.w,
            );
            let cx = n.x + n.w / 2.0;
            let (main_y, sub_y) = if n.sub.is_empty() {
                (n.y + NODE_H / 2.0 + 4.0, 0.0)
            } else {
                (n.y + 17.0, n.y + 32.0)
            };
            let _ = write!(
                out,
                r#"<text x="{cx:.1}" y="{main_y:.1}" text-anchor="middle" fill="{ink}" font-weight="600">{}</text>"#,
                esc(&clip(&n.id))
            );
            if !n.sub.is_empty() {
                let _ = write!(
                    out,
                    r#"<text x="{cx:.1}" y="{sub_y:.1}" text-anchor="middle" fill="{ink}" font-size="10.5" opacity="0.85">{}</text>"#,
                    esc(&clip(&n.sub))
                );
            }
            out.push_str("</g>");
        }
        out.push_str("</svg>");
        out
    }
}

fn clip(s: &str) -> String {
    if s.chars().count() <= MAX_LABEL {
        s.to_owned()
    } else {
        let mut t: String = s.chars().take(MAX_LABEL - 1).collect();
        t.push('…');
        t
    }
}

/// For each node of `layout`, the index of the step after which it had passed: the step
/// whose evaluations report it, or else the step whose actions reach the record's
/// `passed_at` action count. `Some(None)`: passed, but no recorded step shows when (the
/// trajectory is missing); `None`: never passed.
pub(crate) fn passed_at_step(
    layout: &Layout,
    record: &TaskRecord,
    steps: &[StepRecord],
) -> Vec<Option<Option<usize>>> {
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, s) in steps.iter().enumerate() {
        for id in &s.passed {
            seen.entry(id.as_str()).or_insert(i);
        }
    }
    // Actions counted as the runner counts them: an unusable output counts, waits do not.
    let mut done = 0u32;
    let reached: Vec<u32> = steps
        .iter()
        .map(|s| {
            done += u32::from(s.invalid.is_some());
            done += s
                .results
                .iter()
                .zip(&s.actions)
                .filter(|(_, a)| a["action"] != "wait")
                .count() as u32;
            done
        })
        .collect();
    let progress: BTreeMap<&str, Option<u32>> = record
        .progress
        .iter()
        .map(|p| (p.id.as_str(), p.passed_at))
        .collect();
    layout
        .ids()
        .map(|id| {
            if let Some(&i) = seen.get(id) {
                return Some(Some(i));
            }
            let at = (*progress.get(id)?)?;
            Some(reached.iter().position(|&r| r >= at))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::load::NodeSpec;
    use super::*;

    fn spec(edges: &[(&str, &[&str])]) -> GraphSpec {
        GraphSpec {
            id: "t".into(),
            checkpoints: edges
                .iter()
                .map(|(id, after)| NodeSpec {
                    id: (*id).into(),
                    check: "file_exists".into(),
                    env: Some("desktop".into()),
                    after: after.iter().map(|s| (*s).into()).collect(),
                })
                .collect(),
        }
    }

    #[test]
    fn layers_follow_the_longest_path() {
        // a -> b -> d, a -> c -> d, a -> d: d sits in layer 2, not 1.
        let l = Layout::of(&spec(&[
            ("a", &[]),
            ("b", &["a"]),
            ("c", &["a"]),
            ("d", &["a", "b", "c"]),
        ]));
        let x: BTreeMap<&str, f64> = l.nodes.iter().map(|n| (n.id.as_str(), n.x)).collect();
        assert!(x["a"] < x["b"]);
        assert_eq!(x["b"], x["c"]);
        assert!(x["d"] > x["b"]);
        assert_eq!(l.edges.len(), 5);
    }

    #[test]
    fn cycles_and_unknown_edges_do_not_hang() {
        let l = Layout::of(&spec(&[("a", &["b"]), ("b", &["a"]), ("c", &["nope"])]));
        assert_eq!(l.nodes.len(), 3);
        let svg = l.svg(&[NodeState::Waiting; 3], &[]);
        assert_eq!(svg.matches("<g class=\"node").count(), 3);
    }

    #[test]
    fn states_follow_prerequisites() {
        let l = Layout::of(&spec(&[("a", &[]), ("b", &["a"]), ("c", &["b"])]));
        let ids: Vec<&str> = l.ids().collect();
        let flags = |set: &[&str]| ids.iter().map(|i| set.contains(i)).collect::<Vec<_>>();
        let s = l.states(&flags(&["a"]), &flags(&["a"]));
        let by: BTreeMap<&str, NodeState> = ids.iter().copied().zip(s).collect();
        assert_eq!(by["a"], NodeState::JustPassed);
        assert_eq!(by["b"], NodeState::Ready);
        assert_eq!(by["c"], NodeState::Waiting);
    }
}
