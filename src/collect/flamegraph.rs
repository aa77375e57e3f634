//! Flame graph (`--flamegraph`): one self-contained HTML page, its call
//! trees embedded as compact JSON and drawn on a canvas by a small script
//! of our own (`flamegraph.js`, `flamegraph.css`), as the reference writes
//! one self-contained HTML file.
//!
//! * The page: click a box to zoom (its callers stay, full width), Escape
//!   or "Reset" to zoom out; a search box (regular expression or text) that
//!   highlights matches and says what share of the samples they hold;
//!   tooltips with samples, share, self samples, file and line, and the
//!   GIL, CPU and exception shares when the run recorded them; the call
//!   tree or the inverted one (the functions that ran at the roots, their
//!   callers stacked on them); flame (root at the bottom) or icicle (root
//!   at the top), the graph in its own pane that opens (and stays, when
//!   the view, zoom or thread changes its height) scrolled to the root, so
//!   the widest boxes are on the first screen however deep the stacks; labels by file path or module name; a thread filter
//!   (threads by name when known, else by id; all threads by default); a
//!   sidebar with the run's summary (samples, duration, rate, error rate,
//!   missed samples, mode, and how many samples were taken during
//!   interpreter shutdown and are not shown), GIL held/waiting/released, on-CPU, garbage
//!   collection and exception shares, and the top functions by self
//!   samples (click one to highlight it). The state can be given in the
//!   address after `#` (`#inverted&icicle&thread=TID&search=RE&labels=module`).
//! * Boxes are merged by function, file and line at the same place in the
//!   tree (frames differing only in column are one box, as in the
//!   reference's tree keyed by `(file, line, func)`); siblings widest
//!   first. Colours follow [`super::tree::classify`]: your code in reds,
//!   the standard library in yellows, installed packages in aquas, `<GC>`
//!   green, `<native>` blue, unreadable frames grey.
//! * A merged profile of several processes (`--subprocesses --merge`)
//!   has a root per process, `python3 app.py (pid 42)`, its stacks above
//!   it (the inverted tree, the functions at its roots, has none).
//! * Samples are counted per distinct stack and thread
//!   ([`super::stacks::StackCounts`]) with the status bits per stack; the
//!   trees are the shared [`super::tree::CallTree`], one series per thread.
//! * With opcodes ([`FlamegraphCollector::with_opcodes`]), each box's
//!   tooltip lists the instructions its frame was at (every thread's
//!   samples), specialised forms with their base, like the reference's
//!   per-node `opcodes` counts.
//! * Nodes holding less than 0.01% of the samples are left out (0.05%
//!   above 5,000 nodes, 0.1% above 20,000; the reference drops nodes under
//!   0.1%); their samples stay in their parent's width, and the hot-spot
//!   list is counted from every stack, so it misses nothing.

use std::collections::HashMap;
use std::fmt::Write as _;

use super::merge::Processes;
use super::stacks::{StackCounts, StackId};
use super::tree::{CallTree, FrameKey, IdMap, Keys, key_totals, module_name};
use super::{Collector, Output, RunStats};
use crate::error::Result;
use crate::model::{FrameKind, FrameTable, Sample, StrId, status};
use crate::opcodes::OpTable;

pub(crate) use super::tree::{Kind, classify};

/// The page's title.
pub const TITLE: &str = "tachyon flame graph";

/// Per (thread, stack): samples holding the GIL, waiting for it, on a
/// CPU, with a known CPU state, and handling an exception.
type StatusCounts = [u64; 5];

/// Per (node, opcode): the samples whose frame at that node was at that
/// instruction.
pub(super) type OpCounts = IdMap<(u32, u8), u64>;

/// A rendered tree: the call tree, each node's samples over all threads,
/// its status counts per (node, thread) and its opcode counts.
type Tree = (
    CallTree,
    Vec<u64>,
    IdMap<(u32, u32), StatusCounts>,
    OpCounts,
);

/// Counts distinct stacks per thread, with their status bits, and renders
/// them as an HTML flame graph; see the module documentation.
pub struct FlamegraphCollector {
    output: Output,
    counts: StackCounts,
    status: IdMap<(u64, StackId), StatusCounts>,
    /// The last name each thread was seen with.
    names: HashMap<u64, StrId>,
    /// Threads seen with the main-thread flag.
    main_threads: Vec<u64>,
    /// Some sample had a GIL bit (held or requested) / a known CPU state
    /// that was "running": the shares are worth showing.
    saw_gil: bool,
    saw_cpu: bool,
    saw_exception: bool,
    /// Name the frames' opcodes with this table (`--opcodes`).
    opcodes: Option<&'static OpTable>,
    /// The processes of a merged profile.
    processes: Processes,
}

impl FlamegraphCollector {
    /// Show the instructions each box's frame was at, named with `table`.
    pub fn with_opcodes(mut self, table: Option<&'static OpTable>) -> Self {
        self.opcodes = table;
        self
    }

    pub fn new(output: Output) -> Self {
        FlamegraphCollector {
            output,
            counts: StackCounts::new(),
            status: IdMap::default(),
            names: HashMap::new(),
            main_threads: Vec::new(),
            saw_gil: false,
            saw_cpu: false,
            saw_exception: false,
            opcodes: None,
            processes: Processes::default(),
        }
    }

    /// The page and the numbers for the closing message; `None` when
    /// nothing was sampled.
    fn render(&self, frames: &FrameTable, stats: &RunStats) -> Result<Option<(String, Summary)>> {
        if self.counts.is_empty() {
            return Ok(None);
        }
        let threads = self.threads();
        let series: HashMap<u64, u32> = threads
            .iter()
            .enumerate()
            .map(|(i, &(tid, _))| (tid, i as u32))
            .collect();
        let mut keys = Keys::default();
        let trees = [false, true].map(|inverted| self.tree(frames, &mut keys, &series, inverted));

        let mut data = PageData::new(&keys.list);
        // Status columns only when there is something to show.
        let show_status = self.saw_gil || self.saw_cpu || self.saw_exception;
        let mut emitted = String::new();
        for ((tree, all, status, ops), name) in trees.iter().zip(["tree", "inverted"]) {
            let _ = write!(
                emitted,
                ",\"{name}\":{}",
                data.tree(tree, all, show_status.then_some(status), Some(ops))
            );
        }
        if let Some(t) = self.opcodes {
            opnames_json(&mut emitted, t, trees.iter().map(|tree| &tree.3));
        }
        let mut json = String::with_capacity(emitted.len() + 4096);
        json.push_str("{\"kind\":\"flame\"");
        if self.processes.merged() {
            let _ = write!(
                json,
                ",\"processes\":{}",
                trees[0].0.nodes[0].children.len()
            );
        }
        data.stats(&mut json, TITLE, stats, self.counts.total(), threads.len());
        let _ = write!(
            json,
            ",\"status\":{{\"gil\":{},\"cpu\":{},\"exception\":{}}},\"gc\":{:?}",
            self.saw_gil,
            self.saw_cpu,
            self.saw_exception,
            self.gc_per_thread(frames, &series, threads.len())
        );
        self.threads_json(&mut json, frames, &threads);
        self.hot_json(&mut json, frames, &mut data, &series, threads.len());
        json.push_str(&emitted);
        data.finish(&mut json);
        json.push('}');
        let summary = Summary {
            roots: trees[0].0.nodes[0].children.len(),
            samples: self.counts.total(),
            frames: keys.list.len(),
        };
        Ok(Some((page(TITLE, &json), summary)))
    }

