//! The two traits every classifier implements, and the types they share.
//!
//! [`WeightedFit`] is the validated hyper-parameters of a model; it fits from one or more sets of
//! rows, each with an n × K responsibility matrix whose row i says how much sample i counts for
//! class k. Taking *several* sets lets semi-supervised EM pass labeled rows (one-hot) and
//! unlabeled rows (λ-scaled posteriors) without copying or concatenating the data.
//!
//! [`GenerativeClassifier`] is the fitted model. Its one kernel is `log_joint_chunk`,
//! `log p(x_i, y = k)`; the provided methods derive posteriors, predictions and the marginal
//! log-likelihood from it, in parallel over fixed row chunks.

use faer::{Mat, MatMut, MatRef};

use crate::parallel::{
    CHUNK_ROWS, FreshChunk, Runs, build_by_fresh_row_chunks, check_finite_rows, row_chunks_mut,
    run_indexed_with, run_length, spread_zeros,
};
use crate::score_formula::ScoreFormula;
use crate::{GenerativeError, Result};
use density::exp::exp_shifted_accumulate;
use density::numerics::{log_normalize_in_place, log_sum_exp};
use density::stats::{Mergeable, ScatterKind, SufficientStats};

/// Class priors: estimated as the classes' shares of the total weight, or fixed by the user.
#[derive(Debug, Clone, PartialEq, Default, serde::Serialize, serde::Deserialize)]
pub enum Priors {
    /// π_k = N_k / N (maximum likelihood).
    #[default]
    Estimated,
    /// User-given π_k (positive, summing to 1, one per class).
    Fixed(Vec<f64>),
}

impl Priors {
    /// Validates fixed priors (positive, finite, summing to 1).
    pub fn check(&self) -> Result<()> {
        if let Priors::Fixed(p) = self {
            if p.iter().any(|v| !v.is_finite() || *v <= 0.0) {
                return Err(GenerativeError::InvalidParameter {
                    name: "priors",
                    rule: "positive and finite",
                    value: format!("{p:?}"),
                });
            }
            let sum: f64 = p.iter().sum();
            if (sum - 1.0).abs() > 1e-6 {
                return Err(GenerativeError::InvalidParameter {
                    name: "priors",
                    rule: "summing to 1",
                    value: format!("{p:?} (sum {sum})"),
                });
            }
        }
        Ok(())
    }

    /// ln π_k from the classes' total weights.
    pub fn log_priors(&self, class_weights: &[f64]) -> Result<Vec<f64>> {
        match self {
            Priors::Estimated => {
                let total: f64 = class_weights.iter().sum();
                Ok(class_weights.iter().map(|w| (w / total).ln()).collect())
            }
            Priors::Fixed(p) => {
                if p.len() != class_weights.len() {
                    return Err(GenerativeError::DimensionMismatch {
                        what: "priors vs classes",
                        expected: class_weights.len(),
                        got: p.len(),
                    });
                }
                Ok(p.iter().map(|v| v.ln()).collect())
            }
        }
    }
}

/// Free parameters of the class priors: K − 1 when estimated, none when fixed.
pub fn prior_parameters(n_classes: usize, fixed: bool) -> usize {
    if fixed {
        0
    } else {
        n_classes.saturating_sub(1)
    }
}

/// The length a model's parameters must have, the product of its `dims`, checked as a model is
/// validated (after deserialising). Errors when the product overflows, and when the model has
/// no features (`n_features` = 0). Why: a damaged model file whose dimensions multiply past
/// `usize::MAX` wrapped to a small length, passed the length checks, and its first prediction
/// indexed out of bounds (a panic).
pub(crate) fn parameter_length(
    what: &'static str,
    n_features: usize,
    dims: &[usize],
) -> Result<usize> {
    if n_features == 0 {
        return Err(GenerativeError::InvalidParameter {
            name: "n_features",
            rule: ">= 1",
            value: "0".into(),
        });
    }
    dims.iter()
        .try_fold(1usize, |p, &d| p.checked_mul(d))
        .ok_or_else(|| GenerativeError::InvalidParameter {
            name: what,
            rule: "of dimensions whose product fits in memory",
            value: dims
                .iter()
                .map(usize::to_string)
                .collect::<Vec<_>>()
                .join(" × "),
        })
}

/// One set of rows with its responsibilities: `x` is n × d, `resp` gives each row's weight
/// for each of the K classes.
#[derive(Debug, Clone, Copy)]
pub struct WeightedRows<'a> {
    pub x: MatRef<'a, f64>,
    pub resp: Responsibilities<'a>,
    /// Skip the finiteness checks of `x` and `resp` (see [`WeightedRows::prechecked`]).
    pub prechecked: bool,
}

impl<'a> WeightedRows<'a> {
    /// Rows with an n × K matrix of non-negative responsibilities.
    pub fn weighted(x: MatRef<'a, f64>, resp: MatRef<'a, f64>) -> Self {
        Self {
            x,
            resp: Responsibilities::Dense(resp),
            prechecked: false,
        }
    }

    /// Rows with hard labels in `0..n_classes` (one-hot weights).
    pub fn labeled(x: MatRef<'a, f64>, labels: &'a [usize], n_classes: usize) -> Self {
        Self {
            x,
            resp: Responsibilities::Labels { labels, n_classes },
            prechecked: false,
        }
    }

    /// Marks the set as already checked: `x` finite and `resp` finite and ≥ 0 (EM's M-step
    /// refits the same rows every iteration with responsibilities it computed itself). Domain
    /// checks of naive Bayes (counts, categories) still run.
    pub fn prechecked(mut self) -> Self {
        self.prechecked = true;
        self
    }
}

/// The weights of a set of rows for each class.
#[derive(Debug, Clone, Copy)]
pub enum Responsibilities<'a> {
    /// n × K, non-negative; row i is sample i's weight for each class.
    Dense(MatRef<'a, f64>),
    /// One label per row: weight 1 for that class, 0 for the others. Equivalent to the one-hot
    /// matrix without its n × K memory: workers expand it one 4096-row chunk at a time.
    Labels {
        labels: &'a [usize],
        n_classes: usize,
    },
}

impl Responsibilities<'_> {
    /// Number of rows.
    pub fn nrows(&self) -> usize {
        match self {
            Self::Dense(m) => m.nrows(),
            Self::Labels { labels, .. } => labels.len(),
        }
    }

    /// Number of classes K.
    pub fn ncols(&self) -> usize {
        match self {
            Self::Dense(m) => m.ncols(),
            Self::Labels { n_classes, .. } => *n_classes,
        }
    }
}

/// A one-hot responsibility matrix (n × K) for labels in `0..n_classes`.
pub fn one_hot(labels: &[usize], n_classes: usize) -> Result<Mat<f64>> {
    if let Some((row, &l)) = labels.iter().enumerate().find(|(_, l)| **l >= n_classes) {
        return Err(GenerativeError::InvalidParameter {
            name: "labels",
            rule: "in 0..n_classes",
            value: format!("{l} at row {row} (n_classes = {n_classes})"),
        });
    }
    let mut r = Mat::zeros(labels.len(), n_classes);
    for (i, &l) in labels.iter().enumerate() {
        r[(i, l)] = 1.0;
    }
    Ok(r)
}

/// The count, mean and centred scatter of the rows of `x` (each of weight one), in parallel over
/// fixed chunks merged in order (the same bits on any number of threads): what
/// [`GenerativeClassifier::shared_term_sum`] reads. The rows are not checked.
pub fn row_moments(x: MatRef<'_, f64>) -> SufficientStats {
    let (n, d) = (x.nrows(), x.ncols());
    let starts: Vec<usize> = (0..n).step_by(CHUNK_ROWS).collect();
    let parts = run_indexed_with(starts, Vec::new, |buffer, _, r0| {
        let mut part = SufficientStats::new(d, ScatterKind::Full);
        density::block::with_column_major(x.subrows(r0, CHUNK_ROWS.min(n - r0)), |x| {
            part.accumulate_unweighted(x, buffer);
        });
        part
    });
    let mut total = SufficientStats::new(d, ScatterKind::Full);
    for part in &parts {
        total.merge(part);
    }
    total
}

/// A fitted generative classifier.
pub trait GenerativeClassifier: Send + Sync {
    /// Number of classes K.
    fn n_classes(&self) -> usize;

    /// Number of features d.
    fn n_features(&self) -> usize;

    /// Number of free parameters (for BIC).
    fn n_parameters(&self) -> usize;

    /// Checks that the model's own parameters are consistent (used after deserialising).
    fn validate(&self) -> Result<()>;

    /// Checks that `x` is in the model's domain (finite by default; naive Bayes models also check
    /// counts and categories). Errors name the row and column.
    fn check_input(&self, x: MatRef<'_, f64>) -> Result<()> {
        check_finite_rows(x, 0)
    }

    /// Whether every row that [`check_input`](Self::check_input) would reject gets at least
    /// one non-finite score from [`log_joint_chunk`](Self::log_joint_chunk) and
    /// [`posterior_scores_chunk`](Self::posterior_scores_chunk). Then a prediction checks the
    /// chunk's scores (b × K, in cache) instead of its input, and reads the input only when a
    /// score is not finite (to name the bad value, or to find none: finite values can overflow).
    /// False by default. The Gaussian models hold it by arithmetic (∞ · 0 is NaN); Bernoulli and
    /// multinomial naive Bayes by giving NaN scores to a row their check would reject.
    fn scores_reveal_bad_input(&self) -> bool {
        false
    }

    /// Whether a row's posterior scores, far from the data, are ranked by a term that grows
    /// with the row's scale (a Gaussian's quadratic form, or LDA's linear one), and every score
    /// of a finite row is finite unless it overflows, so that a finite row with a non-finite
    /// score (−∞, or an ∞ or NaN from ∞ − ∞) ranks the classes as
    /// the same row scaled down by powers of two does. Posteriors then give such rows to the
    /// classes that rank first (`rescore_far_rows`) instead of calling them uniform. False
    /// by default.
    fn ranks_far_rows_when_scaled(&self) -> bool {
        false
    }

