//! Collapsed stacks (`frame;frame;...;leaf N` a line), as tachyon and the
//! reference write them: the one parser every test reads them with.
//!
//! The parser is strict: a line that is not a stack, a space and a count
//! fails the test that reads it, with the line.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The `(stack, count)` lines of a collapsed text, in order.
pub fn parse(text: &str) -> Vec<(String, u64)> {
    text.lines()
        .map(|l| {
            let (stack, n) = l
                .rsplit_once(' ')
                .unwrap_or_else(|| panic!("not a `stack count` line: {l:?}"));
            let n = n
                .parse()
                .unwrap_or_else(|_| panic!("no count at the end of {l:?}"));
            assert!(!stack.is_empty(), "a count without a stack: {l:?}");
            (stack.to_owned(), n)
        })
        .collect()
}

/// [`parse`] of the collapsed file at `path` (which must be there).
pub fn read(path: &Path) -> Vec<(String, u64)> {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("no profile {}: {e}", path.display()));
    parse(&text)
}

/// Every sample of the lines.
pub fn total(lines: &[(String, u64)]) -> u64 {
    lines.iter().map(|(_, n)| n).sum()
}

/// Samples of the lines whose stack contains `needle` anywhere.
pub fn samples_with(lines: &[(String, u64)], needle: &str) -> u64 {
    lines
        .iter()
        .filter(|(s, _)| s.contains(needle))
        .map(|(_, n)| n)
        .sum()
}

/// Samples of the lines with a frame of function `func` (`file:func:line`).
pub fn samples_in(lines: &[(String, u64)], func: &str) -> u64 {
    let needle = format!(":{func}:");
    lines
        .iter()
        .filter(|(s, _)| frames(s).any(|f| f.contains(&needle)))
        .map(|(_, n)| n)
        .sum()
}

/// The distinct stacks of the lines.
pub fn stacks(lines: &[(String, u64)]) -> BTreeSet<String> {
    lines.iter().map(|(s, _)| s.clone()).collect()
}

/// The lines as a map from stack to count; every stack is on one line.
pub fn by_stack(lines: &[(String, u64)]) -> BTreeMap<String, u64> {
    let mut map = BTreeMap::new();
    for (s, n) in lines {
        assert!(map.insert(s.clone(), *n).is_none(), "two lines of {s:?}");
    }
    map
}

/// The frames of a stack, root first.
pub fn frames(stack: &str) -> impl DoubleEndedIterator<Item = &str> {
    stack.split(';')
}

/// A frame's `(file, function, line)` when it is `file:func:line` (the
/// function may hold `:`); `None` for a synthetic frame's bare name.
pub fn frame_parts(frame: &str) -> Option<(&str, &str, &str)> {
    let (rest, line) = frame.rsplit_once(':')?;
    let (file, func) = rest.split_once(':')?;
    Some((file, func, line))
}