    /// Threads and their samples, busiest first: the tree's series.
    fn threads(&self) -> Vec<(u64, u64)> {
        let mut per_thread: HashMap<u64, u64> = HashMap::new();
        for c in self.counts.cells() {
            *per_thread.entry(c.tid).or_default() += c.count;
        }
        let mut threads: Vec<(u64, u64)> = per_thread.into_iter().collect();
        threads.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        threads
    }

    /// The call tree (or, `inverted`, the functions that ran at the roots
    /// with their callers stacked on them), siblings widest first; each
    /// node's samples over all threads; its status counts per thread.
    fn tree(
        &self,
        frames: &FrameTable,
        keys: &mut Keys,
        series: &HashMap<u64, u32>,
        inverted: bool,
    ) -> Tree {
        let mut tree = CallTree::new();
        let ends = if self.processes.merged() && !inverted {
            self.tree_per_process(&mut tree, frames, keys, series)
        } else {
            tree.add_stacks(
                &self.counts,
                keys.mapper(frames, true),
                |t| series[&t],
                inverted,
            )
        };
        let all = tree.totals(&tree.ends(|_| true));
        sort_widest_first(&mut tree, &all, &[], &keys.list);
        let mut status: IdMap<(u32, u32), StatusCounts> = IdMap::default();
        for (cell, &node) in self.counts.cells().iter().zip(&ends) {
            if let Some(st) = self.status.get(&(cell.tid, cell.stack)) {
                let e = status.entry((node, series[&cell.tid])).or_default();
                for (a, b) in e.iter_mut().zip(st) {
                    *a += b;
                }
            }
        }
        let ops = if self.opcodes.is_some() {
            op_counts(&tree, &self.counts, &ends, frames, inverted)
        } else {
            OpCounts::default()
        };
        (tree, all, status, ops)
    }

    /// The call tree of a merged profile: each stack above its process's
    /// root. Returns, per cell of the counts, the node its stack ended at.
    fn tree_per_process(
        &self,
        tree: &mut CallTree,
        frames: &FrameTable,
        keys: &mut Keys,
        series: &HashMap<u64, u32>,
    ) -> Vec<u32> {
        let mut roots: HashMap<Option<u32>, u32> = HashMap::new();
        let mut root_of = |keys: &mut Keys, tid: u64| {
            let pid = self.processes.of_thread(tid);
            *roots.entry(pid).or_insert_with(|| {
                keys.intern(FrameKey {
                    func: match pid {
                        Some(pid) => self.processes.label(pid),
                        None => format!("thread {tid}"),
                    }
                    .into(),
                    file: None,
                    line: 0,
                    kind: Kind::Process,
                })
            })
        };
        let mut path = Vec::new();
        let mut cache: HashMap<u32, u32> = HashMap::new();
        self.counts
            .cells()
            .iter()
            .map(|cell| {
                path.clear();
                path.push(root_of(keys, cell.tid));
                for &f in self.counts.stack(cell.stack).iter().rev() {
                    let k = *cache.entry(f).or_insert_with(|| keys.of(frames, f, true));
                    path.push(k);
                }
                tree.add(path.iter().copied(), series[&cell.tid], cell.count)
            })
            .collect()
    }

    /// Per thread, the samples in garbage collection (a `<GC>` frame on
    /// the stack).
    fn gc_per_thread(
        &self,
        frames: &FrameTable,
        series: &HashMap<u64, u32>,
        threads: usize,
    ) -> Vec<u64> {
        let mut gc = vec![0u64; threads];
        for c in self.counts.cells() {
            if self
                .counts
                .stack(c.stack)
                .iter()
                .any(|&f| frames.frame(f).kind == FrameKind::Gc)
            {
                gc[series[&c.tid] as usize] += c.count;
            }
        }
        gc
    }

    /// `,"threads":[[tid,name|null,main,samples],..]`.
    fn threads_json(&self, json: &mut String, frames: &FrameTable, threads: &[(u64, u64)]) {
        json.push_str(",\"threads\":[");
        for (i, &(tid, n)) in threads.iter().enumerate() {
            if i > 0 {
                json.push(',');
            }
            let known = match self.names.get(&tid) {
                Some(&s) if (s as usize) < frames.strings().len() => Some(frames.str(s)),
                _ => None,
            };
            // Merged, every process has its MainThread: say whose.
            let name = match (known, self.processes.of_thread(tid)) {
                (Some(n), Some(pid)) => json_str(&format!("{n}, pid {pid}")),
                (None, Some(pid)) => json_str(&format!("pid {pid}")),
                (Some(n), None) => json_str(n),
                (None, None) => "null".into(),
            };
            let main = u8::from(self.main_threads.contains(&tid));
            let _ = write!(json, "[{tid},{name},{main},{n}]");
        }
        json.push(']');
    }

    /// `,"hot":[all, thread 0, ..]`, each a list of
    /// `[func,file,module,kind,self,total]`: the top functions (lines
    /// merged, as a person asks "which function", and a function's lines
    /// are often many boxes) by self samples, counted from every stack.
    fn hot_json(
        &self,
        json: &mut String,
        frames: &FrameTable,
        data: &mut PageData<'_>,
        series: &HashMap<u64, u32>,
        threads: usize,
    ) {
        let mut functions = Keys::default();
        let hot = key_totals(&self.counts, functions.mapper(frames, false), |t| {
            series[&t]
        });
        let mut lists: Vec<Vec<(u32, u64, u64)>> = vec![Vec::new(); threads + 1];
        let mut overall: HashMap<u32, (u64, u64)> = HashMap::new();
        for (&(s, k), &(own, cum)) in &hot {
            lists[s as usize + 1].push((k, own, cum));
            let e = overall.entry(k).or_default();
            e.0 += own;
            e.1 += cum;
        }
        lists[0] = overall.into_iter().map(|(k, (a, b))| (k, a, b)).collect();
        json.push_str(",\"hot\":[");
        for (i, l) in lists.iter_mut().enumerate() {
            if i > 0 {
                json.push(',');
            }
            l.retain(|x| x.1 > 0);
            l.sort_unstable_by(|a, b| {
                b.1.cmp(&a.1)
                    .then(b.2.cmp(&a.2))
                    .then_with(|| functions.list[a.0 as usize].cmp(&functions.list[b.0 as usize]))
            });
            l.truncate(if i == 0 { HOT_ALL } else { HOT_THREAD });
            json.push('[');
            for (j, &(k, own, cum)) in l.iter().enumerate() {
                let f = data.function(&functions.list[k as usize]);
                let _ = write!(json, "{}[{f},{own},{cum}]", if j > 0 { "," } else { "" });
            }
            json.push(']');
        }
        json.push(']');
    }
}

