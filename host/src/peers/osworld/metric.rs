//! OSWorld's metric functions, as `desktop-env` defines them: which module of
//! `desktop_env.evaluators.metrics` each lives in and which third-party libraries it needs
//! when called (read off the package's source: the function and the helpers it calls). The
//! worker imports a metric's module without the package's `metrics/__init__` (which pulls
//! in torch, easyocr and librosa) and refuses, before calling, a metric whose libraries the
//! worker's environment lacks: a stand-in library would not fail loudly, since several
//! metrics swallow every exception and some then score 1.

/// The pinned `desktop-env` release whose code scores OSWorld tasks. 1.0.0–1.0.2 have the
/// same evaluators; the 2024 task files were written against 0.1.18, whose metrics differ in
/// 40 of the 110 the tasks use (README, OSWorld).
pub const DESKTOP_ENV: &str = "1.0.2";

/// Libraries the worker's environment (`pincer osworld setup`) does not install: too heavy
/// (torch through easyocr; numba through librosa; OpenCV), needing a native tool
/// (chromaprint for acoustid), or AGPL and unused (borb).
pub const NOT_INSTALLED: &[&str] = &["easyocr", "librosa", "fastdtw", "cv2", "acoustid", "borb"];

/// Every metric the 369 tasks name: its module, and the libraries it needs when called
/// (import names).
pub const METRICS: &[(&str, &str, &[&str])] = &[
    (
        "check_accessibility_tree",
        "general",
        &["lxml", "rapidfuzz"],
    ),
    ("check_auto_saving_time", "slides", &[]),
    (
        "check_brightness_decrease_and_structure_sim",
        "gimp",
        &["PIL", "numpy"],
    ),
    ("check_config_status", "gimp", &[]),
    (
        "check_contrast_increase_and_structure_sim",
        "gimp",
        &["PIL", "numpy", "skimage"],
    ),
    ("check_csv", "general", &[]),
    ("check_direct_json_object", "general", &[]),
    ("check_enabled_experiments", "chrome", &[]),
    (
        "check_file_exists_and_structure_sim",
        "gimp",
        &["PIL", "numpy", "skimage"],
    ),
    ("check_font_size", "chrome", &[]),
    ("check_global_key_play_pause", "vlc", &[]),
    ("check_gnome_favorite_apps", "basic_os", &[]),
    ("check_green_background", "gimp", &["PIL", "numpy"]),
    (
        "check_highlighted_words",
        "docs",
        &["docx", "odf", "rapidfuzz"],
    ),
    ("check_history_deleted", "chrome", &[]),
    ("check_image_file_size", "gimp", &[]),
    ("check_image_mirror", "gimp", &["PIL", "numpy", "skimage"]),
    ("check_image_size", "gimp", &["PIL"]),
    ("check_image_stretch_and_center", "slides", &["pptx"]),
    ("check_include_exclude", "general", &[]),
    (
        "check_italic_font_size_14",
        "docs",
        &["docx", "odf", "rapidfuzz"],
    ),
    ("check_json", "general", &["openpyxl", "yaml"]),
    ("check_json_keybindings", "vscode", &[]),
    ("check_json_settings", "vscode", &[]),
    ("check_left_panel", "slides", &[]),
    ("check_line_number", "general", &[]),
    ("check_list", "general", &[]),
    ("check_moved_jpgs", "basic_os", &[]),
    ("check_mp3_meta", "others", &["mutagen", "openpyxl"]),
    ("check_one_instance_when_started_from_file", "vlc", &[]),
    ("check_page_number_colors", "slides", &[]),
    (
        "check_palette_and_structure_sim",
        "gimp",
        &["PIL", "numpy", "skimage"],
    ),
    ("check_pdf_pages", "pdf", &["pypdf"]),
    ("check_presenter_console_disable", "slides", &[]),
    ("check_python_file_by_test_suite", "vscode", &[]),
    ("check_qt_bgcone", "vlc", &[]),
    ("check_qt_max_volume", "vlc", &[]),
    ("check_qt_minimal_view", "vlc", &[]),
    ("check_qt_slider_colours", "vlc", &[]),
    (
        "check_saturation_increase_and_structure_sim",
        "gimp",
        &["PIL", "numpy", "skimage"],
    ),
    ("check_slide_orientation_Portrait", "slides", &["pptx"]),
    ("check_structure_sim", "gimp", &["PIL", "numpy", "skimage"]),
    (
        "check_structure_sim_resized",
        "gimp",
        &["PIL", "numpy", "skimage"],
    ),
    ("check_tabstops", "docs", &["docx"]),
    ("check_text_enlarged", "basic_os", &[]),
    ("check_textbox_on_leftside", "gimp", &["PIL"]),
    ("check_thunderbird_filter", "thunderbird", &[]),
    ("check_thunderbird_folder", "thunderbird", &[]),
    ("check_thunderbird_prefs", "thunderbird", &["openpyxl"]),
    ("check_transition", "slides", &[]),
    ("check_triangle_position", "gimp", &["PIL", "numpy"]),
    // Dispatches on `file_type`; the tasks compare PDFs (see `archive_libraries`).
    ("compare_archive", "chrome", &["fitz", "rapidfuzz"]),
    (
        "compare_audios",
        "vlc",
        &["fastdtw", "librosa", "numpy", "scipy"],
    ),
    ("compare_conference_city_in_order", "table", &["openpyxl"]),
    ("compare_config", "vscode", &[]),
    ("compare_contains_image", "docs", &["docx"]),
    ("compare_csv", "table", &[]),
    ("compare_docx_files", "docs", &["docx", "odf", "rapidfuzz"]),
    ("compare_docx_files_and_ignore_new_lines", "docs", &["docx"]),
    ("compare_docx_images", "docs", &["PIL", "docx"]),
    ("compare_docx_lines", "docs", &["docx"]),
    ("compare_docx_tables", "docs", &["docx"]),
    ("compare_epub", "others", &["lxml"]),
    ("compare_font_names", "docs", &["docx"]),
    ("compare_htmls", "chrome", &["bs4"]),
    ("compare_image_list", "gimp", &["PIL"]),
    ("compare_image_text", "docs", &["PIL", "easyocr", "numpy"]),
    ("compare_images", "vlc", &["PIL", "numpy", "skimage"]),
    (
        "compare_line_spacing",
        "docs",
        &["docx", "odf", "rapidfuzz"],
    ),
    (
        "compare_pdf_images",
        "chrome",
        &["PIL", "fitz", "imagehash"],
    ),
    ("compare_pdfs", "chrome", &["fitz", "rapidfuzz"]),
    ("compare_pptx_files", "slides", &["pptx"]),
    ("compare_python_pure_text", "general", &[]),
    ("compare_references", "docs", &["docx", "rapidfuzz"]),
    ("compare_result_files", "vscode", &[]),
    ("compare_subscript_contains", "docs", &["docx"]),
    (
        "compare_table",
        "table",
        &[
            "formulas",
            "lxml",
            "openpyxl",
            "pandas",
            "rapidfuzz",
            "xmltodict",
        ],
    ),
    ("compare_text_file", "vscode", &[]),
    ("compare_time_in_speedtest_results", "general", &[]),
    ("compare_videos", "vlc", &["PIL", "cv2", "imagehash"]),
    ("compare_zip_files", "vscode", &["PyPDF2"]),
    ("contains_page_break", "docs", &["docx"]),
    ("diff_text_file", "general", &[]),
    (
        "evaluate_colored_words_in_tables",
        "docs",
        &["docx", "odf", "rapidfuzz", "skimage"],
    ),
    (
        "evaluate_presentation_fill_to_rgb_distance",
        "slides",
        &["pptx"],
    ),
    (
        "evaluate_strike_through_last_paragraph",
        "docs",
        &["docx", "odf", "rapidfuzz"],
    ),
    ("exact_match", "general", &[]),
    ("file_contains", "general", &[]),
    ("find_default_font", "docs", &[]),
    ("fuzzy_place_math", "general", &["docx", "rapidfuzz"]),
    ("has_page_numbers_in_footers", "docs", &["docx"]),
    ("is_added_to_steam_cart", "chrome", &[]),
    ("is_cookie_deleted", "chrome", &["tldextract"]),
    ("is_expected_active_tab", "chrome", &["tldextract"]),
    ("is_expected_bookmarks", "chrome", &[]),
    ("is_expected_installed_extensions", "chrome", &[]),
    ("is_expected_search_query", "chrome", &[]),
    ("is_expected_tabs", "chrome", &["tldextract"]),
    ("is_expected_url_pattern_match", "chrome", &[]),
    ("is_extension_installed", "vscode", &[]),
    ("is_first_line_centered", "docs", &["docx"]),
    ("is_in_list", "general", &[]),
    ("is_in_vm_clickboard", "basic_os", &[]),
    ("is_shortcut_on_desktop", "chrome", &[]),
    ("is_utc_0", "basic_os", &[]),
    ("is_vlc_fullscreen", "vlc", &[]),
    ("is_vlc_playing", "vlc", &[]),
    ("is_vlc_recordings_folder", "vlc", &[]),
    ("literal_match", "general", &[]),
    ("run_sqlite3", "general", &[]),
];

