//! Process tracking: which program each pid runs, its executable mappings, its node.
//!
//! Fed in timestamp order (the caller merges the per-CPU rings) with the kernel's side-band
//! records — COMM (name; with the exec flag, a new program image), MMAP2 (a new executable
//! mapping), FORK and EXIT — and, once, with a snapshot of /proc for the processes that were
//! already running when sampling began. A fork copies the parent's mappings and node (shared
//! copy-on-write, so fork-heavy workloads stay cheap); an exec drops the old mappings.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;

use rustc_hash::FxHashMap;

use crate::nodes::{read_facts, NodeIdx, Nodes, ProcFacts, Scope};

mod proc_files;

pub use proc_files::{parse_maps, ppid, read_proc_info, scan_proc, tasks, MapLine, ProcInfo};

#[cfg(test)]
mod tests;

/// Index of an image in the tracker's image table.
pub type ImageId = u32;
/// Index of a program name in the tracker's program table.
pub type ProgId = u32;

/// Where a sample's instruction pointer was.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Loc {
    /// A kernel address.
    Kernel(u64),
    /// A file offset in an image.
    User {
        /// The image.
        image: ImageId,
        /// Offset in the image file (or in the vDSO).
        offset: u64,
    },
    /// A user address in no known mapping.
    Unknown,
}

/// What kind of image a mapping is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ImageKind {
    /// An ELF file on disk (executable or shared library).
    File,
    /// The kernel's vDSO.
    Vdso,
    /// Anonymous executable memory (JIT code) or another pseudo mapping.
    Anon,
}

/// A binary image.
#[derive(Clone, Debug)]
pub struct Image {
    /// Path as the kernel reported it.
    pub path: Arc<Path>,
    /// Name used in profiles: the file's base name, or `[vdso]`, `[anon]`.
    pub name: Arc<str>,
    /// Kind.
    pub kind: ImageKind,
}

#[derive(Clone, Copy, Debug)]
struct Mapping {
    end: u64,
    pgoff: u64,
    image: ImageId,
}

type Maps = Arc<BTreeMap<u64, Mapping>>;

#[derive(Clone, Debug)]
struct Process {
    prog: ProgId,
    maps: Maps,
    node: NodeIdx,
    in_scope: bool,
    /// Node from a `--node-pid` tree rule (inherited by descendants).
    tree_node: Option<NodeIdx>,
    /// Under the `--pid` scope root.
    tree_scope: bool,
    kthread: bool,
    dead_since: Option<u64>,
    /// Last known cgroups / network namespace (only when node rules or the scope need them).
    facts: Option<ProcFacts>,
}

/// Counters about tracking, for the run summary.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TrackerStats {
    /// Processes created from FORK records.
    pub forks: u64,
    /// exec calls seen.
    pub execs: u64,
    /// Processes read lazily from /proc (first seen in a sample or record).
    pub lazy: u64,
    /// Samples of user addresses outside every known mapping.
    pub unmapped: u64,
}

/// The process table.
#[derive(Debug)]
pub struct Tracker {
    procs: FxHashMap<u32, Process>,
    images: Vec<Image>,
    image_ids: HashMap<(Arc<str>, u64, u64), ImageId>,
    programs: Vec<Arc<str>>,
    prog_ids: HashMap<Arc<str>, ProgId>,
    nodes: Nodes,
    read_proc: bool,
    replaced: Vec<Arc<Path>>,
    stats: TrackerStats,
}

const UNKNOWN_PROGRAM: &str = "[unknown]";

impl Tracker {
    /// An empty table. `read_proc` lets it read /proc for processes it first meets in a sample
    /// (live sampling; off when replaying a recording).
    pub fn new(nodes: Nodes, read_proc: bool) -> Tracker {
        let mut t = Tracker {
            procs: FxHashMap::default(),
            images: Vec::new(),
            image_ids: HashMap::new(),
            programs: Vec::new(),
            prog_ids: HashMap::new(),
            nodes,
            read_proc,
            replaced: Vec::new(),
            stats: TrackerStats::default(),
        };
        // The idle task has no /proc entry and no FORK record.
        let prog = t.program(b"swapper", true);
        let node = t.nodes.fallback();
        let in_scope = matches!(t.nodes.scope(), Scope::System);
        t.procs.insert(
            0,
            Process {
                prog,
                maps: Maps::default(),
                node,
                in_scope,
                tree_node: None,
                tree_scope: false,
                kthread: true,
                dead_since: None,
                facts: None,
            },
        );
        t
    }

