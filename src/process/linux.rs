//! The Linux reader: `process_vm_readv` with batched iovecs, `/proc/PID/mem`
//! as the fallback, `/proc/PID/maps`, `/proc/PID/root` for the target's own
//! files (containers, chroots), `/proc/PID/task` for its threads.

use std::cell::RefCell;
use std::fs::File;
use std::io::{self, IoSliceMut};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::OnceLock;

use nix::errno::Errno;
use nix::libc;
use nix::sys::uio::{RemoteIoVec, process_vm_readv, process_vm_writev};
use nix::unistd::Pid;

use super::gather::{MAX_GAP, Piece, Plan};
use super::maps::{MapEntry, parse_maps};
use super::{ProcessMemory, ReadReq};
use crate::error::{Error, Result};

/// The kernel's limit on iovecs per call (`IOV_MAX`).
const IOV_MAX: usize = 1024;

/// A live Linux process, read from outside.
pub struct LinuxProcess {
    pid: i32,
    /// Set once `process_vm_readv` turned out to be unavailable (seccomp in a
    /// container, or a kernel without it): then every read goes to this file.
    mem_fallback: OnceLock<Option<File>>,
    /// For a process in another PID namespace (a container): its thread ids
    /// as it sees them (what CPython records) mapped to ours. `None` until
    /// first needed; empty when the namespaces are the same.
    ns_tids: RefCell<Option<Vec<(u64, u64)>>>,
    /// The merged read's plan and iovecs, kept from call to call.
    gather: RefCell<Gather>,
    /// Whether this process is our child (`tachyon run` started it), once
    /// looked up: that never changes while it lives.
    pub(crate) our_child: OnceLock<bool>,
    /// `/proc/PID/task`, open once and read again from the start at each
    /// listing (`--blocking` lists the threads twice a sample).
    task_dir: RefCell<Option<nix::dir::Dir>>,
}

/// How a merged read went.
enum Merged {
    Done,
    /// It stopped in request number `.0` (the first unreadable byte is in
    /// its range).
    StoppedIn(usize),
    /// Too many ranges for one call, or the scratch space was in use.
    NotTried,
}

/// What a merged read needs besides the requests: the plan, the iovecs
/// (raw, since every gap points into the one scratch sink) and the sink.
#[derive(Default)]
struct Gather {
    plan: Plan,
    local: Vec<libc::iovec>,
    remote: Vec<libc::iovec>,
    sink: Vec<u8>,
}

impl LinuxProcess {
    /// Open a process by PID: checks it exists, nothing else.
    pub fn open(pid: i32) -> Result<Self> {
        if pid <= 0 {
            return Err(Error::NoSuchProcess { pid });
        }
        match std::fs::metadata(format!("/proc/{pid}")) {
            Ok(_) => Ok(LinuxProcess {
                pid,
                mem_fallback: OnceLock::new(),
                ns_tids: RefCell::new(None),
                gather: RefCell::new(Gather::default()),
                our_child: OnceLock::new(),
                task_dir: RefCell::new(None),
            }),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Err(Error::NoSuchProcess { pid }),
            Err(e) => Err(Error::io(format!("cannot look at /proc/{pid}"), e)),
        }
    }

    /// Open a process and read it through `/proc/PID/mem` only, as when
    /// `process_vm_readv` is unavailable (seccomp in containers). Lets the
    /// fallback path be tested on a machine where the fast path works.
    pub fn open_via_proc_mem(pid: i32) -> Result<Self> {
        let p = Self::open(pid)?;
        let f = File::open(format!("/proc/{pid}/mem"))
            .map_err(|e| p.classify_io(e, "open the memory"))?;
        let _ = p.mem_fallback.set(Some(f));
        Ok(p)
    }

    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Is the process still there (and not a zombie)?
    pub fn is_alive(&self) -> bool {
        match std::fs::read_to_string(format!("/proc/{}/stat", self.pid)) {
            Ok(s) => !matches!(stat_state(&s), Some('Z') | Some('X')),
            Err(_) => false,
        }
    }

