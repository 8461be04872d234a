//! Compact storage for many short strings and for row lists (CSR), shared by the index and
//! its file format.

/// Many strings stored back to back in one buffer: `get(i)` is `blob[offsets[i]..offsets[i+1]]`.
/// One allocation per table instead of one per string, which keeps loading a file cheap.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct StrTable {
    pub(super) blob: String,
    /// `len() + 1` increasing byte offsets into `blob`, starting at 0.
    pub(super) offsets: Vec<u32>,
}

impl StrTable {
    /// Builds a table from strings, in the order given.
    pub(super) fn from_strs<'s>(strs: impl IntoIterator<Item = &'s str>) -> Self {
        let mut table = Self { blob: String::new(), offsets: vec![0] };
        for s in strs {
            table.blob.push_str(s);
            table.offsets.push(u32::try_from(table.blob.len()).expect("string table under 4 GiB"));
        }
        table
    }

    /// Number of strings.
    pub(super) fn len(&self) -> usize {
        self.offsets.len() - 1
    }

    /// The `i`-th string.
    pub(super) fn get(&self, i: usize) -> &str {
        &self.blob[self.offsets[i] as usize..self.offsets[i + 1] as usize]
    }

    /// Position of `s` in a table whose strings are sorted and unique.
    pub(super) fn find_sorted(&self, s: &str) -> Option<usize> {
        let (mut lo, mut hi) = (0, self.len());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match self.get(mid).cmp(s) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => return Some(mid),
            }
        }
        None
    }

    /// Checks the invariants a table read from a file must hold; `Err` says which one failed.
    pub(super) fn check(&self, sorted_unique: bool) -> Result<(), String> {
        check_offsets(&self.offsets, self.blob.len())?;
        if let Some(&bad) = self.offsets.iter().find(|&&o| !self.blob.is_char_boundary(o as usize))
        {
            return Err(format!("offset {bad} splits a UTF-8 character"));
        }
        if sorted_unique && (1..self.len()).any(|i| self.get(i - 1) >= self.get(i)) {
            return Err("strings are not sorted and unique".into());
        }
        Ok(())
    }
}

/// Row lists stored back to back: list `i` is `rows[offsets[i]..offsets[i+1]]`, each list
/// strictly increasing.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct RowLists {
    pub(super) offsets: Vec<u32>,
    pub(super) rows: Vec<u32>,
}

impl RowLists {
    /// The range of `rows` (and of any parallel array) that holds list `i`.
    pub(super) fn range(&self, i: usize) -> std::ops::Range<usize> {
        self.offsets[i] as usize..self.offsets[i + 1] as usize
    }

    /// List `i`.
    pub(super) fn list(&self, i: usize) -> &[u32] {
        &self.rows[self.range(i)]
    }

    /// Checks the invariants lists read from a file must hold, for `n_rows` rows.
    pub(super) fn check(&self, n_rows: usize) -> Result<(), String> {
        check_offsets(&self.offsets, self.rows.len())?;
        for i in 0..self.offsets.len() - 1 {
            let list = self.list(i);
            if list.windows(2).any(|w| w[0] >= w[1]) {
                return Err(format!("row list {i} is not strictly increasing"));
            }
            if let Some(&row) = list.last().filter(|&&r| r as usize >= n_rows) {
                return Err(format!("row list {i} names row {row} of {n_rows}"));
            }
        }
        Ok(())
    }
}

/// Offsets must start at 0, never decrease, and end at `end`.
fn check_offsets(offsets: &[u32], end: usize) -> Result<(), String> {
    if offsets.first() != Some(&0) {
        return Err("offsets do not start at 0".into());
    }
    if offsets.windows(2).any(|w| w[0] > w[1]) {
        return Err("offsets decrease".into());
    }
    if offsets.last().map(|&o| o as usize) != Some(end) {
        return Err(format!("offsets end at {:?}, data holds {end}", offsets.last()));
    }
    Ok(())
}
