//! The scan behind every search: stored rows are scored in blocks small enough to stay in
//! cache, split over threads, fed to a [`Collector`] per query, and the candidates left are
//! re-scored exactly (see the parent module for why that gives the exact top-k).

use rayon::prelude::*;

use super::collect::{Collector, QueryScan, ScanPlan};
use super::pool;
use super::{GatedCandidate, Index, SearchResult, GATED_REPORT_LEN};
use crate::kernels;
use crate::matrix_file::Dtype;
use crate::topk::TopK;

/// Bytes of stored rows per scan block of a batch: inside every current core's L2 (1-2 MiB
/// on servers, 256 KiB on older parts), so every query of the batch reuses a block from cache.
const BATCH_BLOCK_BYTES: usize = 128 * 1024;

/// Rows per scan block of a single query. Nothing is reused across blocks then, so blocks are
/// as long as the score buffer allows while staying in L1 / L2 (16 KiB): each kernel call has a
/// fixed cost (the int8 kernels convert the query to i16 on every call), which short blocks
/// pay again and again (measured in docs/design.md, "Kernels and ISA dispatch").
const SINGLE_QUERY_BLOCK_ROWS: usize = 4096;

impl Index {
    /// Scan scores of `query` against `rows` at the storage precision into `out`.
    pub(super) fn scan_rows(&self, query: &[f32], rows: std::ops::Range<usize>, out: &mut [f32]) {
        debug_assert_eq!(rows.len(), out.len());
        let file = &self.file;
        match file.dtype() {
            Dtype::F32 => {
                let stride = file.stride();
                kernels::scan_f32(query, &file.f32_rows()[rows.start * stride..], stride, out);
            }
            Dtype::Int8 => {
                let (codes, scales) = file.int8_rows().expect("int8 storage");
                let stride = file.quant_stride();
                kernels::scan_i8(query, &codes[rows.start * stride..], stride, &scales[rows], out);
            }
            Dtype::Bf16 => {
                let bits = file.bf16_rows().expect("bf16 storage");
                let stride = file.quant_stride();
                kernels::scan_bf16(query, &bits[rows.start * stride..], stride, out);
            }
        }
    }

    fn row_bytes(&self) -> usize {
        match self.file.dtype() {
            Dtype::F32 => self.file.stride() * 4,
            Dtype::Int8 => self.file.quant_stride(),
            Dtype::Bf16 => self.file.quant_stride() * 2,
        }
    }

    /// Scans every row for every query, split over `threads` row ranges when asked.
    pub(super) fn scan_parallel(&self, queries: &[f32], plan: &ScanPlan<'_, '_>) -> Vec<QueryScan> {
        let n_queries = queries.len() / self.dim();
        let n = self.len();
        let threads = self.threads.min(n.div_ceil(1024)).max(1);
        let Some(pool) = (threads > 1).then(pool::current).flatten() else {
            return self.scan_range(queries, 0..n, plan);
        };
        let chunk = n.div_ceil(threads);
        let parts: Vec<Vec<QueryScan>> = pool.install(|| {
            (0..threads)
                .into_par_iter()
                .map(|t| self.scan_range(queries, t * chunk..((t + 1) * chunk).min(n), plan))
                .collect()
        });
        let mut merged: Vec<QueryScan> = (0..n_queries).map(|_| QueryScan::new(plan)).collect();
        for part in parts {
            for (total, scan) in merged.iter_mut().zip(part) {
                total.merge(scan);
            }
        }
        merged
    }

    /// Scans `rows` for every query, one L2-sized block at a time.
    fn scan_range(
        &self,
        queries: &[f32],
        rows: std::ops::Range<usize>,
        plan: &ScanPlan<'_, '_>,
    ) -> Vec<QueryScan> {
        let dim = self.dim();
        let mut scans: Vec<QueryScan> =
            queries.chunks_exact(dim).map(|_| QueryScan::new(plan)).collect();
        let block_rows = if queries.len() == dim {
            SINGLE_QUERY_BLOCK_ROWS
        } else {
            (BATCH_BLOCK_BYTES / self.row_bytes()).clamp(16, SINGLE_QUERY_BLOCK_ROWS)
        };
        let mut scores = vec![0f32; block_rows.min(rows.len())];
        let mut start = rows.start;
        while start < rows.end {
            let end = (start + block_rows).min(rows.end);
            let block = &mut scores[..end - start];
            for (query, scan) in queries.chunks_exact(dim).zip(&mut scans) {
                self.scan_rows(query, start..end, block);
                scan.feed(start, block, plan.gate);
            }
            start = end;
        }
        scans
    }

    /// Re-scores the candidates of one query exactly and assembles its result.
    pub(super) fn finish(
        &self,
        query: &[f32],
        scan: QueryScan,
        plan: &ScanPlan<'_, '_>,
    ) -> SearchResult {
        let floor = plan.threshold.unwrap_or(f32::NEG_INFINITY);
        let exact_top = |candidates: Collector, k: usize| {
            let mut best = TopK::new(k);
            for row in candidates.into_rows() {
                let score = self.exact_score(query, row);
                if score >= floor {
                    best.push(row, score);
                }
            }
            best.into_sorted()
        };
        let hits = exact_top(scan.eligible, plan.k);
        let gated = exact_top(scan.gated, GATED_REPORT_LEN)
            .into_iter()
            .map(|hit| GatedCandidate {
                row: hit.row,
                score: hit.score,
                missing_flags: plan.gate.missing_flags(hit.row as usize),
            })
            .collect();
        SearchResult { hits, n_gated: scan.n_gated, n_out_of_scope: scan.n_out_of_scope, gated }
    }
}
