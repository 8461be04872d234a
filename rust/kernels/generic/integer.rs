//! The x86 kernels' exact integer int8 path, written once over [`IntegerDot`]: the query is
//! rounded to integers once per scan, and each row's products are summed exactly in i32 lanes.
//! Queries longer than [`INTEGER_MAX_DIM`] take the widening path of a [`Simd`] instead.
//!
//! As in the parent module, the loops are `#[inline(always)]` and no closure holds one.

use super::{scan_i8 as scan_i8_widening, scan_i8_batch as scan_i8_batch_widening, Simd};
use crate::kernels::batch::{apply_scales, batch_shape, row_blocks, BatchShape};
use crate::kernels::query_i16::{QueryI16, INTEGER_MAX_DIM};
use crate::kernels::{check_scan, prefetch, row, rows_from, GROUP_ROWS};

/// A query as an integer kernel multiplies it.
pub(in crate::kernels) trait IntegerQuery {
    /// Rounds `query` to integers, zero-padded to a multiple of `step` columns.
    fn round(query: &[f32], step: usize) -> Self;

    /// Columns held, the padding included.
    fn padded_len(&self) -> usize;

    /// Multiplies an exact integer dot product back to the query's scale.
    fn scale(&self) -> f32;
}

impl IntegerQuery for QueryI16 {
    #[inline(always)]
    fn round(query: &[f32], step: usize) -> Self {
        Self::new(query, step)
    }

    #[inline(always)]
    fn padded_len(&self) -> usize {
        self.values.len()
    }

    #[inline(always)]
    fn scale(&self) -> f32 {
        self.scale
    }
}

/// An instruction set's integer int8 dot product, `STEP` row bytes at a time.
pub(in crate::kernels) trait IntegerDot: Copy {
    /// Row bytes per step.
    const STEP: usize;
    /// How many rows ahead of its group a scan prefetches; 0 for none.
    const PREFETCH_ROWS: usize;
    /// The rounded query.
    type Query: IntegerQuery;
    /// The query's registers for one step.
    type QueryStep: Copy;
    /// One step of a row, loaded.
    type Row: Copy;
    /// One row's accumulators.
    type Acc: Copy;
    /// The widening kernels that take queries longer than [`INTEGER_MAX_DIM`].
    type Widening: Simd;

    /// The widening kernels' instruction set, available wherever this one is.
    fn widening(self) -> Self::Widening;

    /// Accumulators holding zero.
    fn zero(self) -> Self::Acc;

    /// The query's registers for columns `col .. col + STEP`.
    ///
    /// # Safety
    /// `col + STEP` must not exceed `query.padded_len()`.
    unsafe fn query_step(self, query: &Self::Query, col: usize) -> Self::QueryStep;

    /// Loads the `STEP` row bytes at `ptr`.
    ///
    /// # Safety
    /// `ptr .. ptr + STEP` must be readable.
    unsafe fn load_row(self, ptr: *const i8) -> Self::Row;

    /// Loads `tail` (fewer than `STEP` bytes) zero-padded to a step.
    fn load_row_tail(self, tail: &[i8]) -> Self::Row;

    /// Adds the products of one step of a row and of the query to `acc`, exactly.
    fn mul_add(self, acc: Self::Acc, x: Self::Row, q: Self::QueryStep) -> Self::Acc;

    /// The exact dot product `acc` holds.
    fn sum(self, acc: Self::Acc, query: &Self::Query) -> i64;
}