    /// The node table.
    pub fn nodes(&self) -> &Nodes {
        &self.nodes
    }

    /// Counters.
    pub fn stats(&self) -> TrackerStats {
        self.stats
    }

    /// Image `id`.
    pub fn image(&self, id: ImageId) -> &Image {
        &self.images[id as usize]
    }

    /// Program name `id`.
    pub fn program_name(&self, id: ProgId) -> &Arc<str> {
        &self.programs[id as usize]
    }

    /// Paths whose file changed (a new inode) since the last call: cached symbols of those
    /// paths are stale.
    pub fn take_replaced(&mut self) -> Vec<Arc<Path>> {
        std::mem::take(&mut self.replaced)
    }

    /// Number of processes in the table.
    pub fn len(&self) -> usize {
        self.procs.len()
    }

    /// True when only the idle task is known.
    pub fn is_empty(&self) -> bool {
        self.procs.len() <= 1
    }

    fn program(&mut self, comm: &[u8], kthread: bool) -> ProgId {
        let mut name = String::from_utf8_lossy(comm);
        // Worker threads are numbered by the kernel in no stable way (kworker/u4:2-events):
        // keep the family name so nodes compare.
        if kthread && name.starts_with("kworker/") {
            name = "kworker".into();
        }
        if let Some(&id) = self.prog_ids.get(name.as_ref()) {
            return id;
        }
        let arc: Arc<str> = Arc::from(name.as_ref());
        let id = self.programs.len() as ProgId;
        self.programs.push(arc.clone());
        self.prog_ids.insert(arc, id);
        id
    }

    fn image_id(&mut self, path: &[u8], dev: u64, ino: u64) -> ImageId {
        let path = String::from_utf8_lossy(path);
        let path = path.strip_suffix(" (deleted)").unwrap_or(&path);
        let key_path: Arc<str> = Arc::from(path);
        if let Some(&id) = self.image_ids.get(&(key_path.clone(), dev, ino)) {
            return id;
        }
        let (kind, name): (ImageKind, Arc<str>) = if path == "[vdso]" {
            (ImageKind::Vdso, Arc::from("[vdso]"))
        } else if path.starts_with('/') && !path.starts_with("//anon") {
            let base = Path::new(path)
                .file_name()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_else(|| path.to_string());
            (ImageKind::File, Arc::from(base.as_str()))
        } else {
            (ImageKind::Anon, Arc::from("[anon]"))
        };
        let p: Arc<Path> = Arc::from(Path::new(path));
        if kind == ImageKind::File
            && self
                .image_ids
                .keys()
                .any(|(k, d, i)| **k == *path && (*d, *i) != (dev, ino) && (*d, *i) != (0, 0))
            && (dev, ino) != (0, 0)
        {
            self.replaced.push(p.clone());
        }
        let id = self.images.len() as ImageId;
        self.images.push(Image {
            path: p,
            name,
            kind,
        });
        self.image_ids.insert((key_path, dev, ino), id);
        id
    }

    fn classify(
        &self,
        tree_node: Option<NodeIdx>,
        facts: Option<&ProcFacts>,
        inherit: NodeIdx,
    ) -> NodeIdx {
        if let Some(n) = tree_node {
            return n;
        }
        match facts {
            Some(f) => self.nodes.by_facts(f).unwrap_or(self.nodes.fallback()),
            None => inherit,
        }
    }

    fn scope_of(&self, tree_scope: bool, facts: Option<&ProcFacts>, inherit: bool) -> bool {
        match self.nodes.scope() {
            Scope::System => true,
            Scope::Pid(_) => tree_scope,
            Scope::Cgroup(_) => facts.map_or(inherit, |f| self.nodes.cgroup_scope_matches(f)),
        }
    }

    fn needs_facts(&self) -> bool {
        self.nodes.needs_cgroups() || self.nodes.needs_netns()
    }

