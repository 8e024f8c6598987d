//! Rotated writers: one traced process's (or sampler run's) pieces joined into one history
//! (`culprit_format::rotation`).
//!
//! Each piece is read as a file of its own at first; once a piece that ended with
//! `end_reason::ROTATED` has its successor (Info `continues` = its file name) loaded, the
//! successor is folded into it: intervals, events and OS metrics appended (a writer rotates at
//! an interval boundary, so nothing is counted twice and nothing is missing), and reading goes
//! on in the successor's file. The joined file keeps the first piece's path, pid, creation time
//! and Info (the identity), so everything downstream — `report`, `diagnose` and `--follow`'s
//! cursors (by path and interval index: folding only appends), the exports — sees one writer.
//! A rotated piece whose successor is not readable yet is shown as open (running), never as
//! ended. A writer killed after making a new piece and before marking the old one continued
//! leaves the old piece open: a rotation successor (piece 1 on) joins it all the same.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use culprit_format::info_keys;
use culprit_format::rotation::split_piece;

use super::files::{FileStatus, SampleFile, TraceFile};

/// A writer's file as the joiner sees it.
pub(super) trait Piece: Sized {
    /// The first piece's path (the writer's identity).
    fn first(&self) -> &Path;
    /// Later pieces joined so far.
    fn pieces(&mut self) -> &mut Vec<PathBuf>;
    /// The file read now: the last piece joined, else the first.
    fn current(&self) -> &Path;
    /// The Info value of `key`.
    fn info_value(&self, key: &str) -> Option<&str>;
    /// When the piece read now ended by rotation (its successor not joined yet).
    fn rotated_end(&mut self) -> &mut Option<u64>;
    /// The status of the piece read now.
    fn status(&mut self) -> &mut FileStatus;
    /// Takes `next`'s records (appended) and reading state.
    fn absorb(&mut self, next: Self);
}

fn file_name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The piece number of a file: Info `piece`, else its name's `.r<n>`.
fn piece_number<T: Piece>(f: &T) -> u32 {
    f.info_value(info_keys::PIECE)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| split_piece(&file_name(f.current())).1)
}

/// True when `path` is a piece already joined into one of `files` (read through it).
pub(super) fn joined<T: Piece>(files: &mut [T], path: &Path) -> bool {
    files
        .iter_mut()
        .any(|f| f.first() != path && f.pieces().iter().any(|p| p == path))
}

/// Folds every loaded successor into the file it continues, oldest piece first; a rotated
/// piece still waiting for its successor reads as open.
pub(super) fn join<T: Piece>(files: &mut Vec<T>) {
    let mut slots: Vec<Option<T>> = files.drain(..).map(Some).collect();
    // Which slot holds the file whose current piece has this name.
    let mut by_name: HashMap<String, usize> = slots
        .iter()
        .enumerate()
        .filter_map(|(i, f)| Some((file_name(f.as_ref()?.current()), i)))
        .collect();
    let mut order: Vec<(u32, usize)> = slots
        .iter()
        .enumerate()
        .filter_map(|(i, f)| {
            let f = f.as_ref()?;
            f.info_value(info_keys::CONTINUES)?;
            Some((piece_number(f), i))
        })
        .collect();
    order.sort_unstable();
    for (_, j) in order {
        let Some(prev) = slots[j]
            .as_ref()
            .and_then(|f| f.info_value(info_keys::CONTINUES))
            .map(str::to_string)
        else {
            continue;
        };
        let Some(&i) = by_name.get(&prev) else {
            continue; // its predecessor was pruned, or is not a rotated piece of ours
        };
        if i == j {
            continue;
        }
        // A rotation successor (piece 1 on) of a predecessor without an end marker: the
        // writer makes the new piece first and marks the old one continued only then, so a
        // writer killed in between (or a reader in between) leaves the old piece open. Every
        // interval before the new piece's start is in the old one: they join all the same.
        let rotation_successor = slots[j]
            .as_ref()
            .and_then(|n| n.info_value(info_keys::PIECE))
            .and_then(|v| v.parse::<u32>().ok())
            .is_some_and(|n| n >= 1);
        let ready = slots[i].as_mut().is_some_and(|h| {
            h.rotated_end().is_some() || (rotation_successor && *h.status() == FileStatus::Open)
        });
        if !ready {
            // The continuation of a file replaced under the writer (a new history, piece 0),
            // or of a damaged or ended one: they stay apart.
            continue;
        }
        let Some(next) = slots[j].take() else {
            continue;
        };
        let name = file_name(next.current());
        if let Some(head) = slots[i].as_mut() {
            head.absorb(next);
        }
        by_name.insert(name, i);
    }
    files.extend(slots.into_iter().flatten());
    for f in files.iter_mut() {
        if f.rotated_end().is_some() && *f.status() == FileStatus::Ended {
            *f.status() = FileStatus::Open;
        }
    }
}

