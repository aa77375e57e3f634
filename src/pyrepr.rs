//! Python's `repr` of strings, bytes and floats, written here as Python
//! writes them: for the pstats `name` sort key and for `dump --locals`.

use std::fmt::Write as _;

/// Python's `repr(str)`: single quotes unless the text holds one and no
/// double quote; backslashes, quotes and unprintable characters escaped.
/// Printability is approximated: C0/C1 controls and the common
/// format, separator and private-use characters are escaped; unassigned
/// code points (which Python also escapes) are not recognised.
pub fn str_repr(s: &str) -> String {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    let mut out = String::with_capacity(s.len() + 2);
    out.push(quote);
    for ch in s.chars() {
        match ch {
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if !py_printable(c) => {
                let n = c as u32;
                let _ = if n < 0x100 {
                    write!(out, "\\x{n:02x}")
                } else if n < 0x10000 {
                    write!(out, "\\u{n:04x}")
                } else {
                    write!(out, "\\U{n:08x}")
                };
            }
            c => out.push(c),
        }
    }
    out.push(quote);
    out
}

fn py_printable(c: char) -> bool {
    let n = c as u32;
    !(c.is_control()
        || n == 0xA0
        || n == 0xAD
        || (0x2000..=0x200F).contains(&n)
        || (0x2028..=0x202F).contains(&n)
        || (0x205F..=0x206F).contains(&n)
        || n == 0x1680
        || n == 0x3000
        || n == 0xFEFF
        || (0xFFF9..=0xFFFB).contains(&n)
        || (0xD800..=0xF8FF).contains(&n)
        || n >= 0xF0000)
}

/// Python's `repr(float)`: the shortest digits that read back the same,
/// in positional notation for exponents from -4 to 15, else scientific.
pub fn float_repr(f: f64) -> String {
    if f.is_nan() {
        return "nan".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "inf" } else { "-inf" }.into();
    }
    // Rust's `{:e}` gives the same shortest round-trip digits.
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let negative = mantissa.starts_with('-');
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let sign = if negative { "-" } else { "" };
    if (-4..16).contains(&exp) {
        let point = exp + 1;
        let text = if point <= 0 {
            format!("0.{}{digits}", "0".repeat((-point) as usize))
        } else if point as usize >= digits.len() {
            format!("{digits}{}.0", "0".repeat(point as usize - digits.len()))
        } else {
            format!(
                "{}.{}",
                &digits[..point as usize],
                &digits[point as usize..]
            )
        };
        format!("{sign}{text}")
    } else {
        let m = if digits.len() > 1 {
            format!("{}.{}", &digits[..1], &digits[1..])
        } else {
            digits
        };
        let esign = if exp < 0 { '-' } else { '+' };
        format!("{sign}{m}e{esign}{:02}", exp.abs())
    }
}

/// Python's `repr(bytes)`.
pub fn bytes_repr(b: &[u8]) -> String {
    let quote = if b.contains(&b'\'') && !b.contains(&b'"') {
        b'"'
    } else {
        b'\''
    };
    let mut out = String::from("b");
    out.push(quote as char);
    for &c in b {
        match c {
            b'\\' => out.push_str("\\\\"),
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            b'\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c as char);
            }
            0x20..=0x7e => out.push(c as char),
            c => out.push_str(&format!("\\x{c:02x}")),
        }
    }
    out.push(quote as char);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_are_written_as_python_reprs_them() {
        assert_eq!(str_repr("a.py"), "'a.py'");
        assert_eq!(str_repr("it's"), "\"it's\"");
        assert_eq!(str_repr("say \"it's\""), "'say \"it\\'s\"'");
        assert_eq!(str_repr("t\tb\\x\u{1}\u{85}λ"), "'t\\tb\\\\x\\x01\\x85λ'");
    }

    #[test]
    fn floats_read_as_python_writes_them() {
        for (f, want) in [
            (1.0, "1.0"),
            (0.1, "0.1"),
            (-2.5, "-2.5"),
            (1e16, "1e+16"),
            (1234567890123456.0, "1234567890123456.0"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (1.5e-10, "1.5e-10"),
            (123.456, "123.456"),
            (f64::INFINITY, "inf"),
        ] {
            assert_eq!(float_repr(f), want, "{f}");
        }
    }

    #[test]
    fn strings_and_bytes_are_quoted_and_escaped_as_repr() {
        assert_eq!(str_repr("abc"), "'abc'");
        assert_eq!(str_repr("it's"), "\"it's\"");
        assert_eq!(str_repr("a'\"b"), "'a\\'\"b'");
        assert_eq!(str_repr("x\ny\t\u{1}"), "'x\\ny\\t\\x01'");
        assert_eq!(str_repr("é"), "'é'");
        assert_eq!(bytes_repr(b"a\x00\xff'"), "b\"a\\x00\\xff'\"");
    }
}
