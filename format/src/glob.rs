//! Glob patterns on function names (`*` any run of bytes, `?` one byte), one language wherever
//! culprit takes them: the runtime's `CULPRIT_INCLUDE` / `CULPRIT_EXCLUDE`, the sampler's uprobe
//! patterns, `culprit report --callers` / `--callees`. Matching allocates nothing (the runtime
//! matches inside the program it traces) and backtracks only to the last `*`, so a pattern
//! with many stars costs at most |pattern| × |name| steps.

/// True when `name` matches `pat` as a whole.
pub fn glob_match(pat: &str, name: &str) -> bool {
    glob_match_bytes(pat.as_bytes(), name.as_bytes())
}

/// [`glob_match`] on bytes (symbol names need not be UTF-8).
pub fn glob_match_bytes(p: &[u8], s: &[u8]) -> bool {
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
        assert!(!glob_match(
            "*a*a*b",
            "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
        ));
        assert!(glob_match_bytes(b"f*\xff", b"foo\xff"));
    }
}
