//! Precondition bitmask gating and allow / deny scopes.
//!
//! Every row carries a required-flags mask of `words` u64 words (flag `f` is bit `f % 64` of
//! word `f / 64`), so 64 flags per word and as many words as a catalog needs. A caller states
//! the flags its current state satisfies; a row is eligible only when every required bit is
//! satisfied, it is inside the allow set (when one is given) and outside the deny set.

use crate::error::{Error, Result};
use crate::matrix_file::MAX_MASK_WORDS;

/// Why a row may or may not be returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The row may be returned.
    Eligible,
    /// The row is outside the allow set or inside the deny set.
    OutOfScope,
    /// The row is in scope but requires flags the caller did not satisfy.
    MissingFlags,
}

/// A set of row numbers over `0..n_rows`, as a bitset.
#[derive(Debug, Clone)]
pub(crate) struct RowSet {
    bits: Vec<u64>,
}

impl RowSet {
    /// The set of `rows`; an error naming `what` when a row is not below `n_rows`.
    pub(crate) fn new(n_rows: usize, rows: &[u32], what: &str) -> Result<Self> {
        let mut bits = vec![0u64; n_rows.div_ceil(64)];
        for &row in rows {
            let index = row as usize;
            if index >= n_rows {
                return Err(Error::invalid(format!(
                    "{what} contains row {row}, but the index has {n_rows} rows (valid: 0..{n_rows})"
                )));
            }
            bits[index / 64] |= 1 << (index % 64);
        }
        Ok(Self { bits })
    }

    pub(crate) fn contains(&self, row: usize) -> bool {
        self.bits[row / 64] & (1 << (row % 64)) != 0
    }

    fn len(&self) -> usize {
        self.bits.iter().map(|word| word.count_ones() as usize).sum()
    }

    fn intersection_len(&self, other: &Self) -> usize {
        self.bits.iter().zip(&other.bits).map(|(a, b)| (a & b).count_ones() as usize).sum()
    }
}

/// Decides per row whether it may be returned. Cheap to build per query: O(flags + scope).
#[derive(Debug, Clone)]
pub struct Gate<'a> {
    n_rows: usize,
    masks: &'a [u64],
    words: usize,
    satisfied: Vec<u64>,
    allow: Option<RowSet>,
    deny: Option<RowSet>,
}

impl<'a> Gate<'a> {
    /// A gate over `n_rows` rows whose required flags are `masks` (row-major, `words` words
    /// per row; `words == 0` and an empty slice when no row requires anything). Starts with
    /// no flag satisfied and no scope restriction.
    pub fn new(n_rows: usize, masks: &'a [u64], words: usize) -> Result<Self> {
        if masks.len() != n_rows * words {
            return Err(Error::invalid(format!(
                "gating masks hold {} words, expected {n_rows} rows x {words} words",
                masks.len()
            )));
        }
        Ok(Self { n_rows, masks, words, satisfied: vec![0; words], allow: None, deny: None })
    }

    /// Marks `flags` (flag numbers) as satisfied. Flags beyond the masks' width are accepted
    /// and ignored: no row can require them.
    pub fn with_flags(mut self, flags: &[u32]) -> Self {
        for &flag in flags {
            let word = flag as usize / 64;
            if word < self.words {
                self.satisfied[word] |= 1 << (flag % 64);
            }
        }
        self
    }

    /// Restricts eligible rows to `rows`. Fails on a row outside the index.
    pub fn with_allow(mut self, rows: &[u32]) -> Result<Self> {
        self.allow = Some(RowSet::new(self.n_rows, rows, "allow")?);
        Ok(self)
    }

    /// Excludes `rows`. Fails on a row outside the index.
    pub fn with_deny(mut self, rows: &[u32]) -> Result<Self> {
        self.deny = Some(RowSet::new(self.n_rows, rows, "deny")?);
        Ok(self)
    }

    /// Number of rows the gate covers.
    pub fn n_rows(&self) -> usize {
        self.n_rows
    }

    /// How many rows are outside the allow set or inside the deny set, without visiting
    /// them: what a scan counts as [`Verdict::OutOfScope`].
    pub fn n_out_of_scope(&self) -> usize {
        let allowed = self.allow.as_ref().map_or(self.n_rows, RowSet::len);
        let denied = match (&self.allow, &self.deny) {
            (_, None) => 0,
            (None, Some(deny)) => deny.len(),
            (Some(allow), Some(deny)) => allow.intersection_len(deny),
        };
        self.n_rows - allowed + denied
    }

    /// True when no row can be gated out (no masks, no scope), so scans may skip the checks.
    pub fn is_open(&self) -> bool {
        self.words == 0 && self.allow.is_none() && self.deny.is_none()
    }

    /// Whether `row` is out of scope, gated by missing flags, or eligible.
    ///
    /// # Panics
    /// If `row >= n_rows`.
    #[inline]
    pub fn verdict(&self, row: usize) -> Verdict {
        assert!(row < self.n_rows, "row {row} out of range for a gate over {} rows", self.n_rows);
        if self.allow.as_ref().is_some_and(|allow| !allow.contains(row))
            || self.deny.as_ref().is_some_and(|deny| deny.contains(row))
        {
            return Verdict::OutOfScope;
        }
        let required = &self.masks[row * self.words..(row + 1) * self.words];
        if required.iter().zip(&self.satisfied).any(|(need, have)| need & !have != 0) {
            Verdict::MissingFlags
        } else {
            Verdict::Eligible
        }
    }

