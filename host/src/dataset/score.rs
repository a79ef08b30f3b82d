//! Scoring a model's answers on a dataset. Answers are JSON lines naming an item by its id:
//! `{"id": "g00001", "point": [x, y]}` (image pixels) or `"point_normalized": [fx, fy]`
//! (fractions of the image, AgentStudio's answers) for grounding, `{"id": "i00001",
//! "action": {...}}` for inverse dynamics, `{"id": "c00001", "success": true}` for success
//! detection. An item without an answer counts as answered wrong.

use super::ground::GroundItem;
use super::trajectory::{CriticItem, IdmItem};
use super::{CRITIC_FILE, GROUND_FILE, IDM_FILE};
use crate::agent::AgentAction;
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The kinds of dataset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// GUI grounding: a point for an instruction.
    Ground,
    /// Inverse dynamics: the action between two frames.
    Idm,
    /// Success detection: whether a trajectory did its task.
    Critic,
}

impl Format {
    /// The set's metadata file.
    pub fn file(self) -> &'static str {
        match self {
            Self::Ground => GROUND_FILE,
            Self::Idm => IDM_FILE,
            Self::Critic => CRITIC_FILE,
        }
    }
}

/// Why answers could not be scored.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ScoreError {
    /// A file could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        source: std::io::Error,
    },
    /// The dataset directory has no metadata file of this format.
    #[error("{0}: no such file; is --dataset a set of this kind (made by `pincer dataset`)?")]
    NoDataset(PathBuf),
    /// A line of the dataset is not an item of this format.
    #[error(
        "{path} line {line}: not an item of this dataset format ({reason}); is --dataset a set of this kind?"
    )]
    Dataset {
        /// The metadata file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        reason: String,
    },
    /// A line of the answers is not an answer.
    #[error("{path} line {line}: {reason}")]
    Answer {
        /// The answers file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong, and what an answer looks like.
        reason: String,
    },
}

/// The score of a grounding set.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct GroundScore {
    /// Items in the set.
    pub items: usize,
    /// Items answered.
    pub answered: usize,
    /// Answers inside their item's box.
    pub hits: usize,
    /// hits / items.
    pub accuracy: f64,
}

/// The score of an inverse-dynamics set.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct IdmScore {
    /// Items in the set.
    pub items: usize,
    /// Items answered.
    pub answered: usize,
    /// Answers with the right action type.
    pub type_correct: usize,
    /// Answers with the right type and arguments.
    pub correct: usize,
    /// type_correct / items.
    pub type_accuracy: f64,
    /// correct / items.
    pub accuracy: f64,
}

/// The score of a success-detection set ("success" is the positive class).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct CriticScore {
    /// Items in the set.
    pub items: usize,
    /// Items answered.
    pub answered: usize,
    /// Successes called successes.
    pub true_positives: usize,
    /// Failures called successes (or a failure left unanswered).
    pub false_positives: usize,
    /// Failures called failures.
    pub true_negatives: usize,
    /// Successes called failures (or a success left unanswered).
    pub false_negatives: usize,
    /// tp / (tp + fp); 0 when nothing was called a success.
    pub precision: f64,
    /// tp / (tp + fn); 0 when there are no successes.
    pub recall: f64,
    /// The harmonic mean of precision and recall.
    pub f1: f64,
    /// (tp + tn) / items.
    pub accuracy: f64,
}

/// A score of any format.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Score {
    /// Grounding.
    Ground(GroundScore),
    /// Inverse dynamics.
    Idm(IdmScore),
    /// Success detection.
    Critic(CriticScore),
}

/// Points within this many pixels (on each axis) of an IDM label's point match it.
pub const IDM_TOLERANCE_PX: i64 = 16;

fn ratio(a: usize, b: usize) -> f64 {
    if b == 0 { 0.0 } else { a as f64 / b as f64 }
}

fn lines(path: &Path) -> Result<Vec<(usize, String)>, ScoreError> {
    let text = std::fs::read_to_string(path).map_err(|source| ScoreError::Io {
        path: path.to_owned(),
        source,
    })?;
    Ok(text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| (i + 1, l.to_owned()))
        .collect())
}

