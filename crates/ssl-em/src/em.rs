//! The EM loop, generic over any `WeightedFit`.
//!
//! Each iteration evaluates the objective at the current θ while computing the E-step, so the
//! trace records L(θ_t) for every parameter set actually produced, and the final posteriors
//! belong to the final model. The M-step is one `fit_sets` call over the labeled and unlabeled
//! rows as two sets: nothing is copied or concatenated. When the model's fit is split
//! (`WeightedFit::split`), soft EM takes the unlabeled rows' statistics for the next M-step in
//! the E-step's own pass, chunk by chunk while each is in cache, and the M-step finishes from
//! them with the same bits.

use std::ops::Range;

use faer::{Mat, MatMut, MatRef};

use density::block::contiguous_columns;
use density::numerics::log_sum_exp;
use generative::model::{
    Posterior, log_joint_pass_fold, log_joint_pass_then, normalize_chunk, row_moments,
};
use generative::parallel::{CHUNK_ROWS, Chunk, Runs, row_chunks_mut, run_indexed};
use generative::split::{Partial, SplitFit, fold_split};
use generative::{GenerativeClassifier, WeightedFit, WeightedRows};

use crate::diagnostic::diagnose;
use crate::mixture::ComponentMixture;
use crate::params::{Components, EmMode, EmParams, Lambda};
use crate::report::{EmReport, IterationRecord};
use crate::{EmError, Result};

/// Semi-supervised EM: a model's validated hyper-parameters plus checked EM options.
#[derive(Debug, Clone)]
pub struct SemiSupervisedEm<S> {
    spec: S,
    params: EmParams,
}

/// The fitted model (classes made of components) and the report of how it was trained.
#[derive(Debug, Clone)]
pub struct EmFit<M> {
    pub model: ComponentMixture<M>,
    pub report: EmReport,
}

/// The outcome of one EM run at a fixed λ and fixed components.
pub(crate) struct Run<M> {
    pub model: ComponentMixture<M>,
    pub trace: Vec<IterationRecord>,
    pub iterations: usize,
    pub converged: bool,
    pub warnings: Vec<String>,
    /// Labeled + λ·unlabeled log-likelihood at the final θ (no smoothing prior).
    pub log_lik: f64,
    /// What the unlabeled rows' class posteriors at the final θ are taken from.
    last_estep: LastEstep,
    component_class: Vec<usize>,
    n_classes: usize,
}

/// What a run keeps of its last E-step on the unlabeled rows (n_u × components).
enum LastEstep {
    /// Soft EM: the component posteriors at the final θ, unscaled. The E-step that no M-step
    /// follows writes them; with a split fit the others do not write them at all, and a run
    /// that stops on convergence (or a failed M-step) recomputes them (`keep_posteriors`).
    Posteriors(Mat<f64>),
    /// Hard EM: the component log joints (its assignments are their row maxima), and the
    /// responsibilities' buffer, no longer needed, into which the posteriors are written.
    LogJoints {
        log_joints: Mat<f64>,
        spare: Mat<f64>,
    },
}

impl<M> Run<M> {
    /// Class-level posteriors of the unlabeled rows at the final θ (n_u × K), taken out of the
    /// run: a second call finds its buffers gone and returns an empty matrix.
    ///
    /// Why on demand, out of the run's own buffers: only the dominance diagnostic reads them.
    /// Every run (each fold and λ of a cross-validation, each component count of a BIC search)
    /// used to form them in a fresh n_u × K matrix as it returned, and at n = 1e6, K = 10 a
    /// fresh 80 MB matrix costs the kernel's clearing of its pages, which on a virtual machine
    /// can take longer than an EM iteration (BENCHMARKS.md, thirty-third round). With one
    /// component per class they are the last E-step's buffer itself (soft EM) or written into
    /// the responsibilities' buffer (hard EM).
    pub fn take_unlabeled_posteriors(&mut self) -> Mat<f64> {
        let identity = self.component_class.len() == self.n_classes;
        match &mut self.last_estep {
            LastEstep::Posteriors(p) => {
                let p = std::mem::replace(p, Mat::new());
                if identity {
                    return p;
                }
                class_sums(p.as_ref(), &self.component_class, self.n_classes)
            }
            LastEstep::LogJoints { log_joints, spare } => {
                let lj = std::mem::replace(log_joints, Mat::new());
                let mut spare = std::mem::replace(spare, Mat::new());
                if identity && spare.nrows() == lj.nrows() {
                    class_posteriors_into(lj.as_ref(), spare.as_mut());
                    return spare;
                }
                class_posteriors(lj.as_ref(), &self.component_class, self.n_classes)
            }
        }
    }
}

/// Inputs shared by every run: labeled rows, their classes, unlabeled rows.
#[derive(Clone, Copy)]
pub(crate) struct Data<'a> {
    pub x_l: MatRef<'a, f64>,
    pub y_l: &'a [usize],
    pub n_classes: usize,
    pub x_u: MatRef<'a, f64>,
}

impl<S: WeightedFit> SemiSupervisedEm<S> {
    /// Checks the EM options once.
    pub fn new(spec: S, params: EmParams) -> Result<Self> {
        params.check()?;
        Ok(Self { spec, params })
    }

    /// The EM options.
    pub fn params(&self) -> &EmParams {
        &self.params
    }

    /// Fits from labeled rows `x_l` with classes `y_l` in `0..n_classes` and unlabeled rows `x_u`.
    pub fn fit(
        &self,
        x_l: MatRef<'_, f64>,
        y_l: &[usize],
        n_classes: usize,
        x_u: MatRef<'_, f64>,
    ) -> Result<EmFit<S::Model>> {
        self.fit_with_observer(x_l, y_l, n_classes, x_u, &mut |_| {})
    }