    /// The memory map, freshly read.
    pub fn maps(&self) -> Result<Vec<MapEntry>> {
        let path = format!("/proc/{}/maps", self.pid);
        match std::fs::read_to_string(&path) {
            Ok(text) => Ok(parse_maps(&text)),
            Err(e) => Err(self.classify_io(e, "read the memory map")),
        }
    }

    /// A path inside the target's root (its container or chroot), so a file
    /// named in its maps can be opened from outside.
    pub fn root_path(&self, path: &str) -> PathBuf {
        PathBuf::from(format!("/proc/{}/root{}", self.pid, path))
    }

    /// Open the file behind a mapping, checked to be that file (its inode).
    ///
    /// The kernel writes the paths of `/proc/PID/maps` relative to the
    /// *reader's* root. For a process in its own mount namespace (a
    /// container) that is a path inside its root, so it is opened below
    /// `/proc/PID/root`; for a chroot in our namespace it is already a path
    /// in our root, the chroot directory included (which `/proc/PID/root`
    /// also names): opened as it is, or below `/proc/PID/root` with that
    /// prefix taken off. A file deleted or replaced since it was mapped is
    /// opened through `map_files` (which needs CAP_SYS_ADMIN).
    pub fn open_mapped_file(&self, m: &MapEntry) -> Result<File> {
        let path = m.path.as_deref().unwrap_or("");
        if !m.deleted {
            let mut candidates = vec![self.root_path(path)];
            let root_link = std::fs::read_link(format!("/proc/{}/root", self.pid)).ok();
            if let Some(rest) = root_link
                .as_deref()
                .and_then(|r| r.to_str())
                .filter(|r| *r != "/")
                .and_then(|r| path.strip_prefix(r))
                .filter(|rest| rest.starts_with('/'))
            {
                candidates.push(self.root_path(rest));
            }
            candidates.push(PathBuf::from(path));
            let mut first_opened: Option<File> = None;
            for (i, c) in candidates.iter().enumerate() {
                match File::open(c) {
                    Ok(f) => {
                        use std::os::unix::fs::MetadataExt;
                        if f.metadata().is_ok_and(|md| md.ino() == m.inode) {
                            return Ok(f);
                        }
                        first_opened.get_or_insert(f);
                    }
                    // No access to the target's root at all.
                    Err(e) if i == 0 && e.kind() == io::ErrorKind::PermissionDenied => {
                        return Err(self.classify_io(e, "open the target's files"));
                    }
                    Err(_) => {}
                }
            }
            // Some filesystems (overlays) show another inode number in the
            // map than in the file's metadata: trust the target's root.
            if let Some(f) = first_opened {
                return Ok(f);
            }
        }
        let mf = format!("/proc/{}/map_files/{:x}-{:x}", self.pid, m.start, m.end);
        File::open(&mf).map_err(|e| {
            Error::io(
                format!(
                    "cannot open {path} of process {} (also tried {mf})",
                    self.pid
                ),
                e,
            )
        })
    }

    /// Native thread ids of the process, as listed in `/proc/PID/task`.
    pub fn thread_ids(&self) -> Result<Vec<i32>> {
        let mut dir = self.task_dir.borrow_mut();
        if dir.is_none() {
            let path = format!("/proc/{}/task", self.pid);
            let opened = nix::dir::Dir::open(
                path.as_str(),
                nix::fcntl::OFlag::O_RDONLY | nix::fcntl::OFlag::O_DIRECTORY,
                nix::sys::stat::Mode::empty(),
            )
            .map_err(|e| {
                self.classify_io(std::io::Error::from_raw_os_error(e as i32), "list threads")
            })?;
            *dir = Some(opened);
        }
        let Some(d) = dir.as_mut() else {
            return Ok(Vec::new());
        };
        // The iterator rewinds the directory when it is dropped.
        let mut tids = Vec::new();
        for entry in d.iter() {
            match entry {
                Ok(e) => tids.extend(
                    e.file_name()
                        .to_str()
                        .ok()
                        .and_then(|n| n.parse::<i32>().ok()),
                ),
                // The process is gone (its directory empties) or unreadable.
                Err(e) => {
                    return Err(self
                        .classify_io(std::io::Error::from_raw_os_error(e as i32), "list threads"));
                }
            }
        }
        tids.sort_unstable();
        Ok(tids)
    }

