//! Finding `_PyRuntime` in a target: which mapped file holds the interpreter,
//! where its `.PyRuntime` section landed in memory, and whether the table
//! there is a live, initialised one.
//!
//! Every mapping whose file name contains `python` (the executable of a
//! static build, or `libpython*.so` of a shared one) is a candidate, in map
//! order. A candidate counts only if the first 8 bytes at its `.PyRuntime`
//! address read `xdebugpy`. That cookie is static data, so a second,
//! never-initialised libpython loaded by ctypes shows it too: a table whose
//! runtime has no interpreter yet is used only when no candidate has one.
//! Files are opened through `/proc/PID/root`, so containers and chroots
//! work, and through `/proc/PID/map_files` when the file was deleted after
//! it was mapped.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use goblin::elf::Elf;
use goblin::elf::program_header::{PF_W, PT_LOAD};

use crate::error::{Error, Result};
use crate::offsets::{COOKIE, Offsets, PyVersion, RawTable, carried, layout};

pub mod asyncio;
use crate::process::Target;
use crate::process::maps::MapEntry;

/// The interpreter runtime of one process, located and validated.
#[derive(Debug, Clone)]
pub struct Runtime {
    /// Address of `_PyRuntime` (and of its debug offsets table) in the target.
    pub address: u64,
    /// The file that holds it, as the target names it.
    pub binary: String,
    pub raw: RawTable,
    /// Shared: the unwinder takes a handle on it every sample (a copy
    /// would move a kilobyte each time).
    pub offsets: std::sync::Arc<Offsets>,
    /// Address of `Py_None` (`_Py_NoneStruct`), when the binary exports it:
    /// a handled-exception slot holding None means "no exception".
    pub none_addr: Option<u64>,
}

/// What one ELF file tells us about where the runtime is.
struct ElfFacts {
    /// `sh_addr` of `.PyRuntime`, if the file has that section.
    section: Option<u64>,
    /// `_PyRuntime` from the dynamic symbol table.
    symbol: Option<u64>,
    /// `Py_Version` from the dynamic symbol table (3.11+), to name versions
    /// too old to have a debug table.
    py_version: Option<u64>,
    /// `_Py_NoneStruct`.
    none: Option<u64>,
    /// Link-time address of the start of the first loadable segment.
    first_load_vaddr: u64,
    /// Writable loadable segments, as (link-time address, size in memory):
    /// where `_PyRuntime` lives when neither its symbol nor its section
    /// says where (3.11/3.12).
    writable: Vec<(u64, u64)>,
}

/// A mapped file image: its path as the target names it, its inode, and
/// where its start is mapped. A new image of a file (after an exec, or the
/// file replaced) is a new key.
type ImageKey = (String, u64, u64);

/// Most images whose facts are kept; past it the cache starts afresh.
const MAX_CACHED_IMAGES: usize = 256;

/// The ELF facts of every image looked at, for the life of tachyon: a
/// process that is still starting is looked at after each of its system
/// calls, and parsing a 30 MB libpython each time made `run` take seconds.
/// `None`: the file is no ELF file (looked at once too).
static FACTS: Mutex<Option<HashMap<ImageKey, Option<Arc<ElfFacts>>>>> = Mutex::new(None);

/// How many times an ELF file was parsed (for `--debug`-style accounting
/// and the tests of the cache).
static PARSES: AtomicU64 = AtomicU64::new(0);

/// How many ELF files this process has parsed so far.
pub fn elf_parses() -> u64 {
    PARSES.load(Ordering::Relaxed)
}

