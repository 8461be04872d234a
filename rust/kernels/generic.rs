//! The float kernels' loops, written once over [`Simd`]; each instruction set's file implements
//! the trait with its intrinsics and keeps only its `#[target_feature]` entry points.
//!
//! Every function here and every method of the traits is `#[inline(always)]`: only code inlined
//! into a `#[target_feature]` entry point is compiled with its features. Left out of line, a
//! generic function would be compiled for the baseline target, with a call per intrinsic.
//!
//! A [`Simd`] value proves that the running CPU has its instruction set (each is made only by
//! a `#[target_feature]` function), so the arithmetic methods are safe; loads through raw
//! pointers are `unsafe`. Closures are kept out of the loops: a closure is compiled on its
//! own, without the entry point's features.
//!
//! [`integer`] does the same for the exact integer int8 path of the x86 kernels.

#[cfg(target_arch = "x86_64")]
pub(super) mod integer;

use std::ops::Range;

use super::batch::{apply_scales, batch_shape, row_blocks, BatchShape};
use super::{check_scan, row, rows_from, GROUP_ROWS};

/// How a kernel loads the columns left after its last whole step of `2 * LANES`. The choice
/// decides which accumulator sums which products, so it is part of the kernel's exact scores.
#[derive(Clone, Copy)]
pub(super) enum Tail {
    /// Register by register, each zero-padded (x86): in a dot product a whole register goes to
    /// the first accumulator and the rest to the second; the read probe adds each to its first.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    ByRegister,
    /// As one zero-padded step whose two registers go where every step's do (NEON).
    #[cfg_attr(not(target_arch = "aarch64"), allow(dead_code))]
    ByStep,
}

/// An instruction set's f32 registers and the operations the loops below need.
pub(super) trait Simd: Copy {
    /// A register of `LANES` f32 lanes.
    type F32: Copy;
    /// f32 lanes per register. A step of the loops is two registers.
    const LANES: usize;
    /// How the columns after the last whole step are loaded.
    const TAIL: Tail;
    /// How many rows ahead of its group a single-query scan prefetches; 0 for none.
    const PREFETCH_ROWS: usize = 0;

    /// Hints the cache to fetch `count` elements from `ptr`, which may lie past the rows' end.
    #[inline(always)]
    fn prefetch<T>(self, _ptr: *const T, _count: usize) {}

    /// Every lane zero.
    fn zero(self) -> Self::F32;

    /// `a + b` lane by lane.
    fn add(self, a: Self::F32, b: Self::F32) -> Self::F32;

    /// `acc + x * q` lane by lane, rounded once.
    fn mul_add(self, acc: Self::F32, x: Self::F32, q: Self::F32) -> Self::F32;

    /// The sum of the lanes.
    fn sum(self, v: Self::F32) -> f32;

    /// Loads the `LANES` f32 at `ptr`.
    ///
    /// # Safety
    /// `ptr .. ptr + LANES` must be readable.
    unsafe fn load_f32(self, ptr: *const f32) -> Self::F32;

    /// Widens the `LANES` int8 codes at `ptr` exactly to f32.
    ///
    /// # Safety
    /// `ptr .. ptr + LANES` must be readable.
    unsafe fn widen_i8(self, ptr: *const i8) -> Self::F32;

    /// Widens the `LANES` bf16 values (raw bits) at `ptr` exactly to f32.
    ///
    /// # Safety
    /// `ptr .. ptr + LANES` must be readable.
    unsafe fn widen_bf16(self, ptr: *const u16) -> Self::F32;

    /// [`Simd::widen_i8`] of the `2 * LANES` codes at `ptr`, low columns first.
    ///
    /// # Safety
    /// `ptr .. ptr + 2 * LANES` must be readable.
    #[inline(always)]
    unsafe fn widen_i8_step(self, ptr: *const i8) -> [Self::F32; 2] {
        // SAFETY: the caller's contract covers both registers.
        unsafe { [self.widen_i8(ptr), self.widen_i8(ptr.add(Self::LANES))] }
    }

