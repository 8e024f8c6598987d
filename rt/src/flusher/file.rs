//! The flusher's file: opening it and its `Info` record, committing what was queued, the
//! checkpoint, rotation into new pieces, a file replaced or removed, the end record, a new node.

use super::*;

impl Flusher {
    /// Creates the file with its `Info` and `Object` records, and refreshes `node.info`.
    pub fn open_file(&mut self) -> Result<(), WriteError> {
        control::progress();
        let pid = std::process::id();
        let start_ns = self.start_ns;
        let piece = self.piece;
        let first = self.rotated.as_ref().map(|(first, _)| first.as_str());
        let (mut out, dir) = TraceOut::create(
            &self.cfg.root,
            &self.node,
            |seq| match first {
                // A later piece keeps the writer's identity in its name (`rotation`); a name
                // taken (never, short of a clash of pid and start) moves on to the next number.
                Some(first) if piece > 0 => rotation::piece_name(first, piece + seq),
                _ => names::trace_file_name(pid, start_ns, seq),
            },
            self.piece_start_ns,
            pid,
        )?;
        let mut buf = RecordBuf::new();
        self.info_record(&mut buf, pid);
        self.objects.reset();
        let ch = self.objects.refresh();
        for o in &ch.added {
            object_record(&mut buf, o, 0);
        }
        out.commit(buf.as_bytes())?;
        CURRENT_FILE.set(out.name().to_string());
        CURRENT_NODE.set(self.node.clone());
        self.out = Some(out);
        if matches!(self.origin, Origin::Forked(_)) && self.piece == 0 {
            // The parent described the node already (a child starts in its node): thousands
            // of children would otherwise each rewrite node.info at once.
            return Ok(());
        }
        let cfg = self.cfg;
        let _ = dir.update_node_info(|info| {
            let mut set = |k: &str, v: String| {
                info.pairs.retain(|(key, _)| key != k);
                info.pairs.push((k.to_string(), v));
            };
            set("host", procfs::host_name());
            set("kernel", procfs::kernel_release());
            set("boot_id", procfs::boot_id());
            set("clocksource", procinfo::clocksource());
            set("trace_clock", clock::source_name().to_string());
            set("trace_interval_ns", cfg.interval_ns.to_string());
        });
        Ok(())
    }

    fn info_record(&self, buf: &mut RecordBuf, pid: u32) {
        let mut pairs: Vec<(&str, String)> = vec![
            (info_keys::NODE, self.node.clone()),
            (info_keys::HOST, procfs::host_name()),
            (info_keys::PID, pid.to_string()),
            (
                info_keys::PPID,
                std::os::unix::process::parent_id().to_string(),
            ),
            (info_keys::PROGRAM, procfs::program(Proc::This)),
            (info_keys::EXE, procfs::exe(Proc::This)),
            (info_keys::CMDLINE, procfs::cmdline(Proc::This)),
            (
                info_keys::PROC_START_NS,
                procfs::start_ns(Proc::This).unwrap_or(0).to_string(),
            ),
            (info_keys::INTERVAL_NS, self.cfg.interval_ns.to_string()),
            (info_keys::CLOCK, clock::source_name().to_string()),
            (
                info_keys::WRITER_VERSION,
                format!("libculprit_rt {}", env!("CARGO_PKG_VERSION")),
            ),
            (info_keys::INCLUDE, self.cfg.include_raw.clone()),
            (info_keys::EXCLUDE, self.cfg.exclude_raw.clone()),
            (info_keys::BUDGET, self.cfg.budget_raw.clone()),
            (
                info_keys::CALL_COST_PS,
                ((self.call.traced_ns * 1000.0) as u64).to_string(),
            ),
            (info_keys::DEMOTE, self.cfg.demote_raw.clone()),
            (info_keys::KERNEL, procfs::kernel_release()),
            (info_keys::BOOT_ID, procfs::boot_id()),
        ];
        if let (Some((_, prev)), true) = (&self.rotated, self.piece > 0) {
            // A later piece: the process facts above are the same; it continues the previous
            // piece (the origin was recorded in the first).
            pairs.push((info_keys::CONTINUES, prev.clone()));
            pairs.push((info_keys::PIECE, self.piece.to_string()));
            buf.info(pairs.iter().map(|(k, v)| (*k, v.as_str())));
            return;
        }
        match &self.origin {
            Origin::Start => {}
            Origin::Forked(f) => pairs.push((info_keys::FORKED_FROM, f.clone())),
            Origin::Exec(f) => pairs.push((info_keys::EXEC_FROM, f.clone())),
            Origin::Renamed(f) => pairs.push(("node_changed_from", f.clone())),
            Origin::Replaced(f) => pairs.push((info_keys::CONTINUES, f.clone())),
        }
        buf.info(pairs.iter().map(|(k, v)| (*k, v.as_str())));
    }

