//! Fixed-chunk parallelism and input checks shared by all models.
//!
//! Determinism is an invariant of the workspace: chunk boundaries depend only on the data size
//! (never on the thread count), every chunk is processed sequentially, and partial results are
//! combined in chunk order. The same input therefore gives bit-identical output on 1 or N
//! threads.

use std::sync::Mutex;

use density::block::{column, with_column_major};
use faer::{Mat, MatMut, MatRef};

use crate::model::{Responsibilities, WeightedRows, one_hot};
use crate::placement;
use crate::{GenerativeError, Result};
use density::block::RowsAhead;

/// Rows per chunk for fitting and prediction.
pub const CHUNK_ROWS: usize = 4096;

/// Runs `f(i, item)` for every item, on the calling thread and on idle pool threads, and returns
/// the results in item order (whichever thread computed them).
///
/// Why not `par_iter`: a rayon call made from outside the pool queues its work and sleeps
/// until a pool thread has woken to run it. After an idle pause that wake-up took 1–3 ms on
/// our benchmark host, about as long as a whole fit at n = 1e6, d = 2 (see BENCHMARKS.md,
/// "Not yet understood" and the fifteenth round). Here the caller starts at once and the pool
/// threads join in as they wake. (The caller still waits at the end for every helper to have
/// run, if only to find nothing left, as it waited for the pool before.)
///
/// Each of the T workers (the caller and T − 1 helpers) owns a contiguous share of the items
/// and takes them from its front; a worker whose share is empty takes the last item of the
/// largest remaining share. Contiguous shares matter: with items handed out alternately, both
/// threads fault on the same fresh 2 MiB output pages (QDA's `predict_proba` at d = 2, K = 10
/// was 15% slower that way).
///
/// Right after waking the helpers, the caller yields its CPU once, and a helper that starts on
/// the caller's CPU moves to another for its share (see the `placement` module): a
/// helper woken onto the busy caller's CPU otherwise waited for the caller's time slice to end,
/// and the two then took turns on one CPU.
///
/// Every item is taken exactly once, and the result of item `i` depends only on `f(i, item)`,
/// never on which thread ran it or when, which keeps results bit-identical on any number of
/// threads. Inside a pool thread (a nested call) the helpers are ordinary rayon jobs, which the
/// caller runs itself if no other thread does, so it never waits on work that cannot run.
pub fn run_indexed<I, T, F>(items: Vec<I>, f: F) -> Vec<T>
where
    I: Send,
    T: Send,
    F: Fn(usize, I) -> T + Sync,
{
    run_indexed_with(items, || (), |_, i, item| f(i, item))
}

/// As [`run_indexed`], with a scratch state per worker: `init()` once per worker, then
/// `f(&mut state, i, item)` for each item it takes. The state is for reusing buffers between
/// items; the result of an item must not depend on what an earlier item left in it.
pub fn run_indexed_with<I, S, T, N, F>(items: Vec<I>, init: N, f: F) -> Vec<T>
where
    I: Send,
    T: Send,
    N: Fn() -> S + Sync,
    F: Fn(&mut S, usize, I) -> T + Sync,
{
    let n = items.len();
    let workers = rayon::current_num_threads().clamp(1, n.max(1));
    if workers == 1 {
        let mut state = init();
        return items
            .into_iter()
            .enumerate()
            .map(|(i, it)| f(&mut state, i, it))
            .collect();
    }
    let slots: Vec<Mutex<Option<I>>> = items.into_iter().map(|it| Mutex::new(Some(it))).collect();
    let results: Vec<Mutex<Option<T>>> = (0..n).map(|_| Mutex::new(None)).collect();
    // Worker w's share is [front, back) of `shares[w]`, initially items w·n/T .. (w+1)·n/T.
    let shares: Vec<Mutex<(usize, usize)>> = (0..workers)
        .map(|w| Mutex::new((w * n / workers, (w + 1) * n / workers)))
        .collect();
    let take = |w: usize| -> Option<usize> {
        if let Ok(mut own) = shares[w].lock()
            && own.0 < own.1
        {
            own.0 += 1;
            return Some(own.0 - 1);
        }
        loop {
            // The largest other share, read without holding two locks at once.
            let victim = (0..workers)
                .filter(|&v| v != w)
                .map(|v| (shares[v].lock().map(|s| s.1 - s.0).unwrap_or(0), v))
                .max()?;
            if victim.0 == 0 {
                return None;
            }
            if let Ok(mut s) = shares[victim.1].lock()
                && s.0 < s.1
            {
                s.1 -= 1;
                return Some(s.1);
            }
        }
    };
    // A helper that starts on the caller's CPU moves off it (see `placement`); the caller's
    // thread itself, when it runs a helper's job in a nested call, stays where it is.
    let (caller, caller_cpu) = (std::thread::current().id(), placement::current_cpu());
    let work = |w: usize| {
        let mut state = init();
        let helper = std::thread::current().id() != caller;
        // Held until this worker's share is done.
        let mut placed = None;
        while let Some(i) = take(w) {
            if helper && placed.is_none() {
                placed = Some(placement::move_off(caller_cpu));
            }
            // `take` hands index `i` to one worker only, so its slot is full and unlocked (`f`
            // never runs under a lock, so none can be poisoned).
            let item = slots[i].lock().map(|mut s| s.take()).ok().flatten();
            if let Some(item) = item {
                let result = f(&mut state, i, item);
                if let Ok(mut r) = results[i].lock() {
                    *r = Some(result);
                }
            }
        }
    };
    rayon::in_place_scope(|scope| {
        for w in 1..workers {
            let work = &work;
            scope.spawn(move |_| work(w));
        }
        // A helper woken onto this CPU runs now, and moves off it, instead of after this
        // thread's time slice (see `placement`).
        if workers > 1 {
            std::thread::yield_now();
        }
        work(0);
    });
    // Every index was taken by one worker and its result set before the scope ended (a panic
    // in `f` propagates out of the scope and never reaches here).
    results
        .into_iter()
        .map(|r| {
            r.into_inner()
                .ok()
                .flatten()
                .expect("every item's result is set before the scope ends")
        })
        .collect()
}