    /// The kernel's scheduler state letter for one thread (`R` running,
    /// `S` sleeping, ...), or `None` when it cannot be read.
    pub fn thread_state(&self, tid: u64) -> Option<char> {
        let host = self.host_tid(tid)?;
        let s = std::fs::read_to_string(format!("/proc/{}/task/{host}/stat", self.pid)).ok()?;
        stat_state(&s)
    }

    /// Our id for a thread id as the target sees it. They differ when the
    /// target lives in its own PID namespace (a container); the kernel says
    /// so in the `NSpid` line of each thread's status (ours first, the
    /// innermost namespace's last).
    pub fn host_tid(&self, tid: u64) -> Option<u64> {
        let lookup = |map: &Vec<(u64, u64)>| map.iter().find(|(ns, _)| *ns == tid).map(|(_, h)| *h);
        {
            let cached = self.ns_tids.borrow();
            match cached.as_ref() {
                Some(map) if map.is_empty() => return Some(tid),
                Some(map) => {
                    if let Some(h) = lookup(map) {
                        return Some(h);
                    }
                }
                None => {}
            }
        }
        // First use, or a thread we have not seen: (re)build the map.
        let own_ns = nspid(&format!("/proc/{}/status", self.pid)).is_none_or(|v| v.len() < 2);
        let map: Vec<(u64, u64)> = if own_ns {
            Vec::new()
        } else {
            self.thread_ids()
                .unwrap_or_default()
                .into_iter()
                .filter_map(|h| {
                    let ids = nspid(&format!("/proc/{}/task/{h}/status", self.pid))?;
                    Some((*ids.last()?, h as u64))
                })
                .collect()
        };
        let found = if map.is_empty() {
            Some(tid)
        } else {
            lookup(&map)
        };
        *self.ns_tids.borrow_mut() = Some(map);
        found
    }

    fn classify_io(&self, e: io::Error, what: &str) -> Error {
        match e.raw_os_error() {
            Some(libc_errno)
                if libc_errno == Errno::ENOENT as i32 || libc_errno == Errno::ESRCH as i32 =>
            {
                if std::fs::metadata(format!("/proc/{}", self.pid)).is_ok() {
                    Error::io(format!("cannot {what} of process {}", self.pid), e)
                } else {
                    Error::ProcessExited { pid: self.pid }
                }
            }
            Some(x) if x == Errno::EPERM as i32 || x == Errno::EACCES as i32 => {
                Error::PermissionDenied {
                    pid: self.pid,
                    hint: permission_hint(),
                }
            }
            _ => Error::io(format!("cannot {what} of process {}", self.pid), e),
        }
    }

    fn errno_to_error(&self, errno: Errno, addr: u64, len: usize) -> Error {
        match errno {
            Errno::ESRCH => Error::ProcessExited { pid: self.pid },
            Errno::EPERM | Errno::EACCES => Error::PermissionDenied {
                pid: self.pid,
                hint: permission_hint(),
            },
            e => Error::Read {
                addr,
                len,
                cause: io::Error::from_raw_os_error(e as i32),
            },
        }
    }

    fn mem_file(&self) -> Option<&File> {
        self.mem_fallback.get().and_then(|f| f.as_ref())
    }

    /// Switch to `/proc/PID/mem` after `process_vm_readv` refused with
    /// `errno`; returns false if the file cannot be opened either.
    fn try_fallback(&self, errno: Errno) -> bool {
        if !matches!(errno, Errno::ENOSYS | Errno::EPERM) {
            return false;
        }
        let f = self
            .mem_fallback
            .get_or_init(|| File::open(format!("/proc/{}/mem", self.pid)).ok());
        f.is_some()
    }

