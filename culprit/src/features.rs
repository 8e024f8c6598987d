//! The optional parts of `culprit` (its cargo features): which this build has, and the one
//! line a verb or flag whose part was left out says (an error: exit status 2). The flags are
//! the same in every build, so `--help`, the man pages and the completions do not depend on
//! the features; `culprit --version` lists them.

use std::sync::OnceLock;

/// An optional part of `culprit`, named as its cargo feature.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    /// `culprit ship` and `diagnose --follow nats://…` (the NATS client).
    Ship,
    /// `diagnose --requests` (robust PCA).
    Requests,
    /// `export --format parquet`.
    Parquet,
    /// `culprit demo` and `culprit experiment` (the testbed).
    Lab,
}

impl Part {
    /// Every part, in `--version`'s order.
    pub const ALL: [Part; 4] = [Part::Ship, Part::Requests, Part::Parquet, Part::Lab];

    /// The cargo feature.
    pub fn feature(self) -> &'static str {
        match self {
            Part::Ship => "ship",
            Part::Requests => "requests",
            Part::Parquet => "parquet",
            Part::Lab => "lab",
        }
    }

    /// True when this build has it.
    pub fn built(self) -> bool {
        match self {
            Part::Ship => cfg!(feature = "ship"),
            Part::Requests => cfg!(feature = "requests"),
            Part::Parquet => cfg!(feature = "parquet"),
            Part::Lab => cfg!(feature = "lab"),
        }
    }

    /// What a user misses without it.
    fn what(self) -> &'static str {
        match self {
            Part::Ship => "NATS support (`culprit ship`, `culprit diagnose nats://…`)",
            Part::Requests => "`culprit diagnose --requests` (robust PCA)",
            Part::Parquet => "Parquet export (`culprit export --format parquet`)",
            Part::Lab => "the lab (`culprit demo`, `culprit experiment`)",
        }
    }

    /// Where else it is found.
    fn elsewhere(self) -> &'static str {
        match self {
            Part::Lab => "or run `bash scripts/demo`; the Debian package leaves it out",
            _ => "the Debian package has it",
        }
    }
}

/// Ok when this build has `part`; else [`missing`]'s line.
pub fn require(part: Part) -> anyhow::Result<()> {
    if part.built() {
        Ok(())
    } else {
        Err(missing(part))
    }
}

/// The one line that says `part` is not in this build and how to get it.
pub fn missing(part: Part) -> anyhow::Error {
    anyhow::anyhow!(
        "this culprit was built without {}: rebuild with `cargo build --release -p culprit \
         --features {}` ({})",
        part.what(),
        part.feature(),
        part.elsewhere()
    )
}

/// `culprit --version`: the version, then the parts built in (`+`) and left out (`-`), e.g.
/// `features: +ship +requests +parquet -lab`.
pub fn long_version() -> &'static str {
    static TEXT: OnceLock<String> = OnceLock::new();
    TEXT.get_or_init(|| {
        let parts: Vec<String> = Part::ALL
            .iter()
            .map(|p| format!("{}{}", if p.built() { '+' } else { '-' }, p.feature()))
            .collect();
        format!(
            "{}\nfeatures: {}",
            env!("CARGO_PKG_VERSION"),
            parts.join(" ")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each part's line, in a build with and without it: one line, naming the feature that
    /// brings it back; and `--version` says the same of each.
    #[test]
    fn a_part_left_out_says_how_to_get_it() {
        for p in Part::ALL {
            let flag = format!("{}{}", if p.built() { '+' } else { '-' }, p.feature());
            assert!(
                long_version()
                    .lines()
                    .nth(1)
                    .unwrap()
                    .split(' ')
                    .any(|w| w == flag),
                "{p:?}: {}",
                long_version()
            );
            match require(p) {
                Ok(()) => assert!(p.built(), "{p:?}"),
                Err(e) => {
                    assert!(!p.built(), "{p:?}");
                    let line = e.to_string();
                    assert!(!line.contains('\n'), "{line}");
                    assert!(
                        line.starts_with("this culprit was built without ")
                            && line.contains(&format!("--features {}`", p.feature())),
                        "{line}"
                    );
                }
            }
        }
    }
}