/// Exact integer dot products of `query` with `R` int8 rows of `dim` elements, while
/// prefetching the same columns `ahead` elements after each row when given (`None` or `Some`
/// outright, as for [`super::dot_tile`]).
#[inline(always)]
fn dot_rows<I: IntegerDot, const R: usize>(
    int: I,
    query: &I::Query,
    rows: [&[i8]; R],
    ahead: Option<usize>,
) -> [i64; R] {
    let dim = rows[0].len();
    assert!(
        rows.iter().all(|r| r.len() == dim) && query.padded_len() >= dim.next_multiple_of(I::STEP)
    );
    let mut acc = [int.zero(); R];
    let mut col = 0;
    while col + I::STEP <= dim {
        // SAFETY: the query covers `dim` rounded up to a whole step (checked above).
        let q = unsafe { int.query_step(query, col) };
        for r in 0..R {
            // SAFETY: `col + STEP <= dim` and every row holds `dim` elements.
            let ptr = unsafe { rows[r].as_ptr().add(col) };
            if let Some(ahead) = ahead {
                prefetch(ptr.wrapping_add(ahead), I::STEP);
            }
            // SAFETY: as above.
            let x = unsafe { int.load_row(ptr) };
            acc[r] = int.mul_add(acc[r], x, q);
        }
        col += I::STEP;
    }
    if col < dim {
        // SAFETY: as above; the query's padding holds zeros.
        let q = unsafe { int.query_step(query, col) };
        for r in 0..R {
            acc[r] = int.mul_add(acc[r], int.load_row_tail(&rows[r][col..]), q);
        }
    }
    let mut sums = [0; R];
    for r in 0..R {
        sums[r] = int.sum(acc[r], query);
    }
    sums
}

/// `out[i] = dot(query, row i)` for int8 rows (scales not applied), [`GROUP_ROWS`] rows at a
/// time.
#[inline(always)]
fn scan_rows<I: IntegerDot>(
    int: I,
    query: &I::Query,
    dim: usize,
    rows: &[i8],
    stride: usize,
    out: &mut [f32],
) {
    check_scan(dim, rows.len(), stride, out.len());
    let scale = query.scale();
    let ahead = (I::PREFETCH_ROWS > 0).then_some(I::PREFETCH_ROWS * stride);
    let mut groups = out.chunks_exact_mut(GROUP_ROWS);
    let mut first = 0;
    for group in &mut groups {
        let group_rows = rows_from(rows, first, stride, dim);
        let dots = dot_rows::<I, GROUP_ROWS>(int, query, group_rows, ahead);
        for (out, dot) in group.iter_mut().zip(dots) {
            // The integer sum is exact; converting and scaling it are the only roundings.
            *out = dot as f32 * scale;
        }
        first += GROUP_ROWS;
    }
    for (i, out) in groups.into_remainder().iter_mut().enumerate() {
        let single = row(rows, first + i, stride, dim);
        *out = dot_rows::<I, 1>(int, query, [single], None)[0] as f32 * scale;
    }
}

/// [`crate::kernels::scan_i8`] through `int`, or through its widening kernels above
/// [`INTEGER_MAX_DIM`].
#[inline(always)]
pub(in crate::kernels) fn scan_i8<I: IntegerDot>(
    int: I,
    query: &[f32],
    rows: &[i8],
    stride: usize,
    scales: &[f32],
    out: &mut [f32],
) {
    if query.len() > INTEGER_MAX_DIM {
        return scan_i8_widening(int.widening(), query, rows, stride, scales, out);
    }
    assert_eq!(scales.len(), out.len(), "one scale per row");
    scan_rows(int, &I::Query::round(query, I::STEP), query.len(), rows, stride, out);
    apply_scales(scales, out);
}

/// [`crate::kernels::scan_i8_batch`] through `int`, or through its widening kernels in tiles
/// of `Q` queries x `R` rows above [`INTEGER_MAX_DIM`].
#[inline(always)]
pub(in crate::kernels) fn scan_i8_batch<I: IntegerDot, const Q: usize, const R: usize>(
    int: I,
    queries: &[f32],
    n_queries: usize,
    rows: &[i8],
    stride: usize,
    scales: &[f32],
    out: &mut [f32],
) {
    let Some(BatchShape { dim, n_rows }) = batch_shape(queries.len(), n_queries, out.len()) else {
        return;
    };
    if dim > INTEGER_MAX_DIM {
        let widening = int.widening();
        return scan_i8_batch_widening::<_, Q, R>(
            widening, queries, n_queries, rows, stride, scales, out,
        );
    }
    let queries: Vec<I::Query> =
        queries.chunks_exact(dim).map(|q| I::Query::round(q, I::STEP)).collect();
    // `batch::blockwise` takes the scan as a closure, which would not inherit the entry
    // point's features.
    for block in row_blocks(n_rows, stride, 1) {
        let block_rows = &rows[block.start * stride..];
        for (query, scores) in queries.iter().zip(out.chunks_exact_mut(n_rows)) {
            scan_rows(int, query, dim, block_rows, stride, &mut scores[block.clone()]);
        }
    }
    apply_scales(scales, out);
}
