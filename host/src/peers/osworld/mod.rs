//! OSWorld on pincer: its task files imported as pincer tasks (`import`), its file cache in
//! its own layout (`cache`), the pyautogui of its setups as input steps (`pyautogui`), and
//! its end states scored by its own metric code (`metric`).

pub mod cache;
pub mod import;
pub mod metric;
pub mod model;
pub mod pyautogui;