    /// As [`fit`](Self::fit), calling `observer` after every E-step of the final fit.
    pub fn fit_with_observer(
        &self,
        x_l: MatRef<'_, f64>,
        y_l: &[usize],
        n_classes: usize,
        x_u: MatRef<'_, f64>,
        observer: &mut dyn FnMut(&IterationRecord),
    ) -> Result<EmFit<S::Model>> {
        let data = Data {
            x_l,
            y_l,
            n_classes,
            x_u,
        };
        check_data(&data)?;
        let p = &self.params;
        let uniform = |m: usize| vec![m; n_classes];
        let mut components = match &p.components {
            Components::Uniform(m) => uniform(*m),
            Components::PerClass(v) => {
                if v.len() != n_classes {
                    return Err(EmError::DimensionMismatch {
                        what: "components per class vs classes",
                        expected: n_classes,
                        got: v.len(),
                    });
                }
                v.clone()
            }
            Components::Bic { .. } => uniform(1),
        };
        let supervised_only = x_u.nrows() == 0;
        let (lambda, lambda_curve) = match &p.lambda {
            Lambda::Fixed(l) => (*l, None),
            Lambda::Auto(_) if supervised_only => (0.0, None),
            Lambda::Auto(cv) => {
                let (l, curve) = crate::cv::choose_lambda(self, &data, cv, &components)?;
                (l, Some(curve))
            }
        };
        let mut bic = None;
        if let Components::Bic { max } = p.components {
            let mut scores = Vec::new();
            let n_eff = x_l.nrows() as f64 + lambda * x_u.nrows() as f64;
            for m in 1..=max {
                match self.run(&data, lambda, &uniform(m), &mut |_| {}, false) {
                    Ok(run) => {
                        let k = run.model.n_parameters() as f64;
                        scores.push((m, -2.0 * run.log_lik + k * n_eff.ln()));
                    }
                    Err(_) if m > 1 => break,
                    Err(e) => return Err(e),
                }
            }
            let best = scores
                .iter()
                .min_by(|a, b| a.1.total_cmp(&b.1))
                .map_or(1, |s| s.0);
            components = uniform(best);
            bic = Some(scores);
        }
        let mut run = self.run(&data, lambda, &components, observer, !supervised_only)?;
        let diagnostic = if supervised_only {
            None
        } else {
            let sup = self.spec.fit(x_l, y_l, n_classes)?;
            let posteriors = run.take_unlabeled_posteriors();
            Some(diagnose(
                &data,
                lambda,
                &sup,
                &run.model,
                posteriors.as_ref(),
            )?)
        };
        let objective = run.trace.last().map_or(f64::NAN, |t| t.objective);
        Ok(EmFit {
            report: EmReport {
                lambda,
                mode: p.mode,
                iterations: run.iterations,
                converged: run.converged,
                supervised_only,
                n_labeled: x_l.nrows(),
                n_unlabeled: x_u.nrows(),
                objective,
                trace: run.trace,
                lambda_curve,
                components_per_class: components,
                bic,
                diagnostic,
                warnings: run.warnings,
            },
            model: run.model,
        })
    }

    /// One EM run at a fixed λ and fixed components per class. `keep`: the caller will take the
    /// unlabeled rows' final posteriors ([`Run::take_unlabeled_posteriors`]); without it, soft
    /// EM with a split fit never forms them (cross-validation and BIC runs), and the run hands
    /// out an empty matrix.
    pub(crate) fn run(
        &self,
        data: &Data<'_>,
        lambda: f64,
        components: &[usize],
        observer: &mut dyn FnMut(&IterationRecord),
        keep: bool,
    ) -> Result<Run<S::Model>> {
        let Data {
            x_l,
            y_l,
            n_classes,
            x_u,
        } = *data;
        let component_class = component_classes(components);
        let kc = component_class.len();
        let mut offsets = vec![0; n_classes + 1];
        for k in 0..n_classes {
            offsets[k + 1] = offsets[k] + components[k];
        }
        let class_range = |k: usize| offsets[k]..offsets[k + 1];
        // One component per class: the labeled rows' responsibilities are their labels.
        let one_hot_labels = (kc == n_classes).then_some(y_l);
        let mut resp_l = Mat::<f64>::zeros(x_l.nrows(), kc);
        let hard = self.params.mode == EmMode::Hard;
        // Soft EM takes a split fit's statistics of the unlabeled rows in the E-step's pass.
        let split = if hard { None } else { self.spec.split() };
        // The unlabeled rows' buffers are zeroed in parallel: they are the run's first touch of
        // n_u × K fresh values (twice that in hard EM), whose page faults `Mat::zeros` takes on
        // one thread. With a split fit and one component per class (no initial assignments to
        // hold), the posteriors' buffer is made only when they are written, at the end, and
        // only if the caller wants them.
        let lazy = split.is_some() && kc == n_classes;
        let mut resp_u = if lazy {
            Mat::new()
        } else {
            generative::parallel::zeros(x_u.nrows(), kc)
        };
        // Buffers reused by every E-step. Soft EM scores the unlabeled rows into `resp_u` and
        // normalises each chunk there while it is in cache (`estep_all`); only hard EM keeps
        // their log joints apart.
        let mut lj_l = Mat::<f64>::zeros(x_l.nrows(), kc);
        let mut lj_u = if hard {
            generative::parallel::zeros(x_u.nrows(), kc)
        } else {
            Mat::new()
        };

        // Initial θ: the labeled-only fit, split into components by k-means where m_k > 1.
        let mut model = self.initial_model(
            data,
            lambda,
            components,
            &component_class,
            &offsets,
            &mut resp_l,
            &mut resp_u,
        )?;
        let mut trace = Vec::new();
        let mut warnings = Vec::new();
        let mut converged = false;
        let mut iterations = 0;
        let mut previous: Option<f64> = None;
        let mut previous_assign: Option<Vec<usize>> = None;
        // The labeled and unlabeled rows' count, mean and scatter, if the model asks for them.
        let mut shared_moments = None;
        // Soft EM: whether `resp_u` holds the current model's unlabeled posteriors, unscaled (the
        // run's result). An E-step that hands the M-step its statistics does not write them, and
        // an M-step that fits from `resp_u` scales them first. The run's last E-step keeps them
        // or, when the run stops earlier than it could know, a pass at the end recomputes them:
        // the same model's posteriors, the same bits.
        let mut posteriors_kept = true;
        let log_lik = loop {
            // E-step at the current θ, which also evaluates L(θ). The rows are checked on the
            // first pass only; they do not change between iterations. They are scored less a
            // per-row term shared by every component where the model has one (a shared
            // covariance's quadratic form): it cancels from the responsibilities, and its sum
            // over each set, for the objective, comes from the set's moments, computed once
            // (`shared_term_sum`).
            let components = model.components();
            let check = iterations == 0;
            log_joint_pass_then(
                components,
                x_l,
                lj_l.as_mut(),
                Posterior::JointLessShared,
                check,
                |_, _| (),
            )?;
            if hard {
                log_joint_pass_then(
                    components,
                    x_u,
                    lj_u.as_mut(),
                    Posterior::JointLessShared,
                    check,
                    |_, _| (),
                )?;
            }
            let (shared_l, shared_u) = if components.splits_shared_term() {
                let moments =
                    shared_moments.get_or_insert_with(|| (row_moments(x_l), row_moments(x_u)));
                (
                    components.shared_term_sum(&moments.0)?,
                    components.shared_term_sum(&moments.1)?,
                )
            } else {
                (0.0, 0.0)
            };
            let labeled = shared_l
                + estep(
                    lj_l.as_ref(),
                    resp_l.as_mut(),
                    |i| class_range(y_l[i]),
                    1.0,
                    false,
                );
            let (unlabeled, unlabeled_weights, unlabeled_stats) = if hard {
                let u = estep(lj_u.as_ref(), resp_u.as_mut(), |_| 0..kc, lambda, true);
                let w = (0..kc).map(|c| resp_u.col(c).iter().sum::<f64>()).collect();
                (u, w, None)
            } else {
                // The next M-step's statistics of the unlabeled rows, if there is one; then the
                // posteriors are kept only if this is the last E-step (it may yet prove to be).
                let fit = split.filter(|_| iterations < self.params.max_iter);
                // Without a split the M-step reads the posteriors from `resp_u`.
                posteriors_kept = fit.is_none() && (split.is_none() || keep);
                if posteriors_kept {
                    allocate(&mut resp_u, x_u.nrows(), kc);
                }
                let out = posteriors_kept.then(|| resp_u.as_mut());
                estep_all(components, x_u, out, lambda, check, fit)?
            };
            let unlabeled = unlabeled + shared_u;
            let objective = labeled + lambda * unlabeled + model.log_prior_penalty();
            let mut shares = vec![0.0; n_classes];
            for c in 0..kc {
                let s: f64 =
                    (0..x_l.nrows()).map(|i| resp_l[(i, c)]).sum::<f64>() + unlabeled_weights[c];
                shares[component_class[c]] += s;
            }
            let total: f64 = shares.iter().sum();
            shares.iter_mut().for_each(|s| *s /= total);
            let record = IterationRecord {
                iteration: iterations,
                objective,
                labeled,
                unlabeled,
                class_weights: shares,
            };
            observer(&record);
            trace.push(record);
            let assign = hard.then(|| generative::model::argmax_rows(lj_u.as_ref()));
            let stalled = match previous {
                Some(prev) => {
                    // Strictly below tol (as scikit-learn): tol = 0 runs exactly max_iter.
                    self.params.tol > 0.0
                        && ((objective - prev).abs() < self.params.tol * objective.abs()
                            || (hard && assign == previous_assign))
                }
                None => false,
            };
            if stalled || iterations == self.params.max_iter {
                converged = stalled;
                break labeled + lambda * unlabeled;
            }
            previous = Some(objective);
            previous_assign = assign;
            // M-step: one weighted closed-form fit over both sets. A split fit finishes from
            // the labeled rows' statistics and those the E-step took of the unlabeled rows;
            // otherwise the fit reads the unlabeled rows again, with weights λ times the
            // posteriors `estep_all` left in `resp_u` (the products whose sums it returned).
            let fitted = match (split, unlabeled_stats) {
                (Some(split), Some(unlabeled_stats)) => {
                    // The split fit's path never reads or scales `resp_u`.
                    let labeled = labeled_set(x_l, &resp_l, one_hot_labels, true);
                    fold_split(split, &[labeled]).and_then(|mut runs| {
                        runs.extend(unlabeled_stats?);
                        split.finish(runs, x_l.ncols(), kc)
                    })
                }
                _ => {
                    if !hard && lambda != 1.0 {
                        scale_rows(resp_u.as_mut(), lambda);
                        posteriors_kept = false;
                    }
                    self.spec
                        .fit_sets(&both_sets(x_l, &resp_l, one_hot_labels, x_u, &resp_u, true))
                }
            };
            match fitted {
                Ok(next) => {
                    model = ComponentMixture::new(next, component_class.clone(), n_classes)?;
                    iterations += 1;
                }
                Err(e) => {
                    warnings.push(format!(
                        "EM stopped after {iterations} iterations: the M-step failed ({e}); a component collapsed. Returning the last valid parameters; increase the regularisation or use fewer components"
                    ));
                    break labeled + lambda * unlabeled;
                }
            }
        };
        // The run's model is the last E-step's (a failed M-step changed nothing).
        if keep {
            keep_posteriors(
                &mut posteriors_kept,
                model.components(),
                x_u,
                &mut resp_u,
                lambda,
            )?;
        }
        Ok(Run {
            model,
            trace,
            iterations,
            converged,
            warnings,
            log_lik,
            last_estep: if hard {
                LastEstep::LogJoints {
                    log_joints: lj_u,
                    spare: resp_u,
                }
            } else if keep {
                LastEstep::Posteriors(resp_u)
            } else {
                LastEstep::Posteriors(Mat::new())
            },
            component_class,
            n_classes,
        })
    }

