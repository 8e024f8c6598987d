//! Names in a data directory: node names, file names, and the node metadata file.

use std::fmt::Write as _;

/// Directory (inside the data root) for samples that belong to no known node. Diagnosis skips
/// every directory whose name starts with `_`.
pub const UNASSIGNED_DIR: &str = "_unassigned";
/// Name of the node metadata file inside a node directory.
pub const NODE_INFO_FILE: &str = "node.info";
/// First line of a node metadata file.
pub const NODE_INFO_MAGIC: &str = "culprit-node 1";
/// Longest node name, in bytes.
pub const MAX_NODE_NAME: usize = 64;

/// True for a directory name that can be a node: not empty, at most [`MAX_NODE_NAME`] bytes,
/// only `[A-Za-z0-9._-]`, and not starting with `.` or `_`.
pub fn is_node_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NODE_NAME
        && !name.starts_with(['.', '_'])
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// Turns any string into a valid node name: other bytes become `_`, a leading `.`/`_` becomes
/// `n`, the result is cut to [`MAX_NODE_NAME`] bytes; an empty input becomes `node`.
pub fn sanitize_node_name(raw: &str) -> String {
    let mut s: String = raw
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .take(MAX_NODE_NAME)
        .collect();
    if s.is_empty() {
        s.push_str("node");
    }
    if s.starts_with(['.', '_']) {
        s.replace_range(0..1, "n");
    }
    s
}

/// File name of a traced process's profile: `trace-<pid>-<start_ns>.cul`, with `.<seq>` before
/// the extension when `seq > 0` (a name already taken).
pub fn trace_file_name(pid: u32, start_ns: u64, seq: u32) -> String {
    let mut s = format!("trace-{pid}-{start_ns}");
    if seq > 0 {
        let _ = write!(s, ".{seq}");
    }
    s.push_str(".cul");
    s
}

/// File name of a sampler run's profile for one node: `samples-<start_ns>.cul` (`.<seq>` as in
/// [`trace_file_name`]).
pub fn samples_file_name(start_ns: u64, seq: u32) -> String {
    let mut s = format!("samples-{start_ns}");
    if seq > 0 {
        let _ = write!(s, ".{seq}");
    }
    s.push_str(".cul");
    s
}

/// The node metadata file (`node.info`): `key=value` lines after a [`NODE_INFO_MAGIC`] line.
/// Writers replace it atomically (write a temporary file, rename); the last writer wins, so
/// it holds facts about the node that any writer knows equally (host, kernel, clock source).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeInfo {
    /// The pairs, in order.
    pub pairs: Vec<(String, String)>,
}

impl NodeInfo {
    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.pairs
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// The file's text.
    pub fn to_text(&self) -> String {
        let mut s = String::from(NODE_INFO_MAGIC);
        s.push('\n');
        for (k, v) in &self.pairs {
            let v = v.replace(['\n', '\r'], " ");
            let _ = writeln!(s, "{k}={v}");
        }
        s
    }

    /// Parses the file's text; `None` if it is not a node metadata file.
    pub fn parse(text: &str) -> Option<Self> {
        let mut lines = text.lines();
        let first = lines.next()?;
        if !first.starts_with("culprit-node ") {
            return None;
        }
        let pairs = lines
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Some(NodeInfo { pairs })
    }
}

/// What a file name in a node directory is, judging by its name alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DataFileName {
    /// `trace-<pid>-<start_ns>[.<seq>][.r<piece>].cul`.
    Trace {
        /// Process id.
        pid: u32,
        /// Runtime start, wall-clock ns.
        start_ns: u64,
    },
    /// `samples-<start_ns>[.<seq>][.r<piece>].cul`.
    Samples {
        /// Sampler start, wall-clock ns.
        start_ns: u64,
    },
}

/// True for a culprit data file's path (its name is one [`parse_data_file_name`] knows).
pub fn is_data_file(p: &std::path::Path) -> bool {
    p.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| parse_data_file_name(n).is_some())
}

/// True for one node's directory: it holds a [`NODE_INFO_FILE`] or a data file. A data root,
/// which holds node directories, is not one.
pub fn dir_has_data(dir: &std::path::Path) -> bool {
    dir.join(NODE_INFO_FILE).is_file()
        || std::fs::read_dir(dir)
            .map(|rd| rd.flatten().any(|e| is_data_file(&e.path())))
            .unwrap_or(false)
}

/// Classifies a file name; `None` for files that are not culprit data files.
pub fn parse_data_file_name(name: &str) -> Option<DataFileName> {
    let stem = name.strip_suffix(".cul")?;
    // A rotated piece (`.r<n>`, see `rotation`) belongs to the same writer.
    let stem = match stem.rsplit_once(".r") {
        Some((s, n)) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => s,
        _ => stem,
    };
    let stem = match stem.rsplit_once('.') {
        Some((s, seq)) if seq.bytes().all(|b| b.is_ascii_digit()) => s,
        _ => stem,
    };
    if let Some(rest) = stem.strip_prefix("trace-") {
        let (pid, start) = rest.split_once('-')?;
        return Some(DataFileName::Trace {
            pid: pid.parse().ok()?,
            start_ns: start.parse().ok()?,
        });
    }
    if let Some(rest) = stem.strip_prefix("samples-") {
        return Some(DataFileName::Samples {
            start_ns: rest.parse().ok()?,
        });
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_names() {
        assert!(is_node_name("io-server3"));
        assert!(is_node_name("n1.example.org"));
        assert!(!is_node_name(""));
        assert!(!is_node_name("_unassigned"));
        assert!(!is_node_name(".hidden"));
        assert!(!is_node_name("a/b"));
        assert_eq!(sanitize_node_name("a/b c"), "a_b_c");
        assert_eq!(sanitize_node_name("_x"), "nx");
        assert_eq!(sanitize_node_name(""), "node");
        assert!(is_node_name(&sanitize_node_name(&"é".repeat(100))));
    }

    #[test]
    fn file_names_round_trip() {
        let n = trace_file_name(42, 1_700_000_000_123_456_789, 0);
        assert_eq!(n, "trace-42-1700000000123456789.cul");
        assert_eq!(
            parse_data_file_name(&n),
            Some(DataFileName::Trace {
                pid: 42,
                start_ns: 1_700_000_000_123_456_789
            })
        );
        let n = trace_file_name(42, 7, 2);
        assert_eq!(
            parse_data_file_name(&n),
            Some(DataFileName::Trace {
                pid: 42,
                start_ns: 7
            })
        );
        let n = samples_file_name(9, 0);
        assert_eq!(
            parse_data_file_name(&n),
            Some(DataFileName::Samples { start_ns: 9 })
        );
        assert_eq!(
            parse_data_file_name("samples-9.r000002.cul"),
            Some(DataFileName::Samples { start_ns: 9 })
        );
        assert_eq!(parse_data_file_name("node.info"), None);
        assert_eq!(parse_data_file_name("trace-x-1.cul"), None);
    }

    #[test]
    fn node_info_round_trip() {
        let info = NodeInfo {
            pairs: vec![
                ("host".into(), "h1".into()),
                ("kernel".into(), "6.1".into()),
            ],
        };
        let back = NodeInfo::parse(&info.to_text()).unwrap();
        assert_eq!(back, info);
        assert_eq!(back.get("host"), Some("h1"));
        assert_eq!(NodeInfo::parse("garbage"), None);
    }
}