    /// [`posterior_scores_chunk`](Self::posterior_scores_chunk) as a formula, for the models
    /// whose scores are one of [`ScoreFormula`]'s, exactly as that method writes them when its
    /// kernel takes the chunk: LDA's discriminant, Bernoulli and multinomial naive Bayes' log
    /// joints (linear), Gaussian naive Bayes' (diagonal), QDA's (full; written unzeroed up to
    /// 8 features). A prediction into a fresh output then
    /// has the crate's kernel write the scores without zeroing the output first
    /// ([`score_formula`](crate::score_formula)). `None` by default.
    #[doc(hidden)]
    fn posterior_score_formula(&self) -> Option<ScoreFormula<'_>> {
        None
    }

    /// `out[(i, k)] = ln p(x_i, y = k)` for a chunk of already-checked rows, sequentially.
    fn log_joint_chunk(&self, x: MatRef<'_, f64>, out: MatMut<'_, f64>);

    /// Scores that differ from `ln p(x_i, y = k)` by a constant per row, which is all that
    /// posteriors need. Defaults to the joint; LDA overrides it with its linear discriminant
    /// (one matrix product, no quadratic term).
    fn posterior_scores_chunk(&self, x: MatRef<'_, f64>, out: MatMut<'_, f64>) {
        self.log_joint_chunk(x, out);
    }

    /// Whether the log joints split as ln p(x, k) = s_k(x) + h(x), with a per-row term h shared
    /// by every class that costs more than the rest and whose sum over a fixed set of rows
    /// follows from the rows' count, mean and centred scatter
    /// ([`shared_term_sum`](Self::shared_term_sum)). EM then computes those moments once per
    /// set of rows and scores them by [`Posterior::JointLessShared`] every iteration. False by
    /// default (h = 0). A shared covariance holds it: h is −½‖L⁻¹(x − c)‖², a triangular
    /// solve per row, against s_k's K·d multiply-adds.
    fn splits_shared_term(&self) -> bool {
        false
    }

    /// `out[(i, k)] = ln p(x_i, y = k) − h(x_i)` for a chunk of already-checked rows,
    /// sequentially, h as in [`splits_shared_term`](Self::splits_shared_term). Defaults to the
    /// joint (h = 0). Revealing bad input as [`scores_reveal_bad_input`](Self::scores_reveal_bad_input)
    /// says, like the joint.
    fn joint_less_shared_chunk(&self, x: MatRef<'_, f64>, out: MatMut<'_, f64>) {
        self.log_joint_chunk(x, out);
    }

    /// Σ_i h(x_i) over a set of rows, from their moments ([`row_moments`]: count, mean and
    /// centred scatter); zero by default (h = 0). An error if the moments are not of the
    /// model's features.
    fn shared_term_sum(&self, moments: &SufficientStats) -> Result<f64> {
        let _ = moments;
        Ok(0.0)
    }

    /// A penalty added to the log-likelihood by the model's smoothing, as a log prior density
    /// (e.g. Σ α ln θ for Lidstone smoothing), so that an EM objective that includes it never
    /// decreases. Zero for unsmoothed models.
    fn log_prior_penalty(&self) -> f64 {
        0.0
    }

    /// ln p(x_i, y = k) for every row and class (n × K), in parallel over fixed chunks.
    fn log_joint(&self, x: MatRef<'_, f64>) -> Result<Mat<f64>> {
        self.log_joint_then(x, Posterior::Joint)
    }

    /// Shared body of `log_joint`, `predict_log_proba` and `predict_proba`: the joint of each
    /// fixed chunk, then (optionally) its normalisation, in the same parallel pass.
    #[doc(hidden)]
    fn log_joint_then(&self, x: MatRef<'_, f64>, what: Posterior) -> Result<Mat<f64>> {
        check_features(self, x)?;
        // The output is built by the workers that compute it (`build_by_fresh_row_chunks`),
        // not zeroed on one thread first; scores a formula describes are written into it
        // unzeroed.
        let formula = match what {
            Posterior::Joint | Posterior::JointLessShared => None,
            _ => self.posterior_score_formula(),
        };
        let (out, checks) = build_by_fresh_row_chunks(x.nrows(), self.n_classes(), |c, fresh| {
            fill_fresh_chunk(self, x, c * CHUNK_ROWS, fresh, what, formula.as_ref())
        });
        // The first error in chunk order, so messages do not depend on the thread count.
        checks.into_iter().collect::<Result<()>>()?;
        Ok(out)
    }

    /// As `log_joint` (or the posteriors, by `what`), written into `out` (n × K) so that a loop
    /// such as EM can reuse one buffer across iterations.
    fn log_joint_into(
        &self,
        x: MatRef<'_, f64>,
        out: MatMut<'_, f64>,
        what: Posterior,
    ) -> Result<()> {
        self.log_joint_pass(x, out, what, true)
    }

    /// As [`log_joint_into`](Self::log_joint_into) without [`check_input`](Self::check_input)
    /// on the rows: the caller guarantees that the same rows already passed `check_input` of a
    /// model of this family whose domain this one contains (EM evaluates the same rows every
    /// iteration, and re-checking read the whole input again each time). Rows that did not may
    /// give meaningless output (never a panic: an unseen category scores −∞).
    fn log_joint_into_prechecked(
        &self,
        x: MatRef<'_, f64>,
        out: MatMut<'_, f64>,
        what: Posterior,
    ) -> Result<()> {
        self.log_joint_pass(x, out, what, false)
    }

    /// Shared body of the two above.
    #[doc(hidden)]
    fn log_joint_pass(
        &self,
        x: MatRef<'_, f64>,
        out: MatMut<'_, f64>,
        what: Posterior,
        check: bool,
    ) -> Result<()> {
        // Nothing reads the chunks after they are written, so posteriors may be streamed out.
        fold_scored_chunks(
            self,
            x,
            Some(out),
            what,
            check,
            Runs::ONE_CHUNK,
            || (),
            |_, _, _, _| (),
            |_, _| {},
            true,
        )
        .map(|_| ())
    }

    /// ln p(y = k | x_i) (n × K). Finite: a row whose joint is −∞ for every class is uniform
    /// (unless the model [ranks far rows](Self::ranks_far_rows_when_scaled)), and a log
    /// posterior below f64's range is −f64::MAX.
    fn predict_log_proba(&self, x: MatRef<'_, f64>) -> Result<Mat<f64>> {
        self.log_joint_then(x, Posterior::LogProbability)
    }

    /// p(y = k | x_i) (n × K), rows summing to 1.
    fn predict_proba(&self, x: MatRef<'_, f64>) -> Result<Mat<f64>> {
        self.log_joint_then(x, Posterior::Probability)
    }

    /// argmax_k p(y = k | x_i); ties go to the lowest class index. The argmax of the scores
    /// that `predict_proba` normalises ([`Posterior::Scores`]; for LDA its linear
    /// discriminant), taken chunk by chunk in a buffer each worker reuses, so no n × K output
    /// is written. Why: through the n × K log joints and a serial argmax, LDA's `predict` took
    /// 0.142 s at n = 1e6, d = 64, K = 10 against 0.047 s for its `predict_proba`.
    fn predict(&self, x: MatRef<'_, f64>) -> Result<Vec<usize>> {
        let classes = map_scored_chunks(self, x, Posterior::Scores, |c| argmax_rows(c.as_ref()))?;
        Ok(classes.concat())
    }

    /// Marginal log-likelihood Σ_i ln Σ_k p(x_i, k): each chunk's rows' terms
    /// ([`row_log_sum_exp_total_in_place`]) summed in row order, then those sums in chunk order
    /// (past 256 classes, where a chunk is scored in blocks of rows, each block's sum). Each
    /// chunk's joints are taken in a worker's own buffer and reduced there, as `predict` does,
    /// so no n × K output is written, nor a vector of the terms.
    fn log_likelihood(&self, x: MatRef<'_, f64>) -> Result<f64> {
        let parts = map_scored_chunks(self, x, Posterior::Joint, |chunk| {
            vec![row_log_sum_exp_total_in_place(chunk)]
        })?;
        Ok(parts.iter().flatten().sum())
    }
}

