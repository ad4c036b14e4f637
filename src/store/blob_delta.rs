//! Byte deltas between two versions of a file, so that a checkpoint of a small edit to a large
//! file weighs about the edit, not the file.
//!
//! A delta is the target's length followed by operations that rebuild it from a base: copy a
//! range of the base, or insert bytes. The encoder takes the common prefix and suffix first (one
//! edit, the usual case, costs two copies and the new bytes) and finds moved or repeated parts
//! of the middle through an index of the base's 16-byte blocks.

use std::collections::HashMap;

/// The length of the base blocks the encoder looks up.
const BLOCK: usize = 16;

const COPY: u8 = 0;
const INSERT: u8 = 1;

/// Why a delta cannot be applied: it is not one this module wrote for that base.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("malformed checkpoint delta: {0}")]
pub struct DeltaError(&'static str);

fn put_varint(out: &mut Vec<u8>, mut n: usize) {
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

fn get_varint(bytes: &[u8], at: &mut usize) -> Result<usize, DeltaError> {
    let mut n: usize = 0;
    let mut shift = 0;
    loop {
        let byte = *bytes.get(*at).ok_or(DeltaError("cut short in a number"))?;
        *at += 1;
        if shift >= usize::BITS {
            return Err(DeltaError("a number too large"));
        }
        n |= ((byte & 0x7f) as usize) << shift;
        if byte & 0x80 == 0 {
            return Ok(n);
        }
        shift += 7;
    }
}

struct Encoder<'a> {
    out: Vec<u8>,
    target: &'a [u8],
}

impl Encoder<'_> {
    fn copy(&mut self, offset: usize, len: usize) {
        if len > 0 {
            self.out.push(COPY);
            put_varint(&mut self.out, offset);
            put_varint(&mut self.out, len);
        }
    }

    fn insert(&mut self, from: usize, to: usize) {
        if to > from {
            self.out.push(INSERT);
            put_varint(&mut self.out, to - from);
            self.out.extend_from_slice(&self.target[from..to]);
        }
    }
}

/// The delta that rebuilds `target` from `base`.
pub fn encode(base: &[u8], target: &[u8]) -> Vec<u8> {
    let mut enc = Encoder {
        out: Vec::with_capacity(64),
        target,
    };
    put_varint(&mut enc.out, target.len());
    let prefix = base.iter().zip(target).take_while(|(a, b)| a == b).count();
    let suffix = base[prefix..]
        .iter()
        .rev()
        .zip(target[prefix..].iter().rev())
        .take_while(|(a, b)| a == b)
        .count();
    enc.copy(0, prefix);
    let middle_end = target.len() - suffix;
    let mut blocks: HashMap<&[u8], usize> = HashMap::new();
    if middle_end - prefix >= BLOCK {
        for start in (0..base.len().saturating_sub(BLOCK - 1)).step_by(BLOCK) {
            blocks.entry(&base[start..start + BLOCK]).or_insert(start);
        }
    }
    let mut literal = prefix;
    let mut at = prefix;
    while at + BLOCK <= middle_end {
        let Some(&found) = blocks.get(&target[at..at + BLOCK]) else {
            at += 1;
            continue;
        };
        let (mut from, mut to) = (found, at);
        while to > literal && from > 0 && base[from - 1] == target[to - 1] {
            from -= 1;
            to -= 1;
        }
        let mut len = at + BLOCK - to;
        while from + len < base.len()
            && to + len < middle_end
            && base[from + len] == target[to + len]
        {
            len += 1;
        }
        enc.insert(literal, to);
        enc.copy(from, len);
        at = to + len;
        literal = at;
    }
    enc.insert(literal, middle_end);
    enc.copy(base.len() - suffix, suffix);
    enc.out
}