    fn read_via_file(&self, f: &File, addr: u64, buf: &mut [u8]) -> Result<()> {
        let mut done = 0;
        while done < buf.len() {
            match f.read_at(&mut buf[done..], addr.wrapping_add(done as u64)) {
                Ok(0) => {
                    return Err(Error::Read {
                        addr,
                        len: buf.len(),
                        cause: io::Error::from(io::ErrorKind::UnexpectedEof),
                    });
                }
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    let errno = Errno::from_raw(e.raw_os_error().unwrap_or(0));
                    return Err(self.errno_to_error(errno, addr, buf.len()));
                }
            }
        }
        Ok(())
    }

    /// Every request in one `process_vm_readv`, ranges that share pages
    /// merged (see [`super::gather`]): done, stopped in a request (the
    /// caller reads that one alone for the precise error), or not tried
    /// when the plan does not fit one call.
    fn read_merged(&self, reqs: &mut [ReadReq<'_>], then: usize) -> Merged {
        let Ok(mut g) = self.gather.try_borrow_mut() else {
            return Merged::NotTried;
        };
        let g = &mut *g;
        g.plan
            .build_then(reqs.iter().map(|r| (r.addr, r.buf.len())), then);
        if g.plan.remote.len() > IOV_MAX || g.plan.local.len() > IOV_MAX {
            return Merged::NotTried;
        }
        if g.sink.len() < MAX_GAP as usize {
            g.sink.resize(MAX_GAP as usize, 0);
        }
        g.remote.clear();
        g.remote
            .extend(g.plan.remote.iter().map(|&(addr, len)| libc::iovec {
                iov_base: addr as usize as *mut libc::c_void,
                iov_len: len,
            }));
        g.local.clear();
        let sink = g.sink.as_mut_ptr();
        for piece in &g.plan.local {
            g.local.push(match *piece {
                Piece::Req(i) => {
                    let buf = &mut *reqs[i as usize].buf;
                    libc::iovec {
                        iov_base: buf.as_mut_ptr().cast(),
                        iov_len: buf.len(),
                    }
                }
                Piece::Gap(n) => libc::iovec {
                    iov_base: sink.cast(),
                    iov_len: n as usize,
                },
            });
        }
        // SAFETY: every local iovec points into a live buffer of at least
        // its length: a request's own buffer (borrowed mutably through
        // `reqs` for this call) or the sink (at least MAX_GAP bytes, and a
        // gap is at most MAX_GAP). Several gaps share the sink; what lands
        // there is never read. The remote iovecs name the target's memory,
        // which the kernel checks.
        let n = unsafe {
            libc::process_vm_readv(
                self.pid,
                g.local.as_ptr(),
                g.local.len() as libc::c_ulong,
                g.remote.as_ptr(),
                g.remote.len() as libc::c_ulong,
                0,
            )
        };
        match g.plan.stopped_in(n.max(0) as usize) {
            None => Merged::Done,
            Some(i) => Merged::StoppedIn(i as usize),
        }
    }

    /// One `process_vm_readv` over up to IOV_MAX ranges. Returns the number
    /// of requests (from the front) that were filled completely.
    fn readv_batch(&self, reqs: &mut [ReadReq<'_>]) -> std::result::Result<usize, Errno> {
        if let [r] = reqs {
            // One range (every `read`): no lists to allocate.
            let len = r.buf.len();
            let remote = [RemoteIoVec {
                base: r.addr as usize,
                len,
            }];
            let mut local = [IoSliceMut::new(r.buf)];
            let n = process_vm_readv(Pid::from_raw(self.pid), &mut local, &remote)?;
            return Ok(usize::from(n >= len));
        }
        let remote: Vec<RemoteIoVec> = reqs
            .iter()
            .map(|r| RemoteIoVec {
                base: r.addr as usize,
                len: r.buf.len(),
            })
            .collect();
        let mut local: Vec<IoSliceMut<'_>> =
            reqs.iter_mut().map(|r| IoSliceMut::new(r.buf)).collect();
        let n = process_vm_readv(Pid::from_raw(self.pid), &mut local, &remote)?;
        // Count whole requests covered by the n bytes transferred.
        let mut left = n;
        let mut full = 0;
        for r in remote.iter() {
            if left >= r.len {
                left -= r.len;
                full += 1;
            } else {
                break;
            }
        }
        Ok(full)
    }
}

impl super::Target for LinuxProcess {
    fn pid(&self) -> i32 {
        LinuxProcess::pid(self)
    }

    fn maps(&self) -> Result<Vec<MapEntry>> {
        LinuxProcess::maps(self)
    }

    fn open_mapped_file(&self, m: &MapEntry) -> Result<File> {
        LinuxProcess::open_mapped_file(self, m)
    }

    fn open_in_root(&self, path: &str) -> std::io::Result<File> {
        File::open(self.root_path(path)).or_else(|_| File::open(path))
    }

    fn thread_ids(&self) -> Result<Vec<i32>> {
        LinuxProcess::thread_ids(self)
    }

    fn host_tid(&self, tid: u64) -> Option<u64> {
        LinuxProcess::host_tid(self, tid)
    }

    /// Exited, a zombie, or exiting (its address space already torn
    /// down, so its /proc entry has an empty map; only kernel threads have
    /// an empty map for life).
    fn has_exited(&self) -> bool {
        !self.is_alive()
            || (LinuxProcess::maps(self).unwrap_or_default().is_empty()
                && !is_kernel_thread(self.pid))
    }
}

/// Whether `pid` is a kernel thread (`PF_KTHREAD` in the flags field of
/// `/proc/PID/stat`).
fn is_kernel_thread(pid: i32) -> bool {
    const PF_KTHREAD: u64 = 0x0020_0000;
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            // Fields after the command name: state, ppid, pgrp, session,
            // tty_nr, tpgid, flags.
            let after = &s[s.rfind(')')? + 1..];
            after.split_whitespace().nth(6)?.parse::<u64>().ok()
        })
        .is_some_and(|flags| flags & PF_KTHREAD != 0)
}

