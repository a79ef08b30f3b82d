//! Rebuild when the bundled task suites or templates change: they are embedded with
//! `include_dir!`, which Cargo cannot see on its own.

fn main() {
    println!("cargo:rerun-if-changed=../tasks");
    println!("cargo:rerun-if-changed=../templates");
}