/// Per (node, opcode) of `tree`, the samples whose frame at that node was
/// at that instruction: each stack of `counts` walked from the node it
/// ended at (`ends`, as [`CallTree::add_stacks`] gave them, one node per
/// frame) towards the root. Only the stacks of `counts` count, whatever
/// else the tree holds.
pub(super) fn op_counts(
    tree: &CallTree,
    counts: &StackCounts,
    ends: &[u32],
    frames: &FrameTable,
    inverted: bool,
) -> OpCounts {
    let mut ops = OpCounts::default();
    for (cell, &end) in counts.cells().iter().zip(ends) {
        let stack = counts.stack(cell.stack);
        let mut node = end;
        // Non-inverted, the end is the leaf (the stack's first frame);
        // inverted, it is the outermost frame.
        let n = stack.len();
        for i in 0..n {
            if node == 0 {
                break;
            }
            let f = stack[if inverted { n - 1 - i } else { i }];
            if let Some(op) = frames.frame(f).opcode {
                *ops.entry((node, op)).or_default() += cell.count;
            }
            node = tree.nodes[node as usize].parent;
        }
    }
    ops
}

/// `,"opnames":{"OP":"NAME (BASE)",..}`: the names, from `table`, of the
/// opcodes the trees' `ops` hold, for the tooltips.
pub(super) fn opnames_json<'a>(
    json: &mut String,
    table: &OpTable,
    ops: impl IntoIterator<Item = &'a OpCounts>,
) {
    let mut used = [false; 256];
    for o in ops {
        for &(_, op) in o.keys() {
            used[op as usize] = true;
        }
    }
    json.push_str(",\"opnames\":{");
    let mut first = true;
    for op in (0..=255u8).filter(|&op| used[op as usize]) {
        let sep = if first { "" } else { "," };
        let _ = write!(json, "{sep}\"{op}\":{}", json_str(&table.format(op)));
        first = false;
    }
    json.push('}');
}

/// Hot spots listed for all threads, and for each thread.
const HOT_ALL: usize = 20;
const HOT_THREAD: usize = 10;

/// Order siblings widest first by `main`, then by `second` (when given),
/// then by what they stand for, so the page is the same however the
/// samples came in.
pub(super) fn sort_widest_first(
    tree: &mut CallTree,
    main: &[u64],
    second: &[u64],
    keys: &[FrameKey],
) {
    let node_key: Vec<u32> = tree.nodes.iter().map(|n| n.key).collect();
    let key = |n: u32| keys.get(node_key[n as usize] as usize);
    tree.sort_children(|a, b| {
        let (a, b) = (a as usize, b as usize);
        main[b]
            .cmp(&main[a])
            .then_with(|| match (second.get(b), second.get(a)) {
                (Some(x), Some(y)) => x.cmp(y),
                _ => std::cmp::Ordering::Equal,
            })
            .then_with(|| key(a as u32).cmp(&key(b as u32)))
    });
}

/// The nodes of a call tree a page shows: those holding at least the
/// threshold's share of the samples (and more than nothing).
struct Kept {
    /// The threshold, as a share of the root's samples.
    share: f64,
    /// The kept nodes (index, depth), in depth-first order.
    pre: Vec<(u32, u32)>,
    /// Each node's place among the kept, `u32::MAX` for one left out.
    out_idx: Vec<u32>,
    /// Each node's nearest kept ancestor (or itself): where its samples
    /// are counted.
    dest: Vec<u32>,
}

/// A kept node's samples in one series: its own, those of the nodes left
/// out below it (hidden), then with statuses the GIL, wait, CPU, known and
/// exception counts.
type Ends = [u64; 7];

impl Kept {
    fn select(tree: &CallTree, totals: &[u64]) -> Kept {
        let share = threshold(tree.nodes.len());
        let min = ((totals[0] as f64 * share).ceil() as u64).max(1);
        let pre = tree.preorder(|n| totals[n as usize] >= min);
        let mut out_idx = vec![u32::MAX; tree.nodes.len()];
        for (k, &(i, _)) in pre.iter().enumerate() {
            out_idx[i as usize] = k as u32;
        }
        // Nearest kept ancestor (or self); parents come first.
        let mut dest = vec![0u32; tree.nodes.len()];
        for i in 1..tree.nodes.len() {
            dest[i] = if out_idx[i] != u32::MAX {
                i as u32
            } else {
                dest[tree.nodes[i].parent as usize]
            };
        }
        Kept {
            share,
            pre,
            out_idx,
            dest,
        }
    }

    /// Every kept node's samples per series, ordered by node and series.
    fn ends(
        &self,
        tree: &CallTree,
        status: Option<&IdMap<(u32, u32), StatusCounts>>,
    ) -> Vec<((u32, u32), Ends)> {
        let mut entries: IdMap<(u32, u32), Ends> = IdMap::default();
        for (i, n) in tree.nodes.iter().enumerate() {
            let d = self.dest[i];
            for &(s, c) in &n.ends {
                let e = entries.entry((self.out_idx[d as usize], s)).or_default();
                e[if d as usize == i { 0 } else { 1 }] += c;
                if let Some(st) = status.and_then(|m| m.get(&(i as u32, s))) {
                    for (a, b) in e[2..].iter_mut().zip(st) {
                        *a += b;
                    }
                }
            }
        }
        let mut entries: Vec<((u32, u32), Ends)> = entries.into_iter().collect();
        entries.sort_unstable_by_key(|e| e.0);
        entries
    }
}

/// `,"w":W,"ends":[node,series,self,hidden(,gil,wait,cpu,known,exception),..]`:
/// `W` numbers to an entry, the statuses only `with_status`.
fn write_ends(json: &mut String, ends: &[((u32, u32), Ends)], with_status: bool) {
    let width = if with_status { 9 } else { 4 };
    let _ = write!(json, ",\"w\":{width},\"ends\":[");
    for (k, ((node, series), v)) in ends.iter().enumerate() {
        let _ = write!(
            json,
            "{}{node},{series},{},{}",
            if k > 0 { "," } else { "" },
            v[0],
            v[1]
        );
        if with_status {
            let _ = write!(json, ",{},{},{},{},{}", v[2], v[3], v[4], v[5], v[6]);
        }
    }
    json.push(']');
}

