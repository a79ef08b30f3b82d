//! What Android's own commands print, read into typed answers: the foreground app
//! (`dumpsys activity activities`, else `dumpsys window`), the screen (`wm size`,
//! `wm density`), settings (`settings get`), content-provider rows (`content query`),
//! packages (`pm list packages`), properties (`getprop`) and the battery (`dumpsys
//! battery`). Outputs differ across Android versions and vendors; each reader takes every
//! form the recorded outputs in `fixtures/android/` show. Exit statuses are not trusted:
//! `content` reports provider errors on stderr with status 0.

use std::collections::BTreeMap;

/// What a command printed that is not the answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum ReadError {
    /// The command reported an error.
    #[error("{command}: {message}")]
    Failed {
        /// The command.
        command: &'static str,
        /// Its message.
        message: String,
    },
    /// Output in no form the reader knows.
    #[error("{command}: unexpected output: {output}")]
    Unexpected {
        /// The command.
        command: &'static str,
        /// The start of what it printed.
        output: String,
    },
}

fn unexpected(command: &'static str, output: &str) -> ReadError {
    ReadError::Unexpected {
        command,
        output: output.chars().take(200).collect(),
    }
}

/// The app in front: its package and, when known, its activity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Foreground {
    /// `com.android.settings`.
    pub(crate) package: String,
    /// `.Settings` or `com.android.settings.Settings`, if an activity is named.
    pub(crate) activity: Option<String>,
}

/// `pkg/activity` out of a record such as `ActivityRecord{h u0 pkg/.Act t12}` or
/// `Window{h u0 pkg/pkg.Act}`: the first word holding a `/`, cut at `}` or `,`.
fn component(record: &str) -> Option<Foreground> {
    let word = record
        .split(|c: char| c.is_whitespace() || c == '{')
        .find(|w| w.contains('/') && !w.starts_with('/'))?;
    let word = word.split(['}', ',']).next()?;
    let (package, activity) = word.split_once('/')?;
    let valid = !package.is_empty()
        && package
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '_');
    valid.then(|| Foreground {
        package: package.to_owned(),
        activity: (!activity.is_empty()).then(|| activity.to_owned()),
    })
}

/// The resumed activity in `dumpsys activity activities`: `topResumedActivity=` (Android
/// 12 and later, display level), `ResumedActivity:`, `mResumedActivity:`.
pub(crate) fn resumed_activity(dump: &str) -> Option<Foreground> {
    for key in [
        "topResumedActivity=",
        "mResumedActivity:",
        "ResumedActivity:",
    ] {
        for line in dump.lines().map(str::trim_start) {
            if line.starts_with(key)
                && let Some(f) = component(&line[key.len()..])
            {
                return Some(f);
            }
        }
    }
    None
}

/// The focused app in `dumpsys window` (`windows` or `displays`): `mFocusedApp` (an
/// activity) before `mCurrentFocus` (a window, which may be no app's), the first that
/// names one and is not the status bar or a cover display's home.
pub(crate) fn focused_app(dump: &str) -> Option<Foreground> {
    for key in ["mFocusedApp=", "mCurrentFocus="] {
        for line in dump.lines().map(str::trim_start) {
            let Some(rest) = line.strip_prefix(key) else {
                continue;
            };
            if let Some(f) = component(rest)
                && !f.activity.as_deref().unwrap_or("").contains("subscreen")
            {
                return Some(f);
            }
        }
    }
    None
}

/// A dump that ran out of time is a failure, not "nothing in front".
pub(crate) fn check_dump(command: &'static str, dump: &str) -> Result<(), ReadError> {
    match dump.lines().find(|l| l.contains("DUMP TIMEOUT")) {
        Some(l) => Err(ReadError::Failed {
            command,
            message: l.trim().trim_matches('*').trim().to_owned(),
        }),
        None => Ok(()),
    }
}