/// `f` of each chunk's `what` (a checked pass, chunks of [`CHUNK_ROWS`] rows), in chunk order:
/// each chunk is written into a buffer its worker reuses and reduced while in cache, so no
/// n × K output is written ([`log_joint_pass_fold`] without one, in runs of one chunk). With
/// more than [`SCORED_BLOCK_MAX_CLASSES`] classes, a chunk is scored and reduced in blocks of
/// rows whose scores take at most as much room as that many classes' chunk: the buffer of a
/// whole chunk at K = 20,000 is 655 MB a worker. Each row's scores are the same bits alone,
/// in a block or in the whole chunk, so `f`'s results are too. The chunk is the worker's own
/// scratch: `f` may overwrite it.
fn map_scored_chunks<M, U, F>(
    model: &M,
    x: MatRef<'_, f64>,
    what: Posterior,
    f: F,
) -> Result<Vec<Vec<U>>>
where
    M: GenerativeClassifier + ?Sized,
    U: Send,
    F: Fn(MatMut<'_, f64>) -> Vec<U> + Sync,
{
    let k = model.n_classes();
    if k <= SCORED_BLOCK_MAX_CLASSES {
        return log_joint_pass_fold(
            model,
            x,
            None,
            what,
            true,
            // Runs of one chunk: each chunk's result on its own (there is nothing to fold).
            Runs::ONE_CHUNK,
            || (),
            |_, _, _, chunk| f(chunk),
            |_, _| {},
        );
    }
    check_features(model, x)?;
    let block = (CHUNK_ROWS * SCORED_BLOCK_MAX_CLASSES / k).max(8);
    let chunks: Vec<usize> = (0..x.nrows().div_ceil(CHUNK_ROWS)).collect();
    let parts: Vec<Result<Vec<U>>> = run_indexed_with(chunks, Mat::<f64>::new, |own, _, c| {
        let r0 = c * CHUNK_ROWS;
        let b = CHUNK_ROWS.min(x.nrows() - r0);
        let mut results = Vec::with_capacity(b);
        for s0 in (0..b).step_by(block) {
            let len = block.min(b - s0);
            if own.nrows() < len {
                *own = spread_zeros(block, k);
            }
            let mut scores = own.as_mut().subrows_mut(0, len);
            density::block::with_column_major(x.subrows(r0 + s0, len), |xc| {
                fill_laid_out_chunk(model, xc, r0 + s0, scores.as_mut(), what, true, None)
            })?;
            results.extend(f(scores.as_mut()));
        }
        Ok(results)
    });
    parts.into_iter().collect()
}

/// Classes up to which [`map_scored_chunks`] scores whole chunks (a worker's buffer of
/// 4096 × 256 values is 8 MB).
const SCORED_BLOCK_MAX_CLASSES: usize = 256;

/// The pass of [`GenerativeClassifier::log_joint_into`] (or its `_prechecked` form, without
/// `check`) with a step of the caller's on each chunk: `then(c, chunk)` runs on chunk `c`'s
/// rows of `out` right after they are written, while they are in cache, and its results come
/// back in chunk order (chunks of [`CHUNK_ROWS`] rows, as every pass).
///
/// Why: a step on the joints while they are in cache, not a second pass that reads them back
/// from memory; at K = 10 and d = 2 such a pass took twice as long as the joints themselves
/// (BENCHMARKS.md, thirty-sixth round). It is [`log_joint_pass_fold`] with runs of one chunk.
pub fn log_joint_pass_then<M, T, F>(
    model: &M,
    x: MatRef<'_, f64>,
    out: MatMut<'_, f64>,
    what: Posterior,
    check: bool,
    then: F,
) -> Result<Vec<T>>
where
    M: GenerativeClassifier + ?Sized,
    T: Send,
    F: Fn(usize, MatMut<'_, f64>) -> T + Sync,
{
    // Runs of one chunk: every chunk's result on its own, in order.
    log_joint_pass_fold(
        model,
        x,
        Some(out),
        what,
        check,
        Runs::ONE_CHUNK,
        || (),
        |_, c, _, chunk| then(c, chunk),
        |_, _| {},
    )
}

/// As [`log_joint_pass_then`], with the chunks taken in runs of consecutive ones, as
/// [`crate::parallel::fold_chunks_by_label_with`] cuts a set of `x.nrows()` rows with `longest`
/// ([`run_length`]): one worker scores a run's chunks in order, with its own state (`init()`
/// once per worker), runs `then(state, c, xc, chunk)` on each chunk `c` right after it is
/// written (`xc`: its rows, column-major), and folds the results by `merge`, in chunk order.
/// Returns one result per run, in order. Without `out`, each chunk is written into a buffer of
/// the worker's, reused from chunk to chunk, and `then` is the only reader of its values.
///
/// Why: a split fit's statistics ([`crate::split`]) are folded in these runs; taken in this
/// pass, they are those of the fit over the same rows and weights, bit for bit. And a pass
/// whose values are needed only by `then` need not write n × K values to memory.
#[allow(clippy::too_many_arguments)]
pub fn log_joint_pass_fold<M, S, T, N, F, G>(
    model: &M,
    x: MatRef<'_, f64>,
    out: Option<MatMut<'_, f64>>,
    what: Posterior,
    check: bool,
    shape: Runs,
    init: N,
    then: F,
    merge: G,
) -> Result<Vec<T>>
where
    M: GenerativeClassifier + ?Sized,
    T: Send,
    N: Fn() -> S + Sync,
    F: Fn(&mut S, usize, MatRef<'_, f64>, MatMut<'_, f64>) -> T + Sync,
    G: Fn(&mut T, T) + Sync,
{
    // `then` reads each chunk: its posteriors stay in cache (no streaming).
    fold_scored_chunks(model, x, out, what, check, shape, init, then, merge, false)
}

/// [`log_joint_pass_fold`]; with `stream` (a `then` that does not read the chunk), posteriors
/// into `out` go by [`streams_posteriors`]' rule.
#[allow(clippy::too_many_arguments)]
fn fold_scored_chunks<M, S, T, N, F, G>(
    model: &M,
    x: MatRef<'_, f64>,
    out: Option<MatMut<'_, f64>>,
    what: Posterior,
    check: bool,
    shape: Runs,
    init: N,
    then: F,
    merge: G,
    stream: bool,
) -> Result<Vec<T>>
where
    M: GenerativeClassifier + ?Sized,
    T: Send,
    N: Fn() -> S + Sync,
    F: Fn(&mut S, usize, MatRef<'_, f64>, MatMut<'_, f64>) -> T + Sync,
    G: Fn(&mut T, T) + Sync,
{
    check_features(model, x)?;
    let k = model.n_classes();
    let stream = stream
        && what == Posterior::Probability
        && out.as_ref().is_some_and(|out| {
            streams_posteriors(x.nrows(), k)
                || (columns_share_cache_sets(out.as_ref())
                    && (2..=density::exp::SOFTMAX_MAX_COLUMNS).contains(&k))
        });
    let chunks: Vec<(usize, Option<MatMut<'_, f64>>)> = match out {
        Some(out) => {
            if out.nrows() != x.nrows() || out.ncols() != k {
                return Err(GenerativeError::DimensionMismatch {
                    what: "output rows × classes",
                    expected: x.nrows() * k,
                    got: out.nrows() * out.ncols(),
                });
            }
            row_chunks_mut(out, CHUNK_ROWS)
                .into_iter()
                .map(Some)
                .enumerate()
                .collect()
        }
        None => (0..x.nrows().div_ceil(CHUNK_ROWS))
            .map(|c| (c, None))
            .collect(),
    };
    // Posteriors straight from the scores where the model's are a formula that takes them
    // (`fill_laid_out_chunk`): the formula built once here, not per chunk.
    let formula = (what == Posterior::Probability && check && model.scores_reveal_bad_input())
        .then(|| model.posterior_score_formula())
        .flatten();
    let run = run_length(chunks.len(), shape, x.nrows() * x.ncols() * 8);
    let mut runs: Vec<Vec<(usize, Option<MatMut<'_, f64>>)>> = Vec::new();
    let mut chunks = chunks.into_iter().peekable();
    while chunks.peek().is_some() {
        runs.push(chunks.by_ref().take(run).collect());
    }
    // Each run's first error is its result; the first in chunk order is reported.
    let init = || (init(), Mat::<f64>::new());
    let parts: Vec<Result<T>> = run_indexed_with(runs, init, |(state, own), _, run| {
        let mut folded: Option<T> = None;
        for (c, chunk) in run {
            let r0 = c * CHUNK_ROWS;
            let b = CHUNK_ROWS.min(x.nrows() - r0);
            let mut chunk = match chunk {
                Some(chunk) => chunk,
                None => {
                    if own.nrows() < b {
                        *own = spread_zeros(CHUNK_ROWS, k);
                    }
                    own.as_mut().subrows_mut(0, b)
                }
            };
            let part = density::block::with_column_major(x.subrows(r0, b), |xc| {
                match stream
                    .then(|| density::block::contiguous_columns_mut(chunk.as_mut()))
                    .flatten()
                {
                    Some(columns) => {
                        // SAFETY: `score_then_stream` writes only values into the columns.
                        #[allow(unsafe_code)]
                        let mut columns = unsafe { density::block::as_unwritten_columns(columns) };
                        score_then_stream(model, xc, r0, &mut columns, check)?;
                    }
                    None => fill_laid_out_chunk(
                        model,
                        xc,
                        r0,
                        chunk.as_mut(),
                        what,
                        check,
                        formula.as_ref(),
                    )?,
                }
                Ok::<T, GenerativeError>(then(state, c, xc, chunk))
            })?;
            match folded.as_mut() {
                Some(acc) => merge(acc, part),
                None => folded = Some(part),
            }
        }
        folded.ok_or(GenerativeError::Empty { what: "x" })
    });
    parts.into_iter().collect()
}

/// `x` has the model's number of features.
fn check_features<M: GenerativeClassifier + ?Sized>(model: &M, x: MatRef<'_, f64>) -> Result<()> {
    if x.ncols() != model.n_features() {
        return Err(GenerativeError::DimensionMismatch {
            what: "columns of x vs model features",
            expected: model.n_features(),
            got: x.ncols(),
        });
    }
    Ok(())
}

/// One chunk of a fresh output of a prediction pass: rows `r0 .. r0 + fresh.nrows()` of `x`,
/// checked by the worker that computes them, then their joint or posteriors by `what`. With
/// `formula` (the model's
/// [`posterior_score_formula`](GenerativeClassifier::posterior_score_formula), for posteriors)
/// and scores that reveal bad input, the scores are written into the chunk unzeroed; otherwise
/// the chunk is zeroed and filled as [`fill_laid_out_chunk`] fills one.
#[allow(unsafe_code)]
fn fill_fresh_chunk<M: GenerativeClassifier + ?Sized>(
    model: &M,
    x: MatRef<'_, f64>,
    r0: usize,
    fresh: &mut FreshChunk<'_>,
    what: Posterior,
    formula: Option<&ScoreFormula<'_>>,
) -> Result<()> {
    let streamed =
        what == Posterior::Probability && streams_posteriors(x.nrows(), model.n_classes());
    // Rows of another layout are copied column-major first (see `with_column_major`).
    density::block::with_column_major(x.subrows(r0, fresh.nrows()), |xc| {
        if streamed && let Some(mut columns) = fresh.columns() {
            score_then_stream(model, xc, r0, &mut columns, true)?;
            drop(columns);
            // SAFETY: `score_then_stream` returned Ok, so it wrote every entry of every column.
            unsafe { fresh.assume_written() };
            return Ok(());
        }
        // Only where the scores are what checks the input: otherwise the input is checked
        // before they are written. Posteriors straight from the scores where a kernel takes the
        // formula (few features and classes; `fused_posteriors`), the rest as below.
        if what == Posterior::Probability
            && let Some(formula) = formula.filter(|_| model.scores_reveal_bad_input())
            && let Some((first, accepted)) = fresh
                .columns()
                .and_then(|c| formula.write_unwritten_posteriors(xc, c))
        {
            // SAFETY: given the columns, `write_unwritten_posteriors` either declines (`None`,
            // not here) or writes every value of every one of them.
            let chunk = unsafe { fresh.assume_written() };
            return finish_after_posteriors(model, formula, xc, r0, chunk, (first, accepted));
        }
        if let Some(formula) = formula.filter(|_| model.scores_reveal_bad_input())
            && let Some(all_accepted) = fresh.columns().and_then(|c| formula.write_unwritten(xc, c))
        {
            // SAFETY: given the columns, `write_unwritten` either declines (`None`, not here)
            // or writes every value of every one of them.
            let mut chunk = unsafe { fresh.assume_written() };
            if !all_accepted {
                formula.mark_rejected_rows(xc, chunk.as_mut());
            }
            return finish_scored_chunk(model, xc, r0, chunk, what, true);
        }
        fill_laid_out_chunk(model, xc, r0, fresh.zeroed(), what, true, None)
    })
}

/// One chunk of a prediction pass on its rows `xc` (laid out column-major; rows `r0 ..` of
/// the input), checked (with `check`), then their joint or posteriors by `what`.
fn fill_laid_out_chunk<M: GenerativeClassifier + ?Sized>(
    model: &M,
    xc: MatRef<'_, f64>,
    r0: usize,
    mut chunk: MatMut<'_, f64>,
    what: Posterior,
    check: bool,
    formula: Option<&ScoreFormula<'_>>,
) -> Result<()> {
    let by_scores = check && model.scores_reveal_bad_input();
    if check && !by_scores {
        model.check_input(xc).map_err(|e| e.shifted_rows(r0))?;
    }
    // Posteriors straight from the scores, as in `fill_fresh_chunk` (a
    // caller's kept output; `formula`, the model's, built once per prediction by the caller).
    if by_scores
        && what == Posterior::Probability
        && let Some(formula) = formula
        && let Some(columns) = density::block::contiguous_columns_mut(chunk.as_mut())
    {
        // SAFETY: the kernel writes only values into the columns.
        #[allow(unsafe_code)]
        let columns = unsafe { density::block::as_unwritten_columns(columns) };
        if let Some(answer) = formula.write_unwritten_posteriors(xc, columns) {
            return finish_after_posteriors(model, formula, xc, r0, chunk, answer);
        }
    }
    match what {
        Posterior::Joint => model.log_joint_chunk(xc, chunk.as_mut()),
        Posterior::JointLessShared => model.joint_less_shared_chunk(xc, chunk.as_mut()),
        Posterior::Scores | Posterior::LogProbability | Posterior::Probability => {
            model.posterior_scores_chunk(xc, chunk.as_mut())
        }
    }
    finish_scored_chunk(model, xc, r0, chunk, what, by_scores)
}

/// The rest of a chunk (rows `r0 ..` of the input, `xc` laid out column-major) of which
/// [`ScoreFormula::write_unwritten_posteriors`] gave the rows before `first` their posteriors and
/// the others their scores (`accepted`: whether the formula accepted every value of those): the
/// rejected rows marked, then [`finish_scored_rows`] from `first`, which checks their scores.
fn finish_after_posteriors<M: GenerativeClassifier + ?Sized>(
    model: &M,
    formula: &ScoreFormula<'_>,
    xc: MatRef<'_, f64>,
    r0: usize,
    chunk: MatMut<'_, f64>,
    (first, accepted): (usize, bool),
) -> Result<()> {
    let b = chunk.nrows();
    if first == b {
        return Ok(());
    }
    let mut rest = chunk.subrows_mut(first, b - first);
    if !accepted {
        formula.mark_rejected_rows(xc.subrows(first, b - first), rest.as_mut());
    }
    finish_scored_rows(model, xc, r0, rest, first, Posterior::Probability, true)
}

/// The rest of [`fill_laid_out_chunk`] once the chunk holds its scores by `what`: with
/// `by_scores`, the input check the scores stand for; far rows ranked again; posteriors.
///
/// With `by_scores` and posteriors asked for, the rows up to the first group of rows with a
/// score that is not finite are normalised first, the check riding on the normalisation's
/// pass ([`normalize_finite_prefix`]); the scan, the input's check, the far rows and the
/// general path then take only the rest. Finite scores mean a valid input there (that is what
/// `by_scores` says), and every row's posteriors have the same bits whichever path or block
/// takes it, so the results, errors included, are those of the whole chunk taken in turn.
fn finish_scored_chunk<M: GenerativeClassifier + ?Sized>(
    model: &M,
    xc: MatRef<'_, f64>,
    r0: usize,
    mut chunk: MatMut<'_, f64>,
    what: Posterior,
    by_scores: bool,
) -> Result<()> {
    let b = chunk.nrows();
    let first = if by_scores && what == Posterior::Probability {
        normalize_finite_prefix(chunk.as_mut())
    } else {
        0
    };
    if first == b {
        return Ok(());
    }
    let rest = chunk.subrows_mut(first, b - first);
    finish_scored_rows(model, xc, r0, rest, first, what, by_scores)
}

/// The rest of [`finish_scored_chunk`] on the rows `first ..` of the chunk `xc` (rows `r0 ..`
/// of the input), whose scores `chunk` holds.
fn finish_scored_rows<M: GenerativeClassifier + ?Sized>(
    model: &M,
    xc: MatRef<'_, f64>,
    r0: usize,
    mut chunk: MatMut<'_, f64>,
    first: usize,
    what: Posterior,
    by_scores: bool,
) -> Result<()> {
    let mut all_finite = None;
    if by_scores {
        all_finite = Some(check_finite_rows(chunk.as_ref(), 0).is_ok());
        if all_finite == Some(false) {
            // The whole chunk's input, as if no row had been taken first: the rows before
            // `first` had finite scores, so its first error is in these rows.
            model.check_input(xc).map_err(|e| e.shifted_rows(r0))?;
        }
    }
    let xc = xc.subrows(first, chunk.nrows());
    let posterior = !matches!(what, Posterior::Joint | Posterior::JointLessShared);
    if posterior
        && model.ranks_far_rows_when_scaled()
        && !all_finite.unwrap_or_else(|| check_finite_rows(chunk.as_ref(), 0).is_ok())
    {
        rescore_far_rows(model, xc, chunk.as_mut());
    }
    if matches!(what, Posterior::LogProbability | Posterior::Probability) {
        normalize_chunk(chunk.as_mut(), what == Posterior::Probability, None);
    }
    Ok(())
}

/// The posteriors of the rows of `scores` (as [`normalize_chunk`] gives them) up to the first
/// group of rows with a score that is not finite (NaN or ±∞ anywhere, or scores whose sum
/// overflows): [`normalize_chunk`]'s block loop with
/// [`density::exp::softmax_rows_of_finite_scores`], stopping there. Returns that row (the
/// number of rows with none), the rows from it on left as they were.
fn normalize_finite_prefix(scores: MatMut<'_, f64>) -> usize {
    pulp::Arch::new().dispatch(NormalizeChunk {
        m: scores,
        probability: true,
        log_normalizer_sum: None,
        finite_prefix: true,
    })
}

/// Outputs from this many bytes on take their posteriors by non-temporal stores (where
/// [`streams_posteriors`] allows): smaller ones may be read again while still in cache.
///
/// Why 8 MiB: four times the Intel Xeon's 2 MB of L2 a core, and below the 16 MB of a
/// million rows' two-class posteriors, which 16 MiB (until the ninety-second round) left to
/// plain stores. There, `PROFILE_STREAM=1` against the rule, `PROFILE_COLD=cs`, tenth
/// percentiles of 15, two alternated pairs: `lda-predict 2 2` 2.43, 2.28 → 1.95, 2.11 ms,
/// `gnb-predict 2 2` 2.44, 2.56 → 2.02, 2.18, `bnb-predict 2 2` 2.63, 2.60 → 2.09, 1.89,
/// `lda-predict-into 2 2` 2.66, 2.46 → 2.12, 1.89; at d = 16 and 64 within noise
/// (`lda-predict 16 2` 6.94, 6.86 → 6.74, 7.04). A hundred thousand rows of ten classes
/// (8 MB) stay below it.
const STREAMED_OUTPUT_BYTES: usize = 8 << 20;

/// Whether a prediction of `rows × k` posteriors writes them by non-temporal stores
/// ([`score_then_stream`]): from [`STREAMED_OUTPUT_BYTES`] on, 2 to
/// [`density::exp::SOFTMAX_MAX_COLUMNS`] classes, on Intel CPUs.
///
/// Why Intel only: on the Xeon of the seventy-ninth round, two threads wrote 80 MB into a reused
/// buffer in 4.4 ms with plain stores and 2.35 ms with non-temporal ones, and `predict_proba`
/// at d = 2, K = 10 took 6.5–6.7 ms streamed against 7.8–8.4 ms. On the Zen 5 EPYC of the
/// seventy-third round the same streaming from the fused pass was 10–24% slower into a kept
/// output (BENCHMARKS.md): AMD's plain stores to memory did not pay for their reads there. On
/// the Zen 4 EPYC of the eighty-fourth round neither: two threads wrote 80 MB in 3.25–3.37 ms
/// with plain stores and 3.21–3.31 ms streamed, and streaming all predictions (`PROFILE_STREAM`,
/// medians of 21, two alternated pairs) took `gnb-predict-into 2 10` 7.93, 6.49 → 9.77, 7.16 ms
/// and `lda-predict 2 10` 6.55, 6.00 → 6.79, 9.70 ms.
fn streams_posteriors(rows: usize, k: usize) -> bool {
    match STREAM_POSTERIORS.load(std::sync::atomic::Ordering::Relaxed) {
        STREAM_ALWAYS => return (2..=density::exp::SOFTMAX_MAX_COLUMNS).contains(&k),
        STREAM_NEVER => return false,
        _ => {}
    }
    (2..=density::exp::SOFTMAX_MAX_COLUMNS).contains(&k)
        && rows.saturating_mul(k).saturating_mul(8) >= STREAMED_OUTPUT_BYTES
        && density::cpu::is_intel()
}

/// Whether the columns of `out` (column-major) lie a multiple of 16 cache lines apart, so that
/// their same rows share at most four cache sets (as a caller's n × K buffer at n = 2^20 does;
/// the outputs we allocate are spread, `density::block::spread_row_capacity`). Posteriors into
/// such a buffer are scored in a worker's own spread chunk and streamed out
/// ([`score_then_stream`]) on every CPU: scored in place, each class's scores evicted the
/// others' (LDA's `predict_proba` into a kept buffer at n = 2^20, d = 64, K = 10: see
/// `BENCHMARKS.md`, ninetieth round).
fn columns_share_cache_sets(out: MatRef<'_, f64>) -> bool {
    out.ncols() > 1
        && out.row_stride() == 1
        && usize::try_from(out.col_stride()).is_ok_and(density::block::stride_shares_cache_sets)
}

/// [`streams_posteriors`] by its rule (0), always (every size and CPU), or never.
static STREAM_POSTERIORS: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);
const STREAM_BY_RULE: u8 = 0;
const STREAM_ALWAYS: u8 = 1;
const STREAM_NEVER: u8 = 2;

/// Overrides whether predictions write their posteriors by non-temporal stores: `Some(true)`
/// for every output of 2 to 32 classes on any CPU, `Some(false)` for none, `None` by the rule
/// (large outputs on Intel CPUs). Both ways give the same bits; this is for tests that cover
/// both paths and for timing one against the other (`xtask profile`, `PROFILE_STREAM`).
#[doc(hidden)]
pub fn force_posterior_streaming(mode: Option<bool>) {
    let mode = match mode {
        None => STREAM_BY_RULE,
        Some(true) => STREAM_ALWAYS,
        Some(false) => STREAM_NEVER,
    };
    STREAM_POSTERIORS.store(mode, std::sync::atomic::Ordering::Relaxed);
}

std::thread_local! {
    /// [`score_then_stream`]'s scores, per thread, kept from chunk to chunk.
    static STREAMED_SCORES: std::cell::RefCell<Mat<f64>> = const { std::cell::RefCell::new(Mat::new()) };
}

/// Posteriors of the rows `xc` (rows `r0 ..` of the input, checked with `check`) written to
/// `columns` (one per class, as many rows as `xc`): the scores go to a buffer of the worker's,
/// in cache, and [`density::exp::softmax_rows_to`] writes the posteriors out by non-temporal
/// stores; rows it leaves (a non-finite largest score, the last rows) are normalised in the
/// buffer and copied. The bits of [`fill_laid_out_chunk`] with [`Posterior::Probability`].
/// On `Ok`, every entry of every column is written.
fn score_then_stream<M: GenerativeClassifier + ?Sized>(
    model: &M,
    xc: MatRef<'_, f64>,
    r0: usize,
    columns: &mut [&mut [std::mem::MaybeUninit<f64>]],
    check: bool,
) -> Result<()> {
    let (b, k) = (xc.nrows(), model.n_classes());
    STREAMED_SCORES.with_borrow_mut(|own| {
        if own.nrows() < b || own.ncols() != k {
            *own = spread_zeros(b.max(CHUNK_ROWS), k);
        }
        let mut scores = own.as_mut().subrows_mut(0, b);
        fill_laid_out_chunk(
            model,
            xc,
            r0,
            scores.as_mut(),
            Posterior::Scores,
            check,
            None,
        )?;
        normalize_to(scores, columns);
        Ok(())
    })
}

/// The posteriors of `scores` (as [`normalize_chunk`] gives them) written to `columns` (one per
/// column of `scores`, as many rows), every entry: by [`density::exp::softmax_rows_to`] (the
/// exponentials left in `scores`), then the rows it leaves normalised in `scores` and copied.
fn normalize_to(mut scores: MatMut<'_, f64>, columns: &mut [&mut [std::mem::MaybeUninit<f64>]]) {
    let (b, k) = (scores.nrows(), scores.ncols());
    debug_assert!(columns.len() == k && columns.iter().all(|c| c.len() == b));
    let mut r = 0;
    if k >= 2
        && let Some(mut from) = softmax_columns(scores.as_mut())
    {
        let mut max = [f64::NEG_INFINITY; NORMALIZE_BLOCK];
        let mut sum = [0.0; NORMALIZE_BLOCK];
        while r < b {
            let len = NORMALIZE_BLOCK.min(b - r);
            let (max, sum) = (&mut max[..len], &mut sum[..len]);
            let end = r + len;
            r = density::exp::softmax_rows_to(&mut from[..k], columns, r..end, max, sum);
            if r < end {
                break;
            }
        }
    }
    density::exp::store_fence();
    if r < b {
        // Each row's arithmetic does not depend on the block it is normalised in.
        let mut rest = scores.subrows_mut(r, b - r);
        normalize_chunk(rest.as_mut(), true, None);
        for (j, col) in columns.iter_mut().enumerate() {
            for (i, slot) in col[r..b].iter_mut().enumerate() {
                slot.write(rest[(i, j)]);
            }
        }
    }
}

/// Scales of the rows that [`rescore_far_rows`] tries, as powers of two: each step divides the
/// row by 2^256, and four steps bring the largest f64 to about 1.
const FAR_ROW_STEP: i32 = 256;
const FAR_ROW_STEPS: i32 = 4;
/// A finite score this large (2^900, about 8e270) beside a −∞ marks a row that is far out.
const FAR_SCORE: f64 = 8.452712498170644e270;

/// Posterior scores for the rows of a chunk whose scores overflowed although their values are
/// finite (every score −∞; an ∞ or NaN; or a −∞ beside scores beyond 2^900), for a model that
/// [`ranks_far_rows_when_scaled`](GenerativeClassifier::ranks_far_rows_when_scaled).
///
/// Why: such a row lies about 1e154 σ or more from every class, where ln p(x, k) is below f64's
/// range for every k, yet the classes' ranking is plain: the one whose quadratic form grows
/// slowest along the row takes all of the posterior. Calling the row uniform, as the
/// normalisation of an all −∞ row does, would be a confident wrong answer for a half of it.
///
/// The row is scaled by 2^-256 until its scores s_k are finite (at most four times). The
/// scores of the row itself are then (s_k − max_j s_j) · 2^(512 t) for t steps (the square of
/// the scale, at least the growth of every score), which is 0 for the classes that rank first
/// and below −f64::MAX, so clamped to it, for every other class that differs by more than about
/// 1e-154·t: the posterior is one-hot (shared equally on a tie), and log-posteriors stay finite.
/// Rows that stay non-finite at every scale (NaN input, in an unchecked pass) are left alone.
fn rescore_far_rows<M: GenerativeClassifier + ?Sized>(
    model: &M,
    xc: MatRef<'_, f64>,
    mut chunk: MatMut<'_, f64>,
) {
    let (d, k) = (xc.ncols(), chunk.ncols());
    let overflowed = |row: &[f64]| {
        let (mut artifact, mut minus_infinite, mut largest) = (false, 0, 0.0f64);
        for &v in row {
            if v == f64::NEG_INFINITY {
                minus_infinite += 1;
            } else if v.is_finite() {
                largest = largest.max(v.abs());
            } else {
                artifact = true;
            }
        }
        // A −∞ beside finite scores is a class far below the others (a quadratic form past
        // f64's range: a class of tiny variance), unless the finite scores are near that range
        // too; then it may be a partial sum's overflow (LDA's at 1e308).
        artifact || minus_infinite == row.len() || minus_infinite > 0 && largest >= FAR_SCORE
    };
    let mut row = vec![0.0; k];
    let mut y = Mat::<f64>::zeros(1, d);
    let mut scores = Mat::<f64>::zeros(1, k);
    let step = 2f64.powi(-FAR_ROW_STEP);
    let growth = 2f64.powi(2 * FAR_ROW_STEP);
    for i in 0..chunk.nrows() {
        row.iter_mut()
            .enumerate()
            .for_each(|(c, v)| *v = chunk[(i, c)]);
        if !overflowed(&row) {
            continue;
        }
        (0..d).for_each(|j| y[(0, j)] = xc[(i, j)]);
        for t in 1..=FAR_ROW_STEPS {
            (0..d).for_each(|j| y[(0, j)] *= step);
            model.posterior_scores_chunk(y.as_ref(), scores.as_mut());
            (0..k).for_each(|c| row[c] = scores[(0, c)]);
            if overflowed(&row) {
                continue;
            }
            let max = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            for c in 0..k {
                let mut v = row[c] - max;
                for _ in 0..t {
                    v *= growth;
                }
                chunk[(i, c)] = v.max(-f64::MAX);
            }
            break;
        }
    }
}

/// What [`GenerativeClassifier::log_joint_into`] writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Posterior {
    /// ln p(x, y = k)
    Joint,
    /// ln p(x, y = k) − h(x), h the model's per-row term shared by every class
    /// ([`GenerativeClassifier::splits_shared_term`]): the responsibilities and the labels of
    /// the joint, with h's sum over a set of rows from
    /// [`GenerativeClassifier::shared_term_sum`] (what EM's E-step needs).
    JointLessShared,
    /// ln p(x, y = k) plus a term of the row's that is the same for every class: the scores
    /// the posteriors normalise ([`GenerativeClassifier::posterior_scores_chunk`]; for LDA its
    /// linear discriminant), whose argmax is the predicted class.
    Scores,
    /// ln p(y = k | x)
    LogProbability,
    /// p(y = k | x)
    Probability,
}

/// Rows per block of [`normalize_chunk`]: the block's K columns stay in L1 between its passes
/// (128 rows × K = 10 columns is 10 KB).
const NORMALIZE_BLOCK: usize = 128;

/// Turns a chunk of log joints into posteriors (`probability`) or log posteriors, in place,
/// with one exponential per entry. Works on blocks of `NORMALIZE_BLOCK` rows, column by column
/// within a block (the chunk is column-major), so the inner loops run over contiguous memory
/// and the block's passes (maximum, exponentials, scaling) read it from L1 rather than the whole
/// chunk from L2 three times. Posteriors of two classes or more, in contiguous columns, take
/// the three in one pass over a few vectors of rows at a time ([`density::exp::softmax_rows`];
/// two classes with one exponential per row), with the same arithmetic. Every entry's
/// arithmetic is the same whatever the block size. Rows whose maximum is not finite (all −∞,
/// or +∞) take the exact path of [`log_normalize_in_place`].
///
/// With `log_normalizer_sum`, also adds Σ_i ln Σ_k exp(m[i, k]) over the chunk's rows to it
/// (EM's objective), a row whose entries are all −∞ counting as −f64::MAX. The logarithms are
/// taken of products of the rows' sums over groups of rows (`log_sum_of_rows`), not one per row.
pub fn normalize_chunk(
    m: MatMut<'_, f64>,
    probability: bool,
    log_normalizer_sum: Option<&mut f64>,
) {
    pulp::Arch::new().dispatch(NormalizeChunk {
        m,
        probability,
        log_normalizer_sum,
        finite_prefix: false,
    });
}

/// [`normalize_chunk`]'s arguments, as a `pulp` kernel so that the whole chunk is compiled for
/// the widest SIMD the CPU has (a closure here was left as a call, compiled for SSE2 only).
struct NormalizeChunk<'a> {
    m: MatMut<'a, f64>,
    probability: bool,
    log_normalizer_sum: Option<&'a mut f64>,
    /// [`normalize_finite_prefix`]: the rows up to the first group with a score that is not
    /// finite ([`density::exp::softmax_rows_of_finite_scores`]), the rest left as they were.
    finite_prefix: bool,
}

