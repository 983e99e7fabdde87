//! Closed-form references, properties (fractional responsibilities = duplicated data,
//! determinism across thread counts, exact serde round trips) and typed errors.

#![allow(clippy::unwrap_used)]

mod common;

use common::{load, max_abs_diff};
use density::numerics::softmax_in_place;
use faer::Mat;
use generative::*;
use proptest::prelude::*;
use rand::SeedableRng;
use rand_distr::{Distribution, StandardNormal};

fn gaussian_data(n: usize, d: usize, k: usize, seed: u64) -> (Mat<f64>, Vec<usize>) {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let y: Vec<usize> = (0..n).map(|i| i % k).collect();
    let x = Mat::from_fn(n, d, |i, j| {
        let z: f64 = StandardNormal.sample(&mut rng);
        z * (1.0 + j as f64 * 0.3) + y[i] as f64 * (j as f64 + 1.0) * 0.7
    });
    (x, y)
}

fn structures() -> [CovarianceStructure; 5] {
    use CovarianceStructure::*;
    [Full, Tied, Diagonal, Spherical, TiedDiagonal]
}

#[test]
fn qda_parameters_equal_sample_means_and_covariances() {
    let (x, y, _) = load("iris");
    let m = GaussianParams::with_structure(CovarianceStructure::Full)
        .check()
        .unwrap()
        .fit(x.as_ref(), &y, 3)
        .unwrap();
    let means = m.means();
    for k in 0..3 {
        let rows: Vec<usize> = (0..x.nrows()).filter(|i| y[*i] == k).collect();
        let n = rows.len() as f64;
        for a in 0..4 {
            let mu_a = rows.iter().map(|i| x[(*i, a)]).sum::<f64>() / n;
            assert!((means[(k, a)] - mu_a).abs() < 1e-12);
            for b in 0..4 {
                let mu_b = rows.iter().map(|i| x[(*i, b)]).sum::<f64>() / n;
                let s = rows
                    .iter()
                    .map(|i| (x[(*i, a)] - mu_a) * (x[(*i, b)] - mu_b))
                    .sum::<f64>()
                    / n;
                assert!((m.covariance(k)[(a, b)] - s).abs() < 1e-12);
            }
        }
        assert!((m.log_priors()[k] - (n / 150.0).ln()).abs() < 1e-15);
    }
}

/// LDA's shared covariance is the textbook pooled one, Σ_k Σ_{i ∈ k} (x_i − μ_k)(x_i − μ_k)ᵀ / n,
/// QDA's each class's own, and Gaussian NB's (without variance smoothing) their diagonals
/// (labeled: by masks up to 4 classes, by class splits at 6), over 35 chunks of rows (their class means differ, so the
/// merges' corrections matter; runs of 2 chunks are merged by a worker before the runs are):
/// from labels (LDA: each chunk's classes scattered about their own chunk means in one pass),
/// from the same labels as one-hot responsibilities, and from a mixture of the two sets; and
/// the same bits on 1 and 2 threads.
#[test]
fn gaussian_covariances_are_the_sample_ones_over_many_chunks() {
    use generative::model::{WeightedFit, WeightedRows};
    let (n, d) = (140_000, 5);
    for k in [2usize, 3, 6] {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(k as u64);
        // Classes whose share changes along the rows, and a drift along the rows, so each
        // chunk's class means and counts differ from the whole's; a large common offset.
        let y: Vec<usize> = (0..n).map(|i| (i * i / 7 + i / 900) % k).collect();
        let x = Mat::from_fn(n, d, |i, j| {
            let z: f64 = StandardNormal.sample(&mut rng);
            1e3 + z * (1.0 + 0.2 * j as f64) + (y[i] * (j + 1)) as f64 + i as f64 * 1e-4
        });
        let mut counts = vec![0.0; k];
        let mut mu = Mat::<f64>::zeros(k, d);
        for i in 0..n {
            counts[y[i]] += 1.0;
            for j in 0..d {
                mu[(y[i], j)] += x[(i, j)];
            }
        }
        for c in 0..k {
            for j in 0..d {
                mu[(c, j)] /= counts[c];
            }
        }
        let mut scatters = vec![Mat::<f64>::zeros(d, d); k];
        for i in 0..n {
            let s = &mut scatters[y[i]];
            for a in 0..d {
                for b in 0..d {
                    s[(a, b)] += (x[(i, a)] - mu[(y[i], a)]) * (x[(i, b)] - mu[(y[i], b)]);
                }
            }
        }
        let mut pooled = Mat::<f64>::zeros(d, d);
        for s in &scatters {
            pooled += s;
        }
        pooled /= faer::Scale(n as f64);
        let resp = model::one_hot(&y, k).unwrap();
        let half = n / 2;
        for structure in [
            CovarianceStructure::Tied,
            CovarianceStructure::Full,
            CovarianceStructure::Diagonal,
        ] {
            // No variance smoothing, so that the diagonal is the sample variances alone.
            let spec = GaussianParams {
                var_smoothing: 0.0,
                ..GaussianParams::with_structure(structure)
            };
            let spec = spec.check().unwrap();
            let fits = |threads| {
                on_threads(threads, || {
                    [
                        ("labeled", spec.fit(x.as_ref(), &y, k).unwrap()),
                        (
                            "one-hot",
                            spec.fit_weighted(x.as_ref(), resp.as_ref()).unwrap(),
                        ),
                        (
                            "mixed",
                            spec.fit_sets(&[
                                WeightedRows::labeled(x.as_ref().subrows(0, half), &y[..half], k),
                                WeightedRows::weighted(
                                    x.as_ref().subrows(half, n - half),
                                    resp.as_ref().subrows(half, n - half),
                                ),
                            ])
                            .unwrap(),
                        ),
                    ]
                })
            };
            let (one, two) = (fits(1), fits(2));
            for ((what, m), (_, m2)) in one.iter().zip(&two) {
                assert_eq!(m, m2, "{structure:?} {what} K={k}: 1 and 2 threads");
                for c in 0..k {
                    for j in 0..d {
                        let (a, b) = (m.means()[(c, j)], mu[(c, j)]);
                        assert!(
                            (a - b).abs() < 1e-12 * b.abs(),
                            "{what} K={k} mean ({c}, {j})"
                        );
                    }
                }
                for c in 0..k {
                    let want = match structure {
                        CovarianceStructure::Tied => pooled.clone(),
                        CovarianceStructure::Diagonal => Mat::from_fn(d, d, |a, b| match a == b {
                            true => scatters[c][(a, a)] / counts[c],
                            false => 0.0,
                        }),
                        _ => &scatters[c] / faer::Scale(counts[c]),
                    };
                    let cov = m.covariance(c);
                    for a in 0..d {
                        for b in 0..d {
                            let (g, w) = (cov[(a, b)], want[(a, b)]);
                            let tol = 1e-11 * (want[(a, a)] * want[(b, b)]).sqrt();
                            let at = format!("{structure:?} {what} K={k} class {c} ({a}, {b})");
                            assert!((g - w).abs() < tol, "{at}: {g} vs {w}");
                        }
                    }
                }
            }
        }
    }
}

/// LDA's shared covariance from soft responsibilities (its EM M-step, one scatter of the rows
/// about their own mixes of the class means) is the weighted average of the covariances that
/// the full structure fits class by class from the same responsibilities (one scatter per
/// class), over many chunks, with rows of weight λ = 0.25 among rows of weight one, some rows
/// nearly hard and some one-hot, and a large common offset; the same bits on 1 and 2 threads.
/// d = 2, K = 10 takes the other form, the class scatters summed (`pooled_soft_scatter_pays`).
#[test]
fn tied_fit_from_soft_responsibilities_pools_the_full_fits_covariances() {
    let n = 30_000;
    for (d, k) in [(6usize, 2usize), (6, 5), (2, 10)] {
        let (x0, y) = gaussian_data(n, d, k, 40 + k as u64);
        let x = Mat::from_fn(n, d, |i, j| 1e4 + x0[(i, j)]);
        let resp = Mat::from_fn(n, k, |i, c| {
            let jitter = ((i * 31 + c * 17) % 13) as f64 / 13.0;
            let row: Vec<f64> = (0..k)
                .map(|e| {
                    let own = e == y[i];
                    match i % 5 {
                        0 if own => 1.0,
                        0 => 0.0,
                        1 if own => 1.0,
                        1 => 1e-12,
                        _ if own => 1.0 + jitter,
                        _ => 0.2 + ((i * 7 + e * 3) % 11) as f64 / 11.0,
                    }
                })
                .collect();
            let scale = if i % 4 == 0 { 0.25 } else { 1.0 };
            scale * row[c] / row.iter().sum::<f64>()
        });
        let fit = |structure, threads| {
            on_threads(threads, || {
                GaussianParams::with_structure(structure)
                    .check()
                    .unwrap()
                    .fit_weighted(x.as_ref(), resp.as_ref())
                    .unwrap()
            })
        };
        let tied = fit(CovarianceStructure::Tied, 1);
        assert_eq!(
            tied,
            fit(CovarianceStructure::Tied, 2),
            "K={k}: 1 and 2 threads"
        );
        let full = fit(CovarianceStructure::Full, 1);
        let weights = full.class_weights();
        let total: f64 = weights.iter().sum();
        let mut want = Mat::<f64>::zeros(d, d);
        for c in 0..k {
            want += full.covariance(c) * faer::Scale(weights[c] / total);
            for j in 0..d {
                let (a, b) = (tied.means()[(c, j)], full.means()[(c, j)]);
                assert!((a - b).abs() <= 1e-12 * b.abs(), "K={k} mean ({c}, {j})");
            }
        }
        let got = tied.covariance(0);
        for a in 0..d {
            for b in 0..d {
                let (g, w) = (got[(a, b)], want[(a, b)]);
                let tol = 1e-11 * (want[(a, a)] * want[(b, b)]).sqrt();
                assert!((g - w).abs() < tol, "K={k} ({a}, {b}): {g} vs {w}");
            }
        }
    }
}

#[test]
fn log_joint_matches_direct_gaussian_formula() {
    let (x, y) = gaussian_data(300, 3, 3, 1);
    for s in structures() {
        let m = GaussianParams::with_structure(s)
            .check()
            .unwrap()
            .fit(x.as_ref(), &y, 3)
            .unwrap();
        let lj = m.log_joint(x.as_ref()).unwrap();
        for k in 0..3 {
            let mvn = density::MultivariateNormal::full(
                (0..3).map(|j| m.means()[(k, j)]).collect(),
                m.covariance(k).as_ref(),
            )
            .unwrap();
            let want = mvn.log_pdf_rows(x.as_ref()).unwrap();
            for i in 0..x.nrows() {
                let w = want[i] + m.log_priors()[k];
                assert!((lj[(i, k)] - w).abs() < 1e-10 * (1.0 + w.abs()), "{s:?}");
            }
        }
    }
}

#[test]
fn each_rows_log_joint_is_the_same_bits_alone_in_a_block_and_in_any_layout() {
    // 1100 rows of 9 features: whole SIMD blocks and a remainder row by row, blocks of rows
    // (512 in the diagonal kernel, above 8 columns or on AVX2; 256 from 6 classes on, where
    // each group's successor is asked for ahead) and the last one shorter, groups of columns
    // (4) and single columns after them. A row alone is always in the remainder; a row-major
    // input or output takes the copying paths. The tied structure too: each row is whitened by
    // its own substitution, then scored by the diagonal kernel.
    let (n, d) = (1100, 9);
    for classes in [3, 7] {
        let (x, y) = gaussian_data(n, d, classes, 9);
        let x_rows = x.transpose().to_owned();
        for s in structures() {
            let m = GaussianParams::with_structure(s)
                .check()
                .unwrap()
                .fit(x.as_ref(), &y, classes)
                .unwrap();
            let all = m.log_joint(x.as_ref()).unwrap();
            let from_rows = m.log_joint(x_rows.transpose()).unwrap();
            let mut into_rows = Mat::<f64>::zeros(classes, n);
            m.log_joint_into(
                x.as_ref(),
                into_rows.as_mut().transpose_mut(),
                model::Posterior::Joint,
            )
            .unwrap();
            for i in 0..n {
                let alone = m.log_joint(x.as_ref().subrows(i, 1)).unwrap();
                for k in 0..classes {
                    let bits = all[(i, k)].to_bits();
                    let at = format!("{s:?}, {classes} classes, row {i} class {k}");
                    assert_eq!(alone[(0, k)].to_bits(), bits, "{at}");
                    assert_eq!(from_rows[(i, k)].to_bits(), bits, "{at}");
                    assert_eq!(into_rows[(k, i)].to_bits(), bits, "{at}");
                }
            }
        }
    }
}

/// LDA's posteriors (its linear scores, then the normalisation) give each row the same bits
/// alone, inside a chunk and across a chunk's edge, for numbers of classes the streamed scores
/// take (2 to 10). Not above 10, where the scores are faer's product, whose order of summation
/// for one row we do not control.
#[test]
fn each_rows_lda_posteriors_are_the_same_bits_alone_and_in_the_whole() {
    let n = parallel::CHUNK_ROWS + 300;
    for k in [2, 3, 7, 10] {
        let (x, y) = gaussian_data(n, 6, k, 21);
        let m = fit_gaussian(CovarianceStructure::Tied, &x, &y, k);
        let all = m.predict_proba(x.as_ref()).unwrap();
        let log_all = m.predict_log_proba(x.as_ref()).unwrap();
        for i in [
            0,
            1,
            8,
            1000,
            parallel::CHUNK_ROWS - 1,
            parallel::CHUNK_ROWS,
            n - 1,
        ] {
            let alone = m.predict_proba(x.as_ref().subrows(i, 1)).unwrap();
            let log_alone = m.predict_log_proba(x.as_ref().subrows(i, 1)).unwrap();
            for c in 0..k {
                assert_eq!(
                    alone[(0, c)].to_bits(),
                    all[(i, c)].to_bits(),
                    "K {k} row {i} class {c}"
                );
                assert_eq!(
                    log_alone[(0, c)].to_bits(),
                    log_all[(i, c)].to_bits(),
                    "K {k} row {i} class {c}"
                );
            }
        }
    }
}