/// `m` split into consecutive blocks of `rows` rows (the last may be shorter), in order.
pub fn row_chunks_mut(mut m: MatMut<'_, f64>, rows: usize) -> Vec<MatMut<'_, f64>> {
    let rows = rows.max(1);
    let mut chunks = Vec::with_capacity(m.nrows().div_ceil(rows));
    while m.nrows() > 0 {
        let take = rows.min(m.nrows());
        let (head, tail) = m.split_at_row_mut(take);
        chunks.push(head);
        m = tail;
    }
    chunks
}

/// An `nrows × ncols` matrix built in parallel, [`CHUNK_ROWS`] rows at a time: chunk `c`
/// (rows `c · CHUNK_ROWS ..`) is zeroed and handed to `fill(c, chunk)` by the worker that owns
/// it. Returns the matrix and each chunk's result, in chunk order (every chunk is visited).
///
/// Why not `Mat::zeros` followed by a parallel pass: faer fills a new matrix on one thread, and
/// for a fresh n × K output that first write is where the kernel supplies and clears every page.
/// That serial fill was half the time of a K = 10 `predict_proba` at n = 1e6. Here each worker
/// first writes its own rows, so the page faults are spread over the workers, and the rows are
/// still in cache when `fill` overwrites them.
pub fn build_by_row_chunks<T, F>(nrows: usize, ncols: usize, fill: F) -> (Mat<f64>, Vec<T>)
where
    T: Send,
    F: Fn(usize, MatMut<'_, f64>) -> T + Sync,
{
    build_by_fresh_row_chunks(nrows, ncols, |c, fresh| fill(c, fresh.zeroed()))
}

/// A chunk of a matrix being built whose entries are not yet written: a kernel that writes
/// every entry takes its columns as [`MaybeUninit`](std::mem::MaybeUninit) (`columns`) and
/// then the chunk as written (`assume_written`); anything else takes it zeroed (`zeroed`).
/// One left unwritten is zeroed when `fill` returns, so the matrix never holds an unwritten
/// value.
///
/// Why: zeroing an output that the scores then overwrite cost about 0.7 ms of a K = 10
/// `predict_proba` at d = 2, n = 1e6 (0.0047 s against 0.0040 s without; seventy-third round),
/// a sixth of it. Rust allows no slice of `f64` over memory not yet written, so the kernels
/// that skip it write through `MaybeUninit` slices.
pub(crate) struct FreshChunk<'a> {
    chunk: MatMut<'a, f64>,
    written: bool,
}

#[allow(unsafe_code)]
impl FreshChunk<'_> {
    pub(crate) fn nrows(&self) -> usize {
        self.chunk.nrows()
    }

    /// Every entry set to zero, then the chunk.
    pub(crate) fn zeroed(&mut self) -> MatMut<'_, f64> {
        if !self.written {
            let rows = self.chunk.nrows();
            for j in 0..self.chunk.ncols() {
                let col = self.chunk.as_mut().col_mut(j);
                // SAFETY: a column of a column-major matrix (row stride 1) is `rows`
                // contiguous `f64`s inside the allocation, owned by this worker alone; writing
                // bytes forms no reference.
                debug_assert!(col.row_stride() == 1);
                unsafe { std::ptr::write_bytes(col.as_ptr_mut(), 0, rows) };
            }
            self.written = true;
        }
        self.chunk.as_mut()
    }

    /// The columns, not yet written, for a kernel to write; `None` once the chunk has been
    /// handed out as written (its values must not be replaced by unwritten ones).
    pub(crate) fn columns(&mut self) -> Option<Vec<&mut [std::mem::MaybeUninit<f64>]>> {
        if self.written {
            return None;
        }
        let rows = self.chunk.nrows();
        let cols = (0..self.chunk.ncols())
            .map(|j| {
                let col = self.chunk.as_mut().col_mut(j).as_ptr_mut();
                // SAFETY: as in `zeroed`, `rows` contiguous `f64`s owned by this worker, one
                // column per slice (disjoint). `MaybeUninit<f64>` has `f64`'s layout and every
                // state of its memory, written or not, is a valid value of it.
                unsafe {
                    std::slice::from_raw_parts_mut(col.cast::<std::mem::MaybeUninit<f64>>(), rows)
                }
            })
            .collect();
        Some(cols)
    }

    /// The chunk, every entry of which has been written.
    ///
    /// # Safety
    /// Every entry of every column that [`columns`](Self::columns) handed out has been written
    /// with a value (or the chunk was [`zeroed`](Self::zeroed)).
    pub(crate) unsafe fn assume_written(&mut self) -> MatMut<'_, f64> {
        self.written = true;
        self.chunk.as_mut()
    }
}