/// `,"ops":[node,opcode,samples,..]`: the instructions of the kept nodes.
fn write_ops(json: &mut String, ops: &OpCounts, out_idx: &[u32]) {
    let mut kept: Vec<(u32, u8, u64)> = ops
        .iter()
        .filter(|((n, _), _)| out_idx[*n as usize] != u32::MAX)
        .map(|(&(n, op), &c)| (out_idx[n as usize], op, c))
        .collect();
    kept.sort_unstable();
    json.push_str(",\"ops\":[");
    for (k, (n, op, c)) in kept.iter().enumerate() {
        let _ = write!(json, "{}{n},{op},{c}", if k > 0 { "," } else { "" });
    }
    json.push(']');
}

/// The share of all samples under which a node is left out, by how many
/// nodes the tree has.
pub(super) fn threshold(nodes: usize) -> f64 {
    match nodes {
        0..=5_000 => 0.0001,
        5_001..=20_000 => 0.0005,
        _ => 0.001,
    }
}

/// The page's JSON, piece by piece: strings and frames are emitted as the
/// tree and the hot spots refer to them.
pub(super) struct PageData<'k> {
    keys: &'k [FrameKey],
    strings: Vec<String>,
    string_index: HashMap<String, u32>,
    frame_of: Vec<u32>,
    /// `func, file, module, line, kind` per frame, flat; -1 for no file.
    frames: String,
    count: u32,
}

impl<'k> PageData<'k> {
    pub fn new(keys: &'k [FrameKey]) -> Self {
        PageData {
            keys,
            strings: Vec::new(),
            string_index: HashMap::new(),
            frame_of: vec![u32::MAX; keys.len()],
            frames: String::new(),
            count: 0,
        }
    }

    fn string(&mut self, s: &str) -> u32 {
        if let Some(&i) = self.string_index.get(s) {
            return i;
        }
        let i = self.strings.len() as u32;
        self.strings.push(s.to_string());
        self.string_index.insert(s.to_string(), i);
        i
    }

    /// The page's index of key `key`'s frame.
    pub fn frame(&mut self, key: u32) -> u32 {
        let slot = self.frame_of[key as usize];
        if slot != u32::MAX {
            return slot;
        }
        let k = &self.keys[key as usize];
        let (func, file, module) = self.names(k);
        if self.count > 0 {
            self.frames.push(',');
        }
        let _ = write!(
            self.frames,
            "{func},{file},{module},{},{}",
            k.line,
            k.kind.code()
        );
        self.frame_of[key as usize] = self.count;
        self.count += 1;
        self.count - 1
    }

    /// A frame key's function, file and module as string indices (-1 for
    /// no file).
    fn names(&mut self, k: &FrameKey) -> (u32, i64, i64) {
        let func = self.string(if k.func.is_empty() {
            "<unnamed>"
        } else {
            &k.func
        });
        let (file, module) = match &k.file {
            Some(f) => (
                i64::from(self.string(f)),
                i64::from(self.string(&module_name(f))),
            ),
            None => (-1, -1),
        };
        (func, file, module)
    }

    /// A function for the hot-spot list: `func,file,module,kind` (string
    /// indices, -1 for no file).
    pub fn function(&mut self, k: &FrameKey) -> String {
        let (func, file, module) = self.names(k);
        format!("{func},{file},{module},{}", k.kind.code())
    }

    /// `{"threshold":..,"dropped":..,"nodes":[parent,frame,..],"w":W,
    /// "ends":[node,series,self,hidden(,gil,wait,cpu,known,exception),..]}`: the
    /// nodes holding at least the threshold's share of `totals` (and more
    /// than nothing), in depth-first order; the samples of the nodes left
    /// out are their nearest kept ancestor's `hidden` ones. With `ops`,
    /// also `"ops":[node,opcode,samples,..]` for the nodes kept.
    pub fn tree(
        &mut self,
        tree: &CallTree,
        totals: &[u64],
        status: Option<&IdMap<(u32, u32), StatusCounts>>,
        ops: Option<&OpCounts>,
    ) -> String {
        let kept = Kept::select(tree, totals);
        let ends = kept.ends(tree, status);
        let mut json = String::with_capacity(kept.pre.len() * 12 + ends.len() * 16);
        let _ = write!(
            json,
            "{{\"threshold\":{},\"dropped\":{},",
            kept.share * 100.0,
            tree.nodes.len() - kept.pre.len()
        );
        self.write_nodes(&mut json, tree, &kept);
        write_ends(&mut json, &ends, status.is_some());
        if let Some(ops) = ops.filter(|o| !o.is_empty()) {
            write_ops(&mut json, ops, &kept.out_idx);
        }
        json.push('}');
        json
    }

    /// `"nodes":[parent,frame,..]`: the kept nodes, each as its parent's
    /// place among them and its frame (-1, -1 for the root).
    fn write_nodes(&mut self, json: &mut String, tree: &CallTree, kept: &Kept) {
        json.push_str("\"nodes\":[");
        for (k, &(i, _)) in kept.pre.iter().enumerate() {
            let node = &tree.nodes[i as usize];
            let (parent, frame) = if i == 0 {
                (-1, -1)
            } else {
                (
                    i64::from(kept.out_idx[node.parent as usize]),
                    i64::from(self.frame(node.key)),
                )
            };
            let _ = write!(json, "{}{parent},{frame}", if k > 0 { "," } else { "" });
        }
        json.push(']');
    }

    /// `,"title":..,"stats":{..}`: the run's numbers for the sidebar.
    pub fn stats(
        &self,
        json: &mut String,
        title: &str,
        stats: &RunStats,
        samples: u64,
        threads: usize,
    ) {
        let t = stats.duration_s;
        let rate = stats.rate();
        let missed = if stats.interrupted {
            0.0
        } else {
            stats.missed_pct()
        };
        let _ = write!(
            json,
            ",\"title\":{},\"stats\":{{\"samples\":{samples},\"attempts\":{},\"failures\":{},\"duration\":{:.3},\"rate\":{:.2},\"error_pct\":{:.2},\"missed_pct\":{:.2},\"interval_us\":{},\"mode\":\"{}\",\"threads\":{threads},\"shutdown\":{}}}",
            json_str(title),
            stats.attempts,
            stats.failures,
            finite(t),
            finite(rate),
            finite(stats.error_rate_pct()),
            finite(missed),
            stats.interval_us,
            stats.mode.as_str(),
            stats.shutdown_samples,
        );
    }