    /// [`Simd::widen_bf16`] of the `2 * LANES` values at `ptr`, low columns first.
    ///
    /// # Safety
    /// `ptr .. ptr + 2 * LANES` must be readable.
    #[inline(always)]
    unsafe fn widen_bf16_step(self, ptr: *const u16) -> [Self::F32; 2] {
        // SAFETY: the caller's contract covers both registers.
        unsafe { [self.widen_bf16(ptr), self.widen_bf16(ptr.add(Self::LANES))] }
    }

    /// Loads `tail` (at most `LANES` elements) through a zeroed buffer of one register, which
    /// [`padded`] fills.
    fn load_padded<T: Element>(self, tail: &[T]) -> Self::F32;

    /// Loads `tail` (at most `LANES` f32), zero-filling the missing lanes.
    #[inline(always)]
    fn load_f32_tail(self, tail: &[f32]) -> Self::F32 {
        self.load_padded(tail)
    }
}

/// A storage type whose elements widen exactly to f32: f32, int8 codes, bf16 bits.
pub(super) trait Element: Copy + Default {
    /// Loads the `S::LANES` elements at `ptr` as f32.
    ///
    /// # Safety
    /// `ptr .. ptr + S::LANES` must be readable.
    unsafe fn load<S: Simd>(simd: S, ptr: *const Self) -> S::F32;

    /// Loads the `2 * S::LANES` elements at `ptr` as two registers, low columns first.
    ///
    /// # Safety
    /// `ptr .. ptr + 2 * S::LANES` must be readable.
    unsafe fn load_step<S: Simd>(simd: S, ptr: *const Self) -> [S::F32; 2];

    /// Loads `tail` (at most `S::LANES` elements) as f32, zero-filling the missing lanes.
    #[inline(always)]
    fn load_tail<S: Simd>(simd: S, tail: &[Self]) -> S::F32 {
        simd.load_padded(tail)
    }
}

impl Element for f32 {
    #[inline(always)]
    unsafe fn load<S: Simd>(simd: S, ptr: *const f32) -> S::F32 {
        // SAFETY: forwarded from the caller's contract.
        unsafe { simd.load_f32(ptr) }
    }

    #[inline(always)]
    unsafe fn load_step<S: Simd>(simd: S, ptr: *const f32) -> [S::F32; 2] {
        // SAFETY: the caller's contract covers both registers.
        unsafe { [simd.load_f32(ptr), simd.load_f32(ptr.add(S::LANES))] }
    }

    #[inline(always)]
    fn load_tail<S: Simd>(simd: S, tail: &[f32]) -> S::F32 {
        simd.load_f32_tail(tail)
    }
}

impl Element for i8 {
    #[inline(always)]
    unsafe fn load<S: Simd>(simd: S, ptr: *const i8) -> S::F32 {
        // SAFETY: forwarded from the caller's contract.
        unsafe { simd.widen_i8(ptr) }
    }

    #[inline(always)]
    unsafe fn load_step<S: Simd>(simd: S, ptr: *const i8) -> [S::F32; 2] {
        // SAFETY: forwarded from the caller's contract.
        unsafe { simd.widen_i8_step(ptr) }
    }
}

impl Element for u16 {
    #[inline(always)]
    unsafe fn load<S: Simd>(simd: S, ptr: *const u16) -> S::F32 {
        // SAFETY: forwarded from the caller's contract.
        unsafe { simd.widen_bf16(ptr) }
    }

    #[inline(always)]
    unsafe fn load_step<S: Simd>(simd: S, ptr: *const u16) -> [S::F32; 2] {
        // SAFETY: forwarded from the caller's contract.
        unsafe { simd.widen_bf16_step(ptr) }
    }
}