    /// Creates the file if this process has none yet (a forked child creates it at its first
    /// write). False when there is nothing to write to.
    pub(super) fn ensure_open(&mut self) -> bool {
        if self.failed {
            return false;
        }
        if self.out.is_none() {
            if let Err(e) = self.open_file() {
                self.open_failed(e);
                return false;
            }
        }
        true
    }

    /// No file can be made: a forked child, or a new node, whose directory cannot be written
    /// or is refused. Nothing is printed (see the module docs); the process goes on untraced.
    fn open_failed(&mut self, _e: WriteError) {
        self.failed = true;
        self.queue.clear();
        self.buf.clear();
    }

    /// Notes trouble in the data: an Info record committed with the next records.
    pub(super) fn note(&mut self, now: u64, what: &str) {
        self.buf
            .info([(TROUBLE_KEY, format!("{now}: {what}").as_str())]);
    }

    /// Commits the encoded records (and any kept from failed writes). A file that is gone is
    /// continued in a new one; a failed write keeps the records for the next try.
    pub(super) fn commit(&mut self) {
        control::progress();
        self.queue.extend_from_slice(self.buf.as_bytes());
        self.buf.clear();
        if self.failed {
            self.queue.clear();
            return;
        }
        if self.queue.is_empty() || self.out.is_none() {
            return;
        }
        let now = sys::realtime_ns();
        for _attempt in 0..2 {
            let Some(out) = self.out.as_mut() else { return };
            match out.commit(&self.queue) {
                Ok(()) => {
                    self.queue.clear();
                    if let Some((since, why)) = self.failing.take() {
                        // Written with the next records.
                        self.note(
                            now,
                            &format!(
                                "writes failed from {since} ns on ({why}); the records were \
                                 kept and written late"
                            ),
                        );
                    }
                    return;
                }
                Err(WriteError::Gone(why)) => {
                    let old = self.file_name().unwrap_or_default();
                    if !self.replace_file(now, &why, old) {
                        return;
                    }
                }
                Err(WriteError::Refused(_)) => {
                    self.failed = true;
                    self.queue.clear();
                    return;
                }
                Err(WriteError::Failed(why)) => {
                    self.failing.get_or_insert((now, why));
                    if self.queue.len() > MAX_QUEUE {
                        let n = self.queue.len();
                        self.queue.clear();
                        self.note(
                            now,
                            &format!("{n} bytes of records dropped: writes kept failing"),
                        );
                    }
                    return;
                }
            }
        }
    }

    /// The file is gone (removed, replaced, cut short): start a new one that continues it,
    /// carrying over the records not yet written (except `Object` records: the new file
    /// describes every loaded object again). False when no new file can be made.
    fn replace_file(&mut self, now: u64, why: &str, old: String) -> bool {
        self.out = None;
        let kept = carry_over(&std::mem::take(&mut self.queue));
        self.origin = Origin::Replaced(old);
        self.start_ns = now;
        self.new_history(now);
        if let Err(e) = self.open_file() {
            self.open_failed(e);
            return false;
        }
        self.note(now, &format!("{why}; this file continues it"));
        self.queue = kept;
        self.queue.extend_from_slice(self.buf.as_bytes());
        self.buf.clear();
        true
    }

