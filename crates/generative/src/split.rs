//! A weighted fit split into its two halves: statistics of chunks of rows, merged in chunk
//! order, then the closed-form finish.
//!
//! Why: semi-supervised EM computes the unlabeled rows' responsibilities a chunk at a time.
//! When the model's fit is split, EM takes each chunk's statistics for the next M-step in the
//! same pass, while the chunk's rows and responsibilities are still in cache, instead of
//! reading all n × (d + K) values back from memory in a separate fit (BENCHMARKS.md,
//! thirty-seventh round). The chunks, their runs and the order of the merges are those of
//! [`WeightedFit::fit_sets`](crate::WeightedFit::fit_sets), so both give the same bits.

use std::any::Any;

use crate::parallel::{Chunk, Runs, check_sets, fold_chunks_by_label_with};
use crate::{GenerativeError, Result, WeightedRows};

/// Statistics of some rows of a [`SplitFit`], opaque to the caller: one chunk's, or the merge
/// of a run of consecutive chunks'.
pub struct Partial(Box<dyn Any + Send>);

impl Partial {
    pub fn new<T: Any + Send>(stats: T) -> Self {
        Self(Box::new(stats))
    }

    /// The statistics, if they are a `T` (they always are when they come from the same fit).
    pub fn into_inner<T: Any>(self) -> Result<T> {
        self.0
            .downcast::<T>()
            .map(|b| *b)
            .map_err(|_| GenerativeError::Internal {
                what: "statistics of another model handed to a split fit",
            })
    }

    /// The statistics by reference, if they are a `T`.
    pub fn get_mut<T: Any>(&mut self) -> Option<&mut T> {
        self.0.downcast_mut::<T>()
    }
}

impl std::fmt::Debug for Partial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Partial(..)")
    }
}

impl std::fmt::Debug for Scratch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Scratch(..)")
    }
}

/// A worker's scratch buffers for [`SplitFit::chunk_partial`], reused from chunk to chunk.
pub struct Scratch(Box<dyn Any>);

impl Scratch {
    pub fn new<T: Any>(buffers: T) -> Self {
        Self(Box::new(buffers))
    }

    /// The buffers, if they are a `T`.
    pub fn get_mut<T: Any>(&mut self) -> Option<&mut T> {
        self.0.downcast_mut::<T>()
    }
}

/// A weighted fit as per-chunk statistics and a finish. For any sets of rows,
/// `finish(fold_split(self, sets))` is the model `fit_sets(sets)` returns, bit for bit.
pub trait SplitFit<M>: Sync {
    /// How a set's chunks are cut into runs whose statistics one worker merges before the
    /// finish takes the runs' ([`fold_chunks_by_label_with`], [`crate::parallel::run_length`]),
    /// for d features and K classes: at most so many chunks a run, and the size of a run's
    /// statistics.
    fn runs(&self, d: usize, k: usize) -> Runs;

    /// A worker's scratch buffers.
    fn scratch(&self) -> Scratch;

    /// The statistics of one chunk (d features, K classes).
    fn chunk_partial(
        &self,
        scratch: &mut Scratch,
        chunk: Chunk<'_>,
        d: usize,
        k: usize,
    ) -> Result<Partial>;

    /// `acc` ← the statistics of `acc`'s rows and then `part`'s (both from this split's
    /// `chunk_partial` or merges of them; anything else is left as it is).
    fn merge_partials(&self, acc: &mut Partial, part: Partial);

    /// The fitted model from the statistics of every run of chunks, in order.
    fn finish(&self, runs: Vec<Partial>, d: usize, k: usize) -> Result<M>;
}

/// The statistics of `sets`' chunks, folded in runs as `fit_sets` folds them, one per run in
/// order (a run's first error is its result, and the first in order is returned).
pub fn fold_split<M>(split: &dyn SplitFit<M>, sets: &[WeightedRows<'_>]) -> Result<Vec<Partial>> {
    let (d, k) = check_sets(sets)?;
    fold_chunks_by_label_with(
        sets,
        split.runs(d, k),
        || split.scratch(),
        |scratch, chunk| split.chunk_partial(scratch, chunk, d, k),
        |_, acc, part| split.merge_partials(acc, part),
    )
}
