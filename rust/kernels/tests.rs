//! Every available kernel against a float64 reference on odd shapes.
//!
//! The kernels are called per instruction set (not through the process-wide `force`), so these
//! tests stay correct while other tests run in parallel threads.

use super::*;

/// SplitMix64: deterministic test data without a dependency.
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [-1, 1).
    fn unit(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }

    fn vec(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.unit()).collect()
    }
}

/// Around the AVX-512 register-resident f32 kernel: whole and partial last chunks after an odd
/// and an even number of whole ones, its largest dimension (384), and one past it (400).
const DIMS: [usize; 7] = [1, 7, 16, 56, 97, 384, 400];
const ROW_COUNTS: [usize; 6] = [0, 1, 3, 63, 64, 65];

/// Strides worth testing for a dimension: tight, odd padding, and 64-byte alignment.
fn strides(dim: usize) -> [usize; 3] {
    [dim, dim + 3, dim.div_ceil(16) * 16 + 16]
}

fn gamma(n: usize) -> f64 {
    let nu = n as f64 * f64::from(f32::EPSILON) / 2.0;
    nu / (1.0 - nu)
}

/// Asserts `got` is within the worst-case f32 rounding of any summation order of the dot
/// products whose exact values are `exact` and absolute-term sums `magnitude`.
fn assert_close(got: &[f32], exact: &[f64], magnitude: &[f64], dim: usize, what: &str) {
    assert_eq!(got.len(), exact.len());
    for (i, ((&g, &e), &m)) in got.iter().zip(exact).zip(magnitude).enumerate() {
        let bound = gamma(dim + 2) * m + 1e-12 * m + f64::from(f32::MIN_POSITIVE);
        assert!(
            (f64::from(g) - e).abs() <= bound,
            "{what}: row {i}: got {g}, exact {e}, bound {bound}"
        );
    }
}

/// Exact dot products (to f64 precision) and sums of absolute terms of `query` against rows.
fn reference(query: &[f32], rows: &[f64], stride: usize, n: usize) -> (Vec<f64>, Vec<f64>) {
    (0..n)
        .map(|i| {
            let row = &rows[i * stride..i * stride + query.len()];
            let terms = query.iter().zip(row).map(|(&q, &x)| f64::from(q) * x);
            terms.fold((0.0, 0.0), |(sum, abs), t| (sum + t, abs + t.abs()))
        })
        .unzip()
}

fn stored_len(n: usize, stride: usize, dim: usize) -> usize {
    if n == 0 {
        0
    } else {
        (n - 1) * stride + dim
    }
}

fn for_each_shape(mut check: impl FnMut(usize, usize, usize)) {
    for dim in DIMS {
        for n in ROW_COUNTS {
            for stride in strides(dim) {
                check(dim, n, stride);
            }
        }
    }
    check(384, 1001, 400);
}

#[test]
fn f32_scan_matches_reference_on_every_isa() {
    let mut rng = Rng(1);
    for isa in Isa::available() {
        for_each_shape(|dim, n, stride| {
            let query = rng.vec(dim);
            let rows = rng.vec(stored_len(n, stride, dim));
            let mut out = vec![f32::NAN; n];
            dispatch!(isa; serial::scan_f32, avx512::scan_f32_avx512, avx2::scan_f32_avx2,
                neon::scan_f32_neon, (&query, &rows, stride, &mut out));
            let wide: Vec<f64> = rows.iter().map(|&x| f64::from(x)).collect();
            let (exact, magnitude) = reference(&query, &wide, stride, n);
            assert_close(&out, &exact, &magnitude, dim, &format!("{isa:?} f32 {dim}x{n}/{stride}"));
        });
    }
}