impl pulp::WithSimd for NormalizeChunk<'_> {
    /// The first row left as it was (the chunk's row count when every row is done).
    type Output = usize;

    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, _simd: S) -> usize {
        let NormalizeChunk {
            mut m,
            probability,
            mut log_normalizer_sum,
            finite_prefix,
        } = self;
        let (b, k) = (m.nrows(), m.ncols());
        let mut r0 = 0;
        // Posteriors of two classes or more in one pass over each vector of rows
        // (`density::exp::softmax_rows`; log posteriors from `softmax_sums`, then a pass of
        // subtractions: `fused_log_posteriors`), block by block, the blocks' maxima and sums kept for
        // the log normalisers as the general path keeps them, until a block has rows that only
        // the general path takes (a non-finite maximum, or rows after the last whole vector).
        let mut max = [f64::NEG_INFINITY; NORMALIZE_BLOCK];
        let mut sum = [0.0; NORMALIZE_BLOCK];
        let mut partial = None;
        if k >= 2
            && let Some(mut columns) = softmax_columns(m.as_mut())
        {
            while r0 < b {
                let len = NORMALIZE_BLOCK.min(b - r0);
                let (max, sum) = (&mut max[..len], &mut sum[..len]);
                let rows = r0..r0 + len;
                let done = if !probability {
                    fused_log_posteriors(&mut columns[..k], rows, max, sum)
                } else if finite_prefix {
                    density::exp::softmax_rows_of_finite_scores(&mut columns[..k], rows, max, sum)
                } else {
                    density::exp::softmax_rows(&mut columns[..k], rows, max, sum)
                };
                if done < r0 + len {
                    partial = Some(done - r0);
                    break;
                }
                if let Some(total) = log_normalizer_sum.as_deref_mut() {
                    *total += log_sum_of_rows(max, sum, k);
                }
                r0 += len;
            }
        }
        if finite_prefix {
            // Where the kernel stopped (0 where it took no rows), the rest left as it was.
            return partial.map_or(r0, |done| r0 + done);
        }
        if let Some(done) = partial {
            let len = NORMALIZE_BLOCK.min(b - r0);
            finish_block(
                m.as_mut().subrows_mut(r0, len),
                probability,
                done,
                &mut max[..len],
                &mut sum[..len],
                log_normalizer_sum.as_deref_mut(),
            );
            r0 += len;
        }
        while r0 < b {
            let len = NORMALIZE_BLOCK.min(b - r0);
            normalize_block(
                m.as_mut().subrows_mut(r0, len),
                probability,
                log_normalizer_sum.as_deref_mut(),
            );
            r0 += len;
        }
        b
    }
}

