//! A stopped thread's registers, and its stack read in pages as the
//! unwinder asks for words of it.
//!
//! The registers come from the platform ([`ThreadRegisters`]: ptrace on
//! Linux, a core's notes); the stack from the same [`ProcessMemory`] every other read
//! goes through. Pages read per thread are bounded, so a corrupt stack
//! pointer costs one failed sample, never unbounded reads.

use crate::error::{Error, Result};
use crate::process::ProcessMemory;

/// The registers an unwinder needs to start from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Regs {
    pub ip: u64,
    pub sp: u64,
    pub bp: u64,
}

/// Where a stopped thread's registers come from.
pub trait ThreadRegisters {
    /// The registers of thread `tid` (the target's own id), which must be
    /// stopped by us.
    fn registers(&self, tid: u64) -> Result<Regs>;
}

#[cfg(target_os = "linux")]
impl ThreadRegisters for crate::process::linux::LinuxProcess {
    fn registers(&self, tid: u64) -> Result<Regs> {
        #[cfg(target_arch = "x86_64")]
        {
            let host = self.host_tid(tid).unwrap_or(tid);
            let pid = nix::unistd::Pid::from_raw(host as i32);
            let r = nix::sys::ptrace::getregs(pid).map_err(|e| {
                Error::io(
                    format!("cannot read the registers of thread {tid}"),
                    std::io::Error::from_raw_os_error(e as i32),
                )
            })?;
            Ok(Regs {
                ip: r.rip,
                sp: r.rsp,
                bp: r.rbp,
            })
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let _ = tid;
            Err(Error::io(
                "native frames",
                std::io::Error::other("are read on x86-64 only"),
            ))
        }
    }
}

/// A core's threads: the registers its `NT_PRSTATUS` notes kept.
impl ThreadRegisters for crate::process::corefile::CoreFile {
    fn registers(&self, tid: u64) -> Result<Regs> {
        let r = i32::try_from(tid)
            .ok()
            .and_then(|t| self.registers.get(&t))
            .ok_or_else(|| Error::BadCore(format!("no registers for thread {tid}")))?;
        Ok(Regs {
            ip: r.ip,
            sp: r.sp,
            bp: r.bp,
        })
    }
}

/// Bytes read from the stack at a time.
const PAGE: u64 = 4096;
/// Pages one thread's walk may read: 1 MiB of stack.
const MAX_PAGES: usize = 256;

/// The pages of one thread's stack read so far, for one walk.
pub struct StackPages<'m, M: ProcessMemory + ?Sized> {
    mem: &'m M,
    pages: Vec<(u64, Box<[u8; PAGE as usize]>)>,
    /// Pages that could not be read (so asking again costs nothing).
    bad: Vec<u64>,
    last: usize,
}

impl<'m, M: ProcessMemory + ?Sized> StackPages<'m, M> {
    pub fn new(mem: &'m M) -> Self {
        StackPages {
            mem,
            pages: Vec::new(),
            bad: Vec::new(),
            last: 0,
        }
    }

    /// The 8-byte word at `addr`, or `None` when it cannot be read (or the
    /// walk has read as much stack as it may).
    pub fn word(&mut self, addr: u64) -> Option<u64> {
        let page = addr & !(PAGE - 1);
        let off = (addr - page) as usize;
        if off + 8 > PAGE as usize {
            // Straddles two pages: two reads.
            // (An address at the top of the address space, from a corrupt
            // stack, has no next page.)
            let lo = self.word(page + (PAGE - 8))?;
            let hi = self.word(page.checked_add(PAGE)?)?;
            let shift = (off - (PAGE as usize - 8)) * 8;
            return Some((lo >> shift) | (hi << (64 - shift)));
        }
        let i = self.page(page)?;
        let b = self.pages[i].1.get(off..off + 8)?;
        Some(u64::from_le_bytes(b.try_into().ok()?))
    }

    fn page(&mut self, page: u64) -> Option<usize> {
        if self.pages.get(self.last).is_some_and(|p| p.0 == page) {
            return Some(self.last);
        }
        if let Some(i) = self.pages.iter().position(|p| p.0 == page) {
            self.last = i;
            return Some(i);
        }
        if self.bad.contains(&page) || self.pages.len() >= MAX_PAGES {
            return None;
        }
        let mut buf = Box::new([0u8; PAGE as usize]);
        if self.mem.read(page, &mut buf[..]).is_err() {
            self.bad.push(page);
            return None;
        }
        self.pages.push((page, buf));
        self.last = self.pages.len() - 1;
        Some(self.last)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes of our own making (no process): each byte the low byte of
    /// its address, readable between 0x1000 and 0x3000.
    struct Fake;
    impl ProcessMemory for Fake {
        fn read(&self, addr: u64, buf: &mut [u8]) -> Result<()> {
            if !(0x1000..0x3000).contains(&addr) {
                return Err(Error::corrupt("unmapped"));
            }
            for (i, b) in buf.iter_mut().enumerate() {
                *b = (addr + i as u64) as u8;
            }
            Ok(())
        }
    }

    #[test]
    fn words_within_and_across_pages() {
        let mut s = StackPages::new(&Fake);
        assert_eq!(s.word(0x1008), Some(0x0f0e_0d0c_0b0a_0908));
        // Straddling two pages.
        assert_eq!(s.word(0x1ffc), Some(0x0302_0100_fffe_fdfc));
        assert_eq!(s.word(0x2ffc), None);
        assert_eq!(s.word(0x3008), None);
        // The last word of the address space straddles into nothing.
        assert_eq!(s.word(u64::MAX - 3), None);
    }
}
