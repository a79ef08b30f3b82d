//! The README's claims that code can check: its worked example is the example task file, as
//! it is on disk, and that file is a valid task with a valid oracle.

use pincer::eval::functions::Library;
use pincer::eval::graph::Graph;
use std::path::Path;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root")
}

#[test]
fn the_readme_worked_example_is_the_example_file() {
    let readme = std::fs::read_to_string(repo().join("README.md")).expect("README.md");
    let file = "tasks/examples/note-in-mousepad.json";
    let on_disk = std::fs::read_to_string(repo().join(file)).expect("the example file");
    let intro = format!("A worked example, `{file}`:\n\n```json\n");
    let start = readme
        .find(&intro)
        .expect("the worked example in README.md")
        + intro.len();
    let shown = &readme[start..];
    let shown = &shown[..shown.find("```\n").expect("the end of the code block")];
    assert_eq!(
        shown, on_disk,
        "README.md shows a different {file}: copy the file into the README"
    );
    let task = pincer::task::load_file(&repo().join(file)).expect("the example loads");
    Graph::build(&task, &Library::standard()).expect("its graph builds");
    pincer::task::oracle::check(task.oracle.as_deref().expect("an oracle")).expect("its oracle");
}