    fn initial_model(
        &self,
        data: &Data<'_>,
        lambda: f64,
        components: &[usize],
        component_class: &[usize],
        offsets: &[usize],
        resp_l: &mut Mat<f64>,
        resp_u: &mut Mat<f64>,
    ) -> Result<ComponentMixture<S::Model>> {
        let Data {
            x_l,
            y_l,
            n_classes,
            x_u,
        } = *data;
        let sup = self.spec.fit(x_l, y_l, n_classes)?;
        if components.iter().all(|m| *m == 1) {
            return Ok(ComponentMixture::new(
                sup,
                component_class.to_vec(),
                n_classes,
            )?);
        }
        // Component centres from each class's labeled rows (plus the unlabeled rows the
        // labeled-only fit gives the class, if it has fewer labeled rows than components).
        let use_unlabeled = lambda > 0.0 && x_u.nrows() > 0;
        let predicted = if use_unlabeled {
            sup.predict(x_u)?
        } else {
            Vec::new()
        };
        let mut centres: Vec<(usize, Vec<f64>)> = Vec::new();
        for k in 0..n_classes {
            let mut rows: Vec<(usize, usize)> = (0..x_l.nrows())
                .filter(|i| y_l[*i] == k)
                .map(|i| (0, i))
                .collect();
            if rows.len() < 2 * components[k] {
                rows.extend(
                    predicted
                        .iter()
                        .enumerate()
                        .filter(|(_, p)| **p == k)
                        .map(|(j, _)| (1, j)),
                );
            }
            let (assign, class_centres) = crate::init::kmeans(
                &[x_l, x_u],
                &rows,
                components[k],
                self.params.seed.wrapping_add(k as u64),
            );
            for (&(set, i), a) in rows.iter().zip(&assign) {
                if set == 0 {
                    resp_l[(i, offsets[k] + a)] = 1.0;
                }
            }
            centres.extend(
                class_centres
                    .into_iter()
                    .enumerate()
                    .map(|(a, c)| (offsets[k] + a, c)),
            );
        }
        if use_unlabeled {
            let d = x_u.ncols();
            for i in 0..x_u.nrows() {
                let dist = |c: &[f64]| (0..d).map(|j| (x_u[(i, j)] - c[j]).powi(2)).sum::<f64>();
                let best = centres
                    .iter()
                    .min_by(|a, b| dist(&a.1).total_cmp(&dist(&b.1)))
                    .map_or(0, |c| c.0);
                resp_u[(i, best)] = lambda;
            }
        }
        // Some class has several components here: the labeled rows are split among them.
        let sets = both_sets(x_l, resp_l, None, x_u, resp_u, false);
        Ok(ComponentMixture::new(
            self.spec.fit_sets(&sets)?,
            component_class.to_vec(),
            n_classes,
        )?)
    }
}

