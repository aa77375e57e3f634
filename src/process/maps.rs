//! `/proc/PID/maps` parsing: which files are mapped where.
//!
//! The runtime locator needs the start address and file offset of every
//! mapping of the interpreter's executable or `libpython`, to turn ELF
//! addresses into addresses in the target.

/// One line of `/proc/PID/maps`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MapEntry {
    pub start: u64,
    pub end: u64,
    pub perms: String,
    pub offset: u64,
    pub inode: u64,
    /// The path as the target sees it (inside its own root), without the
    /// ` (deleted)` suffix; `None` for anonymous mappings.
    pub path: Option<String>,
    /// The file was deleted (or replaced) after it was mapped.
    pub deleted: bool,
    /// The kernel's name of a mapping without a file (`[vdso]`,
    /// `[stack]`, `[heap]`).
    pub label: Option<String>,
}

impl MapEntry {
    /// The last path component, if this mapping has a file.
    pub fn basename(&self) -> Option<&str> {
        self.path
            .as_deref()
            .map(|p| p.rsplit('/').next().unwrap_or(p))
    }
}

/// Parse the text of a maps file. Malformed lines are skipped: the file is
/// the kernel's, but a reader must not panic on anything it did not expect.
pub fn parse_maps(text: &str) -> Vec<MapEntry> {
    text.lines().filter_map(parse_line).collect()
}

fn parse_line(line: &str) -> Option<MapEntry> {
    // start-end perms offset dev inode [path]; the path may contain spaces.
    let mut rest = line;
    let mut field = || {
        let s = rest.trim_start();
        let end = s.find(' ').unwrap_or(s.len());
        let (f, r) = s.split_at(end);
        rest = r;
        f
    };
    let range = field();
    let perms = field().to_string();
    let offset = u64::from_str_radix(field(), 16).ok()?;
    let _dev = field();
    let inode = field().parse().ok()?;
    let (start, end) = range.split_once('-')?;
    let start = u64::from_str_radix(start, 16).ok()?;
    let end = u64::from_str_radix(end, 16).ok()?;
    let raw_path = rest.trim_start();
    let label = raw_path.starts_with('[').then(|| raw_path.to_string());
    let (path, deleted) = if raw_path.is_empty() || raw_path.starts_with('[') {
        (None, false)
    } else if let Some(p) = raw_path.strip_suffix(" (deleted)") {
        (Some(p.to_string()), true)
    } else {
        (Some(raw_path.to_string()), false)
    };
    Some(MapEntry {
        start,
        end,
        perms,
        offset,
        inode,
        path,
        deleted,
        label,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_file_anonymous_special_and_deleted_lines() {
        let text = "\
55d0c0a00000-55d0c0a2d000 r--p 00000000 08:01 1234 /usr/bin/python3.13
7f0000000000-7f0000001000 rw-p 00000000 00:00 0 
7ffd1000-7ffd2000 rw-p 00000000 00:00 0                          [stack]
7f1000000000-7f1000100000 r-xp 00010000 08:01 99 /opt/my app/libpython3.13.so.1.0 (deleted)
garbage line
";
        let m = parse_maps(text);
        assert_eq!(m.len(), 4);
        assert_eq!(m[0].start, 0x55d0c0a00000);
        assert_eq!(m[0].end, 0x55d0c0a2d000);
        assert_eq!(m[0].basename(), Some("python3.13"));
        assert_eq!(m[0].inode, 1234);
        assert!(m[1].path.is_none());
        assert!(m[2].path.is_none());
        assert_eq!(
            m[3].path.as_deref(),
            Some("/opt/my app/libpython3.13.so.1.0")
        );
        assert!(m[3].deleted);
        assert_eq!(m[3].offset, 0x10000);
        assert_eq!(m[3].perms, "r-xp");
    }
}