/// A fresh output of 2^k rows takes one line more per column (its K columns' same rows in K
/// cache sets, `density::block::spread_row_capacity`), with the bits of the same posteriors
/// written into a kept buffer whose columns lie exactly n rows apart (which are scored in a
/// worker's own chunk and streamed out).
#[test]
fn fresh_outputs_of_power_of_two_rows_are_spread_with_the_same_bits() {
    let n = 2 * parallel::CHUNK_ROWS;
    for (s, k) in [
        (CovarianceStructure::Tied, 10),
        (CovarianceStructure::Diagonal, 3),
        (CovarianceStructure::Full, 12),
    ] {
        let (x, y) = gaussian_data(n, 5, k, 33);
        let m = fit_gaussian(s, &x, &y, k);
        let fresh = m.predict_proba(x.as_ref()).unwrap();
        assert_eq!(fresh.col_stride() as usize, n + 8, "{s:?}");
        let mut kept = Mat::<f64>::zeros(n, k);
        assert_eq!(kept.col_stride() as usize, n);
        m.log_joint_into(x.as_ref(), kept.as_mut(), model::Posterior::Probability)
            .unwrap();
        for c in 0..k {
            for i in 0..n {
                assert_eq!(
                    fresh[(i, c)].to_bits(),
                    kept[(i, c)].to_bits(),
                    "{s:?} row {i} class {c}"
                );
            }
        }
    }
}

#[test]
fn lda_discriminant_softmax_equals_predict_proba() {
    let (x, y) = gaussian_data(500, 4, 3, 2);
    let m = GaussianParams::default()
        .check()
        .unwrap()
        .fit(x.as_ref(), &y, 3)
        .unwrap();
    let disc = m.linear_discriminant().unwrap();
    let p = m.predict_proba(x.as_ref()).unwrap();
    for i in 0..x.nrows() {
        let row: Vec<f64> = (0..4).map(|j| x[(i, j)]).collect();
        let mut s = disc.scores(&row);
        softmax_in_place(&mut s);
        for k in 0..3 {
            assert!((s[k] - p[(i, k)]).abs() < 1e-12);
        }
    }
    // Binary: sigmoid form.
    let y2: Vec<usize> = y.iter().map(|v| usize::from(*v > 0)).collect();
    let m2 = GaussianParams::default()
        .check()
        .unwrap()
        .fit(x.as_ref(), &y2, 2)
        .unwrap();
    let (w, w0) = m2.linear_discriminant().unwrap().binary().unwrap();
    let p2 = m2.predict_proba(x.as_ref()).unwrap();
    for i in 0..x.nrows() {
        let a = w0 + (0..4).map(|j| w[j] * x[(i, j)]).sum::<f64>();
        assert!((density::numerics::sigmoid(a) - p2[(i, 1)]).abs() < 1e-12);
    }
    assert!(
        GaussianParams::with_structure(CovarianceStructure::Full)
            .check()
            .unwrap()
            .fit(x.as_ref(), &y, 3)
            .unwrap()
            .linear_discriminant()
            .is_none()
    );
}

type FitAndScore = Box<dyn Fn(&Mat<f64>, &Mat<f64>) -> Mat<f64>>;

fn models_for_counts() -> Vec<(&'static str, FitAndScore)> {
    fn lj<M: GenerativeClassifier>(m: M, x: &Mat<f64>) -> Mat<f64> {
        m.log_joint(x.as_ref()).unwrap()
    }
    let mut v: Vec<(&'static str, FitAndScore)> = Vec::new();
    for s in structures() {
        v.push((
            "gaussian",
            Box::new(move |x, r| {
                lj(
                    GaussianParams {
                        structure: s,
                        reg: 1e-6,
                        ..Default::default()
                    }
                    .check()
                    .unwrap()
                    .fit_weighted(x.as_ref(), r.as_ref())
                    .unwrap(),
                    x,
                )
            }),
        ));
    }
    v.push((
        "bernoulli",
        Box::new(|x, r| {
            lj(
                BernoulliNbParams::default()
                    .check()
                    .unwrap()
                    .fit_weighted(x.as_ref(), r.as_ref())
                    .unwrap(),
                x,
            )
        }),
    ));
    v.push((
        "multinomial",
        Box::new(|x, r| {
            let xa = Mat::from_fn(x.nrows(), x.ncols(), |i, j| x[(i, j)].abs().round());
            let m = MultinomialNbParams::default()
                .check()
                .unwrap()
                .fit_weighted(xa.as_ref(), r.as_ref())
                .unwrap();
            m.log_joint(xa.as_ref()).unwrap()
        }),
    ));
    v
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]
    /// Integer weights w_i on row i give the same model as row i repeated w_i times.
    #[test]
    fn fractional_responsibilities_equal_duplicated_data(seed in 0u64..1000, weights in prop::collection::vec(0u32..4, 40)) {
        let (x, y) = gaussian_data(40, 3, 2, seed);
        // Responsibilities split each row between classes in thirds, scaled by its weight.
        let resp = Mat::from_fn(40, 2, |i, k| {
            let own = if y[i] == k { 2.0 / 3.0 } else { 1.0 / 3.0 };
            own * weights[i] as f64
        });
        let mut rows = Vec::new();
        for i in 0..40 {
            for _ in 0..weights[i] {
                rows.push(i);
            }
        }
        prop_assume!(rows.len() > 12);
        let xd = Mat::from_fn(rows.len(), 3, |r, j| x[(rows[r], j)]);
        let rd = Mat::from_fn(rows.len(), 2, |r, k| if y[rows[r]] == k { 2.0 / 3.0 } else { 1.0 / 3.0 });
        for (name, f) in models_for_counts() {
            let a = f(&x, &resp);
            let b = f(&xd, &rd);
            // Compare on the original rows: duplicated-data rows map back to them.
            let b_orig = Mat::from_fn(40, 2, |i, k| {
                rows.iter().position(|r| *r == i).map_or(a[(i, k)], |p| b[(p, k)])
            });
            let diff = max_abs_diff(a.as_ref(), b_orig.as_ref());
            prop_assert!(diff < 1e-8, "{} differs by {}", name, diff);
        }
    }
}

#[test]
fn fits_and_predictions_are_bit_identical_on_one_and_two_threads() {
    let (x, y) = gaussian_data(30_000, 5, 3, 3);
    let run = |threads: usize| {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        pool.install(|| {
            let mut out = Vec::new();
            for s in structures() {
                let p = GaussianParams {
                    structure: s,
                    shrinkage: if s == CovarianceStructure::Full {
                        Some(Shrinkage::LedoitWolf)
                    } else {
                        None
                    },
                    ..Default::default()
                };
                let m = p.check().unwrap().fit(x.as_ref(), &y, 3).unwrap();
                out.push(serde_json::to_string(&m).unwrap());
                let lj = m.log_joint(x.as_ref()).unwrap();
                out.push(format!(
                    "{:?}",
                    (0..x.nrows())
                        .map(|i| lj[(i, 0)].to_bits())
                        .collect::<Vec<_>>()
                ));
            }
            // Six classes: the diagonal and tied fits take their class sums by rows.
            let y6: Vec<usize> = (0..x.nrows()).map(|i| (i + i / 7) % 6).collect();
            for s in structures() {
                let m = GaussianParams::with_structure(s)
                    .check()
                    .unwrap()
                    .fit(x.as_ref(), &y6, 6)
                    .unwrap();
                out.push(serde_json::to_string(&m).unwrap());
            }
            let xb = Mat::from_fn(x.nrows(), 5, |i, j| x[(i, j)].abs().floor());
            let m = MultinomialNbParams::default()
                .check()
                .unwrap()
                .fit(xb.as_ref(), &y, 3)
                .unwrap();
            out.push(serde_json::to_string(&m).unwrap());
            out
        })
    };
    assert_eq!(run(1), run(2));
}

/// `predict` takes each chunk's argmax in a worker's buffer. Over several chunks (the last
/// partial), on one and two threads and in both layouts, it must give every row the argmax of
/// the scores `predict_proba` normalises, and, where those are the log joints (all but LDA), of
/// the log joints; for the shared covariances, whose scores are their linear discriminants,
/// the argmax of their log joints too on this data, and of their posteriors.
#[test]
fn predict_is_the_argmax_of_the_posterior_scores_over_chunks_and_threads() {
    // Past 256 classes, chunks are scored in blocks of rows (13 rows at K = 300).
    for (n, k) in [(2 * 4096 + 100, 5), (4096 + 700, 300)] {
        predict_is_the_argmax_of_the_posterior_scores(n, k);
    }
}

fn predict_is_the_argmax_of_the_posterior_scores(n: usize, k: usize) {
    let d = 4;
    let (x, y) = gaussian_data(n, d, k, 31);
    let argmax = |m: &Mat<f64>| -> Vec<usize> {
        (0..m.nrows())
            .map(|i| (1..m.ncols()).fold(0, |b, j| if m[(i, j)] > m[(i, b)] { j } else { b }))
            .collect()
    };
    // Counts of k features, each class's own one the largest.
    let counts = Mat::from_fn(n, k, |i, j| match j == y[i] {
        true => (5 + i % 3) as f64,
        false => ((i * 7 + j * 3) % 4) as f64,
    });
    let binary = counts.as_ref().map(|v| f64::from(*v > 2.5));
    let mut cases: Vec<(String, Box<dyn GenerativeClassifier>, &Mat<f64>)> = Vec::new();
    for s in structures() {
        cases.push((format!("{s:?}"), Box::new(fit_gaussian(s, &x, &y, k)), &x));
    }
    let mnb = MultinomialNbParams::default().check().unwrap();
    let bnb = BernoulliNbParams::default().check().unwrap();
    cases.push((
        "multinomial".into(),
        Box::new(mnb.fit(counts.as_ref(), &y, k).unwrap()),
        &counts,
    ));
    cases.push((
        "Bernoulli".into(),
        Box::new(bnb.fit(binary.as_ref(), &y, k).unwrap()),
        &binary,
    ));
    for (name, m, x) in &cases {
        let mut scores = Mat::<f64>::zeros(n, k);
        m.log_joint_into(x.as_ref(), scores.as_mut(), model::Posterior::Scores)
            .unwrap();
        let want = argmax(&scores);
        assert!(
            k > 5 || (0..k).all(|c| want.contains(&c)),
            "{name}: every class is predicted"
        );
        // The log-likelihood is the sum of the rows' log-sum-exp of their joints, in row order
        // within each chunk of 4096 rows, then over the chunks in order.
        let joints = m.log_joint(x.as_ref()).unwrap();
        let total = chunked_total(&model::row_log_sum_exp(joints.as_ref()), k);
        assert_eq!(
            m.log_likelihood(x.as_ref()).unwrap(),
            total,
            "{name}: log-likelihood"
        );
        assert_eq!(
            want,
            argmax(&m.log_joint(x.as_ref()).unwrap()),
            "{name}: joints"
        );
        assert_eq!(
            want,
            argmax(&m.predict_proba(x.as_ref()).unwrap()),
            "{name}: posteriors"
        );
        // The shared covariances' scores are their linear discriminants.
        if !name.starts_with("Tied") {
            assert_eq!(
                scores,
                m.log_joint(x.as_ref()).unwrap(),
                "{name}: scores are joints"
            );
        }
        let rows = x.transpose().to_owned();
        for threads in [1, 2] {
            for (layout, view) in [("columns", x.as_ref()), ("rows", rows.transpose())] {
                let got = on_threads(threads, || m.predict(view).unwrap());
                assert_eq!(got, want, "{name}, {layout}, {threads} threads");
            }
        }
        assert_eq!(
            m.predict(x.as_ref().subrows(0, 0)).unwrap(),
            Vec::<usize>::new()
        );
    }
}

/// Σ of `terms` in row order within each chunk of 4096 (past 256 of the `k` classes, within
/// each block of 4096 · 256 / k rows of a chunk), then over those in order: how
/// `log_likelihood` adds its rows' terms.
fn chunked_total(terms: &[f64], k: usize) -> f64 {
    let block = if k <= 256 {
        4096
    } else {
        (4096 * 256 / k).max(8)
    };
    terms
        .chunks(4096)
        .flat_map(|chunk| chunk.chunks(block))
        .map(|block| block.iter().sum::<f64>())
        .sum()
}

/// `log_likelihood` reduces each chunk's joints in a worker's buffer: over several chunks, on
/// one and two threads and in both layouts, it must be the sum of every row's log-sum-exp of
/// the n × K joints, in row order within each chunk and then over the chunks in order. The
/// order is checked too: for some structure here, the rows' terms added in one run from the
/// first row to the last give other bits.
#[test]
fn log_likelihood_is_the_sum_of_the_rows_terms_over_chunks_and_threads() {
    let (n, d, k) = (2 * 4096 + 100, 3, 4);
    let (x, y) = gaussian_data(n, d, k, 41);
    let rows = x.transpose().to_owned();
    let mut orders_differ = false;
    for s in structures() {
        let m = fit_gaussian(s, &x, &y, k);
        let joints = m.log_joint(x.as_ref()).unwrap();
        let terms = model::row_log_sum_exp(joints.as_ref());
        let want = chunked_total(&terms, k);
        let in_one_run: f64 = terms.iter().sum();
        orders_differ |= want.to_bits() != in_one_run.to_bits();
        for threads in [1, 2] {
            for view in [x.as_ref(), rows.transpose()] {
                let got = on_threads(threads, || m.log_likelihood(view).unwrap());
                assert_eq!(got.to_bits(), want.to_bits(), "{s:?}, {threads} threads");
            }
        }
        let first: f64 = model::row_log_sum_exp(joints.as_ref().subrows(0, 4096))
            .iter()
            .sum();
        let got = m.log_likelihood(x.as_ref().subrows(0, 4096)).unwrap();
        assert_eq!(got.to_bits(), first.to_bits(), "{s:?}, one chunk");
    }
    assert!(
        orders_differ,
        "some structure's sum tells the two orders apart"
    );
}

#[test]
fn serde_round_trips_exactly() {
    let (x, y, _) = load("wine");
    let check = |json: String, lj: Mat<f64>, back: &dyn Fn(&str) -> Mat<f64>| {
        let again = back(&json);
        assert_eq!(max_abs_diff(lj.as_ref(), again.as_ref()), 0.0);
    };
    for s in structures() {
        let m = GaussianParams {
            structure: s,
            ..Default::default()
        }
        .check()
        .unwrap()
        .fit(x.as_ref(), &y, 3)
        .unwrap();
        let json = serde_json::to_string(&m).unwrap();
        let back: GaussianClassifier = serde_json::from_str(&json).unwrap();
        assert_eq!(back, m);
        back.validate().unwrap();
        check(json, m.log_joint(x.as_ref()).unwrap(), &|j| {
            serde_json::from_str::<GaussianClassifier>(j)
                .unwrap()
                .log_joint(x.as_ref())
                .unwrap()
        });
    }
    let b = BernoulliNbParams {
        binarize: Some(2.0),
        ..Default::default()
    }
    .check()
    .unwrap()
    .fit(x.as_ref(), &y, 3)
    .unwrap();
    let back: BernoulliNaiveBayes =
        serde_json::from_str(&serde_json::to_string(&b).unwrap()).unwrap();
    assert_eq!(back, b);
    let kinds = vec![FeatureKind::Gaussian; 13];
    let mx = MixedNbParams::new(kinds)
        .check()
        .unwrap()
        .fit(x.as_ref(), &y, 3)
        .unwrap();
    let back: MixedNaiveBayes = serde_json::from_str(&serde_json::to_string(&mx).unwrap()).unwrap();
    assert_eq!(back, mx);
}