/// Class of each component: m_0 zeros, then m_1 ones, and so on.
fn component_classes(components: &[usize]) -> Vec<usize> {
    components
        .iter()
        .enumerate()
        .flat_map(|(k, m)| std::iter::repeat_n(k, *m))
        .collect()
}

/// The labeled and unlabeled rows with their responsibilities, as the two sets of one M-step.
/// `labels`: the labeled rows' classes when each class is one component; their
/// responsibilities are then the labels one-hot, and the set goes to the model as labels, so it
/// takes the same path (and gives the same bits) as the supervised fit. `prechecked`: the rows
/// already passed an E-step with checks, and the responsibilities are the E-step's own (finite,
/// ≥ 0), so the M-step need not scan them again.
fn both_sets<'a>(
    x_l: MatRef<'a, f64>,
    resp_l: &'a Mat<f64>,
    labels: Option<&'a [usize]>,
    x_u: MatRef<'a, f64>,
    resp_u: &'a Mat<f64>,
    prechecked: bool,
) -> [WeightedRows<'a>; 2] {
    let mut unlabeled = WeightedRows::weighted(x_u, resp_u.as_ref());
    unlabeled.prechecked = prechecked;
    [labeled_set(x_l, resp_l, labels, prechecked), unlabeled]
}

/// The labeled rows' set of [`both_sets`].
fn labeled_set<'a>(
    x_l: MatRef<'a, f64>,
    resp_l: &'a Mat<f64>,
    labels: Option<&'a [usize]>,
    prechecked: bool,
) -> WeightedRows<'a> {
    let mut set = match labels {
        Some(y) => WeightedRows::labeled(x_l, y, resp_l.ncols()),
        None => WeightedRows::weighted(x_l, resp_l.as_ref()),
    };
    set.prechecked = prechecked;
    set
}

fn check_data(data: &Data<'_>) -> Result<()> {
    if data.x_l.nrows() == 0 {
        return Err(EmError::NoLabeledRows);
    }
    if data.y_l.len() != data.x_l.nrows() {
        return Err(EmError::DimensionMismatch {
            what: "labels vs labeled rows",
            expected: data.x_l.nrows(),
            got: data.y_l.len(),
        });
    }
    if data.x_u.nrows() > 0 && data.x_u.ncols() != data.x_l.ncols() {
        return Err(EmError::DimensionMismatch {
            what: "features of unlabeled vs labeled rows",
            expected: data.x_l.ncols(),
            got: data.x_u.ncols(),
        });
    }
    if let Some(&y) = data.y_l.iter().find(|y| **y >= data.n_classes) {
        return Err(EmError::InvalidParameter {
            name: "labels",
            rule: "in 0..n_classes",
            value: y.to_string(),
        });
    }
    for k in 0..data.n_classes {
        if !data.y_l.contains(&k) {
            return Err(EmError::ClassWithoutLabels { class: k });
        }
    }
    Ok(())
}

/// E-step over rows in parallel fixed chunks: for row i, responsibilities over the components in
/// `allowed(i)` are `scale · p(c | x_i)` (soft) or `scale` on the most probable one (hard), zero
/// elsewhere. Returns Σ_i ln Σ_{c ∈ allowed(i)} p(x_i, c) (soft) or Σ_i max_c ln p(x_i, c)
/// (hard), summed in chunk order.
fn estep<F>(lj: MatRef<'_, f64>, resp: MatMut<'_, f64>, allowed: F, scale: f64, hard: bool) -> f64
where
    F: Fn(usize) -> Range<usize> + Sync,
{
    let parts: Vec<f64> = run_indexed(row_chunks_mut(resp, CHUNK_ROWS), |chunk, mut r| {
        let r0 = chunk * CHUNK_ROWS;
        let mut acc = 0.0;
        let mut buf = Vec::new();
        for i in 0..r.nrows() {
            let range = allowed(r0 + i);
            for c in 0..r.ncols() {
                r[(i, c)] = 0.0;
            }
            buf.clear();
            buf.extend(range.clone().map(|c| lj[(r0 + i, c)]));
            if hard {
                let (best, max) =
                    buf.iter()
                        .enumerate()
                        .fold(
                            (0, f64::NEG_INFINITY),
                            |b, (c, v)| if *v > b.1 { (c, *v) } else { b },
                        );
                acc += max.max(-f64::MAX);
                r[(i, range.start + best)] = scale;
            } else {
                // One exponential per entry: e_c = exp(v_c − max), lse = max + ln Σ e_c,
                // responsibility = scale · e_c / Σ e_c.
                let max = buf.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                if max.is_finite() {
                    let mut sum = 0.0;
                    for v in buf.iter_mut() {
                        *v = (*v - max).exp();
                        sum += *v;
                    }
                    acc += max + sum.ln();
                    let factor = scale / sum;
                    for (c, e) in range.clone().zip(&buf) {
                        r[(i, c)] = factor * e;
                    }
                } else {
                    acc += log_sum_exp(&buf).max(-f64::MAX);
                    let n = range.len() as f64;
                    for c in range {
                        r[(i, c)] = scale / n;
                    }
                }
            }
        }
        acc
    });
    parts.iter().sum()
}