impl ProcessMemory for LinuxProcess {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<()> {
        if buf.is_empty() {
            return Ok(());
        }
        if let Some(f) = self.mem_file() {
            return self.read_via_file(f, addr, buf);
        }
        let len = buf.len();
        let mut one = [ReadReq { addr, buf }];
        match self.readv_batch(&mut one) {
            Ok(1) => Ok(()),
            Ok(_) => Err(Error::Read {
                addr,
                len,
                cause: io::Error::from(io::ErrorKind::UnexpectedEof),
            }),
            Err(e) if self.try_fallback(e) => {
                let f = self.mem_file().expect("fallback file was just opened");
                self.read_via_file(f, addr, one[0].buf)
            }
            Err(e) => Err(self.errno_to_error(e, addr, len)),
        }
    }

    fn os_thread_state(&self, tid: u64) -> Option<char> {
        self.thread_state(tid)
    }

    fn thread_comm(&self, tid: u64) -> Option<String> {
        let host = self.host_tid(tid)?;
        let s = std::fs::read(format!("/proc/{}/task/{host}/comm", self.pid)).ok()?;
        let s = String::from_utf8_lossy(&s);
        let name = s.strip_suffix('\n').unwrap_or(&s);
        (!name.is_empty()).then(|| name.to_owned())
    }

    /// One `process_vm_writev` (no fallback: a target that cannot be
    /// written to is read without the frame cache).
    fn write(&self, addr: u64, bytes: &[u8]) -> Result<()> {
        let remote = [RemoteIoVec {
            base: addr as usize,
            len: bytes.len(),
        }];
        let local = [std::io::IoSlice::new(bytes)];
        match process_vm_writev(Pid::from_raw(self.pid), &local, &remote) {
            Ok(n) if n == bytes.len() => Ok(()),
            Ok(_) => Err(Error::Read {
                addr,
                len: bytes.len(),
                cause: io::Error::from(io::ErrorKind::WriteZero),
            }),
            Err(e) => Err(self.errno_to_error(e, addr, bytes.len())),
        }
    }

