//! `xtask`: build-time tasks of culprit that must not weigh on the `culprit` binary.
//!
//! The man pages and shell completions are generated from the CLI's own clap definition
//! ([`culprit::command`]), so they always match `culprit --help`. They live here rather than
//! behind a hidden `culprit` subcommand to keep the roff and completion generators out of the
//! product binary.
//!
//! ```text
//! cargo run -p xtask -- man DIR           # DIR/culprit.1, DIR/culprit-record.1, …
//! cargo run -p xtask -- completions DIR   # DIR/culprit.bash, DIR/_culprit, DIR/culprit.fish
//! ```

use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _};
use clap_complete::Shell;

fn main() {
    if let Err(e) = run(std::env::args().skip(1).collect()) {
        eprintln!("xtask: error: {e:#}");
        std::process::exit(2);
    }
}

fn run(args: Vec<String>) -> anyhow::Result<()> {
    let (task, dir) = match args.as_slice() {
        [task, dir] => (task.as_str(), PathBuf::from(dir)),
        _ => bail!("usage: xtask man DIR | xtask completions DIR"),
    };
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    match task {
        "man" => man(&dir),
        "completions" => completions(&dir),
        _ => bail!("unknown task {task:?}: expected `man` or `completions`"),
    }
}

/// One page per command: `culprit.1` and `culprit-<verb>.1` for every visible verb. Their
/// version is the plain one: `--version`'s list of the build's features (which the pages'
/// flags do not depend on) is left out.
fn man(dir: &Path) -> anyhow::Result<()> {
    clap_mangen::generate_to(culprit::command().long_version(None), dir)
        .with_context(|| format!("cannot write man pages to {}", dir.display()))?;
    Ok(())
}

/// Completions for bash, zsh and fish, named as each shell's completion directory expects.
fn completions(dir: &Path) -> anyhow::Result<()> {
    let mut cmd = culprit::command();
    for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
        clap_complete::generate_to(shell, &mut cmd, "culprit", dir)
            .with_context(|| format!("cannot write {shell} completions to {}", dir.display()))?;
    }
    Ok(())
}