    /// Whether `row` may be returned.
    #[inline]
    pub fn is_eligible(&self, row: usize) -> bool {
        self.verdict(row) == Verdict::Eligible
    }

    /// The flags `row` requires that the caller did not satisfy, ascending.
    pub fn missing_flags(&self, row: usize) -> Vec<u32> {
        let required = &self.masks[row * self.words..(row + 1) * self.words];
        bits_of(required.iter().zip(&self.satisfied).map(|(need, have)| need & !have))
    }

    /// The flags `row` requires, ascending.
    pub fn required_flags(&self, row: usize) -> Vec<u32> {
        bits_of(self.masks[row * self.words..(row + 1) * self.words].iter().copied())
    }
}

/// Flag numbers of the set bits in a little-endian sequence of u64 words.
fn bits_of(words: impl Iterator<Item = u64>) -> Vec<u32> {
    let mut flags = Vec::new();
    for (index, mut word) in words.enumerate() {
        while word != 0 {
            flags.push(index as u32 * 64 + word.trailing_zeros());
            word &= word - 1;
        }
    }
    flags
}

/// Packs lists of flag numbers into row masks of `words` words each (row-major).
///
/// Fails when a flag does not fit in `words * 64` bits, or past the [`MAX_MASK_WORDS`] an
/// index file holds.
pub fn pack_masks(rows: &[Vec<u32>], words: usize) -> Result<Vec<u64>> {
    // Checked before allocating: the words of a flag near 2^32 on every row can be terabytes,
    // and an allocation that fails aborts the process.
    let limit = words.min(MAX_MASK_WORDS) * 64;
    for (row, flags) in rows.iter().enumerate() {
        if let Some(&flag) = flags.iter().find(|&&flag| flag as usize >= limit) {
            return Err(Error::invalid(format!(
                "row {row} requires flag {flag}, beyond the {} flags of {words} mask words (an \
                 index holds at most {} flags)",
                words.saturating_mul(64),
                MAX_MASK_WORDS * 64
            )));
        }
    }
    if words > MAX_MASK_WORDS {
        return Err(Error::invalid(format!(
            "{words} mask words per row, at most {MAX_MASK_WORDS} allowed"
        )));
    }
    let mut masks = vec![0u64; rows.len() * words];
    for (row, flags) in rows.iter().enumerate() {
        for &flag in flags {
            masks[row * words + flag as usize / 64] |= 1 << (flag % 64);
        }
    }
    Ok(masks)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_beyond_the_first_word() {
        let masks = pack_masks(&[vec![], vec![3], vec![70, 3], vec![129]], 3).unwrap();
        let gate = Gate::new(4, &masks, 3).unwrap().with_flags(&[3, 500]);
        let verdicts: Vec<_> = (0..4).map(|row| gate.verdict(row)).collect();
        assert_eq!(
            verdicts,
            [Verdict::Eligible, Verdict::Eligible, Verdict::MissingFlags, Verdict::MissingFlags]
        );
        assert_eq!(gate.missing_flags(2), vec![70]);
        assert_eq!(gate.required_flags(2), vec![3, 70]);
        assert_eq!(gate.missing_flags(3), vec![129]);
    }

    #[test]
    fn scope_overrides_flags_and_rejects_bad_rows() {
        let gate = Gate::new(5, &[], 0).unwrap().with_allow(&[1, 2, 3]).unwrap();
        let gate = gate.with_deny(&[2]).unwrap();
        let eligible: Vec<_> = (0..5).filter(|&row| gate.is_eligible(row)).collect();
        assert_eq!(eligible, vec![1, 3]);
        assert_eq!(gate.verdict(2), Verdict::OutOfScope);
        assert_eq!(gate.n_out_of_scope(), 3);
        let counted = (0..5).filter(|&row| gate.verdict(row) == Verdict::OutOfScope).count();
        assert_eq!(gate.n_out_of_scope(), counted);
        let deny_only = Gate::new(130, &[], 0).unwrap().with_deny(&[0, 64, 129, 129]).unwrap();
        assert_eq!(deny_only.n_out_of_scope(), 3);
        assert_eq!(Gate::new(130, &[], 0).unwrap().n_out_of_scope(), 0);
        let err = Gate::new(5, &[], 0).unwrap().with_deny(&[5]).unwrap_err();
        assert!(err.to_string().contains("deny contains row 5"), "{err}");
        assert!(pack_masks(&[vec![64]], 1).is_err());
    }

    #[test]
    fn a_flag_past_the_format_is_refused_before_the_masks_are_allocated() {
        // The words of flag 2^32 - 1 on 1,000 rows are 512 GiB: an allocation that fails
        // aborts the process, which no caller can catch.
        let rows = vec![vec![u32::MAX]; 1000];
        let err = pack_masks(&rows, u32::MAX as usize / 64 + 1).unwrap_err().to_string();
        assert!(err.contains("row 0 requires flag 4294967295"), "{err}");
        assert!(err.contains("at most 65536 flags"), "{err}");
        let widest = pack_masks(&[vec![65_535]], MAX_MASK_WORDS).unwrap();
        assert_eq!(widest[MAX_MASK_WORDS - 1], 1 << 63);
    }
}