/// The accessors of [`Piece`] that both kinds of file have under the same names: their
/// fields `path`, `pieces`, `rotated_end`, `status` and methods `current_path`, `info`.
macro_rules! same_named_fields {
    () => {
        fn first(&self) -> &Path {
            &self.path
        }
        fn pieces(&mut self) -> &mut Vec<PathBuf> {
            &mut self.pieces
        }
        fn current(&self) -> &Path {
            self.current_path()
        }
        fn info_value(&self, key: &str) -> Option<&str> {
            self.info(key)
        }
        fn rotated_end(&mut self) -> &mut Option<u64> {
            &mut self.rotated_end
        }
        fn status(&mut self) -> &mut FileStatus {
            &mut self.status
        }
    };
}

impl Piece for TraceFile {
    same_named_fields!();
    fn absorb(&mut self, mut next: Self) {
        // Records of the pieces between, in order; a provisional checkpoint stays last.
        self.intervals.append(&mut next.intervals);
        self.layers.append(&mut next.layers);
        self.wakeups.append(&mut next.wakeups);
        self.demotions.append(&mut next.demotions);
        // Trouble notes and `continues`/`piece` of the later piece; the identity keys repeat.
        self.info.append(&mut next.info);
        self.pieces.push(next.path);
        self.pieces.append(&mut next.pieces);
        self.end_ns = next.end_ns;
        self.rotated_end = next.rotated_end;
        self.status = next.status;
        self.checkpoint = next.checkpoint;
        self.provisional = next.provisional;
        self.consumed = next.consumed;
        self.objects = next.objects;
        self.addr_cache = next.addr_cache;
        if next.stacks.is_some() {
            self.stacks = next.stacks;
        }
    }
}

impl Piece for SampleFile {
    same_named_fields!();
    fn absorb(&mut self, mut next: Self) {
        self.intervals.append(&mut next.intervals);
        self.events.append(&mut next.events);
        self.os.append(&mut next.os);
        self.layers.append(&mut next.layers);
        self.info.append(&mut next.info);
        self.pieces.push(next.path);
        self.pieces.append(&mut next.pieces);
        self.end_ns = next.end_ns;
        self.rotated_end = next.rotated_end;
        self.status = next.status;
        self.consumed = next.consumed;
        // Each piece has its own string table.
        self.strings = next.strings;
    }
}

#[cfg(test)]
mod tests {
    use super::super::files::{empty_samples, empty_trace, TraceInterval};
    use super::*;

    fn piece(name: &str, continues: Option<&str>, n: u32, starts: &[u64]) -> TraceFile {
        let mut t = empty_trace();
        t.path = PathBuf::from("/d").join(name);
        t.pid = 7;
        t.info.push(("pid".into(), "7".into()));
        if let Some(c) = continues {
            t.info.push((info_keys::CONTINUES.into(), c.into()));
            t.info.push((info_keys::PIECE.into(), n.to_string()));
        }
        t.intervals = starts
            .iter()
            .map(|&s| TraceInterval {
                head: culprit_format::IntervalHead {
                    start_ns: s,
                    dur_ns: 1,
                    threads: 1,
                    ..culprit_format::IntervalHead::default()
                },
                entries: Vec::new(),
                edges: None,
                edge_drops: 0,
                hists: None,
                cost: None,
            })
            .collect();
        t
    }

