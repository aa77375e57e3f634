//! Finding asyncio's debug offsets (`AsyncioDebug`, 3.14+) in a target:
//! whichever mapped file holds `_asyncio` carries the section (Debian 3.14:
//! `lib-dynload/_asyncio.cpython-314-…so`, loaded when asyncio is first
//! imported; 3.15: the interpreter itself). Every mapping whose file name
//! contains `python` is a candidate, as for `.PyRuntime`.
//!
//! Not finding it is not an error: asyncio may not be imported yet, and
//! the caller asks again later.

use goblin::elf::Elf;
use goblin::elf::program_header::PT_LOAD;

use super::Runtime;
use crate::error::{Error, Result};
use crate::offsets::asyncio::{AsyncOffsets, SECTION_SIZE};
use crate::process::Target;

/// Link-time address of `.AsyncioDebug` in an ELF file and the start of
/// its first loadable segment, or `None` when it has no such section.
fn section_in(file: &std::fs::File) -> Option<(u64, u64)> {
    // SAFETY: a read-only private map; a file truncated under us could
    // fault, the accepted risk of every mmap-based ELF reader.
    let map = unsafe { memmap2::Mmap::map(file) }.ok()?;
    let elf = Elf::parse(&map).ok()?;
    let addr = elf.section_headers.iter().find_map(|sh| {
        let name = elf.shdr_strtab.get_at(sh.sh_name)?;
        (name == ".AsyncioDebug" && sh.sh_size as usize >= SECTION_SIZE).then_some(sh.sh_addr)
    })?;
    let first_load = elf
        .program_headers
        .iter()
        .filter(|ph| ph.p_type == PT_LOAD)
        .map(|ph| ph.p_vaddr & !(ph.p_align.max(4096) - 1))
        .min()?;
    Some((addr, first_load))
}

/// The asyncio offsets of `proc` (whose runtime is `rt`), validated;
/// `Ok(None)` when no mapped file has the section (yet).
pub fn locate(proc: &dyn Target, rt: &Runtime) -> Result<Option<AsyncOffsets>> {
    if rt.offsets.version.minor < 14 {
        return Ok(None);
    }
    let maps = proc.maps()?;
    for m in &maps {
        let Some(base) = m.basename() else { continue };
        if !base.contains("python") || m.offset != 0 {
            continue;
        }
        let file = match proc.open_mapped_file(m) {
            Ok(f) => f,
            Err(e @ Error::PermissionDenied { .. }) => return Err(e),
            Err(_) => continue,
        };
        let Some((link, first_load)) = section_in(&file) else {
            continue;
        };
        let addr = link.wrapping_add(m.start.wrapping_sub(first_load));
        let mut bytes = [0u8; SECTION_SIZE];
        match proc.read(addr, &mut bytes) {
            Ok(()) => {}
            Err(e) if e.is_fatal() => return Err(e),
            Err(_) => continue,
        }
        return AsyncOffsets::decode(proc.pid(), &bytes, &rt.raw, &rt.offsets).map(Some);
    }
    Ok(None)
}
