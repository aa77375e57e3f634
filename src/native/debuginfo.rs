//! A module's debug information: where its DWARF is, and the source file
//! and line of an address in it.
//!
//! The DWARF is in the module itself (a `-dbg` interpreter, an extension
//! built with `-g`), or in a separate debug file, as distributions ship
//! them: `/usr/lib/debug/.build-id/xx/yyyy.debug` by the module's build
//! id, else by its `.gnu_debuglink` name beside the module, in its
//! `.debug/` directory, or below `/usr/lib/debug`. Those paths are looked
//! up in the target's root first (a container's or a chroot's debug
//! files). A separate file is used only when it is the module's: same
//! build id, or the debug link's CRC.
//!
//! A separate file also gives its full `.symtab`, which names the static
//! functions a stripped module's `.dynsym` does not.
//!
//! Line tables are read on the first lookup, not when the module is
//! loaded; compressed sections (zlib, zstd) are inflated then, each
//! bounded in size. Everything comes from files the target names:
//! malformed DWARF gives no line, never an error.

use std::io::Read as _;
use std::ops::{Deref, Range};
use std::sync::{Arc, Mutex, OnceLock};

use goblin::elf::Elf;
use goblin::elf::section_header::{SHF_COMPRESSED, SHT_NOBITS};

use crate::process::Target;
use crate::process::corefile::build_id;

/// A debug image, mapped read-only.
#[derive(Debug)]
pub struct Image(memmap2::Mmap);

impl Image {
    pub fn open(file: &std::fs::File) -> Option<Arc<Image>> {
        // SAFETY: read-only and private; a file changed under us gives
        // goblin's and gimli's bounds-checked parse errors.
        let map = unsafe { memmap2::Mmap::map(file) }.ok()?;
        Some(Arc::new(Image(map)))
    }
}

impl Deref for Image {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0
    }
}

/// Where the module's DWARF is: its own image, or a separate debug file
/// that is the module's. `None` when there is none.
pub fn locate<T: Target>(
    target: &T,
    module_path: &str,
    image: &Arc<Image>,
    elf: &Elf<'_>,
) -> Option<Arc<Image>> {
    if has_section(elf, ".debug_line") && has_section(elf, ".debug_info") {
        return Some(image.clone());
    }
    let id = build_id(image);
    let link = debug_link(elf, image);
    candidates(module_path, id, link.as_ref().map(|l| l.0.as_str()))
        .into_iter()
        .filter_map(|path| target.open_in_root(&path).ok())
        .filter_map(|f| Image::open(&f))
        .find(|debug| match (id, &link) {
            (Some(id), _) => build_id(debug) == Some(id),
            (None, Some((_, crc))) => crc32(debug) == *crc,
            (None, None) => false,
        })
}

/// Where a module's separate debug file may be, in the order gdb looks.
fn candidates(module_path: &str, build_id: Option<&[u8]>, link: Option<&str>) -> Vec<String> {
    let mut paths = Vec::new();
    if let Some(id) = build_id.filter(|id| id.len() >= 2) {
        let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
        paths.push(format!(
            "/usr/lib/debug/.build-id/{}/{}.debug",
            &hex[..2],
            &hex[2..]
        ));
    }
    if let Some(name) = link.filter(|n| !n.is_empty() && !n.contains('/')) {
        let dir = module_path.rsplit_once('/').map_or("", |(d, _)| d);
        paths.push(format!("{dir}/{name}"));
        paths.push(format!("{dir}/.debug/{name}"));
        paths.push(format!("/usr/lib/debug{dir}/{name}"));
    }
    paths
}

fn has_section(elf: &Elf<'_>, name: &str) -> bool {
    section(elf, name).is_some_and(|s| s.sh_type != SHT_NOBITS && s.sh_size > 0)
}

/// The header of section `name`.
pub fn section<'a>(
    elf: &'a Elf<'_>,
    name: &str,
) -> Option<&'a goblin::elf::section_header::SectionHeader> {
    elf.section_headers
        .iter()
        .find(|s| elf.shdr_strtab.get_at(s.sh_name) == Some(name))
}

/// The bytes of section `name` as the file holds them.
fn raw<'a>(elf: &Elf<'_>, image: &'a [u8], name: &str) -> Option<(&'a [u8], bool)> {
    let s = section(elf, name).filter(|s| s.sh_type != SHT_NOBITS)?;
    let start = usize::try_from(s.sh_offset).ok()?;
    let end = start.checked_add(usize::try_from(s.sh_size).ok()?)?;
    Some((
        image.get(start..end)?,
        s.sh_flags & u64::from(SHF_COMPRESSED) != 0,
    ))
}