/// The module and libraries of the metric `name`.
pub fn lookup(name: &str) -> Option<(&'static str, &'static [&'static str])> {
    METRICS
        .iter()
        .find(|(n, _, _)| *n == name)
        .map(|(_, m, l)| (*m, *l))
}

/// Whether pincer's worker can run the metric `name`; if not, why.
pub fn supported(name: &str) -> Result<(), String> {
    let (_, libs) = lookup(name)
        .ok_or_else(|| format!("desktop-env {DESKTOP_ENV} has no metric named {name}"))?;
    let missing: Vec<&str> = libs
        .iter()
        .copied()
        .filter(|l| NOT_INSTALLED.contains(l))
        .collect();
    match missing.as_slice() {
        [] => Ok(()),
        [l] => Err(format!(
            "needs the library {l}, which pincer's scoring environment does not install"
        )),
        _ => Err(format!(
            "needs the libraries {}, which pincer's scoring environment does not install",
            missing.join(", ")
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_are_known_with_their_libraries() {
        assert_eq!(
            lookup("compare_table"),
            Some((
                "table",
                &[
                    "formulas",
                    "lxml",
                    "openpyxl",
                    "pandas",
                    "rapidfuzz",
                    "xmltodict"
                ][..]
            ))
        );
        assert!(supported("compare_pptx_files").is_ok());
        let e = supported("compare_audios").unwrap_err();
        assert!(e.contains("librosa"), "{e}");
        let e = supported("no_such_metric").unwrap_err();
        assert!(e.contains("no metric named no_such_metric"), "{e}");
        assert_eq!(METRICS.len(), 110);
    }
}
