//! ELF core files (`gcore`, a kernel core dump) as process memory: the
//! `PT_LOAD` segments hold what the process had mapped, the `NT_FILE`
//! note names the files it had mapped and where, `NT_PRSTATUS` notes give
//! its threads, and `NT_PRPSINFO` its pid and command.
//!
//! A core is untrusted input like a live target: every offset and size
//! is checked against the file, and a read that no segment covers whole
//! is an error, never a partly filled buffer. Segments the core leaves
//! out (read-only file mappings, `FileSiz` 0) read as missing here; the
//! mapped files they come from are listed in [`CoreFile::files`].

use std::cell::RefCell;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use goblin::elf::Elf;
use goblin::elf::program_header::{PT_LOAD, PT_NOTE};

use super::ProcessMemory;
use super::maps::MapEntry;
use crate::error::{Error, Result};

/// `n_type` of the notes read.
const NT_PRSTATUS: u32 = 1;
const NT_PRPSINFO: u32 = 3;
const NT_FILE: u32 = 0x4649_4c45;
/// x86-64 `elf_prstatus.pr_pid`, `elf_prpsinfo.pr_pid` and `pr_fname`.
const PRSTATUS_PID: usize = 32;
/// x86-64 `elf_prstatus.pr_reg` (a `user_regs_struct`), and where in it
/// `rbp`, `rip` and `rsp` are.
const PRSTATUS_REGS: usize = 112;
const REG_RBP: usize = 4;
const REG_RIP: usize = 16;
const REG_RSP: usize = 19;
const PRPSINFO_PID: usize = 24;
const PRPSINFO_FNAME: usize = 40;
/// Most threads and mapped files believed in one core.
const MAX_THREADS: usize = 1 << 16;
const MAX_FILES: u64 = 1 << 20;
/// The bytes of a mapped file's start compared with the core's copy.
const FIRST_PAGE: u64 = 4096;
/// `PT_NOTE`'s note type of a GNU build id.
const NT_GNU_BUILD_ID: u32 = 3;

/// One `PT_LOAD` segment: `memsz` bytes at `vaddr`, the first `filesz` of
/// them at `offset` in the core (the rest zero).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    pub vaddr: u64,
    pub memsz: u64,
    pub filesz: u64,
    pub offset: u64,
    pub writable: bool,
    pub executable: bool,
}

/// What a core's `NT_PRSTATUS` note keeps of a thread's registers: the
/// instruction, stack and frame pointers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CoreRegisters {
    pub ip: u64,
    pub sp: u64,
    pub bp: u64,
}

/// A file the process had mapped (`NT_FILE`): `start..end`, from
/// `file_offset` bytes into `path`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MappedFile {
    pub start: u64,
    pub end: u64,
    pub file_offset: u64,
    pub path: String,
}

/// An opened core file.
pub struct CoreFile {
    map: memmap2::Mmap,
    pub segments: Vec<Segment>,
    pub files: Vec<MappedFile>,
    /// Its threads' ids, the first the one that was running (or signalled).
    pub threads: Vec<i32>,
    /// Each thread's registers, as the core's notes give them.
    pub registers: HashMap<i32, CoreRegisters>,
    /// The process id and command name (`NT_PRPSINFO`), when present.
    pub pid: Option<i32>,
    pub command: Option<String>,
    /// Where the process's files are found here (`--sysroot`: a core from
    /// another machine or a container), else `/`.
    sysroot: Option<PathBuf>,
    /// The executable here (`--exe`), in place of the path the core names.
    exe: Option<PathBuf>,
    /// The mapped files opened so far, by the path the core names: the
    /// file here, checked to be the one mapped, or why not.
    opened: RefCell<HashMap<String, std::result::Result<Local, String>>>,
}

/// A file the core's process had mapped, found here and checked.
struct Local {
    path: PathBuf,
    map: memmap2::Mmap,
    /// File offset ranges its executable `PT_LOAD` segments cover.
    executable: Vec<std::ops::Range<u64>>,
}

