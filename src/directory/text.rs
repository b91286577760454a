//! The catalog's text index: per lower-case token, the positions (in the catalog's identifier
//! order) of the entries holding it, each with the token's weight in that entry.
//!
//! Built once with the catalog ([`TextIndex::build`]); a query's words are looked up as
//! prefixes of the sorted tokens, their postings decoded in position order and scored into one
//! dense array with a slot per entry ([`TextIndex::scores`]), so a query costs the length of
//! the postings it touches plus one pass over the array, with no hashing and no sort. The
//! score is exactly [`Entry::score`](super::entry::Entry::score)'s.
//!
//! A posting list is stored compactly ([`super::postings`]), the weight (1–7) in its tag
//! bits, so a common token's posting takes about one byte instead of four.

use std::collections::BTreeMap;
use std::ops::Bound;

use super::entry::MAX_QUERY_WORDS;
use super::postings::{self, Growing};

/// Largest weight a posting stores (weights are 1–5; the tag bits hold up to 7).
const MAX_WEIGHT: u8 = postings::MAX_TAG;

// A query's total (at most twice the largest weight per word) fits a byte.
const _: () = assert!(MAX_WEIGHT as usize * 2 * MAX_QUERY_WORDS <= u8::MAX as usize);

/// Text token → the entries holding it (sorted by token, so a word's prefixes are a range).
#[derive(Debug, Default)]
pub struct TextIndex {
    tokens: BTreeMap<Box<str>, Box<[u8]>>,
}

/// Text relevance by catalog position: `0` where no query word matches, else 1–100.
#[derive(Debug)]
pub struct Scores {
    /// Per position, the sum of the words' best scores.
    totals: Vec<u8>,
    /// Per possible total, its percentage of the best possible, rounded up.
    percent: Vec<u8>,
    /// One bit per position: some word matches (so the matches are walked without a scan).
    matched: Vec<u64>,
}

impl Scores {
    /// The score of position `i` (0: no match).
    #[inline]
    pub fn get(&self, i: u32) -> u8 {
        let t = self.totals.get(i as usize).copied().unwrap_or(0);
        self.percent.get(usize::from(t)).copied().unwrap_or(100)
    }

    /// Whether some word matches position `i`.
    #[inline]
    pub fn matches(&self, i: u32) -> bool {
        let word = self.matched.get((i / 64) as usize).copied().unwrap_or(0);
        word & (1 << (i % 64)) != 0
    }

    /// The positions some word matches, ascending.
    #[inline]
    pub fn positions(&self) -> postings::Bits<'_> {
        postings::bits(&self.matched)
    }
}

/// Per-query work arrays: the running total per position, the matched bits and, for a word
/// matching several tokens, its best score per position with the positions touched (so
/// clearing costs what was touched).
struct Accumulator {
    totals: Vec<u8>,
    matched: Vec<u64>,
    best: Vec<u8>,
    touched: Vec<u32>,
}

impl TextIndex {
    /// Index the tokens of each entry, `tokens(i)` being the `(token, weight)` pairs of the
    /// entry at position `i` (each token once).
    pub fn build(len: usize, mut tokens: impl FnMut(usize) -> Vec<(String, u8)>) -> TextIndex {
        let mut growing: BTreeMap<Box<str>, Growing> = BTreeMap::new();
        for i in 0..len {
            let position = u32::try_from(i).unwrap_or(u32::MAX);
            for (t, w) in tokens(i) {
                match growing.get_mut(t.as_str()) {
                    Some(list) => list.push(position, w.min(MAX_WEIGHT)),
                    None => {
                        let mut list = Growing::default();
                        list.push(position, w.min(MAX_WEIGHT));
                        growing.insert(t.into_boxed_str(), list);
                    }
                }
            }
        }
        let tokens = growing.into_iter().map(|(t, g)| (t, g.finish())).collect();
        TextIndex { tokens }
    }