    fn read_many(&self, reqs: &mut [ReadReq<'_>]) -> Result<()> {
        self.read_many_then(reqs, usize::MAX)
    }

    /// One merged call, the requests from `then` on last (see
    /// [`super::gather::Plan::build_then`]); past a failure, the requests
    /// one batch after another, still in their order.
    fn read_many_then(&self, reqs: &mut [ReadReq<'_>], then: usize) -> Result<()> {
        if self.mem_file().is_some() {
            for r in reqs.iter_mut() {
                self.read(r.addr, r.buf)?;
            }
            return Ok(());
        }
        if reqs.len() > 1 {
            match self.read_merged(reqs, then) {
                Merged::Done => return Ok(()),
                // Most often a range that is gone (a thread ended): its own
                // read gives the precise error in one more call. If it
                // reads now, its memory changed meanwhile: read all again.
                Merged::StoppedIn(i) => {
                    let r = &mut reqs[i];
                    self.read(r.addr, r.buf)?;
                }
                Merged::NotTried => {}
            }
        }
        let mut start = 0;
        while start < reqs.len() {
            // Skip empty requests: a zero-length iovec would look like a short read.
            if reqs[start].buf.is_empty() {
                start += 1;
                continue;
            }
            let end = (start + IOV_MAX).min(reqs.len());
            match self.readv_batch(&mut reqs[start..end]) {
                Ok(0) => {
                    let r = &mut reqs[start];
                    // Let the single read produce the precise error (or succeed
                    // through the fallback).
                    self.read(r.addr, r.buf)?;
                    start += 1;
                }
                Ok(n) => start += n,
                Err(e) if self.try_fallback(e) => {
                    return self.read_many_then(&mut reqs[start..], 0);
                }
                Err(e) => {
                    let r = &reqs[start];
                    return Err(self.errno_to_error(e, r.addr, r.buf.len()));
                }
            }
        }
        Ok(())
    }
}

/// Watches one process for its exit, cheaply: a pidfd polled without
/// waiting (one system call) instead of reading `/proc/PID/stat` (eight,
/// and the kernel formatting fifty fields). The sampling loop asks at every
/// slice of a long sleep, fifty times a second at low rates, where the
/// `/proc` reads were most of an idle profiler's CPU. A pidfd also stays
/// with the process it was opened for: a PID reused after the exit is not
/// taken for the target. Without pidfds (kernels before 5.3) it reads
/// `/proc` as before.
pub struct ExitWatch {
    pid: i32,
    pidfd: Option<std::os::fd::OwnedFd>,
}

impl ExitWatch {
    pub fn new(pid: i32) -> Self {
        // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
        let fd =
            unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::c_long, 0 as libc::c_long) };
        let pidfd = (fd >= 0).then(|| {
            use std::os::fd::FromRawFd;
            // SAFETY: the fd was just returned to us and is owned by no one else.
            unsafe { std::os::fd::OwnedFd::from_raw_fd(fd as i32) }
        });
        ExitWatch { pid, pidfd }
    }

    /// Is the process still running (not exited, not a zombie)?
    pub fn alive(&self) -> bool {
        let Some(fd) = &self.pidfd else {
            return LinuxProcess::open(self.pid).is_ok_and(|p| p.is_alive());
        };
        use std::os::fd::AsRawFd;
        let mut p = libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        loop {
            // SAFETY: one valid pollfd, no wait.
            match unsafe { libc::poll(&mut p, 1, 0) } {
                // Readable once the process has exited.
                0 => return true,
                n if n > 0 => {
                    return p.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) == 0;
                }
                _ if Errno::last() == Errno::EINTR => continue,
                _ => return LinuxProcess::open(self.pid).is_ok_and(|p| p.is_alive()),
            }
        }
    }
}

/// The process a thread id belongs to: `Some(tgid)` when `tid` names a
/// thread other than the main thread of its process (`/proc` answers for
/// any thread id, though it lists only processes); `None` when `tid` is a
/// process id, or unknown (opening it then says why).
pub fn process_of_thread(tid: i32) -> Option<i32> {
    if tid <= 0 {
        return None;
    }
    let status = std::fs::read_to_string(format!("/proc/{tid}/status")).ok()?;
    let tgid = status
        .lines()
        .find_map(|l| l.strip_prefix("Tgid:"))?
        .trim()
        .parse::<i32>()
        .ok()?;
    (tgid > 0 && tgid != tid).then_some(tgid)
}

/// The ids of the `NSpid:` line of a status file, outermost namespace first.
fn nspid(path: &str) -> Option<Vec<u64>> {
    let s = std::fs::read_to_string(path).ok()?;
    let line = s.lines().find_map(|l| l.strip_prefix("NSpid:"))?;
    Some(
        line.split_whitespace()
            .filter_map(|v| v.parse().ok())
            .collect(),
    )
}

/// The state letter of a `/proc/.../stat` line: the field after the last `)`
/// (the command name may itself contain parentheses and spaces).
fn stat_state(stat: &str) -> Option<char> {
    let after = &stat[stat.rfind(')')? + 1..];
    after.trim_start().chars().next()
}