/// Width and height from `wm size` (the override when there is one).
pub(crate) fn wm_size(out: &str) -> Result<(u32, u32), ReadError> {
    let value = |prefix: &str| {
        out.lines()
            .find_map(|l| l.trim().strip_prefix(prefix))
            .map(str::trim)
    };
    let v = value("Override size:")
        .or_else(|| value("Physical size:"))
        .ok_or_else(|| unexpected("wm size", out))?;
    let (w, h) = v
        .split_once('x')
        .ok_or_else(|| unexpected("wm size", out))?;
    match (w.trim().parse(), h.trim().parse()) {
        (Ok(w), Ok(h)) => Ok((w, h)),
        _ => Err(unexpected("wm size", out)),
    }
}

/// Dots per inch from `wm density` (the override when there is one).
pub(crate) fn wm_density(out: &str) -> Result<u32, ReadError> {
    let value = |prefix: &str| {
        out.lines()
            .find_map(|l| l.trim().strip_prefix(prefix))
            .and_then(|v| v.trim().parse().ok())
    };
    value("Override density:")
        .or_else(|| value("Physical density:"))
        .ok_or_else(|| unexpected("wm density", out))
}

/// `settings get`: the value, or `None` for an unset key (printed as `null`).
pub(crate) fn setting(out: &str) -> Option<String> {
    let v = out.strip_suffix('\n').unwrap_or(out);
    (v != "null").then(|| v.to_owned())
}

/// One row of `content query`: column to value (`None` for SQL NULL).
pub(crate) type Row = BTreeMap<String, Option<String>>;

/// Rows of `content query`. Values are neither quoted nor escaped, so a value may hold
/// `, ` or a newline: with the projection known, columns are split at `, NAME=` for the
/// projection's names only; without it, at `, word=`.
pub(crate) fn content_rows(
    stdout: &str,
    stderr: &str,
    projection: &[String],
) -> Result<Vec<Row>, ReadError> {
    let err = stderr.trim();
    if err.starts_with("Error while accessing provider") || err.contains("Exception") {
        return Err(ReadError::Failed {
            command: "content query",
            message: err
                .lines()
                .find(|l| l.contains("Exception") || l.starts_with("Error"))
                .unwrap_or(err)
                .trim()
                .to_owned(),
        });
    }
    let text = stdout.trim_end_matches('\n');
    if text.trim() == "No result found." || text.trim().is_empty() {
        return Ok(Vec::new());
    }
    let mut rows = Vec::new();
    // A row starts at "Row: N "; a value with a newline continues on the next line.
    let mut chunks: Vec<String> = Vec::new();
    for line in text.lines() {
        if line.starts_with("Row: ") {
            chunks.push(line.to_owned());
        } else if let Some(last) = chunks.last_mut() {
            last.push('\n');
            last.push_str(line);
        } else {
            return Err(unexpected("content query", text));
        }
    }
    for chunk in chunks {
        let body = chunk
            .strip_prefix("Row: ")
            .and_then(|r| r.split_once(' '))
            .map(|(_, rest)| rest)
            .ok_or_else(|| unexpected("content query", &chunk))?;
        rows.push(split_columns(body, projection));
    }
    Ok(rows)
}

/// Where each `, NAME=` column starts in a row body.
fn split_columns(body: &str, projection: &[String]) -> Row {
    let starts_column = |rest: &str| -> Option<usize> {
        let eq = rest.find('=')?;
        let name = &rest[..eq];
        let known = if projection.is_empty() {
            !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        } else {
            projection.iter().any(|p| p == name)
        };
        known.then_some(eq)
    };
    let mut row = Row::new();
    let mut cuts: Vec<usize> = vec![0];
    let mut i = 0;
    while let Some(off) = body[i..].find(", ") {
        let at = i + off + 2;
        if starts_column(&body[at..]).is_some() {
            cuts.push(at);
        }
        i = at;
    }
    cuts.push(body.len() + 2);
    for w in cuts.windows(2) {
        let field = &body[w[0]..w[1] - 2];
        if let Some((k, v)) = field.split_once('=') {
            row.insert(k.to_owned(), (v != "NULL").then(|| v.to_owned()));
        }
    }
    row
}

/// An installed package.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Package {
    /// `com.android.settings`.
    pub(crate) name: String,
    /// `versionCode`, when listed.
    pub(crate) version_code: Option<u64>,
}