    fn rotated(mut t: TraceFile) -> TraceFile {
        t.rotated_end = Some(1);
        t.status = FileStatus::Ended;
        t
    }

    #[test]
    fn pieces_fold_into_the_first_in_order() {
        let p0 = rotated(piece("trace-7-1.cul", None, 0, &[0, 1]));
        let p1 = rotated(piece(
            "trace-7-1.r000001.cul",
            Some("trace-7-1.cul"),
            1,
            &[2, 3],
        ));
        let p2 = piece(
            "trace-7-1.r000002.cul",
            Some("trace-7-1.r000001.cul"),
            2,
            &[4],
        );
        // A continuation of a replaced file (no rotation end): stays apart.
        let other = piece("trace-8-5.cul", None, 0, &[0]);
        let replaced = piece("trace-8-9.cul", Some("trace-8-5.cul"), 0, &[1]);
        // Given in any order.
        let mut files = vec![p2, other, p0, replaced, p1];
        join(&mut files);
        assert_eq!(files.len(), 3);
        let head = files
            .iter()
            .find(|t| t.path.ends_with("trace-7-1.cul"))
            .unwrap();
        let starts: Vec<u64> = head.intervals.iter().map(|i| i.start_ns).collect();
        assert_eq!(starts, vec![0, 1, 2, 3, 4]);
        assert_eq!(head.pieces.len(), 2);
        assert!(head.current_path().ends_with("trace-7-1.r000002.cul"));
        assert_eq!(head.status, FileStatus::Open);
        assert!(joined(&mut files, Path::new("/d/trace-7-1.r000001.cul")));
        assert!(!joined(&mut files, Path::new("/d/trace-7-1.cul")));
    }

    #[test]
    fn a_writer_killed_between_its_new_piece_and_the_old_one_s_end_marker_reads_as_one() {
        // The old piece has no end marker (open); the new one says it continues it.
        let p0 = piece("trace-7-1.cul", None, 0, &[0, 1]);
        let p1 = piece("trace-7-1.r000001.cul", Some("trace-7-1.cul"), 1, &[2]);
        let mut files = vec![p1, p0];
        join(&mut files);
        assert_eq!(files.len(), 1);
        let starts: Vec<u64> = files[0].intervals.iter().map(|i| i.start_ns).collect();
        assert_eq!(starts, vec![0, 1, 2]);
        // An ended or damaged predecessor is not continued by rotation: apart.
        for status in [FileStatus::Ended, FileStatus::Damaged("cut".into())] {
            let mut p0 = piece("trace-7-1.cul", None, 0, &[0, 1]);
            p0.status = status;
            let p1 = piece("trace-7-1.r000001.cul", Some("trace-7-1.cul"), 1, &[2]);
            let mut files = vec![p0, p1];
            join(&mut files);
            assert_eq!(files.len(), 2);
        }
    }

    #[test]
    fn a_rotated_piece_without_its_successor_reads_as_open() {
        let mut files = vec![rotated(piece("trace-7-1.cul", None, 0, &[0]))];
        join(&mut files);
        assert_eq!(files[0].status, FileStatus::Open);
        assert_eq!(files[0].end_ns, None);
        // Its successor arrives at a later refresh.
        files.push(piece(
            "trace-7-1.r000001.cul",
            Some("trace-7-1.cul"),
            1,
            &[1],
        ));
        join(&mut files);
        assert_eq!(files.len(), 1);
        assert_eq!(files[0].intervals.len(), 2);
        let mut s: Vec<SampleFile> = vec![empty_samples()];
        join(&mut s);
        assert_eq!(s.len(), 1);
    }
}