/// The columns of `m` as slices for [`density::exp::softmax_rows`], when each is contiguous
/// and they are few enough.
#[inline(always)]
fn softmax_columns(m: MatMut<'_, f64>) -> Option<[&mut [f64]; density::exp::SOFTMAX_MAX_COLUMNS]> {
    if m.ncols() > density::exp::SOFTMAX_MAX_COLUMNS {
        return None;
    }
    let mut columns: [&mut [f64]; density::exp::SOFTMAX_MAX_COLUMNS] = Default::default();
    for (slot, col) in columns.iter_mut().zip(m.col_iter_mut()) {
        *slot = col.try_as_col_major_mut()?.as_slice_mut();
    }
    Some(columns)
}

/// [`normalize_chunk`] of at most [`NORMALIZE_BLOCK`] rows.
#[inline(always)]
fn normalize_block(
    mut m: MatMut<'_, f64>,
    probability: bool,
    log_normalizer_sum: Option<&mut f64>,
) {
    let (b, k) = (m.nrows(), m.ncols());
    debug_assert!(b <= NORMALIZE_BLOCK);
    // Each row's maximum (its shift) and Σ_k exp(m[i, k] − shift_i).
    let mut max = [f64::NEG_INFINITY; NORMALIZE_BLOCK];
    let mut sum = [0.0; NORMALIZE_BLOCK];
    // Posteriors (or log posteriors) of two classes or more in one pass over each vector of
    // rows, up to the first row the general path below must take (see
    // `density::exp::softmax_rows`).
    let fused = (k >= 2)
        .then(|| softmax_columns(m.as_mut()))
        .flatten()
        .map(|mut columns| {
            let (columns, max, sum) = (&mut columns[..k], &mut max[..b], &mut sum[..b]);
            if probability {
                density::exp::softmax_rows(columns, 0..b, max, sum)
            } else {
                fused_log_posteriors(columns, 0..b, max, sum)
            }
        });
    finish_block(
        m,
        probability,
        fused.unwrap_or(0),
        &mut max[..b],
        &mut sum[..b],
        log_normalizer_sum,
    );
}

/// Log posteriors of the rows `rows` of a block's `columns` (at most [`NORMALIZE_BLOCK`] rows),
/// up to the row returned, where [`density::exp::softmax_sums`] stopped: its maxima and sums
/// (to `max` and `sum`, counted from `rows.start`, for the log normalisers), then each entry
/// (v − max) − ln Σ, ln by [`density::ln`]. The general path's arithmetic
/// ([`exponentiate_and_normalize`]), so the same bits; the rows from the one returned on are
/// left as they were.
///
/// Why: the general path takes a block in four passes (the maxima; each column copied, then
/// exponentiated into the sums; the subtraction), where the sums take one here.
#[inline(always)]
fn fused_log_posteriors(
    columns: &mut [&mut [f64]],
    rows: std::ops::Range<usize>,
    max: &mut [f64],
    sum: &mut [f64],
) -> usize {
    let start = rows.start;
    let done = density::exp::softmax_sums(columns, rows, max, sum);
    let len = done - start;
    let mut ln_sum = [0.0; NORMALIZE_BLOCK];
    let ln_sum = &mut ln_sum[..len];
    ln_sum.copy_from_slice(&sum[..len]);
    density::ln::ln_in_place(ln_sum);
    for col in columns.iter_mut() {
        for ((v, mx), ls) in col[start..done].iter_mut().zip(&max[..len]).zip(&*ln_sum) {
            // As the general path: below f64's range is −f64::MAX.
            *v = ((*v - mx) - ls).max(-f64::MAX);
        }
    }
    done
}

/// The rows of a block from `done` on by the general path ([`normalize_rows`]), those before it
/// done by `density::exp::softmax_rows` (their maxima and sums in `max` and `sum`); then the
/// block's log normalisers added to `log_normalizer_sum`.
#[inline(always)]
fn finish_block(
    mut m: MatMut<'_, f64>,
    probability: bool,
    done: usize,
    max: &mut [f64],
    sum: &mut [f64],
    log_normalizer_sum: Option<&mut f64>,
) {
    let (b, k) = (m.nrows(), m.ncols());
    let special_norms = if done < b {
        // The general path starts from no maximum and no sum (the caller's buffers may hold an
        // earlier block's).
        max[done..b].fill(f64::NEG_INFINITY);
        sum[done..b].fill(0.0);
        normalize_rows(
            m.as_mut().subrows_mut(done, b - done),
            probability,
            &mut max[done..b],
            &mut sum[done..b],
        )
    } else {
        0.0
    };
    if let Some(total) = log_normalizer_sum {
        *total += log_sum_of_rows(max, sum, k) + special_norms;
    }
}

/// [`normalize_block`]'s general path, on rows whose `max` (−∞) and `sum` (0) are still to be
/// found: any number of classes, log posteriors, and rows whose maximum is not finite. Returns
/// the log normalisers of those last rows, summed.
#[inline(always)]
fn normalize_rows(
    mut m: MatMut<'_, f64>,
    probability: bool,
    max: &mut [f64],
    sum: &mut [f64],
) -> f64 {
    let (b, k) = (m.nrows(), m.ncols());
    for j in 0..k {
        match m.as_ref().col(j).try_as_col_major() {
            Some(col) => {
                for (mx, v) in max.iter_mut().zip(col.as_slice()) {
                    *mx = mx.max(*v);
                }
            }
            None => {
                for (i, mx) in max.iter_mut().enumerate() {
                    *mx = mx.max(m[(i, j)]);
                }
            }
        }
    }
    // Rows with a non-finite maximum (all −∞, or some +∞), kept aside before the fast path
    // overwrites them. The test is a branch-free fold, so that it vectorises (`all` with
    // `is_finite` was a scalar loop with an exit per row: a fifth of the kernel at K = 2).
    #[allow(clippy::neg_cmp_op_on_partial_ord)]
    let all_finite = max.iter().fold(true, |a, v| a & (v.abs() < f64::INFINITY));
    let special: Vec<(usize, Vec<f64>)> = if all_finite {
        Vec::new()
    } else {
        (0..b)
            .filter(|&i| !max[i].is_finite())
            .map(|i| (i, (0..k).map(|j| m[(i, j)]).collect()))
            .collect()
    };
    // Each row's maximum becomes its shift; a non-finite one would give NaN below, so it is
    // replaced by 0 and those rows are redone from `special`.
    let shift = max;
    if !all_finite {
        for v in shift.iter_mut().filter(|v| !v.is_finite()) {
            *v = 0.0;
        }
    }
    // Each row's Σ_k exp(m[i, k] − shift_i), in [1, k] where the shift is finite.
    exponentiate_and_normalize(m.as_mut(), shift, probability, sum);
    let mut special_norms = 0.0;
    for (i, mut row) in special {
        let log_norm = log_normalize_in_place(&mut row);
        special_norms += log_norm.max(-f64::MAX);
        // Counted above; out of the product below (its shift is 0).
        sum[i] = 1.0;
        for j in 0..k {
            m[(i, j)] = if probability {
                row[j].exp()
            } else {
                row[j].max(-f64::MAX)
            };
        }
    }
    special_norms
}