impl CoreFile {
    pub fn open(path: &Path) -> Result<CoreFile> {
        let bad = |what: String| Error::BadCore(format!("{}: {what}", path.display()));
        let file = std::fs::File::open(path).map_err(|e| bad(format!("cannot open: {e}")))?;
        // SAFETY: the map is read-only and private; a core file changed
        // under us gives wrong bytes, which are untrusted anyway.
        let map =
            unsafe { memmap2::Mmap::map(&file) }.map_err(|e| bad(format!("cannot map: {e}")))?;
        let elf = Elf::parse(&map).map_err(|e| match map.starts_with(b"\x7fELF") {
            // gdb writes its section headers last: a core cut short
            // lacks them.
            true => bad(format!(
                "an ELF file that ends early or is damaged (truncated core?): {e}"
            )),
            false => bad(format!("not an ELF file ({e})")),
        })?;
        if elf.header.e_type != goblin::elf::header::ET_CORE {
            return Err(bad("an ELF file, but not a core file".into()));
        }
        let segments = load_segments(&elf, map.len() as u64, &bad)?;
        let notes = read_notes(&elf, &map, &bad)?;
        drop(elf);
        Ok(CoreFile {
            map,
            segments,
            files: notes.files,
            threads: notes.threads,
            registers: notes.registers,
            pid: notes.pid,
            command: notes.command,
            sysroot: None,
            exe: None,
            opened: RefCell::new(HashMap::new()),
        })
    }

    /// Read what the core leaves out (read-only file mappings) from the
    /// files themselves, found under `root`.
    pub fn with_sysroot(mut self, root: Option<PathBuf>) -> Self {
        self.sysroot = root;
        self
    }

    /// Read the executable from `exe` rather than from the path the core
    /// names (under the sysroot).
    pub fn with_exe(mut self, exe: Option<PathBuf>) -> Self {
        self.exe = exe;
        self
    }

    /// The executable as the core names it: the file of the process's
    /// first file mapping.
    pub fn executable(&self) -> Option<&str> {
        self.files.first().map(|f| f.path.as_str())
    }

    /// Where the file the core names `path` is here.
    fn local_path(&self, path: &str) -> PathBuf {
        if let Some(exe) = &self.exe
            && self.executable() == Some(path)
        {
            return exe.clone();
        }
        match &self.sysroot {
            Some(root) => root.join(path.trim_start_matches('/')),
            None => PathBuf::from(path),
        }
    }

    /// Run `f` on the file the core names `path`, opened here and checked
    /// to be the file the process had mapped (once per file).
    fn with_local<T>(&self, path: &str, f: impl FnOnce(&Local) -> T) -> Result<T> {
        let mut opened = self.opened.borrow_mut();
        let local = opened
            .entry(path.to_owned())
            .or_insert_with(|| self.open_local(path));
        match local {
            Ok(l) => Ok(f(l)),
            Err(why) => Err(Error::BadCore(why.clone())),
        }
    }

    fn open_local(&self, path: &str) -> std::result::Result<Local, String> {
        let here = self.local_path(path);
        let hint = match self.exe.is_some() || self.sysroot.is_some() {
            true => "check --exe and --sysroot",
            false => {
                "give --sysroot DIR with the files of the machine the core was made on, or --exe PATH"
            }
        };
        let file = std::fs::File::open(&here).map_err(|e| {
            format!(
                "the core's process had {path} mapped, but {} cannot be opened ({e}): {hint}",
                here.display()
            )
        })?;
        // SAFETY: read-only and private, as the core's own map.
        let map = unsafe { memmap2::Mmap::map(&file) }
            .map_err(|e| format!("cannot map {}: {e}", here.display()))?;
        if let Some(differs) = self.differs(path, &map) {
            return Err(format!(
                "{} is not the {path} the core's process had mapped: {differs}; {hint}",
                here.display()
            ));
        }
        let executable = executable_ranges(&map);
        Ok(Local {
            path: here,
            map,
            executable,
        })
    }

    /// How the local copy `local` of the file mapped as `path` differs
    /// from what the core holds of its first page, if it does: the build
    /// ids when both have one, else the bytes. `None` when the core holds
    /// no page of it to compare with.
    fn differs(&self, path: &str, local: &[u8]) -> Option<String> {
        let f = self
            .files
            .iter()
            .find(|f| f.path == path && f.file_offset == 0)?;
        let (s, off) = self.locate(f.start).filter(|(s, _)| s.filesz > 0)?;
        let len = FIRST_PAGE.min(s.filesz.saturating_sub(off)) as usize;
        let from = (s.offset + off) as usize;
        let in_core = self.map.get(from..from + len)?;
        match (build_id(in_core), build_id(local)) {
            (Some(a), Some(b)) if a == b => None,
            (Some(a), Some(b)) => Some(format!(
                "its build id is {}, the core's is {}",
                hex(b),
                hex(a)
            )),
            _ if local.get(..len) == Some(in_core) => None,
            _ => Some("its first page differs from the core's".into()),
        }
    }

