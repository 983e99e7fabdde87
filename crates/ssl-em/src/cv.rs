//! Automatic λ (seed 004): stratified k-fold cross-validation on the labeled rows. For every λ in
//! the grid and every fold, EM is fitted on the other folds' labeled rows plus all unlabeled rows
//! and scored by held-out log-loss; the λ with the lowest mean log-loss wins (ties go to the
//! smaller λ, the more conservative choice). The whole curve is returned. If every λ fails (e.g.
//! a fold leaves a class too few rows for its covariance), the first fold's error is returned.

use faer::Mat;
use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;
use rayon::prelude::*;

use generative::{GenerativeClassifier, WeightedFit};

use crate::em::{Data, SemiSupervisedEm};
use crate::params::CvOptions;
use crate::report::LambdaScore;
use crate::{EmError, Result};

/// Probabilities are clipped at this value in the log-loss, as scikit-learn's `log_loss`.
const LOG_LOSS_EPS: f64 = 1e-15;

/// Fold of each labeled row: each class's rows are shuffled (seeded) and dealt round-robin.
fn stratified_folds(y: &[usize], n_classes: usize, folds: usize, seed: u64) -> Vec<usize> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut fold = vec![0; y.len()];
    for k in 0..n_classes {
        let mut rows: Vec<usize> = (0..y.len()).filter(|i| y[*i] == k).collect();
        rows.shuffle(&mut rng);
        for (p, i) in rows.into_iter().enumerate() {
            fold[i] = p % folds;
        }
    }
    fold
}

pub(crate) fn choose_lambda<S: WeightedFit>(
    em: &SemiSupervisedEm<S>,
    data: &Data<'_>,
    cv: &CvOptions,
    components: &[usize],
) -> Result<(f64, Vec<LambdaScore>)> {
    let (y, k) = (data.y_l, data.n_classes);
    let counts: Vec<usize> = (0..k)
        .map(|c| y.iter().filter(|v| **v == c).count())
        .collect();
    let (min_class, &min_count) = counts
        .iter()
        .enumerate()
        .min_by_key(|(_, c)| **c)
        .unwrap_or((0, &0));
    if min_count < 2 {
        return Err(EmError::TooFewForCrossValidation {
            class: min_class,
            count: min_count,
        });
    }
    let folds = cv.folds.min(min_count);
    let fold = stratified_folds(y, k, folds, em.params().seed);
    let d = data.x_l.ncols();
    let jobs: Vec<(usize, usize)> = (0..cv.grid.len())
        .flat_map(|g| (0..folds).map(move |f| (g, f)))
        .collect();
    let results: Vec<Result<(f64, f64)>> = jobs
        .par_iter()
        .map(|&(g, f)| {
            let train: Vec<usize> = (0..y.len()).filter(|i| fold[*i] != f).collect();
            let test: Vec<usize> = (0..y.len()).filter(|i| fold[*i] == f).collect();
            let x_train = Mat::from_fn(train.len(), d, |i, j| data.x_l[(train[i], j)]);
            let y_train: Vec<usize> = train.iter().map(|i| y[*i]).collect();
            let x_test = Mat::from_fn(test.len(), d, |i, j| data.x_l[(test[i], j)]);
            let sub = Data {
                x_l: x_train.as_ref(),
                y_l: &y_train,
                n_classes: k,
                x_u: data.x_u,
            };
            let run = em.run(&sub, cv.grid[g], components, &mut |_| {}, false)?;
            let lp = run.model.predict_log_proba(x_test.as_ref())?;
            let mut loss = 0.0;
            let mut correct = 0;
            for (t, &i) in test.iter().enumerate() {
                loss -= lp[(t, y[i])].max(LOG_LOSS_EPS.ln());
                let best = (0..k)
                    .max_by(|a, b| lp[(t, *a)].total_cmp(&lp[(t, *b)]))
                    .unwrap_or(0);
                correct += usize::from(best == y[i]);
            }
            Ok((loss, correct as f64))
        })
        .collect();
    let n = y.len() as f64;
    let mut curve = Vec::with_capacity(cv.grid.len());
    let mut first_error: Option<EmError> = None;
    for (g, &lambda) in cv.grid.iter().enumerate() {
        let per_fold = &results[g * folds..(g + 1) * folds];
        if let Some(Err(e)) = per_fold.iter().find(|r| r.is_err()) {
            first_error.get_or_insert_with(|| e.clone());
            curve.push(LambdaScore {
                lambda,
                log_loss: None,
                accuracy: None,
            });
            continue;
        }
        let (loss, correct) = per_fold
            .iter()
            .flatten()
            .fold((0.0, 0.0), |a, b| (a.0 + b.0, a.1 + b.1));
        curve.push(LambdaScore {
            lambda,
            log_loss: Some(loss / n),
            accuracy: Some(correct / n),
        });
    }
    let best = curve
        .iter()
        .filter_map(|s| s.log_loss.map(|l| (s.lambda, l)))
        .min_by(|a, b| a.1.total_cmp(&b.1).then(a.0.total_cmp(&b.0)))
        .ok_or_else(|| {
            first_error.unwrap_or(EmError::CrossValidationFailed {
                reason: "no lambda could be scored".into(),
            })
        })?;
    Ok((best.0, curve))
}
