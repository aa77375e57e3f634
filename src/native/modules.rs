//! The target's executable mappings as modules: for each, the unwind
//! tables framehop walks with (`.eh_frame`, `.eh_frame_hdr`,
//! `.debug_frame`) and the function symbols that name its addresses.
//!
//! Files are opened the way the runtime locator opens them (below
//! `/proc/PID/root`, else through `map_files`), so a container's or a
//! chroot's libraries are read from outside. Each file is parsed once; a
//! file that cannot be parsed still becomes a module (with no tables or
//! symbols), so its frames are named `<unknown native>` and framehop falls
//! back to frame pointers in it. The number of modules kept is bounded.

use std::ops::Range;
use std::sync::Arc;

use framehop::{ExplicitModuleSectionInfo, Module};
use goblin::elf::Elf;
use goblin::elf::program_header::PT_LOAD;

use super::debuginfo::{self, Image, Lines};
use super::realigned::Cfi;
use super::symbols::Symbols;
use crate::process::Target;
use crate::process::maps::MapEntry;

/// Modules kept at most (a process maps a few hundred in practice).
const MAX_MODULES: usize = 4096;

/// The section bytes framehop reads, owned.
pub type Bytes = Arc<[u8]>;

/// One executable mapping of a file.
pub struct Loaded {
    /// The mapping's addresses in the target.
    pub range: Range<u64>,
    /// Target address minus the file's own address (SVMA).
    pub bias: u64,
    /// The file name, as frames name their module.
    pub name: Arc<str>,
    pub symbols: Arc<Symbols>,
    /// This is the interpreter itself (libpython, or an executable with the
    /// interpreter linked in).
    pub interpreter: bool,
    /// The eval loop's own range in this module (SVMA), when its symbol is
    /// known.
    pub eval: Option<Range<u64>>,
    /// Its `.eh_frame`, for the frames framehop does not unwind.
    pub cfi: Option<Arc<Cfi>>,
    /// Its source lines, when it has debug information.
    pub lines: Option<Arc<Lines>>,
}

/// What one file gives every mapping of it.
struct Parsed {
    symbols: Arc<Symbols>,
    lines: Option<Arc<Lines>>,
    cfi: Option<Arc<Cfi>>,
    sections: ExplicitModuleSectionInfo<Bytes>,
    /// PT_LOAD segments: (file offset, file size, vaddr).
    loads: Vec<(u64, u64, u64)>,
}

/// The modules known so far, sorted by address.
#[derive(Default)]
pub struct Modules {
    pub loaded: Vec<Loaded>,
    /// Every executable mapping seen at the last scan (so an address in
    /// one of them that has no module, an anonymous or JIT mapping, does
    /// not make us scan again).
    exec_ranges: Vec<Range<u64>>,
}

/// The name of the eval loop's function (its clones, `.cold` parts, carry
/// it as a prefix).
pub const EVAL_LOOP: &str = "_PyEval_EvalFrameDefault";

impl Modules {
    /// The module holding `addr`.
    pub fn find(&self, addr: u64) -> Option<&Loaded> {
        let i = self.loaded.partition_point(|m| m.range.start <= addr);
        let m = self.loaded.get(i.checked_sub(1)?)?;
        m.range.contains(&addr).then_some(m)
    }

    /// `addr` lies in an executable mapping we already know of (with a
    /// module or not).
    pub fn known(&self, addr: u64) -> bool {
        self.exec_ranges.iter().any(|r| r.contains(&addr))
    }

    /// Read the target's memory map again and load every executable
    /// mapping not loaded yet; modules whose mapping is gone are dropped.
    /// Returns the modules framehop must add and the starts of those it
    /// must remove.
    pub fn rescan<T: Target>(&mut self, target: &T) -> (Vec<Module<Bytes>>, Vec<u64>) {
        let Ok(maps) = target.maps() else {
            return (Vec::new(), Vec::new());
        };
        let exec: Vec<&MapEntry> = maps.iter().filter(|m| m.perms.contains('x')).collect();
        self.exec_ranges = exec.iter().map(|m| m.start..m.end).collect();
        let mut removed = Vec::new();
        self.loaded.retain(|l| {
            let keep = exec
                .iter()
                .any(|m| m.start == l.range.start && m.end == l.range.end);
            if !keep {
                removed.push(l.range.start);
            }
            keep
        });
        let mut added = Vec::new();
        let mut files: Vec<(String, u64, Option<Arc<Parsed>>)> = Vec::new();
        for m in exec {
            if self.loaded.len() >= MAX_MODULES {
                break;
            }
            if self.loaded.iter().any(|l| l.range.start == m.start) {
                continue;
            }
            let parsed = match &m.path {
                Some(path) => match files.iter().find(|f| f.0 == *path && f.1 == m.inode) {
                    Some(f) => f.2.clone(),
                    None => {
                        let p = parse(target, m).map(Arc::new);
                        files.push((path.clone(), m.inode, p.clone()));
                        p
                    }
                },
                None if m.label.as_deref() == Some(VDSO) => parse_vdso(target, m).map(Arc::new),
                None => continue,
            };
            let (loaded, module) = module_of(m, parsed.as_deref());
            self.loaded.push(loaded);
            added.extend(module);
        }
        self.loaded.sort_by_key(|l| l.range.start);
        (added, removed)
    }
}

