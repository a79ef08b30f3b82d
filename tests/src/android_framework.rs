//! A stand-in of the few Android framework classes the shim's clipboard helper touches
//! (no Android runs on this machine): `android.os.ServiceManager`, `android.os.IBinder`,
//! `android.os.IInterface`, `android.content.ClipData` and `android.content.IClipboard` with
//! its `Stub`, written in Java and compiled by javac, with `IClipboard.setPrimaryClip` as
//! each Android version declared it ([`ClipApi`]). The helper itself is the shipped dex,
//! translated into JVM class files by enjarify and run by `java`: its own instructions, not
//! a rewrite of them. The stand-in clipboard service checks the calling package as
//! Android's does and writes what it was given into the phone's state directory
//! (`$PINCER_PHONE_STATE`): the clip's text in `clip.txt`, the call in `clip-call.log`;
//! a file `no-clipboard` there makes the service missing.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// The shipped helper, as the shim embeds it.
pub fn shipped_dex() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../android-shim/dex/pincer-clip.dex")
}

/// The helper's smali source.
pub fn smali_source() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../android-shim/dex/Clip.smali")
}

/// `IClipboard.setPrimaryClip` as Android declared it over the years.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClipApi {
    /// Up to Android 9 (API 28): `(ClipData clip, String callingPackage)`.
    Api28,
    /// Android 10 to 12L (API 29–32): a user id added.
    Api29,
    /// Android 13 (API 33): an attribution tag before the user id.
    Api33,
    /// Android 14 on (API 34+): a device id after the user id.
    Api34,
    /// No Android's: a `boolean` the helper cannot know how to fill (it must fail, saying
    /// so, rather than guess).
    Unknown,
}

impl ClipApi {
    /// Every version, oldest first.
    pub const ALL: [Self; 4] = [Self::Api28, Self::Api29, Self::Api33, Self::Api34];

    /// The parameters of `setPrimaryClip`, as Java declares them.
    fn parameters(self) -> &'static [(&'static str, &'static str)] {
        match self {
            Self::Api28 => &[("ClipData", "clip"), ("String", "callingPackage")],
            Self::Api29 => &[
                ("ClipData", "clip"),
                ("String", "callingPackage"),
                ("int", "userId"),
            ],
            Self::Api33 => &[
                ("ClipData", "clip"),
                ("String", "callingPackage"),
                ("String", "attributionTag"),
                ("int", "userId"),
            ],
            Self::Api34 => &[
                ("ClipData", "clip"),
                ("String", "callingPackage"),
                ("String", "attributionTag"),
                ("int", "userId"),
                ("int", "deviceId"),
            ],
            Self::Unknown => &[
                ("ClipData", "clip"),
                ("String", "callingPackage"),
                ("boolean", "notify"),
            ],
        }
    }

    /// The line the stand-in service logs when the helper calls it as it should: the
    /// clip's label, the shell's package, no attribution tag, user 0, device 0.
    pub fn expected_call(self) -> &'static str {
        match self {
            Self::Api28 => "setPrimaryClip(pincer, com.android.shell)",
            Self::Api29 => "setPrimaryClip(pincer, com.android.shell, 0)",
            Self::Api33 => "setPrimaryClip(pincer, com.android.shell, null, 0)",
            Self::Api34 => "setPrimaryClip(pincer, com.android.shell, null, 0, 0)",
            Self::Unknown => "(none: the helper refuses)",
        }
    }

    /// `IClipboard.java` for this version. From Android 12 on the interface also has a
    /// `setPrimaryClipAsPackage`: here it fails loudly if the helper calls it instead.
    fn iclipboard(self) -> String {
        let params = self.parameters();
        let declared = params
            .iter()
            .map(|(t, n)| format!("{t} {n}"))
            .collect::<Vec<_>>()
            .join(", ");
        let logged = params
            .iter()
            .map(|(_, n)| match *n {
                "clip" => "clip.label".to_owned(),
                n => n.to_owned(),
            })
            .collect::<Vec<_>>()
            .join(" + \", \" + ");
        let as_package = if matches!(self, Self::Api33 | Self::Api34) {
            "void setPrimaryClipAsPackage(ClipData clip, String callingPackage, String attributionTag, int userId, int deviceId, String sourcePackage);"
        } else {
            ""
        };
        let as_package_impl = if as_package.is_empty() {
            String::new()
        } else {
            format!(
                "public {} {{ throw new IllegalStateException(\"the helper called setPrimaryClipAsPackage\"); }}",
                as_package.trim_end_matches(';')
            )
        };
        format!(
            r#"package android.content;

import android.os.IBinder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardOpenOption;

/** pincer test stand-in for Android's hidden IClipboard ({self:?}). */
public interface IClipboard extends android.os.IInterface {{
    void setPrimaryClip({declared});
    {as_package}

    abstract class Stub implements IClipboard {{
        public static IClipboard asInterface(IBinder binder) {{
            return binder == null ? null : new Service(binder);
        }}
    }}

    /** The clipboard service behind the binder, in the phone's state directory. */
    final class Service extends Stub {{
        private final IBinder binder;

        Service(IBinder binder) {{ this.binder = binder; }}

        public IBinder asBinder() {{ return binder; }}

        public void setPrimaryClip({declared}) {{
            // As Android's ClipboardService: the calling package must be the caller's (uid 2000).
            if (!"com.android.shell".equals(callingPackage)) {{
                throw new SecurityException("Package " + callingPackage + " does not belong to 2000");
            }}
            String state = System.getenv("PINCER_PHONE_STATE");
            try {{
                Files.write(Paths.get(state, "clip.txt"), clip.text.toString().getBytes(StandardCharsets.UTF_8));
                Files.write(Paths.get(state, "clip-call.log"),
                    ("setPrimaryClip(" + {logged} + ")\n").getBytes(StandardCharsets.UTF_8),
                    StandardOpenOption.CREATE, StandardOpenOption.APPEND);
            }} catch (java.io.IOException e) {{
                throw new java.io.UncheckedIOException(e);
            }}
        }}

        {as_package_impl}
    }}
}}
"#
        )
    }
}

