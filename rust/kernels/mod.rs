//! Scoring kernels: dot products of f32 queries against many stored rows.
//!
//! Rows are stored row-major with a `stride` (elements between row starts, >= the query's
//! dimension). Each operation has one entry point here that dispatches to the best instruction
//! set detected at run time; `serial` is the portable ground truth every other kernel is tested
//! against. The SIMD loops are written once, in `generic`, over a trait that each instruction
//! set's file implements with its intrinsics.
//!
//! f32 and bf16 kernels (bf16 widened exactly) differ from the exact dot product only by f32
//! rounding in the accumulation. The x86 int8 kernels round the query to i16 once and sum
//! exactly in integers; [`i8_error_bound`] bounds how far any int8 score can be from the f32
//! score, which is what exact re-scoring of int8 candidates relies on.
//!
//! Batches ([`scan_f32_batch`] and siblings) read each L2-sized block of rows once for all
//! queries and give bitwise the same scores as one query at a time.

mod error_bound;
mod generic;
mod query_i16;
pub mod serial;

#[cfg(target_arch = "x86_64")]
pub mod avx2;
#[cfg(target_arch = "x86_64")]
pub mod avx512;
#[cfg(target_arch = "x86_64")]
pub mod avx512_vnni;
#[cfg(target_arch = "aarch64")]
pub mod neon;

use std::sync::atomic::{AtomicU8, Ordering};

use crate::error::{Error, Result};

pub use batch::{scan_bf16_batch, scan_f32_batch, scan_i8_batch};
pub use error_bound::{i8_error_bound, i8_error_bound_factor, i8_query_rounding_bound};
pub(crate) use query_i16::QUERY_I16_MAX;

/// An instruction set a kernel can be built for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Isa {
    /// [`Isa::Avx512`] plus AVX512-VNNI: the same kernels, except that int8 rows go through
    /// `vpdpbusd` (64 byte products per instruction) with bitwise the same scores.
    Avx512Vnni,
    /// x86_64 AVX-512F and AVX-512BW: 16 f32 lanes, masked tail loads, 32-lane integer int8.
    Avx512,
    /// x86_64 AVX2 with FMA: 8 f32 lanes, 16-lane integer int8.
    Avx2,
    /// aarch64 Advanced SIMD (baseline on every aarch64 CPU): 4 f32 lanes.
    Neon,
    /// Plain Rust, no intrinsics: the reference every other kernel must agree with.
    Serial,
}

impl Isa {
    /// Every instruction set this crate knows, best first. Those the running CPU lacks are
    /// listed too; [`Isa::is_available`] tells them apart.
    pub const ALL: &'static [Isa] =
        &[Isa::Avx512Vnni, Isa::Avx512, Isa::Avx2, Isa::Neon, Isa::Serial];

    /// Short lowercase name, as accepted by [`Isa::parse`].
    pub fn name(self) -> &'static str {
        match self {
            Isa::Avx512Vnni => "avx512vnni",
            Isa::Avx512 => "avx512",
            Isa::Avx2 => "avx2",
            Isa::Neon => "neon",
            Isa::Serial => "serial",
        }
    }

    /// Parses a name produced by [`Isa::name`].
    pub fn parse(name: &str) -> Result<Self> {
        Self::ALL.iter().copied().find(|isa| isa.name() == name).ok_or_else(|| {
            let known: Vec<_> = Self::ALL.iter().map(|isa| isa.name()).collect();
            Error::invalid(format!("unknown instruction set {name:?}; known: {}", known.join(", ")))
        })
    }

    /// Whether the running CPU can execute this instruction set. The standard library caches
    /// the CPUID probe, so this is cheap after the first call.
    pub fn is_available(self) -> bool {
        match self {
            Isa::Serial => true,
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512Vnni => avx512_vnni::is_supported(),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => avx512::is_supported(),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => avx2::is_supported(),
            #[cfg(target_arch = "aarch64")]
            Isa::Neon => true,
            #[allow(unreachable_patterns)]
            _ => false,
        }
    }

    /// Every instruction set the running CPU can execute, best first.
    pub fn available() -> Vec<Isa> {
        Self::ALL.iter().copied().filter(|isa| isa.is_available()).collect()
    }

    fn code(self) -> u8 {
        match self {
            Isa::Avx512 => 1,
            Isa::Avx2 => 2,
            Isa::Neon => 3,
            Isa::Serial => 4,
            Isa::Avx512Vnni => 5,
        }
    }

    fn from_code(code: u8) -> Option<Self> {
        Self::ALL.iter().copied().find(|isa| isa.code() == code)
    }
}