/// `tail` followed by zeros, `N` elements in all: the buffer a register-sized tail load reads.
///
/// # Panics
/// If `tail` holds more than `N` elements.
#[inline(always)]
pub(super) fn padded<T: Copy + Default, const N: usize>(tail: &[T]) -> [T; N] {
    let mut padded = [T::default(); N];
    padded[..tail.len()].copy_from_slice(tail);
    padded
}

/// Dot products of `Q` queries with `R` rows, all exactly as long as the queries: every row
/// load feeds all the queries. Each (query, row) pair accumulates even `LANES`-column chunks in
/// one register and odd chunks in another whatever `Q` and `R` are, so a score is bitwise the
/// same in every tile shape. With `ahead`, prefetches the same columns that many elements after
/// each row. Callers pass `None` or `Some` outright, so that once inlined the loop holds no test:
/// LLVM does not reliably hoist a run-time `ahead > 0` out of it (it stayed in the AVX2 f32
/// loop, 31 instructions a step instead of 24).
#[inline(always)]
pub(super) fn dot_tile<S: Simd, T: Element, const Q: usize, const R: usize>(
    simd: S,
    queries: [&[f32]; Q],
    rows: [&[T]; R],
    ahead: Option<usize>,
) -> [[f32; R]; Q] {
    let step = 2 * S::LANES;
    let dim = queries[0].len();
    assert!(queries.iter().all(|q| q.len() == dim) && rows.iter().all(|r| r.len() == dim));
    let mut acc_a = [[simd.zero(); R]; Q];
    let mut acc_b = [[simd.zero(); R]; Q];
    let mut col = 0;
    while col + step <= dim {
        let mut q_step = [[simd.zero(); 2]; Q];
        for k in 0..Q {
            // SAFETY: `col + 2 * LANES <= dim` and every query holds `dim` elements.
            q_step[k] = unsafe { f32::load_step(simd, queries[k].as_ptr().add(col)) };
        }
        for r in 0..R {
            // SAFETY: as above, and every row holds `dim` elements too.
            let ptr = unsafe { rows[r].as_ptr().add(col) };
            if let Some(ahead) = ahead {
                simd.prefetch(ptr.wrapping_add(ahead), step);
            }
            // SAFETY: as above.
            let [x_a, x_b] = unsafe { T::load_step(simd, ptr) };
            for k in 0..Q {
                acc_a[k][r] = simd.mul_add(acc_a[k][r], x_a, q_step[k][0]);
                acc_b[k][r] = simd.mul_add(acc_b[k][r], x_b, q_step[k][1]);
            }
        }
        col += step;
    }
    if col < dim {
        match S::TAIL {
            Tail::ByRegister => tail_by_register(simd, queries, rows, col, &mut acc_a, &mut acc_b),
            Tail::ByStep => tail_by_step(simd, queries, rows, col, &mut acc_a, &mut acc_b),
        }
    }
    let mut sums = [[0.0; R]; Q];
    for k in 0..Q {
        for r in 0..R {
            sums[k][r] = simd.sum(simd.add(acc_a[k][r], acc_b[k][r]));
        }
    }
    sums
}

/// [`Tail::ByRegister`] for [`dot_tile`]: columns `col..` (fewer than a step) of every pair.
#[inline(always)]
fn tail_by_register<S: Simd, T: Element, const Q: usize, const R: usize>(
    simd: S,
    queries: [&[f32]; Q],
    rows: [&[T]; R],
    mut col: usize,
    acc_a: &mut [[S::F32; R]; Q],
    acc_b: &mut [[S::F32; R]; Q],
) {
    let dim = queries[0].len();
    if col + S::LANES <= dim {
        for r in 0..R {
            // SAFETY: `col + LANES <= dim`, and `dot_tile` checked that every query and row
            // holds `dim` elements.
            let x = unsafe { T::load(simd, rows[r].as_ptr().add(col)) };
            for k in 0..Q {
                // SAFETY: as above.
                let q = unsafe { f32::load(simd, queries[k].as_ptr().add(col)) };
                acc_a[k][r] = simd.mul_add(acc_a[k][r], x, q);
            }
        }
        col += S::LANES;
    }
    if col < dim {
        for r in 0..R {
            let x = T::load_tail(simd, &rows[r][col..]);
            for k in 0..Q {
                let q = f32::load_tail(simd, &queries[k][col..]);
                acc_b[k][r] = simd.mul_add(acc_b[k][r], x, q);
            }
        }
    }
}

