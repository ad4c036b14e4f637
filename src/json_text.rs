//! Finding the bytes that matter inside JSON strings, eight at a time.
//!
//! Inside a JSON string only three kinds of byte need attention: the closing quote, the
//! backslash that starts an escape, and control bytes (below 0x20), which must be escaped. Both
//! hot paths of a streamed answer scan for them: the reader of provider chunks and the writer
//! of delta notifications. Text and ids rarely hold one, so whole words are tested at a time.

const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
const HIGHS: u64 = u64::from_ne_bytes([0x80; 8]);

/// The first special byte at or after `from`: a quote, a backslash or a control byte.
pub fn next_special(bytes: &[u8], from: usize) -> Option<usize> {
    let mut at = from;
    while let Some(chunk) = bytes.get(at..at + 8) {
        let Ok(word) = <[u8; 8]>::try_from(chunk) else {
            break;
        };
        let found = special_bytes(u64::from_le_bytes(word));
        if found != 0 {
            return Some(at + found.trailing_zeros() as usize / 8);
        }
        at += 8;
    }
    // The last few bytes, padded with a plain one to make a whole word.
    let rest = bytes.get(at..)?;
    let mut word = [b'a'; 8];
    word[..rest.len()].copy_from_slice(rest);
    let found = special_bytes(u64::from_le_bytes(word));
    (found != 0).then(|| at + found.trailing_zeros() as usize / 8)
}

/// The high bit of each special byte of `word` (read little-endian, so the lowest set bit is
/// the first byte in memory order). The lowest set bit is always a true one: a byte below `n`
/// (n ≤ 0x80) borrows in `word - n·ONES` and has its high bit clear in `word`, no byte at or
/// above `n` can set that pattern by itself, and a borrow only carries upwards.
fn special_bytes(word: u64) -> u64 {
    let below = |n: u64| word.wrapping_sub(ONES * n) & !word & HIGHS;
    let zero = |w: u64| w.wrapping_sub(ONES) & !w & HIGHS;
    below(0x20) | zero(word ^ (ONES * u64::from(b'"'))) | zero(word ^ (ONES * u64::from(b'\\')))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn is_special(byte: u8) -> bool {
        byte < 0x20 || byte == b'"' || byte == b'\\'
    }

    proptest! {
        #[test]
        fn finds_what_a_byte_by_byte_scan_finds(
            bytes in prop::collection::vec(prop_oneof![any::<u8>(), 0x20u8..0x7f], 0..40),
            from in 0usize..41,
        ) {
            let expected = bytes
                .iter()
                .enumerate()
                .skip(from)
                .find(|(_, b)| is_special(**b))
                .map(|(at, _)| at);
            prop_assert_eq!(next_special(&bytes, from), expected);
        }
    }
}