    /// Fill `buf` from the mapped file holding `addr`, if one does whole.
    fn read_from_file(&self, addr: u64, buf: &mut [u8]) -> Result<()> {
        let missing = || {
            Error::corrupt(format!(
                "{addr:#x} is not in the core file, nor in a file it names (give --sysroot?)"
            ))
        };
        let end = addr.checked_add(buf.len() as u64).ok_or_else(missing)?;
        let f = self
            .files
            .iter()
            .find(|f| f.start <= addr && end <= f.end)
            .ok_or_else(missing)?;
        let from = f
            .file_offset
            .checked_add(addr - f.start)
            .ok_or_else(missing)? as usize;
        let to = from.checked_add(buf.len()).ok_or_else(missing)?;
        let copied = self.with_local(&f.path, |l| match l.map.get(from..to) {
            Some(bytes) => {
                buf.copy_from_slice(bytes);
                true
            }
            None => false,
        });
        match copied {
            Ok(true) => Ok(()),
            _ => Err(missing()),
        }
    }

    /// The bytes of the core at `vaddr`: the segment holding it, and how
    /// many bytes of it from there are in the file.
    fn locate(&self, vaddr: u64) -> Option<(&Segment, u64)> {
        let i = self.segments.partition_point(|s| s.vaddr <= vaddr);
        let s = self.segments.get(i.checked_sub(1)?)?;
        let off = vaddr - s.vaddr;
        (off < s.memsz).then_some((s, off))
    }
}

/// The `PT_LOAD` segments, checked against the file's `len` bytes, by
/// address.
fn load_segments(elf: &Elf, len: u64, bad: &dyn Fn(String) -> Error) -> Result<Vec<Segment>> {
    let mut segments = Vec::new();
    for ph in elf.program_headers.iter().filter(|p| p.p_type == PT_LOAD) {
        if ph
            .p_offset
            .checked_add(ph.p_filesz)
            .is_none_or(|end| end > len)
            || ph.p_filesz > ph.p_memsz
            || ph.p_vaddr.checked_add(ph.p_memsz).is_none()
        {
            return Err(bad(format!(
                "a segment at {:#x} lies outside the file (truncated core?)",
                ph.p_vaddr
            )));
        }
        segments.push(Segment {
            vaddr: ph.p_vaddr,
            memsz: ph.p_memsz,
            filesz: ph.p_filesz,
            offset: ph.p_offset,
            writable: ph.p_flags & goblin::elf::program_header::PF_W != 0,
            executable: ph.p_flags & goblin::elf::program_header::PF_X != 0,
        });
    }
    segments.sort_by_key(|s| s.vaddr);
    Ok(segments)
}

/// What a core's notes say.
#[derive(Default)]
struct Notes {
    threads: Vec<i32>,
    registers: HashMap<i32, CoreRegisters>,
    pid: Option<i32>,
    command: Option<String>,
    files: Vec<MappedFile>,
}

/// The notes: threads, the process, its mapped files.
fn read_notes(elf: &Elf, map: &[u8], bad: &dyn Fn(String) -> Error) -> Result<Notes> {
    if !elf.program_headers.iter().any(|p| p.p_type == PT_NOTE) {
        return Err(bad("a core file without notes".into()));
    }
    let mut out = Notes::default();
    for note in elf.iter_note_headers(map).into_iter().flatten() {
        let Ok(n) = note else {
            return Err(bad("a note that does not fit the file".into()));
        };
        match n.n_type {
            NT_PRSTATUS if n.name == "CORE" => {
                if let Some(t) = i32_at(n.desc, PRSTATUS_PID)
                    && out.threads.len() < MAX_THREADS
                {
                    out.threads.push(t);
                    if let Some(r) = registers_of(n.desc) {
                        out.registers.insert(t, r);
                    }
                }
            }
            NT_PRPSINFO if n.name == "CORE" => {
                out.pid = i32_at(n.desc, PRPSINFO_PID);
                out.command = n.desc.get(PRPSINFO_FNAME..PRPSINFO_FNAME + 16).map(|b| {
                    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
                    String::from_utf8_lossy(&b[..end]).into_owned()
                });
            }
            NT_FILE if n.name == "CORE" => {
                out.files = parse_nt_file(n.desc).map_err(|w| bad(w.into()))?
            }
            _ => {}
        }
    }
    Ok(out)
}