/// [`Tail::ByStep`] for [`dot_tile`]: columns `col..` (fewer than a step) of every pair.
#[inline(always)]
fn tail_by_step<S: Simd, T: Element, const Q: usize, const R: usize>(
    simd: S,
    queries: [&[f32]; Q],
    rows: [&[T]; R],
    col: usize,
    acc_a: &mut [[S::F32; R]; Q],
    acc_b: &mut [[S::F32; R]; Q],
) {
    let dim = queries[0].len();
    let split = dim.min(col + S::LANES);
    for r in 0..R {
        let x_a = T::load_tail(simd, &rows[r][col..split]);
        let x_b = T::load_tail(simd, &rows[r][split..]);
        for k in 0..Q {
            let q_a = f32::load_tail(simd, &queries[k][col..split]);
            let q_b = f32::load_tail(simd, &queries[k][split..]);
            acc_a[k][r] = simd.mul_add(acc_a[k][r], x_a, q_a);
            acc_b[k][r] = simd.mul_add(acc_b[k][r], x_b, q_b);
        }
    }
}

/// [`super::dot_f32`].
#[inline(always)]
pub(super) fn dot_f32<S: Simd>(simd: S, a: &[f32], b: &[f32]) -> f32 {
    dot_tile::<S, f32, 1, 1>(simd, [a], [b], None)[0][0]
}

/// `out[i] = dot(query, row i)`, [`GROUP_ROWS`] rows at a time: [`super::scan_f32`] and
/// [`super::scan_bf16`].
#[inline(always)]
pub(super) fn scan_rows<S: Simd, T: Element>(
    simd: S,
    query: &[f32],
    rows: &[T],
    stride: usize,
    out: &mut [f32],
) {
    let dim = query.len();
    check_scan(dim, rows.len(), stride, out.len());
    let ahead = (S::PREFETCH_ROWS > 0).then_some(S::PREFETCH_ROWS * stride);
    let mut groups = out.chunks_exact_mut(GROUP_ROWS);
    let mut first = 0;
    for group in &mut groups {
        let group_rows = rows_from(rows, first, stride, dim);
        let [scores] = dot_tile::<S, T, 1, GROUP_ROWS>(simd, [query], group_rows, ahead);
        group.copy_from_slice(&scores);
        first += GROUP_ROWS;
    }
    for (i, score) in groups.into_remainder().iter_mut().enumerate() {
        let single = row(rows, first + i, stride, dim);
        *score = dot_tile::<S, T, 1, 1>(simd, [query], [single], None)[0][0];
    }
}

/// [`super::scan_i8`] by widening the codes to f32.
#[inline(always)]
pub(super) fn scan_i8<S: Simd>(
    simd: S,
    query: &[f32],
    rows: &[i8],
    stride: usize,
    scales: &[f32],
    out: &mut [f32],
) {
    assert_eq!(scales.len(), out.len(), "one scale per row");
    scan_rows(simd, query, rows, stride, out);
    apply_scales(scales, out);
}

/// Scores of `n_queries` queries (back to back in `queries`) against every row into `out`
/// (`n_queries x n_rows`), in tiles of `Q` queries x `R` rows within each L2-sized block of
/// rows: [`super::scan_f32_batch`] and [`super::scan_bf16_batch`].
#[inline(always)]
pub(super) fn scan_batch<S: Simd, T: Element, const Q: usize, const R: usize>(
    simd: S,
    queries: &[f32],
    n_queries: usize,
    rows: &[T],
    stride: usize,
    out: &mut [f32],
) {
    let Some(shape) = batch_shape(queries.len(), n_queries, out.len()) else {
        return;
    };
    for block in row_blocks(shape.n_rows, stride, size_of::<T>()) {
        scan_tiles::<S, T, Q, R>(simd, queries, shape, rows, stride, block, out);
    }
}