#[test]
fn damaged_models_fail_validation() {
    let (x, y, _) = load("iris");
    let m = GaussianParams::default()
        .check()
        .unwrap()
        .fit(x.as_ref(), &y, 3)
        .unwrap();
    let mut v: serde_json::Value = serde_json::to_value(&m).unwrap();
    v["means"].as_array_mut().unwrap().pop();
    let bad: GaussianClassifier = serde_json::from_value(v).unwrap();
    assert!(matches!(
        bad.validate(),
        Err(GenerativeError::DimensionMismatch { what: "means", .. })
    ));
}

/// Dimensions whose products overflow `usize` (so that they wrapped to the lengths of the
/// parameters given) and models without features fail validation, for every model; before,
/// they passed, and the first prediction indexed out of bounds.
#[test]
fn models_with_wrapped_dimensions_fail_validation() {
    fn rejected<M>(model: &M, edit: impl Fn(&mut serde_json::Value), what: &str)
    where
        M: GenerativeClassifier + serde::Serialize + serde::de::DeserializeOwned,
    {
        let mut v = serde_json::to_value(model).unwrap();
        edit(&mut v);
        let bad: M = serde_json::from_value(v).unwrap();
        assert!(
            matches!(
                bad.validate(),
                Err(GenerativeError::InvalidParameter { .. })
            ),
            "{what}: {:?}",
            bad.validate()
        );
    }
    // `n` features, and the parameters in `fields` emptied: with 2 classes, 2^63 features
    // wraps every product of dimensions to 0.
    fn features(n: u64, fields: &'static [&'static str]) -> impl Fn(&mut serde_json::Value) {
        move |v| {
            v["n_features"] = serde_json::json!(n);
            for f in fields {
                v[*f] = serde_json::json!([]);
            }
        }
    }
    let (x, y) = gaussian_data(60, 2, 2, 5);
    for s in structures() {
        let m = GaussianParams::with_structure(s)
            .check()
            .unwrap()
            .fit(x.as_ref(), &y, 2)
            .unwrap();
        for n in [1 << 63, 0] {
            rejected(
                &m,
                features(n, &["means", "factors"]),
                &format!("{s:?} {n}"),
            );
        }
    }
    let counts = Mat::from_fn(60, 2, |i, j| ((i + j) % 3) as f64);
    let b = BernoulliNbParams::default()
        .check()
        .unwrap()
        .fit(counts.as_ref(), &y, 2)
        .unwrap();
    rejected(&b, features(1 << 63, &["log_p", "log_1mp"]), "Bernoulli");
    let mnb = MultinomialNbParams::default()
        .check()
        .unwrap()
        .fit(counts.as_ref(), &y, 2)
        .unwrap();
    for n in [1 << 63, 0] {
        rejected(
            &mnb,
            features(n, &["log_theta"]),
            &format!("multinomial {n}"),
        );
    }
    let cnb = CategoricalNbParams::default()
        .check()
        .unwrap()
        .fit(counts.as_ref(), &y, 2)
        .unwrap();
    // 2 classes × (2^63 + 2^63 + 3) categories wraps to 6 entries, at offsets 0 and 0.
    rejected(
        &cnb,
        |v| {
            v["n_categories"] = serde_json::json!([1u64 << 63, (1u64 << 63) + 3]);
            v["offsets"] = serde_json::json!([0, 0]);
            let six: Vec<f64> = v["log_theta"].as_array().unwrap()[..6]
                .iter()
                .map(|t| t.as_f64().unwrap())
                .collect();
            v["log_theta"] = serde_json::json!(six);
        },
        "categorical",
    );
    rejected(
        &cnb,
        |v| v["n_categories"] = serde_json::json!([0, 3]),
        "categorical, a feature without categories",
    );
}

#[test]
fn mixed_naive_bayes_with_all_gaussian_features_equals_gaussian_nb() {
    let (x, y, _) = load("iris");
    let gnb = GaussianParams::with_structure(CovarianceStructure::Diagonal)
        .check()
        .unwrap()
        .fit(x.as_ref(), &y, 3)
        .unwrap();
    let mixed = MixedNbParams::new(vec![FeatureKind::Gaussian; 4])
        .check()
        .unwrap()
        .fit(x.as_ref(), &y, 3)
        .unwrap();
    let d = max_abs_diff(
        gnb.predict_proba(x.as_ref()).unwrap().as_ref(),
        mixed.predict_proba(x.as_ref()).unwrap().as_ref(),
    );
    assert!(d < 1e-6, "{d}");
}

#[test]
fn mixed_naive_bayes_uses_each_family() {
    // Column 0 Gaussian, 1 Poisson, 2 Bernoulli, 3 categorical, 4 exponential.
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(9);
    let n = 4000;
    let y: Vec<usize> = (0..n).map(|i| i % 2).collect();
    let x = Mat::from_fn(n, 5, |i, j| {
        let c = y[i] as f64;
        match j {
            0 => rand_distr::Normal::new(c * 2.0, 1.0)
                .unwrap()
                .sample(&mut rng),
            1 => rand_distr::Poisson::new(2.0 + 3.0 * c)
                .unwrap()
                .sample(&mut rng),
            2 => f64::from(u8::from(
                rand_distr::Bernoulli::new(0.2 + 0.6 * c)
                    .unwrap()
                    .sample(&mut rng),
            )),
            3 => {
                (rand_distr::Uniform::new(0.0, 3.0).unwrap().sample(&mut rng) as u32 + y[i] as u32)
                    as f64
            }
            _ => rand_distr::Exp::new(1.0 + c).unwrap().sample(&mut rng),
        }
    });
    use FeatureKind::*;
    let m = MixedNbParams::new(vec![Gaussian, Poisson, Bernoulli, Categorical, Exponential])
        .check()
        .unwrap()
        .fit(x.as_ref(), &y, 2)
        .unwrap();
    match m.cell(1, 1) {
        generative::mixed::FeatureDensity::Poisson(p) => assert!((p.rate() - 5.0).abs() < 0.15),
        other => panic!("{other:?}"),
    }
    match m.cell(0, 4) {
        generative::mixed::FeatureDensity::Exponential(e) => assert!((e.rate() - 1.0).abs() < 0.06),
        other => panic!("{other:?}"),
    }
    let pred = m.predict(x.as_ref()).unwrap();
    let acc = pred.iter().zip(&y).filter(|(a, b)| a == b).count() as f64 / n as f64;
    assert!(acc > 0.85, "accuracy {acc}");
    let bad = Mat::from_fn(1, 5, |_, j| if j == 2 { 0.5 } else { 1.0 });
    assert!(matches!(
        m.predict(bad.as_ref()),
        Err(GenerativeError::InvalidInput { row: 0, col: 2, .. })
    ));
}

#[test]
fn edge_cases_are_typed_errors() {
    let (x, y) = gaussian_data(20, 3, 2, 4);
    let qda = GaussianParams::with_structure(CovarianceStructure::Full)
        .check()
        .unwrap();
    // Class 1 with only 3 points in 3 dimensions.
    let mut y_few = vec![0; 20];
    for i in [1, 5, 9] {
        y_few[i] = 1;
    }
    let e = qda.fit(x.as_ref(), &y_few, 2).unwrap_err();
    assert!(matches!(
        e,
        GenerativeError::SingularCovariance { class: 1, .. }
    ));
    assert!(e.to_string().contains("reg"), "{e}");
    // With ridge it fits.
    GaussianParams {
        structure: CovarianceStructure::Full,
        reg: 1e-3,
        ..Default::default()
    }
    .check()
    .unwrap()
    .fit(x.as_ref(), &y_few, 2)
    .unwrap();
    // Duplicated rows: all rows identical.
    let dup = Mat::from_fn(20, 3, |_, j| j as f64);
    assert!(matches!(
        GaussianParams::default()
            .check()
            .unwrap()
            .fit(dup.as_ref(), &y, 2),
        Err(GenerativeError::SingularPooledCovariance)
    ));
    // Zero-variance feature without smoothing.
    let zv = Mat::from_fn(20, 3, |i, j| if j == 1 { 5.0 } else { x[(i, j)] });
    let gnb0 = GaussianParams {
        structure: CovarianceStructure::Diagonal,
        var_smoothing: 0.0,
        ..Default::default()
    };
    assert!(matches!(
        gnb0.check().unwrap().fit(zv.as_ref(), &y, 2),
        Err(GenerativeError::ZeroVariance { feature: 1, .. })
    ));
    // ...but the default var_smoothing handles it.
    GaussianParams::with_structure(CovarianceStructure::Diagonal)
        .check()
        .unwrap()
        .fit(zv.as_ref(), &y, 2)
        .unwrap();
    // One class only / K = 1 / empty.
    assert!(matches!(
        qda.fit(x.as_ref(), &[0; 20], 2),
        Err(GenerativeError::EmptyClass { class: 1 })
    ));
    assert!(matches!(
        qda.fit(x.as_ref(), &[0; 20], 1),
        Err(GenerativeError::TooFewClasses { n_classes: 1 })
    ));
    let empty = Mat::<f64>::zeros(0, 3);
    assert!(matches!(
        qda.fit(empty.as_ref(), &[], 2),
        Err(GenerativeError::Empty { .. })
    ));
    // NaN / inf in X.
    let mut xn = x.clone();
    xn[(7, 2)] = f64::NAN;
    assert!(matches!(
        qda.fit(xn.as_ref(), &y, 2),
        Err(GenerativeError::NonFiniteInput { row: 7, col: 2, .. })
    ));
    let m = GaussianParams::default()
        .check()
        .unwrap()
        .fit(x.as_ref(), &y, 2)
        .unwrap();
    xn[(7, 2)] = f64::INFINITY;
    assert!(matches!(
        m.predict(xn.as_ref()),
        Err(GenerativeError::NonFiniteInput { row: 7, col: 2, .. })
    ));
    // Negative or mismatched responsibilities.
    let mut r = one_hot(&y, 2).unwrap();
    r[(3, 0)] = -0.5;
    assert!(matches!(
        qda.fit_weighted(x.as_ref(), r.as_ref()),
        Err(GenerativeError::InvalidResponsibility {
            row: 3,
            class: 0,
            ..
        })
    ));
    let r = Mat::<f64>::zeros(19, 2);
    assert!(matches!(
        qda.fit_weighted(x.as_ref(), r.as_ref()),
        Err(GenerativeError::DimensionMismatch { .. })
    ));
    // Wrong number of columns at predict.
    assert!(matches!(
        m.predict(Mat::<f64>::zeros(2, 4).as_ref()),
        Err(GenerativeError::DimensionMismatch { .. })
    ));
    // Invalid hyper-parameters name the parameter.
    let e = GaussianParams {
        reg: -0.001,
        ..Default::default()
    }
    .check()
    .unwrap_err();
    assert_eq!(e.to_string(), "`reg` must be >= 0, got -0.001");
    assert!(
        BernoulliNbParams {
            alpha: -1.0,
            ..Default::default()
        }
        .check()
        .is_err()
    );
    assert!(
        GaussianParams {
            priors: Priors::Fixed(vec![0.5, 0.6]),
            ..Default::default()
        }
        .check()
        .is_err()
    );
    // Negative counts for multinomial NB.
    let neg = Mat::from_fn(4, 2, |i, j| if i == 2 && j == 1 { -1.0 } else { 1.0 });
    let e = MultinomialNbParams::default()
        .check()
        .unwrap()
        .fit(neg.as_ref(), &[0, 1, 0, 1], 2)
        .unwrap_err();
    assert!(matches!(
        e,
        GenerativeError::InvalidInput { row: 2, col: 1, .. }
    ));
}