    /// `,"strings":[..],"frames":[..]`.
    pub fn finish(self, json: &mut String) {
        json.push_str(",\"strings\":[");
        for (i, s) in self.strings.iter().enumerate() {
            if i > 0 {
                json.push(',');
            }
            json.push_str(&json_str(s));
        }
        let _ = write!(json, "],\"frames\":[{}]", self.frames);
    }
}

/// A JSON number must be finite.
fn finite(x: f64) -> f64 {
    if x.is_finite() { x } else { 0.0 }
}

/// A JSON string; `<` is escaped, so no `</script>` (or `<!--`) can end
/// the data early.
pub(super) fn json_str(s: &str) -> String {
    serde_json::to_string(s)
        .unwrap_or_else(|_| "\"\"".into())
        .replace('<', "\\u003c")
}

/// What the closing message reports.
struct Summary {
    roots: usize,
    samples: u64,
    frames: usize,
}

impl Collector for FlamegraphCollector {
    fn process_named(&mut self, pid: u32, command: &str) {
        self.processes.name(pid, command);
    }

    fn collect(&mut self, sample: &Sample, _frames: &FrameTable) {
        self.processes.note(sample);
        for t in &sample.threads {
            if t.status & status::MAIN_THREAD != 0 && !self.main_threads.contains(&t.tid) {
                self.main_threads.push(t.tid);
            }
            if let Some(name) = t.name {
                self.names.insert(t.tid, name);
            }
            if t.frames.is_empty() {
                continue;
            }
            let stack = self.counts.add_stack(t.tid, &t.frames, 1);
            let gil = t.status & status::HAS_GIL != 0;
            let wait = t.status & status::GIL_REQUESTED != 0;
            let known = t.status & status::UNKNOWN == 0;
            let cpu = known && t.status & status::ON_CPU != 0;
            let exception = t.status & status::HAS_EXCEPTION != 0;
            self.saw_gil |= gil || wait;
            self.saw_cpu |= cpu;
            self.saw_exception |= exception;
            let e = self.status.entry((t.tid, stack)).or_default();
            for (a, on) in e.iter_mut().zip([gil, wait, cpu, known, exception]) {
                *a += u64::from(on);
            }
        }
    }

    fn finish(&mut self, frames: &FrameTable, stats: &RunStats) -> Result<()> {
        // With the page on stdout, the messages go to stderr.
        let say = |s: String| match self.output {
            Output::Stdout => crate::errln!("{s}"),
            Output::File(_) => crate::outln!("{s}"),
        };
        let Some((html, sum)) = self.render(frames, stats)? else {
            say("Flamegraph data: 0 root functions, 0 total samples, 0 unique frames".into());
            say("Warning: No functions found in profiling data. \
                 Check if sampling captured any data. No flame graph written."
                .into());
            return Ok(());
        };
        let plural = |n: u64| if n == 1 { "" } else { "s" };
        say(format!(
            "Flamegraph data: {} root function{}, {} total sample{}, {} unique frame{}",
            sum.roots,
            plural(sum.roots as u64),
            sum.samples,
            plural(sum.samples),
            sum.frames,
            plural(sum.frames as u64),
        ));
        self.output.write(html.as_bytes(), "Flamegraph saved to: ")
    }
}

/// HTML's special characters escaped, for text and attribute values.
pub(crate) fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            c => out.push(c),
        }
    }
    out
}

/// The page's script and style.
const SCRIPT: &str = include_str!("flamegraph.js");
const STYLE: &str = include_str!("flamegraph.css");

/// A flame graph page around its JSON `data` (see [`PageData`]); the
/// script draws it.
pub(super) fn page(title: &str, data: &str) -> String {
    format!(
        r#"<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="tachyon {version}">
<title>{title}</title>
<style>{STYLE}</style>
</head>
<body>
<header><h1>{title}</h1><input id="search" type="search" placeholder="Search functions (regular expression)" spellcheck="false"><span id="match"></span><button id="reset" type="button">Reset zoom</button></header>
<aside id="side"></aside>
<main id="main"><div id="crumbs"></div><canvas id="fg"></canvas></main>
<div id="tip" hidden></div>
<script id="data" type="application/json">{data}</script>
<script>{SCRIPT}</script>
</body>
</html>
"#,
        title = escape(title),
        version = env!("CARGO_PKG_VERSION"),
    )
}

/// Reading a page back, for the flame graphs' tests.
#[cfg(test)]
pub(crate) mod testing {
    use serde_json::Value;

    /// The page's embedded data.
    pub fn data(html: &str) -> Value {
        const OPEN: &str = "<script id=\"data\" type=\"application/json\">";
        let start = html.find(OPEN).expect("embedded data") + OPEN.len();
        let len = html[start..].find("</script>").expect("data ends");
        serde_json::from_str(&html[start..start + len]).expect("data is JSON")
    }

    /// The drawn tree, as the page's script reads it.
    pub struct Drawn {
        pub labels: Vec<String>,
        pub parent: Vec<i64>,
        pub kinds: Vec<i64>,
        /// The whole data.
        pub v: Value,
        /// The tree drawn: `tree` or `inverted`.
        pub t: Value,
    }