    /// Reads the facts the node rules and the scope need about `pid` from /proc, now (`None`
    /// when none are needed, when replaying, or when the process is gone).
    pub fn read_facts_now(&self, pid: u32) -> Option<ProcFacts> {
        if !self.read_proc || !self.needs_facts() {
            return None;
        }
        read_facts(pid, self.nodes.needs_cgroups(), self.nodes.needs_netns())
    }

    /// Replaces what is known about the processes in `snap` (the /proc snapshot taken right
    /// after the events were enabled). Ancestry decides pid-tree rules and the `--pid` scope.
    pub fn apply_snapshot(&mut self, snap: Vec<ProcInfo>) {
        let ppid: HashMap<u32, u32> = snap.iter().map(|p| (p.pid, p.ppid)).collect();
        let scope_root = match self.nodes.scope() {
            Scope::Pid(p) => Some(*p),
            _ => None,
        };
        let ancestry = |mut pid: u32| -> (Option<NodeIdx>, bool) {
            let mut tree_node = None;
            let mut in_tree = false;
            for _ in 0..4096 {
                if tree_node.is_none() {
                    tree_node = self.nodes.pid_rule(pid);
                }
                if scope_root == Some(pid) {
                    in_tree = true;
                }
                match ppid.get(&pid) {
                    Some(&pp) if pp != 0 && pp != pid => pid = pp,
                    _ => break,
                }
            }
            (tree_node, in_tree)
        };
        let prepared: Vec<(ProcInfo, Option<NodeIdx>, bool)> = snap
            .into_iter()
            .map(|p| {
                let (tn, ts) = ancestry(p.pid);
                (p, tn, ts)
            })
            .collect();
        for (p, tree_node, tree_scope) in prepared {
            self.insert_from_proc(p, tree_node, tree_scope);
        }
    }

    fn insert_from_proc(&mut self, p: ProcInfo, tree_node: Option<NodeIdx>, tree_scope: bool) {
        let kthread = p.pid == 2 || p.ppid == 2;
        let prog = self.program(p.comm.as_bytes(), kthread);
        let mut maps = BTreeMap::new();
        for m in &p.maps {
            let image = self.image_id(m.path.as_bytes(), m.dev, m.ino);
            maps.insert(
                m.start,
                Mapping {
                    end: m.end,
                    pgoff: m.pgoff,
                    image,
                },
            );
        }
        let fallback = self.nodes.fallback();
        let node = self.classify(tree_node, p.facts.as_ref(), fallback);
        let in_scope = self.scope_of(
            tree_scope,
            p.facts.as_ref(),
            !matches!(self.nodes.scope(), Scope::Cgroup(_)),
        );
        self.procs.insert(
            p.pid,
            Process {
                prog,
                maps: Arc::new(maps),
                node,
                in_scope,
                tree_node,
                tree_scope,
                kthread,
                dead_since: None,
                facts: p.facts,
            },
        );
    }

    /// The process `pid`, read from /proc when unknown (live mode), else a placeholder.
    fn get_or_load(&mut self, pid: u32) -> &mut Process {
        if !self.procs.contains_key(&pid) {
            let loaded = if self.read_proc {
                read_proc_info(
                    pid,
                    self.needs_facts()
                        .then_some((self.nodes.needs_cgroups(), self.nodes.needs_netns())),
                )
            } else {
                None
            };
            match loaded {
                Some(info) => {
                    self.stats.lazy += 1;
                    // Its ancestry is unknown to us unless the parent is in the table.
                    let parent = self.procs.get(&info.ppid);
                    let tree_node = self
                        .nodes
                        .pid_rule(pid)
                        .or(parent.and_then(|p| p.tree_node));
                    let tree_scope = matches!(self.nodes.scope(), Scope::Pid(r) if *r == pid)
                        || parent.is_some_and(|p| p.tree_scope);
                    self.insert_from_proc(info, tree_node, tree_scope);
                }
                None => {
                    let prog = self.program(UNKNOWN_PROGRAM.as_bytes(), false);
                    let node = self.nodes.fallback();
                    let in_scope = matches!(self.nodes.scope(), Scope::System);
                    self.procs.insert(
                        pid,
                        Process {
                            prog,
                            maps: Maps::default(),
                            node,
                            in_scope,
                            tree_node: None,
                            tree_scope: false,
                            kthread: false,
                            dead_since: None,
                            facts: None,
                        },
                    );
                }
            }
        }
        self.procs.get_mut(&pid).expect("inserted above")
    }