/// 0 = not chosen yet; otherwise `Isa::code` of the kernel in use. Only codes of available
/// instruction sets are ever stored, which is what makes the dispatch below sound.
static ACTIVE: AtomicU8 = AtomicU8::new(0);

/// The instruction set the dispatching entry points use: the best available one, unless a
/// test forced another with [`force`].
pub fn active() -> Isa {
    if let Some(isa) = Isa::from_code(ACTIVE.load(Ordering::Relaxed)) {
        return isa;
    }
    let best = Isa::ALL.iter().copied().find(|isa| isa.is_available()).unwrap_or(Isa::Serial);
    ACTIVE.store(best.code(), Ordering::Relaxed);
    best
}

/// Forces every later scan onto `isa` (or back to auto-detection with `None`).
///
/// Meant for tests and benchmarks that compare paths; fails when the CPU lacks `isa`. The
/// choice is process-wide.
pub fn force(isa: Option<Isa>) -> Result<()> {
    match isa {
        Some(isa) if !isa.is_available() => {
            let available: Vec<_> = Isa::available().iter().map(|isa| isa.name()).collect();
            Err(Error::invalid(format!(
                "instruction set {} is not available on this CPU; available: {}",
                isa.name(),
                available.join(", ")
            )))
        }
        Some(isa) => {
            ACTIVE.store(isa.code(), Ordering::Relaxed);
            Ok(())
        }
        None => {
            ACTIVE.store(0, Ordering::Relaxed);
            Ok(())
        }
    }
}

/// Calls the kernel of instruction set `$isa`, which must be available. Every SIMD kernel is a
/// `#[target_feature]` function that checks its slice shapes itself, so the only obligation of
/// the `unsafe` call is that the CPU supports the feature. Only int8 scans have a VNNI kernel
/// (`vnni: path`); everything else runs the AVX-512 kernel under [`Isa::Avx512Vnni`].
macro_rules! dispatch {
    ($isa:expr; $serial:path, $avx512:path, $avx2:path, $neon:path, ($($arg:expr),*)) => {
        dispatch!($isa; $serial, vnni: $avx512, $avx512, $avx2, $neon, ($($arg),*))
    };
    (
        $isa:expr; $serial:path, vnni: $vnni:path, $avx512:path, $avx2:path, $neon:path,
        ($($arg:expr),*)
    ) => {
        match $isa {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: callers pass `active()`, which only returns instruction sets
            // `is_available()` confirmed, or an instruction set they checked themselves.
            Isa::Avx512Vnni => unsafe { $vnni($($arg),*) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: as above.
            Isa::Avx512 => unsafe { $avx512($($arg),*) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: as above.
            Isa::Avx2 => unsafe { $avx2($($arg),*) },
            #[cfg(target_arch = "aarch64")]
            // SAFETY: Advanced SIMD is part of the aarch64 baseline.
            Isa::Neon => unsafe { $neon($($arg),*) },
            #[allow(unreachable_patterns)]
            _ => $serial($($arg),*),
        }
    };
}

// Declared after `dispatch!` so that the macro is in scope there.
mod batch;

/// Dot product of two f32 slices of equal length, for exact re-scoring of a few candidates.
///
/// # Panics
/// If the lengths differ.
pub fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "dot of slices of different lengths");
    dispatch!(active(); serial::dot_f32, avx512::dot_f32_avx512, avx2::dot_f32_avx2, neon::dot_f32_neon, (a, b))
}

/// `out[i] = dot(query, rows[i * stride ..][..query.len()])` for f32 rows.
///
/// # Panics
/// If `stride < query.len()` or `rows` holds fewer than `out.len()` rows.
pub fn scan_f32(query: &[f32], rows: &[f32], stride: usize, out: &mut [f32]) {
    dispatch!(
        active();
        serial::scan_f32,
        avx512::scan_f32_avx512,
        avx2::scan_f32_avx2,
        neon::scan_f32_neon,
        (query, rows, stride, out)
    );
}

/// `out[i] = scales[i] * dot(query, rows[i * stride ..][..query.len()])` for int8 rows.
///
/// # Panics
/// As [`scan_f32`], and if `scales.len() != out.len()`.
pub fn scan_i8(query: &[f32], rows: &[i8], stride: usize, scales: &[f32], out: &mut [f32]) {
    scan_i8_on(active(), query, rows, stride, scales, out);
}