#[test]
fn fitting_from_labels_equals_fitting_from_the_one_hot_matrix() {
    // `fit` expands labels one chunk at a time instead of building the n × K matrix; the
    // models must be the ones the explicit one-hot responsibilities give.
    let (x, y) = gaussian_data(10_000, 3, 3, 21);
    let r = one_hot(&y, 3).unwrap();
    let close = |a: Mat<f64>, b: Mat<f64>| {
        let scale = a
            .col_iter()
            .flat_map(|c| c.iter().copied())
            .fold(1.0f64, |m, v| m.max(v.abs()));
        let diff = max_abs_diff(a.as_ref(), b.as_ref());
        assert!(diff <= 1e-12 * scale, "{diff}");
    };
    // Row-major input, and a class holding most rows (the weighted path then no longer skips
    // the zero-weight rows), fit the same models as well.
    let x_rows = x.transpose().to_owned();
    let y_skewed: Vec<usize> = y
        .iter()
        .enumerate()
        .map(|(i, &l)| if i % 10 == 0 { l } else { 0 })
        .collect();
    let r_skewed = one_hot(&y_skewed, 3).unwrap();
    for s in structures() {
        let spec = GaussianParams::with_structure(s).check().unwrap();
        let a = spec.fit(x.as_ref(), &y, 3).unwrap();
        let b = spec.fit_weighted(x.as_ref(), r.as_ref()).unwrap();
        close(
            a.log_joint(x.as_ref()).unwrap(),
            b.log_joint(x.as_ref()).unwrap(),
        );
        let a = spec.fit(x_rows.transpose(), &y_skewed, 3).unwrap();
        let b = spec.fit_weighted(x.as_ref(), r_skewed.as_ref()).unwrap();
        close(
            a.log_joint(x.as_ref()).unwrap(),
            b.log_joint(x.as_ref()).unwrap(),
        );
    }
    // Every way a labeled Gaussian fit reads its classes' rows. At d = 3: full structures sum
    // each class's products by mask (`density::moments::grouped_cross_products`) for 2 and 3
    // classes, diagonal ones for 2 (`grouped_sums_sq`) and split the chunk into class blocks
    // (`density::scatter::ClassBlocks`) for 3 (packed by mask with AVX-512) and 6 (by index).
    // At d = 8, full structures split the chunk the same way, but for the tied one with
    // AVX-512, which centres each column by its rows' class means into one block
    // (`RowBlock::load_centred_by_group`).
    let y2: Vec<usize> = y.iter().map(|&l| l.min(1)).collect();
    let r2 = one_hot(&y2, 2).unwrap();
    let y6: Vec<usize> = y
        .iter()
        .enumerate()
        .map(|(i, &l)| l + 3 * (i % 2))
        .collect();
    let r6 = one_hot(&y6, 6).unwrap();
    let (x8, _) = gaussian_data(10_000, 8, 3, 23);
    let x8_rows = x8.transpose().to_owned();
    for s in structures() {
        let spec = GaussianParams::with_structure(s).check().unwrap();
        for (x, x_rows) in [(&x, &x_rows), (&x8, &x8_rows)] {
            for (labels, r, k) in [(&y2, &r2, 2), (&y, &r, 3), (&y6, &r6, 6)] {
                for xv in [x.as_ref(), x_rows.transpose()] {
                    let a = spec.fit(xv, labels, k).unwrap();
                    let b = spec.fit_weighted(x.as_ref(), r.as_ref()).unwrap();
                    close(
                        a.log_joint(x.as_ref()).unwrap(),
                        b.log_joint(x.as_ref()).unwrap(),
                    );
                }
            }
        }
    }
    let counts = Mat::from_fn(10_000, 3, |i, j| x[(i, j)].abs().round());
    let mnb = MultinomialNbParams::default().check().unwrap();
    let a = mnb.fit(counts.as_ref(), &y, 3).unwrap();
    let b = mnb.fit_weighted(counts.as_ref(), r.as_ref()).unwrap();
    close(
        a.log_joint(counts.as_ref()).unwrap(),
        b.log_joint(counts.as_ref()).unwrap(),
    );
    // Wider counts, in several chunks: the labeled sums (one SIMD pass per column, the count
    // check fused into it) must agree too, and the check must name the first bad value of the
    // whole input: negative, NaN or +∞.
    let (x_wide, _) = gaussian_data(10_000, 12, 3, 22);
    let wide = Mat::from_fn(10_000, 12, |i, j| x_wide[(i, j)].abs().round());
    let a = mnb.fit(wide.as_ref(), &y, 3).unwrap();
    let b = mnb.fit_weighted(wide.as_ref(), r.as_ref()).unwrap();
    close(
        a.log_joint(wide.as_ref()).unwrap(),
        b.log_joint(wide.as_ref()).unwrap(),
    );
    let mut bad_counts = wide.clone();
    bad_counts[(9_000, 3)] = f64::NAN;
    bad_counts[(5_000, 10)] = -2.0;
    assert!(matches!(
        mnb.fit(bad_counts.as_ref(), &y, 3),
        Err(GenerativeError::InvalidInput {
            row: 5_000,
            col: 10,
            ..
        })
    ));
    bad_counts[(5_000, 10)] = 2.0;
    assert!(matches!(
        mnb.fit(bad_counts.as_ref(), &y, 3),
        Err(GenerativeError::NonFiniteInput {
            row: 9_000,
            col: 3,
            ..
        })
    ));
    bad_counts[(9_000, 3)] = 1.0;
    bad_counts[(9_500, 7)] = f64::INFINITY;
    assert!(matches!(
        mnb.fit(bad_counts.as_ref(), &y, 3),
        Err(GenerativeError::NonFiniteInput {
            row: 9_500,
            col: 7,
            ..
        })
    ));
    let bnb = BernoulliNbParams::default().check().unwrap();
    let a = bnb.fit(x_wide.as_ref(), &y, 3).unwrap();
    let b = bnb.fit_weighted(x_wide.as_ref(), r.as_ref()).unwrap();
    close(
        a.log_joint(x_wide.as_ref()).unwrap(),
        b.log_joint(x_wide.as_ref()).unwrap(),
    );
    let a = bnb.fit(x.as_ref(), &y, 3).unwrap();
    let b = bnb.fit_weighted(x.as_ref(), r.as_ref()).unwrap();
    close(
        a.log_joint(x.as_ref()).unwrap(),
        b.log_joint(x.as_ref()).unwrap(),
    );
    let cnb = CategoricalNbParams::default().check().unwrap();
    let a = cnb.fit(counts.as_ref(), &y, 3).unwrap();
    let b = cnb.fit_weighted(counts.as_ref(), r.as_ref()).unwrap();
    close(
        a.log_joint(counts.as_ref()).unwrap(),
        b.log_joint(counts.as_ref()).unwrap(),
    );
    // Unchecked rows never panic: an unseen category scores -inf.
    let mut unseen = counts.clone();
    unseen[(0, 0)] = 99.0;
    let mut out = Mat::<f64>::zeros(unseen.nrows(), 3);
    a.log_joint_into_prechecked(unseen.as_ref(), out.as_mut(), model::Posterior::Joint)
        .unwrap();
    assert_eq!(out[(0, 0)], f64::NEG_INFINITY);
    assert!(a.check_input(unseen.as_ref()).is_err());
    // A label out of range past the first chunk is named by its row in the whole input.
    let mut bad = y.clone();
    bad[7_000] = 3;
    match spec_qda().fit(x.as_ref(), &bad, 3) {
        Err(GenerativeError::InvalidParameter {
            name: "labels",
            value,
            ..
        }) => {
            assert!(value.contains("row 7000"), "{value}")
        }
        other => panic!("expected a label error, got {other:?}"),
    }
}

/// EM's E-step scores (`Posterior::JointLessShared`): ln p(x, k) less a per-row term h(x)
/// shared by every class, whose sum over a set of rows comes from the rows' moments. For every
/// structure, with the streamed kernel (3 classes), faer's product (12 classes) and row-major
/// rows, near the origin and 1e5 from it: the scores differ from the log joint by one value per
/// row, the same for every class, which is −½ (x − μ̄)ᵀ Σ⁻¹ (x − μ̄) with μ̄ the mean of the
/// class means (checked against a solve with the reconstructed covariance); their column sums
/// plus `shared_term_sum` are the log joint's column sums; the sum is the same bits on 1 and 2
/// threads. Structures without such a term give the joint's bits and a sum of zero.
#[test]
fn joint_less_shared_term_adds_back_up_to_the_log_joint() {
    use CovarianceStructure::Tied;
    let (n, d) = (4096 + 300, 6);
    for (k, offset) in [(3, 0.0), (12, 0.0), (3, 1e5)] {
        let (x0, y) = gaussian_data(n, d, k, 5);
        let x = Mat::from_fn(n, d, |i, j| x0[(i, j)] + offset * (1.0 + j as f64));
        let transposed = x.transpose().to_owned();
        let row_major = transposed.transpose();
        let moments = on_threads(1, || model::row_moments(x.as_ref()));
        for s in structures() {
            let m = fit_gaussian(s, &x, &y, k);
            assert_eq!(m.splits_shared_term(), s == Tied);
            let lj = m.log_joint(x.as_ref()).unwrap();
            let shared = m.shared_term_sum(&moments).unwrap();
            for (layout, rows) in [("columns", x.as_ref()), ("row-major", row_major)] {
                let mut split = Mat::<f64>::zeros(n, k);
                m.log_joint_into(rows, split.as_mut(), model::Posterior::JointLessShared)
                    .unwrap();
                let at = format!("{s:?}, k {k}, offset {offset}, {layout}");
                if s != Tied {
                    assert_eq!(split, lj, "{at}");
                    assert_eq!(shared, 0.0, "{at}");
                    continue;
                }
                let means = m.means();
                let centre: Vec<f64> = (0..d)
                    .map(|j| (0..k).map(|c| means[(c, j)]).sum::<f64>() / k as f64)
                    .collect();
                // An independent reference: LU with partial pivoting of L Lᵀ.
                let lu = m.covariance(0).partial_piv_lu();
                for i in (0..n).step_by(7) {
                    let r = Mat::from_fn(d, 1, |j, _| x[(i, j)] - centre[j]);
                    let q = (r.transpose() * faer::prelude::Solve::solve(&lu, &r))[(0, 0)];
                    for c in 0..k {
                        let h = lj[(i, c)] - split[(i, c)];
                        assert!(
                            (h + 0.5 * q).abs() <= 1e-9 * (1.0 + q + lj[(i, c)].abs()),
                            "{at}: row {i} class {c}: {h} against {}",
                            -0.5 * q
                        );
                    }
                }
                for c in 0..k {
                    let want: f64 = (0..n).map(|i| lj[(i, c)]).sum();
                    let scale: f64 = (0..n).map(|i| lj[(i, c)].abs()).sum();
                    let got = (0..n).map(|i| split[(i, c)]).sum::<f64>() + shared;
                    assert!(
                        (got - want).abs() <= 1e-11 * scale,
                        "{at}, class {c}: {got} against {want}"
                    );
                }
            }
            if s == Tied {
                let two = on_threads(2, || model::row_moments(x.as_ref()));
                assert_eq!(m.shared_term_sum(&two).unwrap().to_bits(), shared.to_bits());
                // No rows: nothing to add. Moments of other features: an error.
                let none = model::row_moments(x.as_ref().subrows(0, 0));
                assert_eq!(m.shared_term_sum(&none).unwrap(), 0.0);
                let narrow = model::row_moments(x.as_ref().subcols(0, d - 1));
                assert!(matches!(
                    m.shared_term_sum(&narrow),
                    Err(GenerativeError::DimensionMismatch { .. })
                ));
            }
        }
    }
}

fn spec_qda() -> Checked<GaussianParams> {
    GaussianParams::default().check().unwrap()
}

/// A Gaussian classifier of structure `s` fitted to labeled rows.
fn fit_gaussian(s: CovarianceStructure, x: &Mat<f64>, y: &[usize], k: usize) -> GaussianClassifier {
    GaussianParams::with_structure(s)
        .check()
        .unwrap()
        .fit(x.as_ref(), y, k)
        .unwrap()
}

/// Places of an n × d input (n > 8192) for a bad value: the first and last cells, both sides of
/// the first chunk's edge (4096 rows), the second chunk's last row and the middle of a chunk.
fn chunk_edges(n: usize, d: usize) -> [(usize, usize); 6] {
    [
        (0, 0),
        (4095, d - 1),
        (4096, 2),
        (8191, 0),
        (n - 1, d - 1),
        (5000, 3),
    ]
}

/// Runs `f` in a rayon pool of `threads` threads.
fn on_threads<R: Send>(threads: usize, f: impl FnOnce() -> R + Send) -> R {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap()
        .install(f)
}

/// `x` with `bad` at (`row`, `col`) and, where there is room, `later` 4200 rows below it (in
/// another chunk), which an error must not name instead.
fn with_bad_value(x: &Mat<f64>, (row, col): (usize, usize), bad: f64, later: f64) -> Mat<f64> {
    let mut xn = x.clone();
    xn[(row, col)] = bad;
    if row + 4200 < x.nrows() {
        xn[(row + 4200, 0)] = later;
    }
    xn
}

/// A Gaussian prediction checks each chunk's scores rather than its input, and reads the input
/// only when a score is not finite (`scores_reveal_bad_input`). Every way of predicting, with
/// every structure, must still name the first non-finite value (row-major) of the whole input,
/// wherever it lies in a chunk, whatever its kind, and whatever the thread count.
#[test]
fn gaussian_predictions_name_every_bad_value_although_they_check_scores() {
    // Three features: every structure's posteriors straight from its scores (QDA's up to
    // three); four and five: LDA's and the diagonal ones' (up to sixteen), QDA's scores first;
    // seventeen: every structure's scores first.
    for d in [3, 4, 5, 17] {
        gaussian_predictions_name_every_bad_value(d);
    }
}

fn gaussian_predictions_name_every_bad_value(d: usize) {
    let n = 2 * 4096 + 100;
    let (x, y) = gaussian_data(n, d, 3, 21);
    let places = chunk_edges(n, d).map(|(row, col)| (row, col % d));
    for s in structures() {
        let m = fit_gaussian(s, &x, &y, 3);
        assert!(m.scores_reveal_bad_input());
        for (p, &(row, col)) in places.iter().enumerate() {
            let bad = [f64::NAN, f64::INFINITY, f64::NEG_INFINITY][p % 3];
            let xn = with_bad_value(&x, (row, col), bad, f64::NAN);
            for threads in [1, 2] {
                let named = |r: generative::Result<()>| matches!(r, Err(GenerativeError::NonFiniteInput { row: r0, col: c0, .. }) if r0 == row && c0 == col);
                on_threads(threads, || {
                    assert!(
                        named(m.predict_proba(xn.as_ref()).map(drop)),
                        "{s:?} ({row}, {col}) proba"
                    );
                    assert!(
                        named(m.predict_log_proba(xn.as_ref()).map(drop)),
                        "{s:?} ({row}, {col}) log proba"
                    );
                    assert!(
                        named(m.log_joint(xn.as_ref()).map(drop)),
                        "{s:?} ({row}, {col}) joint"
                    );
                    assert!(
                        named(m.predict(xn.as_ref()).map(drop)),
                        "{s:?} ({row}, {col}) predict"
                    );
                    let mut out = Mat::<f64>::zeros(n, 3);
                    for what in [
                        model::Posterior::Joint,
                        model::Posterior::JointLessShared,
                        model::Posterior::Scores,
                        model::Posterior::LogProbability,
                        model::Posterior::Probability,
                    ] {
                        assert!(
                            named(m.log_joint_into(xn.as_ref(), out.as_mut(), what)),
                            "{s:?} ({row}, {col}) into {what:?}"
                        );
                    }
                });
            }
        }
    }
}

/// Multinomial and Bernoulli naive Bayes check each chunk's scores too: the streamed scores
/// give NaN to a row holding a value their check rejects (a negative count, a value that is
/// not 0 or 1 without `binarize`, a non-finite one). Every way of predicting must still name
/// the first bad value of the whole input, with its rule, on the streamed path and on the
/// fallbacks (row-major input; 11 classes), whatever the thread count.
#[test]
fn naive_bayes_predictions_name_every_bad_value_although_they_check_scores() {
    // Up to sixteen features: posteriors straight from the scores for 3 to 10 classes;
    // seventeen: scores first.
    for d in [4, 16, 17] {
        naive_bayes_predictions_name_every_bad_value(d);
    }
}