/// The module of mapping `m` of a file parsed as `parsed` (or not parsed).
fn module_of(m: &MapEntry, parsed: Option<&Parsed>) -> (Loaded, Option<Module<Bytes>>) {
    let name: Arc<str> = m.basename().or(m.label.as_deref()).unwrap_or("?").into();
    let bias = parsed.and_then(|p| bias_of(m, &p.loads)).unwrap_or(0);
    let symbols = parsed.map(|p| p.symbols.clone()).unwrap_or_default();
    let eval = symbols.range_of(EVAL_LOOP);
    let interpreter = eval.is_some();
    let module = parsed.map(|p| {
        Module::new(
            name.to_string(),
            m.start..m.end,
            bias,
            p.sections.clone_sections(),
        )
    });
    let loaded = Loaded {
        range: m.start..m.end,
        bias,
        name,
        symbols,
        interpreter,
        eval,
        cfi: parsed.and_then(|p| p.cfi.clone()),
        lines: parsed.and_then(|p| p.lines.clone()),
    };
    (loaded, module)
}

/// Target address minus file address for mapping `m`: the PT_LOAD segment
/// that holds the mapping's file offset says where that offset lives.
fn bias_of(m: &MapEntry, loads: &[(u64, u64, u64)]) -> Option<u64> {
    let &(off, _, vaddr) = loads
        .iter()
        .find(|&&(off, size, _)| off <= m.offset && m.offset < off.saturating_add(size))?;
    let svma = vaddr.checked_add(m.offset - off)?;
    m.start.checked_sub(svma)
}

/// Parse the file behind mapping `m`: `None` when it cannot be opened or
/// is not an ELF file.
fn parse<T: Target>(target: &T, m: &MapEntry) -> Option<Parsed> {
    let file = target.open_mapped_file(m).ok()?;
    let image = Image::open(&file)?;
    let elf = Elf::parse(&image).ok()?;
    let path = m.path.as_deref().unwrap_or("");
    let debug = debuginfo::locate(target, path, &image, &elf);
    parse_image(&image, &elf, debug)
}

/// The kernel's vDSO (`clock_gettime`, `gettimeofday`: where `time.time()`
/// runs): an ELF image in the target's memory, with no file behind it.
const VDSO: &str = "[vdso]";
/// The most bytes of vDSO read (it is two pages on x86-64).
const MAX_VDSO: u64 = 1 << 16;

/// Parse the vDSO image mapped at `m`, read from the target's memory.
fn parse_vdso<T: Target>(target: &T, m: &MapEntry) -> Option<Parsed> {
    let len = m.end.checked_sub(m.start).filter(|&l| l <= MAX_VDSO)?;
    let mut image = vec![0u8; len as usize];
    target.read(m.start, &mut image).ok()?;
    parse_image(&image, &Elf::parse(&image).ok()?, None)
}