#[test]
fn i8_scan_matches_reference_on_every_isa() {
    let mut rng = Rng(2);
    // Beyond `INTEGER_MAX_DIM` the x86 kernels fall back to widening to f32.
    let above_integer_limit = query_i16::INTEGER_MAX_DIM + 3;
    for isa in Isa::available() {
        let mut shapes: Vec<(usize, usize, usize)> = Vec::new();
        for_each_shape(|dim, n, stride| shapes.push((dim, n, stride)));
        shapes.push((above_integer_limit, 9, above_integer_limit + 5));
        for (dim, n, stride) in shapes {
            let query = rng.vec(dim);
            let rows: Vec<i8> = (0..stored_len(n, stride, dim))
                .map(|_| ((rng.next_u64() % 255) as i32 - 127) as i8)
                .collect();
            let scales: Vec<f32> = (0..n).map(|_| rng.unit().abs() / 127.0).collect();
            let mut out = vec![f32::NAN; n];
            scan_i8_on(isa, &query, &rows, stride, &scales, &mut out);
            let wide: Vec<f64> = rows.iter().map(|&x| f64::from(x)).collect();
            let (dots, magnitude) = reference(&query, &wide, stride, n);
            // The integer kernels round the query to i16 steps of max|q| / QUERY_I16_MAX: each
            // code can move by half a step (plus slack for the division's rounding).
            let max_q = query.iter().fold(0.0_f64, |m, &q| m.max(f64::from(q.abs())));
            let step = max_q / f64::from(QUERY_I16_MAX) * (0.5 + 1.0 / 1024.0);
            for i in 0..n {
                let scale = f64::from(scales[i]);
                let codes = &wide[i * stride..i * stride + dim];
                let code_sum: f64 = codes.iter().map(|c| c.abs()).sum();
                let exact = dots[i] * scale;
                // The widening path: sum, then one more rounding for the scale; the integer
                // path: exact sum, then three roundings of at most `127 d max|q|`.
                let bound = scale
                    * (gamma(dim + 3) * magnitude[i]
                        + code_sum * step
                        + gamma(3) * 127.0 * dim as f64 * max_q * 1.001)
                    + f64::from(f32::MIN_POSITIVE);
                let got = f64::from(out[i]);
                assert!(
                    (got - exact).abs() <= bound,
                    "{isa:?} i8 {dim}x{n}/{stride} row {i}: got {got}, exact {exact}, bound {bound}"
                );
            }
        }
    }
}

#[test]
fn bf16_scan_matches_reference_on_every_isa() {
    let mut rng = Rng(3);
    for isa in Isa::available() {
        for_each_shape(|dim, n, stride| {
            let query = rng.vec(dim);
            let rows: Vec<u16> = (0..stored_len(n, stride, dim))
                .map(|_| (rng.unit().to_bits() >> 16) as u16)
                .collect();
            let mut out = vec![f32::NAN; n];
            dispatch!(isa; serial::scan_bf16, avx512::scan_bf16_avx512, avx2::scan_bf16_avx2,
                neon::scan_bf16_neon, (&query, &rows, stride, &mut out));
            let wide: Vec<f64> =
                rows.iter().map(|&b| f64::from(f32::from_bits(u32::from(b) << 16))).collect();
            let (exact, magnitude) = reference(&query, &wide, stride, n);
            assert_close(&out, &exact, &magnitude, dim, &format!("{isa:?} bf16 {dim}x{n}"));
        });
    }
}

#[test]
fn extreme_magnitudes_and_zero_rows_stay_exact_enough() {
    let dim = 97;
    for isa in Isa::available() {
        for magnitude in [1e17_f32, 1e-20, 0.0] {
            let mut rng = Rng(4);
            let query: Vec<f32> = rng.vec(dim).iter().map(|q| q * magnitude).collect();
            let rows: Vec<f32> = rng.vec(dim * 5).iter().map(|x| x * magnitude).collect();
            let mut out = vec![f32::NAN; 5];
            dispatch!(isa; serial::scan_f32, avx512::scan_f32_avx512, avx2::scan_f32_avx2,
                neon::scan_f32_neon, (&query, &rows, dim, &mut out));
            let wide: Vec<f64> = rows.iter().map(|&x| f64::from(x)).collect();
            let (exact, abs) = reference(&query, &wide, dim, 5);
            assert_close(&out, &exact, &abs, dim, &format!("{isa:?} magnitude {magnitude}"));
            assert!(out.iter().all(|s| s.is_finite()), "{isa:?}: {out:?}");
        }
    }
}