fn naive_bayes_predictions_name_every_bad_value(d: usize) {
    let n = 2 * 4096 + 100;
    let places = chunk_edges(n, d);
    let counts = |k: usize| Mat::from_fn(n, d, |i, j| ((i * 7 + j * 3 + i / k) % 5) as f64);
    let labels = |k: usize| (0..n).map(|i| i % k).collect::<Vec<_>>();
    let fit_mnb = |k: usize| -> Box<dyn GenerativeClassifier> {
        Box::new(
            MultinomialNbParams::default()
                .check()
                .unwrap()
                .fit(counts(k).as_ref(), &labels(k), k)
                .unwrap(),
        )
    };
    let fit_bnb = |k: usize, binarize: Option<f64>| -> Box<dyn GenerativeClassifier> {
        let spec = BernoulliNbParams {
            binarize,
            ..Default::default()
        };
        let x = counts(k).as_ref().map(|v| f64::from(*v > 1.5));
        Box::new(
            spec.check()
                .unwrap()
                .fit(x.as_ref(), &labels(k), k)
                .unwrap(),
        )
    };
    /// A model's name, the model, valid input for it, and the bad values it must name (true:
    /// by its rule; false: as non-finite).
    type Case = (
        String,
        Box<dyn GenerativeClassifier>,
        Mat<f64>,
        Vec<(f64, bool)>,
    );
    let mut cases: Vec<Case> = Vec::new();
    for k in [3, 11] {
        let non_finite = [
            (f64::NAN, false),
            (f64::INFINITY, false),
            (f64::NEG_INFINITY, false),
        ];
        cases.push((
            format!("multinomial K {k}"),
            fit_mnb(k),
            counts(k),
            vec![
                (-1.0, true),
                (-1e-300, true),
                (f64::NAN, false),
                (f64::INFINITY, false),
            ],
        ));
        let binary = counts(k).as_ref().map(|v| f64::from(*v > 1.5));
        cases.push((
            format!("Bernoulli K {k}"),
            fit_bnb(k, Some(0.5)),
            binary.clone(),
            non_finite.to_vec(),
        ));
        cases.push((
            format!("Bernoulli binary K {k}"),
            fit_bnb(k, None),
            binary.clone(),
            vec![(0.5, true), (2.0, true)],
        ));
        cases.push((
            format!("Bernoulli binary K {k}, non-finite"),
            fit_bnb(k, None),
            binary,
            non_finite.to_vec(),
        ));
    }
    for (name, m, x, bad_values) in &cases {
        assert!(m.scores_reveal_bad_input(), "{name}");
        let k = m.n_classes();
        for (p, &(row, col)) in places.iter().enumerate() {
            let (bad, by_rule) = bad_values[p % bad_values.len()];
            // The later value is of the same kind (a Bernoulli check of 0 or 1 sees non-finite
            // values before others in a chunk).
            let xn = with_bad_value(x, (row, col), bad, bad);
            let named = |r: generative::Result<()>| match r {
                Err(GenerativeError::InvalidInput {
                    row: r0, col: c0, ..
                }) => by_rule && (r0, c0) == (row, col),
                Err(GenerativeError::NonFiniteInput {
                    row: r0, col: c0, ..
                }) => !by_rule && (r0, c0) == (row, col),
                _ => false,
            };
            let xn_rows = xn.transpose().to_owned();
            for threads in [1, 2] {
                on_threads(threads, || {
                    for (layout, view) in [("columns", xn.as_ref()), ("rows", xn_rows.transpose())]
                    {
                        let at =
                            format!("{name}, {bad} at ({row}, {col}), {layout}, {threads} threads");
                        assert!(named(m.predict_proba(view).map(drop)), "{at}: proba");
                        assert!(named(m.log_joint(view).map(drop)), "{at}: joint");
                        assert!(named(m.predict(view).map(drop)), "{at}: predict");
                        let mut out = Mat::<f64>::zeros(n, k);
                        for what in [
                            model::Posterior::Joint,
                            model::Posterior::JointLessShared,
                            model::Posterior::Scores,
                            model::Posterior::LogProbability,
                            model::Posterior::Probability,
                        ] {
                            assert!(
                                named(m.log_joint_into(view, out.as_mut(), what)),
                                "{at}: into {what:?}"
                            );
                        }
                    }
                });
            }
        }
        // Good input is predicted.
        let p = m.predict_proba(x.as_ref()).unwrap();
        assert!(
            (0..n).all(|i| ((0..k).map(|c| p[(i, c)]).sum::<f64>() - 1.0).abs() < 1e-12),
            "{name}"
        );
    }
}

/// A prediction into a fresh output has the scores that a formula describes (LDA, Bernoulli
/// and multinomial naive Bayes: linear; Gaussian naive Bayes and the spherical structure:
/// diagonal; QDA: full, by rows in registers up to 3 features and by blocks above) written into it unzeroed (`posterior_score_formula`); into a given output they are
/// written over whatever it held. Both must give every row the same bits, and neither may leave
/// a value unwritten: the given output starts as a sentinel that no score takes. Rows far out
/// (the Gaussian models' rescoring) and rows with a value the model's check rejects (Bernoulli
/// at 0.5, the marking pass; NaN, found from the scores) are covered; so are chunk tails of
/// every length modulo the vector width, both layouts, many columns (the diagonal kernel's
/// groups, QDA's blocks), and K past the streamed linear kernel's 10 classes (zeroed and filled by faer's
/// product). Posteriors written by non-temporal stores from a worker's buffer
/// (`force_posterior_streaming`) must have the same bits, and name the same bad values.
#[test]
fn fresh_and_given_outputs_get_the_same_bits_of_formula_scores() {
    let n = 2 * parallel::CHUNK_ROWS + 13;
    let sentinel = 12345.678;
    for k in [2, 3, 10, 11] {
        let (x, y) = gaussian_data(n, 3, k, 7);
        let mut far = x.clone();
        far[(5, 0)] = 1e300;
        far[(parallel::CHUNK_ROWS + 1, 2)] = -1e305;
        let counts = x.as_ref().map(|v| (v.abs() * 3.0).round());
        let binary = x.as_ref().map(|v| f64::from(*v > 0.5));
        let lda = fit_gaussian(CovarianceStructure::Tied, &x, &y, k);
        let mnb = MultinomialNbParams::default()
            .check()
            .unwrap()
            .fit(counts.as_ref(), &y, k)
            .unwrap();
        let bnb_above = BernoulliNbParams {
            binarize: Some(0.5),
            ..Default::default()
        }
        .check()
        .unwrap()
        .fit(x.as_ref(), &y, k)
        .unwrap();
        let bnb = BernoulliNbParams {
            binarize: None,
            ..Default::default()
        }
        .check()
        .unwrap()
        .fit(binary.as_ref(), &y, k)
        .unwrap();
        let gnb = fit_gaussian(CovarianceStructure::Diagonal, &x, &y, k);
        let spherical = fit_gaussian(CovarianceStructure::Spherical, &x, &y, k);
        let (wide, wide_y) = gaussian_data(n, 13, k, 8);
        let gnb_wide = fit_gaussian(CovarianceStructure::Diagonal, &wide, &wide_y, k);
        let qda = fit_gaussian(CovarianceStructure::Full, &x, &y, k);
        let qda_wide = fit_gaussian(CovarianceStructure::Full, &wide, &wide_y, k);
        let cases: [(&str, &dyn GenerativeClassifier, &Mat<f64>); 12] = [
            ("LDA", &lda, &x),
            ("LDA, far rows", &lda, &far),
            ("multinomial", &mnb, &counts),
            ("Bernoulli above 0.5", &bnb_above, &x),
            ("Bernoulli binary", &bnb, &binary),
            ("Gaussian NB", &gnb, &x),
            ("Gaussian NB, far rows", &gnb, &far),
            ("spherical", &spherical, &x),
            ("Gaussian NB, 13 features", &gnb_wide, &wide),
            ("QDA", &qda, &x),
            ("QDA, far rows", &qda, &far),
            ("QDA, 13 features", &qda_wide, &wide),
        ];
        for (name, m, x) in cases {
            assert!(m.posterior_score_formula().is_some(), "{name}");
            for rows in [n, n - 1, n - 5, parallel::CHUNK_ROWS + 7, 9] {
                let x = x.as_ref().subrows(0, rows);
                let x_rows = x.transpose().to_owned();
                for (layout, view) in [("columns", x), ("rows", x_rows.transpose())] {
                    for what in [
                        model::Posterior::LogProbability,
                        model::Posterior::Probability,
                    ] {
                        model::force_posterior_streaming(Some(false));
                        let fresh = if what == model::Posterior::Probability {
                            m.predict_proba(view).unwrap()
                        } else {
                            m.predict_log_proba(view).unwrap()
                        };
                        let mut given = Mat::<f64>::from_fn(rows, k, |_, _| sentinel);
                        m.log_joint_into(view, given.as_mut(), what).unwrap();
                        if what == model::Posterior::Probability {
                            // Posteriors written by non-temporal stores from a worker's buffer
                            // (on Intel CPUs, for large outputs): the same bits, every value.
                            model::force_posterior_streaming(Some(true));
                            let streamed = m.predict_proba(view).unwrap();
                            let mut streamed_given = Mat::<f64>::from_fn(rows, k, |_, _| sentinel);
                            m.log_joint_into(view, streamed_given.as_mut(), what)
                                .unwrap();
                            model::force_posterior_streaming(None);
                            for i in 0..rows {
                                for c in 0..k {
                                    let want = fresh[(i, c)].to_bits();
                                    let at =
                                        format!("{name}, K {k}, {rows} rows, {layout}, ({i}, {c})");
                                    assert_eq!(streamed[(i, c)].to_bits(), want, "{at}: streamed");
                                    assert_eq!(
                                        streamed_given[(i, c)].to_bits(),
                                        want,
                                        "{at}: streamed into"
                                    );
                                }
                            }
                        }
                        for i in 0..rows {
                            for c in 0..k {
                                assert_eq!(
                                    fresh[(i, c)].to_bits(),
                                    given[(i, c)].to_bits(),
                                    "{name}, K {k}, {rows} rows, {layout}, {what:?}, ({i}, {c})"
                                );
                            }
                            let sum: f64 = (0..k)
                                .map(|c| match what {
                                    model::Posterior::Probability => fresh[(i, c)],
                                    _ => fresh[(i, c)].exp(),
                                })
                                .sum();
                            assert!((sum - 1.0).abs() < 1e-12, "{name}, K {k}, row {i}: {sum}");
                        }
                    }
                }
            }
        }
        for streaming in [false, true] {
            model::force_posterior_streaming(Some(streaming));
            // A NaN is named from Gaussian NB's scores in the fresh output.
            let mut bad = x.clone();
            bad[(parallel::CHUNK_ROWS - 1, 2)] = f64::NAN;
            match gnb.predict_proba(bad.as_ref()) {
                Err(GenerativeError::NonFiniteInput { row, col, .. }) => {
                    assert_eq!((row, col), (parallel::CHUNK_ROWS - 1, 2), "K {k}");
                }
                other => panic!("K {k}, streaming {streaming}: {other:?}"),
            }
            // A value the binary model rejects is named from the fresh output's scores.
            let mut bad = binary.clone();
            bad[(parallel::CHUNK_ROWS + 3, 1)] = 0.5;
            match bnb.predict_proba(bad.as_ref()) {
                Err(GenerativeError::InvalidInput { row, col, .. }) => {
                    assert_eq!((row, col), (parallel::CHUNK_ROWS + 3, 1), "K {k}");
                }
                other => panic!("K {k}, streaming {streaming}: {other:?}"),
            }
        }
        model::force_posterior_streaming(None);
    }
}

/// A labeled Bernoulli fit counts values above its threshold in one pass over each chunk
/// (`grouped_counts_above`). It must give the model that the binarised input gives on the
/// copying path (`binarize` off), and name the first non-finite value, which the counts cannot
/// show, on any thread count.
#[test]
fn bernoulli_labeled_fits_count_above_the_threshold_and_name_non_finite_values() {
    let (n, d) = (2 * 4096 + 333, 6);
    for k in [2, 3, 10] {
        let (x, y) = gaussian_data(n, d, k, 31);
        let t = 0.4;
        let above = BernoulliNbParams {
            binarize: Some(t),
            ..Default::default()
        };
        let copied = BernoulliNbParams {
            binarize: None,
            ..Default::default()
        };
        let fused = above
            .clone()
            .check()
            .unwrap()
            .fit(x.as_ref(), &y, k)
            .unwrap();
        let binary = x.as_ref().map(|v| f64::from(*v > t));
        let reference = copied.check().unwrap().fit(binary.as_ref(), &y, k).unwrap();
        assert!(
            fused.feature_log_prob() == reference.feature_log_prob(),
            "K {k}"
        );
        assert_eq!(fused.log_priors(), reference.log_priors(), "K {k}");
        for (row, col, bad) in [
            (0, 0, f64::NAN),
            (4095, d - 1, f64::INFINITY),
            (4096, 2, f64::NEG_INFINITY),
            (n - 1, 3, f64::NAN),
        ] {
            let xb = with_bad_value(&x, (row, col), bad, f64::NAN);
            for threads in [1, 2] {
                let got = on_threads(threads, || {
                    above.clone().check().unwrap().fit(xb.as_ref(), &y, k)
                });
                assert!(
                    matches!(got, Err(GenerativeError::NonFiniteInput { row: r, col: c, .. }) if (r, c) == (row, col)),
                    "K {k}, {bad} at ({row}, {col}), {threads} threads: {got:?}"
                );
            }
        }
    }
}

/// A weighted Bernoulli fit binarises each chunk a panel of columns at a time (32 columns of a
/// 4096-row chunk). On wide rows (several panels, a short last one, a short last chunk) its
/// probabilities are the weighted counts' closed form, with a threshold and without one, on
/// any thread count; a bad value in a later panel is named by its own row and column.
#[test]
fn weighted_bernoulli_fits_of_wide_rows_are_their_weighted_counts() {
    use generative::model::{WeightedFit, WeightedRows};
    let (n, d, k, t, alpha) = (2 * 4096 + 333, 70, 3, 0.4, 0.7);
    let (x, _) = gaussian_data(n, d, k, 41);
    let resp = Mat::from_fn(n, k, |i, c| {
        0.05 + 0.1 * ((i * 7 + c * 3 + i / 5) % 7) as f64
    });
    let binary = x.as_ref().map(|v| f64::from(*v > t));
    // ln p_cj = ln(Σ_i r_ic b_ij + α) − ln(Σ_i r_ic + 2α), summed directly.
    let want = Mat::from_fn(k, d, |c, j| {
        let num: f64 = (0..n).map(|i| resp[(i, c)] * binary[(i, j)]).sum();
        let den: f64 = (0..n).map(|i| resp[(i, c)]).sum();
        (num + alpha).ln() - (den + 2.0 * alpha).ln()
    });
    for (threshold, rows) in [(Some(t), &x), (None, &binary)] {
        let spec = BernoulliNbParams {
            binarize: threshold,
            alpha,
            ..Default::default()
        }
        .check()
        .unwrap();
        for threads in [1, 2] {
            let got = on_threads(threads, || {
                spec.fit_sets(&[WeightedRows::weighted(rows.as_ref(), resp.as_ref())])
            })
            .unwrap();
            let diff = max_abs_diff(got.feature_log_prob().as_ref(), want.as_ref());
            assert!(
                diff < 1e-12,
                "{threshold:?}, {threads} threads: off by {diff}"
            );
        }
    }
    let mut bad = binary.clone();
    bad[(4096 + 5, 50)] = 0.5;
    let spec = BernoulliNbParams {
        binarize: None,
        ..Default::default()
    }
    .check()
    .unwrap();
    let got = spec.fit_sets(&[WeightedRows::weighted(bad.as_ref(), resp.as_ref())]);
    assert!(
        matches!(
            got,
            Err(GenerativeError::InvalidInput {
                row: 4101,
                col: 50,
                ..
            })
        ),
        "{got:?}"
    );
}

