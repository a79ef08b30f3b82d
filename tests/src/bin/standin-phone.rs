//! `standin-phone`: makes a **stand-in** Android phone (no Android runs on this machine):
//! Android's commands as scripts that replay outputs recorded from real devices (see
//! `pincer_tests::android`), showing the Gmail welcome screen recorded by mobile-env. It
//! prints the directory to put first on `PATH` for `pincer-shim`. `./run.sh bench` uses it
//! to measure the shim's own overhead per call, which the stand-in's commands make visible
//! (they take about as long as a shell script, not as long as Android's).

fn main() {
    let screen = std::fs::read_to_string(
        pincer_tests::android::fixtures().join("mobile-env/uiautomator-gmail-welcome-raw.xml"),
    )
    .expect("the recorded Gmail screen (fixtures/android/mobile-env)");
    let phone = pincer_tests::android::Phone::new(
        &screen,
        "com.google.android.gm/.welcome.WelcomeTourActivity",
    );
    phone.set_setting("global", "airplane_mode_on", "0");
    phone.set_rows(
        "content://settings/system",
        "Row: 0 name=screen_brightness, value=102\nRow: 1 name=font_scale, value=1.0\n",
    );
    let bin = phone.bin.clone();
    let _ = phone.keep();
    println!("{}", bin.display());
}
