//! The `culprit` command. Everything lives in the library; see `culprit::run`.

fn main() {
    std::process::exit(culprit::run(std::env::args_os()));
}
