//! tachyon's own standard error while the view has the terminal: kept in
//! a file and shown once the terminal is given back. Written to the
//! terminal, a message (a warning, the next process followed, why
//! sampling stopped) would be drawn over by the view and lost with it.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::OwnedFd;
use std::sync::Mutex;

/// Standard error's own descriptor (a duplicate) and the file standing in
/// for it.
struct Held {
    saved: OwnedFd,
    file: File,
}

static HELD: Mutex<Option<Held>> = Mutex::new(None);

/// The most of a held file shown afterwards (its end).
pub const KEEP: u64 = 64 * 1024;

/// The last `keep` bytes of `file` and whether it held more; `None` when
/// it is empty or unreadable.
pub fn tail(file: &mut File, keep: u64) -> Option<(Vec<u8>, bool)> {
    let len = file.seek(SeekFrom::End(0)).ok()?;
    if len == 0 {
        return None;
    }
    file.seek(SeekFrom::Start(len.saturating_sub(keep))).ok()?;
    let mut text = Vec::new();
    file.read_to_end(&mut text).ok()?;
    Some((text, len > keep))
}

/// An unnamed file (removed from its directory at once).
pub fn unnamed_file(what: &str) -> std::io::Result<File> {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let path = std::env::temp_dir().join(format!(
        "tachyon-{what}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)?;
    let _ = std::fs::remove_file(&path);
    Ok(file)
}

/// Send standard error to a file until [`release`].
pub fn hold() -> std::io::Result<()> {
    let mut held = HELD.lock().unwrap_or_else(|e| e.into_inner());
    if held.is_some() {
        return Ok(());
    }
    let file = unnamed_file("stderr")?;
    let saved = nix::unistd::dup(std::io::stderr())?;
    nix::unistd::dup2_stderr(&file)?;
    *held = Some(Held { saved, file });
    Ok(())
}

/// Give standard error back and show what was held (idempotent).
pub fn release() {
    let Some(mut h) = HELD.lock().unwrap_or_else(|e| e.into_inner()).take() else {
        return;
    };
    if nix::unistd::dup2_stderr(&h.saved).is_err() {
        return;
    }
    if let Some((text, _)) = tail(&mut h.file, KEEP) {
        let mut err = std::io::stderr().lock();
        let _ = err.write_all(&text).and_then(|()| err.flush());
    }
}