/// [`super::scan_i8_batch`] by widening the codes to f32.
#[inline(always)]
pub(super) fn scan_i8_batch<S: Simd, const Q: usize, const R: usize>(
    simd: S,
    queries: &[f32],
    n_queries: usize,
    rows: &[i8],
    stride: usize,
    scales: &[f32],
    out: &mut [f32],
) {
    scan_batch::<S, i8, Q, R>(simd, queries, n_queries, rows, stride, out);
    apply_scales(scales, out);
}

/// Query `q` against every row `i` in `block` into `out[q * n_rows + i]`, `Q` queries x `R`
/// rows per tile; leftover queries go through the single-query path.
#[inline(always)]
fn scan_tiles<S: Simd, T: Element, const Q: usize, const R: usize>(
    simd: S,
    queries: &[f32],
    shape: BatchShape,
    rows: &[T],
    stride: usize,
    block: Range<usize>,
    out: &mut [f32],
) {
    let BatchShape { dim, n_rows: out_stride } = shape;
    let (rows, out, n) = (&rows[block.start * stride..], &mut out[block.start..], block.len());
    let n_queries = queries.len() / dim;
    check_scan(dim, rows.len(), stride, n);
    let mut first_query = 0;
    while first_query + Q <= n_queries {
        let tile_queries = rows_from(queries, first_query, dim, dim);
        let mut first_row = 0;
        while first_row + R <= n {
            let tile_rows = rows_from(rows, first_row, stride, dim);
            let scores = dot_tile::<S, T, Q, R>(simd, tile_queries, tile_rows, None);
            for (k, scores) in scores.iter().enumerate() {
                let at = (first_query + k) * out_stride + first_row;
                out[at..at + R].copy_from_slice(scores);
            }
            first_row += R;
        }
        for i in first_row..n {
            let scores =
                dot_tile::<S, T, Q, 1>(simd, tile_queries, [row(rows, i, stride, dim)], None);
            for (k, [score]) in scores.iter().enumerate() {
                out[(first_query + k) * out_stride + i] = *score;
            }
        }
        first_query += Q;
    }
    for q in first_query..n_queries {
        let query = row(queries, q, dim, dim);
        scan_rows(simd, query, rows, stride, &mut out[q * out_stride..q * out_stride + n]);
    }
}

/// [`super::read_probe_f32`]: four independent add chains, `4 * LANES` floats per iteration.
#[inline(always)]
pub(super) fn read_probe_f32<S: Simd>(simd: S, rows: &[f32]) -> f32 {
    let lanes = S::LANES;
    let mut acc = [simd.zero(); 4];
    let mut blocks = rows.chunks_exact(4 * lanes);
    for block in &mut blocks {
        for (k, acc) in acc.iter_mut().enumerate() {
            // SAFETY: `block` holds `4 * LANES` elements, so register `k` is in bounds.
            *acc = simd.add(*acc, unsafe { simd.load_f32(block.as_ptr().add(k * lanes)) });
        }
    }
    match S::TAIL {
        Tail::ByRegister => {
            for chunk in blocks.remainder().chunks(lanes) {
                acc[0] = simd.add(acc[0], simd.load_f32_tail(chunk));
            }
        }
        Tail::ByStep => {
            for step in blocks.remainder().chunks(2 * lanes) {
                let (low, high) = step.split_at(step.len().min(lanes));
                acc[0] = simd.add(acc[0], simd.load_f32_tail(low));
                acc[1] = simd.add(acc[1], simd.load_f32_tail(high));
            }
        }
    }
    simd.sum(simd.add(simd.add(acc[0], acc[1]), simd.add(acc[2], acc[3])))
}