/// [`scan_i8`] on instruction set `isa`; tests compare every path through it.
///
/// # Panics
/// If the CPU lacks `isa`, as well as where the dispatching entry point panics.
pub(crate) fn scan_i8_on(
    isa: Isa,
    query: &[f32],
    rows: &[i8],
    stride: usize,
    scales: &[f32],
    out: &mut [f32],
) {
    assert!(isa.is_available(), "instruction set {} is not available", isa.name());
    dispatch!(
        isa;
        serial::scan_i8,
        vnni: avx512_vnni::scan_i8_avx512_vnni,
        avx512::scan_i8_avx512,
        avx2::scan_i8_avx2,
        neon::scan_i8_neon,
        (query, rows, stride, scales, out)
    );
}

/// `out[i] = dot(query, rows[i * stride ..][..query.len()])` for bf16 rows (raw `u16` bits).
///
/// # Panics
/// As [`scan_f32`].
pub fn scan_bf16(query: &[f32], rows: &[u16], stride: usize, out: &mut [f32]) {
    dispatch!(
        active();
        serial::scan_bf16,
        avx512::scan_bf16_avx512,
        avx2::scan_bf16_avx2,
        neon::scan_bf16_neon,
        (query, rows, stride, out)
    );
}

/// Sum of every value in `rows`, read as fast as the memory system allows.
///
/// A scan has to read the same bytes, so the time of this probe over a matrix is the floor
/// the f32 scan is measured against.
pub fn read_probe_f32(rows: &[f32]) -> f32 {
    dispatch!(
        active();
        serial::read_probe_f32,
        avx512::read_probe_f32_avx512,
        avx2::read_probe_f32_avx2,
        neon::read_probe_f32_neon,
        (rows)
    )
}

/// Rows each SIMD kernel scores per group, sharing the query registers.
pub(crate) const GROUP_ROWS: usize = 4;

/// How many rows ahead of the current group the x86 kernels prefetch. Two groups ahead keeps
/// the f32 scan near the read-probe floor on an L3-resident matrix; without the hints, or one
/// group ahead, it fell behind (docs/design.md, "Kernels and ISA dispatch").
#[cfg(target_arch = "x86_64")]
pub(crate) const PREFETCH_ROWS: usize = 2 * GROUP_ROWS;

/// Hints the cache to fetch the lines holding `count` elements from `ptr`, one hint per
/// 64-byte line. A hint never faults, so `ptr` may point past the end of the rows.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) fn prefetch<T>(ptr: *const T, count: usize) {
    use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
    for offset in (0..count * size_of::<T>()).step_by(64) {
        // SAFETY: SSE is part of the x86_64 baseline, and a prefetch hint never faults.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(ptr.cast::<i8>().wrapping_add(offset)) };
    }
}

/// Row `i` of a row-major matrix with `stride` elements between row starts, cut to `dim`.
///
/// A plain function rather than a closure in the kernels: closures inside `#[target_feature]`
/// functions inherit the features, which stops LLVM from inlining them through generic
/// helpers such as `array::from_fn` and left a call per row in the hot loop.
#[inline(always)]
pub(crate) fn row<T>(rows: &[T], i: usize, stride: usize, dim: usize) -> &[T] {
    &rows[i * stride..i * stride + dim]
}

/// Rows `first .. first + R` of a row-major matrix, as [`row`] cuts them.
#[inline(always)]
pub(crate) fn rows_from<T, const R: usize>(
    rows: &[T],
    first: usize,
    stride: usize,
    dim: usize,
) -> [&[T]; R] {
    let mut out: [&[T]; R] = [&[]; R];
    for (k, slot) in out.iter_mut().enumerate() {
        *slot = row(rows, first + k, stride, dim);
    }
    out
}

/// Panics on a shape the callers must have validated already: a bug, not bad user input.
/// Every kernel calls it first, which is what lets the SIMD kernels use unchecked loads.
pub(crate) fn check_scan(dim: usize, stored: usize, stride: usize, n: usize) {
    assert!(stride >= dim, "stride {stride} < dim {dim}");
    assert!(n == 0 || stored >= (n - 1) * stride + dim, "rows too short for {n} rows");
}

#[cfg(test)]
mod tests;