    /// A FORK record: a new process (pid == tid, pid != ppid) copies its parent; a new thread
    /// changes nothing.
    pub fn on_fork(&mut self, pid: u32, ppid: u32, tid: u32) {
        if pid != tid || pid == ppid {
            return;
        }
        self.stats.forks += 1;
        let parent = self.get_or_load(ppid).clone();
        let tree_node = self.nodes.pid_rule(pid).or(parent.tree_node);
        let tree_scope =
            matches!(self.nodes.scope(), Scope::Pid(r) if *r == pid) || parent.tree_scope;
        let node = tree_node.unwrap_or(parent.node);
        let in_scope = match self.nodes.scope() {
            Scope::Pid(_) => tree_scope,
            _ => parent.in_scope,
        };
        self.procs.insert(
            pid,
            Process {
                prog: parent.prog,
                maps: parent.maps.clone(),
                node,
                in_scope,
                tree_node,
                tree_scope,
                kthread: parent.kthread || ppid == 2,
                dead_since: None,
                facts: parent.facts.clone(),
            },
        );
    }

    /// A COMM record. With `exec`, the process runs a new program: old mappings go, and its node
    /// is looked up again (launchers move themselves into a namespace or cgroup, then exec) —
    /// from `facts` read when the record arrived, else from /proc now.
    pub fn on_comm(
        &mut self,
        pid: u32,
        tid: u32,
        comm: &[u8],
        exec: bool,
        facts: Option<ProcFacts>,
    ) {
        if !exec && pid != tid {
            return; // a thread renamed itself; the program keeps the process's name
        }
        let facts = if exec {
            facts.or_else(|| self.read_facts_now(pid))
        } else {
            None
        };
        let kthread = self.get_or_load(pid).kthread;
        let prog = self.program(comm, kthread);
        let p = self.procs.get_mut(&pid).expect("loaded above");
        p.prog = prog;
        if exec {
            self.stats.execs += 1;
            p.maps = Maps::default();
            p.dead_since = None;
            if facts.is_some() {
                p.facts = facts;
            }
            self.reclassify(pid);
        }
    }

    /// A NAMESPACES record: the task's network namespace (at fork, `setns`, `unshare`).
    pub fn on_netns(&mut self, pid: u32, tid: u32, ino: u64) {
        if pid != tid || !self.nodes.needs_netns() {
            return;
        }
        let needs_cgroups = self.nodes.needs_cgroups();
        let read = self.read_facts_now(pid);
        let p = self.get_or_load(pid);
        let f = p.facts.get_or_insert_with(|| read.unwrap_or_default());
        if f.netns == Some(ino) && !needs_cgroups {
            return;
        }
        f.netns = Some(ino);
        self.reclassify(pid);
    }

    /// A pid file named `root` (`--node-pid NODE=FILE`): from now on it and the descendants it
    /// has now (found through /proc's parent links) belong to `node`, and so do those it forks
    /// later.
    pub fn adopt_tree(&mut self, root: u32, node: NodeIdx) {
        self.nodes.add_pid_rule(root, node);
        if !self.read_proc {
            return;
        }
        let parents: Vec<(u32, u32)> = std::fs::read_dir("/proc")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
            .filter_map(|pid| Some((pid, ppid(pid)?)))
            .collect();
        let mut tree = vec![root];
        let mut i = 0;
        while i < tree.len() {
            let p = tree[i];
            tree.extend(parents.iter().filter(|&&(_, pp)| pp == p).map(|&(c, _)| c));
            i += 1;
        }
        for pid in tree {
            self.get_or_load(pid).tree_node = Some(node);
            self.reclassify(pid);
        }
    }