/// The facts of the file mapped at `m`: parsed once per image, then from
/// the cache. `Ok(None)`: not an ELF file.
fn facts_of(proc: &dyn Target, m: &MapEntry) -> Result<Option<Arc<ElfFacts>>> {
    let key = m.path.clone().map(|p| (p, m.inode, m.start));
    if let Some(key) = &key {
        let cache = FACTS.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(facts) = cache.as_ref().and_then(|c| c.get(key)) {
            return Ok(facts.clone());
        }
    }
    let file = proc.open_mapped_file(m)?;
    PARSES.fetch_add(1, Ordering::Relaxed);
    let facts = elf_facts(&file).map(Arc::new);
    if let Some(key) = key {
        let mut cache = FACTS.lock().unwrap_or_else(|e| e.into_inner());
        let cache = cache.get_or_insert_with(HashMap::new);
        if cache.len() >= MAX_CACHED_IMAGES {
            cache.clear();
        }
        cache.insert(key, facts.clone());
    }
    Ok(facts)
}

fn elf_facts(file: &std::fs::File) -> Option<ElfFacts> {
    // SAFETY: the map is read-only and private; a file truncated under us
    // could fault, which is the accepted risk of every mmap-based ELF reader.
    let map = unsafe { memmap2::Mmap::map(file) }.ok()?;
    let elf = Elf::parse(&map).ok()?;
    let section = elf.section_headers.iter().find_map(|sh| {
        let name = elf.shdr_strtab.get_at(sh.sh_name)?;
        (name == ".PyRuntime").then_some(sh.sh_addr)
    });
    let sym = |want: &str| {
        elf.dynsyms.iter().find_map(|s| {
            let name = elf.dynstrtab.get_at(s.st_name)?;
            (name == want && s.st_value != 0).then_some(s.st_value)
        })
    };
    let first_load_vaddr = elf
        .program_headers
        .iter()
        .filter(|ph| ph.p_type == PT_LOAD)
        .map(|ph| ph.p_vaddr & !(ph.p_align.max(4096) - 1))
        .min()
        .unwrap_or(0);
    let writable = elf
        .program_headers
        .iter()
        .filter(|ph| ph.p_type == PT_LOAD && ph.p_flags & PF_W != 0)
        .map(|ph| (ph.p_vaddr, ph.p_memsz))
        .collect();
    Some(ElfFacts {
        writable,
        section,
        symbol: sym("_PyRuntime"),
        py_version: sym("Py_Version"),
        none: sym("_Py_NoneStruct"),
        first_load_vaddr,
    })
}

/// Candidate files, in map order, each with the mapping of its start
/// (file offset 0), which fixes the load bias: every file whose name
/// contains `python`, then the main executable whatever its name.
fn candidates(maps: &[MapEntry]) -> Vec<&MapEntry> {
    let mut out: Vec<&MapEntry> = Vec::new();
    for m in maps {
        let Some(base) = m.basename() else { continue };
        if !base.contains("python") || m.offset != 0 {
            continue;
        }
        // One candidate per mapped copy: the same file mapped twice (ctypes
        // loading libpython again) gives two candidates with two biases.
        out.push(m);
    }
    // An interpreter linked into a program of another name (an embedding
    // application, a frozen app): the main executable, the first file
    // mapped, is tried last.
    if let Some(exe) = maps.iter().find(|m| m.path.is_some())
        && exe.offset == 0
        && !out.iter().any(|c| c.path == exe.path)
    {
        out.push(exe);
    }
    out
}

/// What [`locate_or_starting`] found.
#[derive(Debug)]
pub enum Found {
    /// A runtime ready to be read.
    Ready(Runtime),
    /// A 3.11/3.12 runtime not initialised yet (the error says so), and
    /// where it is when that is known: the [`Check`] on it tells when
    /// it is ready, without looking at the process's files again. `None`:
    /// its binary says not where; its data is searched once it is ready.
    Starting(Option<Runtime>, Error),
}

