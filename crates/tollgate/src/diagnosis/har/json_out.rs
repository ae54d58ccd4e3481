//! JSON text (RFC 8259) written straight into an entry's line: keys are literal fragments
//! of the caller's code, strings are escaped a word at a time, numbers are spelled as
//! `serde_json` spells them. A HAR entry is about fifty keys and a dozen strings; written
//! through `serde`, each key cost a call chain and a run of escaping of its own, more than
//! the rest of the entry.

/// `"text"`, escaped as RFC 8259 §7 requires and no more (the same bytes `serde_json`
/// writes: `"`, `\` and the control characters, the named ones by name).
pub fn string(out: &mut String, text: &str) {
    out.reserve(text.len() + 2);
    out.push('"');
    let bytes = text.as_bytes();
    let mut run = 0;
    let mut i = 0;
    // Eight bytes at a time while none of them needs escaping (SWAR: a byte below 0x20,
    // or equal to `"` or `\`, sets its high bit in `flag`).
    while i + 8 <= bytes.len() {
        let mut word = [0; 8];
        word.copy_from_slice(&bytes[i..i + 8]);
        if flag(u64::from_le_bytes(word)) == 0 {
            i += 8;
            continue;
        }
        for _ in 0..8 {
            if needs_escape(bytes[i]) {
                out.push_str(&text[run..i]);
                escape(out, bytes[i]);
                run = i + 1;
            }
            i += 1;
        }
    }
    while i < bytes.len() {
        if needs_escape(bytes[i]) {
            out.push_str(&text[run..i]);
            escape(out, bytes[i]);
            run = i + 1;
        }
        i += 1;
    }
    out.push_str(&text[run..]);
    out.push('"');
}

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGHS: u64 = 0x8080_8080_8080_8080;

/// The high bit of each byte of `x` that is below 0x20, `"` or `\` (a byte with its own
/// high bit set, UTF-8's continuation and lead bytes, is masked out).
#[inline]
pub(super) fn flag(x: u64) -> u64 {
    let zero = |v: u64| v.wrapping_sub(ONES) & !v;
    let below = x.wrapping_sub(ONES * 0x20) & !x;
    (below | zero(x ^ (ONES * b'"' as u64)) | zero(x ^ (ONES * b'\\' as u64))) & HIGHS
}

#[inline]
fn needs_escape(b: u8) -> bool {
    b < 0x20 || b == b'"' || b == b'\\'
}

fn escape(out: &mut String, b: u8) {
    let named = match b {
        b'"' => "\\\"",
        b'\\' => "\\\\",
        b'\n' => "\\n",
        b'\r' => "\\r",
        b'\t' => "\\t",
        0x08 => "\\b",
        0x0c => "\\f",
        _ => {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            out.push_str("\\u00");
            out.push(HEX[(b >> 4) as usize] as char);
            out.push(HEX[(b & 0xf) as usize] as char);
            return;
        }
    };
    out.push_str(named);
}

pub fn int(out: &mut String, n: impl itoa::Integer) {
    out.push_str(itoa::Buffer::new().format(n));
}

/// A float as `serde_json` writes it (shortest round-trip form, `null` when not finite).
pub fn float(out: &mut String, f: f64) {
    if f.is_finite() {
        out.push_str(zmij::Buffer::new().format_finite(f));
    } else {
        out.push_str("null");
    }
}

pub fn bool(out: &mut String, b: bool) {
    out.push_str(if b { "true" } else { "false" });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quoted(s: &str) -> String {
        let mut out = String::new();
        string(&mut out, s);
        out
    }

    #[test]
    fn strings_are_escaped_as_serde_json_escapes_them() {
        let mut every = String::new();
        for c in (0u8..0x80)
            .map(char::from)
            .chain(['é', '€', '😀', '\u{7f}'])
        {
            every.push(c);
        }
        let long = format!("{every}{every}abcdefgh\"ijklmnop\\qrstuvwx{every}");
        for s in [
            "",
            "a",
            "plain ascii longer than eight",
            "\"",
            "quote\"in the second word",
            "ends with a backslash\\",
            "tab\tnew\nline\rcr\u{8}\u{c}\u{1}\u{1f}",
            "héllo wörld, ümlauts past eight bytes",
            &every,
            &long,
        ] {
            assert_eq!(quoted(s), serde_json::to_string(s).unwrap(), "{s:?}");
        }
    }

    #[test]
    fn numbers_are_spelled_as_serde_json_spells_them() {
        for f in [
            0.0,
            -0.0,
            1.0,
            12.497760999999999,
            1e21,
            1e-7,
            0.1 + 0.2,
            f64::MAX,
        ] {
            let mut out = String::new();
            float(&mut out, f);
            assert_eq!(out, serde_json::to_string(&f).unwrap(), "{f}");
        }
        let mut out = String::new();
        float(&mut out, f64::NAN);
        int(&mut out, -1i64);
        int(&mut out, u64::MAX);
        assert_eq!(out, format!("null-1{}", u64::MAX));
    }
}