/// The items of a dataset's metadata file, in order.
fn items<T: serde::de::DeserializeOwned>(path: &Path) -> Result<Vec<T>, ScoreError> {
    if !path.is_file() {
        return Err(ScoreError::NoDataset(path.to_owned()));
    }
    lines(path)?
        .into_iter()
        .map(|(line, l)| {
            serde_json::from_str(&l).map_err(|e| ScoreError::Dataset {
                path: path.to_owned(),
                line,
                reason: e.to_string(),
            })
        })
        .collect()
}

/// The answers of a file by item id, each checked by `parse`; unknown and repeated ids are
/// errors.
fn answers<A>(
    path: &Path,
    ids: &[&str],
    example: &str,
    parse: impl Fn(&Value) -> Result<A, String>,
) -> Result<BTreeMap<String, A>, ScoreError> {
    let mut out = BTreeMap::new();
    for (line, l) in lines(path)? {
        let bad = |reason: String| ScoreError::Answer {
            path: path.to_owned(),
            line,
            reason: format!("{reason}; an answer line looks like {example}"),
        };
        let v: Value = serde_json::from_str(&l).map_err(|e| bad(format!("not JSON: {e}")))?;
        let id = v
            .get("id")
            .and_then(Value::as_str)
            .ok_or_else(|| bad("no \"id\" string".into()))?;
        if !ids.contains(&id) {
            return Err(bad(format!("the dataset has no item '{id}'")));
        }
        let a = parse(&v).map_err(bad)?;
        if out.insert(id.to_owned(), a).is_some() {
            return Err(bad(format!("a second answer for '{id}'")));
        }
    }
    Ok(out)
}

fn pair(v: &Value, key: &str) -> Option<Result<(f64, f64), String>> {
    let p = v.get(key)?;
    Some(
        match p
            .as_array()
            .map(|a| a.iter().map(Value::as_f64).collect::<Option<Vec<f64>>>())
        {
            Some(Some(xy)) if xy.len() == 2 && xy.iter().all(|c| c.is_finite()) => {
                Ok((xy[0], xy[1]))
            }
            _ => Err(format!("\"{key}\" is not two numbers: {p}")),
        },
    )
}

/// Whether a point (image pixels) is inside a box whose right and bottom are exclusive.
pub fn inside(bbox: [i64; 4], x: f64, y: f64) -> bool {
    let [l, t, r, b] = bbox.map(|v| v as f64);
    x >= l && x < r && y >= t && y < b
}

/// Scores grounding answers.
pub fn ground(dataset: &Path, answers_file: &Path) -> Result<GroundScore, ScoreError> {
    let set: Vec<GroundItem> = items(&dataset.join(GROUND_FILE))?;
    let ids: Vec<&str> = set.iter().map(|i| i.id.as_str()).collect();
    let res: BTreeMap<&str, [u32; 2]> = set.iter().map(|i| (i.id.as_str(), i.resolution)).collect();
    let given = answers(
        answers_file,
        &ids,
        r#"{"id": "g00001", "point": [640, 360]} or {"id": "g00001", "point_normalized": [0.5, 0.5]}"#,
        |v| {
            let id = v.get("id").and_then(Value::as_str).unwrap_or_default();
            match (pair(v, "point"), pair(v, "point_normalized")) {
                (Some(p), None) => p,
                (None, Some(p)) => {
                    let (fx, fy) = p?;
                    let [w, h] = res[id];
                    Ok((fx * f64::from(w), fy * f64::from(h)))
                }
                _ => Err("give one of \"point\" and \"point_normalized\"".into()),
            }
        },
    )?;
    let hits = set
        .iter()
        .filter(|i| given.get(&i.id).is_some_and(|&(x, y)| inside(i.bbox, x, y)))
        .count();
    Ok(GroundScore {
        items: set.len(),
        answered: given.len(),
        hits,
        accuracy: ratio(hits, set.len()),
    })
}

/// Whether an answered action argument matches the label's: points within
/// [`IDM_TOLERANCE_PX`] on each axis, key names in any case, everything else equal.
fn same_argument(key: &str, label: &Value, answer: &Value) -> bool {
    let point = |v: &Value| Some((v.get("x")?.as_i64()?, v.get("y")?.as_i64()?));
    match (point(label), point(answer)) {
        (Some((lx, ly)), Some((ax, ay))) => {
            return (lx - ax).abs() <= IDM_TOLERANCE_PX && (ly - ay).abs() <= IDM_TOLERANCE_PX;
        }
        (Some(_), None) | (None, Some(_)) => return false,
        (None, None) => {}
    }
    let lower = |v: &Value| v.to_string().to_lowercase();
    if key == "key" || key == "keys" {
        lower(label) == lower(answer)
    } else {
        label == answer
    }
}