/// The soft E-step of [`estep`] when every component is allowed for every row (the unlabeled
/// rows), in the pass that scores them: each chunk's joints (less the shared term), written into
/// `resp`, are normalised there while in cache (the normalisation predictions use, one
/// vectorised exponential per entry). Leaves the posteriors in `resp` unscaled (without `resp`,
/// each chunk's are dropped once read); the M-step's weights are `scale` times them. Returns Σ_i ln Σ_c p(x_i, c) and the column sums of the
/// weights, both summed in chunk order, and, with `fit`, the split fit's statistics of the
/// rows with those weights, one per run of chunks, for the next M-step ([`EstepStats`]).
/// Without `fit`, the caller scales `resp` ([`scale_rows`], unless `scale` is 1) and fits.
///
/// Why one pass: scoring into a separate n × K buffer and normalising a copy of it read the
/// joints back from memory and wrote them twice; at n = 1e6, d = 2, K = 10 that took twice as
/// long as scoring (BENCHMARKS.md, thirty-sixth round). Why the statistics too: the M-step
/// read the n × (d + K) rows and weights back from memory once more. And with them, the
/// posteriors need not be written to memory at all, except by the run's last E-step
/// (thirty-seventh round).
fn estep_all<M, F>(
    components: &M,
    x: MatRef<'_, f64>,
    resp: Option<MatMut<'_, f64>>,
    scale: f64,
    check: bool,
    fit: Option<&dyn SplitFit<F>>,
) -> Result<(f64, Vec<f64>, UnlabeledStats)>
where
    M: GenerativeClassifier + ?Sized,
{
    let (k, d) = (components.n_classes(), x.ncols());
    let runs = log_joint_pass_fold(
        components,
        x,
        resp,
        Posterior::JointLessShared,
        check,
        fit.map_or(Runs::ONE_CHUNK, |f| f.runs(d, k)),
        // Per worker: the split fit's scratch and the chunk's weights, when they are not the
        // posteriors themselves (scale ≠ 1).
        || (fit.map(|f| f.scratch()), Vec::<f64>::new()),
        |(scratch, weights), c, xc, mut r| {
            // A row whose joints are all −∞ counts as −f64::MAX (it is uniform above).
            let mut acc = 0.0;
            normalize_chunk(r.as_mut(), true, Some(&mut acc));
            // The weights (scale · posteriors), and their sums and counts of non-zero entries
            // (the split fit's too): the posteriors' own columns when the scale is 1, else
            // their products, column after column, in the worker's buffer.
            let b = r.nrows();
            let own = contiguous_columns(r.as_ref(), 0..k).filter(|_| scale == 1.0);
            if own.is_none() {
                weights.clear();
                for c in 0..k {
                    weights.extend(r.as_ref().col(c).iter().map(|v| v * scale));
                }
            }
            let (columns, w) = match own {
                Some(columns) => (columns, r.as_ref()),
                None => (
                    weights.chunks(b.max(1)).collect(),
                    MatRef::from_column_major_slice(weights, b, k),
                ),
            };
            let totals = density::numerics::sums_and_nonzeros(&columns);
            let col_sums: Vec<f64> = totals.iter().map(|t| t.0).collect();
            let stats = fit.zip(scratch.as_mut()).map(|(fit, scratch)| {
                let chunk = Chunk {
                    set: 1,
                    first_row: c * CHUNK_ROWS,
                    x: xc,
                    resp: w,
                    labels: None,
                    // The rows were checked by this pass's first run, before its first
                    // statistics; the weights are finite and ≥ 0.
                    prechecked: true,
                    weight_totals: Some(&totals),
                    ahead: density::block::RowsAhead::NONE,
                    next_first_column: &[],
                    next_labels: &[],
                };
                fit.chunk_partial(scratch, chunk, d, k)
            });
            EstepStats {
                chunks: vec![(acc, col_sums)],
                stats,
            }
        },
        |acc, part| acc.merge(part, fit),
    )?;
    let mut total = 0.0;
    let mut sums = vec![0.0; k];
    let mut stats = fit.map(|_| Ok(Vec::with_capacity(runs.len())));
    for run in runs {
        for (acc, cs) in &run.chunks {
            total += acc;
            for (s, v) in sums.iter_mut().zip(cs) {
                *s += v;
            }
        }
        if let (Some(Ok(all)), Some(part)) = (stats.as_mut(), run.stats) {
            match part {
                Ok(p) => all.push(p),
                Err(e) => stats = Some(Err(e)),
            }
        }
    }
    Ok((total, sums, stats))
}

/// `m` as an n × k buffer (zeroed in parallel) unless it is one already.
fn allocate(m: &mut Mat<f64>, n: usize, k: usize) {
    if (m.nrows(), m.ncols()) != (n, k) {
        *m = generative::parallel::zeros(n, k);
    }
}

/// Makes `resp` hold the unlabeled posteriors of `components` (their E-step again, without
/// checks or statistics) unless `kept` says it does.
fn keep_posteriors<M: GenerativeClassifier + ?Sized>(
    kept: &mut bool,
    components: &M,
    x: MatRef<'_, f64>,
    resp: &mut Mat<f64>,
    scale: f64,
) -> Result<()> {
    if !*kept {
        allocate(resp, x.nrows(), components.n_classes());
        estep_all(
            components,
            x,
            Some(resp.as_mut()),
            scale,
            false,
            None::<&dyn SplitFit<()>>,
        )?;
        *kept = true;
    }
    Ok(())
}

/// The split fit's statistics of the unlabeled rows that [`estep_all`] took, one per run of
/// chunks, or the first error taking them.
type UnlabeledStats = Option<generative::Result<Vec<Partial>>>;

/// One run of chunks of [`estep_all`]: each chunk's Σ ln-normaliser and weight sums, in order,
/// and the split fit's statistics of the run's rows (or the first error taking them).
struct EstepStats {
    chunks: Vec<(f64, Vec<f64>)>,
    stats: Option<generative::Result<Partial>>,
}

impl EstepStats {
    /// `self` ← `self`'s chunks then `next`'s.
    fn merge<F>(&mut self, next: EstepStats, fit: Option<&dyn SplitFit<F>>) {
        self.chunks.extend(next.chunks);
        match (self.stats.as_mut(), next.stats, fit) {
            (Some(Ok(acc)), Some(Ok(part)), Some(fit)) => fit.merge_partials(acc, part),
            (Some(Ok(_)), Some(Err(e)), _) => self.stats = Some(Err(e)),
            _ => {}
        }
    }
}

/// `m *= scale` entry by entry, in parallel over fixed chunks of rows.
fn scale_rows(m: MatMut<'_, f64>, scale: f64) {
    run_indexed(row_chunks_mut(m, CHUNK_ROWS), |_, mut r| {
        for c in 0..r.ncols() {
            density::block::with_column_mut(r.as_mut(), c, |col| {
                col.iter_mut().for_each(|v| *v *= scale)
            });
        }
    });
}

/// Class-level sums of component posteriors (n × components, component `c` of class
/// `component_class[c]`), in parallel over fixed chunks ([`add_components`]).
fn class_sums(p: MatRef<'_, f64>, component_class: &[usize], n_classes: usize) -> Mat<f64> {
    let (out, _) = generative::parallel::build_by_row_chunks(p.nrows(), n_classes, |chunk, out| {
        add_components(
            p.subrows(chunk * CHUNK_ROWS, out.nrows()),
            component_class,
            out,
        );
    });
    out
}

/// `out[(i, component_class[c])] += r[(i, c)]`, the components in order: each class's
/// posterior is the sum of its components', the same bits wherever it is formed.
fn add_components(r: MatRef<'_, f64>, component_class: &[usize], mut out: MatMut<'_, f64>) {
    for (c, &k) in component_class.iter().enumerate() {
        for i in 0..r.nrows() {
            out[(i, k)] += r[(i, c)];
        }
    }
}

/// With one component per class, [`class_posteriors`] written into `out` (n × K) rather than a
/// new matrix: each chunk's rows of `lj` normalised, the same bits.
fn class_posteriors_into(lj: MatRef<'_, f64>, out: MatMut<'_, f64>) {
    debug_assert_eq!((out.nrows(), out.ncols()), (lj.nrows(), lj.ncols()));
    run_indexed(row_chunks_mut(out, CHUNK_ROWS), |chunk, out| {
        normalised_chunk(lj, chunk, out)
    });
}