    /// The score of every one of `len` positions for query `words` (as
    /// [`query_words`](super::entry::query_words) gives them): a word scores twice its
    /// token's weight on an exact match, the weight when it only starts the token, its best
    /// over the entry's tokens; the sum over the best possible (10 a word), as a percentage
    /// rounded up.
    pub fn scores(&self, words: &[String], len: usize) -> Scores {
        let mut acc = Accumulator {
            totals: vec![0; len],
            matched: vec![0; len.div_ceil(64)],
            best: Vec::new(),
            touched: Vec::new(),
        };
        for q in words {
            let lists: Vec<(bool, &[u8])> = self.matching(q).collect();
            match lists.as_slice() {
                [(exact, list)] => acc.add_only(*exact, list),
                _ => acc.add_best(&lists),
            }
        }
        let words = u32::try_from(words.len()).unwrap_or(u32::MAX / 10);
        let max = 10 * words.max(1);
        let best = u32::from(MAX_WEIGHT) * 2 * words;
        let percent = (0..=best)
            .map(|t| u8::try_from((t * 100).div_ceil(max).min(100)).unwrap_or(100))
            .collect();
        Scores {
            totals: acc.totals,
            percent,
            matched: acc.matched,
        }
    }

    /// The tokens `q` starts (itself first when present), with whether each is exact.
    fn matching<'a>(&'a self, q: &'a str) -> impl Iterator<Item = (bool, &'a [u8])> + 'a {
        self.tokens
            .range::<str, _>((Bound::Included(q), Bound::Unbounded))
            .take_while(move |(t, _)| t.starts_with(q))
            .map(move |(t, list)| (**t == *q, &**list))
    }
}

/// The score a posting earns: twice its weight when the word is the whole token.
fn earned(exact: bool, weight: u8) -> u8 {
    if exact {
        weight * 2
    } else {
        weight
    }
}

impl Accumulator {
    /// Add `score` to position `i`.
    fn add(&mut self, i: u32, score: u8) {
        if let Some(t) = self.totals.get_mut(i as usize) {
            *t = t.saturating_add(score);
            self.matched[(i / 64) as usize] |= 1 << (i % 64);
        }
    }

    /// Add the scores of a word matching one token: each position appears once in its
    /// postings.
    fn add_only(&mut self, exact: bool, list: &[u8]) {
        for (i, w) in postings::decode(list) {
            self.add(i, earned(exact, w));
        }
    }

    /// Add the best score per position of a word matching several tokens (or none).
    fn add_best(&mut self, lists: &[(bool, &[u8])]) {
        if lists.is_empty() {
            return;
        }
        if self.best.is_empty() {
            self.best = vec![0; self.totals.len()];
        }
        for (exact, list) in lists {
            for (i, w) in postings::decode(list) {
                let Some(b) = self.best.get_mut(i as usize) else {
                    continue;
                };
                if *b == 0 {
                    self.touched.push(i);
                }
                *b = (*b).max(earned(*exact, w));
            }
        }
        let mut touched = std::mem::take(&mut self.touched);
        for i in touched.drain(..) {
            let best = std::mem::take(&mut self.best[i as usize]);
            self.add(i, best);
        }
        self.touched = touched;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_word_scores_its_best_token_exact_twice_a_prefix() {
        let entries: [&[(&str, u8)]; 3] = [
            &[("weather", 5), ("forecast", 1)],
            &[("weathering", 5), ("weather", 1)],
            &[("rain", 2)],
        ];
        let index = TextIndex::build(3, |i| {
            entries[i]
                .iter()
                .map(|(t, w)| (t.to_string(), *w))
                .collect()
        });
        let words = vec!["weather".to_string()];
        let s = index.scores(&words, 3);
        // Exact 5 → 10 of 10; prefix 5 (5) beats exact 1 (2) → 50 of 100.
        assert_eq!((s.get(0), s.get(1), s.get(2)), (100, 50, 0));
        let words = vec!["weather".to_string(), "rain".to_string()];
        let s = index.scores(&words, 3);
        assert_eq!((s.get(0), s.get(1), s.get(2)), (50, 25, 20));
    }
}
