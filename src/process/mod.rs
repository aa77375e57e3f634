//! Reading another process: its memory, its memory map, its files, its threads.
//!
//! Everything above this module talks to a [`ProcessMemory`]; it never knows
//! whether it reads a live process (the Linux reader here) or, later, a
//! snapshot file. Only Linux x86-64 is built and tested, so only the Linux
//! implementation exists; macOS and Windows readers would implement the same
//! trait.

pub mod maps;

#[cfg(target_os = "linux")]
pub mod linux;
#[cfg(target_os = "linux")]
pub mod ptrace;

use crate::error::Result;

/// One range to read: the remote address and the local buffer to fill.
pub struct ReadReq<'a> {
    pub addr: u64,
    pub buf: &'a mut [u8],
}

/// Random access to another process's memory.
pub trait ProcessMemory {
    /// Fill `buf` from `addr`; a short read is an error.
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<()>;

    /// Fill every request, in as few system calls as the platform allows.
    /// Fails if any range cannot be read completely.
    fn read_many(&self, reqs: &mut [ReadReq<'_>]) -> Result<()> {
        for r in reqs.iter_mut() {
            self.read(r.addr, r.buf)?;
        }
        Ok(())
    }

    /// The scheduler state letter of one OS thread (`R` running, `S`
    /// sleeping, ...), where the platform can tell.
    fn os_thread_state(&self, _tid: u64) -> Option<char> {
        None
    }

    /// Read one plain-old-data integer.
    fn read_u64(&self, addr: u64) -> Result<u64> {
        let mut b = [0u8; 8];
        self.read(addr, &mut b)?;
        Ok(u64::from_le_bytes(b))
    }
}

/// Little-endian field access into a local copy of a remote struct, bounds-checked:
/// a field outside the copy reads as an error, never a panic.
pub trait LocalBytes {
    fn u64_at(&self, off: u64) -> Option<u64>;
    fn u32_at(&self, off: u64) -> Option<u32>;
    fn i32_at(&self, off: u64) -> Option<i32>;
    fn u16_at(&self, off: u64) -> Option<u16>;
    fn u8_at(&self, off: u64) -> Option<u8>;
}

impl LocalBytes for [u8] {
    fn u64_at(&self, off: u64) -> Option<u64> {
        let o = usize::try_from(off).ok()?;
        self.get(o..o.checked_add(8)?)
            .map(|b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
    }
    fn u32_at(&self, off: u64) -> Option<u32> {
        let o = usize::try_from(off).ok()?;
        self.get(o..o.checked_add(4)?)
            .map(|b| u32::from_le_bytes(b.try_into().unwrap_or([0; 4])))
    }
    fn i32_at(&self, off: u64) -> Option<i32> {
        self.u32_at(off).map(|v| v as i32)
    }
    fn u16_at(&self, off: u64) -> Option<u16> {
        let o = usize::try_from(off).ok()?;
        self.get(o..o.checked_add(2)?)
            .map(|b| u16::from_le_bytes(b.try_into().unwrap_or([0; 2])))
    }
    fn u8_at(&self, off: u64) -> Option<u8> {
        self.get(usize::try_from(off).ok()?).copied()
    }
}