#[test]
fn dot_and_read_probe_match_reference_on_every_isa() {
    let mut rng = Rng(5);
    for isa in Isa::available() {
        for len in [0, 1, 7, 15, 16, 17, 63, 64, 65, 97, 384, 1000] {
            let a = rng.vec(len);
            let b = rng.vec(len);
            let dot = dispatch!(isa; serial::dot_f32, avx512::dot_f32_avx512,
                avx2::dot_f32_avx2, neon::dot_f32_neon, (&a, &b));
            let wide: Vec<f64> = b.iter().map(|&x| f64::from(x)).collect();
            let (exact, abs) = reference(&a, &wide, len, usize::from(len > 0));
            if len > 0 {
                assert_close(&[dot], &exact, &abs, len, &format!("{isa:?} dot {len}"));
            }
            let sum = dispatch!(isa; serial::read_probe_f32, avx512::read_probe_f32_avx512,
                avx2::read_probe_f32_avx2, neon::read_probe_f32_neon, (&a));
            let exact_sum: f64 = a.iter().map(|&x| f64::from(x)).sum();
            let abs_sum: f64 = a.iter().map(|&x| f64::from(x.abs())).sum();
            assert_close(&[sum], &[exact_sum], &[abs_sum], len, &format!("{isa:?} probe {len}"));
        }
    }
}

#[test]
fn batch_scores_equal_single_query_scores_on_every_isa() {
    let mut rng = Rng(6);
    for dim in [56, 97, 384, 400] {
        check_batch_equals_single(&mut rng, dim);
    }
}

/// 7 queries: full query tiles plus leftovers for every tile width; 1501 rows span several L2
/// blocks and leave a partial row tile.
fn check_batch_equals_single(rng: &mut Rng, dim: usize) {
    use batch::{scan_bf16_batch_serial, scan_f32_batch_serial};
    let (n, stride, n_queries) = (1501, dim.div_ceil(16) * 16, 7);
    let queries = rng.vec(dim * n_queries);
    let rows = rng.vec(stored_len(n, stride, dim));
    let codes: Vec<i8> = rows.iter().map(|x| (x * 127.0).round() as i8).collect();
    let bf16: Vec<u16> = rows.iter().map(|x| (x.to_bits() >> 16) as u16).collect();
    let scales = rng.vec(n);
    for isa in Isa::available() {
        let mut batch = vec![f32::NAN; n * n_queries];
        let mut single = vec![f32::NAN; n];
        dispatch!(isa; scan_f32_batch_serial, avx512::scan_f32_batch_avx512,
            avx2::scan_f32_batch_avx2, neon::scan_f32_batch_neon,
            (&queries, n_queries, &rows, stride, &mut batch));
        for (q, query) in queries.chunks(dim).enumerate() {
            dispatch!(isa; serial::scan_f32, avx512::scan_f32_avx512, avx2::scan_f32_avx2,
                neon::scan_f32_neon, (query, &rows, stride, &mut single));
            assert_eq!(&batch[q * n..(q + 1) * n], &single[..], "{isa:?} f32 d={dim} query {q}");
        }
        batch::scan_i8_batch_on(isa, &queries, n_queries, &codes, stride, &scales, &mut batch);
        for (q, query) in queries.chunks(dim).enumerate() {
            scan_i8_on(isa, query, &codes, stride, &scales, &mut single);
            assert_eq!(&batch[q * n..(q + 1) * n], &single[..], "{isa:?} i8 d={dim} query {q}");
        }
        dispatch!(isa; scan_bf16_batch_serial, avx512::scan_bf16_batch_avx512,
            avx2::scan_bf16_batch_avx2, neon::scan_bf16_batch_neon,
            (&queries, n_queries, &bf16, stride, &mut batch));
        for (q, query) in queries.chunks(dim).enumerate() {
            dispatch!(isa; serial::scan_bf16, avx512::scan_bf16_avx512, avx2::scan_bf16_avx2,
                neon::scan_bf16_neon, (query, &bf16, stride, &mut single));
            assert_eq!(&batch[q * n..(q + 1) * n], &single[..], "{isa:?} bf16 d={dim} query {q}");
        }
    }
}

