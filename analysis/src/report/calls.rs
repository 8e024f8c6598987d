//! A process's call edges as people read them: the call graph as a tree ([`call_tree`]) and the
//! callers or callees of the functions a pattern names ([`neighbours`]). Edges are caller →
//! callee pairs (as gprof's), so a function's subtree is the same under every caller: the
//! tree expands it once, and marks later occurrences ([`TreeMark::Again`]) and recursion
//! ([`TreeMark::Recursive`]) instead of expanding them.

use std::collections::HashSet;

use culprit_format::glob::glob_match;

use super::types::EdgeRow;

/// Deepest level the tree expands.
pub const MAX_DEPTH: usize = 64;

/// Why a line of the tree is not expanded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TreeMark {
    /// Expanded here (or a leaf).
    None,
    /// Expanded above already; it has callees.
    Again,
    /// A function already on the path from the root.
    Recursive,
}

/// One line of the call tree.
#[derive(Clone, Copy, Debug)]
pub struct TreeLine<'a> {
    /// The call: its callee is the function on this line.
    pub edge: &'a EdgeRow,
    /// Depth below its root (0: a function without a traced caller).
    pub depth: usize,
    /// Why it is not expanded, if it is not.
    pub mark: TreeMark,
}

/// The call tree of `edges`, depth first: from each function without a traced caller (most
/// time first), its callees (most time first), indented by depth.
pub fn call_tree(edges: &[EdgeRow]) -> Vec<TreeLine<'_>> {
    let mut roots: Vec<&EdgeRow> = edges.iter().filter(|e| e.caller.is_none()).collect();
    roots.sort_by_key(|e| std::cmp::Reverse(e.total_ns));
    let mut walk = Walk {
        edges,
        path: Vec::new(),
        expanded: HashSet::new(),
        lines: Vec::new(),
    };
    for r in roots {
        walk.node(r, 0);
    }
    walk.lines
}

struct Walk<'a> {
    edges: &'a [EdgeRow],
    path: Vec<&'a str>,
    expanded: HashSet<&'a str>,
    lines: Vec<TreeLine<'a>>,
}

impl<'a> Walk<'a> {
    fn node(&mut self, e: &'a EdgeRow, depth: usize) {
        let name = e.callee.as_str();
        let recursive = self.path.contains(&name);
        let again = !recursive && self.expanded.contains(name);
        let has_children = self
            .edges
            .iter()
            .any(|x| x.caller.as_deref() == Some(name) && x.callee != name);
        let mark = if recursive {
            TreeMark::Recursive
        } else if again && has_children {
            TreeMark::Again
        } else {
            TreeMark::None
        };
        self.lines.push(TreeLine {
            edge: e,
            depth,
            mark,
        });
        if recursive || again || depth >= MAX_DEPTH {
            return;
        }
        self.expanded.insert(name);
        self.path.push(name);
        let mut children: Vec<&EdgeRow> = self
            .edges
            .iter()
            .filter(|x| x.caller.as_deref() == Some(name))
            .collect();
        children.sort_by_key(|e| std::cmp::Reverse(e.total_ns));
        for c in children {
            self.node(c, depth + 1);
        }
        self.path.pop();
    }
}

/// Which neighbours [`neighbours`] lists.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// The calls of the functions matching.
    Callers,
    /// The calls the functions matching make.
    Callees,
}

/// The calls into (`Callers`) or out of (`Callees`) the functions matching `pattern` (a name,
/// or a glob with `*` and `?`), in the report's order.
pub fn neighbours<'a>(edges: &'a [EdgeRow], pattern: &str, side: Side) -> Vec<&'a EdgeRow> {
    let matches = |f: &str| glob_match(pattern, f);
    edges
        .iter()
        .filter(|e| match side {
            Side::Callers => matches(&e.callee),
            Side::Callees => e.caller.as_deref().is_some_and(matches),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn edge(caller: Option<&str>, callee: &str, total_ns: u64) -> EdgeRow {
        EdgeRow {
            caller: caller.map(str::to_string),
            caller_image: caller.map(|_| "x".to_string()),
            callee: callee.to_string(),
            callee_image: "x".to_string(),
            calls: 1,
            self_ns: 0,
            total_ns,
        }
    }

    #[test]
    fn tree_expands_once_and_stops_at_recursion() {
        let edges = vec![
            edge(None, "main", 100),
            edge(Some("main"), "a", 40),
            edge(Some("main"), "b", 50),
            edge(Some("a"), "c", 10),
            edge(Some("b"), "a", 20),
            edge(Some("c"), "c", 5),
        ];
        let lines: Vec<(usize, &str, TreeMark)> = call_tree(&edges)
            .iter()
            .map(|l| (l.depth, l.edge.callee.as_str(), l.mark))
            .collect();
        assert_eq!(
            lines,
            [
                (0, "main", TreeMark::None),
                (1, "b", TreeMark::None),
                (2, "a", TreeMark::None),
                (3, "c", TreeMark::None),
                (4, "c", TreeMark::Recursive),
                (1, "a", TreeMark::Again),
            ]
        );
    }

    #[test]
    fn neighbours_by_glob() {
        let edges = vec![
            edge(None, "main", 100),
            edge(Some("main"), "read_block", 40),
            edge(Some("read_block"), "memcpy", 10),
        ];
        let callees: Vec<&str> = neighbours(&edges, "read_*", Side::Callees)
            .iter()
            .map(|e| e.callee.as_str())
            .collect();
        assert_eq!(callees, ["memcpy"]);
        let callers: Vec<Option<&str>> = neighbours(&edges, "read_?lock", Side::Callers)
            .iter()
            .map(|e| e.caller.as_deref())
            .collect();
        assert_eq!(callers, [Some("main")]);
        assert!(neighbours(&edges, "nothing", Side::Callers).is_empty());
    }
}
