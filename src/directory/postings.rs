//! Compact posting lists: the ascending catalog positions of the entries holding a value (a
//! filter value or a text token), each with a small tag (a text token's weight; 0 for a
//! filter value).
//!
//! A list is built once, in position order ([`Growing`]), and stored as bytes: per entry, the
//! gap from the previous position shifted left by [`TAG_BITS`] with the tag below, as a LEB128
//! varint. A value most entries have costs about a byte an entry instead of four, a rare one
//! a few bytes; reading decodes in position order ([`decode`]).
//!
//! A list without tags (a filter value's) is kept as a [`Set`]: those bytes, or a bitset with
//! a bit per catalog position when that is smaller (a value an eighth of the entries or more
//! have), so the common values of a filter are unions and intersections of 64 positions a
//! step. Filters work on bitsets; [`Bits`] walks one's positions in order.

/// Bits of an encoded posting that hold its tag.
const TAG_BITS: u32 = 3;

/// Largest tag a posting holds.
pub const MAX_TAG: u8 = (1 << TAG_BITS) - 1;

/// A posting list while it is built: the encoded bytes and the last position added.
#[derive(Debug, Default)]
pub struct Growing {
    bytes: Vec<u8>,
    last: Option<u32>,
}

impl Growing {
    /// Add `position` (above the last one added) with `tag` (at most [`MAX_TAG`]).
    pub fn push(&mut self, position: u32, tag: u8) {
        let gap = position.saturating_sub(self.last.map_or(0, |l| l + 1));
        self.last = Some(position);
        let mut v = (u64::from(gap) << TAG_BITS) | u64::from(tag.min(MAX_TAG));
        while v >= 0x80 {
            self.bytes.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.bytes.push(v as u8);
    }

    /// The encoded list, without spare capacity.
    pub fn finish(self) -> Box<[u8]> {
        self.bytes.into_boxed_slice()
    }
}

/// The `(position, tag)` pairs of an encoded list, ascending.
#[inline]
pub fn decode(bytes: &[u8]) -> Postings<'_> {
    Postings { bytes, next: 0 }
}

/// A filter value's positions: encoded bytes, or a bitset when that is smaller.
#[derive(Debug)]
pub enum Set {
    /// Encoded as a [`Growing`] list (tags 0).
    Sparse(Box<[u8]>),
    /// A bit per position of the catalog.
    Dense(Box<[u64]>),
}

impl Set {
    /// The set of a list built over a catalog of `len` positions.
    pub fn new(list: Growing, len: usize) -> Set {
        let words = len.div_ceil(64);
        if list.bytes.len() <= words * 8 {
            return Set::Sparse(list.finish());
        }
        let mut bits = vec![0u64; words];
        set_bits(&mut bits, decode(&list.bytes).map(|(p, _)| p));
        Set::Dense(bits.into_boxed_slice())
    }

    /// Add this set's positions to bitset `bits`.
    #[inline]
    pub fn or_into(&self, bits: &mut [u64]) {
        match self {
            Set::Sparse(bytes) => set_bits(bits, decode(bytes).map(|(p, _)| p)),
            Set::Dense(words) => bits.iter_mut().zip(words.iter()).for_each(|(b, w)| *b |= w),
        }
    }
}

/// Set the bits of `positions` in `bits` (positions past its end are left out).
#[inline]
pub fn set_bits(bits: &mut [u64], positions: impl Iterator<Item = u32>) {
    for p in positions {
        if let Some(word) = bits.get_mut((p / 64) as usize) {
            *word |= 1 << (p % 64);
        }
    }
}

/// The set bits of a bitset, ascending (a word at a time: a clear stretch costs one test per
/// 64 positions).
pub struct Bits<'a> {
    words: &'a [u64],
    /// Index in `words` of the next word to load.
    next: usize,
    /// The bits of the current word not yet returned.
    word: u64,
}

/// The positions set in bitset `words`, ascending.
#[inline]
pub fn bits(words: &[u64]) -> Bits<'_> {
    Bits {
        words,
        next: 0,
        word: 0,
    }
}

impl Iterator for Bits<'_> {
    type Item = u32;

    #[inline]
    fn next(&mut self) -> Option<u32> {
        while self.word == 0 {
            self.word = *self.words.get(self.next)?;
            self.next += 1;
        }
        let base = u32::try_from((self.next - 1) * 64).unwrap_or(u32::MAX);
        let i = base + self.word.trailing_zeros();
        self.word &= self.word - 1;
        Some(i)
    }
}

/// Decodes a posting list (see [`decode`]).
pub struct Postings<'a> {
    bytes: &'a [u8],
    /// The smallest position the next posting can have.
    next: u32,
}

impl Iterator for Postings<'_> {
    type Item = (u32, u8);

    #[inline]
    fn next(&mut self) -> Option<(u32, u8)> {
        let mut v = 0u64;
        let mut shift = 0;
        loop {
            let (&b, rest) = self.bytes.split_first()?;
            self.bytes = rest;
            v |= u64::from(b & 0x7f) << shift;
            if b < 0x80 {
                break;
            }
            shift += 7;
        }
        let gap = u32::try_from(v >> TAG_BITS).unwrap_or(u32::MAX);
        let position = self.next.saturating_add(gap);
        self.next = position.saturating_add(1);
        Some((position, (v as u8) & MAX_TAG))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn postings_round_trip_gaps_and_tags() {
        let mut g = Growing::default();
        let input = [(0, 5), (1, 1), (130, 3), (70_000, 7), (u32::MAX >> 3, 2)];
        for (p, t) in input {
            g.push(p, t);
        }
        let bytes = g.finish();
        assert_eq!(decode(&bytes).collect::<Vec<_>>(), input);
    }

    #[test]
    fn sets_are_bytes_when_sparse_bits_when_dense_and_the_same_positions() {
        for positions in [
            vec![3u32, 64, 199],
            (0..200).filter(|p| p % 3 != 0).collect(),
        ] {
            let mut g = Growing::default();
            positions.iter().for_each(|&p| g.push(p, 0));
            let set = Set::new(g, 200);
            assert_eq!(matches!(set, Set::Dense(_)), positions.len() > 100);
            let mut words = vec![0u64; 4];
            set.or_into(&mut words);
            assert_eq!(bits(&words).collect::<Vec<_>>(), positions);
        }
    }
}