/// How a runtime whose layout was not proven on a real interpreter (one
/// carried for 3.11/3.12, a free-threaded 3.14+ table) is checked against
/// the live process before it is trusted: `Ok`, [`Error::LayoutMismatch`]
/// for a process that does not fit, [`Error::NotPython`] for a runtime
/// not initialised yet. The check walks the process's stacks, which is the
/// unwinder's, a layer above: the caller gives it (the session's
/// `verify::layout`), so that finding a runtime needs no unwinder.
pub type Check = dyn Fn(&dyn Target, &Runtime) -> Result<()>;

/// Locate and validate the runtime of `proc`, a carried layout checked
/// with `check`.
pub fn locate(proc: &dyn Target, check: &Check) -> Result<Runtime> {
    match locate_or_starting(proc, check)? {
        Found::Ready(rt) => Ok(rt),
        Found::Starting(_, e) => Err(e),
    }
}

/// Locate and validate the runtime of `proc`; for a 3.11/3.12 process
/// that has not initialised it yet, where it will be.
pub fn locate_or_starting(proc: &dyn Target, check: &Check) -> Result<Found> {
    let maps = proc.maps()?;
    let cands = candidates(&maps);
    if cands.is_empty() {
        return Err(nothing_mapped(proc));
    }
    let mut search = Search::default();
    for m in &cands {
        if let Some(found) = search.look_at(proc, m, check)? {
            return Ok(found);
        }
    }
    search.conclude(proc, &cands)
}

/// No candidate file is mapped: say it exited, not "not Python", when it did.
fn nothing_mapped(proc: &dyn Target) -> Error {
    let pid = proc.pid();
    if proc.has_exited() {
        return Error::ProcessExited { pid };
    }
    Error::NotPython {
        pid,
        why: "no python executable or libpython is mapped".into(),
    }
}

/// One mapped copy of a candidate file: its ELF facts, and how far it is
/// mapped from its link-time addresses.
struct Image<'a> {
    m: &'a MapEntry,
    facts: Arc<ElfFacts>,
    bias: u64,
}

impl Image<'_> {
    /// Where the link-time address `link` is in the process.
    fn at(&self, link: u64) -> u64 {
        link.wrapping_add(self.bias)
    }

    /// Where `_Py_NoneStruct` is in the process, if the file says.
    fn none(&self) -> Option<u64> {
        self.facts.none.map(|n| self.at(n))
    }
}

/// What the candidates looked at so far left, for when none is ready.
#[derive(Default)]
struct Search {
    /// The version a candidate's `Py_Version` gave.
    found_version: Option<PyVersion>,
    /// Why the last candidate's file could not be read.
    last_err: Option<Error>,
    /// The cookie is part of `_PyRuntime`'s static initialiser, so every
    /// mapped copy of libpython shows it, initialised or not. The first
    /// table whose `interpreters_head` is set wins; a copy that never ran
    /// (ctypes loading libpython a second time) is only kept as a fallback
    /// for a process that has not initialised any runtime yet.
    uninitialised: Option<Runtime>,
    /// Why the last carried-layout runtime is not ready.
    not_yet: Option<Error>,
    /// A carried-layout runtime found but not initialised yet.
    starting: Option<Runtime>,
}

impl Search {
    /// Look at one candidate: `Some` when its runtime is ready.
    fn look_at(&mut self, proc: &dyn Target, m: &MapEntry, check: &Check) -> Result<Option<Found>> {
        let facts = match facts_of(proc, m) {
            Ok(Some(f)) => f,
            Ok(None) => return Ok(None),
            // No access, or a core file's copy of the file is missing or
            // another file: more candidates cannot make it readable.
            Err(e @ (Error::PermissionDenied { .. } | Error::BadCore(_))) => return Err(e),
            Err(e) => {
                self.last_err = Some(e);
                return Ok(None);
            }
        };
        let bias = m.start.wrapping_sub(facts.first_load_vaddr);
        let image = Image { m, facts, bias };
        match debug_table(proc, &image)? {
            // Free-threaded 3.14+: a table whose rules come from headers
            // is checked on the process first (it says when it is not
            // initialised yet).
            Some((rt, _)) if rt.offsets.frame_tlbc_index.is_some() => {
                return self.checked(proc, rt, check);
            }
            Some((rt, true)) => return Ok(Some(Found::Ready(rt))),
            Some((rt, false)) => {
                self.uninitialised.get_or_insert(rt);
            }
            None => {}
        }
        self.carried(proc, &image, check)
    }