/// The file offsets an ELF file's executable `PT_LOAD` segments cover
/// (none when it is not an ELF file).
fn executable_ranges(file: &[u8]) -> Vec<std::ops::Range<u64>> {
    let Ok(elf) = Elf::parse(file) else {
        return Vec::new();
    };
    elf.program_headers
        .iter()
        .filter(|p| p.p_type == PT_LOAD && p.p_flags & goblin::elf::program_header::PF_X != 0)
        .filter_map(|p| Some(p.p_offset..p.p_offset.checked_add(p.p_filesz)?))
        .collect()
}

/// The registers in an x86-64 `NT_PRSTATUS` note's description.
fn registers_of(desc: &[u8]) -> Option<CoreRegisters> {
    let reg = |i: usize| u64_at(desc, PRSTATUS_REGS + 8 * i);
    Some(CoreRegisters {
        ip: reg(REG_RIP)?,
        sp: reg(REG_RSP)?,
        bp: reg(REG_RBP)?,
    })
}

fn i32_at(b: &[u8], at: usize) -> Option<i32> {
    Some(i32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// An `NT_FILE` note: a count and page size, `count` (start, end, page
/// offset) triples, then `count` NUL-terminated paths.
pub fn parse_nt_file(d: &[u8]) -> std::result::Result<Vec<MappedFile>, &'static str> {
    let short = "a mapped-files note shorter than it says";
    let count = u64_at(d, 0).ok_or(short)?;
    let page = u64_at(d, 8).ok_or(short)?;
    if count > MAX_FILES || !page.is_power_of_two() {
        return Err("a mapped-files note with an impossible count or page size");
    }
    let mut names = d
        .get(16 + 24 * count as usize..)
        .ok_or(short)?
        .split(|&b| b == 0);
    let mut out = Vec::with_capacity(count as usize);
    for i in 0..count as usize {
        let at = 16 + 24 * i;
        let (start, end, pages) = (
            u64_at(d, at).ok_or(short)?,
            u64_at(d, at + 8).ok_or(short)?,
            u64_at(d, at + 16).ok_or(short)?,
        );
        let path = names.next().ok_or(short)?;
        if end < start {
            return Err("a mapped file that ends before it starts");
        }
        out.push(MappedFile {
            start,
            end,
            file_offset: pages.checked_mul(page).ok_or(short)?,
            path: String::from_utf8_lossy(path).into_owned(),
        });
    }
    Ok(out)
}

impl ProcessMemory for CoreFile {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<()> {
        let mut done = 0usize;
        while done < buf.len() {
            let at = addr.wrapping_add(done as u64);
            let Some((s, off)) = self.locate(at).filter(|(s, _)| s.filesz > 0) else {
                // Left out of the core: a read-only file mapping.
                return self.read_from_file(at, &mut buf[done..]);
            };
            let n = ((s.memsz - off) as usize).min(buf.len() - done);
            let out = &mut buf[done..done + n];
            // In the file up to `filesz`; zero beyond (not dumped).
            let in_file = s.filesz.saturating_sub(off).min(n as u64) as usize;
            let from = (s.offset + off) as usize;
            out[..in_file].copy_from_slice(&self.map[from..from + in_file]);
            out[in_file..].fill(0);
            done += n;
        }
        Ok(())
    }
}

/// The GNU build id in an ELF file's first bytes `b` (its header, its
/// program headers, and a note they place inside `b`), if there is one.
pub fn build_id(b: &[u8]) -> Option<&[u8]> {
    if b.get(..4)? != b"\x7fELF" || *b.get(4)? != 2 {
        return None;
    }
    let u16_at = |at: usize| Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?));
    let phoff = usize::try_from(u64_at(b, 32)?).ok()?;
    let (phentsize, phnum) = (u16_at(54)? as usize, u16_at(56)? as usize);
    for i in 0..phnum.min(256) {
        let ph = phoff.checked_add(i.checked_mul(phentsize)?)?;
        if i32_at(b, ph)? as u32 != PT_NOTE {
            continue;
        }
        let at = usize::try_from(u64_at(b, ph + 8)?).ok()?;
        let size = usize::try_from(u64_at(b, ph + 32)?).ok()?;
        let notes = b.get(at..at.checked_add(size)?)?;
        if let Some(id) = gnu_build_id(notes) {
            return Some(id);
        }
    }
    None
}