/// Rebuilds the target `delta` was encoded for from its `base`.
pub fn apply(base: &[u8], delta: &[u8]) -> Result<Vec<u8>, DeltaError> {
    let mut at = 0;
    let len = get_varint(delta, &mut at)?;
    let mut out = Vec::with_capacity(len.min(delta.len().saturating_add(base.len())));
    while at < delta.len() {
        let op = delta[at];
        at += 1;
        match op {
            COPY => {
                let offset = get_varint(delta, &mut at)?;
                let n = get_varint(delta, &mut at)?;
                let range = offset
                    .checked_add(n)
                    .filter(|end| *end <= base.len())
                    .ok_or(DeltaError("a copy beyond the base"))?;
                out.extend_from_slice(&base[offset..range]);
            }
            INSERT => {
                let n = get_varint(delta, &mut at)?;
                let end = at
                    .checked_add(n)
                    .filter(|end| *end <= delta.len())
                    .ok_or(DeltaError("an insert cut short"))?;
                out.extend_from_slice(&delta[at..end]);
                at = end;
            }
            _ => return Err(DeltaError("an unknown operation")),
        }
        if out.len() > len {
            return Err(DeltaError("longer than it says"));
        }
    }
    if out.len() != len {
        return Err(DeltaError("shorter than it says"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn round_trip(base: &[u8], target: &[u8]) -> usize {
        let delta = encode(base, target);
        assert_eq!(apply(base, &delta).unwrap(), target.to_vec());
        delta.len()
    }

    fn lines(n: usize, changed: &[(usize, &str)]) -> Vec<u8> {
        (0..n)
            .map(|i| match changed.iter().find(|(at, _)| *at == i) {
                Some((_, text)) => format!("{text:<63}\n"),
                None => format!("{:<63}\n", format!("line {i}")),
            })
            .collect::<String>()
            .into_bytes()
    }

    #[test]
    fn one_edited_line_costs_about_the_line() {
        let base = lines(320, &[]);
        let target = lines(320, &[(100, "line 100 edited")]);
        let size = round_trip(&base, &target);
        assert!(size < 64 + 16, "{size} bytes for one 64-byte line");
    }

    #[test]
    fn edits_far_apart_do_not_store_what_lies_between() {
        let base = lines(320, &[]);
        let target = lines(320, &[(3, "first"), (160, "middle"), (300, "last")]);
        let size = round_trip(&base, &target);
        assert!(size < 3 * (64 + 16), "{size} bytes for three 64-byte lines");
    }

    #[test]
    fn any_pair_round_trips() {
        let cases: &[(&[u8], &[u8])] = &[
            (b"", b""),
            (b"", b"new"),
            (b"old", b""),
            (b"abc", b"abc"),
            (
                b"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
                b"aaaaaaaaaaaaaaaaaaaabaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
            ),
            (
                b"0123456789abcdef0123456789abcdefXYZ",
                b"XYZ0123456789abcdef0123456789abcdef",
            ),
        ];
        for (base, target) in cases {
            round_trip(base, target);
        }
        let moved: Vec<u8> = (0..4096u32)
            .flat_map(|i| (i * 7919 % 251).to_le_bytes())
            .collect();
        let mut shuffled = moved[2048..].to_vec();
        shuffled.extend_from_slice(&moved[..2048]);
        assert!(
            round_trip(&moved, &shuffled) < 200,
            "moved halves are copies"
        );
    }

    #[test]
    fn a_delta_for_another_base_is_refused_not_misread() {
        let delta = encode(b"0123456789", b"0123456789 and more");
        assert_eq!(
            apply(b"01", &delta),
            Err(DeltaError("a copy beyond the base"))
        );
        assert_eq!(apply(b"", &[5]), Err(DeltaError("shorter than it says")));
        assert_eq!(apply(b"", &[1, 9]), Err(DeltaError("an unknown operation")));
        assert_eq!(
            apply(b"", &[3, INSERT, 9, b'a']),
            Err(DeltaError("an insert cut short"))
        );
    }
}