    /// 3.11, 3.12: no table; the layout tachyon carries for the version,
    /// verified on the live process. `Some` when it is ready.
    fn carried(
        &mut self,
        proc: &dyn Target,
        image: &Image,
        check: &Check,
    ) -> Result<Option<Found>> {
        let Some(v) = image.facts.py_version else {
            return Ok(None);
        };
        let mut b = [0u8; 4];
        if proc.read(image.at(v), &mut b).is_err() {
            return Ok(None);
        }
        let version = PyVersion::from_hex(u32::from_le_bytes(b) as u64);
        self.found_version = Some(version);
        let Some(c) = carried::for_version(version) else {
            return Ok(None);
        };
        let Some(addr) = self.carried_address(proc, image, c, version)? else {
            return Ok(None);
        };
        let rt = match carried_runtime(proc.pid(), addr, image.m, image.none(), c, version) {
            Ok(rt) => rt,
            Err(e) if e.is_fatal() => return Err(e),
            Err(e) => {
                self.not_yet = Some(e);
                return Ok(None);
            }
        };
        self.checked(proc, rt, check)
    }

    /// A runtime whose layout `check` must accept before it is read: `Some`
    /// when it does; a runtime not initialised yet is remembered.
    fn checked(&mut self, proc: &dyn Target, rt: Runtime, check: &Check) -> Result<Option<Found>> {
        match check(proc, &rt) {
            Ok(()) => return Ok(Some(Found::Ready(rt))),
            Err(e) if e.is_fatal() && !matches!(e, Error::NotPython { .. }) => return Err(e),
            // Not initialised yet (or a second, idle copy of libpython).
            Err(e) => {
                if matches!(e, Error::NotPython { .. }) {
                    self.starting.get_or_insert(rt);
                }
                self.not_yet = Some(e);
            }
        }
        Ok(None)
    }

    /// Where a carried-layout `_PyRuntime` is: at its symbol or section,
    /// or, when neither says, found in the writable data. `None` (the
    /// reason kept) when the data holds no initialised one.
    fn carried_address(
        &mut self,
        proc: &dyn Target,
        image: &Image,
        c: &carried::Carried,
        version: PyVersion,
    ) -> Result<Option<u64>> {
        if let Some(link) = image.facts.symbol.or(image.facts.section) {
            return Ok(Some(image.at(link)));
        }
        let segments: Vec<(u64, u64)> = image
            .facts
            .writable
            .iter()
            .map(|&(a, len)| (image.at(a), len))
            .collect();
        let found = scan_for_runtime(proc, &segments, c, version)?;
        if found.is_none() {
            self.not_yet.get_or_insert(Error::NotPython {
                pid: proc.pid(),
                why: format!(
                    "it runs Python {version}, but no initialised _PyRuntime was found in the data of {}",
                    image.m.path.as_deref().unwrap_or("its binary")
                ),
            });
        }
        Ok(found)
    }

    /// No candidate's runtime was ready: the best fallback, or the error
    /// that says most.
    fn conclude(self, proc: &dyn Target, cands: &[&MapEntry]) -> Result<Found> {
        if let Some(rt) = self.uninitialised {
            return Ok(Found::Ready(rt));
        }
        match (self.starting, self.not_yet) {
            (rt, Some(e @ Error::NotPython { .. })) => return Ok(Found::Starting(rt, e)),
            (_, Some(e)) => return Err(e),
            _ => {}
        }
        // Before 3.11 there is no `Py_Version`: name the version after the
        // interpreter's file (`python3.10`, `libpython3.10.so.1.0`).
        let version = self.found_version.or_else(|| {
            cands
                .iter()
                .filter_map(|m| version_from_name(m.basename()?))
                // 3.11+ export `Py_Version`: without it, their libpython is
                // not mapped yet.
                .find(|v| v.minor < 11)
        });
        if let Some(v) = version {
            return Err(version_error(proc.pid(), v, cands));
        }
        Err(no_runtime(proc, cands, self.last_err))
    }
}