    /// A new file that starts its own history (a new node, a file replaced under us): its
    /// pieces are numbered from 0 again.
    fn new_history(&mut self, now: u64) {
        self.piece = 0;
        self.piece_start_ns = now;
        self.rotated = None;
    }

    /// At the interval boundary `boundary` (every interval before it written): moves to a new
    /// piece when `CULPRIT_ROTATE` / `CULPRIT_ROTATE_SIZE` say so. The new piece is made first,
    /// with the same safe creation as the first file, its Info record (`continues`, `piece`)
    /// and every loaded object; only then does the old one get its End record
    /// (`end_reason::ROTATED`: continued, not ended). If the new piece cannot be made, the old
    /// file goes on and the failure is noted in it (tried again one rotation period later).
    /// Nothing is rotated while writes fail (records are queued).
    pub(super) fn maybe_rotate(&mut self, boundary: u64) {
        let r = self.cfg.rotate;
        if !r.enabled() || self.failed || !self.queue.is_empty() || boundary < self.rotate_retry_ns
        {
            return;
        }
        let Some(size) = self.out.as_ref().map(TraceOut::size) else {
            return;
        };
        if !r.due(self.piece_start_ns, boundary, size) {
            return;
        }
        let Some(old) = self.out.take() else { return };
        let old_name = old.name().to_string();
        let saved = (self.piece, self.piece_start_ns, self.rotated.clone());
        let first = self
            .rotated
            .as_ref()
            .map_or_else(|| old_name.clone(), |(first, _)| first.clone());
        self.piece += 1;
        self.piece_start_ns = boundary;
        self.rotated = Some((first, old_name.clone()));
        if let Err(e) = self.open_file() {
            (self.piece, self.piece_start_ns, self.rotated) = saved;
            self.out = Some(old);
            CURRENT_FILE.set(old_name);
            let retry = r.every_ns.unwrap_or(0).max(60 * self.cfg.interval_ns);
            self.rotate_retry_ns = boundary.saturating_add(retry);
            self.note(
                sys::realtime_ns(),
                &format!("cannot start a new piece ({e}); this file goes on"),
            );
            return;
        }
        // The new piece's name, read back: `open_file` may have moved to a free number.
        if let Some(name) = self.file_name() {
            self.piece = rotation::split_piece(&name).1.max(self.piece);
        }
        let mut end = RecordBuf::new();
        end.end(boundary, end_reason::ROTATED);
        if let Err(e) = old.finish(end.as_bytes()) {
            // The old piece lacks its end marker: readers see it as a writer that stopped
            // there; the new piece says so.
            self.note(
                sys::realtime_ns(),
                &format!("the previous piece {old_name} could not be marked continued: {e}"),
            );
        }
    }

    /// Writes what the open interval has so far, flagged partial.
    pub(super) fn write_partial(&mut self, now: u64) {
        let t = self.take_open(self.open_start / self.cfg.interval_ns);
        self.write_interval(self.open_start, interval_flags::PARTIAL, &t, 0);
        self.commit();
        self.observed_from = now.max(self.open_start + 1);
    }

    /// Writes the interval in progress as the file's checkpoint, read without taking it,
    /// when it changed since the last one.
    pub(super) fn checkpoint(&mut self) {
        self.take_extras();
        if !self.queue.is_empty() || self.failed {
            return;
        }
        let t = self.peek_open(self.open_start / self.cfg.interval_ns);
        // The budget need not wait for the interval's end.
        let cpu_ns = sys::process_cpu_ns().saturating_sub(self.cpu_at);
        let since = sys::realtime_ns().saturating_sub(self.open_start.max(self.observed_from));
        if since >= CHECKPOINT_NS {
            self.budget_check(&t, cpu_ns, since);
        }
        let sig = t.signature();
        if t.is_empty() || (!self.dirty && self.last_checkpoint == Some(sig)) {
            return;
        }
        if !self.ensure_open() {
            return;
        }
        self.cal.refine();
        let rec = self.encode_interval(
            false,
            self.open_start,
            interval_flags::PARTIAL,
            &t,
            false,
            None,
        );
        let Some(out) = self.out.as_mut() else { return };
        match out.checkpoint(rec.as_bytes()) {
            Ok(()) => {
                self.dirty = false;
                self.last_checkpoint = Some(sig);
            }
            Err(WriteError::Gone(why)) => {
                let now = sys::realtime_ns();
                let old = self.file_name().unwrap_or_default();
                if self.replace_file(now, &why, old) {
                    self.commit();
                }
            }
            Err(WriteError::Refused(_)) => {
                self.failed = true;
                self.queue.clear();
            }
            // Tried again at the next checkpoint.
            Err(WriteError::Failed(_)) => {}
        }
    }