/// Σ_i (`shift[i]` + ln `sum[i]`) for a block's rows, each `sum[i]` in [1, k], with one
/// logarithm per group of rows: the product of a group's sums, in eight partial products, stays
/// below 2^1000 (k^group ≤ 2^1000).
///
/// Why: EM's objective needs the sum of every row's log normaliser, and a logarithm per row
/// (the standard library's, scalar) took longer than the rest of the E-step at K = 2: the
/// E-step at d = 2, K = 2 was 6.1–6.8 ms against 1.6 ms for a prediction's pass
/// (BENCHMARKS.md, thirty-sixth round). The group's product has a relative rounding error of at
/// most about `group` units in the last place, so each group's logarithm is off by at most about
/// 1.4e-14; the objective sums a million terms of magnitude one or more.
#[inline(always)]
fn log_sum_of_rows(shift: &[f64], sum: &[f64], k: usize) -> f64 {
    let bits_per_row = (k.max(2) as f64).log2();
    let group = ((1000.0 / bits_per_row) as usize).clamp(8, NORMALIZE_BLOCK) / 8 * 8;
    let mut logs = 0.0;
    for rows in sum.chunks(group) {
        let mut partial = [1.0f64; 8];
        let whole = rows.chunks_exact(8);
        let rest = whole.remainder();
        for v in whole {
            for l in 0..8 {
                partial[l] *= v[l];
            }
        }
        for (p, v) in partial.iter_mut().zip(rest) {
            *p *= v;
        }
        let product = ((partial[0] * partial[1]) * (partial[2] * partial[3]))
            * ((partial[4] * partial[5]) * (partial[6] * partial[7]));
        logs += product.ln();
    }
    density::numerics::sum(shift) + logs
}

/// [`normalize_block`]'s general path for rows with a finite `shift` (their maximum): each
/// entry's exponential after the shift, summed per row into `sum` (zero on entry), then each
/// row scaled by 1 / Σ (`probability`) or shifted by ln Σ.
#[inline(always)]
fn exponentiate_and_normalize(
    mut m: MatMut<'_, f64>,
    shift: &[f64],
    probability: bool,
    sum: &mut [f64],
) {
    let (b, k) = (m.nrows(), m.ncols());
    debug_assert_eq!(sum.len(), b);
    let mut tmp = [0.0; NORMALIZE_BLOCK];
    let tmp = &mut tmp[..b];
    for j in 0..k {
        let mut col = m.as_mut().col_mut(j);
        let col = col
            .as_mut()
            .try_as_col_major_mut()
            .map(|c| c.as_slice_mut());
        match col {
            Some(col) if probability => exp_shifted_accumulate(col, shift, sum),
            Some(col) => {
                tmp.copy_from_slice(col);
                exp_shifted_accumulate(tmp, shift, sum);
            }
            None => {
                for (i, t) in tmp.iter_mut().enumerate() {
                    *t = m[(i, j)];
                }
                exp_shifted_accumulate(tmp, shift, sum);
                if probability {
                    for (i, e) in tmp.iter().enumerate() {
                        m[(i, j)] = *e;
                    }
                }
            }
        }
    }
    if probability {
        // `tmp` holds 1 / Σ from here on.
        for (t, s) in tmp.iter_mut().zip(sum.iter()) {
            *t = 1.0 / s;
        }
        for j in 0..k {
            match m.as_mut().col_mut(j).try_as_col_major_mut() {
                Some(col) => {
                    for (v, f) in col.as_slice_mut().iter_mut().zip(tmp.iter()) {
                        *v *= f;
                    }
                }
                None => {
                    for (i, f) in tmp.iter().enumerate() {
                        m[(i, j)] *= f;
                    }
                }
            }
        }
    } else {
        // Subtract the maximum first, then ln Σ: for entries of magnitude 1e300 the sum of the
        // two would absorb the ln Σ term. `tmp` holds ln Σ from here on, by the vector
        // logarithm: with libm's, one per row, `predict_log_proba` took twice as long at d = 2,
        // K = 2 (`profile gnb-logproba 2 2`, p10 of 10, two alternated pairs on the model-167
        // Xeon: 6.81, 6.93 → 3.56, 3.50 ms; `lda-logproba 16 10` 18.5, 17.9 → 16.0, 16.1 ms).
        tmp.copy_from_slice(sum);
        density::ln::ln_in_place(tmp);
        for j in 0..k {
            for ((v, mx), ls) in m
                .as_mut()
                .col_mut(j)
                .iter_mut()
                .zip(shift.iter())
                .zip(tmp.iter())
            {
                // Below f64's range (scores 1e308 apart) is −f64::MAX: finite, as a log
                // posterior should be.
                *v = ((*v - mx) - ls).max(-f64::MAX);
            }
        }
    }
}

/// ln Σ_k exp(m[i, k]) for every row ([`row_log_sum_exp_in_place`] of a copy of `m`: the same
/// bits).
pub fn row_log_sum_exp(m: MatRef<'_, f64>) -> Vec<f64> {
    row_log_sum_exp_in_place(m.to_owned().as_mut())
}

/// ln Σ_k exp(m[i, k]) for every row, using `m` as scratch (its values may be left changed).
/// With `max_i` the row's largest entry and e_ik = exp(m[i, k] − max_i) by
/// [`density::exp::exp_nonpositive`], each row's term is max_i + ln((…(0 + e_i0) + e_i1) + …)
/// (ln by [`density::ln`]):
/// the arithmetic of [`density::exp::softmax_sums`] (the maxima and sums of
/// [`density::exp::softmax_rows`], without its writes), which takes the rows of contiguous
/// columns a vector at a time, while the other rows take the same formula one by one, so every row's
/// term has the same bits on either path. A row whose largest entry is not finite (all −∞, or
/// +∞ somewhere) is [`log_sum_exp`] of its entries.
///
/// Why: with the standard library's scalar `exp` for every entry, `log_likelihood` at n = 1e6,
/// d = 16, K = 10 took 62 ms against 10 ms for LDA's `predict_proba` (BENCHMARKS.md, ninetieth
/// round); Gaussian NB's went 62–74 → 32 ms this way (ninety-first round). The logarithm, one
/// per row, was then libm's: `profile gnb-loglik 2 2`, p10 of 10, two alternated pairs on the
/// model-167 Xeon, 10.5, 9.8 → 6.0, 6.2 ms with `density::ln` (ninety-third round).
pub fn row_log_sum_exp_in_place(m: MatMut<'_, f64>) -> Vec<f64> {
    let mut terms = Vec::with_capacity(m.nrows());
    each_row_log_sum_exp(m, |term| terms.push(term));
    terms
}

/// The sum of [`row_log_sum_exp_in_place`]'s terms in row order (from −0.0, as
/// `Iterator::sum`), without a vector of them: `log_likelihood`'s share of a chunk. Why: each
/// chunk's 4096 terms were kept in a vector until the end (8 MB at n = 1e6), then added on the
/// calling thread alone. `perf` of `profile gnb-loglik 2 2` (100 runs back to back) put 23% of
/// the samples in page faults as the terms were written (that memory went back to the system
/// and was faulted in again on every call) and 10% in that serial sum. Without them it took
/// 2.85–3.01 ms against 5.99–6.24 ms (p10 of 10, two runs each, the same vector logarithm in
/// both), as long as its `predict_proba`.
pub fn row_log_sum_exp_total_in_place(m: MatMut<'_, f64>) -> f64 {
    let mut total = -0.0;
    each_row_log_sum_exp(m, |term| total += term);
    total
}

/// [`row_log_sum_exp_in_place`]'s terms, each handed to `sink` in row order.
#[inline(always)]
fn each_row_log_sum_exp(mut m: MatMut<'_, f64>, mut sink: impl FnMut(f64)) {
    let (n, k) = (m.nrows(), m.ncols());
    let mut max = [0.0; NORMALIZE_BLOCK];
    let mut sum = [0.0; NORMALIZE_BLOCK];
    let mut row = vec![0.0; k];
    let mut r0 = 0;
    while r0 < n {
        let len = NORMALIZE_BLOCK.min(n - r0);
        let mut block = m.as_mut().subrows_mut(r0, len);
        // No columns, or more than the kernel takes: it does no row (returns 0).
        let done = softmax_columns(block.as_mut()).map_or(0, |mut columns| {
            density::exp::softmax_sums(&mut columns[..k], 0..len, &mut max, &mut sum)
        });
        density::ln::ln_in_place(&mut sum[..done]);
        (0..done).for_each(|i| sink(max[i] + sum[i]));
        for i in done..len {
            for (j, v) in row.iter_mut().enumerate() {
                *v = block[(i, j)];
            }
            sink(row_log_sum_exp_one(&row));
        }
        r0 += len;
    }
}

/// One row's term of [`row_log_sum_exp_in_place`], one entry at a time.
fn row_log_sum_exp_one(row: &[f64]) -> f64 {
    let max = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if !max.is_finite() {
        return log_sum_exp(row);
    }
    let mut sum = 0.0;
    for v in row {
        sum += density::exp::exp_nonpositive(v - max);
    }
    max + density::ln::ln(sum)
}

/// Index of the largest entry of each row (first on ties; an entry that is not greater than
/// the row's best so far, NaN included, never replaces it).
pub fn argmax_rows(m: MatRef<'_, f64>) -> Vec<usize> {
    let mut index = vec![0; m.nrows()];
    pulp::Arch::new().dispatch(ArgmaxRows {
        m,
        index: &mut index,
    });
    index
}

/// Rows per block of [`ArgmaxRows`]: the block's best values and columns stay in L1.
const ARGMAX_BLOCK: usize = 256;

/// [`argmax_rows`] into `index`, column by column over blocks of rows: each row's best value so
/// far and its column, replaced by a strictly greater entry, the comparisons of a row-by-row
/// scan in its order. Why: down a column-major chunk the comparisons are contiguous vectors;
/// along rows they were one strided scalar step each (half of `predict`'s samples at d = 2,
/// K = 10 even as a column-wise loop, which the compiler left scalar outside a dispatch).
struct ArgmaxRows<'a> {
    m: MatRef<'a, f64>,
    index: &'a mut [usize],
}

/// A row's best value `v` and its column `a` become `e` and `j` when `e` is strictly greater.
#[inline(always)]
fn take_greater(v: &mut f64, a: &mut u64, e: f64, j: usize) {
    if e > *v {
        (*v, *a) = (e, j as u64);
    }
}