#[test]
fn i8_batch_equals_single_above_the_integer_limit_on_every_isa() {
    let mut rng = Rng(13);
    let (dim, n, n_queries) = (query_i16::INTEGER_MAX_DIM + 5, 11, 5);
    let queries = rng.vec(dim * n_queries);
    let codes: Vec<i8> =
        (0..n * dim).map(|_| ((rng.next_u64() % 255) as i32 - 127) as i8).collect();
    let scales = rng.vec(n);
    for isa in Isa::available() {
        let mut batch = vec![f32::NAN; n * n_queries];
        let mut single = vec![f32::NAN; n];
        batch::scan_i8_batch_on(isa, &queries, n_queries, &codes, dim, &scales, &mut batch);
        for (q, query) in queries.chunks(dim).enumerate() {
            scan_i8_on(isa, query, &codes, dim, &scales, &mut single);
            assert_eq!(&batch[q * n..(q + 1) * n], &single[..], "{isa:?} query {q}");
        }
    }
}

#[test]
fn empty_batches_are_accepted() {
    scan_f32_batch(&[], 0, &[], 4, &mut []);
    scan_f32_batch(&[1.0; 8], 2, &[], 4, &mut []);
}

/// Quantises like the module docs of `error_bound` assume: scale = max|x| / 127, round to
/// nearest, clamp.
fn quantize(row: &[f32]) -> (Vec<i8>, f32) {
    let max = row.iter().fold(0.0_f32, |m, x| m.max(x.abs()));
    let scale = max / 127.0;
    if scale == 0.0 {
        return (vec![0; row.len()], 0.0);
    }
    (row.iter().map(|x| (x / scale).round().clamp(-127.0, 127.0) as i8).collect(), scale)
}

#[test]
fn i8_error_bound_covers_quantization_and_rounding() {
    let mut rng = Rng(7);
    for dim in [1, 7, 97, 384] {
        let n = 300;
        let query = rng.vec(dim);
        let rows = rng.vec(n * dim);
        let (codes, scales): (Vec<Vec<i8>>, Vec<f32>) = rows.chunks(dim).map(quantize).unzip();
        let codes: Vec<i8> = codes.concat();
        let factor = i8_error_bound_factor(&query);
        for isa in Isa::available() {
            let mut approx = vec![0.0; n];
            let mut exact = vec![0.0; n];
            scan_i8_on(isa, &query, &codes, dim, &scales, &mut approx);
            dispatch!(isa; serial::scan_f32, avx512::scan_f32_avx512, avx2::scan_f32_avx2,
                neon::scan_f32_neon, (&query, &rows, dim, &mut exact));
            for i in 0..n {
                let bound = factor * scales[i];
                assert_eq!(bound, i8_error_bound(&query, scales[i]));
                let error = (approx[i] - exact[i]).abs();
                assert!(error <= bound, "{isa:?} dim {dim} row {i}: error {error} > {bound}");
                // A bound far looser than the worst case would make the re-scorer's candidate
                // set needlessly large.
                assert!(bound <= 0.53 * scales[i] * query.iter().map(|q| q.abs()).sum::<f32>());
            }
        }
    }
}

#[test]
fn i8_query_rounding_bound_covers_the_integer_kernels() {
    let mut rng = Rng(14);
    for dim in [1, 7, 97, 384, 1024] {
        let n = 200;
        let mut query = rng.vec(dim);
        let norm = query.iter().map(|&q| f64::from(q) * f64::from(q)).sum::<f64>().sqrt();
        query.iter_mut().for_each(|q| *q = (f64::from(*q) / norm) as f32);
        let query_norm = query.iter().map(|&q| f64::from(q).powi(2)).sum::<f64>().sqrt();
        let rows = rng.vec(n * dim);
        let (codes, scales): (Vec<Vec<i8>>, Vec<f32>) = rows.chunks(dim).map(quantize).unzip();
        for isa in Isa::available() {
            let mut approx = vec![0.0; n];
            scan_i8_on(isa, &query, &codes.concat(), dim, &scales, &mut approx);
            for (i, row_codes) in codes.iter().enumerate() {
                let dequantized: Vec<f64> =
                    row_codes.iter().map(|&c| f64::from(c) * f64::from(scales[i])).collect();
                let row_norm = dequantized.iter().map(|x| x * x).sum::<f64>().sqrt();
                let exact: f64 =
                    query.iter().zip(&dequantized).map(|(&q, x)| f64::from(q) * x).sum();
                // Allowed: the query rounding, plus f32 accumulation of the widening kernels.
                let allowed = i8_query_rounding_bound(dim, query_norm, row_norm)
                    + gamma(dim + 3) * query_norm * row_norm
                    + f64::from(f32::MIN_POSITIVE);
                let error = (f64::from(approx[i]) - exact).abs();
                assert!(error <= allowed, "{isa:?} dim {dim} row {i}: {error} > {allowed}");
            }
        }
    }
}

