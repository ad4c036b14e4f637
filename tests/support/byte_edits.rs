//! Small random edits of a byte string and cuts into pieces, for the property tests that feed
//! damaged input to a reader: the SSE reader and provider decoders (`src/provider/fuzz.rs`) and
//! the daemon's stream parsers through the real binary (`tests/daemon/fuzz.rs`). Included by
//! each with `#[path = "…/tests/support/byte_edits.rs"] mod byte_edits;`.

use std::ops::Range;

use proptest::prelude::*;

/// One edit of a byte string.
#[derive(Debug, Clone)]
pub enum Edit {
    Flip(prop::sample::Index, u8),
    Insert(prop::sample::Index, u8),
    Remove(prop::sample::Index),
    Cut(prop::sample::Index),
}

/// Between `count.start` and `count.end - 1` edits.
pub fn edits(count: Range<usize>) -> impl Strategy<Value = Vec<Edit>> {
    let edit = prop_oneof![
        (any::<prop::sample::Index>(), any::<u8>()).prop_map(|(at, b)| Edit::Flip(at, b)),
        (any::<prop::sample::Index>(), any::<u8>()).prop_map(|(at, b)| Edit::Insert(at, b)),
        any::<prop::sample::Index>().prop_map(Edit::Remove),
        any::<prop::sample::Index>().prop_map(Edit::Cut),
    ];
    prop::collection::vec(edit, count)
}

/// `bytes` with `edits` applied in order; an edit of an empty string that needs a byte is
/// skipped.
pub fn apply(mut bytes: Vec<u8>, edits: &[Edit]) -> Vec<u8> {
    for edit in edits {
        let len = bytes.len();
        match edit {
            Edit::Flip(at, b) if len > 0 => bytes[at.index(len)] = *b,
            Edit::Insert(at, b) => bytes.insert(at.index(len + 1), *b),
            Edit::Remove(at) if len > 0 => {
                bytes.remove(at.index(len));
            }
            Edit::Cut(at) => bytes.truncate(at.index(len + 1)),
            _ => {}
        }
    }
    bytes
}

/// `bytes` cut into pieces at `points` (in any order, each taken within the length), as a
/// reader may receive them; the pieces joined are `bytes`.
pub fn cut(bytes: &[u8], points: &[prop::sample::Index]) -> Vec<Vec<u8>> {
    let mut points: Vec<usize> = points.iter().map(|p| p.index(bytes.len() + 1)).collect();
    points.sort_unstable();
    let mut pieces = Vec::new();
    let mut start = 0;
    for point in points.into_iter().chain([bytes.len()]) {
        pieces.push(bytes[start..point].to_vec());
        start = point;
    }
    pieces
}