impl pulp::WithSimd for ArgmaxRows<'_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, simd: S) {
        let ArgmaxRows { m, index } = self;
        let k = m.ncols();
        let mut best = [0.0f64; ARGMAX_BLOCK];
        let mut at = [0u64; ARGMAX_BLOCK];
        for (b, index) in index.chunks_mut(ARGMAX_BLOCK).enumerate() {
            let len = index.len();
            let block = m.subrows(b * ARGMAX_BLOCK, len);
            let (best, at) = (&mut best[..len], &mut at[..len]);
            at.fill(0);
            if k > 0 {
                for (i, v) in best.iter_mut().enumerate() {
                    *v = block[(i, 0)];
                }
            }
            for j in 1..k {
                let Some(col) = block.col(j).try_as_col_major() else {
                    for (i, (v, a)) in best.iter_mut().zip(at.iter_mut()).enumerate() {
                        take_greater(v, a, block[(i, j)], j);
                    }
                    continue;
                };
                let (bv, best_tail) = S::as_mut_simd_f64s(best);
                let (av, at_tail) = S::as_mut_simd_u64s(at);
                let (cv, col_tail) = S::as_simd_f64s(col.as_slice());
                let jv = simd.splat_u64s(j as u64);
                for ((v, a), &e) in bv.iter_mut().zip(av.iter_mut()).zip(cv) {
                    let greater = simd.greater_than_f64s(e, *v);
                    *v = simd.select_f64s(greater, e, *v);
                    *a = simd.select_u64s(greater, jv, *a);
                }
                for ((v, a), &e) in best_tail.iter_mut().zip(at_tail.iter_mut()).zip(col_tail) {
                    take_greater(v, a, e, j);
                }
            }
            for (o, &a) in index.iter_mut().zip(at.iter()) {
                *o = a as usize;
            }
        }
    }
}

/// Plain hyper-parameters with documented defaults. `check` validates them once; only the
/// resulting [`Checked`] value can fit, so a fit never meets an invalid parameter.
pub trait HyperParams: Sized {
    /// Errors name the parameter and its rule, e.g. "`reg` must be >= 0, got -0.001".
    fn check_params(&self) -> Result<()>;

    /// Validates and wraps the parameters.
    fn check(self) -> Result<Checked<Self>> {
        self.check_params()?;
        Ok(Checked(self))
    }
}

/// Hyper-parameters that passed [`HyperParams::check`].
#[derive(Debug, Clone, PartialEq)]
pub struct Checked<P>(P);

impl<P> std::ops::Deref for Checked<P> {
    type Target = P;
    fn deref(&self) -> &P {
        &self.0
    }
}

/// Validated hyper-parameters that fit a model in closed form from weighted responsibilities.
pub trait WeightedFit: Sync {
    /// The fitted model.
    type Model: GenerativeClassifier + Clone;