/// `pm list packages [--show-versioncode]`: `package:NAME [versionCode:N]` lines (with
/// `-f`, `package:PATH=NAME`).
pub(crate) fn packages(out: &str) -> Vec<Package> {
    out.lines()
        .filter_map(|l| {
            let rest = l.trim().strip_prefix("package:")?;
            let mut words = rest.split_whitespace();
            let first = words.next()?;
            let name = first.rsplit_once('=').map_or(first, |(_, n)| n).to_owned();
            let version_code = words
                .find_map(|w| w.strip_prefix("versionCode:"))
                .and_then(|v| v.parse().ok());
            Some(Package { name, version_code })
        })
        .collect()
}

/// The battery as `dumpsys battery` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Battery {
    /// Charge, 0 to `scale`.
    pub(crate) level: u32,
    /// Full charge.
    pub(crate) scale: u32,
    /// Whether a charger (AC, USB or wireless) is connected.
    pub(crate) plugged: bool,
}

/// Reads `dumpsys battery`.
pub(crate) fn battery(out: &str) -> Result<Battery, ReadError> {
    let field = |name: &str| {
        out.lines()
            .find_map(|l| l.trim().strip_prefix(name))
            .map(str::trim)
    };
    let number = |name: &str| field(name).and_then(|v| v.parse::<u32>().ok());
    let level = number("level:").ok_or_else(|| unexpected("dumpsys battery", out))?;
    let plugged = ["AC powered:", "USB powered:", "Wireless powered:"]
        .iter()
        .any(|f| field(f) == Some("true"));
    Ok(Battery {
        level,
        scale: number("scale:").unwrap_or(100),
        plugged,
    })
}

