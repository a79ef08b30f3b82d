//! OSWorld on pincer: its task files imported as pincer tasks (`import`), its file cache in
//! its own layout (`cache`) and filled from its file host (`fetch`), the pyautogui of its setups as input steps (`pyautogui`), and
//! its end states scored by its own metric code: the table of its metrics (`metric`), the
//! sandboxed worker that runs them (`scorer`) and the `osworld` checkpoint function whose
//! getters fetch what they score (`check`), the UI tree as OSWorld's server writes it
//! (`atspi_xml`).

mod atspi_xml;
pub mod cache;
pub mod check;
pub mod fetch;
pub mod getters;
pub mod import;
pub mod metric;
pub mod model;
pub mod pyautogui;
pub mod scorer;