/// The `.gnu_debuglink`: a file name, then (4-aligned) its CRC-32.
fn debug_link(elf: &Elf<'_>, image: &[u8]) -> Option<(String, u32)> {
    let (bytes, _) = raw(elf, image, ".gnu_debuglink")?;
    let nul = bytes.iter().position(|&b| b == 0)?;
    let name = std::str::from_utf8(&bytes[..nul]).ok()?.to_string();
    let at = (nul + 4) & !3;
    let crc = bytes.get(at..at + 4)?;
    Some((name, u32::from_le_bytes(crc.try_into().ok()?)))
}

fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = flate2::Crc::new();
    crc.update(bytes);
    crc.sum()
}

/// Bytes of one DWARF section: a range of the mapped image, or inflated
/// from a compressed section.
#[derive(Debug, Clone)]
pub struct Section {
    owner: Owner,
    range: Range<usize>,
}

#[derive(Debug, Clone)]
enum Owner {
    Mapped(Arc<Image>),
    Inflated(Arc<[u8]>),
}

impl Section {
    fn empty() -> Section {
        Section {
            owner: Owner::Inflated(Arc::from(&[][..])),
            range: 0..0,
        }
    }
}

impl Deref for Section {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        let all: &[u8] = match &self.owner {
            Owner::Mapped(m) => m,
            Owner::Inflated(b) => b,
        };
        &all[self.range.clone()]
    }
}

// SAFETY: the bytes live in an `Arc` (a mapping or a boxed slice), so
// they stay where they are while any clone of the section lives.
unsafe impl gimli::StableDeref for Section {}
// SAFETY: as above; a clone shares the same bytes.
unsafe impl gimli::CloneStableDeref for Section {}

type Reader = gimli::EndianReader<gimli::RunTimeEndian, Section>;

/// The sections line lookups read; the rest (variable locations, macros,
/// types) are left unread: they are most of a debug file's bytes.
const NEEDED: &[&str] = &[
    ".debug_abbrev",
    ".debug_addr",
    ".debug_aranges",
    ".debug_info",
    ".debug_line",
    ".debug_line_str",
    ".debug_ranges",
    ".debug_rnglists",
    ".debug_str",
    ".debug_str_offsets",
];

/// The largest section inflated (libpython's `.debug_info` is about 20
/// MiB): a bound on what a forged size can make us allocate.
const MAX_INFLATED: u64 = 1 << 28;

/// Section `name` of `image`, inflated when compressed; empty when the
/// image has none or it cannot be read.
fn dwarf_section(elf: &Elf<'_>, image: &Arc<Image>, name: &str) -> Section {
    let Some((bytes, compressed)) = raw(elf, image, name) else {
        return Section::empty();
    };
    if !compressed {
        let start = bytes.as_ptr() as usize - image.as_ptr() as usize;
        return Section {
            owner: Owner::Mapped(image.clone()),
            range: start..start + bytes.len(),
        };
    }
    match inflate(bytes) {
        Some(b) => Section {
            range: 0..b.len(),
            owner: Owner::Inflated(b.into()),
        },
        None => Section::empty(),
    }
}

/// A compressed section's bytes (an `Elf64_Chdr`, then zlib or zstd).
fn inflate(bytes: &[u8]) -> Option<Vec<u8>> {
    const ZLIB: u32 = 1;
    const ZSTD: u32 = 2;
    let kind = u32::from_le_bytes(bytes.get(0..4)?.try_into().ok()?);
    let size = u64::from_le_bytes(bytes.get(8..16)?.try_into().ok()?);
    let data = bytes.get(24..)?;
    if size > MAX_INFLATED {
        return None;
    }
    // Room for the stated size, but not all at once: the size is the
    // file's word, checked only as the bytes come.
    let mut out = Vec::with_capacity(size.min(1 << 24) as usize);
    let limit = size + 1;
    let read = match kind {
        ZLIB => flate2::read::ZlibDecoder::new(data)
            .take(limit)
            .read_to_end(&mut out),
        ZSTD => zstd::stream::read::Decoder::new(data)
            .ok()?
            .take(limit)
            .read_to_end(&mut out),
        _ => return None,
    };
    (read.ok()? as u64 == size).then_some(out)
}

/// Source lines of one module's addresses, read on first use.
pub struct Lines {
    image: Arc<Image>,
    /// addr2line's context parses units as lookups meet them, so it is
    /// not `Sync`; lookups are rare (names are cached by address).
    context: OnceLock<Option<Mutex<addr2line::Context<Reader>>>>,
}

/// Where an address is in its source: the file as the DWARF names it
/// (joined to its compilation directory) and the line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceLine {
    pub file: String,
    pub line: u32,
}

