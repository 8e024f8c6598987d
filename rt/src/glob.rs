//! Glob patterns on function names (`*` any run of characters, `?` one character), for
//! `CULPRIT_INCLUDE` / `CULPRIT_EXCLUDE` (the matching is [`culprit_format::glob`]'s, shared with
//! the sampler and the command line).

pub use culprit_format::glob::glob_match;

/// A comma-separated pattern list: items trimmed, empty items dropped.
pub fn parse_list(s: &str) -> Vec<String> {
    s.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(str::to_string)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists() {
        assert_eq!(parse_list(" a, b*,,c "), vec!["a", "b*", "c"]);
        assert!(parse_list("").is_empty());
    }
}