/// The sections, symbols and segments of an ELF image as laid out in its
/// file (or, for the vDSO, in memory: the same), and what its debug image
/// (`debug`: the same file, a separate one, or none) adds: the full
/// symbol table of a stripped module, and source lines.
fn parse_image(map: &[u8], elf: &Elf<'_>, debug: Option<Arc<Image>>) -> Option<Parsed> {
    let section = |name: &str| -> Option<(Range<u64>, Bytes)> {
        let sh = debuginfo::section(elf, name)?;
        let range = sh.sh_addr..sh.sh_addr.checked_add(sh.sh_size)?;
        // NOBITS sections have no bytes in the file.
        if sh.sh_type == goblin::elf::section_header::SHT_NOBITS {
            return Some((range, Arc::from(&[][..])));
        }
        let start = usize::try_from(sh.sh_offset).ok()?;
        let end = start.checked_add(usize::try_from(sh.sh_size).ok()?)?;
        Some((range, Arc::from(map.get(start..end)?)))
    };
    let split = |s: Option<(Range<u64>, Bytes)>| match s {
        Some((r, b)) => (Some(r), Some(b)),
        None => (None, None),
    };
    let (text_svma, text) = split(section(".text"));
    let (eh_frame_svma, eh_frame) = split(section(".eh_frame"));
    let (eh_frame_hdr_svma, eh_frame_hdr) = split(section(".eh_frame_hdr"));
    let got_svma = section(".got").map(|s| s.0);
    let debug_frame = section(".debug_frame").map(|s| s.1);
    let cfi = match (&eh_frame_svma, &eh_frame) {
        (Some(svma), Some(bytes)) => Some(Arc::new(Cfi {
            eh_frame: bytes.clone(),
            eh_frame_svma: svma.start,
            eh_frame_hdr: eh_frame_hdr_svma
                .as_ref()
                .zip(eh_frame_hdr.as_ref())
                .map(|(r, b)| (b.clone(), r.start)),
            text_svma: text_svma.as_ref().map(|r| r.start),
            got_svma: got_svma.as_ref().map(|r| r.start),
        })),
        _ => None,
    };
    let sections = ExplicitModuleSectionInfo {
        base_svma: 0,
        text_svma,
        text,
        got_svma,
        eh_frame_svma,
        eh_frame,
        eh_frame_hdr_svma,
        eh_frame_hdr,
        debug_frame,
        ..Default::default()
    };
    let loads = elf
        .program_headers
        .iter()
        .filter(|p| p.p_type == PT_LOAD)
        .map(|p| (p.p_offset, p.p_filesz, p.p_vaddr))
        .collect();
    let debug_elf = debug.as_ref().and_then(|d| Elf::parse(d).ok());
    let symbols = match &debug_elf {
        Some(d) if elf.syms.is_empty() && !d.syms.is_empty() => Symbols::of(d),
        _ => Symbols::of(elf),
    };
    Some(Parsed {
        symbols: Arc::new(symbols),
        lines: debug.map(|d| Arc::new(Lines::new(d))),
        cfi,
        sections,
        loads,
    })
}

/// A copy of the section list (the bytes are shared).
trait CloneSections {
    fn clone_sections(&self) -> ExplicitModuleSectionInfo<Bytes>;
}

impl CloneSections for ExplicitModuleSectionInfo<Bytes> {
    fn clone_sections(&self) -> ExplicitModuleSectionInfo<Bytes> {
        ExplicitModuleSectionInfo {
            base_svma: self.base_svma,
            text_svma: self.text_svma.clone(),
            text: self.text.clone(),
            stubs_svma: self.stubs_svma.clone(),
            stub_helper_svma: self.stub_helper_svma.clone(),
            got_svma: self.got_svma.clone(),
            unwind_info: self.unwind_info.clone(),
            eh_frame_svma: self.eh_frame_svma.clone(),
            eh_frame: self.eh_frame.clone(),
            eh_frame_hdr_svma: self.eh_frame_hdr_svma.clone(),
            eh_frame_hdr: self.eh_frame_hdr.clone(),
            debug_frame: self.debug_frame.clone(),
            text_segment_svma: self.text_segment_svma.clone(),
            text_segment: self.text_segment.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(start: u64, offset: u64) -> MapEntry {
        MapEntry {
            start,
            end: start + 0x1000,
            perms: "r-xp".into(),
            offset,
            inode: 1,
            path: Some("/lib/x.so".into()),
            deleted: false,
            label: None,
        }
    }

    #[test]
    fn bias_from_the_segment_holding_the_offset() {
        // A PIE library: text at file offset 0x1000, vaddr 0x1000.
        let loads = [(0, 0x800, 0), (0x1000, 0x5000, 0x1000)];
        assert_eq!(
            bias_of(&map(0x7f00_0000_1000, 0x1000), &loads),
            Some(0x7f00_0000_0000)
        );
        // A non-PIE executable: vaddr = address, no bias.
        let loads = [(0, 0x1000, 0x400000), (0x1000, 0x5000, 0x401000)];
        assert_eq!(bias_of(&map(0x401000, 0x1000), &loads), Some(0));
        // An offset in no segment: no bias to trust.
        assert_eq!(bias_of(&map(0x401000, 0x9000), &loads), None);
    }
}