impl Lines {
    pub fn new(image: Arc<Image>) -> Lines {
        Lines {
            image,
            context: OnceLock::new(),
        }
    }

    /// The line of the function that holds `svma` (a file address): where
    /// that function is, not a function inlined into it, so the line
    /// belongs to the frame's own function and file.
    pub fn find(&self, svma: u64) -> Option<SourceLine> {
        let context = self.context.get_or_init(|| self.load().map(Mutex::new));
        let context = context.as_ref()?.lock().ok()?;
        let mut frames = context.find_frames(svma).skip_all_loads().ok()?;
        let mut outermost = None;
        // An inline chain is as deep as the source nests calls: bounded.
        for _ in 0..64 {
            match frames.next() {
                Ok(Some(f)) => outermost = f.location.or(outermost),
                _ => break,
            }
        }
        let l = outermost?;
        Some(SourceLine {
            file: tidy(l.file?),
            line: l.line.filter(|&n| n > 0)?,
        })
    }

    fn load(&self) -> Option<addr2line::Context<Reader>> {
        let elf = Elf::parse(&self.image).ok()?;
        let endian = match elf.little_endian {
            true => gimli::RunTimeEndian::Little,
            false => gimli::RunTimeEndian::Big,
        };
        let dwarf = gimli::Dwarf::load(|id| -> Result<Reader, ()> {
            let name = id.name();
            let bytes = match NEEDED.contains(&name) {
                true => dwarf_section(&elf, &self.image, name),
                false => Section::empty(),
            };
            Ok(Reader::new(bytes, endian))
        })
        .ok()?;
        addr2line::Context::from_dwarf(dwarf).ok()
    }
}

/// A source path as written, without its `.` and `dir/..` steps (build
/// systems join `build-static/../Modules/x.c`).
fn tidy(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for p in path.split('/') {
        match p {
            "." => {}
            "" if !parts.is_empty() => {}
            ".." if parts.last().is_some_and(|l| !l.is_empty() && *l != "..") => {
                parts.pop();
            }
            _ => parts.push(p),
        }
    }
    parts.join("/")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_paths_lose_their_dot_steps() {
        assert_eq!(
            tidy("/build/p/python3.13/build-static/../Modules/timemodule.c"),
            "/build/p/python3.13/Modules/timemodule.c"
        );
        assert_eq!(
            tidy("./build-debug/../Modules/timemodule.c"),
            "Modules/timemodule.c"
        );
        assert_eq!(tidy("../x/./y.c"), "../x/y.c");
        assert_eq!(tidy("/../y.c"), "/../y.c");
        assert_eq!(tidy("a.c"), "a.c");
    }

    #[test]
    fn debug_files_are_looked_for_by_build_id_then_link() {
        let c = candidates(
            "/usr/lib/x86_64-linux-gnu/libpython3.13.so.1.0",
            Some(&[0xf9, 0xde, 0x76]),
            Some("de766c.debug"),
        );
        assert_eq!(
            c,
            [
                "/usr/lib/debug/.build-id/f9/de76.debug",
                "/usr/lib/x86_64-linux-gnu/de766c.debug",
                "/usr/lib/x86_64-linux-gnu/.debug/de766c.debug",
                "/usr/lib/debug/usr/lib/x86_64-linux-gnu/de766c.debug",
            ]
        );
        // A link that names a path elsewhere is not followed.
        assert!(candidates("/x/y.so", None, Some("../../etc/passwd")).is_empty());
    }

    #[test]
    fn compressed_sections_are_inflated_within_their_stated_size() {
        use std::io::Write as _;
        let data = b"line tables".repeat(10);
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), Default::default());
        z.write_all(&data).unwrap();
        let z = z.finish().unwrap();
        let section = |kind: u32, size: u64| {
            let mut s = Vec::new();
            s.extend_from_slice(&kind.to_le_bytes());
            s.extend_from_slice(&0u32.to_le_bytes());
            s.extend_from_slice(&size.to_le_bytes());
            s.extend_from_slice(&1u64.to_le_bytes());
            s.extend_from_slice(&z);
            s
        };
        assert_eq!(inflate(&section(1, data.len() as u64)), Some(data.clone()));
        // A size that lies, an unknown kind, a size past the bound.
        assert_eq!(inflate(&section(1, 5)), None);
        assert_eq!(inflate(&section(1, 500)), None);
        assert_eq!(inflate(&section(9, data.len() as u64)), None);
        assert_eq!(inflate(&section(1, MAX_INFLATED + 1)), None);
        assert_eq!(inflate(&[1, 0]), None);
    }
}