/// The classes that never changed.
const FIXED: &[(&str, &str)] = &[
    (
        "android/os/IBinder.java",
        "package android.os;\n/** pincer test stand-in for Android's IBinder. */\npublic interface IBinder {}\n",
    ),
    (
        "android/os/IInterface.java",
        "package android.os;\n/** pincer test stand-in for Android's IInterface. */\npublic interface IInterface { IBinder asBinder(); }\n",
    ),
    (
        "android/os/ServiceManager.java",
        r#"package android.os;

/** pincer test stand-in for Android's hidden ServiceManager: only the clipboard service. */
public final class ServiceManager {
    public static IBinder getService(String name) {
        String state = System.getenv("PINCER_PHONE_STATE");
        if (!"clipboard".equals(name) || state == null || new java.io.File(state, "no-clipboard").exists()) {
            return null;
        }
        return new IBinder() {};
    }
}
"#,
    ),
    (
        "android/content/ClipData.java",
        r#"package android.content;

/** pincer test stand-in for Android's ClipData: one item of text. */
public class ClipData {
    final CharSequence label;
    final CharSequence text;

    ClipData(CharSequence label, CharSequence text) {
        this.label = label;
        this.text = text;
    }

    public static ClipData newPlainText(CharSequence label, CharSequence text) {
        return new ClipData(label, text);
    }
}
"#,
    ),
];

/// The stand-in framework for one Android version, compiled.
#[derive(Debug)]
pub struct Framework {
    /// The class directory (a `java -cp` entry).
    pub classes: PathBuf,
    _dir: tempfile::TempDir,
}

impl Framework {
    /// Writes and compiles the stand-in classes for `api`.
    pub fn compile(api: ClipApi) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("pincer-framework-")
            .tempdir()
            .unwrap();
        let (src, classes) = (dir.path().join("src"), dir.path().join("classes"));
        let mut files = Vec::new();
        let iclipboard = api.iclipboard();
        for (path, text) in FIXED
            .iter()
            .copied()
            .chain([("android/content/IClipboard.java", iclipboard.as_str())])
        {
            let p = src.join(path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, text).unwrap();
            files.push(p);
        }
        let out = Command::new("javac")
            .args(["-nowarn", "-d"])
            .arg(&classes)
            .args(&files)
            .output()
            .expect("javac (install default-jdk-headless: ./run.sh deps)");
        assert!(
            out.status.success(),
            "javac: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Self { classes, _dir: dir }
    }
}

/// Translates a dex into a jar of JVM classes with Debian's enjarify.
pub fn enjarify(dex: &Path, jar: &Path) {
    // Debian's Python, not whichever `python3` comes first on PATH.
    let out = Command::new("enjarify")
        .env("PYTHON", "/usr/bin/python3")
        .arg("-f")
        .arg("-o")
        .arg(jar)
        .arg(dex)
        .output()
        .expect("enjarify (install enjarify: ./run.sh deps)");
    assert!(
        out.status.success() && jar.is_file(),
        "enjarify {}: {}{}",
        dex.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs the helper's class from `jar` on a JVM over `framework`, as `app_process` would:
/// `stdin` on its standard input, the phone's state in `state`.
pub fn run_helper(jar: &Path, framework: &Framework, state: &Path, stdin: &[u8]) -> Output {
    use std::io::Write as _;
    let classpath = format!("{}:{}", jar.display(), framework.classes.display());
    let mut child = Command::new("java")
        .args(["-cp", &classpath, "org.pincer.Clip"])
        .env("PINCER_PHONE_STATE", state)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("java (install default-jre-headless: ./run.sh deps)");
    let mut input = child.stdin.take().unwrap();
    let bytes = stdin.to_vec();
    let feeder = std::thread::spawn(move || {
        let _ = input.write_all(&bytes);
    });
    let out = child.wait_with_output().unwrap();
    feeder.join().unwrap();
    out
}

/// The shell lines of a stand-in `app_process` that runs the dex named by `$CLASSPATH` the
/// same way: translated by enjarify, on a JVM over the framework in `classes`.
pub fn app_process_script(classes: &Path) -> String {
    format!(
        r#"jar="$S/app_process-dex.jar"
PYTHON=/usr/bin/python3 enjarify -f -o "$jar" "$CLASSPATH" >/dev/null 2>"$S/enjarify.err" || {{ echo "stand-in app_process: enjarify failed" >&2; cat "$S/enjarify.err" >&2; exit 1; }}
PINCER_PHONE_STATE="$S" exec java -cp "$jar:{}" "$2" < "$S/app_process.stdin""#,
        classes.display()
    )
}