    /// Classifies `pid` again from its current facts.
    fn reclassify(&mut self, pid: u32) {
        let Some(p) = self.procs.get(&pid) else {
            return;
        };
        let node = self.classify(p.tree_node, p.facts.as_ref(), p.node);
        let in_scope = self.scope_of(p.tree_scope, p.facts.as_ref(), p.in_scope);
        let p = self.procs.get_mut(&pid).expect("present");
        p.node = node;
        p.in_scope = in_scope;
    }

    /// An MMAP / MMAP2 record of an executable mapping.
    pub fn on_mmap(
        &mut self,
        pid: u32,
        start: u64,
        len: u64,
        pgoff: u64,
        path: &[u8],
        dev_ino: Option<(u32, u32, u64)>,
    ) {
        let (dev, ino) = dev_ino.map_or((0, 0), |(maj, min, ino)| {
            ((u64::from(maj) << 32) | u64::from(min), ino)
        });
        let image = self.image_id(path, dev, ino);
        let p = self.get_or_load(pid);
        let maps = Arc::make_mut(&mut p.maps);
        insert_mapping(maps, start, start.saturating_add(len), pgoff, image);
    }

    /// An EXIT record. The entry stays until [`Tracker::gc`] (threads of a process whose main
    /// thread exited may still run) or until the pid is reused.
    pub fn on_exit(&mut self, pid: u32, tid: u32, time: u64) {
        if pid == tid {
            if let Some(p) = self.procs.get_mut(&pid) {
                p.dead_since = Some(time);
            }
        }
    }

    /// Forgets processes that exited before `before`.
    pub fn gc(&mut self, before: u64) {
        self.procs
            .retain(|_, p| p.dead_since.is_none_or(|t| t >= before));
    }

    /// Attributes a sample: `None` when the process is outside the scope.
    pub fn attribute(&mut self, pid: u32, ip: u64, kernel: bool) -> Option<(NodeIdx, ProgId, Loc)> {
        let p = self.get_or_load(pid);
        if !p.in_scope {
            return None;
        }
        let (node, prog) = (p.node, p.prog);
        if kernel {
            return Some((node, prog, Loc::Kernel(ip)));
        }
        let hit = p
            .maps
            .range(..=ip)
            .next_back()
            .filter(|(_, m)| ip < m.end)
            .map(|(&start, m)| (m.image, ip - start + m.pgoff));
        let loc = match hit {
            Some((image, offset)) => Loc::User {
                image,
                offset: match self.images[image as usize].kind {
                    ImageKind::Anon => 0,
                    _ => offset,
                },
            },
            None => {
                self.stats.unmapped += 1;
                Loc::Unknown
            }
        };
        Some((node, prog, loc))
    }

    /// The live user-space processes in scope of each node (index: node), for the OS metrics'
    /// per-process view: the same attribution as the samples'.
    pub fn node_pids(&self) -> Vec<Vec<u32>> {
        let mut out = vec![Vec::new(); self.nodes.names().len()];
        for (&pid, p) in &self.procs {
            if pid != 0 && p.in_scope && !p.kthread && p.dead_since.is_none() {
                if let Some(v) = out.get_mut(p.node as usize) {
                    v.push(pid);
                }
            }
        }
        for v in &mut out {
            v.sort_unstable();
        }
        out
    }

    /// The node of process `pid` for kernel events (`None` outside the scope).
    pub fn node_of(&mut self, pid: u32) -> Option<NodeIdx> {
        let p = self.get_or_load(pid);
        p.in_scope.then_some(p.node)
    }
}

/// Inserts a mapping, trimming or removing the mappings it overlaps (a new mmap replaces the
/// old pages).
fn insert_mapping(
    maps: &mut BTreeMap<u64, Mapping>,
    start: u64,
    end: u64,
    pgoff: u64,
    image: ImageId,
) {
    let overlapping: Vec<(u64, Mapping)> = maps
        .range(..end)
        .rev()
        .take_while(|(_, m)| m.end > start)
        .map(|(&s, &m)| (s, m))
        .collect();
    for (s, m) in overlapping {
        maps.remove(&s);
        if s < start {
            maps.insert(s, Mapping { end: start, ..m });
        }
        if m.end > end {
            maps.insert(
                end,
                Mapping {
                    pgoff: m.pgoff + (end - s),
                    ..m
                },
            );
        }
    }
    maps.insert(start, Mapping { end, pgoff, image });
}
