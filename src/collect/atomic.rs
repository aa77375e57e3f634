//! The one way outputs reach a file: written beside it under a temporary
//! name, then renamed over it. A reader (or a later run) never sees half a
//! profile, an interrupted write leaves the old file as it was, and a write
//! that fails (a full disk) leaves nothing behind.
//!
//! Only regular files are replaced: `-o /dev/stdout`, `-o /dev/null` or a
//! named pipe are written in place (a rename would put a plain file where
//! the device was), and a symbolic link keeps pointing where it did, its
//! target being the file replaced.
//!
//! A binary recording is the exception ([`AtomicFile::in_place`]): it is
//! written where it was asked for from its first sample on, flushed and
//! synced as it goes, so that a killed run leaves a recording `replay`
//! reads up to its last block, not a hidden temporary.
//!
//! A run killed while writing a temporary leaves it behind: the next run
//! that writes beside it removes each `.NAME.PID.tmp` whose process is
//! gone, and says so.

use std::fs::File;
use std::io::{BufWriter, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// A file being written: `commit` puts it in place; dropping it without
/// committing removes the partial copy.
pub struct AtomicFile {
    path: PathBuf,
    /// The temporary copy, renamed to `path` on commit; `None` when
    /// writing in place (a device, a pipe).
    tmp: Option<PathBuf>,
    file: Option<BufWriter<File>>,
    /// Flushes also reach the disk (at most once a second, in the
    /// background): a recording written in place.
    durable: bool,
    syncer: Option<Syncer>,
    synced: std::time::Instant,
}

/// Syncs a file to the disk on request, on a thread of its own: a slow
/// disk never holds up the sampling.
struct Syncer {
    ask: Option<std::sync::mpsc::SyncSender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Syncer {
    fn new(file: File) -> Option<Syncer> {
        let (ask, asked) = std::sync::mpsc::sync_channel::<()>(1);
        let thread = std::thread::Builder::new()
            .name("tachyon-sync".into())
            .spawn(move || {
                for () in asked {
                    // The last sync, at the commit, reports errors.
                    let _ = file.sync_data();
                }
            })
            .ok()?;
        Some(Syncer {
            ask: Some(ask),
            thread: Some(thread),
        })
    }

    /// Ask for a sync, unless one is waiting already.
    fn request(&self) {
        if let Some(a) = &self.ask {
            let _ = a.try_send(());
        }
    }
}

impl Drop for Syncer {
    fn drop(&mut self) {
        self.ask = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// At most this often a durable file's flush syncs it to the disk.
const SYNC_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

impl AtomicFile {
    /// Start writing what will become `path`.
    pub fn create(path: &Path) -> Result<Self> {
        let cannot = |e| Error::io(format!("cannot write {}", path.display()), e);
        let (target, in_place) = match std::fs::metadata(path) {
            Ok(m) if !m.is_file() => (path.to_path_buf(), true),
            // A link to a regular file: replace what it points to.
            Ok(_) => (std::fs::canonicalize(path).map_err(cannot)?, false),
            Err(_) => (path.to_path_buf(), false),
        };
        if in_place {
            let file = File::create(path).map_err(cannot)?;
            return Ok(AtomicFile::new(target, None, file, false));
        }
        remove_stale_temporaries(&target);
        let tmp = temporary_name(&target, std::process::id());
        let file = File::create(&tmp).map_err(cannot)?;
        Ok(AtomicFile::new(target, Some(tmp), file, false))
    }

    /// Write `path` itself, from now on (it is truncated now): what is
    /// flushed is in the file, and is synced to the disk at most once a
    /// second. Dropped without a commit, the file stays as far as it got.
    pub fn in_place(path: &Path) -> Result<Self> {
        let cannot = |e| Error::io(format!("cannot write {}", path.display()), e);
        remove_stale_temporaries(path);
        let file = File::create(path).map_err(cannot)?;
        let regular = file.metadata().is_ok_and(|m| m.is_file());
        Ok(AtomicFile::new(path.to_path_buf(), None, file, regular))
    }

    fn new(path: PathBuf, tmp: Option<PathBuf>, file: File, durable: bool) -> Self {
        let syncer = if durable {
            file.try_clone().ok().and_then(Syncer::new)
        } else {
            None
        };
        AtomicFile {
            path,
            tmp,
            file: Some(BufWriter::with_capacity(1 << 16, file)),
            durable,
            syncer,
            synced: std::time::Instant::now(),
        }
    }

    /// The file's final name.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Flush and rename into place. On failure nothing is left behind.
    pub fn commit(mut self) -> Result<()> {
        let cannot = |e| Error::io(format!("cannot write {}", self.path.display()), e);
        let Some(w) = self.file.take() else {
            return Err(cannot(std::io::Error::other("already committed")));
        };
        let file = w.into_inner().map_err(|e| cannot(e.into_error()))?;
        self.syncer = None;
        let Some(tmp) = &self.tmp else {
            return if self.durable {
                file.sync_data().map_err(cannot)
            } else {
                Ok(())
            };
        };
        // On a disk that fills up, the data may only fail to fit now.
        file.sync_data()
            .and_then(|()| std::fs::rename(tmp, &self.path))
            .map_err(cannot)
    }

    fn writer(&mut self) -> std::io::Result<&mut BufWriter<File>> {
        self.file
            .as_mut()
            .ok_or_else(|| std::io::Error::other("already committed"))
    }
}

impl Drop for AtomicFile {
    fn drop(&mut self) {
        // Not committed (or the rename failed): the partial copy goes.
        if let Some(tmp) = &self.tmp
            && tmp.exists()
        {
            let _ = std::fs::remove_file(tmp);
        }
    }
}

impl Write for AtomicFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.writer()?.write(buf)
    }

    fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        self.writer()?.write_all(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.writer()?.flush()?;
        if let Some(s) = &self.syncer
            && self.synced.elapsed() >= SYNC_EVERY
        {
            s.request();
            self.synced = std::time::Instant::now();
        }
        Ok(())
    }
}

/// The temporary copy process `pid` writes of `target`.
fn temporary_name(target: &Path, pid: u32) -> PathBuf {
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    target.with_file_name(format!(".{name}.{pid}.tmp"))
}

/// The temporaries of `target` (`.NAME.PID.tmp` beside it) whose process
/// is gone, with its pid.
pub fn stale_temporaries(target: &Path) -> Vec<(PathBuf, u32)> {
    let (Some(dir), Some(name)) = (target.parent(), target.file_name()) else {
        return Vec::new();
    };
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    let prefix = format!(".{}.", name.to_string_lossy());
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut found: Vec<(PathBuf, u32)> = entries
        .filter_map(|e| {
            let e = e.ok()?;
            let file = e.file_name().into_string().ok()?;
            let pid: u32 = file
                .strip_prefix(&prefix)?
                .strip_suffix(".tmp")?
                .parse()
                .ok()?;
            let alive = pid == std::process::id() || Path::new(&format!("/proc/{pid}")).exists();
            (!alive && e.file_type().ok()?.is_file()).then(|| (e.path(), pid))
        })
        .collect();
    found.sort();
    found
}

/// Remove the stale temporaries of `target`, saying so on stderr.
fn remove_stale_temporaries(target: &Path) {
    for (tmp, pid) in stale_temporaries(target) {
        if std::fs::remove_file(&tmp).is_ok() {
            crate::errln!(
                "tachyon: removed {}, left by an interrupted run (process {pid}) writing {}",
                tmp.display(),
                target.display()
            );
        }
    }
}

impl Seek for AtomicFile {
    fn seek(&mut self, pos: SeekFrom) -> std::io::Result<u64> {
        self.writer()?.seek(pos)
    }
}

/// Write `bytes` as the whole of `path`, atomically.
pub fn write_file(path: &Path, bytes: &[u8]) -> Result<()> {
    let mut f = AtomicFile::create(path)?;
    f.write_all(bytes)
        .map_err(|e| Error::io(format!("cannot write {}", path.display()), e))?;
    f.commit()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("tachyon-atomic-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn a_committed_file_replaces_the_old_one_and_leaves_no_temporary() {
        let d = scratch("commit");
        let p = d.join("out.txt");
        std::fs::write(&p, b"old").unwrap();
        let mut f = AtomicFile::create(&p).unwrap();
        f.write_all(b"new contents").unwrap();
        // Until the commit, the old file stands.
        assert_eq!(std::fs::read(&p).unwrap(), b"old");
        f.commit().unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"new contents");
        let names: Vec<_> = std::fs::read_dir(&d).unwrap().collect();
        assert_eq!(names.len(), 1);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn devices_are_written_in_place_and_links_keep_pointing_at_their_file() {
        let d = scratch("special");
        // A character device stays one.
        let mut f = AtomicFile::create(Path::new("/dev/null")).unwrap();
        f.write_all(b"discarded").unwrap();
        f.commit().unwrap();
        use std::os::unix::fs::FileTypeExt;
        assert!(
            std::fs::metadata("/dev/null")
                .unwrap()
                .file_type()
                .is_char_device()
        );
        // A link to a regular file: the file is replaced, the link stays.
        let real = d.join("real.txt");
        let link = d.join("link.txt");
        std::fs::write(&real, b"old").unwrap();
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let mut f = AtomicFile::create(&link).unwrap();
        f.write_all(b"new").unwrap();
        f.commit().unwrap();
        assert!(
            std::fs::symlink_metadata(&link)
                .unwrap()
                .file_type()
                .is_symlink()
        );
        assert_eq!(std::fs::read(&real).unwrap(), b"new");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn temporaries_of_dead_runs_are_removed_and_live_ones_kept() {
        let d = scratch("stale");
        let p = d.join("out.json");
        // A pid no process has (above the kernel's pid_max of 2^22).
        let dead = temporary_name(&p, 4_999_999);
        let live = temporary_name(&p, 1);
        let other = d.join(".other.json.4999999.tmp");
        for f in [&dead, &live, &other] {
            std::fs::write(f, b"partial").unwrap();
        }
        assert_eq!(stale_temporaries(&p), vec![(dead.clone(), 4_999_999)]);
        write_file(&p, b"{}").unwrap();
        assert!(!dead.exists());
        assert!(live.exists() && other.exists());
        assert_eq!(std::fs::read(&p).unwrap(), b"{}");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_file_written_in_place_keeps_what_was_flushed_when_dropped() {
        let d = scratch("inplace");
        let p = d.join("rec.bin");
        {
            let mut f = AtomicFile::in_place(&p).unwrap();
            f.write_all(b"block one").unwrap();
            f.flush().unwrap();
            assert_eq!(std::fs::read(&p).unwrap(), b"block one");
            f.write_all(b", two").unwrap();
        }
        assert_eq!(std::fs::read(&p).unwrap(), b"block one, two");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn an_abandoned_file_leaves_the_old_one_alone() {
        let d = scratch("abandon");
        let p = d.join("out.bin");
        std::fs::write(&p, b"recording").unwrap();
        {
            let mut f = AtomicFile::create(&p).unwrap();
            f.write_all(&[0u8; 100_000]).unwrap();
        }
        assert_eq!(std::fs::read(&p).unwrap(), b"recording");
        let names: Vec<_> = std::fs::read_dir(&d).unwrap().collect();
        assert_eq!(names.len(), 1);
        std::fs::remove_dir_all(&d).unwrap();
    }
}