/// The display's rotation in quarter turns from `dumpsys input` (`SurfaceOrientation: N`
/// on older Android, `InputDeviceOrientation: N` on newer), 0 when it says neither.
pub(crate) fn rotation(dumpsys_input: &str) -> u32 {
    dumpsys_input
        .lines()
        .find_map(|l| {
            let l = l.trim();
            l.strip_prefix("SurfaceOrientation:")
                .or_else(|| l.strip_prefix("InputDeviceOrientation:"))
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(path: &str) -> String {
        let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../fixtures/android")
            .join(path);
        std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    }

    fn fg(package: &str, activity: &str) -> Option<Foreground> {
        Some(Foreground {
            package: package.into(),
            activity: Some(activity.into()),
        })
    }

    #[test]
    fn the_foreground_app_is_read_from_every_android_generation() {
        // Android 4.1: no user, no task id.
        let old = focused_app(&fixture("avc/dumpsys-window-windows-api16-focus.txt")).unwrap();
        assert!(!old.package.is_empty() && old.activity.is_some(), "{old:?}");
        // Several displays (a foldable): the main display's app, not the cover's home.
        for f in [
            "appium-adb/dumpsys-window-displays-focus-multidisplay-samsung-a.txt",
            "appium-adb/dumpsys-window-displays-focus-multidisplay-samsung-b.txt",
        ] {
            let app = focused_app(&fixture(f)).unwrap_or_else(|| panic!("{f}"));
            assert!(
                !app.activity.unwrap_or_default().contains("subscreen"),
                "{f}"
            );
        }
        // A vendor's ", isShadow:false" after the component.
        let shadow = focused_app(&fixture(
            "appium-adb/dumpsys-window-windows-focus-isshadow-excerpt.txt",
        ))
        .unwrap();
        assert!(
            !shadow.activity.clone().unwrap_or_default().contains(','),
            "{shadow:?}"
        );
        // The resumed activity in `dumpsys activity activities`, every spelling.
        assert_eq!(
            resumed_activity(
                "  mResumedActivity: ActivityRecord{4a3b u0 com.android.settings/.Settings t12}"
            ),
            fg("com.android.settings", ".Settings")
        );
        assert_eq!(
            resumed_activity(
                "    topResumedActivity=ActivityRecord{d9b8281 u10 tv.danmaku.bili/.MainActivityV2} t57}"
            ),
            fg("tv.danmaku.bili", ".MainActivityV2")
        );
        assert_eq!(
            resumed_activity(
                "      ResumedActivity: ActivityRecord{1 u0 com.android.dialer/.main.impl.MainActivity t3}"
            ),
            fg("com.android.dialer", ".main.impl.MainActivity")
        );
        let tv = resumed_activity(&fixture(
            "python-androidtv/dumpsys-activity-resumed-googletv-excerpt.txt",
        ));
        assert!(tv.is_some());
        // A window that is no app's, and nothing at all.
        assert_eq!(
            focused_app("  mCurrentFocus=Window{c52eaa8 u0 com.sony.dtv.sonysystemservice}"),
            None
        );
        assert_eq!(resumed_activity(""), None);
        assert!(
            check_dump(
                "dumpsys activity",
                &fixture("issue-threads/dumpsys-activity-top-timeout.txt")
            )
            .is_err()
        );
    }

    #[test]
    fn screen_size_and_density_take_the_override() {
        assert_eq!(
            wm_size(&fixture("android_world/wm-size-1080x2400.txt")),
            Ok((1080, 2400))
        );
        let (w, h) = wm_size(&fixture("issue-threads/wm-size-override.txt")).unwrap();
        assert!(w > 0 && h > 0);
        assert_eq!(
            wm_size("Physical size: 1080x2340\nOverride size: 540x1170\n"),
            Ok((540, 1170))
        );
        assert_eq!(
            wm_density(&fixture("appium-adb/wm-density-420.txt")),
            Ok(420)
        );
        assert!(wm_density("Physical density: unknown").is_err());
        assert!(
            wm_size("garbage")
                .unwrap_err()
                .to_string()
                .starts_with("wm size:")
        );
    }

    #[test]
    fn content_rows_keep_commas_and_nulls() {
        let rows = content_rows(
            &fixture("android_world/content-query-row-comma-in-body-docstring.txt"),
            "",
            &[],
        )
        .unwrap();
        assert!(!rows.is_empty());
        let body = rows[0].get("body").cloned().flatten().unwrap_or_default();
        assert!(body.contains(", "), "{rows:?}");
        assert!(
            content_rows(
                &fixture("android_world/content-query-no-result.txt"),
                "",
                &[]
            )
            .unwrap()
            .is_empty()
        );
        let proj = ["_id".to_owned(), "address".to_owned(), "body".to_owned()];
        let r = content_rows(
            "Row: 0 _id=7, address=123456789, body=Hi, see you=soon\nand more\n",
            "",
            &proj,
        )
        .unwrap();
        assert_eq!(r[0]["address"].as_deref(), Some("123456789"));
        assert_eq!(r[0]["body"].as_deref(), Some("Hi, see you=soon\nand more"));
        let n = content_rows("Row: 0 name=a, value=NULL", "", &[]).unwrap();
        assert_eq!(n[0]["value"], None);
        let e = content_rows(
            "",
            &fixture("issue-threads/content-query-error-unhandled-uri-stderr-excerpt.txt"),
            &[],
        )
        .unwrap_err();
        assert!(e.to_string().starts_with("content query:"), "{e}");
    }

    #[test]
    fn packages_battery_settings_and_props() {
        let list = packages(&fixture(
            "appium-adb/cmd-package-list-packages-show-versioncode-excerpt.txt",
        ));
        assert!(
            !list.is_empty() && list.iter().any(|p| p.version_code.is_some()),
            "{list:?}"
        );
        assert_eq!(
            packages("package:/system/app/X.apk=com.x\n")[0].name,
            "com.x"
        );
        let b = battery(&fixture("adbutils/dumpsys-battery-reindented.txt")).unwrap();
        assert!(b.level <= b.scale);
        assert!(battery("nothing").is_err());
        assert_eq!(setting("null\n"), None);
        assert_eq!(setting("Sydney\n").as_deref(), Some("Sydney"));
        assert_eq!(rotation("    SurfaceOrientation: 1\n"), 1);
        assert_eq!(rotation("  InputDeviceOrientation: 3"), 3);
        assert_eq!(rotation("nothing"), 0);
    }
}