/// The claim behind checking scores, at the level of one chunk: a row holding a non-finite
/// value gets at least one non-finite score, even where a weight of the linear discriminant is
/// exactly zero (∞ · 0 is NaN) and for every structure's joint.
#[test]
fn a_non_finite_feature_makes_a_non_finite_score_in_its_row() {
    // LDA with identity covariance and every class mean 0 in feature 1: its weights there are
    // exactly zero.
    let lda: GaussianClassifier = serde_json::from_value(serde_json::json!({
        "structure": "Tied",
        "n_features": 3,
        "n_classes": 2,
        "log_priors": [(0.5f64).ln(), (0.5f64).ln()],
        "class_weights": [1.0, 1.0],
        "means": [1.0, 0.0, -2.0, -1.0, 0.0, 0.5],
        "factors": [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0],
        "priors_fixed": false
    }))
    .unwrap();
    let ld = lda.linear_discriminant().unwrap();
    assert_eq!((ld.weights[1], ld.weights[4]), (0.0, 0.0));
    let (x, y) = gaussian_data(300, 3, 2, 5);
    let mut models = vec![lda];
    for s in structures() {
        models.push(fit_gaussian(s, &x, &y, 2));
    }
    for m in &models {
        for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            for col in 0..3 {
                let mut xb = x.clone();
                xb[(17, col)] = bad;
                let mut out = Mat::<f64>::zeros(300, 2);
                for scores in [true, false] {
                    if scores {
                        m.posterior_scores_chunk(xb.as_ref(), out.as_mut());
                    } else {
                        m.log_joint_chunk(xb.as_ref(), out.as_mut());
                    }
                    assert!(
                        !(out[(17, 0)].is_finite() && out[(17, 1)].is_finite()),
                        "{:?}: {bad} in column {col} left finite scores (scores: {scores})",
                        m.structure()
                    );
                }
            }
        }
    }
}

/// Finite input whose scores overflow is still predicted: the fallback check of the input finds
/// nothing and the chunk is normalised as usual (rows of infinite scores take the exact path).
#[test]
fn finite_input_with_overflowing_scores_is_predicted_not_rejected() {
    let (x, y) = gaussian_data(500, 2, 2, 8);
    let mut xb = x.clone();
    xb[(3, 0)] = 1e300;
    xb[(4, 1)] = -1e300;
    for s in structures() {
        let m = fit_gaussian(s, &x, &y, 2);
        let p = m.predict_proba(xb.as_ref()).unwrap();
        for i in 0..500 {
            let (a, b) = (p[(i, 0)], p[(i, 1)]);
            assert!(a.is_finite() && b.is_finite(), "{s:?} row {i}: {a}, {b}");
            assert!((a + b - 1.0).abs() < 1e-12, "{s:?} row {i}: {a} + {b}");
        }
        let lj = m.log_joint(xb.as_ref()).unwrap();
        // The joints did overflow, so the input was read again and passed.
        assert_eq!(lj[(3, 0)], f64::NEG_INFINITY, "{s:?}");
        assert_eq!(lj[(4, 1)], f64::NEG_INFINITY, "{s:?}");
    }
}

#[test]
fn input_errors_name_the_first_bad_row_of_the_whole_input_across_chunks() {
    // Rows past the first 4096-row chunk are checked by other workers; the message must still
    // name the row of the whole input, and the first bad row wins whatever the thread count.
    let (x, y) = gaussian_data(10_000, 3, 2, 11);
    let m = GaussianParams::default()
        .check()
        .unwrap()
        .fit(x.as_ref(), &y, 2)
        .unwrap();
    let mut xn = x.clone();
    xn[(9_000, 0)] = f64::NAN;
    xn[(5_000, 1)] = f64::NEG_INFINITY;
    for threads in [1, 2] {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        assert!(matches!(
            pool.install(|| m.predict_proba(xn.as_ref())),
            Err(GenerativeError::NonFiniteInput {
                row: 5_000,
                col: 1,
                ..
            })
        ));
    }
    // A labeled full-covariance fit with few classes and more features finds non-finite
    // values while splitting its chunks by class, not in a pass of its own; a diagonal one with
    // more than 2 classes checks each chunk before copying it in class order. Both must name
    // the first one (row-major) of the whole input.
    let (x8, y8) = gaussian_data(10_000, 8, 2, 12);
    let mut x8n = x8.clone();
    x8n[(9_000, 0)] = f64::NAN;
    x8n[(5_000, 1)] = f64::NEG_INFINITY;
    x8n[(4_200, 7)] = f64::INFINITY;
    let y3: Vec<usize> = (0..10_000).map(|i| (i * 7 + i / 3) % 3).collect();
    let y6: Vec<usize> = (0..10_000).map(|i| (i * 5 + i / 7) % 6).collect();
    for (s, labels, k) in [
        (CovarianceStructure::Full, &y8, 2),
        (CovarianceStructure::Tied, &y8, 2),
        (CovarianceStructure::Diagonal, &y3, 3),
        (CovarianceStructure::Diagonal, &y6, 6),
        (CovarianceStructure::Spherical, &y6, 6),
    ] {
        let spec = GaussianParams::with_structure(s).check().unwrap();
        for threads in [1, 2] {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            for view in [x8n.as_ref(), x8n.transpose().to_owned().transpose()] {
                let got = pool.install(|| spec.fit(view, labels, k));
                assert!(
                    matches!(
                        got,
                        Err(GenerativeError::NonFiniteInput {
                            row: 4_200,
                            col: 7,
                            ..
                        })
                    ),
                    "{s:?}, K = {k}, {threads} threads: {got:?}"
                );
            }
        }
    }
    let counts = Mat::from_fn(10_000, 3, |i, j| ((i + j) % 4) as f64);
    let mnb = MultinomialNbParams::default()
        .check()
        .unwrap()
        .fit(counts.as_ref(), &y, 2)
        .unwrap();
    let mut bad = counts.clone();
    bad[(8_191, 2)] = -1.0;
    assert!(matches!(
        mnb.predict_proba(bad.as_ref()),
        Err(GenerativeError::InvalidInput {
            row: 8_191,
            col: 2,
            ..
        })
    ));
}

/// Labeled Gaussian fits with few classes (diagonal at K <= 2; full and tied with few features)
/// and those whose class sums are taken by rows (diagonal and tied at K = 6, and every structure
/// at d = 2 from three classes) check a chunk's values through its class sums or means, and
/// scan it only when one is not finite.
/// They must still name the first bad value (row-major) of the whole input, wherever it lies,
/// whatever its kind, in either layout and on any thread count; and finite values whose sums
/// overflow must not be reported as non-finite.
#[test]
fn labeled_gaussian_fits_checked_by_their_sums_name_every_bad_value() {
    use CovarianceStructure::*;
    let n = 2 * 4096 + 100;
    for (s, d, k) in [
        (Diagonal, 5, 2),
        (Spherical, 9, 2),
        (Full, 4, 2),
        (Tied, 4, 2),
        // A shared covariance of one or two classes: one shifted pass (its means the check).
        (Tied, 16, 2),
        (Diagonal, 5, 6),
        (Spherical, 9, 6),
        (Tied, 4, 6),
        // Two features of three or more classes: one shifted pass by rows, whose means are
        // the check (a bad value among a class's first rows is in its shift).
        (Full, 2, 3),
        (Tied, 2, 6),
        (Diagonal, 2, 6),
    ] {
        // Row i is in class i mod k.
        let (x, y) = gaussian_data(n, d, k, 23);
        let spec = GaussianParams::with_structure(s).check().unwrap();
        for (p, &(row, col)) in chunk_edges(n, d).iter().enumerate() {
            let col = col % d;
            let bad = [f64::NAN, f64::INFINITY, f64::NEG_INFINITY][p % 3];
            let mut xn = with_bad_value(&x, (row, col), bad, f64::NAN);
            // A second bad value of the opposite sign in the same class, column and chunk,
            // after the first: their class sum is NaN, and the first must be named.
            if row + k < n && (row + k) / 4096 == row / 4096 {
                xn[(row + k, col)] = -bad;
            }
            for threads in [1, 2] {
                for view in [xn.as_ref(), xn.transpose().to_owned().transpose()] {
                    let got = on_threads(threads, || spec.fit(view, &y, k));
                    assert!(
                        matches!(
                            got,
                            Err(GenerativeError::NonFiniteInput { row: r, col: c, .. })
                                if (r, c) == (row, col)
                        ),
                        "{s:?}, K = {k} at ({row}, {col}) = {bad}, {threads} threads: {got:?}"
                    );
                }
            }
        }
        // Finite values whose class sums overflow to infinity: no value is named.
        let mut huge = x.clone();
        for i in 0..8 {
            huge[(4096 + k * i, d - 1)] = 1e308;
        }
        let got = spec.fit(huge.as_ref(), &y, k);
        assert!(
            !matches!(got, Err(GenerativeError::NonFiniteInput { .. })),
            "{s:?}, K = {k}: {got:?}"
        );
    }
}

#[test]
fn predictions_are_never_nan_far_from_the_data() {
    let (x, y) = gaussian_data(200, 2, 2, 5);
    let far = Mat::from_fn(3, 2, |i, j| {
        [1e150, -1e150, 1e-300][i] * if j == 0 { 1.0 } else { -1.0 }
    });
    for s in structures() {
        let m = GaussianParams {
            structure: s,
            ..Default::default()
        }
        .check()
        .unwrap()
        .fit(x.as_ref(), &y, 2)
        .unwrap();
        let p = m.predict_proba(far.as_ref()).unwrap();
        for i in 0..3 {
            assert!(p[(i, 0)].is_finite() && p[(i, 1)].is_finite());
            assert!((p[(i, 0)] + p[(i, 1)] - 1.0).abs() < 1e-12);
        }
        assert!(m.log_likelihood(far.as_ref()).unwrap().is_finite());
    }
}

/// Rows far from the data (scores −∞, or beyond 2^900, which a Gaussian ranks again after
/// scaling) and rows whose values are tiny, placed at the start, inside and at the end of
/// vector groups and chunks, among ordinary rows: `predict_proba`, fresh and into a kept
/// output, gives every row the bits it gets predicted alone (alone, a row takes the general
/// path; in a chunk, the rows before the first far one of their chunk are normalised with the
/// check on the scores riding on the normalisation, and the rest after a scan).
#[test]
fn far_rows_anywhere_in_a_chunk_keep_the_posteriors_they_get_alone() {
    let n = 4096 + 300;
    let places = [0, 5, 31, 32, 77, 4095, 4096, 4100, 4160, n - 1];
    for k in [2, 3, 10] {
        // Classes of spreads 0.3 to 3: at one distance, the narrow ones' squared distances
        // overflow where the wide ones' do not.
        let (x, y) = gaussian_data(600, 2, k, 23);
        let x = Mat::from_fn(600, 2, |i, j| x[(i, j)] * 0.3 * (1 + y[i] % 10) as f64);
        // Magnitudes around √f64::MAX: some classes' squared distances overflow (−∞ beside
        // finite scores), others do not; and one far beyond, and a tiny one.
        let far = [4e153, 7e153, 1e154, 1.2e154, 1.3e154, 3e200, 1e-300];
        let xs = Mat::from_fn(n, 2, |i, j| match places.iter().position(|&p| p == i) {
            Some(p) => far[p % far.len()] * if j == 0 { 1.0 } else { -0.5 },
            None => x[(i % 600, j)],
        });
        let mut mixed = 0;
        for s in structures() {
            let m = fit_gaussian(s, &x, &y, k);
            // Rows with −∞ beside a finite score: the ones a check on the maximum alone passes.
            let joint = m.log_joint(xs.as_ref()).unwrap();
            mixed += places
                .iter()
                .filter(|&&i| {
                    let row: Vec<f64> = (0..k).map(|c| joint[(i, c)]).collect();
                    row.iter().any(|v| v.is_finite()) && row.iter().any(|v| !v.is_finite())
                })
                .count();
            let fresh = m.predict_proba(xs.as_ref()).unwrap();
            let mut kept = Mat::<f64>::zeros(n, k);
            m.log_joint_into(xs.as_ref(), kept.as_mut(), model::Posterior::Probability)
                .unwrap();
            for i in 0..n {
                let alone = m.predict_proba(xs.subrows(i, 1)).unwrap();
                for c in 0..k {
                    let want = alone[(0, c)];
                    assert!(want.is_finite(), "{s:?}, K = {k}: row {i}");
                    assert_eq!(
                        fresh[(i, c)].to_bits(),
                        want.to_bits(),
                        "{s:?}, K = {k}: row {i}"
                    );
                    assert_eq!(
                        kept[(i, c)].to_bits(),
                        want.to_bits(),
                        "{s:?}, K = {k}: row {i}"
                    );
                }
            }
        }
        assert!(
            mixed > 0,
            "K = {k}: no row mixes finite and infinite scores"
        );
    }
}

#[test]
fn fixed_priors_are_used() {
    let (x, y) = gaussian_data(200, 2, 2, 6);
    let m = GaussianParams {
        priors: Priors::Fixed(vec![0.9, 0.1]),
        ..Default::default()
    }
    .check()
    .unwrap()
    .fit(x.as_ref(), &y, 2)
    .unwrap();
    assert!((m.log_priors()[0] - 0.9f64.ln()).abs() < 1e-15);
    let e = GaussianParams {
        priors: Priors::Fixed(vec![0.2, 0.3, 0.5]),
        ..Default::default()
    }
    .check()
    .unwrap()
    .fit(x.as_ref(), &y, 2);
    assert!(matches!(e, Err(GenerativeError::DimensionMismatch { .. })));
}