    fn ints(v: &Value) -> Vec<i64> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_i64().unwrap())
            .collect()
    }

    impl Drawn {
        pub fn of(html: &str) -> Drawn {
            Drawn::tree(html, "tree")
        }

        pub fn tree(html: &str, name: &str) -> Drawn {
            let v = data(html);
            let t = v[name].clone();
            let s: Vec<String> = v["strings"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_str().unwrap().to_string())
                .collect();
            let fr = ints(&v["frames"]);
            let nodes = ints(&t["nodes"]);
            let (mut labels, mut parent, mut kinds) = (Vec::new(), Vec::new(), Vec::new());
            for n in nodes.chunks(2) {
                parent.push(n[0]);
                if n[1] < 0 {
                    labels.push("all".into());
                    kinds.push(-1);
                    continue;
                }
                let f = &fr[n[1] as usize * 5..][..5];
                let func = &s[f[0] as usize];
                labels.push(match (f[1], f[3]) {
                    (-1, _) => func.clone(),
                    (file, 0) => format!("{func} ({})", s[file as usize]),
                    (file, line) => format!("{func} ({}:{line})", s[file as usize]),
                });
                kinds.push(f[4]);
            }
            Drawn {
                labels,
                parent,
                kinds,
                v,
                t,
            }
        }

        /// The node labelled `label`.
        pub fn node(&self, label: &str) -> usize {
            self.labels
                .iter()
                .position(|l| l == label)
                .unwrap_or_else(|| panic!("no {label} in {:?}", self.labels))
        }

        /// Per node: (subtree samples, own samples) of the series `keep`
        /// accepts; hidden samples count in the subtree only.
        pub fn totals(&self, keep: impl Fn(i64) -> bool) -> Vec<(u64, u64)> {
            let w = self.t["w"].as_u64().unwrap() as usize;
            let ends = ints(&self.t["ends"]);
            let mut t = vec![(0u64, 0u64); self.labels.len()];
            for e in ends.chunks(w) {
                if keep(e[1]) {
                    t[e[0] as usize].0 += (e[2] + e[3]) as u64;
                    t[e[0] as usize].1 += e[2] as u64;
                }
            }
            for i in (1..t.len()).rev() {
                let p = self.parent[i] as usize;
                t[p].0 += t[i].0;
            }
            t
        }

        /// The ends entries of node `n`, without node number.
        pub fn ends_of(&self, n: usize) -> Vec<Vec<i64>> {
            let w = self.t["w"].as_u64().unwrap() as usize;
            ints(&self.t["ends"])
                .chunks(w)
                .filter(|e| e[0] as usize == n)
                .map(|e| e[1..].to_vec())
                .collect()
        }

        /// A hot-spot list: (function, file or "", self, total).
        pub fn hot(&self, list: usize) -> Vec<(String, String, u64, u64)> {
            let s = self.v["strings"].as_array().unwrap();
            self.v["hot"][list]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| {
                    let e = ints(e);
                    let file = if e[1] < 0 {
                        String::new()
                    } else {
                        s[e[1] as usize].as_str().unwrap().to_string()
                    };
                    (
                        s[e[0] as usize].as_str().unwrap().to_string(),
                        file,
                        e[4] as u64,
                        e[5] as u64,
                    )
                })
                .collect()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::testing::{Drawn, data};
    use super::*;
    use crate::collect::scenarios::py;
    use crate::model::{Frame, FrameKind, Mode, ThreadSample};

    /// A sample of one thread; `frames` root first.
    fn sample(tid: u64, root_first: &[u32]) -> Sample {
        Sample {
            pid: None,
            timestamp_us: 0,
            threads: vec![ThreadSample {
                tid,
                frames: root_first.iter().rev().copied().collect(),
                ..Default::default()
            }],
        }
    }

    fn stats(attempts: u64) -> RunStats {
        RunStats {
            interval_us: 1000,
            duration_s: attempts as f64 / 1000.0,
            attempts,
            failures: 1,
            mode: Mode::Cpu,
            interrupted: false,
            ..RunStats::default()
        }
    }

    fn html(c: &FlamegraphCollector, t: &FrameTable, st: &RunStats) -> String {
        c.render(t, st).unwrap().expect("a profile").0
    }

    #[test]
    fn a_merged_profile_has_a_root_per_process_and_none_inverted() {
        let mut t = FrameTable::new();
        let main = py(&mut t, "/app/main.py", "<module>", 10);
        let work = py(&mut t, "/app/main.py", "work", 3);
        let mut c = FlamegraphCollector::new(Output::Stdout);
        c.process_named(7, "python3 main.py");
        c.process_named(8, "python3 main.py");
        for (pid, tid, n) in [(7, 7, 3), (8, 8, 5), (8, 9, 1)] {
            for _ in 0..n {
                let mut s = sample(tid, &[main, work]);
                s.pid = Some(pid);
                c.collect(&s, &t);
            }
        }
        let page = html(&c, &t, &stats(9));
        let d = Drawn::of(&page);
        assert_eq!(
            d.labels,
            [
                "all",
                "python3 main.py (pid 8)",
                "<module> (/app/main.py:10)",
                "work (/app/main.py:3)",
                "python3 main.py (pid 7)",
                "<module> (/app/main.py:10)",
                "work (/app/main.py:3)",
            ]
        );
        assert_eq!(d.parent, [-1, 0, 1, 2, 0, 4, 5]);
        assert_eq!((d.kinds[1], d.kinds[4]), (6, 6));
        let all = d.totals(|_| true);
        assert_eq!((all[1].0, all[4].0), (6, 3));
        assert_eq!(d.v["processes"], 2);
        // Threads say whose they are.
        assert_eq!(
            d.v["threads"],
            serde_json::json!([[8, "pid 8", 0, 5], [7, "pid 7", 0, 3], [9, "pid 8", 0, 1]])
        );
        // The inverted tree: the functions at the roots, no process.
        let inv = Drawn::tree(&page, "inverted");
        assert_eq!(inv.labels[1], "work (/app/main.py:3)");
        assert!(!inv.kinds.contains(&6));
        // A profile of one process has no process data.
        let mut one = FlamegraphCollector::new(Output::Stdout);
        one.collect(&sample(1, &[main]), &t);
        assert!(
            Drawn::of(&html(&one, &t, &stats(1)))
                .v
                .get("processes")
                .is_none()
        );
    }

    /// A page of 10 samples in two threads: `<module>` calls `work`,
    /// which calls `decode` (the standard library), and `idle`.
    fn two_thread_page() -> (FlamegraphCollector, FrameTable, String) {
        let mut t = FrameTable::new();
        let main = py(&mut t, "/app/main.py", "<module>", 10);
        let work = py(&mut t, "/app/main.py", "work", 3);
        let parse = py(&mut t, "/usr/lib/python3.15/json/decoder.py", "decode", 353);
        let idle = py(&mut t, "/app/main.py", "idle", 20);
        let mut c = FlamegraphCollector::new(Output::Stdout);
        for _ in 0..6 {
            c.collect(&sample(1, &[main, work, parse]), &t);
        }
        for _ in 0..2 {
            c.collect(&sample(1, &[main, work]), &t);
        }
        for _ in 0..2 {
            c.collect(&sample(2, &[main, idle]), &t);
        }
        let page = html(&c, &t, &stats(11));
        (c, t, page)
    }

    #[test]
    fn embeds_the_tree_threads_and_stats() {
        let (_, _, page) = two_thread_page();
        assert!(page.starts_with("<!DOCTYPE html>"));
        assert!(page.contains("<title>tachyon flame graph</title>"));
        assert!(page.contains("<canvas id=\"fg\">"));
        assert!(page.contains(SCRIPT) && page.contains(STYLE));
        assert!(
            !page.contains("src=") && !page.contains("href=\"http"),
            "self-contained"
        );
        let d = Drawn::of(&page);
        // Depth first, widest first: work (8) before idle (2).
        assert_eq!(
            d.labels,
            [
                "all",
                "<module> (/app/main.py:10)",
                "work (/app/main.py:3)",
                "decode (/usr/lib/python3.15/json/decoder.py:353)",
                "idle (/app/main.py:20)"
            ]
        );
        assert_eq!(d.parent, [-1, 0, 1, 2, 1]);
        // Your code, then the standard library.
        assert_eq!(d.kinds[2], 0);
        assert_eq!(d.kinds[3], 1);
        let all = d.totals(|_| true);
        assert_eq!(all, [(10, 0), (10, 0), (8, 2), (6, 6), (2, 2)]);
        // Threads busiest first; each one a series.
        assert_eq!(
            d.v["threads"],
            serde_json::json!([[1, null, 0, 8], [2, null, 0, 2]])
        );
        let second = d.totals(|s| s == 1);
        assert_eq!(second[0], (2, 0));
        assert_eq!(second[2], (0, 0));
        assert_eq!(second[4], (2, 2));
        let s = &d.v["stats"];
        assert_eq!(s["samples"], 10);
        assert_eq!(s["attempts"], 11);
        assert_eq!(s["error_pct"], 9.09);
        assert_eq!(s["mode"], "cpu");
        assert_eq!(s["threads"], 2);
        assert_eq!(d.t["dropped"], 0);
        // No status bits were set: no shares to show.
        assert_eq!(
            d.v["status"],
            serde_json::json!({"gil": false, "cpu": false, "exception": false})
        );
        assert_eq!(d.v["gc"], serde_json::json!([0, 0]));
    }

    #[test]
    fn embeds_the_hot_spots_and_the_inverted_tree() {
        let (c, t, page) = two_thread_page();
        let d = Drawn::of(&page);
        // Hot spots by self samples: everything, then per thread.
        let hot = d.hot(0);
        assert_eq!(
            hot[0],
            (
                "decode".into(),
                "/usr/lib/python3.15/json/decoder.py".into(),
                6,
                6
            )
        );
        assert_eq!(hot[1], ("work".into(), "/app/main.py".into(), 2, 8));
        assert_eq!(hot[2].0, "idle");
        assert_eq!(hot.len(), 3, "<module> has no self samples");
        assert_eq!(d.hot(2), [("idle".into(), "/app/main.py".into(), 2, 2)]);
        // Inverted: the functions that ran at the roots, callers below.
        let inv = Drawn::tree(&page, "inverted");
        assert_eq!(
            inv.labels,
            [
                "all",
                "decode (/usr/lib/python3.15/json/decoder.py:353)",
                "work (/app/main.py:3)",
                "<module> (/app/main.py:10)",
                "idle (/app/main.py:20)",
                "<module> (/app/main.py:10)",
                "work (/app/main.py:3)",
                "<module> (/app/main.py:10)"
            ]
        );
        let it = inv.totals(|_| true);
        assert_eq!(it[0], (10, 0));
        assert_eq!((it[1].0, it[4].0, it[6].0), (6, 2, 2));
        assert_eq!(inv.parent[2], 1);
        let sum = c.render(&t, &stats(11)).unwrap().unwrap().1;
        assert_eq!((sum.roots, sum.samples, sum.frames), (1, 10, 4));
    }

    #[test]
    fn counts_gil_and_cpu_status_per_node_and_thread() {
        let mut t = FrameTable::new();
        let m = py(&mut t, "/app/m.py", "main", 1);
        let f = py(&mut t, "/app/m.py", "f", 2);
        let mut c = FlamegraphCollector::new(Output::Stdout);
        let with = |tid, st, stack: &[u32]| {
            let mut s = sample(tid, stack);
            s.threads[0].status = st;
            s
        };
        use status::*;
        for _ in 0..3 {
            c.collect(&with(1, HAS_GIL | ON_CPU | MAIN_THREAD, &[m, f]), &t);
        }
        c.collect(&with(1, GIL_REQUESTED | UNKNOWN, &[m, f]), &t);
        c.collect(&with(1, 0, &[m]), &t);
        let mut named = with(2, GIL_REQUESTED | HAS_EXCEPTION, &[m, f]);
        named.threads[0].name = Some(t.intern_str("worker-1"));
        c.collect(&named, &t);
        let d = Drawn::of(&html(&c, &t, &stats(6)));
        assert_eq!(
            d.v["status"],
            serde_json::json!({"gil": true, "cpu": true, "exception": true})
        );
        assert_eq!(d.t["w"], 9);
        assert_eq!(
            d.v["threads"],
            serde_json::json!([[1, null, 1, 5], [2, "worker-1", 0, 1]])
        );
        let f_node = d.node("f (/app/m.py:2)");
        // series, self, hidden, GIL held, waiting, on CPU, CPU known,
        // exception.
        assert_eq!(
            d.ends_of(f_node),
            [vec![0, 4, 0, 3, 1, 3, 3, 0], vec![1, 1, 0, 0, 1, 0, 1, 1]]
        );
        assert_eq!(
            d.ends_of(d.node("main (/app/m.py:1)")),
            [vec![0, 1, 0, 0, 0, 0, 1, 0]]
        );
    }

    #[test]
    fn no_markup_can_escape_the_data_and_names_survive() {
        let mut t = FrameTable::new();
        let a = py(&mut t, "/tmp/a&b/\"q\"'s.py", "<lambda>", 1);
        let b = py(&mut t, "/tmp/ünïcode/数据.py", "größe_関数", 2);
        let c_ = py(&mut t, "/tmp/</script><script>alert(1)</script>.py", "f", 3);
        let mut c = FlamegraphCollector::new(Output::Stdout);
        let mut s = sample(1, &[a, b, c_]);
        s.threads[0].name = Some(t.intern_str("</script><!-- thread"));
        c.collect(&s, &t);
        let page = html(&c, &t, &stats(1));
        assert_eq!(page.matches("</script>").count(), 2, "only the page's own");
        assert!(!page.contains("<!--"));
        assert!(!page.contains("<lambda>"));
        let d = Drawn::of(&page);
        assert_eq!(d.labels[1], "<lambda> (/tmp/a&b/\"q\"'s.py:1)");
        assert_eq!(d.labels[2], "größe_関数 (/tmp/ünïcode/数据.py:2)");
        assert_eq!(
            d.labels[3],
            "f (/tmp/</script><script>alert(1)</script>.py:3)"
        );
        assert_eq!(d.v["threads"][0][1], "</script><!-- thread");
    }

    #[test]
    fn synthetic_frames_have_their_kinds_and_no_file() {
        let mut t = FrameTable::new();
        let m = py(&mut t, "/app/m.py", "main", 1);
        let gc = t.synthetic(FrameKind::Gc, "<GC>");
        let native = t.synthetic(FrameKind::Native, "<native>");
        let cb = py(&mut t, "/app/m.py", "callback", 7);
        let mut c = FlamegraphCollector::new(Output::Stdout);
        for _ in 0..3 {
            c.collect(&sample(1, &[m, gc]), &t);
        }
        c.collect(&sample(1, &[m, native, cb]), &t);
        let d = Drawn::of(&html(&c, &t, &stats(4)));
        assert_eq!(
            d.labels,
            [
                "all",
                "main (/app/m.py:1)",
                "<GC>",
                "<native>",
                "callback (/app/m.py:7)"
            ]
        );
        assert_eq!(&d.kinds[2..4], [3, 4]);
        // Three samples in garbage collection.
        assert_eq!(d.v["gc"], serde_json::json!([3]));
        // The script's legend names both kinds.
        assert!(SCRIPT.contains("<GC> garbage collection"));
        assert!(SCRIPT.contains("<native> C calling Python"));
    }

    #[test]
    fn frames_differing_in_column_only_are_one_box() {
        let mut t = FrameTable::new();
        let (file, func) = (t.intern_str("/a/x.py"), t.intern_str("f"));
        let mk = |col| Frame {
            opcode: None,
            kind: FrameKind::Python,
            file,
            func,
            location: Some(crate::model::Location {
                line: 3,
                end_line: 3,
                col,
                end_col: col + 1,
            }),
        };
        let (a, b) = (t.intern(mk(1)), t.intern(mk(9)));
        let mut c = FlamegraphCollector::new(Output::Stdout);
        c.collect(&sample(1, &[a]), &t);
        c.collect(&sample(1, &[b]), &t);
        let d = Drawn::of(&html(&c, &t, &stats(2)));
        assert_eq!(d.labels, ["all", "f (/a/x.py:3)"]);
        assert_eq!(d.totals(|_| true)[1], (2, 2));
    }

    #[test]
    fn frames_at_different_instructions_are_one_box_with_their_opcodes() {
        let table = crate::opcodes::table(3, 15).unwrap();
        let op = |name: &str| table.names.iter().position(|n| *n == name).unwrap() as u8;
        let (call, exact) = (op("CALL"), op("CALL_PY_EXACT_ARGS"));
        let mut t = FrameTable::new();
        let main = py(&mut t, "/app/m.py", "main", 1);
        let at = |t: &mut FrameTable, id: u32, op: u8| {
            let f = *t.frame(id);
            t.intern(Frame {
                opcode: Some(op),
                ..f
            })
        };
        let (m_call, m_exact) = (at(&mut t, main, call), at(&mut t, main, exact));
        let leaf = py(&mut t, "/app/m.py", "leaf", 5);
        let mut c = FlamegraphCollector::new(Output::Stdout).with_opcodes(Some(table));
        for _ in 0..3 {
            c.collect(&sample(1, &[m_exact, leaf]), &t);
        }
        c.collect(&sample(1, &[m_call, leaf]), &t);
        let page = html(&c, &t, &stats(4));
        let d = Drawn::of(&page);
        assert_eq!(
            d.labels,
            ["all", "main (/app/m.py:1)", "leaf (/app/m.py:5)"]
        );
        let v = data(&page);
        let ops: Vec<i64> = v["tree"]["ops"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_i64().unwrap())
            .collect();
        assert_eq!(ops, [1, call as i64, 1, 1, exact as i64, 3]);
        assert_eq!(v["opnames"][exact.to_string()], "CALL_PY_EXACT_ARGS (CALL)");
        assert_eq!(v["opnames"][call.to_string()], "CALL");
        // Inverted: main is the leaf's caller, one level up.
        let inv: Vec<i64> = v["inverted"]["ops"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_i64().unwrap())
            .collect();
        assert_eq!(inv, [2, call as i64, 1, 2, exact as i64, 3]);
        // Without the table, no opcode data at all.
        let mut plain = FlamegraphCollector::new(Output::Stdout);
        plain.collect(&sample(1, &[m_exact, leaf]), &t);
        let v = data(&html(&plain, &t, &stats(1)));
        assert!(v["tree"].get("ops").is_none() && v.get("opnames").is_none());
    }

    #[test]
    fn many_stacks_stay_bounded_and_keep_every_sample() {
        let mut t = FrameTable::new();
        let root = py(&mut t, "/app/m.py", "main", 1);
        let hot = py(&mut t, "/app/m.py", "hot", 2);
        let mut c = FlamegraphCollector::new(Output::Stdout);
        // One hot stack and 30,000 one-sample ones: the small ones are not
        // drawn, but their samples count in their caller's width.
        for _ in 0..100_000 {
            c.collect(&sample(1, &[root, hot]), &t);
        }
        for i in 0..30_000 {
            let leaf = py(&mut t, "/app/m.py", &format!("f{i}"), 3);
            c.collect(&sample(1, &[root, leaf]), &t);
        }
        let page = html(&c, &t, &stats(130_000));
        let d = Drawn::of(&page);
        assert_eq!(d.labels, ["all", "main (/app/m.py:1)", "hot (/app/m.py:2)"]);
        assert_eq!(d.t["dropped"], 30_000);
        assert_eq!(d.t["threshold"], 0.1);
        let tot = d.totals(|_| true);
        assert_eq!(tot[0], (130_000, 0));
        assert_eq!(d.ends_of(1), [vec![0, 0, 30_000]]);
        assert_eq!(tot[2], (100_000, 100_000));
        assert_eq!(
            d.hot(0)[0],
            ("hot".into(), "/app/m.py".into(), 100_000, 100_000)
        );
        assert!(page.len() < 64_000, "{}", page.len());
    }

    #[test]
    fn empty_profile_writes_no_file() {
        let path =
            std::env::temp_dir().join(format!("tachyon-fg-empty-{}.html", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let t = FrameTable::new();
        let mut c = FlamegraphCollector::new(Output::File(path.clone()));
        c.collect(
            &Sample {
                pid: None,
                timestamp_us: 0,
                threads: vec![ThreadSample::default()],
            },
            &t,
        );
        c.finish(&t, &stats(1)).unwrap();
        assert!(!path.exists());
    }

    #[test]
    fn writes_the_file() {
        let mut t = FrameTable::new();
        let m = py(&mut t, "/app/m.py", "main", 1);
        let path = std::env::temp_dir().join(format!("tachyon-fg-{}.html", std::process::id()));
        let mut c = FlamegraphCollector::new(Output::File(path.clone()));
        c.collect(&sample(1, &[m]), &t);
        c.finish(&t, &stats(1)).unwrap();
        let got = std::fs::read_to_string(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        assert!(got.starts_with("<!DOCTYPE html>"));
        assert!(got.trim_end().ends_with("</html>"));
        assert_eq!(
            data(&got)["tree"]["nodes"],
            serde_json::json!([-1, -1, 0, 0])
        );
    }
}