/// Scores inverse-dynamics answers: the action type, and its arguments (the environment
/// role left out: every item shows one).
pub fn idm(dataset: &Path, answers_file: &Path) -> Result<IdmScore, ScoreError> {
    let set: Vec<IdmItem> = items(&dataset.join(IDM_FILE))?;
    let ids: Vec<&str> = set.iter().map(|i| i.action_id.as_str()).collect();
    let given = answers(
        answers_file,
        &ids,
        r#"{"id": "i00001", "action": {"action": "click", "target": {"x": 640, "y": 360}}}"#,
        |v| {
            let mut action = v.get("action").cloned().ok_or("no \"action\" object")?;
            // The role is not asked for; any stands in so the action parses.
            if let Some(m) = action.as_object_mut() {
                m.entry("env").or_insert_with(|| "desktop".into());
            }
            serde_json::from_value::<AgentAction>(action.clone())
                .map_err(|e| format!("\"action\" is not an action: {e}"))?;
            Ok(action)
        },
    )?;
    let (mut type_correct, mut correct) = (0, 0);
    for item in &set {
        let Some(answer) = given.get(&item.action_id) else {
            continue;
        };
        let label = &item.metadata.action;
        if label.get("action") != answer.get("action") {
            continue;
        }
        type_correct += 1;
        let (Some(l), Some(a)) = (label.as_object(), answer.as_object()) else {
            continue;
        };
        let keys: std::collections::BTreeSet<&String> =
            l.keys().chain(a.keys()).filter(|k| *k != "env").collect();
        if keys.into_iter().all(|k| match (l.get(k), a.get(k)) {
            (Some(lv), Some(av)) => same_argument(k, lv, av),
            (None, None) => true,
            // An optional argument left out on one side and null on the other.
            (Some(v), None) | (None, Some(v)) => v.is_null(),
        }) {
            correct += 1;
        }
    }
    Ok(IdmScore {
        items: set.len(),
        answered: given.len(),
        type_correct,
        correct,
        type_accuracy: ratio(type_correct, set.len()),
        accuracy: ratio(correct, set.len()),
    })
}

/// Scores success-detection answers.
pub fn critic(dataset: &Path, answers_file: &Path) -> Result<CriticScore, ScoreError> {
    let set: Vec<CriticItem> = items(&dataset.join(CRITIC_FILE))?;
    let ids: Vec<&str> = set.iter().map(|i| i.annotation_id.as_str()).collect();
    let given = answers(
        answers_file,
        &ids,
        r#"{"id": "c00001", "success": true}"#,
        |v| {
            v.get("success")
                .and_then(Value::as_bool)
                .ok_or_else(|| "no \"success\" true or false".into())
        },
    )?;
    let (mut tp, mut fp, mut tn, mut fneg) = (0, 0, 0, 0);
    for item in &set {
        // Unanswered: the wrong answer.
        let said = given
            .get(&item.annotation_id)
            .copied()
            .unwrap_or(!item.is_success);
        match (item.is_success, said) {
            (true, true) => tp += 1,
            (false, true) => fp += 1,
            (false, false) => tn += 1,
            (true, false) => fneg += 1,
        }
    }
    let precision = ratio(tp, tp + fp);
    let recall = ratio(tp, tp + fneg);
    let f1 = if precision + recall == 0.0 {
        0.0
    } else {
        2.0 * precision * recall / (precision + recall)
    };
    Ok(CriticScore {
        items: set.len(),
        answered: given.len(),
        true_positives: tp,
        false_positives: fp,
        true_negatives: tn,
        false_negatives: fneg,
        precision,
        recall,
        f1,
        accuracy: ratio(tp + tn, set.len()),
    })
}