    /// Fits from several sets of rows, as if they were one set (no data is copied).
    fn fit_sets(&self, sets: &[WeightedRows<'_>]) -> Result<Self::Model>;

    /// The same fit split into per-chunk statistics and a finish, when the model offers it
    /// (with these hyper-parameters): semi-supervised EM then takes the statistics in the
    /// E-step's pass ([`crate::split`]).
    fn split(&self) -> Option<&dyn crate::split::SplitFit<Self::Model>> {
        None
    }

    /// Fits from one matrix of rows and its n × K responsibilities.
    fn fit_weighted(&self, x: MatRef<'_, f64>, resp: MatRef<'_, f64>) -> Result<Self::Model> {
        self.fit_sets(&[WeightedRows::weighted(x, resp)])
    }

    /// Supervised fit from labels in `0..n_classes` (the one-hot special case).
    fn fit(&self, x: MatRef<'_, f64>, labels: &[usize], n_classes: usize) -> Result<Self::Model> {
        if labels.len() != x.nrows() {
            return Err(GenerativeError::DimensionMismatch {
                what: "labels vs rows of x",
                expected: x.nrows(),
                got: labels.len(),
            });
        }
        self.fit_sets(&[WeightedRows::labeled(x, labels, n_classes)])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Buffers whose columns lie a multiple of 16 lines apart are the ones streamed into; ours
    /// (spread) and ordinary sizes are not.
    #[test]
    fn only_columns_a_multiple_of_16_lines_apart_share_cache_sets() {
        let plain = |n: usize, k: usize| Mat::<f64>::zeros(n, k);
        assert!(columns_share_cache_sets(plain(8192, 3).as_ref()));
        assert!(columns_share_cache_sets(plain(128, 2).as_ref()));
        assert!(!columns_share_cache_sets(plain(8192, 1).as_ref()));
        assert!(!columns_share_cache_sets(plain(1000, 3).as_ref()));
        assert!(!columns_share_cache_sets(plain(1_000_000, 10).as_ref()));
        assert!(!columns_share_cache_sets(spread_zeros(8192, 3).as_ref()));
        // Rows laid out row-major: not columns at all.
        assert!(!columns_share_cache_sets(
            plain(3, 8192).as_ref().transpose()
        ));
    }

    /// The column-wise vector argmax gives each row the index a row-by-row scan gives (first on
    /// ties, NaN never taken, a row of −∞ or of NaN at 0) for row counts around the vector
    /// width and the block, every class count up to 11, and each layout.
    #[test]
    fn argmax_rows_is_the_row_by_row_scan_for_every_shape_and_layout() {
        let (inf, nan) = (f64::INFINITY, f64::NAN);
        let special = [
            0.0, -0.0, 1.0, 1.0, -inf, inf, nan, 2.5, -3.0, 2.5, 1e300, -1e-300,
        ];
        let value = |i: usize, j: usize| -> f64 {
            let h = (i * 7919 + j * 104_729 + (i * j) % 13) % 101;
            match h % 4 {
                0 => special[h % special.len()],
                // Few distinct values, so that rows tie often.
                _ => ((h / 4) % 5) as f64,
            }
        };
        let scan = |m: MatRef<'_, f64>| -> Vec<usize> {
            (0..m.nrows())
                .map(|i| {
                    let mut best = 0;
                    for j in 1..m.ncols() {
                        if m[(i, j)] > m[(i, best)] {
                            best = j;
                        }
                    }
                    best
                })
                .collect()
        };
        for n in [0usize, 1, 7, 8, 9, 255, 256, 257, 600] {
            for k in 1..=11 {
                let m = Mat::from_fn(n, k, |i, j| {
                    if i % 17 == 3 {
                        -inf
                    } else if i % 19 == 5 {
                        nan
                    } else {
                        value(i, j)
                    }
                });
                let want = scan(m.as_ref());
                let row_major = m.transpose().to_owned();
                let reversed = Mat::from_fn(n, k, |i, j| m[(n - 1 - i, j)]);
                for (layout, view) in [
                    m.as_ref(),
                    row_major.as_ref().transpose(),
                    reversed.as_ref().reverse_rows(),
                ]
                .into_iter()
                .enumerate()
                {
                    assert_eq!(argmax_rows(view), want, "n = {n}, K = {k}, layout {layout}");
                }
            }
        }
    }

    #[test]
    fn normalize_chunk_equals_the_row_by_row_formula_including_special_rows() {
        let inf = f64::INFINITY;
        let rows: Vec<[f64; 3]> = vec![
            [-inf, -inf, -inf],
            [inf, 0.0, -inf],
            [inf, inf, 1.0],
            [0.0, -1e300, -3.0],
            [1e300, 1e300, -1e300],
            [-1000.0, -1001.0, -1200.0],
            [2.5, -0.5, 1.0],
        ];
        for probability in [false, true] {
            let mut m = Mat::from_fn(rows.len(), 3, |i, j| rows[i][j]);
            let mut log_norm_sum = 0.0;
            normalize_chunk(m.as_mut(), probability, Some(&mut log_norm_sum));
            let mut want_sum = 0.0;
            for (i, r) in rows.iter().enumerate() {
                let mut want = r.to_vec();
                // A row of −∞ counts as −f64::MAX in the sum.
                let want_norm = log_normalize_in_place(&mut want).max(-f64::MAX);
                want_sum += want_norm;
                // Each row alone: its own normaliser.
                let mut alone = Mat::from_fn(1, 3, |_, j| r[j]);
                let mut norm = 0.0;
                normalize_chunk(alone.as_mut(), probability, Some(&mut norm));
                assert!(
                    norm == want_norm
                        || (norm - want_norm).abs() <= 4.0 * f64::EPSILON * want_norm.abs(),
                    "row {i}: normaliser {norm} vs {want_norm}"
                );
                for j in 0..3 {
                    let w = if probability { want[j].exp() } else { want[j] };
                    let got = m[(i, j)];
                    assert!(!got.is_nan(), "row {i}: NaN");
                    assert!(
                        got == w || (got - w).abs() <= 4.0 * f64::EPSILON * w.abs().max(1.0),
                        "row {i} col {j}: {got} vs {w} (probability: {probability})"
                    );
                }
            }
            // Rows 1 and 2 have +∞ normalisers, row 0 −f64::MAX: the sum is +∞.
            assert_eq!(log_norm_sum, want_sum, "the chunk's sum");
        }
    }

    /// The chunk's sum of log normalisers takes one logarithm per group of rows (the product of
    /// their sums): against each row's own log-sum-exp, for class counts whose groups are the
    /// whole block (K ≤ 225) and shorter (K = 300, 5000), with scores up to ±800 apart, over
    /// blocks and a last short one.
    #[test]
    fn log_normalizer_sum_matches_the_rows_log_sum_exp() {
        for k in [1usize, 2, 3, 10, 300, 5000] {
            let n = 2 * NORMALIZE_BLOCK + 45;
            let value = |i: usize, j: usize| -> f64 {
                let h = ((i * 7919 + j * 104_729) % 10_007) as f64 / 10_007.0;
                // A few rows far apart, most with classes within a few units.
                if i.is_multiple_of(17) {
                    800.0 * (h - 0.5)
                } else {
                    5.0 * h - 30.0
                }
            };
            for probability in [false, true] {
                let mut m = Mat::from_fn(n, k, value);
                let mut got = 0.0;
                normalize_chunk(m.as_mut(), probability, Some(&mut got));
                let rows: Vec<f64> = (0..n)
                    .map(|i| log_sum_exp(&(0..k).map(|j| value(i, j)).collect::<Vec<_>>()))
                    .collect();
                let want: f64 = rows.iter().sum();
                let scale: f64 = rows.iter().map(|v| v.abs()).sum();
                assert!(
                    (got - want).abs() <= 1e-13 * scale,
                    "K = {k}: {got} vs {want} (scale {scale})"
                );
                // Every block's sum is added: the last block alone moves it.
                let mut head = Mat::from_fn(2 * NORMALIZE_BLOCK, k, value);
                let mut head_sum = 0.0;
                normalize_chunk(head.as_mut(), probability, Some(&mut head_sum));
                let tail: f64 = rows[2 * NORMALIZE_BLOCK..].iter().sum();
                assert!(
                    (got - head_sum - tail).abs() <= 1e-13 * scale,
                    "K = {k}: last block"
                );
            }
        }
    }

    /// Two classes take a kernel of their own in the fused pass (one exponential per row). It
    /// must give the bits of three classes, a third of score −∞ changing no sum:
    /// ties, a −∞ score, huge and tiny gaps, and special rows (all −∞, +∞) included, in a
    /// chunk longer than a block.
    #[test]
    fn two_class_posteriors_have_the_general_paths_bits() {
        let (inf, nan) = (f64::INFINITY, f64::NAN);
        let mut pairs: Vec<(f64, f64)> = vec![
            (0.0, 0.0),
            (-0.0, 0.0),
            (3.5, 3.5),
            (-inf, 2.0),
            (2.0, -inf),
            (-inf, -inf),
            (inf, 1.0),
            (1.0, nan),
            (1e300, -1e300),
            (-745.0, 0.0),
            (0.0, -746.5),
            (1e-300, -1e-300),
        ];
        let mut state = 99u64;
        for _ in 0..400 {
            let mut next = || {
                state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((state >> 11) as f64 / (1u64 << 53) as f64 - 0.5) * 80.0
            };
            pairs.push((next(), next()));
        }
        let n = pairs.len();
        let mut two = Mat::from_fn(n, 2, |i, j| if j == 0 { pairs[i].0 } else { pairs[i].1 });
        let mut three = Mat::from_fn(n, 3, |i, j| match j {
            0 => pairs[i].0,
            1 => pairs[i].1,
            _ => f64::NEG_INFINITY,
        });
        normalize_chunk(two.as_mut(), true, None);
        normalize_chunk(three.as_mut(), true, None);
        for i in 0..n {
            if pairs[i] == (f64::NEG_INFINITY, f64::NEG_INFINITY) {
                // Uniform over the classes there are, so K matters.
                assert_eq!((two[(i, 0)], two[(i, 1)]), (0.5, 0.5));
                continue;
            }
            if pairs[i].1.is_nan() {
                // Only unchecked input scores NaN: a valid (meaningless) pair.
                assert_eq!(two[(i, 0)] + two[(i, 1)], 1.0);
                continue;
            }
            for j in 0..2 {
                assert_eq!(
                    two[(i, j)].to_bits(),
                    three[(i, j)].to_bits(),
                    "row {i} {:?} column {j}: {} vs {}",
                    pairs[i],
                    two[(i, j)],
                    three[(i, j)]
                );
            }
            assert!(!two[(i, 0)].is_nan() && (two[(i, 0)] + two[(i, 1)] - 1.0).abs() < 1e-15);
        }
    }

    /// An n × k matrix of scores uniform in [−30, 30), from a fixed linear congruential
    /// sequence started at `seed + k`.
    fn random_scores(n: usize, k: usize, seed: u64) -> Mat<f64> {
        let mut state = seed + k as u64;
        let mut next = move || {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (state >> 11) as f64 / (1u64 << 53) as f64
        };
        Mat::from_fn(n, k, |_, _| (next() - 0.5) * 60.0)
    }

    /// `scores` with rows of a non-finite maximum: for each `(row, kind)`, all −∞ (kind 0),
    /// one +∞ among 0.5s (1), or all NaN (2).
    fn with_non_finite_maxima(scores: &Mat<f64>, rows: &[(usize, u8)]) -> Mat<f64> {
        let mut special = scores.clone();
        let k = scores.ncols();
        for &(i, kind) in rows {
            for j in 0..k {
                special[(i, j)] = match kind {
                    0 => f64::NEG_INFINITY,
                    1 if j == k / 2 => f64::INFINITY,
                    1 => 0.5,
                    _ => f64::NAN,
                };
            }
        }
        special
    }

    /// Posteriors written to another buffer (`normalize_to`: streamed where its columns are
    /// 64-byte aligned, plain stores where not) have `normalize_chunk`'s bits in every entry,
    /// including the rows the streamed kernel leaves (a non-finite maximum mid-chunk, the rows
    /// past its last group), and nothing outside the columns' rows is written.
    #[test]
    fn streamed_posteriors_have_normalize_chunks_bits() {
        // Rows past the last group of four whole vectors, and rows of a non-finite maximum
        // (which stop the streamed kernel mid-chunk), take the copy of the general path.
        let n = 3 * NORMALIZE_BLOCK + 45;
        let sentinel = 4242.5;
        for k in [2usize, 3, 4, 10, 17, 32] {
            let mut values = random_scores(n, k, 11);
            // The first block is finite: two classes stream only up to a value that is not.
            for i in 0..n {
                match i % 37 {
                    5 if i > NORMALIZE_BLOCK => values[(i, (i + 1) % k)] = f64::NEG_INFINITY,
                    9 => values[(i, 1)] = 1e300,
                    13 => values[(i, 1)] = -745.5,
                    _ => {}
                }
            }
            let special = with_non_finite_maxima(
                &values,
                &[
                    (NORMALIZE_BLOCK + 60, 0),
                    (2 * NORMALIZE_BLOCK + 3, 1),
                    (n - 2, 2),
                ],
            );
            for (scores, with_special) in [(values, false), (special, true)] {
                let mut want = scores.clone();
                normalize_chunk(want.as_mut(), true, None);
                // Destinations on a 64-byte boundary (streamed) and one value past it (plain).
                for offset in [0usize, 1] {
                    let stride = n + 16;
                    let mut storage = vec![std::mem::MaybeUninit::new(sentinel); k * stride + 8];
                    let skew = storage.as_ptr().align_offset(64) + offset;
                    let mut columns: Vec<&mut [std::mem::MaybeUninit<f64>]> = storage[skew..]
                        .chunks_mut(stride)
                        .take(k)
                        .map(|c| &mut c[..n])
                        .collect();
                    let mut from = scores.clone();
                    normalize_to(from.as_mut(), &mut columns);
                    let case = format!("K = {k}, special {with_special}, offset {offset}");
                    for (j, col) in columns.iter().enumerate() {
                        for (i, v) in col.iter().enumerate() {
                            // SAFETY: every slot started as the sentinel (initialised).
                            #[allow(unsafe_code)]
                            let got = unsafe { v.assume_init() };
                            assert_eq!(got.to_bits(), want[(i, j)].to_bits(), "{case} ({i}, {j})");
                        }
                    }
                    // Nothing past the columns' rows was written.
                    for c in storage[skew..].chunks(stride).take(k) {
                        for v in &c[n..] {
                            #[allow(unsafe_code)]
                            let v = unsafe { v.assume_init() };
                            assert_eq!(v, sentinel, "{case}: past the rows");
                        }
                    }
                }
            }
        }
    }

    /// Two classes or more take one pass per vector of rows (`density::exp::softmax_rows`)
    /// where the columns are contiguous; a row-major chunk takes the general path. Both must
    /// give the same bits, the log normalisers' sum included, for any number of classes (past
    /// the fused pass's 32 too), with NaN, ±∞ and −∞ entries in rows of finite maximum, ties,
    /// huge gaps, and rows of a non-finite maximum anywhere in a block, which stop the fused
    /// pass in mid-block.
    #[test]
    fn fused_posteriors_have_the_general_paths_bits() {
        let nan = f64::NAN;
        // The last block's rows past its last four whole vectors take the general path.
        let n = 3 * NORMALIZE_BLOCK + 45;
        for k in [2usize, 3, 4, 5, 10, 17, 32, 33] {
            let mut finite = random_scores(n, k, 7);
            for i in 0..n {
                match i % 41 {
                    3 => finite[(i, i % k)] = nan,
                    5 => finite[(i, (i + 1) % k)] = f64::NEG_INFINITY,
                    7 => finite[(i, 0)] = finite[(i, k - 1)],
                    9 => finite[(i, 1)] = 1e300,
                    11 => finite[(i, 2 % k)] = -1e300,
                    13 => finite[(i, 1)] = -745.5,
                    _ => {}
                }
            }
            // Then rows of a non-finite maximum: all −∞, one +∞, and all NaN; in the first
            // block's middle, at the second's start, mid-vector in the third, and in the last
            // rows. Their normalisers make the sum +∞, so the sum is compared without them.
            let special = with_non_finite_maxima(
                &finite,
                &[
                    (60, 0),
                    (NORMALIZE_BLOCK, 1),
                    (2 * NORMALIZE_BLOCK + 35, 2),
                    (n - 2, 1),
                ],
            );
            for (values, with_special) in [(finite, false), (special, true)] {
                for probability in [false, true] {
                    let mut fused = values.clone();
                    let mut fused_sum = 0.0;
                    normalize_chunk(fused.as_mut(), probability, Some(&mut fused_sum));
                    let mut storage = values.transpose().to_owned();
                    let mut general = storage.as_mut().transpose_mut();
                    let mut general_sum = 0.0;
                    normalize_chunk(general.as_mut(), probability, Some(&mut general_sum));
                    let case = format!("K = {k}, special rows: {with_special}");
                    assert_eq!(fused_sum.is_finite(), !with_special, "{case}: {fused_sum}");
                    assert_eq!(
                        fused_sum.to_bits(),
                        general_sum.to_bits(),
                        "{case}: the sums"
                    );
                    for i in 0..n {
                        for j in 0..k {
                            let (got, want) = (fused[(i, j)], general[(i, j)]);
                            assert!(!got.is_nan(), "{case}, row {i} col {j}: NaN");
                            assert_eq!(got.to_bits(), want.to_bits(), "{case}, row {i} col {j}");
                        }
                    }
                }
            }
        }
    }

    /// The chunk is normalised in blocks of rows; no entry may depend on which block its row
    /// falls in, how long the last block is, or where the special rows are. Each row normalised
    /// on its own (a one-row chunk) must give the same bits, in both layouts.
    #[test]
    fn normalize_chunk_gives_every_row_the_bits_it_gets_alone_across_blocks() {
        let (n, k) = (2 * NORMALIZE_BLOCK + 45, 4);
        let special = [0, NORMALIZE_BLOCK - 1, NORMALIZE_BLOCK, n - 1];
        let value = |i: usize, j: usize| -> f64 {
            match (special.iter().position(|&s| s == i), j) {
                (Some(0), _) => f64::NEG_INFINITY,
                (Some(1), 2) => f64::INFINITY,
                (Some(2), 0 | 3) => f64::INFINITY,
                (Some(3), 1) => f64::NEG_INFINITY,
                _ => ((i * 7 + j * 13) % 23) as f64 * 1.7 - 30.0 * (j as f64),
            }
        };
        for probability in [false, true] {
            for row_major in [false, true] {
                // The same values column-major (n × k), or as the transpose of a k × n
                // column-major matrix (row-major).
                let mut storage = if row_major {
                    Mat::from_fn(k, n, |j, i| value(i, j))
                } else {
                    Mat::from_fn(n, k, value)
                };
                let mut norm_sum = 0.0;
                let mut m = if row_major {
                    storage.as_mut().transpose_mut()
                } else {
                    storage.as_mut()
                };
                normalize_chunk(m.as_mut(), probability, Some(&mut norm_sum));
                // Row 1 (special) has a +∞ normaliser.
                assert_eq!(norm_sum, f64::INFINITY, "the chunk's normalisers");
                for i in 0..n {
                    let mut alone = Mat::from_fn(1, k, |_, j| value(i, j));
                    normalize_chunk(alone.as_mut(), probability, None);
                    for j in 0..k {
                        let (got, want) = (m[(i, j)], alone[(0, j)]);
                        assert!(!got.is_nan(), "row {i} col {j}: NaN");
                        assert_eq!(got.to_bits(), want.to_bits(), "row {i} col {j}");
                    }
                }
            }
        }
    }

    /// Each row's term of `row_log_sum_exp` has the bits it has alone (so the vector kernel's
    /// rows and the one-by-one rows agree), whatever rows share its block: a row of −∞ and one
    /// with +∞ early in a block send the rest of that block to the one-by-one path. The terms
    /// are within a few units in the last place of the libm-based `log_sum_exp` (an independent
    /// formula), for class counts with two-class, general and no vector kernel (K > 32), in
    /// both layouts.
    #[test]
    fn row_log_sum_exp_gives_each_row_its_own_bits_near_libm() {
        let value = |i: usize, j: usize| -> f64 {
            let h = ((i * 7919 + j * 104_729) % 10_007) as f64 / 10_007.0;
            match i {
                3 => f64::NEG_INFINITY,
                5 if j == 1 => f64::INFINITY,
                _ if i.is_multiple_of(13) => 800.0 * (h - 0.5),
                _ => 5.0 * h - 30.0,
            }
        };
        for k in [1usize, 2, 3, 10, 40] {
            let n = 2 * NORMALIZE_BLOCK + 45;
            let m = Mat::from_fn(n, k, value);
            let rows = Mat::from_fn(k, n, |j, i| value(i, j));
            for (layout, view) in [("columns", m.as_ref()), ("rows", rows.transpose())] {
                let got = row_log_sum_exp(view);
                assert_eq!(got.len(), n);
                for (i, term) in got.iter().enumerate() {
                    let row: Vec<f64> = (0..k).map(|j| value(i, j)).collect();
                    let alone = row_log_sum_exp(Mat::from_fn(1, k, |_, j| row[j]).as_ref());
                    assert_eq!(
                        term.to_bits(),
                        alone[0].to_bits(),
                        "K = {k}, {layout}, row {i}"
                    );
                    let want = log_sum_exp(&row);
                    if want.is_finite() {
                        assert!(
                            (term - want).abs() <= 4.0 * f64::EPSILON * want.abs().max(1.0),
                            "K = {k}, {layout}, row {i}: {term} vs {want}"
                        );
                    } else {
                        assert_eq!(term.to_bits(), want.to_bits(), "K = {k}, row {i}");
                    }
                }
            }
            // The in-place form leaves the same terms.
            let mut scratch = m.clone();
            let in_place = row_log_sum_exp_in_place(scratch.as_mut());
            let want = row_log_sum_exp(m.as_ref());
            assert!(
                in_place
                    .iter()
                    .zip(&want)
                    .all(|(a, b)| a.to_bits() == b.to_bits())
            );
        }
    }
}