/// A Gaussian fit split into chunk statistics and a finish gives the model `fit_sets` gives, bit
/// for bit, for every covariance structure and fixed shrinkage: over a labeled set, a set of
/// soft responsibilities and a set of dense one-hot rows together, and with each set's runs
/// folded apart and put end to end (as EM takes the unlabeled rows' in its E-step). The soft
/// set and a second labeled set have more than 32 chunks, so that their runs are of two chunks:
/// `fit_sets` then fills the statistics of a run's merged chunk again for its next chunk, where
/// the split takes new ones, and any value left from the merged chunk would change the bits.
/// With 4 classes the labeled chunks are packed by class; with 10 they are grouped, and the
/// shared covariance takes its pooled form from the class blocks; with 2 classes of 2 features
/// the statistics are taken by mask. Ledoit–Wolf shrinkage, which
/// reads the rows twice, has no split.
#[test]
fn split_gaussian_fits_finish_with_the_bits_of_fit_sets() {
    use generative::split::fold_split;
    for (d, k) in [(3, 4), (2, 10), (2, 2)] {
        let (x_l, y_l) = gaussian_data(700, d, k, 11);
        let (x_u, y_u) = gaussian_data(33 * 4096 + 123, d, k, 12);
        let resp_u = Mat::from_fn(x_u.nrows(), k, |i, c| {
            // Weights in [0.05, 0.7] leaning to each row's own class.
            0.05 + 0.1 * ((i * 7 + c * 3) % 5) as f64 + if c == y_u[i] { 0.25 } else { 0.0 }
        });
        let (x_h, y_h) = gaussian_data(5000, d, k, 13);
        let dense = one_hot(&y_h, k).unwrap();
        let (x_m, y_m) = gaussian_data(34 * 4096 + 5, d, k, 14);
        let sets = [
            WeightedRows::labeled(x_l.as_ref(), &y_l, k),
            WeightedRows::weighted(x_u.as_ref(), resp_u.as_ref()),
            WeightedRows::weighted(x_h.as_ref(), dense.as_ref()),
            WeightedRows::labeled(x_m.as_ref(), &y_m, k),
        ];
        for structure in structures() {
            let shrunk = matches!(
                structure,
                CovarianceStructure::Full | CovarianceStructure::Tied
            );
            for shrinkage in [None, shrunk.then_some(Shrinkage::Fixed(0.2))] {
                let spec = GaussianParams {
                    structure,
                    shrinkage,
                    ..Default::default()
                }
                .check()
                .unwrap();
                let case = format!("d = {d}, K = {k}, {structure:?}, {shrinkage:?}");
                let want = serde_json::to_string(&spec.fit_sets(&sets).unwrap()).unwrap();
                let split = spec.split().unwrap();
                let runs = fold_split(split, &sets).unwrap();
                let got = split.finish(runs, d, k).unwrap();
                assert_eq!(serde_json::to_string(&got).unwrap(), want, "{case}");
                let mut runs = Vec::new();
                for set in &sets {
                    runs.extend(fold_split(split, std::slice::from_ref(set)).unwrap());
                }
                let got = split.finish(runs, d, k).unwrap();
                assert_eq!(serde_json::to_string(&got).unwrap(), want, "{case}, apart");
            }
        }
    }
    let lw = GaussianParams {
        shrinkage: Some(Shrinkage::LedoitWolf),
        ..Default::default()
    }
    .check()
    .unwrap();
    assert!(lw.split().is_none());
}