/// The build id among the notes `n` (4-byte aligned name and descriptor).
fn gnu_build_id(mut n: &[u8]) -> Option<&[u8]> {
    let pad = |x: usize| x.checked_add(3).map(|x| x & !3);
    while n.len() >= 12 {
        let namesz = i32_at(n, 0)? as u32 as usize;
        let descsz = i32_at(n, 4)? as u32 as usize;
        let kind = i32_at(n, 8)? as u32;
        let desc_at = 12usize.checked_add(pad(namesz)?)?;
        let end = desc_at.checked_add(pad(descsz)?)?;
        if kind == NT_GNU_BUILD_ID && n.get(12..12 + namesz)? == b"GNU\0" {
            return n.get(desc_at..desc_at.checked_add(descsz)?);
        }
        n = n.get(end..)?;
    }
    None
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

impl super::Target for CoreFile {
    fn pid(&self) -> i32 {
        self.pid
            .or_else(|| self.threads.first().copied())
            .unwrap_or(0)
    }

    /// The core's mapped files, as a live process's map lists them; the
    /// inode is the local file's, so that two cores naming one path with
    /// different files here are told apart.
    fn maps(&self) -> Result<Vec<MapEntry>> {
        use std::os::unix::fs::MetadataExt;
        Ok(self
            .files
            .iter()
            .map(|f| {
                let segment = self.locate(f.start).map(|(s, _)| s);
                let perms = match segment.map(|s| (s.writable, s.executable)) {
                    Some((true, _)) => "rw-p",
                    Some((false, true)) => "r-xp",
                    Some((false, false)) => "r--p",
                    // Not in the core (gdb leaves code out): the file's
                    // own segment says whether it is code.
                    None => match self.with_local(&f.path, |l| {
                        l.executable.iter().any(|r| r.contains(&f.file_offset))
                    }) {
                        Ok(true) => "r-xp",
                        _ => "r--p",
                    },
                };
                MapEntry {
                    start: f.start,
                    end: f.end,
                    perms: perms.into(),
                    offset: f.file_offset,
                    inode: std::fs::metadata(self.local_path(&f.path)).map_or(0, |m| m.ino()),
                    path: Some(f.path.clone()),
                    deleted: false,
                    label: None,
                }
            })
            .collect())
    }

    fn open_mapped_file(&self, m: &MapEntry) -> Result<std::fs::File> {
        let path = m.path.as_deref().unwrap_or("");
        let here = self.with_local(path, |l| l.path.clone())?;
        std::fs::File::open(&here)
            .map_err(|e| Error::BadCore(format!("cannot open {}: {e}", here.display())))
    }

    fn open_in_root(&self, path: &str) -> std::io::Result<std::fs::File> {
        std::fs::File::open(self.local_path(path))
    }

    fn thread_ids(&self) -> Result<Vec<i32>> {
        let mut t = self.threads.clone();
        t.sort_unstable();
        Ok(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mapped_files_notes_are_read_and_checked() {
        let mut d = Vec::new();
        for v in [2u64, 4096, 0x1000, 0x3000, 0, 0x7000, 0x8000, 5] {
            d.extend_from_slice(&v.to_le_bytes());
        }
        d.extend_from_slice(b"/usr/bin/python3\0/lib/libc.so.6\0");
        let f = parse_nt_file(&d).unwrap();
        assert_eq!(f.len(), 2);
        assert_eq!(f[1].file_offset, 5 * 4096);
        assert_eq!(f[1].path, "/lib/libc.so.6");
        // Lies: too many entries for the bytes, a page size of 3.
        let mut lie = d.clone();
        lie[..8].copy_from_slice(&9u64.to_le_bytes());
        assert!(parse_nt_file(&lie).is_err());
        let mut lie = d.clone();
        lie[8..16].copy_from_slice(&3u64.to_le_bytes());
        assert!(parse_nt_file(&lie).is_err());
        assert!(parse_nt_file(&d[..20]).is_err());
    }
}