/// Chunk `chunk`'s rows of `lj` (one component per class), normalised into `out`.
fn normalised_chunk(lj: MatRef<'_, f64>, chunk: usize, mut out: MatMut<'_, f64>) {
    out.copy_from(lj.subrows(chunk * CHUNK_ROWS, out.nrows()));
    normalize_chunk(out, true, None);
}

/// Class-level posteriors from component-level log joints: each row's components normalised
/// (vectorised, in parallel over fixed chunks, as an E-step) and summed per class.
fn class_posteriors(lj: MatRef<'_, f64>, component_class: &[usize], n_classes: usize) -> Mat<f64> {
    // One component per class means the components are the classes, in class order (as in
    // `ComponentMixture`).
    let identity = lj.ncols() == n_classes;
    let (out, _) =
        generative::parallel::build_by_row_chunks(lj.nrows(), n_classes, |chunk, out| {
            if identity {
                normalised_chunk(lj, chunk, out);
            } else {
                let mut r = lj.subrows(chunk * CHUNK_ROWS, out.nrows()).to_owned();
                normalize_chunk(r.as_mut(), true, None);
                add_components(r.as_ref(), component_class, out);
            }
        });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reference: each row's softmax with the standard library's `exp` (shifted by the row's
    /// maximum), summed per class.
    fn reference(lj: MatRef<'_, f64>, component_class: &[usize], n_classes: usize) -> Mat<f64> {
        let mut out = Mat::<f64>::zeros(lj.nrows(), n_classes);
        for i in 0..lj.nrows() {
            let row: Vec<f64> = (0..lj.ncols()).map(|c| lj[(i, c)]).collect();
            let max = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let e: Vec<f64> = row.iter().map(|v| (v - max).exp()).collect();
            let sum: f64 = e.iter().sum();
            for (c, &k) in component_class.iter().enumerate() {
                out[(i, k)] += if max.is_finite() {
                    e[c] / sum
                } else {
                    1.0 / row.len() as f64
                };
            }
        }
        out
    }

    #[test]
    fn class_posteriors_sum_each_class_components_over_chunks() {
        // More rows than a chunk, huge and all −∞ rows included.
        let n = CHUNK_ROWS + 37;
        let lj = Mat::from_fn(n, 5, |i, c| match i % 97 {
            3 => f64::NEG_INFINITY,
            5 => 1e300 * (c as f64 - 2.0),
            _ => ((i * 31 + c * 7) % 23) as f64 * -0.9 - 700.0 * (i % 2) as f64,
        });
        for (classes, n_classes) in [(vec![0, 1, 2, 3, 4], 5), (vec![0, 0, 1, 2, 1], 3)] {
            let got = class_posteriors(lj.as_ref(), &classes, n_classes);
            let want = reference(lj.as_ref(), &classes, n_classes);
            for i in 0..n {
                let mut row_sum = 0.0;
                for k in 0..n_classes {
                    let (g, w) = (got[(i, k)], want[(i, k)]);
                    assert!(
                        g.is_finite() && (g - w).abs() <= 1e-14,
                        "({i}, {k}): {g} vs {w}"
                    );
                    row_sum += g;
                }
                assert!((row_sum - 1.0).abs() < 1e-14, "row {i} sums to {row_sum}");
            }
        }
        // Into a used buffer, with one component per class: the same bits, whatever the
        // buffer held (NaN here).
        let mut out = Mat::from_fn(n, 5, |_, _| f64::NAN);
        class_posteriors_into(lj.as_ref(), out.as_mut());
        let fresh = class_posteriors(lj.as_ref(), &[0, 1, 2, 3, 4], 5);
        for i in 0..n {
            for k in 0..5 {
                assert_eq!(out[(i, k)].to_bits(), fresh[(i, k)].to_bits(), "({i}, {k})");
            }
        }
    }

    /// A run's unlabeled posteriors, taken on demand (soft EM: the last E-step's buffer with one
    /// component per class, summed into a new matrix with two; hard EM: normalised from its log
    /// joints), are the class posteriors of its final model's log joints scored apart, bit for
    /// bit, on one thread and on two, for λ = 0.5 and 1.
    #[test]
    fn run_posteriors_are_the_class_posteriors_of_its_final_model() {
        use generative::{CovarianceStructure, GaussianParams, HyperParams};
        let n_u = 2 * CHUNK_ROWS + 301;
        let point = |i: usize, j: usize| {
            let h = ((i * 7919 + j * 104_729) % 10_007) as f64 / 10_007.0;
            h + 3.0 * ((i + j) % 3) as f64
        };
        let x_u = Mat::from_fn(n_u, 2, point);
        // Labeled rows 40, 10 and 10 of the three classes (the unlabeled rows are balanced), so
        // that the class weights below depend on λ.
        let source: Vec<usize> = (0..30).chain((10..40).map(|i| 3 * i)).collect();
        let x_l = Mat::from_fn(source.len(), 2, |r, j| point(source[r], j));
        let y_l: Vec<usize> = source.iter().map(|i| i % 3).collect();
        let data = Data {
            x_l: x_l.as_ref(),
            y_l: &y_l,
            n_classes: 3,
            x_u: x_u.as_ref(),
        };
        let spec = GaussianParams::with_structure(CovarianceStructure::Diagonal)
            .check()
            .unwrap();
        for mode in [EmMode::Soft, EmMode::Hard] {
            let em = SemiSupervisedEm::new(
                spec.clone(),
                EmParams {
                    max_iter: 3,
                    mode,
                    ..Default::default()
                },
            )
            .unwrap();
            // λ = 1 keeps the posteriors as the M-step's weights; λ = 0.5 scales them before
            // each M-step, after the E-step that took their sums.
            for lambda in [0.5, 1.0] {
                let mut first: Option<Vec<u64>> = None;
                for threads in [1, 2] {
                    let pool = rayon::ThreadPoolBuilder::new()
                        .num_threads(threads)
                        .build()
                        .unwrap();
                    for components in [vec![1, 1, 1], vec![2, 1, 2]] {
                        let mut run = pool
                            .install(|| em.run(&data, lambda, &components, &mut |_| {}, true))
                            .unwrap();
                        // The reference: the final model's component log joints of the
                        // unlabeled rows, scored apart from the run, then normalised.
                        let mixture = &run.model;
                        let mut lj = Mat::<f64>::zeros(n_u, mixture.components().n_classes());
                        mixture
                            .components()
                            .log_joint_into(x_u.as_ref(), lj.as_mut(), Posterior::JointLessShared)
                            .unwrap();
                        let classes = component_classes(&components);
                        let want = class_posteriors(lj.as_ref(), &classes, 3);
                        let got = pool.install(|| run.take_unlabeled_posteriors());
                        assert_eq!((got.nrows(), got.ncols()), (n_u, 3));
                        let bits: Vec<u64> = (0..3)
                            .flat_map(|k| (0..n_u).map(move |i| (i, k)))
                            .map(|(i, k)| {
                                assert_eq!(
                                    got[(i, k)].to_bits(),
                                    want[(i, k)].to_bits(),
                                    "{mode:?}, λ = {lambda}, {components:?}: ({i}, {k})"
                                );
                                got[(i, k)].to_bits()
                            })
                            .collect();
                        let row_sum = (0..3).map(|k| got[(17, k)]).sum::<f64>();
                        assert!((row_sum - 1.0).abs() < 1e-12, "row 17 sums to {row_sum}");
                        // The last record's class weights are the last E-step's: the labeled
                        // rows' counts plus λ times the unlabeled rows' posterior sums.
                        if mode == EmMode::Soft && components == [1, 1, 1] {
                            let weights = &run.trace.last().unwrap().class_weights;
                            let total = y_l.len() as f64 + lambda * n_u as f64;
                            for (k, w) in weights.iter().enumerate() {
                                let labeled = y_l.iter().filter(|&&y| y == k).count() as f64;
                                let unlabeled: f64 = (0..n_u).map(|i| got[(i, k)]).sum();
                                let want = (labeled + lambda * unlabeled) / total;
                                assert!(
                                    (w - want).abs() < 1e-12,
                                    "λ = {lambda}: class {k} weighs {w}, not {want}"
                                );
                            }
                        }
                        if components == [1, 1, 1] {
                            match &first {
                                None => first = Some(bits),
                                Some(f) => assert!(f == &bits, "1 and 2 threads differ"),
                            }
                        }
                    }
                }
            }
        }
    }

    /// A model's fit without its split: EM must fit it from the stored weights.
    #[derive(Debug, Clone)]
    struct Unsplit<S>(S);

    impl<S: WeightedFit> WeightedFit for Unsplit<S> {
        type Model = S::Model;
        fn fit_sets(&self, sets: &[WeightedRows<'_>]) -> generative::Result<S::Model> {
            self.0.fit_sets(sets)
        }
    }

    /// Unlabeled rows of counts (4 features) from three overlapping Poisson classes (seeded),
    /// and 10 labeled rows of each.
    fn three_count_groups(n_u: usize) -> (Mat<f64>, Vec<usize>, Mat<f64>) {
        use rand::SeedableRng;
        use rand_distr::{Distribution, Poisson};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
        let rates = [
            [3.0, 1.0, 0.5, 0.2],
            [1.0, 3.0, 0.5, 1.0],
            [0.5, 0.8, 2.5, 1.5],
        ];
        let mut draw = |n: usize| {
            let y: Vec<usize> = (0..n).map(|i| i % 3).collect();
            let x = Mat::from_fn(n, 4, |i, j| {
                Poisson::new(rates[y[i]][j]).map_or(0.0, |p| p.sample(&mut rng))
            });
            (x, y)
        };
        let (x_l, y_l) = draw(30);
        let (x_u, _) = draw(n_u);
        (x_l, y_l, x_u)
    }

    /// Unlabeled rows from three overlapping Gaussians (seeded), and 10 labeled rows of each.
    fn three_groups(n_u: usize) -> (Mat<f64>, Vec<usize>, Mat<f64>) {
        use rand::SeedableRng;
        use rand_distr::{Distribution, StandardNormal};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        let mut draw = |n: usize| {
            let y: Vec<usize> = (0..n).map(|i| i % 3).collect();
            let x = Mat::from_fn(n, 2, |i, j| {
                let z: f64 = StandardNormal.sample(&mut rng);
                z * (1.0 + 0.5 * j as f64) + 2.0 * y[i] as f64 * (1.0 - j as f64 * 0.7)
            });
            (x, y)
        };
        let (x_l, y_l) = draw(30);
        let (x_u, _) = draw(n_u);
        (x_l, y_l, x_u)
    }

    /// Soft EM with a split fit takes the next M-step's statistics in the E-step's pass and
    /// does not write the posteriors until the last E-step; the runs are those of the same fit
    /// made apart from the stored weights, bit for bit: the trace, the model and the final
    /// posteriors, for λ = 0.5 and 1, one and two components per class, runs stopped by the
    /// iteration limit and by convergence (whose last posteriors are recomputed), and the
    /// statistics' three forms (full, diagonal, pooled). More unlabeled rows than 32 runs of
    /// one chunk, so that each worker merges runs of two.
    #[test]
    fn split_fits_in_the_e_step_give_the_bits_of_a_separate_fit() {
        use generative::{CovarianceStructure, GaussianParams, HyperParams};
        let n_u = 33 * CHUNK_ROWS + 1001;
        let (x_l, y_l, x_u) = three_groups(n_u);
        let data = Data {
            x_l: x_l.as_ref(),
            y_l: &y_l,
            n_classes: 3,
            x_u: x_u.as_ref(),
        };
        for structure in [
            CovarianceStructure::Full,
            CovarianceStructure::Diagonal,
            CovarianceStructure::Tied,
        ] {
            let spec = GaussianParams::with_structure(structure).check().unwrap();
            assert_split_runs_are_the_runs_apart(spec, &data, 40, &format!("{structure:?}"));
        }
    }

    /// The same for the naive Bayes fits of counts (Bernoulli and multinomial), whose split
    /// fits add each chunk's weighted counts in the E-step's pass.
    #[test]
    fn naive_bayes_split_fits_give_the_bits_of_a_separate_fit() {
        use generative::{BernoulliNbParams, HyperParams, MultinomialNbParams};
        let n_u = 33 * CHUNK_ROWS + 1001;
        let (x_l, y_l, x_u) = three_count_groups(n_u);
        let data = Data {
            x_l: x_l.as_ref(),
            y_l: &y_l,
            n_classes: 3,
            x_u: x_u.as_ref(),
        };
        let spec = BernoulliNbParams::default().check().unwrap();
        assert_split_runs_are_the_runs_apart(spec, &data, 200, "Bernoulli");
        let spec = MultinomialNbParams::default().check().unwrap();
        assert_split_runs_are_the_runs_apart(spec, &data, 200, "multinomial");
    }

    /// Runs `spec` (which must have a split fit) with its split and without it on `data`, for
    /// λ = 0.5 and 1, one and two components for the first class, 3 iterations and up to
    /// `max_iter` with a tolerance (which must converge), and asserts the same bits everywhere.
    fn assert_split_runs_are_the_runs_apart<S>(
        spec: S,
        data: &Data<'_>,
        max_iter: usize,
        what: &str,
    ) where
        S: WeightedFit + Clone,
        S::Model: std::fmt::Debug,
    {
        assert!(spec.split().is_some(), "{what}");
        for (max_iter, tol) in [(3, 0.0), (max_iter, 1e-4)] {
            let params = EmParams {
                max_iter,
                tol,
                ..Default::default()
            };
            let split = SemiSupervisedEm::new(spec.clone(), params.clone()).unwrap();
            let apart = SemiSupervisedEm::new(Unsplit(spec.clone()), params).unwrap();
            for lambda in [0.5, 1.0] {
                for components in [vec![1, 1, 1], vec![2, 1, 1]] {
                    let case = format!("{what}, λ = {lambda}, {components:?}, tol {tol}");
                    let mut a = split
                        .run(data, lambda, &components, &mut |_| {}, true)
                        .unwrap();
                    let mut b = apart
                        .run(data, lambda, &components, &mut |_| {}, true)
                        .unwrap();
                    assert!(a.warnings.is_empty(), "{case}: {:?}", a.warnings);
                    assert_eq!(a.iterations, b.iterations, "{case}");
                    if tol > 0.0 {
                        assert!(a.converged && a.iterations < max_iter, "{case}");
                    } else {
                        assert_eq!(a.iterations, max_iter, "{case}");
                    }
                    let objectives = |r: &Run<_>| -> Vec<u64> {
                        r.trace.iter().map(|t| t.objective.to_bits()).collect()
                    };
                    assert_eq!(objectives(&a), objectives(&b), "{case}");
                    assert_eq!(a.log_lik.to_bits(), b.log_lik.to_bits(), "{case}");
                    // Debug prints each f64 as the shortest string that reads back to it.
                    assert_eq!(format!("{:?}", a.model), format!("{:?}", b.model), "{case}");
                    // A run whose posteriors nobody takes (cross-validation, BIC) is the
                    // same run, and forms none.
                    let mut c = split
                        .run(data, lambda, &components, &mut |_| {}, false)
                        .unwrap();
                    assert_eq!(objectives(&c), objectives(&a), "{case}, not kept");
                    assert_eq!(format!("{:?}", c.model), format!("{:?}", a.model), "{case}");
                    assert_eq!(c.take_unlabeled_posteriors().nrows(), 0, "{case}");
                    let (pa, pb) = (a.take_unlabeled_posteriors(), b.take_unlabeled_posteriors());
                    for k in 0..data.n_classes {
                        for i in 0..data.x_u.nrows() {
                            assert_eq!(
                                pa[(i, k)].to_bits(),
                                pb[(i, k)].to_bits(),
                                "{case}: ({i}, {k})"
                            );
                        }
                    }
                }
            }
        }
    }

    /// A fit that fails on its `fail_at`-th call (counting from 0; the initial fit is the
    /// first), as a collapsed component makes a real one fail, with or without its split.
    struct FailsAt<S> {
        inner: S,
        fits: std::sync::atomic::AtomicUsize,
        fail_at: usize,
        split: bool,
    }

    impl<S> FailsAt<S> {
        fn new(inner: S, fail_at: usize, split: bool) -> Self {
            Self {
                inner,
                fits: 0.into(),
                fail_at,
                split,
            }
        }

        fn fails_now(&self) -> bool {
            self.fits.fetch_add(1, std::sync::atomic::Ordering::Relaxed) == self.fail_at
        }
    }

    const COLLAPSED: generative::GenerativeError =
        generative::GenerativeError::EmptyClass { class: 1 };

    impl<S: WeightedFit> WeightedFit for FailsAt<S> {
        type Model = S::Model;
        fn fit_sets(&self, sets: &[WeightedRows<'_>]) -> generative::Result<S::Model> {
            if self.fails_now() {
                return Err(COLLAPSED);
            }
            self.inner.fit_sets(sets)
        }
        fn split(&self) -> Option<&dyn SplitFit<S::Model>> {
            self.split.then_some(self)
        }
    }

    impl<S: WeightedFit> SplitFit<S::Model> for FailsAt<S> {
        fn runs(&self, d: usize, k: usize) -> generative::parallel::Runs {
            self.inner.split().unwrap().runs(d, k)
        }
        fn scratch(&self) -> generative::split::Scratch {
            self.inner.split().unwrap().scratch()
        }
        fn chunk_partial(
            &self,
            scratch: &mut generative::split::Scratch,
            chunk: Chunk<'_>,
            d: usize,
            k: usize,
        ) -> generative::Result<Partial> {
            self.inner
                .split()
                .unwrap()
                .chunk_partial(scratch, chunk, d, k)
        }
        fn merge_partials(&self, acc: &mut Partial, part: Partial) {
            self.inner.split().unwrap().merge_partials(acc, part)
        }
        fn finish(&self, runs: Vec<Partial>, d: usize, k: usize) -> generative::Result<S::Model> {
            if self.fails_now() {
                return Err(COLLAPSED);
            }
            self.inner.split().unwrap().finish(runs, d, k)
        }
    }

    /// When an M-step fails, the run keeps the last model, and its unlabeled posteriors are that
    /// model's, unscaled, although the failed fit read them scaled by λ (a fit without a split)
    /// or the E-step never wrote them (with one).
    #[test]
    fn a_failed_m_step_leaves_the_last_models_posteriors() {
        use generative::{CovarianceStructure, GaussianParams, HyperParams};
        let n_u = CHUNK_ROWS + 99;
        let (x_l, y_l, x_u) = three_groups(n_u);
        let data = Data {
            x_l: x_l.as_ref(),
            y_l: &y_l,
            n_classes: 3,
            x_u: x_u.as_ref(),
        };
        let spec = GaussianParams::with_structure(CovarianceStructure::Full)
            .check()
            .unwrap();
        let params = EmParams {
            max_iter: 50,
            tol: 0.0,
            ..Default::default()
        };
        for split in [true, false] {
            for lambda in [0.5, 1.0] {
                // The initial fit, two M-steps, then the failure.
                let em =
                    SemiSupervisedEm::new(FailsAt::new(spec.clone(), 3, split), params.clone())
                        .unwrap();
                let mut run = em
                    .run(&data, lambda, &[1, 1, 1], &mut |_| {}, true)
                    .unwrap();
                let case = format!("split {split}, λ = {lambda}");
                assert_eq!(run.iterations, 2, "{case}");
                assert!(run.warnings[0].contains("M-step failed"), "{case}");
                let mut lj = Mat::<f64>::zeros(n_u, 3);
                run.model
                    .components()
                    .log_joint_into(x_u.as_ref(), lj.as_mut(), Posterior::JointLessShared)
                    .unwrap();
                let want = class_posteriors(lj.as_ref(), &[0, 1, 2], 3);
                let got = run.take_unlabeled_posteriors();
                for i in 0..n_u {
                    for k in 0..3 {
                        assert_eq!(
                            got[(i, k)].to_bits(),
                            want[(i, k)].to_bits(),
                            "{case}: ({i}, {k})"
                        );
                    }
                }
            }
        }
    }
}