/// A split naive Bayes fit (Bernoulli, multinomial) finishes with the model `fit_sets` gives,
/// bit for bit, from labeled sets and weighted ones (soft, and dense one-hot) together and with
/// each set's runs folded apart and put end to end (as EM takes the unlabeled rows' in its
/// E-step); a bad value in a weighted set is the same error both ways, and so is an empty class.
#[test]
fn split_count_fits_finish_with_the_bits_of_fit_sets() {
    use generative::split::fold_split;
    // Counts 0..=4 that lean to each row's class by feature.
    let counts = |n: usize, d: usize, k: usize, seed: usize| {
        let y: Vec<usize> = (0..n).map(|i| (i * 7 + seed) % k).collect();
        let x = Mat::from_fn(n, d, |i, j| {
            ((i * 13 + j * 5 + seed + 3 * y[i] * j) % 5) as f64
        });
        (x, y)
    };
    for (d, k) in [(3, 4), (2, 10), (5, 2)] {
        let (x_l, y_l) = counts(700, d, k, 1);
        let (x_u, y_u) = counts(33 * 4096 + 123, d, k, 2);
        let resp_u = Mat::from_fn(x_u.nrows(), k, |i, c| {
            0.05 + 0.1 * ((i * 7 + c * 3) % 5) as f64 + if c == y_u[i] { 0.25 } else { 0.0 }
        });
        let (x_h, y_h) = counts(5000, d, k, 3);
        let dense = one_hot(&y_h, k).unwrap();
        let sets = [
            WeightedRows::labeled(x_l.as_ref(), &y_l, k),
            WeightedRows::weighted(x_u.as_ref(), resp_u.as_ref()),
            WeightedRows::weighted(x_h.as_ref(), dense.as_ref()),
        ];
        // A negative count (multinomial) and a NaN (Bernoulli) in the weighted set.
        let (mut negative, mut nan) = (x_u.clone(), x_u.clone());
        negative[(4096 * 5 + 17, d - 1)] = -1.0;
        nan[(4096 * 7 + 5, d - 1)] = f64::NAN;
        let negative = [
            WeightedRows::labeled(x_l.as_ref(), &y_l, k),
            WeightedRows::weighted(negative.as_ref(), resp_u.as_ref()),
        ];
        let nan = [
            WeightedRows::labeled(x_l.as_ref(), &y_l, k),
            WeightedRows::weighted(nan.as_ref(), resp_u.as_ref()),
        ];
        // The last class weighs nothing anywhere.
        let y_short: Vec<usize> = y_l.iter().map(|&y| y % (k - 1)).collect();
        let empty = [WeightedRows::labeled(x_l.as_ref(), &y_short, k)];
        fn check<S: WeightedFit>(
            spec: &S,
            sets: &[WeightedRows<'_>],
            bad: &[WeightedRows<'_>],
            empty: &[WeightedRows<'_>],
            case: &str,
        ) where
            S::Model: serde::Serialize,
        {
            let (d, k) = (sets[0].x.ncols(), sets[0].resp.ncols());
            let want = serde_json::to_string(&spec.fit_sets(sets).unwrap()).unwrap();
            let split = spec.split().expect(case);
            let runs = fold_split(split, sets).unwrap();
            let got = split.finish(runs, d, k).unwrap();
            assert_eq!(serde_json::to_string(&got).unwrap(), want, "{case}");
            let mut runs = Vec::new();
            for set in sets {
                runs.extend(fold_split(split, std::slice::from_ref(set)).unwrap());
            }
            let got = split.finish(runs, d, k).unwrap();
            assert_eq!(serde_json::to_string(&got).unwrap(), want, "{case}, apart");
            let apart = spec.fit_sets(bad).map(|_| ()).unwrap_err();
            let split_err = fold_split(split, bad).map(|_| ()).unwrap_err();
            assert_eq!(
                format!("{split_err:?}"),
                format!("{apart:?}"),
                "{case}, bad"
            );
            let apart = spec.fit_sets(empty).map(|_| ()).unwrap_err();
            let runs = fold_split(split, empty).unwrap();
            let split_err = split.finish(runs, d, k).map(|_| ()).unwrap_err();
            assert_eq!(
                format!("{split_err:?}"),
                format!("{apart:?}"),
                "{case}, empty"
            );
            assert_eq!(
                apart,
                GenerativeError::EmptyClass { class: k - 1 },
                "{case}"
            );
        }
        let case = format!("d = {d}, K = {k}");
        let bernoulli = BernoulliNbParams {
            binarize: Some(1.5),
            ..Default::default()
        }
        .check()
        .unwrap();
        check(
            &bernoulli,
            &sets,
            &nan,
            &empty,
            &format!("Bernoulli, {case}"),
        );
        let multinomial = MultinomialNbParams::default().check().unwrap();
        check(
            &multinomial,
            &sets,
            &negative,
            &empty,
            &format!("multinomial, {case}"),
        );
    }
}

/// Categorical naive Bayes reads its rows column by column: on 2 chunks and a part (9,000 rows)
/// of 7 features with 2 to 8 categories, the log joint is the closed form (Lidstone-smoothed
/// category frequencies and class frequencies) summed row by row here; column-major and
/// row-major rows give the same bits, fitted and scored; weighted one-hot fits are the labeled
/// fit's bits; and a bad value is named by the first bad cell in row order, not column order,
/// by the fit and by the input check alike.
#[test]
fn categorical_nb_by_columns_is_the_closed_form_and_names_the_first_bad_cell() {
    let (n, d, k) = (9_000, 7, 3);
    let m: Vec<usize> = (0..d).map(|j| 2 + j).collect();
    let y: Vec<usize> = (0..n).map(|i| (i * 7 + i / 13) % k).collect();
    let x = Mat::from_fn(n, d, |i, j| {
        ((i * (j + 3) + y[i] * j + i / 7) % m[j]) as f64
    });
    let transposed = x.transpose().to_owned();
    let row_major = transposed.transpose();
    let cnb = CategoricalNbParams {
        alpha: 0.5,
        ..Default::default()
    }
    .check()
    .unwrap();
    let model = cnb.fit(x.as_ref(), &y, k).unwrap();
    let lj = model.log_joint(x.as_ref()).unwrap();
    // The closed form.
    let mut counts = vec![vec![vec![0.0; 8]; d]; k];
    let mut class_n = vec![0.0; k];
    for i in 0..n {
        class_n[y[i]] += 1.0;
        for j in 0..d {
            counts[y[i]][j][x[(i, j)] as usize] += 1.0;
        }
    }
    let mut worst: f64 = 0.0;
    for i in (0..n).step_by(97) {
        for c in 0..k {
            let mut want = (class_n[c] / n as f64).ln();
            for j in 0..d {
                let v = x[(i, j)] as usize;
                want += ((counts[c][j][v] + 0.5) / (class_n[c] + 0.5 * m[j] as f64)).ln();
            }
            worst = worst.max((lj[(i, c)] - want).abs() / want.abs().max(1.0));
        }
    }
    assert!(worst < 1e-12, "relative error {worst:e}");
    let bits = |a: &Mat<f64>| -> Vec<u64> {
        (0..a.ncols())
            .flat_map(|c| (0..a.nrows()).map(move |i| a[(i, c)].to_bits()))
            .collect()
    };
    let from_rows = cnb.fit(row_major, &y, k).unwrap();
    assert_eq!(bits(&from_rows.log_joint(row_major).unwrap()), bits(&lj));
    let one_hot = Mat::from_fn(n, k, |i, c| f64::from(u8::from(y[i] == c)));
    let weighted = cnb.fit_weighted(x.as_ref(), one_hot.as_ref()).unwrap();
    assert_eq!(bits(&weighted.log_joint(x.as_ref()).unwrap()), bits(&lj));
    // Bad cells: a later column at an earlier row comes first.
    let named = |r: Result<()>| match r {
        Err(GenerativeError::InvalidInput { row, col, rule, .. }) => (row, col, rule),
        other => panic!("expected an input error, got {other:?}"),
    };
    let mut bad = x.clone();
    bad[(6_000, 1)] = 0.5;
    bad[(5_000, 6)] = -1.0;
    for rows in [bad.as_ref(), bad.transpose().to_owned().transpose()] {
        let (row, col, rule) = named(cnb.fit(rows, &y, k).map(|_| ()));
        assert_eq!((row, col), (5_000, 6));
        assert!(rule.contains("integers"), "{rule}");
    }
    let mut unseen = x.clone();
    unseen[(8_000, 0)] = 2.0; // feature 0 has 2 categories
    let (row, col, rule) = named(model.check_input(unseen.as_ref()));
    assert_eq!((row, col), (8_000, 0));
    assert!(rule.contains("not seen"), "{rule}");
    unseen[(8_500, 0)] = 1.5;
    unseen[(8_000, 5)] = 3.5;
    let (row, col, rule) = named(model.check_input(unseen.as_ref()));
    assert_eq!((row, col), (8_000, 0));
    assert!(rule.contains("not seen"), "{rule}");
    unseen[(8_000, 0)] = 1.0;
    let (row, col, rule) = named(model.check_input(unseen.as_ref()));
    assert_eq!((row, col), (8_000, 5));
    assert!(rule.contains("integers"), "{rule}");
}

/// Finite values whose squares or sums overflow f64 are named, by statistic, class and feature,
/// for every covariance structure, labeled (masks at K = 2, by rows at K = 6, in one chunk and
/// over many) and weighted, and for multinomial and mixed naive Bayes, rather than reported as
/// a singular covariance or a model with a non-finite parameter.
#[test]
fn overflowing_statistics_name_their_feature_and_class() {
    for (n, k) in [(60, 2usize), (60, 6), (20_000, 2), (20_000, 6)] {
        let (mut x, y) = gaussian_data(n, 3, k, 7);
        // Feature 1 of class 1 spread over ±1e200: its squared deviations overflow.
        for i in (0..n).filter(|&i| y[i] == 1) {
            x[(i, 1)] = if i % 4 == 1 { 1e200 } else { -1e200 };
        }
        let resp = model::one_hot(&y, k).unwrap();
        for structure in structures() {
            let spec = GaussianParams::with_structure(structure).check().unwrap();
            // LDA keeps only the pooled scatter; the others each class's.
            let pooled = structure == CovarianceStructure::Tied;
            let want = GenerativeError::StatisticOverflow {
                statistic: if pooled {
                    "pooled variance"
                } else {
                    "variance"
                },
                class: if pooled { None } else { Some(1) },
                feature: Some(1),
            };
            let at = format!("{structure:?} n={n} K={k}");
            assert_eq!(
                spec.fit(x.as_ref(), &y, k),
                Err(want.clone()),
                "{at} labeled"
            );
            assert_eq!(
                spec.fit_weighted(x.as_ref(), resp.as_ref()),
                Err(want.clone()),
                "{at} weighted"
            );
            let message = want.to_string();
            assert!(
                message.contains("feature 1") && message.contains("overflows"),
                "{message}"
            );
        }
    }
    // Counts near f64::MAX: feature 0 of class 1 alone, then the class total.
    let mut counts = Mat::from_fn(8, 3, |i, j| ((i + j) % 4) as f64);
    counts[(1, 0)] = 1.5e308;
    counts[(3, 0)] = 1.5e308;
    let y = [0, 1, 0, 1, 0, 1, 0, 1];
    let mnb = MultinomialNbParams::default().check().unwrap();
    assert_eq!(
        mnb.fit(counts.as_ref(), &y, 2),
        Err(GenerativeError::StatisticOverflow {
            statistic: "count",
            class: Some(1),
            feature: Some(0),
        })
    );
    counts[(3, 0)] = 1.0;
    counts[(1, 2)] = 1.5e308;
    assert_eq!(
        mnb.fit(counts.as_ref(), &y, 2),
        Err(GenerativeError::StatisticOverflow {
            statistic: "total count",
            class: Some(1),
            feature: None,
        })
    );
    // Mixed naive Bayes: a Gaussian feature spread over ±1e200 in class 0.
    let (mut x, y) = gaussian_data(40, 2, 2, 3);
    for i in (0..40).filter(|&i| y[i] == 0) {
        x[(i, 1)] = if i % 4 == 0 { 1e200 } else { -1e200 };
    }
    assert_eq!(
        MixedNbParams::new(vec![FeatureKind::Gaussian; 2])
            .check()
            .unwrap()
            .fit(x.as_ref(), &y, 2),
        Err(GenerativeError::StatisticOverflow {
            statistic: "variance",
            class: Some(0),
            feature: Some(1),
        })
    );
}

/// A category index at or beyond 2^20 is an error naming its row and column (its count table
/// would be as long as the index: 1e12 aborted the process asking for 16 TB, and 1e300
/// overflowed the number of categories), in categorical and in mixed naive Bayes, and so is a
/// `min_categories` beyond it; 2^20 − 1 itself fits.
#[test]
fn categories_beyond_the_limit_are_named_errors() {
    let limit = naive_bayes::MAX_CATEGORIES as f64;
    let y = [0, 1, 0, 1];
    let cnb = CategoricalNbParams::default().check().unwrap();
    let mixed = MixedNbParams::new(vec![FeatureKind::Gaussian, FeatureKind::Categorical])
        .check()
        .unwrap();
    for big in [limit, 1e12, 1e300] {
        let x = Mat::from_fn(4, 2, |i, j| {
            if (i, j) == (2, 1) {
                big
            } else {
                (i % 2) as f64
            }
        });
        for e in [
            cnb.fit(x.as_ref(), &y, 2).unwrap_err(),
            mixed.fit(x.as_ref(), &y, 2).unwrap_err(),
        ] {
            assert!(
                matches!(e, GenerativeError::InvalidInput { row: 2, col: 1, value, rule }
                    if value == big && rule.contains("2^20")),
                "{big}: {e}"
            );
        }
    }
    let x = Mat::from_fn(
        4,
        2,
        |i, j| if (i, j) == (2, 1) { limit - 1.0 } else { 0.0 },
    );
    let fitted = cnb.fit(x.as_ref(), &y, 2).unwrap();
    assert_eq!(fitted.n_categories(), &[1, naive_bayes::MAX_CATEGORIES]);
    mixed.fit(x.as_ref(), &y, 2).unwrap();
    let too_many = CategoricalNbParams {
        min_categories: Some(vec![2, naive_bayes::MAX_CATEGORIES + 1]),
        ..Default::default()
    };
    assert!(matches!(
        too_many.check(),
        Err(GenerativeError::InvalidParameter {
            name: "min_categories",
            ..
        })
    ));
}

/// With statistics large beside the data (QDA at d = 64, K = 300: 10 MB a run), a fit cuts its
/// chunks into fewer, longer runs, so that the runs' statistics, all kept until they are merged,
/// fit in `PARTIALS_BUDGET`; the fit keeps the bits of its split fit and of 1 thread on 2, and
/// its covariances are the sample ones. With K = 10 the runs are cut as before.
/// The fit of `spec` to labeled rows whose statistics are large: checks that the partials'
/// budget, not the balance between threads, sets its runs, that the split fit has that many
/// runs and the fit's bits, and that 1 and 2 threads give the same model.
fn fit_in_runs_the_budget_sets<P>(spec: &P, x: &Mat<f64>, y: &[usize], k: usize) -> P::Model
where
    P: WeightedFit,
    P::Model: PartialEq + std::fmt::Debug + Send,
{
    use generative::parallel::{CHUNK_ROWS, MIN_RUNS, PARTIALS_BUDGET, run_length};
    use generative::split::fold_split;
    let (n, d) = (x.nrows(), x.ncols());
    let split = spec.split().unwrap();
    let shape = split.runs(d, k);
    let chunks = n.div_ceil(CHUNK_ROWS);
    let run = run_length(chunks, shape, n * d * 8);
    assert!(run > shape.longest.min(chunks.div_ceil(MIN_RUNS)), "{run}");
    assert!(chunks.div_ceil(run) * shape.partial_bytes <= PARTIALS_BUDGET);
    let sets = [WeightedRows::labeled(x.as_ref(), y, k)];
    let runs = fold_split(split, &sets).unwrap();
    assert_eq!(runs.len(), chunks.div_ceil(run));
    let one = on_threads(1, || spec.fit(x.as_ref(), y, k).unwrap());
    let two = on_threads(2, || spec.fit(x.as_ref(), y, k).unwrap());
    assert_eq!(one, two, "1 and 2 threads");
    assert_eq!(split.finish(runs, d, k).unwrap(), one, "split fit");
    one
}

#[test]
fn large_statistics_are_folded_in_fewer_runs_with_the_same_bits() {
    use generative::parallel::{CHUNK_ROWS, run_length};
    let (d, k, n) = (64, 300, 9 * CHUNK_ROWS);
    let (x, y) = gaussian_data(n, d, k, 21);
    let spec = GaussianParams::with_structure(CovarianceStructure::Full)
        .check()
        .unwrap();
    let one = fit_in_runs_the_budget_sets(&spec, &x, &y, k);
    let split = spec.split().unwrap();
    // Class 0's covariance against its sample covariance.
    let rows: Vec<usize> = (0..n).filter(|&i| y[i] == 0).collect();
    let mean: Vec<f64> = (0..d)
        .map(|j| rows.iter().map(|&i| x[(i, j)]).sum::<f64>() / rows.len() as f64)
        .collect();
    let cov = one.covariance(0);
    for a in 0..d {
        for b in 0..d {
            let s: f64 = rows
                .iter()
                .map(|&i| (x[(i, a)] - mean[a]) * (x[(i, b)] - mean[b]))
                .sum::<f64>()
                / rows.len() as f64;
            assert!(
                (cov[(a, b)] - s).abs() < 1e-10 * (1.0 + s.abs()),
                "({a}, {b})"
            );
        }
    }
    // Ten classes at n = 1e6 (d = 64): the runs the balance sets, 8 chunks each.
    let ten = split.runs(d, 10);
    let chunks = 1_000_000usize.div_ceil(CHUNK_ROWS);
    assert_eq!(run_length(chunks, ten, 1_000_000 * d * 8), 8);
}

/// A finite row so far from every class that its Gaussian scores overflow (about 1e154 σ for a
/// quadratic form, 1e308 for LDA's linear one) goes to the class that the same direction gives
/// nearer in, at 1e60, where every score is finite and the posterior is already one-hot: not to
/// the uniform posterior of an all −∞ row. Log-posteriors stay finite.
#[test]
fn rows_beyond_f64s_range_of_scores_rank_as_the_same_direction_nearer_in() {
    let (x, y) = gaussian_data(600, 3, 3, 11);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
    let directions = Mat::from_fn(60, 3, |_, _| -> f64 { StandardNormal.sample(&mut rng) });
    for s in structures() {
        let model = fit_gaussian(s, &x, &y, 3);
        for scale in [1e200, 1e300, 1.7e308] {
            // Clamped to f64's range, so the nearer row is scaled from the far one.
            let far = Mat::from_fn(60, 3, |i, j| {
                (scale * directions[(i, j)]).clamp(-f64::MAX, f64::MAX)
            });
            let near = Mat::from_fn(60, 3, |i, j| far[(i, j)] / scale * 1e60);
            let expected = model.predict_proba(near.as_ref()).unwrap();
            let p = model.predict_proba(far.as_ref()).unwrap();
            let log_p = model.predict_log_proba(far.as_ref()).unwrap();
            let classes = model.predict(far.as_ref()).unwrap();
            for i in 0..60 {
                let winner = (0..3).find(|&k| expected[(i, k)] == 1.0);
                assert!(winner.is_some(), "{s:?}: row {i} is not one-hot at 1e60");
                for k in 0..3 {
                    assert_eq!(
                        p[(i, k)],
                        expected[(i, k)],
                        "{s:?} at {scale:e}: row {i}: {:?}, joints nearer in {:?}",
                        (0..3).map(|j| far[(i, j)]).collect::<Vec<_>>(),
                        model.log_joint(near.subrows(i, 1)).unwrap()
                    );
                    assert!(log_p[(i, k)].is_finite(), "{s:?} at {scale:e}: row {i}");
                }
                assert_eq!(Some(classes[i]), winner, "{s:?} at {scale:e}: row {i}");
            }
        }
    }
}

/// A −∞ score beside moderate ones is a class far below the others (here a class of variance
/// 1e-300, whose quadratic form overflows 1e4 away), not an overflow to rescore: the other two
/// classes keep their soft posterior, from their own log joints.
#[test]
fn a_class_of_tiny_variance_does_not_make_near_rows_far() {
    let n = 90;
    let y: Vec<usize> = (0..n).map(|i| i % 3).collect();
    let x = Mat::from_fn(n, 1, |i, _| {
        let u = ((i * 7919) % 13) as f64 / 6.0 - 1.0;
        match y[i] {
            0 => u * 1e-150,
            1 => 1e4 + u,
            _ => 1e4 + 1.0 + u,
        }
    });
    for s in [CovarianceStructure::Full, CovarianceStructure::Diagonal] {
        let model = GaussianParams {
            structure: s,
            reg: 0.0,
            var_smoothing: 0.0,
            ..Default::default()
        }
        .check()
        .unwrap()
        .fit(x.as_ref(), &y, 3)
        .unwrap();
        let rows = faer::mat![[1e4 + 0.5], [1e4 + 0.3]];
        let p = model.predict_proba(rows.as_ref()).unwrap();
        let joints = model.log_joint(rows.as_ref()).unwrap();
        for i in 0..2 {
            assert_eq!(joints[(i, 0)], f64::NEG_INFINITY, "{s:?}");
            let p1 = 1.0 / (1.0 + (joints[(i, 2)] - joints[(i, 1)]).exp());
            assert_eq!(p[(i, 0)], 0.0, "{s:?}");
            assert!((p[(i, 1)] - p1).abs() < 1e-12, "{s:?}: {p:?} against {p1}");
            assert!(p1 > 0.3 && p1 < 0.7, "{s:?}: {p1}");
        }
    }
}

/// Naive Bayes counts with many classes are folded in runs whose counts fit in the partials'
/// budget, as the Gaussian statistics are, with the same bits on 1 and 2 threads and in the
/// split fit; before, every chunk's K × (d + 1) counts were kept until the end (at K = 20,000,
/// d = 64, 10 MB a chunk: more than the chunk's own 2 MB of data).
#[test]
fn counts_of_many_classes_are_folded_in_fewer_runs_with_the_same_bits() {
    use generative::parallel::{CHUNK_ROWS, run_length};
    let (d, k, n) = (64, 20_000, 9 * CHUNK_ROWS);
    let y: Vec<usize> = (0..n).map(|i| (i * 7) % k).collect();
    let x = Mat::from_fn(n, d, |i, j| ((i * 31 + j * 17) % 5) as f64);
    let spec = MultinomialNbParams::default().check().unwrap();
    let one = fit_in_runs_the_budget_sets(&spec, &x, &y, k);
    let split = spec.split().unwrap();
    // Class 3's smoothed log-probabilities from its counts, summed directly.
    let theta = one.feature_log_prob();
    let counts: Vec<f64> = (0..d)
        .map(|j| (0..n).filter(|&i| y[i] == 3).map(|i| x[(i, j)]).sum())
        .collect();
    let total: f64 = counts.iter().sum::<f64>() + d as f64;
    for j in 0..d {
        let expected = ((counts[j] + 1.0) / total).ln();
        assert!((theta[(3, j)] - expected).abs() < 1e-12, "feature {j}");
    }
    // Ten classes keep runs of one chunk.
    assert_eq!(run_length(n / CHUNK_ROWS, split.runs(d, 10), n * d * 8), 1);
}

/// Categorical NB with a feature of many categories: its per-chunk counts (K × 50,001 values,
/// 4 MB) are folded in runs within the partials' budget, and the model still has the counts'
/// exact probabilities, with the same bits on 1 and 2 threads and from labels (counted one row
/// at a time) as from their one-hot responsibilities (weighted sums over every class).
#[test]
fn categorical_counts_of_many_categories_fit_exactly_in_runs() {
    use generative::parallel::CHUNK_ROWS;
    let (k, n) = (10, 20 * CHUNK_ROWS);
    let y: Vec<usize> = (0..n).map(|i| (i * 3) % k).collect();
    let x = Mat::from_fn(n, 2, |i, j| {
        if j == 0 {
            ((i * 7919) % 50_001) as f64
        } else {
            (i % 3) as f64
        }
    });
    let spec = CategoricalNbParams::default().check().unwrap();
    let one = on_threads(1, || spec.fit(x.as_ref(), &y, k).unwrap());
    let two = on_threads(2, || spec.fit(x.as_ref(), &y, k).unwrap());
    assert_eq!(one, two, "1 and 2 threads");
    assert_eq!(one.n_categories(), &[50_001, 3]);
    // Labels count each row once, as their one-hot responsibilities weight it (exactly).
    let weighted = spec
        .fit_weighted(x.as_ref(), one_hot(&y, k).unwrap().as_ref())
        .unwrap();
    assert_eq!(weighted, one, "labels against one-hot responsibilities");
    // Log joints of a few rows from the counts, taken directly (α = 1).
    let rows = Mat::from_fn(4, 2, |i, j| x[(i * 977, j)]);
    let joints = one.log_joint(rows.as_ref()).unwrap();
    for r in 0..4 {
        for c in 0..k {
            let in_class: Vec<usize> = (0..n).filter(|&i| y[i] == c).collect();
            let mut expected = (in_class.len() as f64 / n as f64).ln();
            for (j, m) in [(0, 50_001.0), (1, 3.0)] {
                let count = in_class
                    .iter()
                    .filter(|&&i| x[(i, j)] == rows[(r, j)])
                    .count();
                expected += ((count as f64 + 1.0) / (in_class.len() as f64 + m)).ln();
            }
            assert!(
                (joints[(r, c)] - expected).abs() < 1e-10,
                "row {r}, class {c}: {} against {expected}",
                joints[(r, c)]
            );
        }
    }
}
