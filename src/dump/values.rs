//! How `dump --locals` writes a local's value: as Python would `repr` it
//! (short: containers show their first items and their length), and, for
//! `--json`, as a typed JSON value.

use serde_json::{Value as Json, json};

use crate::pyrepr::{bytes_repr, float_repr, str_repr};
use crate::unwind::locals::{Local, LocalKind, MAX_TEXT, SeqKind, Value};

/// Longest int written in full, in decimal digits.
const MAX_INT_TEXT: usize = 100;

/// The value as Python's `repr` would write it, cut short where the
/// value was: `[1, 2, ... (1000 items)]`, `'abc'... (5000 chars)`.
pub fn repr(v: &Value) -> String {
    match v {
        Value::None => "None".into(),
        Value::Bool(b) => if *b { "True" } else { "False" }.into(),
        Value::Int(s) => int_text(s),
        // 30 bits a digit: log10(2^30) is about 9.03 decimal digits.
        Value::BigInt { negative, digits } => format!(
            "<{}int of about {} digits>",
            if *negative { "negative " } else { "" },
            digits * 903 / 100
        ),
        Value::Float(f) => float_repr(*f),
        Value::Str { text, len } => {
            let shown = text.chars().count() as u64;
            let mut s = str_repr(text);
            if shown < *len {
                s.push_str(&format!("... ({len} chars)"));
            }
            s
        }
        Value::Bytes { data, len } => {
            let mut s = bytes_repr(data);
            if (data.len() as u64) < *len {
                s.push_str(&format!("... ({len} bytes)"));
            }
            s
        }
        Value::Seq { kind, items, len } => seq_repr(*kind, items, *len),
        Value::Dict { items, len } => {
            let mut parts: Vec<String> = items
                .iter()
                .map(|(k, v)| format!("{}: {}", repr(k), repr(v)))
                .collect();
            if (items.len() as u64) < *len {
                parts.push(format!("... ({len} items)"));
            }
            format!("{{{}}}", parts.join(", "))
        }
        Value::Object { type_name, addr } => format!("<{type_name} at {addr:#x}>"),
        Value::Nested { type_name, len } => format!("<{type_name} of {len} items>"),
        Value::Unreadable => "<unreadable>".into(),
    }
}

fn seq_repr(kind: SeqKind, items: &[Value], len: u64) -> String {
    let mut parts: Vec<String> = items.iter().map(repr).collect();
    if (items.len() as u64) < len {
        parts.push(format!("... ({len} items)"));
    }
    let inner = parts.join(", ");
    match kind {
        SeqKind::List => format!("[{inner}]"),
        SeqKind::Tuple if len == 1 && items.len() == 1 => format!("({inner},)"),
        SeqKind::Tuple => format!("({inner})"),
        SeqKind::Set if len == 0 => "set()".into(),
        SeqKind::Set => format!("{{{inner}}}"),
        SeqKind::FrozenSet if len == 0 => "frozenset()".into(),
        SeqKind::FrozenSet => format!("frozenset({{{inner}}})"),
    }
}

/// An int in full, or its first and last digits and how many there are.
fn int_text(s: &str) -> String {
    let digits = s.trim_start_matches('-').len();
    if digits <= MAX_INT_TEXT {
        return s.into();
    }
    let sign = if s.starts_with('-') { "-" } else { "" };
    let d = s.trim_start_matches('-');
    format!(
        "{sign}{}...{} ({digits} digits)",
        &d[..20],
        &d[digits - 10..]
    )
}

/// The value as typed JSON: `null` for `None` and for what JSON cannot
/// hold as such (objects, bytes, unreadable values; their `repr` says
/// what they are), numbers for ints that fit and finite floats, strings,
/// arrays for sequences and `[key, value]` pairs for dicts.
pub fn typed(v: &Value) -> Json {
    match v {
        Value::None => Json::Null,
        Value::Bool(b) => json!(b),
        Value::Int(s) => s
            .parse::<i64>()
            .ok()
            .filter(|n| n.unsigned_abs() < 1 << 53)
            .map_or_else(|| json!(s), |n| json!(n)),
        Value::Float(f) if f.is_finite() => json!(f),
        Value::Float(f) => json!(float_repr(*f)),
        Value::Str { text, .. } => json!(text),
        Value::Seq { items, .. } => Json::Array(items.iter().map(typed).collect()),
        Value::Dict { items, .. } => Json::Array(
            items
                .iter()
                .map(|(k, v)| Json::Array(vec![typed(k), typed(v)]))
                .collect(),
        ),
        Value::Bytes { .. }
        | Value::BigInt { .. }
        | Value::Object { .. }
        | Value::Nested { .. }
        | Value::Unreadable => Json::Null,
    }
}

/// How long the value is (characters, bytes or items), when it has a
/// length; and whether what is shown is less than all of it.
fn length(v: &Value) -> (Option<u64>, bool) {
    match v {
        Value::Str { text, len } => (Some(*len), (text.chars().count() as u64) < *len),
        Value::Bytes { data, len } => (Some(*len), (data.len() as u64) < *len),
        Value::Seq { items, len, .. } => (Some(*len), (items.len() as u64) < *len),
        Value::Dict { items, len } => (Some(*len), (items.len() as u64) < *len),
        Value::Nested { len, .. } => (Some(*len), true),
        _ => (None, false),
    }
}

/// One local as a JSON object (see docs/formats.md).
pub fn local_json(l: &Local) -> Json {
    let kind = match l.kind {
        LocalKind::Argument => "argument",
        LocalKind::Local => "local",
    };
    match &l.value {
        None => json!({
            "name": l.name, "kind": kind, "unset": true, "type": null,
            "repr": null, "value": null, "len": null, "truncated": false,
        }),
        Some(v) => {
            let (len, truncated) = length(v);
            json!({
                "name": l.name, "kind": kind, "unset": false, "type": v.type_name(),
                "repr": repr(v), "value": typed(v), "len": len, "truncated": truncated,
            })
        }
    }
}

/// Most characters of one local's line in the text dump.
pub const MAX_LINE: usize = 4 * MAX_TEXT;

/// One local as the text dump writes it: `name: repr`, or `name: <unset>`.
pub fn local_line(l: &Local) -> String {
    let mut v = l.value.as_ref().map_or_else(|| "<unset>".into(), repr);
    if let Some((cut, _)) = v.char_indices().nth(MAX_LINE) {
        v.truncate(cut);
        v.push_str("...");
    }
    format!("{}: {v}", l.name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn containers_show_their_first_items_and_length() {
        let ints = |n: u64| (0..n.min(3)).map(|i| Value::Int(i.to_string())).collect();
        let seq = |kind, n| Value::Seq {
            kind,
            items: ints(n),
            len: n,
        };
        assert_eq!(repr(&seq(SeqKind::List, 3)), "[0, 1, 2]");
        assert_eq!(repr(&seq(SeqKind::List, 10)), "[0, 1, 2, ... (10 items)]");
        assert_eq!(repr(&seq(SeqKind::Tuple, 1)), "(0,)");
        assert_eq!(repr(&seq(SeqKind::Set, 0)), "set()");
        let d = Value::Dict {
            items: vec![(
                Value::Str {
                    text: "count".into(),
                    len: 5,
                },
                Value::Int("2443879".into()),
            )],
            len: 1,
        };
        assert_eq!(repr(&d), "{'count': 2443879}");
        assert_eq!(typed(&d), json!([["count", 2443879]]));
        assert_eq!(int_text(&"7".repeat(150)).len(), 20 + 3 + 10 + 13);
    }
}