#[test]
fn isa_names_round_trip_and_unavailable_isas_are_refused() {
    for &isa in Isa::ALL {
        assert_eq!(Isa::parse(isa.name()).unwrap(), isa);
    }
    let err = Isa::parse("sse9").unwrap_err().to_string();
    assert!(err.contains("sse9") && err.contains("avx512"), "{err}");
    assert!(Isa::Serial.is_available());
    assert!(Isa::available().contains(&active()));
    if let Some(&missing) = Isa::ALL.iter().find(|isa| !isa.is_available()) {
        let err = force(Some(missing)).unwrap_err().to_string();
        assert!(err.contains(missing.name()) && err.contains("not available"), "{err}");
    }
}

/// The integer kernels all sum `Q_j r_j` exactly, so they must agree to the bit, here at the
/// extremes of both factors (every query value at +-`QUERY_I16_MAX`, every code at +-127) and
/// at the largest integer dimension, where an overflowing lane would show.
#[test]
#[cfg(target_arch = "x86_64")]
fn integer_kernels_agree_bitwise_at_the_extremes() {
    let integer: Vec<Isa> = [Isa::Avx512Vnni, Isa::Avx512, Isa::Avx2]
        .into_iter()
        .filter(|isa| isa.is_available())
        .collect();
    let mut rng = Rng(15);
    for dim in [1, 63, 64, 65, 384, query_i16::INTEGER_MAX_DIM] {
        let n = 9;
        let query: Vec<f32> = (0..dim).map(|_| if rng.unit() < 0.0 { -1.0 } else { 1.0 }).collect();
        let mut codes: Vec<i8> =
            (0..n * dim).map(|_| if rng.unit() < 0.0 { -127 } else { 127 }).collect();
        // Row 0 aligned with the query: the largest sum any lane can reach.
        for (code, q) in codes.iter_mut().zip(&query) {
            *code = if *q > 0.0 { 127 } else { -127 };
        }
        let scales = vec![1.0; n];
        let mut reference = vec![f32::NAN; n];
        scan_i8_on(Isa::Serial, &query, &codes, dim, &scales, &mut reference);
        assert_eq!(reference[0], 127.0 * dim as f32);
        // The integer kernels scale the exact sum back by an f32 step: a few ulps, where an
        // overflowing lane would be off by far more.
        let tolerance = 1e-5 * 127.0 * dim as f32;
        let mut first: Option<Vec<f32>> = None;
        for &isa in &integer {
            let mut out = vec![f32::NAN; n];
            scan_i8_on(isa, &query, &codes, dim, &scales, &mut out);
            for (got, want) in out.iter().zip(&reference) {
                assert!((got - want).abs() <= tolerance, "{isa:?} dim {dim}: {got} vs {want}");
            }
            if let Some(first) = &first {
                assert_eq!(out, *first, "{isa:?} dim {dim}");
            }
            first = Some(out);
        }
    }
    // Random queries round to values across the whole i16 range, not only the extremes.
    for dim in [7, 97, 384, 1000] {
        let (query, n) = (rng.vec(dim), 65);
        let codes: Vec<i8> =
            (0..n * dim).map(|_| ((rng.next_u64() % 255) as i32 - 127) as i8).collect();
        let scales = rng.vec(n);
        let outs: Vec<Vec<f32>> = integer
            .iter()
            .map(|&isa| {
                let mut out = vec![f32::NAN; n];
                scan_i8_on(isa, &query, &codes, dim, &scales, &mut out);
                out
            })
            .collect();
        for (isa, out) in integer.iter().zip(&outs) {
            assert_eq!(out, &outs[0], "{isa:?} against {:?}, dim {dim}", integer[0]);
        }
    }
}

/// NEON is baseline on aarch64, so every aarch64 run of this suite (`make test-aarch64` runs
/// it under qemu) must exercise it: the loops above would silently test only the serial
/// kernel if detection ever stopped finding it.
#[test]
#[cfg(target_arch = "aarch64")]
fn neon_is_available_and_preferred_on_aarch64() {
    assert_eq!(Isa::available(), [Isa::Neon, Isa::Serial]);
}
