//! Fixed-chunk parallelism and input checks shared by all models.
//!
//! Determinism is an invariant of the workspace: chunk boundaries depend only on the data size
//! (never on the thread count), every chunk is processed sequentially, and partial results are
//! combined in chunk order. The same input therefore gives bit-identical output on 1 or N
//! threads.

use faer::MatRef;
use rayon::prelude::*;

use crate::model::{Responsibilities, WeightedRows, one_hot};
use crate::{GenerativeError, Result};

/// Rows per chunk for fitting and prediction.
pub const CHUNK_ROWS: usize = 4096;

/// A chunk handed to a worker: which set it comes from, its first row, and its rows.
#[derive(Debug, Clone, Copy)]
pub struct Chunk<'a> {
    pub set: usize,
    pub first_row: usize,
    pub x: MatRef<'a, f64>,
    pub resp: MatRef<'a, f64>,
    /// The set was checked by the caller (`check_chunk` is then a no-op).
    pub prechecked: bool,
}

/// Checks shapes shared by all sets (same d, same K, resp rows = x rows, at least one row) and
/// returns (d, K).
pub fn check_sets(sets: &[WeightedRows<'_>]) -> Result<(usize, usize)> {
    let first = sets.first().ok_or(GenerativeError::Empty { what: "x" })?;
    let (d, k) = (first.x.ncols(), first.resp.ncols());
    for s in sets {
        if s.x.ncols() != d {
            return Err(GenerativeError::DimensionMismatch {
                what: "features of a row set",
                expected: d,
                got: s.x.ncols(),
            });
        }
        if s.resp.ncols() != k {
            return Err(GenerativeError::DimensionMismatch {
                what: "classes (columns) of responsibilities",
                expected: k,
                got: s.resp.ncols(),
            });
        }
        if s.resp.nrows() != s.x.nrows() {
            return Err(GenerativeError::DimensionMismatch {
                what: "rows of responsibilities vs rows of x",
                expected: s.x.nrows(),
                got: s.resp.nrows(),
            });
        }
    }
    if sets.iter().all(|s| s.x.nrows() == 0) {
        return Err(GenerativeError::Empty { what: "x" });
    }
    if d == 0 {
        return Err(GenerativeError::Empty {
            what: "feature list",
        });
    }
    if k < 2 {
        return Err(GenerativeError::TooFewClasses { n_classes: k });
    }
    Ok((d, k))
}

/// Runs `f` on every fixed chunk of every set in parallel and returns the results in set and
/// chunk order. The first error in that order is returned, so messages are deterministic too.
pub fn map_chunks<T, F>(sets: &[WeightedRows<'_>], f: F) -> Result<Vec<T>>
where
    T: Send,
    F: Fn(Chunk<'_>) -> Result<T> + Sync,
{
    let jobs: Vec<(usize, usize)> = sets
        .iter()
        .enumerate()
        .flat_map(|(s, set)| {
            (0..set.x.nrows().div_ceil(CHUNK_ROWS)).map(move |c| (s, c * CHUNK_ROWS))
        })
        .collect();
    let results: Vec<Result<T>> = jobs
        .par_iter()
        .map(|&(s, r0)| {
            let set = &sets[s];
            let b = CHUNK_ROWS.min(set.x.nrows() - r0);
            let x = set.x.subrows(r0, b);
            match set.resp {
                Responsibilities::Dense(resp) => f(Chunk {
                    set: s,
                    first_row: r0,
                    x,
                    resp: resp.subrows(r0, b),
                    prechecked: set.prechecked,
                }),
                Responsibilities::Labels { labels, n_classes } => {
                    // The chunk's one-hot block (b × K) only, built by the worker.
                    let labels = &labels[r0..r0 + b];
                    if let Some(i) = labels.iter().position(|l| *l >= n_classes) {
                        return Err(GenerativeError::InvalidParameter {
                            name: "labels",
                            rule: "in 0..n_classes",
                            value: format!(
                                "{} at row {} (n_classes = {n_classes})",
                                labels[i],
                                r0 + i
                            ),
                        });
                    }
                    let block = one_hot(labels, n_classes)?;
                    f(Chunk {
                        set: s,
                        first_row: r0,
                        x,
                        resp: block.as_ref(),
                        prechecked: set.prechecked,
                    })
                }
            }
        })
        .collect();
    results.into_iter().collect()
}

/// Checks that a chunk's features are finite and its responsibilities finite and ≥ 0.
pub fn check_chunk(chunk: &Chunk<'_>) -> Result<()> {
    if chunk.prechecked {
        return Ok(());
    }
    check_finite_rows(chunk.x, chunk.first_row)?;
    check_rows(
        chunk.resp,
        chunk.first_row,
        |v| not_finite(v) | (v < 0.0),
        |row, class, value| GenerativeError::InvalidResponsibility { row, class, value },
    )
}

/// Errors on the first (row-major order) non-finite value; `first_row` offsets reported rows.
pub fn check_finite_rows(x: MatRef<'_, f64>, first_row: usize) -> Result<()> {
    check_rows(x, first_row, not_finite, |row, col, value| {
        GenerativeError::NonFiniteInput { row, col, value }
    })
}

/// NaN or ±∞, as a float comparison (vectorises on baseline x86-64, unlike the integer test
/// inside `is_finite`).
#[inline(always)]
#[allow(clippy::neg_cmp_op_on_partial_ord)]
pub fn not_finite(v: f64) -> bool {
    !(v.abs() < f64::INFINITY)
}

/// Errors with `error(row, col, value)` on the first value, in row-major order, for which `bad`
/// holds. A branch-free scan per column (it vectorises) finds whether there is any; only then
/// is the first one looked for.
pub fn check_rows(
    x: MatRef<'_, f64>,
    first_row: usize,
    bad: impl Fn(f64) -> bool,
    error: impl Fn(usize, usize, f64) -> GenerativeError,
) -> Result<()> {
    let mut scratch = Vec::new();
    let mut any = false;
    for j in 0..x.ncols() {
        let col = match x.col(j).try_as_col_major() {
            Some(c) => c.as_slice(),
            None => {
                scratch.clear();
                scratch.extend(x.col(j).iter().copied());
                &scratch[..]
            }
        };
        any |= pulp::Arch::new().dispatch(
            #[inline(always)]
            || col.iter().fold(false, |a, v| a | bad(*v)),
        );
    }
    if !any {
        return Ok(());
    }
    for i in 0..x.nrows() {
        for j in 0..x.ncols() {
            let v = x[(i, j)];
            if bad(v) {
                return Err(error(first_row + i, j, v));
            }
        }
    }
    Ok(())
}

/// Column `k` of a chunk's responsibilities as a slice: borrowed when contiguous (the usual
/// column-major case), else copied into `buf`.
pub fn resp_column<'a>(resp: MatRef<'a, f64>, k: usize, buf: &'a mut Vec<f64>) -> &'a [f64] {
    match resp.col(k).try_as_col_major() {
        Some(c) => c.as_slice(),
        None => {
            buf.clear();
            buf.extend((0..resp.nrows()).map(|i| resp[(i, k)]));
            buf
        }
    }
}