/// The `_Py_DebugOffsets` table of one image, if it has one, and whether
/// its runtime is initialised (`interpreters_head` set).
fn debug_table(proc: &dyn Target, image: &Image) -> Result<Option<(Runtime, bool)>> {
    for link_addr in [image.facts.section, image.facts.symbol]
        .into_iter()
        .flatten()
    {
        let addr = image.at(link_addr);
        let mut cookie = [0u8; 8];
        match proc.read(addr, &mut cookie) {
            Ok(()) if &cookie == COOKIE => {
                let rt = load_table(proc, addr, image.m, image.none())?;
                let head =
                    proc.read_u64(addr.wrapping_add(rt.offsets.runtime_interpreters_head))?;
                return Ok(Some((rt, head != 0)));
            }
            Ok(()) => {}
            Err(e) if e.is_fatal() => return Err(e),
            Err(_) => {}
        }
    }
    Ok(None)
}

/// A version was found but no runtime: too old for any layout tachyon
/// has, or new enough to have the table yet none was found.
fn version_error(pid: i32, v: PyVersion, cands: &[&MapEntry]) -> Error {
    // Older than any layout tachyon has: name the version.
    if v.major == 3 && (v.minor < 11 || carried::for_version(v).is_none() && v.minor < 13) {
        return Error::UnsupportedVersion {
            pid,
            found: if v.level == 0 {
                // Known from a file name only.
                format!("{}.{}", v.major, v.minor)
            } else {
                v.to_string()
            },
        };
    }
    // New enough to have the table, yet we found none: say so rather
    // than call a supported version unsupported.
    Error::NotPython {
        pid,
        why: format!(
            "it runs Python {v}, but its runtime (_PyRuntime) could not be located in {}",
            cands
                .iter()
                .filter_map(|m| m.path.as_deref())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// Neither a runtime nor a version was found.
fn no_runtime(proc: &dyn Target, cands: &[&MapEntry], last_err: Option<Error>) -> Error {
    let pid = proc.pid();
    // Failing to open or read the binary may just mean the process exited
    // meanwhile.
    if proc.has_exited() {
        return Error::ProcessExited { pid };
    }
    let names: Vec<&str> = cands.iter().filter_map(|m| m.path.as_deref()).collect();
    Error::NotPython {
        pid,
        why: match last_err {
            Some(e) => format!("cannot read the interpreter binary ({e})"),
            None => format!(
                "{} holds no initialised CPython runtime (no _Py_DebugOffsets)",
                names.join(", ")
            ),
        },
    }
}

/// One process looked at again and again while it starts (after each of
/// its system calls): once its runtime's address is known, only whether
/// that runtime is initialised yet is read, not its maps or its files.
#[derive(Debug, Default)]
pub struct Startup {
    starting: Option<Runtime>,
    /// A 3.11/3.12 whose runtime is looked for in its data (no symbol
    /// says where) and was not found there yet.
    scanning: bool,
}

impl Startup {
    /// The process exec'd: what it ran before says nothing any more.
    pub fn exec(&mut self) {
        self.starting = None;
        self.scanning = false;
    }

    /// Its runtime, once ready; else why not (as [`locate`]).
    pub fn look(&mut self, proc: &dyn Target, check: &Check) -> Result<Runtime> {
        if let Some(rt) = &self.starting {
            check(proc, rt)?;
            return Ok(rt.clone());
        }
        match locate_or_starting(proc, check)? {
            Found::Ready(rt) => Ok(rt),
            Found::Starting(rt, e) => {
                self.scanning = rt.is_none();
                self.starting = rt;
                Err(e)
            }
        }
    }

    /// Where the 4-byte flag is that a 3.11/3.12 runtime, whose address is
    /// known, sets to 1 when its initialisation is over (`initialized`,
    /// 16 bytes into `_PyRuntime`, which the [`Check`] waits for): a
    /// write there is the moment to look again.
    pub fn ready_flag(&self) -> Option<u64> {
        self.starting.as_ref().map(|rt| rt.address.wrapping_add(16))
    }

    /// Whether the process is a Python whose runtime may become ready at
    /// any instruction (it only waits for its initialisation): then it is
    /// worth a look after every system call, not only after those that
    /// change its memory map.
    pub fn python_seen(&self) -> bool {
        self.starting.is_some() || self.scanning
    }
}

fn load_table(
    proc: &dyn Target,
    addr: u64,
    m: &MapEntry,
    none_addr: Option<u64>,
) -> Result<Runtime> {
    let pid = proc.pid();
    let mut head = [0u8; 24];
    proc.read(addr, &mut head)?;
    let version = PyVersion::from_hex(u64::from_le_bytes(head[8..16].try_into().unwrap_or([0; 8])));
    let size = layout::table_size(version.minor).unwrap_or(24);
    let mut bytes = vec![0u8; size];
    proc.read(addr, &mut bytes)?;
    let raw = RawTable::decode(pid, &bytes)?;
    let offsets = Offsets::from_raw(pid, &raw)?;
    Ok(Runtime {
        address: addr,
        binary: m.path.clone().unwrap_or_default(),
        raw,
        offsets: offsets.into(),
        none_addr,
    })
}

/// The raw bytes of the table (for fixtures and `--debug` output).
pub fn table_bytes(proc: &dyn Target, rt: &Runtime) -> Result<Vec<u8>> {
    let size = layout::table_size(rt.raw.version.minor).unwrap_or(0);
    let mut bytes = vec![0u8; size];
    proc.read(rt.address, &mut bytes)?;
    Ok(bytes)
}

/// Most bytes of writable data scanned for `_PyRuntime`: the data and bss
/// of a static interpreter are a few MiB.
const MAX_SCAN: u64 = 64 << 20;
/// Most places in the data that pass the local test and get checked
/// against the interpreter they name.
const MAX_SCAN_CANDIDATES: usize = 64;

/// 3.11/3.12 binaries without the `_PyRuntime` symbol or the `.PyRuntime`
/// section: the address in the writable `segments` (in the target) where a
/// structure with layout `c` sits, initialised, whose first interpreter
/// points back to it. Bounded: at most [`MAX_SCAN`] bytes read, at most
/// [`MAX_SCAN_CANDIDATES`] candidates followed. The caller then verifies
/// the whole layout, as for a runtime found by its symbol.
pub fn scan_for_runtime(
    proc: &dyn Target,
    segments: &[(u64, u64)],
    c: &carried::Carried,
    version: PyVersion,
) -> Result<Option<u64>> {
    let raw = c.table(version);
    let offsets = Offsets::from_carried(proc.pid(), &raw)?;
    let get = |name: &str| raw.get(name).unwrap_or(0);
    let head_off = offsets.runtime_interpreters_head as usize;
    let main_off = get("runtime_state.interpreters_main") as usize;
    let back_off = get("interpreter_state.runtime");
    let mut budget = MAX_SCAN;
    let mut followed = 0usize;
    for &(start, len) in segments {
        let len = len.min(budget);
        budget -= len;
        let mut buf = vec![0u8; len as usize];
        if proc.read(start, &mut buf).is_err() {
            continue;
        }
        let word = |i: usize| {
            buf.get(i..i + 8)
                .map(|b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
        };
        let mut at = 0usize;
        while at + main_off + 8 <= buf.len() {
            let here = at;
            at += 8;
            // `_initialized` and `initialized` are 1; the interpreter list
            // head and the main interpreter are plausible pointers.
            if word(here) != Some(1) || word(here + 16).map(|w| w as u32) != Some(1) {
                continue;
            }
            let (Some(head), Some(main)) = (word(here + head_off), word(here + main_off)) else {
                continue;
            };
            if !crate::process::plausible(head) || !crate::process::plausible(main) {
                continue;
            }
            followed += 1;
            if followed > MAX_SCAN_CANDIDATES {
                return Ok(None);
            }
            let addr = start + here as u64;
            if proc.read_u64(main.wrapping_add(back_off)).ok() == Some(addr) {
                return Ok(Some(addr));
            }
        }
        if budget == 0 {
            break;
        }
    }
    Ok(None)
}

/// [`scan_for_runtime`] over the writable data of the mapped file `m`
/// (which must export `Py_Version` of a 3.11/3.12), whatever its symbols
/// and sections say: for tests, which check that the scan finds what the
/// symbol says.
pub fn scan_mapped_file(proc: &dyn Target, m: &MapEntry) -> Result<Option<u64>> {
    let facts = facts_of(proc, m)?.ok_or_else(|| Error::corrupt("not an ELF file"))?;
    let bias = m.start.wrapping_sub(facts.first_load_vaddr);
    let v = facts
        .py_version
        .ok_or_else(|| Error::corrupt("no Py_Version"))?;
    let mut b = [0u8; 4];
    proc.read(v.wrapping_add(bias), &mut b)?;
    let version = PyVersion::from_hex(u32::from_le_bytes(b) as u64);
    let c = carried::for_version(version)
        .ok_or_else(|| Error::corrupt(format!("no carried layout for {version}")))?;
    let segments: Vec<(u64, u64)> = facts
        .writable
        .iter()
        .map(|&(a, len)| (a.wrapping_add(bias), len))
        .collect();
    scan_for_runtime(proc, &segments, c, version)
}

/// `3.X` from an interpreter's file name (`python3.10`,
/// `libpython3.10.so.1.0`), as a version with an unknown micro release.
fn version_from_name(base: &str) -> Option<PyVersion> {
    let rest = base
        .strip_prefix("lib")
        .unwrap_or(base)
        .strip_prefix("python3.")?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    let minor: u8 = digits.parse().ok()?;
    Some(PyVersion {
        major: 3,
        minor,
        micro: 0,
        level: 0,
        serial: 0,
    })
}

/// The runtime of a 3.11/3.12 process at `addr`, with the carried layout
/// `c`, not yet verified on the live process (see the [`Check`]).
fn carried_runtime(
    pid: i32,
    addr: u64,
    m: &MapEntry,
    none_addr: Option<u64>,
    c: &carried::Carried,
    version: PyVersion,
) -> Result<Runtime> {
    let raw = c.table(version);
    let offsets = Offsets::from_carried(pid, &raw)?;
    let rt = Runtime {
        address: addr,
        binary: m.path.clone().unwrap_or_default(),
        raw,
        offsets: offsets.into(),
        none_addr,
    };
    Ok(rt)
}

#[cfg(test)]
mod tests {
    use super::version_from_name;

    #[test]
    fn versions_from_file_names() {
        let minor = |n: &str| version_from_name(n).map(|v| (v.major, v.minor));
        assert_eq!(minor("python3.10"), Some((3, 10)));
        assert_eq!(minor("libpython3.9.so.1.0"), Some((3, 9)));
        assert_eq!(minor("libpython3.12d.so"), Some((3, 12)));
        assert_eq!(minor("python3"), None);
        assert_eq!(minor("python"), None);
        assert_eq!(minor("mypython3.10"), None);
    }
}