/// Scores answers of any format.
pub fn score(format: Format, dataset: &Path, answers_file: &Path) -> Result<Score, ScoreError> {
    Ok(match format {
        Format::Ground => Score::Ground(ground(dataset, answers_file)?),
        Format::Idm => Score::Idm(idm(dataset, answers_file)?),
        Format::Critic => Score::Critic(critic(dataset, answers_file)?),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, lines: &[Value]) -> PathBuf {
        let p = dir.join(name);
        let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
        std::fs::write(&p, text).unwrap();
        p
    }

    fn ground_item(id: &str, bbox: [i64; 4]) -> Value {
        serde_json::json!({"id": id, "image": "a.png", "instruction": "Click the 'OK' button.",
            "bbox": bbox, "resolution": [200, 100], "source": "pincer", "platform": "desktop",
            "raw_instruction": "push button 'OK'", "role": "push button", "name": "OK",
            "env": "d", "task": null})
    }

    #[test]
    fn a_point_one_pixel_outside_the_box_misses() {
        let dir = tempfile::tempdir().unwrap();
        write(
            dir.path(),
            GROUND_FILE,
            &[
                ground_item("g0", [10, 20, 50, 40]),
                ground_item("g1", [10, 20, 50, 40]),
                ground_item("g2", [10, 20, 50, 40]),
                ground_item("g3", [10, 20, 50, 40]),
                ground_item("g4", [10, 20, 50, 40]),
                ground_item("g5", [10, 20, 50, 40]),
            ],
        );
        let answers = write(
            dir.path(),
            "answers.jsonl",
            &[
                serde_json::json!({"id": "g0", "point": [10, 20]}),
                serde_json::json!({"id": "g1", "point": [49.9, 39.9]}),
                serde_json::json!({"id": "g2", "point": [50, 30]}),
                serde_json::json!({"id": "g3", "point": [30, 19]}),
                // 0.15 * 200 = 30, 0.3 * 100 = 30: inside.
                serde_json::json!({"id": "g4", "point_normalized": [0.15, 0.3]}),
            ],
        );
        let s = ground(dir.path(), &answers).unwrap();
        assert_eq!((s.items, s.answered, s.hits), (6, 5, 3));
        assert!((s.accuracy - 0.5).abs() < 1e-9);
        assert!(!inside([10, 20, 50, 40], 9.99, 20.0));
    }

    #[test]
    fn garbage_answers_are_typed_errors_naming_the_line() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), GROUND_FILE, &[ground_item("g0", [0, 0, 5, 5])]);
        for (line, says) in [
            ("not json", "line 2: not JSON"),
            ("{\"point\": [1, 2]}", "line 2: no \"id\" string"),
            ("{\"id\": \"g9\", \"point\": [1, 2]}", "no item 'g9'"),
            (
                "{\"id\": \"g0\", \"point\": [1]}",
                "\"point\" is not two numbers",
            ),
            (
                "{\"id\": \"g0\", \"point\": [1, \"a\"]}",
                "\"point\" is not two numbers",
            ),
            ("{\"id\": \"g0\"}", "give one of"),
        ] {
            let p = dir.path().join("a.jsonl");
            std::fs::write(&p, format!("\n{line}\n")).unwrap();
            let e = ground(dir.path(), &p).unwrap_err();
            assert!(matches!(e, ScoreError::Answer { line: 2, .. }), "{e:?}");
            assert!(e.to_string().contains(says), "{e}");
            assert!(e.to_string().contains("an answer line looks like"), "{e}");
        }
        let p = write(
            dir.path(),
            "twice.jsonl",
            &[
                serde_json::json!({"id": "g0", "point": [1, 1]}),
                serde_json::json!({"id": "g0", "point": [1, 1]}),
            ],
        );
        let e = ground(dir.path(), &p).unwrap_err();
        assert!(
            e.to_string().contains("line 2: a second answer for 'g0'"),
            "{e}"
        );
        // A dataset of another kind is named as such.
        let other = tempfile::tempdir().unwrap();
        write(other.path(), GROUND_FILE, &[serde_json::json!({"id": 3})]);
        let e = ground(other.path(), &p).unwrap_err();
        assert!(matches!(e, ScoreError::Dataset { line: 1, .. }), "{e:?}");
        // A set of another kind, or none.
        assert!(matches!(
            idm(dir.path(), &p).unwrap_err(),
            ScoreError::NoDataset(f) if f.ends_with(IDM_FILE)
        ));
    }

    fn idm_item(id: &str, action: Value) -> Value {
        serde_json::json!({"action_id": id, "obs_before": "a.png", "obs_after": "b.png",
            "operation": action["action"], "bbox": null,
            "metadata": {"repr": "x", "action": action}, "instruction": "i", "source": "pincer",
            "platform": "desktop", "action_space": ["click"], "task": "t", "step": 1})
    }

    #[test]
    fn idm_answers_match_by_type_and_arguments() {
        let dir = tempfile::tempdir().unwrap();
        write(
            dir.path(),
            IDM_FILE,
            &[
                idm_item(
                    "i0",
                    serde_json::json!({"action": "click", "env": "desktop", "target": {"x": 100, "y": 200}}),
                ),
                idm_item(
                    "i1",
                    serde_json::json!({"action": "click", "env": "desktop", "target": {"x": 100, "y": 200}}),
                ),
                idm_item(
                    "i2",
                    serde_json::json!({"action": "type", "env": "desktop", "text": "hello", "target": null}),
                ),
                idm_item(
                    "i3",
                    serde_json::json!({"action": "key", "env": "desktop", "key": "Return"}),
                ),
                idm_item(
                    "i4",
                    serde_json::json!({"action": "type", "env": "desktop", "text": "hello", "target": null}),
                ),
            ],
        );
        let answers = write(
            dir.path(),
            "answers.jsonl",
            &[
                // Within the tolerance.
                serde_json::json!({"id": "i0", "action": {"action": "click", "target": {"x": 116, "y": 184}}}),
                // One pixel beyond it: the type is right, the action is not.
                serde_json::json!({"id": "i1", "action": {"action": "click", "target": {"x": 117, "y": 200}}}),
                serde_json::json!({"id": "i2", "action": {"action": "type", "text": "hello"}}),
                serde_json::json!({"id": "i3", "action": {"action": "key", "key": "return"}}),
                serde_json::json!({"id": "i4", "action": {"action": "type", "text": "Hello"}}),
            ],
        );
        let s = idm(dir.path(), &answers).unwrap();
        assert_eq!(
            (s.items, s.answered, s.type_correct, s.correct),
            (5, 5, 5, 3)
        );
        let bad = write(
            dir.path(),
            "bad.jsonl",
            &[serde_json::json!({"id": "i0", "action": {"action": "fly"}})],
        );
        let e = idm(dir.path(), &bad).unwrap_err();
        assert!(
            e.to_string()
                .contains("line 1: \"action\" is not an action"),
            "{e}"
        );
    }

    #[test]
    fn critic_scores_count_unanswered_items_wrong() {
        let dir = tempfile::tempdir().unwrap();
        let item = |id: &str, ok: bool| {
            serde_json::json!({"instruction": "i", "annotation_id": id, "actions": [],
                "source": "pincer", "platform": "desktop",
                "metadata": {"task": "t", "repeat": 0, "agent": "oracle",
                    "termination": if ok { "success" } else { "step-limit" }, "passed": 0, "total": 1},
                "action_space": [], "is_success": ok})
        };
        write(
            dir.path(),
            CRITIC_FILE,
            &[
                item("c0", true),
                item("c1", true),
                item("c2", false),
                item("c3", false),
                item("c4", true),
            ],
        );
        let answers = write(
            dir.path(),
            "answers.jsonl",
            &[
                serde_json::json!({"id": "c0", "success": true}),
                serde_json::json!({"id": "c1", "success": false}),
                serde_json::json!({"id": "c2", "success": true}),
                serde_json::json!({"id": "c3", "success": false}),
            ],
        );
        let s = critic(dir.path(), &answers).unwrap();
        // c4 unanswered: a false negative.
        assert_eq!(
            (
                s.true_positives,
                s.false_positives,
                s.true_negatives,
                s.false_negatives
            ),
            (1, 1, 1, 2)
        );
        assert!((s.precision - 0.5).abs() < 1e-9);
        assert!((s.recall - 1.0 / 3.0).abs() < 1e-9);
        assert!((s.f1 - 0.4).abs() < 1e-9);
        assert!((s.accuracy - 0.4).abs() < 1e-9);
        let bad = write(
            dir.path(),
            "bad.jsonl",
            &[serde_json::json!({"id": "c0", "success": "yes"})],
        );
        assert!(
            critic(dir.path(), &bad)
                .unwrap_err()
                .to_string()
                .contains("line 1: no \"success\"")
        );
    }
}
