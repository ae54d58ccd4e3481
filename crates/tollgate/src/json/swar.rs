//! Byte searches over the short runs JSON is made of (keys, ids, names, numbers a few
//! bytes to a few dozen long), eight bytes at a time in a `u64` ("SIMD within a
//! register"): cheaper than a byte loop, and than a vectorised search, whose start costs
//! more than such a run. The LLM answers' scanner and the MCP readers use them.

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGH: u64 = 0x8080_8080_8080_8080;

/// The high bit of each byte of `w` that is zero. Exact up to the first such byte (a
/// borrow may mark bytes after it): only the first is used.
fn zero(w: u64) -> u64 {
    w.wrapping_sub(ONES) & !w & HIGH
}

/// The high bit of each byte of `w` equal to `b`.
fn equal(w: u64, b: u8) -> u64 {
    zero(w ^ (ONES * b as u64))
}

/// The high bit of each byte of `w` below `n` (at most 128); bytes with their high bit
/// set (UTF-8's) are not.
fn below(w: u64, n: u8) -> u64 {
    w.wrapping_sub(ONES * n as u64) & !w & HIGH
}

/// The index of the first byte of `data` for which `marks` (of a word read little-endian)
/// marks one, and `stop` for a byte alone.
fn find(data: &[u8], marks: impl Fn(u64) -> u64, stop: impl Fn(u8) -> bool) -> Option<usize> {
    let mut at = 0;
    let mut words = data.chunks_exact(8);
    for chunk in &mut words {
        let mut word = [0; 8];
        word.copy_from_slice(chunk);
        let m = marks(u64::from_le_bytes(word));
        if m != 0 {
            return Some(at + (m.trailing_zeros() / 8) as usize);
        }
        at += 8;
    }
    words
        .remainder()
        .iter()
        .position(|&c| stop(c))
        .map(|i| at + i)
}

/// The first quote, backslash or control character: where a string's plain run ends.
pub fn string_stop(data: &[u8]) -> Option<usize> {
    find(
        data,
        |w| equal(w, b'"') | equal(w, b'\\') | below(w, 0x20),
        |c| c == b'"' || c == b'\\' || c < 0x20,
    )
}

/// The first quote.
pub fn quote(data: &[u8]) -> Option<usize> {
    find(data, |w| equal(w, b'"'), |c| c == b'"')
}

/// The first quote or backslash: where a string's run ends. The first 16 bytes a word at
/// a time, the rest (a long text) by `memchr`'s vectorised search.
pub fn string_end(data: &[u8]) -> Option<usize> {
    let head = data.len().min(16);
    if let Some(i) = find(
        &data[..head],
        |w| equal(w, b'"') | equal(w, b'\\'),
        |c| c == b'"' || c == b'\\',
    ) {
        return Some(i);
    }
    memchr::memchr2(b'"', b'\\', &data[head..]).map(|i| head + i)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_position_and_byte_is_found_as_a_byte_loop_finds_it() {
        let plain = |c: u8| c == b'"' || c == b'\\' || c < 0x20;
        for len in 0..40 {
            for at in 0..=len {
                for stop in [
                    b'"', b'\\', 0x00, 0x1f, b'a', 0x20, 0x80, 0xff, 0x21, b'{', b']',
                ] {
                    let mut data = vec![b'x'; len];
                    // Bytes around it that could borrow or carry in a word.
                    if at > 0 {
                        data[at - 1] = 0x01 ^ stop;
                    }
                    if at < len {
                        data[at] = stop;
                    }
                    assert_eq!(
                        string_stop(&data),
                        data.iter().position(|&c| plain(c)),
                        "{len} {at} {stop:#x}"
                    );
                    assert_eq!(quote(&data), data.iter().position(|&c| c == b'"'));
                    assert_eq!(
                        string_end(&data),
                        data.iter().position(|&c| c == b'"' || c == b'\\')
                    );
                }
            }
        }
        let utf8 = "é€𝄞\"".as_bytes();
        assert_eq!(string_stop(utf8), Some(utf8.len() - 1));
    }
}
