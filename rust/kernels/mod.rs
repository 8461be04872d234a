//! Scoring kernels: dot products of one f32 query against many stored rows.
//!
//! Rows are stored row-major with a `stride` (elements between row starts, >= the query's
//! dimension). Each storage type has one entry point here that dispatches to the best
//! instruction set detected at run time; `serial` is the portable ground truth every other
//! kernel is tested against.

pub mod serial;

use std::sync::atomic::{AtomicU8, Ordering};

use crate::error::{Error, Result};

/// An instruction set a kernel can be built for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Isa {
    /// Plain Rust, no intrinsics: the reference every other kernel must agree with.
    Serial,
}

impl Isa {
    /// Every instruction set this build knows, best first.
    pub const ALL: &'static [Isa] = &[Isa::Serial];

    /// Short lowercase name, as accepted by [`Isa::parse`].
    pub fn name(self) -> &'static str {
        match self {
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

    /// Whether the running CPU can execute this instruction set.
    pub fn is_available(self) -> bool {
        match self {
            Isa::Serial => true,
        }
    }

    fn code(self) -> u8 {
        match self {
            Isa::Serial => 1,
        }
    }

    fn from_code(code: u8) -> Option<Self> {
        Self::ALL.iter().copied().find(|isa| isa.code() == code)
    }
}

/// 0 = not chosen yet; otherwise `Isa::code` of the kernel in use.
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
/// Meant for tests and benchmarks that compare paths; fails when the CPU lacks `isa`.
pub fn force(isa: Option<Isa>) -> Result<()> {
    match isa {
        Some(isa) if !isa.is_available() => Err(Error::invalid(format!(
            "instruction set {} is not available on this CPU",
            isa.name()
        ))),
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

/// `out[i] = dot(query, rows[i * stride ..][..query.len()])` for f32 rows.
pub fn scan_f32(query: &[f32], rows: &[f32], stride: usize, out: &mut [f32]) {
    check_scan(query.len(), rows.len(), stride, out.len());
    match active() {
        Isa::Serial => serial::scan_f32(query, rows, stride, out),
    }
}

/// `out[i] = scales[i] * dot(query, rows[i * stride ..][..query.len()])` for int8 rows.
pub fn scan_i8(query: &[f32], rows: &[i8], stride: usize, scales: &[f32], out: &mut [f32]) {
    check_scan(query.len(), rows.len(), stride, out.len());
    assert_eq!(scales.len(), out.len(), "one scale per row");
    match active() {
        Isa::Serial => serial::scan_i8(query, rows, stride, scales, out),
    }
}

/// `out[i] = dot(query, rows[i * stride ..][..query.len()])` for bf16 rows (raw `u16` bits).
pub fn scan_bf16(query: &[f32], rows: &[u16], stride: usize, out: &mut [f32]) {
    check_scan(query.len(), rows.len(), stride, out.len());
    match active() {
        Isa::Serial => serial::scan_bf16(query, rows, stride, out),
    }
}

/// Panics on a shape the callers must have validated already: a bug, not bad user input.
fn check_scan(dim: usize, stored: usize, stride: usize, n: usize) {
    assert!(stride >= dim, "stride {stride} < dim {dim}");
    assert!(n == 0 || stored >= (n - 1) * stride + dim, "rows too short for {n} rows");
}