    pub(super) fn end_file(&mut self, now: u64, reason: u32) {
        control::progress();
        if !self.ensure_open() {
            return;
        }
        self.buf.end(now, reason);
        self.queue.extend_from_slice(self.buf.as_bytes());
        self.buf.clear();
        if self.failed {
            return;
        }
        for _attempt in 0..2 {
            let Some(out) = self.out.take() else { return };
            let old = out.name().to_string();
            match out.finish(&self.queue) {
                Ok(()) => {
                    self.queue.clear();
                    return;
                }
                Err(WriteError::Gone(why)) => {
                    // The End record is the last of the queue: the new file gets it too.
                    if !self.replace_file(now, &why, old) {
                        return;
                    }
                }
                Err(_) => return,
            }
        }
    }

    pub(super) fn switch_node(&mut self, now: u64) {
        let Some(node) = NODE_REQUEST.get().cloned() else {
            return;
        };
        if node == self.node {
            return;
        }
        self.write_partial(now);
        let old = self
            .out
            .as_ref()
            .map(|o| format!("{}/{}", self.node, o.name()));
        if self.out.is_some() {
            self.end_file(now, end_reason::DONE);
        }
        self.out = None;
        self.node = node;
        self.start_ns = now;
        self.new_history(now);
        if let Some(old) = old {
            self.origin = Origin::Renamed(old);
        }
        self.failed = false;
        self.queue.clear();
        self.failing = None;
        if let Err(e) = self.open_file() {
            self.open_failed(e);
        }
    }
}

/// The records of `queue` worth carrying into a new file: all but `Object` records (the new
/// file describes the loaded objects itself, with its own ids).
fn carry_over(queue: &[u8]) -> Vec<u8> {
    let mut buf = RecordBuf::new();
    for rec in records_at(queue, 0) {
        match rec {
            Ok(Record::Info(i)) => buf.info(i.pairs.iter().map(|(k, v)| (k.as_str(), v.as_str()))),
            Ok(Record::Interval(iv)) => {
                buf.interval(
                    &IntervalHead {
                        start_ns: iv.start_ns,
                        dur_ns: iv.dur_ns,
                        flags: iv.flags,
                        threads: iv.threads,
                        lost_frames: iv.lost_frames,
                        overflows: iv.overflows,
                        dropped: iv.dropped,
                    },
                    iv.entries(),
                );
            }
            Ok(Record::Unwound(u)) => {
                buf.unwound(&extra_ref(u.interval), u.entries());
            }
            Ok(Record::Edges(e)) => {
                buf.edges(&extra_ref(e.interval), e.dropped, e.entries());
            }
            Ok(Record::Histograms(h)) => {
                let hs: Vec<Histogram> = h.entries().collect();
                buf.histograms(&extra_ref(h.interval), &hs);
            }
            Ok(Record::Layers(l)) => {
                let layers: Vec<_> = l.layers().collect();
                buf.layers(
                    &LayersHead {
                        span_start_ns: l.span_start_ns,
                        span_end_ns: l.span_end_ns,
                        dropped: l.dropped,
                    },
                    &layers,
                    l.events(),
                );
            }
            Ok(Record::End(e)) => buf.end(e.end_ns, e.reason),
            Ok(Record::Wakeups(w)) => buf.wakeups(&extra_ref(w.interval), &w),
            Ok(_) => {}
            Err(_) => break,
        }
    }
    buf.as_bytes().to_vec()
}