/// As [`build_by_row_chunks`], with each chunk handed over unwritten ([`FreshChunk`]): `fill`
/// writes it whole or takes it zeroed, and one it leaves unwritten is zeroed after it returns.
#[allow(unsafe_code)]
pub(crate) fn build_by_fresh_row_chunks<T, F>(
    nrows: usize,
    ncols: usize,
    fill: F,
) -> (Mat<f64>, Vec<T>)
where
    T: Send,
    F: Fn(usize, &mut FreshChunk<'_>) -> T + Sync,
{
    // Columns a whole number of lines apart, never a multiple of 16 lines (see
    // `spread_row_capacity`).
    let mut out = Mat::<f64>::with_capacity(density::block::spread_row_capacity(nrows), ncols);
    // SAFETY: `with_capacity` reserved at least `nrows × ncols`. The entries are not yet
    // initialised; faer allows a view of such memory as long as every entry is written before
    // it is read or a reference to it is formed. The pass below visits every chunk (`collect`
    // does not stop early); a `FreshChunk` forms references only to `MaybeUninit` values
    // until it is zeroed or its writer vouches for every entry, and a chunk neither is zeroed
    // before the pass goes on. Nothing reads `out` before the pass ends, and a panic in `fill`
    // only frees the buffer (`f64` has no destructor).
    unsafe { out.set_dims(nrows, ncols) };
    let results = run_indexed(row_chunks_mut(out.as_mut(), CHUNK_ROWS), |c, chunk| {
        let mut fresh = FreshChunk {
            chunk,
            written: false,
        };
        let result = fill(c, &mut fresh);
        fresh.zeroed();
        result
    });
    (out, results)
}

/// An `nrows × ncols` matrix of zeros, each chunk of [`CHUNK_ROWS`] rows zeroed by the worker
/// that owns it ([`build_by_row_chunks`]): the first touch of a fresh matrix's pages spread
/// over the pool, where `Mat::zeros` takes every page fault on one thread.
pub fn zeros(nrows: usize, ncols: usize) -> Mat<f64> {
    build_by_row_chunks(nrows, ncols, |_, _| ()).0
}

/// An `nrows × ncols` matrix of zeros whose columns lie [`density::block::spread_row_capacity`]
/// rows apart, made on the calling thread: for a worker's own scratch of a chunk's scores,
/// whose `CHUNK_ROWS` rows (512 lines) put every class's same rows in one cache set.
pub fn spread_zeros(nrows: usize, ncols: usize) -> Mat<f64> {
    let mut m = Mat::<f64>::with_capacity(density::block::spread_row_capacity(nrows), ncols);
    m.resize_with(nrows, ncols, |_, _| 0.0);
    m
}

/// A chunk handed to a worker: which set it comes from, its first row, and its rows.
#[derive(Debug, Clone, Copy)]
pub struct Chunk<'a> {
    pub set: usize,
    pub first_row: usize,
    pub x: MatRef<'a, f64>,
    /// The chunk's responsibilities (b × K). From [`map_chunks_by_label_with`], a labeled chunk has
    /// none (b × 0): its `labels` say everything.
    pub resp: MatRef<'a, f64>,
    /// The chunk's class labels (each checked to be < K) when its set is labeled.
    pub labels: Option<&'a [usize]>,
    /// The set was checked by the caller (`check_chunk` is then a no-op).
    pub prechecked: bool,
    /// Each column of `resp`'s sum and count of non-zero entries
    /// ([`density::numerics::sums_and_nonzeros`]), when the caller has them.
    pub weight_totals: Option<&'a [(f64, usize)]>,
    /// The rows (and labels) the worker reads next, for a pass over this chunk in cache to ask
    /// for as it goes ([`density::block::RowsAhead`]); none where the next is not known.
    pub ahead: RowsAhead<'a>,
    /// The first column of the chunk the worker reads next (its rows of it), at any number of
    /// features: a chunk's first read that works column by column asks for it while it reads
    /// its own last column. Empty where the next chunk is not known or not column-major.
    pub next_first_column: &'a [f64],
    /// The labels of the chunk the worker reads next, when it is labeled (else empty), asked
    /// for with [`Chunk::next_first_column`].
    pub next_labels: &'a [usize],
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
/// A labeled set's chunks come with their one-hot responsibilities (and their labels).
pub fn map_chunks<T, F>(sets: &[WeightedRows<'_>], f: F) -> Result<Vec<T>>
where
    T: Send,
    F: Fn(Chunk<'_>) -> Result<T> + Sync,
{
    map_chunks_impl(sets, true, || (), |_, chunk| f(chunk))
}

/// As [`map_chunks`], but a labeled set's chunks carry only their labels (`resp` is b × 0), for
/// fits that visit each class's rows directly instead of scanning K one-hot columns; with a
/// scratch state per worker (see [`run_indexed_with`]). The results are those of
/// [`fold_chunks_by_label_with`] with runs of one chunk, one per chunk in order.
pub fn map_chunks_by_label_with<S, T, N, F>(
    sets: &[WeightedRows<'_>],
    init: N,
    f: F,
) -> Result<Vec<T>>
where
    T: Send,
    N: Fn() -> S + Sync,
    F: Fn(&mut S, Chunk<'_>) -> Result<T> + Sync,
{
    map_chunks_impl(sets, false, init, f)
}

fn map_chunks_impl<S, T, N, F>(
    sets: &[WeightedRows<'_>],
    one_hot_labels: bool,
    init: N,
    f: F,
) -> Result<Vec<T>>
where
    T: Send,
    N: Fn() -> S + Sync,
    F: Fn(&mut S, Chunk<'_>) -> Result<T> + Sync,
{
    let results: Vec<Result<T>> = run_indexed_with(chunk_starts(sets), init, |state, _, start| {
        run_chunk(sets, one_hot_labels, state, &f, start, None)
    });
    results.into_iter().collect()
}

/// As [`map_chunks_by_label_with`], with the results of each run of up to `longest` consecutive
/// chunks of a set folded into one by `merge` (in chunk order, by the worker that computed
/// them), and one result per run returned, in order. A
/// set is cut into at least [`MIN_RUNS`] runs where it has as many chunks, so that many threads
/// still share it. The runs depend only on the sets' sizes, so the results do not depend on the
/// thread count. Why: a QDA fit at d = 64, K = 10 merges 2,450 class statistics of 32 KB; merged on
/// the calling thread after the pass, each one read back from memory, they took 16 ms, about a
/// tenth of the fit. Each run's first error is its result, so the first error in chunk order is
/// still the one returned. `merge` is handed the worker's state too, so that it can keep the
/// part it has merged for `f` to fill again for the next chunk, rather than have each chunk
/// allocate its statistics afresh.
pub fn fold_chunks_by_label_with<S, T, N, F, M>(
    sets: &[WeightedRows<'_>],
    shape: Runs,
    init: N,
    f: F,
    merge: M,
) -> Result<Vec<T>>
where
    T: Send,
    N: Fn() -> S + Sync,
    F: Fn(&mut S, Chunk<'_>) -> Result<T> + Sync,
    M: Fn(&mut S, &mut T, T) + Sync,
{
    let mut runs: Vec<Vec<(usize, usize)>> = Vec::new();
    for (s, set) in sets.iter().enumerate() {
        let starts: Vec<(usize, usize)> = (0..set.x.nrows().div_ceil(CHUNK_ROWS))
            .map(|c| (s, c * CHUNK_ROWS))
            .collect();
        let run = run_length(starts.len(), shape, set.x.nrows() * set.x.ncols() * 8);
        runs.extend(starts.chunks(run).map(<[_]>::to_vec));
    }
    // Each run with the first chunk of the run after it, which its worker usually takes next
    // (its share of the runs is consecutive), to read ahead after its own last chunk.
    let firsts: Vec<Option<(usize, usize)>> = runs.iter().map(|run| run.first().copied()).collect();
    let items: Vec<_> = runs
        .into_iter()
        .zip(firsts.into_iter().skip(1).chain([None]))
        .collect();
    let results: Vec<Result<T>> = run_indexed_with(items, init, |state, _, (run, after)| {
        let mut folded: Option<T> = None;
        for (q, &start) in run.iter().enumerate() {
            let next = run.get(q + 1).copied().or(after);
            let part = run_chunk(sets, false, state, &f, start, next)?;
            match folded.as_mut() {
                Some(acc) => merge(state, acc, part),
                None => folded = Some(part),
            }
        }
        // A run has at least one chunk.
        folded.ok_or(GenerativeError::Empty { what: "x" })
    });
    results.into_iter().collect()
}

/// Whether [`fold_chunks_by_label_with`] cuts every one of `sets` into runs of one chunk, so
/// that its results are [`map_chunks_by_label_with`]'s (one per chunk).
pub fn runs_of_one_chunk(sets: &[WeightedRows<'_>], shape: Runs) -> bool {
    sets.iter().all(|set| {
        let chunks = set.x.nrows().div_ceil(CHUNK_ROWS);
        run_length(chunks, shape, set.x.nrows() * set.x.ncols() * 8) == 1
    })
}

/// The fewest runs [`fold_chunks_by_label_with`] cuts a set of at least as many chunks into.
pub const MIN_RUNS: usize = 32;

/// How a pass cuts a set's chunks into runs whose results it folds: at most `longest` chunks a
/// run, and (see [`run_length`]) few enough runs that their results, `partial_bytes` each, stay
/// within [`PARTIALS_BUDGET`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Runs {
    pub longest: usize,
    pub partial_bytes: usize,
}

impl Runs {
    /// Runs of one chunk each, whose results are small (predictions' per-chunk results).
    pub const ONE_CHUNK: Runs = Runs {
        longest: 1,
        partial_bytes: 0,
    };
}

/// The most bytes of run results a pass keeps until it merges them, or an eighth of the set's
/// data when that is more (the runs are not cut for a set whose results are small beside it).
pub const PARTIALS_BUDGET: usize = 64 << 20;

/// How many consecutive chunks of a set of `chunks` chunks (of `data_bytes` in all) a pass folds
/// into one run (the last run may be shorter): up to `shape.longest`, and short enough to leave
/// [`MIN_RUNS`] runs where there are that many chunks; but long enough that the runs' results,
/// `shape.partial_bytes` each, fit in [`PARTIALS_BUDGET`] (or an eighth of the data), with at
/// least 2 runs. It depends only on sizes, never on the thread count.
///
/// Why the budget: every run's result is kept until they are merged in order, and a QDA
/// partial is K × d² values. At d = 64, K = 300, a fit of 100,000 rows (51 MB) peaked at 334 MB
/// with 25 runs of 9.8 MB each (BENCHMARKS.md, fifty-ninth round).
pub fn run_length(chunks: usize, shape: Runs, data_bytes: usize) -> usize {
    let balanced = shape.longest.min(chunks.div_ceil(MIN_RUNS)).max(1);
    let budget = PARTIALS_BUDGET.max(data_bytes / 8);
    let most_runs = (budget / shape.partial_bytes.max(1)).max(2);
    balanced.max(chunks.div_ceil(most_runs))
}

/// The first row of every chunk of every set, as (set, row), in order.
fn chunk_starts(sets: &[WeightedRows<'_>]) -> Vec<(usize, usize)> {
    sets.iter()
        .enumerate()
        .flat_map(|(s, set)| {
            (0..set.x.nrows().div_ceil(CHUNK_ROWS)).map(move |c| (s, c * CHUNK_ROWS))
        })
        .collect()
}

/// Up to this many features a labeled chunk's passes in cache ask for the next chunk of the
/// worker's run ([`Chunk::ahead`]). A chunk is then at most 256 KB (with its labels, 288 KB),
/// which L2 holds beside the one being read. Measured on the Intel Xeon (`profile`,
/// `PROFILE_COLD=cs`, medians of 15, two alternated pairs, without → with): Gaussian NB fit
/// d = 8, K = 10 4.33, 4.47 → 3.73, 3.63 ms; d = 4, K = 10 2.72 → 2.21 ms; d = 8, K = 2 even. At
/// d = 16, where the last block's squares asked for all 16 columns and the labels, slower:
/// 7.30, 7.03 → 7.80, 7.83 ms; at d = 64 26.2, 25.4 → 45.0, 41.0 ms. LDA's tiles asking for the
/// next chunk at d = 16 were slower too, even asking for three lines a page (BENCHMARKS.md,
/// ninety-second round).
const READ_AHEAD_MAX_FEATURES: usize = 8;

/// `f` on the chunk of set `s` that starts at row `r0`: its rows, and its responsibilities or
/// checked labels (with their one-hot block when `one_hot_labels`), and what it reads ahead:
/// the labeled chunk at `next` (set, row), if any.
fn run_chunk<S, T, F>(
    sets: &[WeightedRows<'_>],
    one_hot_labels: bool,
    state: &mut S,
    f: &F,
    (s, r0): (usize, usize),
    next: Option<(usize, usize)>,
) -> Result<T>
where
    F: Fn(&mut S, Chunk<'_>) -> Result<T>,
{
    let set = &sets[s];
    let b = CHUNK_ROWS.min(set.x.nrows() - r0);
    // The chunk the worker reads next: its set and rows, and its labels when it is labeled.
    let next_chunk = next.map(|(s, r0)| {
        let set = &sets[s];
        (set, r0..r0 + CHUNK_ROWS.min(set.x.nrows() - r0))
    });
    let next_labels: &[usize] = match &next_chunk {
        Some((set, rows)) => match set.resp {
            Responsibilities::Labels { labels, .. } => labels.get(rows.clone()).unwrap_or(&[]),
            Responsibilities::Dense(_) => &[],
        },
        None => &[],
    };
    // Its columns, when it is labeled and they are contiguous and few (on the stack).
    let mut columns: [&[f64]; READ_AHEAD_MAX_FEATURES] = [&[]; READ_AHEAD_MAX_FEATURES];
    let ahead_columns = next_chunk
        .as_ref()
        .filter(|_| !next_labels.is_empty())
        .and_then(|(set, rows)| {
            let d = set.x.ncols();
            for (j, column) in columns.get_mut(..d)?.iter_mut().enumerate() {
                *column = &set.x.col(j).try_as_col_major()?.as_slice()[rows.clone()];
            }
            Some(d)
        });
    let ahead = match ahead_columns {
        Some(d) => RowsAhead::new(&columns[..d], next_labels),
        None => RowsAhead::NONE,
    };
    let next_first_column = next_chunk
        .as_ref()
        .filter(|(set, _)| set.x.ncols() > 0)
        .and_then(|(set, rows)| {
            set.x
                .col(0)
                .try_as_col_major()?
                .as_slice()
                .get(rows.clone())
        })
        .unwrap_or(&[]);
    // Rows of another layout (row-major, as read from a CSV file) are copied column-major
    // first: every kernel reads columns.
    with_column_major(set.x.subrows(r0, b), |x| match set.resp {
        Responsibilities::Dense(resp) => f(
            state,
            Chunk {
                set: s,
                first_row: r0,
                x,
                resp: resp.subrows(r0, b),
                labels: None,
                prechecked: set.prechecked,
                weight_totals: None,
                ahead,
                next_first_column,
                next_labels,
            },
        ),
        Responsibilities::Labels { labels, n_classes } => {
            let labels = &labels[r0..r0 + b];
            // The largest label first, in a loop without an early exit, vectorised inside
            // the dispatch (the search for the first bad one was a scalar loop on the
            // chunk's first read of its labels, about a fifth of an LDA fit's time at
            // d = 2: 0.0024 → 0.0020 s); only a bad one is then searched for.
            let largest = pulp::Arch::new().dispatch(
                #[inline(always)]
                || labels.iter().fold(0, |m, &l| m.max(l)),
            );
            if largest >= n_classes
                && let Some(i) = labels.iter().position(|l| *l >= n_classes)
            {
                return Err(GenerativeError::InvalidParameter {
                    name: "labels",
                    rule: "in 0..n_classes",
                    value: format!("{} at row {} (n_classes = {n_classes})", labels[i], r0 + i),
                });
            }
            // The chunk's one-hot block (b × K) only, built by the worker.
            let block = if one_hot_labels {
                one_hot(labels, n_classes)?
            } else {
                Mat::zeros(b, 0)
            };
            f(
                state,
                Chunk {
                    set: s,
                    first_row: r0,
                    x,
                    resp: block.as_ref(),
                    labels: Some(labels),
                    prechecked: set.prechecked,
                    weight_totals: None,
                    ahead,
                    next_first_column,
                    next_labels,
                },
            )
        }
    })
}

/// Up to this many classes, [`LabelGroups`] makes one branch-free pass per class rather than a
/// counting sort (without AVX-512).
const COMPRESS_MAX_CLASSES: usize = 4;

/// Up to this many classes, [`LabelGroups`] makes one AVX-512 pass per class, sixteen labels
/// per comparison and compress, rather than a counting sort.
const COMPRESS_V4_MAX_CLASSES: usize = 16;

/// Labels per AVX-512 comparison in [`LabelGroups`]' passes (32-bit lanes).
const COMPRESS_V4_LANES: usize = 16;

/// A chunk's rows grouped by class: a stable sort that keeps each class's rows in their
/// original order, so a per-class pass sees the same rows in the same order as a pass that
/// skips the rows of weight zero. Row indices are 32-bit: a chunk has [`CHUNK_ROWS`] rows,
/// and half the bytes are half the reads and writes of the grouping and of the gathers that
/// take its order.
#[derive(Debug, Default)]
pub struct LabelGroups {
    order: Vec<u32>,
    starts: Vec<usize>,
    /// The counting sort's counts and next slots, kept for reuse.
    next: Vec<usize>,
    /// The labels as 32-bit values, padded to whole vectors, for the AVX-512 passes.
    narrow: Vec<u32>,
}

/// Consecutive parts of a chunk's rows that [`LabelGroups`]' counting sort places at once.
const SORT_STREAMS: usize = 4;

impl LabelGroups {
    /// Groups `labels` (each < `k`; at most `u32::MAX` of them, a chunk's).
    pub fn new(labels: &[usize], k: usize) -> Self {
        let mut groups = Self::default();
        groups.regroup(labels, k);
        groups
    }

    /// Groups `labels` (each < `k`; at most `u32::MAX` of them, a chunk's) in place of the
    /// present grouping, reusing its memory (a worker keeps one from chunk to chunk).
    pub fn regroup(&mut self, labels: &[usize], k: usize) {
        assert!(
            u32::try_from(labels.len()).is_ok(),
            "LabelGroups takes a chunk's rows, at most u32::MAX"
        );
        #[cfg(target_arch = "x86_64")]
        if k <= COMPRESS_V4_MAX_CLASSES
            && let Some(simd) = pulp::x86::V4::try_new()
        {
            self.by_compress_v4(simd, labels, k);
            return;
        }
        if k <= COMPRESS_MAX_CLASSES {
            self.by_compress(labels, k);
        } else {
            self.by_counting_sort(labels, k);
        }
    }

    /// One AVX-512 pass per class over the labels narrowed to 32 bits: sixteen labels per
    /// comparison, whose mask compresses their row indices to the front of a vector, stored
    /// whole at the class's next free slot, which advances by the mask's count. A store runs
    /// up to 15 slots past the class's rows, into the next class's room, which that class's
    /// pass writes afterwards (and past the last class into spare slots). The counting sort
    /// waited on a load and a store of `next[label]` per row (4096 labels of 10 classes:
    /// 1.55–2.24 ns a label against 1.05–1.11 ns here; of 16 classes 1.75–2.24 ns against
    /// 1.45–1.74 ns; of 2 classes, where the scalar pass per class took 1.45–1.53 ns, 0.39 ns).
    #[cfg(target_arch = "x86_64")]
    fn by_compress_v4(&mut self, simd: pulp::x86::V4, labels: &[usize], k: usize) {
        const L: usize = COMPRESS_V4_LANES;
        let n = labels.len();
        let (order, starts, narrow) = (&mut self.order, &mut self.starts, &mut self.narrow);
        // Resized, not cleared: only slots past the last length are filled, the rest are
        // overwritten. The padding label matches no class (k ≤ 16).
        narrow.resize(n.div_ceil(L) * L, u32::MAX);
        order.resize(n + L, 0);
        starts.clear();
        simd.vectorize(
            #[inline(always)]
            || {
                let (head, padding) = narrow.split_at_mut(n);
                for (t, &l) in head.iter_mut().zip(labels) {
                    *t = l.min(u32::MAX as usize) as u32;
                }
                padding.fill(u32::MAX);
                // A slice, so the loop keeps its base and length in registers (through the
                // vector, every store made it load them again).
                let order = &mut order[..];
                let first: [u32; L] = std::array::from_fn(|i| i as u32);
                let step = simd.avx512f._mm512_set1_epi32(L as i32);
                let mut pos = 0;
                for c in 0..k {
                    starts.push(pos);
                    let class = simd.avx512f._mm512_set1_epi32(c as i32);
                    let mut rows = pulp::cast(first);
                    for ids in narrow.chunks_exact(L) {
                        let ids: [u32; L] = std::array::from_fn(|i| ids[i]);
                        let mask = simd.avx512f._mm512_cmpeq_epi32_mask(pulp::cast(ids), class);
                        let packed = simd.avx512f._mm512_maskz_compress_epi32(mask, rows);
                        order[pos..pos + L].copy_from_slice(&pulp::cast::<_, [u32; L]>(packed));
                        pos += mask.count_ones() as usize;
                        rows = simd.avx512f._mm512_add_epi32(rows, step);
                    }
                }
                starts.push(pos);
                debug_assert_eq!(pos, n, "every label is < k");
            },
        );
        order.truncate(n);
    }

    /// One branch-free pass per class: every row index is written at the class's next free
    /// slot, which advances only when the row is of the class. The loop carries its position in
    /// a register; the counting sort's `next[label] += 1` goes through memory, and with two
    /// classes half of its steps wait for the previous step's store (the counting sort had a
    /// third of the samples of LDA's fit at d = 2, K = 2).
    fn by_compress(&mut self, labels: &[usize], k: usize) {
        let n = labels.len();
        let (order, starts) = (&mut self.order, &mut self.starts);
        // One spare slot: the pass for a class writes (then overwrites) the slot after its
        // last row.
        order.clear();
        order.resize(n + 1, 0);
        starts.clear();
        let mut pos = 0;
        for c in 0..k {
            starts.push(pos);
            for (i, &l) in labels.iter().enumerate() {
                order[pos] = i as u32;
                pos += usize::from(l == c);
            }
        }
        starts.push(pos);
        debug_assert_eq!(pos, n, "every label is < k");
        order.truncate(n);
    }

    /// A counting sort over [`SORT_STREAMS`] consecutive parts of the rows at once: the class
    /// sizes of each part, then every part's rows placed after the earlier parts' rows of their
    /// class, so each class's rows stay in row order. Why the parts: a row's slot is
    /// `next[label]`, stored by the last row of its class; with one part, a run of rows of few
    /// classes waited on those stores one after another (the grouping held about a quarter of
    /// the samples of a QDA fit at d = 2, K = 10), and four parts keep four such chains apart:
    /// 4096 labels of 10 classes took 6.6–6.9 µs against 7.5–10 µs with one part (scratch
    /// timing, twenty-sixth round; two parts were no faster than one, eight no faster than four).
    fn by_counting_sort(&mut self, labels: &[usize], k: usize) {
        const P: usize = SORT_STREAMS;
        let n = labels.len();
        let bounds: [usize; P + 1] = std::array::from_fn(|p| p * n / P);
        // The length all parts have; each has at most one row more, placed after the loops.
        let common = n / P;
        let parts: [&[usize]; P] = std::array::from_fn(|p| &labels[bounds[p]..bounds[p + 1]]);
        // Part p's counts per class first, then where its next row of each class goes. Local
        // slices, so that the loops keep their bases in registers (through `self`, every store
        // made the compiler load the vectors' pointers again).
        self.next.clear();
        self.next.resize(P * k, 0);
        let next = &mut self.next[..];
        for t in 0..common {
            for p in 0..P {
                next[p * k + parts[p][t]] += 1;
            }
        }
        for p in 0..P {
            for &l in &parts[p][common..] {
                next[p * k + l] += 1;
            }
        }
        self.starts.clear();
        let mut pos = 0;
        for c in 0..k {
            self.starts.push(pos);
            for p in 0..P {
                let count = next[p * k + c];
                next[p * k + c] = pos;
                pos += count;
            }
        }
        self.starts.push(pos);
        self.order.clear();
        self.order.resize(n, 0);
        let order = &mut self.order[..];
        for t in 0..common {
            for p in 0..P {
                let slot = &mut next[p * k + parts[p][t]];
                order[*slot] = (bounds[p] + t) as u32;
                *slot += 1;
            }
        }
        for p in 0..P {
            for (t, &l) in parts[p].iter().enumerate().skip(common) {
                let slot = &mut next[p * k + l];
                order[*slot] = (bounds[p] + t) as u32;
                *slot += 1;
            }
        }
    }

    /// Row indices (within the chunk) of class `c`, ascending.
    pub fn rows(&self, c: usize) -> &[u32] {
        let (start, len) = self.range(c);
        &self.order[start..start + len]
    }

    /// Every row index, class by class (each class's rows ascending): `rows(c)` is the range
    /// `range(c)` of it.
    pub fn order(&self) -> &[u32] {
        &self.order
    }

    /// Where class `c`'s rows lie in `order()`: (start, length).
    pub fn range(&self, c: usize) -> (usize, usize) {
        (self.starts[c], self.starts[c + 1] - self.starts[c])
    }

    /// Size of the largest class.
    pub fn largest(&self) -> usize {
        self.starts
            .windows(2)
            .map(|w| w[1] - w[0])
            .max()
            .unwrap_or(0)
    }
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
    let mut j = 0;
    // Four columns side by side where they are contiguous: a scan of one column run of a chunk
    // at a time has one stream from memory in flight per core, and this scan is often the
    // first read of a chunk (see `density::moments::touch_columns`).
    while j + 4 <= x.ncols() {
        let Some(cols) = density::block::contiguous_columns(x, j..j + 4) else {
            break;
        };
        let [a, b, c, e] = [cols[0], cols[1], cols[2], cols[3]];
        any |= pulp::Arch::new().dispatch(
            #[inline(always)]
            || {
                a.iter()
                    .zip(b)
                    .zip(c)
                    .zip(e)
                    .fold(false, |acc, (((a, b), c), e)| {
                        acc | bad(*a) | bad(*b) | bad(*c) | bad(*e)
                    })
            },
        );
        j += 4;
    }
    for j in j..x.ncols() {
        let col = column(x, j, &mut scratch);
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

#[cfg(test)]
mod tests {
    use super::*;
    use density::block::gather_rows;

    /// `run_indexed` on `n` owned items: each taken once, results in item order.
    fn check_run_indexed(n: usize) {
        let calls = std::sync::atomic::AtomicUsize::new(0);
        let items: Vec<String> = (0..n).map(|i| format!("item {i}")).collect();
        let out = run_indexed(items, |i, item| {
            calls.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            // Uneven work, so that shares are stolen.
            let spin: u64 = (0..(i % 7) as u64 * 2000).fold(0, |a, v| a ^ v.wrapping_mul(31));
            std::hint::black_box(spin);
            (i, item)
        });
        assert_eq!(calls.into_inner(), n);
        assert_eq!(out.len(), n);
        for (i, (idx, item)) in out.into_iter().enumerate() {
            assert_eq!((idx, item), (i, format!("item {i}")));
        }
    }

    #[test]
    fn run_indexed_takes_every_item_once_and_returns_results_in_order_on_any_pool() {
        for n in [0, 1, 2, 3, 5, 64, 257] {
            check_run_indexed(n); // from outside any pool (the global pool's helpers)
            for threads in [1, 2, 3, 8] {
                let pool = rayon::ThreadPoolBuilder::new()
                    .num_threads(threads)
                    .build()
                    .unwrap();
                pool.install(|| check_run_indexed(n)); // the caller is a pool thread
            }
        }
    }

    #[test]
    fn nested_run_indexed_finishes_even_on_a_single_thread_pool() {
        for threads in [1, 2] {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            let sums = pool.install(|| {
                run_indexed((0..6usize).collect(), |i, outer| {
                    let inner = run_indexed((0..50usize).collect(), |j, v| {
                        assert_eq!(j, v);
                        outer * 100 + v
                    });
                    assert_eq!(i, outer);
                    inner.iter().sum::<usize>()
                })
            });
            let expected: Vec<usize> = (0..6).map(|o| o * 100 * 50 + 49 * 50 / 2).collect();
            assert_eq!(sums, expected);
        }
    }

    #[test]
    fn row_chunks_mut_splits_in_order_and_writes_through() {
        for (n, rows, expected) in [
            (10, 4, vec![4, 4, 2]),
            (8, 4, vec![4, 4]),
            (3, 5, vec![3]),
            (0, 4, vec![]),
            (2, 0, vec![1, 1]),
        ] {
            let mut m = Mat::<f64>::zeros(n, 2);
            let chunks = row_chunks_mut(m.as_mut(), rows);
            assert_eq!(
                chunks.iter().map(|c| c.nrows()).collect::<Vec<_>>(),
                expected
            );
            let mut first = 0;
            for mut c in chunks {
                assert_eq!(c.ncols(), 2);
                for i in 0..c.nrows() {
                    c[(i, 1)] = (first + i) as f64;
                }
                first += c.nrows();
            }
            assert!((0..n).all(|i| m[(i, 1)] == i as f64 && m[(i, 0)] == 0.0));
        }
    }

    #[test]
    fn zeros_are_zeros_of_the_shape_over_several_chunks() {
        for (n, k) in [(2 * CHUNK_ROWS + 17, 3), (5, 2), (0, 4), (7, 0)] {
            let m = zeros(n, k);
            assert_eq!((m.nrows(), m.ncols()), (n, k));
            assert!((0..k).all(|j| (0..n).all(|i| m[(i, j)].to_bits() == 0)));
        }
    }

    #[test]
    fn spread_zeros_are_zeros_one_line_apart_at_whole_chunks() {
        for (n, k, stride) in [(CHUNK_ROWS, 10, CHUNK_ROWS + 8), (1000, 3, 1000), (0, 2, 0)] {
            let m = spread_zeros(n, k);
            assert_eq!((m.nrows(), m.ncols()), (n, k));
            if k > 1 && n > 0 {
                assert_eq!(m.col_stride() as usize, stride, "n = {n}");
            }
            assert!((0..k).all(|j| (0..n).all(|i| m[(i, j)].to_bits() == 0)));
        }
    }

    #[test]
    fn build_by_row_chunks_hands_out_zeroed_chunks_in_order_and_keeps_what_they_write() {
        for (n, k) in [(2 * CHUNK_ROWS + 17, 3), (CHUNK_ROWS, 1), (5, 0), (0, 4)] {
            let (m, seen) = build_by_row_chunks(n, k, |c, mut chunk| {
                let all_zero = (0..chunk.ncols())
                    .all(|j| (0..chunk.nrows()).all(|i| chunk[(i, j)].to_bits() == 0));
                for j in 0..chunk.ncols() {
                    for i in 0..chunk.nrows() {
                        chunk[(i, j)] = ((c * CHUNK_ROWS + i) * 10 + j) as f64;
                    }
                }
                (c, chunk.nrows(), all_zero)
            });
            assert_eq!((m.nrows(), m.ncols()), (n, k));
            let chunks = n.div_ceil(CHUNK_ROWS);
            assert_eq!(seen.len(), chunks);
            for (c, (idx, rows, zero)) in seen.iter().enumerate() {
                assert_eq!(*idx, c);
                assert_eq!(*rows, CHUNK_ROWS.min(n - c * CHUNK_ROWS));
                assert!(zero, "chunk {c} of {n} x {k} was not zeroed");
            }
            for j in 0..k {
                for i in 0..n {
                    assert_eq!(m[(i, j)], (i * 10 + j) as f64);
                }
            }
        }
    }

    #[test]
    fn fresh_chunks_keep_what_their_writers_wrote_and_zero_the_rest() {
        // Chunk 0 is written through its unwritten columns, chunk 1 taken zeroed and partly
        // written, chunk 2 left alone (zeroed after `fill`), chunk 3 written and then asked for
        // its columns again (refused: they are written).
        let (n, k) = (3 * CHUNK_ROWS + 5, 3);
        let value = |i: usize, j: usize| (i * 10 + j) as f64 + 0.5;
        let (m, refused) = build_by_fresh_row_chunks(n, k, |c, fresh| {
            let r0 = c * CHUNK_ROWS;
            match c {
                0 | 3 => {
                    for (j, col) in fresh.columns().unwrap().into_iter().enumerate() {
                        for (i, v) in col.iter_mut().enumerate() {
                            v.write(value(r0 + i, j));
                        }
                    }
                    // SAFETY: every value of every column was written above.
                    #[allow(unsafe_code)]
                    let chunk = unsafe { fresh.assume_written() };
                    assert_eq!(chunk[(0, 0)], value(r0, 0));
                    fresh.columns().is_none()
                }
                1 => {
                    let mut chunk = fresh.zeroed();
                    assert!((0..k).all(|j| (0..chunk.nrows()).all(|i| chunk[(i, j)] == 0.0)));
                    chunk[(1, 1)] = 7.0;
                    fresh.columns().is_none()
                }
                _ => false,
            }
        });
        assert_eq!(refused, [true, true, false, true]);
        for j in 0..k {
            for i in 0..n {
                let expected = match i / CHUNK_ROWS {
                    0 | 3 => value(i, j),
                    1 if (i - CHUNK_ROWS, j) == (1, 1) => 7.0,
                    _ => 0.0,
                };
                assert_eq!(m[(i, j)].to_bits(), expected.to_bits(), "({i}, {j})");
            }
        }
    }

    #[test]
    fn label_groups_by_compress_and_by_counting_sort_agree() {
        // Every way of grouping (few classes, many; AVX-512 or not) gives the same stable
        // order, including empty classes and a chunk of one class.
        let mut state = 12345u64;
        let mut reused = LabelGroups::default();
        #[cfg(target_arch = "x86_64")]
        let mut reused_v4 = LabelGroups::default();
        for k in [1usize, 2, 3, 4, 5, 6, 7, 10, 13, 16, 17] {
            for n in [0usize, 1, 2, 3, 5, 31, 500, 4095, 4096, 4099] {
                let labels: Vec<usize> = (0..n)
                    .map(|i| {
                        state = state
                            .wrapping_mul(6364136223846793005)
                            .wrapping_add(1442695040888963407);
                        // Class k − 1 never appears when k > 2, so some class is empty.
                        let drawn = if k > 2 { k - 1 } else { k };
                        if i % 17 == 0 {
                            0
                        } else {
                            (state >> 33) as usize % drawn
                        }
                    })
                    .collect();
                let (mut a, mut b) = (LabelGroups::default(), LabelGroups::default());
                a.by_compress(&labels, k);
                b.by_counting_sort(&labels, k);
                assert_eq!(a.order(), b.order(), "k={k} n={n}");
                // One grouping reused across every case, as a worker does across chunks.
                reused.regroup(&labels, k);
                assert_eq!(reused.order(), a.order(), "k={k} n={n}");
                assert_eq!(reused.starts, a.starts, "k={k} n={n}");
                #[cfg(target_arch = "x86_64")]
                if let Some(simd) = pulp::x86::V4::try_new()
                    && k <= COMPRESS_V4_MAX_CLASSES
                {
                    reused_v4.by_compress_v4(simd, &labels, k);
                    assert_eq!(reused_v4.order(), a.order(), "v4: k={k} n={n}");
                    assert_eq!(reused_v4.starts, a.starts, "v4: k={k} n={n}");
                }
                for c in 0..k {
                    assert_eq!(a.range(c), b.range(c), "k={k} n={n} class {c}");
                    assert!(a.rows(c).iter().all(|&i| labels[i as usize] == c));
                    assert!(a.rows(c).windows(2).all(|w| w[0] < w[1]));
                }
                assert_eq!(a.order().len(), n);
            }
        }
    }

    #[test]
    fn label_groups_keep_each_class_in_row_order_and_gather_copies_those_rows() {
        let labels = [2, 0, 2, 1, 0, 2, 2];
        let g = LabelGroups::new(&labels, 4);
        assert_eq!(g.rows(0), &[1, 4]);
        assert_eq!(g.rows(1), &[3]);
        assert_eq!(g.rows(2), &[0, 2, 5, 6]);
        assert!(g.rows(3).is_empty());
        assert_eq!(g.largest(), 4);
        let x = Mat::from_fn(7, 3, |i, j| (10 * i + j) as f64);
        // Column-major input and a row-major view of the same values gather the same matrix.
        let row_major = x.transpose().to_owned();
        let mut buf = Vec::new();
        let mut buf_t = Vec::new();
        let rows: Vec<usize> = g.rows(2).iter().map(|&i| i as usize).collect();
        let a = gather_rows(x.as_ref(), &rows, &mut buf);
        let b = gather_rows(row_major.transpose(), &rows, &mut buf_t);
        assert_eq!((a.nrows(), a.ncols()), (4, 3));
        for (r, &i) in rows.iter().enumerate() {
            for j in 0..3 {
                assert_eq!(a[(r, j)], (10 * i + j) as f64);
                assert_eq!(b[(r, j)], a[(r, j)]);
            }
        }
        let none = gather_rows(x.as_ref(), &[], &mut buf);
        assert_eq!((none.nrows(), none.ncols()), (0, 3));
    }

    /// Each chunk of a labeled fold carries the first column and the labels of the chunk its
    /// worker reads next: the next chunk of its run, or the first of the next run, across sets;
    /// the last chunk of all carries none.
    #[test]
    fn chunks_carry_the_first_column_and_labels_of_the_chunk_read_next() {
        let sizes = [5 * CHUNK_ROWS + 17, CHUNK_ROWS / 2];
        let xs: Vec<Mat<f64>> = sizes
            .iter()
            .enumerate()
            .map(|(s, &n)| Mat::from_fn(n, 3, |i, j| (1_000_000 * s + 10 * i + j) as f64))
            .collect();
        let labels: Vec<Vec<usize>> = sizes
            .iter()
            .map(|&n| (0..n).map(|i| (i * 7) % 3).collect())
            .collect();
        let sets: Vec<WeightedRows<'_>> = xs
            .iter()
            .zip(&labels)
            .map(|(x, l)| WeightedRows::labeled(x.as_ref(), l, 3))
            .collect();
        let shape = Runs {
            longest: 2,
            partial_bytes: 0,
        };
        let seen = fold_chunks_by_label_with(
            &sets,
            shape,
            || (),
            |_, chunk| {
                let next_first = chunk.next_first_column.first().copied();
                let next_label = chunk.next_labels.first().copied();
                let len = (chunk.next_first_column.len(), chunk.next_labels.len());
                Ok(vec![(
                    chunk.set,
                    chunk.first_row,
                    next_first,
                    next_label,
                    len,
                )])
            },
            |_, acc: &mut Vec<_>, part| acc.extend(part),
        )
        .unwrap();
        let chunks: Vec<_> = seen.into_iter().flatten().collect();
        let starts = chunk_starts(&sets);
        assert_eq!(chunks.len(), starts.len());
        for (q, &(s, r0, next_first, next_label, len)) in chunks.iter().enumerate() {
            assert_eq!((s, r0), starts[q]);
            match starts.get(q + 1) {
                Some(&(t, r1)) => {
                    let rows = CHUNK_ROWS.min(sizes[t] - r1);
                    assert_eq!(next_first, Some(xs[t][(r1, 0)]), "chunk {q}");
                    assert_eq!(next_label, Some(labels[t][r1]), "chunk {q}");
                    assert_eq!(len, (rows, rows), "chunk {q}");
                }
                None => assert_eq!((next_first, next_label, len), (None, None, (0, 0))),
            }
        }
    }
}
