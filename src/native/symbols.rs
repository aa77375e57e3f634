//! One module's function symbols: `.symtab` when the file has it, else the
//! exported `.dynsym`, sorted by address for lookup, names demangled
//! (C++ Itanium and Rust) once when the table is built.
//!
//! Everything comes from a file on disk that the target mapped: a symbol
//! with an impossible range or a name that is not UTF-8 is skipped, never
//! trusted.

use goblin::elf::Elf;
use goblin::elf::sym::{STT_FUNC, STT_GNU_IFUNC};

/// A function's address range (in the file's own addresses, SVMA) and its
/// index in the names list.
#[derive(Debug, Clone, Copy)]
struct Sym {
    start: u64,
    end: u64,
    name: u32,
}

/// Symbols in the file's own address space, sorted by start.
#[derive(Debug, Default)]
pub struct Symbols {
    syms: Vec<Sym>,
    names: Vec<Box<str>>,
}

/// Symbols kept per module at most: a bound on what one module costs.
const MAX_SYMBOLS: usize = 1 << 20;

impl Symbols {
    /// The function symbols of `elf`: the full table when there is one,
    /// the exported ones otherwise.
    pub fn of(elf: &Elf<'_>) -> Symbols {
        let mut s = Symbols::default();
        let mut add = |start: u64, size: u64, name: Option<&str>| {
            let Some(name) = name.filter(|n| !n.is_empty()) else {
                return;
            };
            if start == 0 || s.syms.len() >= MAX_SYMBOLS {
                return;
            }
            let end = start.saturating_add(size.max(1));
            s.names.push(demangle(name).into());
            s.syms.push(Sym {
                start,
                end,
                name: (s.names.len() - 1) as u32,
            });
        };
        let is_func = |t: u8| t == STT_FUNC || t == STT_GNU_IFUNC;
        if !elf.syms.is_empty() {
            for sym in elf.syms.iter().filter(|y| is_func(y.st_type())) {
                add(sym.st_value, sym.st_size, elf.strtab.get_at(sym.st_name));
            }
        }
        for sym in elf.dynsyms.iter().filter(|y| is_func(y.st_type())) {
            add(sym.st_value, sym.st_size, elf.dynstrtab.get_at(sym.st_name));
        }
        s.syms.sort_by_key(|y| (y.start, std::cmp::Reverse(y.end)));
        s.syms.dedup_by_key(|y| y.start);
        s
    }

    /// The function containing `svma`, if a symbol covers it.
    pub fn lookup(&self, svma: u64) -> Option<&str> {
        self.lookup_start(svma).map(|(_, name)| name)
    }

    /// The start and name of the function containing `svma`.
    pub fn lookup_start(&self, svma: u64) -> Option<(u64, &str)> {
        let i = self.syms.partition_point(|y| y.start <= svma);
        let y = self.syms.get(i.checked_sub(1)?)?;
        (svma < y.end).then(|| (y.start, &*self.names[y.name as usize]))
    }

    /// The address range of the function named `name` (exactly), if any.
    pub fn range_of(&self, name: &str) -> Option<std::ops::Range<u64>> {
        self.syms
            .iter()
            .find(|y| &*self.names[y.name as usize] == name)
            .map(|y| y.start..y.end)
    }

    pub fn len(&self) -> usize {
        self.syms.len()
    }

    pub fn is_empty(&self) -> bool {
        self.syms.is_empty()
    }
}

/// A symbol as a person reads it: Rust and C++ names demangled, others
/// (C) as they are.
pub fn demangle(name: &str) -> String {
    if let Ok(d) = rustc_demangle::try_demangle(name) {
        return format!("{d:#}");
    }
    // C++: without parameters and return type, as profilers (and py-spy)
    // name functions; templates stay.
    let short = cpp_demangle::DemangleOptions::new()
        .no_params()
        .no_return_type();
    if name.starts_with("_Z")
        && let Ok(sym) = cpp_demangle::Symbol::new(name)
        && let Ok(d) = sym.demangle_with_options(&short)
    {
        return d;
    }
    name.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn demangles_cpp_and_rust_and_keeps_c() {
        assert_eq!(demangle("_ZN3foo3barEv"), "foo::bar");
        // A function template's instance: its template arguments stay.
        assert_eq!(
            demangle("_ZN2np10qsort_simd12QSort_X86_V4IdEEvPT_l"),
            "np::qsort_simd::QSort_X86_V4<double>"
        );
        assert_eq!(
            demangle("_ZN4core3fmt5write17h0123456789abcdefE"),
            "core::fmt::write"
        );
        assert_eq!(demangle("PyObject_Call"), "PyObject_Call");
        // Not a valid mangling: kept as it is.
        assert_eq!(demangle("_Zgarbage"), "_Zgarbage");
    }

    #[test]
    fn lookup_honours_sizes() {
        let s = Symbols {
            syms: vec![
                Sym {
                    start: 0x100,
                    end: 0x110,
                    name: 0,
                },
                Sym {
                    start: 0x200,
                    end: 0x280,
                    name: 1,
                },
            ],
            names: vec!["a".into(), "b".into()],
        };
        assert_eq!(s.lookup(0x100), Some("a"));
        assert_eq!(s.lookup(0x10f), Some("a"));
        assert_eq!(s.lookup(0x110), None);
        assert_eq!(s.lookup(0xff), None);
        assert_eq!(s.lookup(0x27f), Some("b"));
        assert_eq!(s.range_of("b"), Some(0x200..0x280));
    }
}