/// What the user can do about a permission error, for this machine's actual
/// configuration: are we root, do we have CAP_SYS_PTRACE, what does Yama say.
pub fn permission_hint() -> String {
    let euid = nix::unistd::geteuid();
    let has_cap = has_cap_sys_ptrace();
    let scope = std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope")
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok());
    if euid.is_root() || has_cap {
        return match scope {
            Some(3) => "Yama ptrace_scope is 3, which disables ptrace for everyone until reboot".into(),
            _ => "tachyon already runs with ptrace rights, so something else refuses: a container's seccomp profile or a security module (SELinux, AppArmor); in a container, run with --cap-add SYS_PTRACE".into(),
        };
    }
    match scope {
        Some(1) => "Yama ptrace_scope is 1 (only a parent may read its child): run tachyon with sudo, grant it the capability (sudo setcap cap_sys_ptrace+ep $(command -v tachyon)), or start the program with `tachyon run`".into(),
        Some(2) => "Yama ptrace_scope is 2 (admin only): run tachyon with sudo or grant it CAP_SYS_PTRACE (sudo setcap cap_sys_ptrace+ep $(command -v tachyon))".into(),
        Some(3) => "Yama ptrace_scope is 3, which disables ptrace for everyone until reboot".into(),
        _ => "the process belongs to another user: run tachyon as that user or with sudo".into(),
    }
}

fn has_cap_sys_ptrace() -> bool {
    const CAP_SYS_PTRACE: u32 = 19;
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        })
        .is_some_and(|caps| caps & (1 << CAP_SYS_PTRACE) != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_id_resolves_to_its_process() {
        let me = std::process::id() as i32;
        assert_eq!(process_of_thread(me), None);
        let (tx, rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let t = std::thread::spawn(move || {
            tx.send(nix::unistd::gettid().as_raw()).unwrap();
            // Alive until the test has looked.
            let _ = done_rx.recv();
        });
        let tid = rx.recv().unwrap();
        let got = process_of_thread(tid);
        done_tx.send(()).unwrap();
        t.join().unwrap();
        assert_eq!(got, Some(me));
        assert_eq!(process_of_thread(0), None);
    }

    #[test]
    fn exit_watch_sees_a_zombie_and_a_reaped_process_as_gone() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        let watch = ExitWatch::new(pid);
        assert!(watch.pidfd.is_some(), "pidfd_open failed on this kernel");
        let alive_then = watch.alive();
        child.kill().unwrap();
        // Killed, not yet reaped: a zombie, which is gone for a profiler.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while watch.alive() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let zombie_gone = !watch.alive();
        let _ = child.wait();
        assert!(alive_then, "a running process was taken for gone");
        assert!(zombie_gone, "a killed process still looked alive");
        assert!(!watch.alive(), "a reaped process looked alive");
    }

    #[test]
    fn stat_state_handles_parentheses_in_the_name() {
        assert_eq!(stat_state("123 (python) S 1 2 3"), Some('S'));
        assert_eq!(stat_state("123 (a) b) R 1 2 3"), Some('R'));
        assert_eq!(stat_state("garbage"), None);
    }

    #[test]
    fn reads_own_memory_in_batches_and_reports_bad_addresses() {
        let me = LinuxProcess::open(std::process::id() as i32).unwrap();
        let data: Vec<u8> = (0..5000u32).map(|i| (i % 251) as u8).collect();
        let base = data.as_ptr() as u64;
        let mut a = [0u8; 16];
        let mut b = vec![0u8; 3000];
        let mut reqs = [
            ReadReq {
                addr: base + 10,
                buf: &mut a,
            },
            ReadReq {
                addr: base + 1000,
                buf: &mut b,
            },
        ];
        me.read_many(&mut reqs).unwrap();
        assert_eq!(&a[..], &data[10..26]);
        assert_eq!(&b[..], &data[1000..4000]);
        let mut c = [0u8; 8];
        let err = me.read(8, &mut c).unwrap_err();
        assert!(matches!(err, Error::Read { addr: 8, .. }), "{err}");
        assert!(LinuxProcess::open(-5).is_err());
    }
}
