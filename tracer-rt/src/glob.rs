//! Glob patterns on function names (`*` any run of characters, `?` one character), for
//! `CULPRIT_INCLUDE` / `CULPRIT_EXCLUDE`.

/// True when `name` matches `pat` as a whole.
pub fn glob_match(pat: &str, name: &str) -> bool {
    let (p, s) = (pat.as_bytes(), name.as_bytes());
    let (mut pi, mut si) = (0usize, 0usize);
    // Where to resume after the last `*`: (pattern index after it, name index it matched to).
    let mut star: Option<(usize, usize)> = None;
    while si < s.len() {
        if pi < p.len() && (p[pi] == b'?' || p[pi] == s[si]) {
            pi += 1;
            si += 1;
        } else if pi < p.len() && p[pi] == b'*' {
            star = Some((pi + 1, si));
            pi += 1;
        } else if let Some((sp, ss)) = star {
            pi = sp;
            si = ss + 1;
            star = Some((sp, ss + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == b'*')
}

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
    fn globs() {
        assert!(glob_match("fib", "fib"));
        assert!(!glob_match("fib", "fibo"));
        assert!(glob_match("fib*", "fibonacci"));
        assert!(glob_match("*_leaf", "tiny_leaf"));
        assert!(glob_match("a*b*c", "axxbyyc"));
        assert!(!glob_match("a*b*c", "axxbyy"));
        assert!(glob_match("f?b", "fib"));
        assert!(glob_match("*", ""));
        assert!(!glob_match("?", ""));
        assert!(glob_match("*a*a*a", "aaaaaaaa"));
    }

    #[test]
    fn lists() {
        assert_eq!(parse_list(" a, b*,,c "), vec!["a", "b*", "c"]);
        assert!(parse_list("").is_empty());
    }
}
